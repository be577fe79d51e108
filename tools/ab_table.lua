-- ab_table.lua: the table of a tools/ab.sh run. Each build's sweeps (one JSON per round, from
-- --json '$OUT/{label}{round}.json' in ab.sh's command) read back; for each cell (op, pass,
-- dtype, M, N, variant) its GB/s under every build, the mean of its rounds, with the change
-- against the first build and the spread of the rounds (max - min over the mean), then the
-- geometric mean of each build's ratio over the cells both ran:
--
--   normlab tools/ab_table.lua [--markdown] LABEL=a1.json,a2.json LABEL=b1.json,b2.json ...
--   normlab tools/ab_table.lua [--markdown] --dir DIR LABEL LABEL ...   (DIR/LABEL1.json, 2, ...)
--
-- A cell that failed or was skipped in any round shows its status instead of a figure.
local report = require("normlab.report")

local function usage(msg)
  io.stderr:write("ab_table.lua: ", msg, "\nusage: normlab tools/ab_table.lua [--markdown] ",
    "LABEL=a1.json[,a2.json...] ...\n       normlab tools/ab_table.lua [--markdown] --dir DIR LABEL ...\n")
  os.exit(2)
end

local function readable(path)
  local f = io.open(path, "r")
  if f then f:close() end
  return f ~= nil
end

-- the command line: builds in order, each {label =, files = {...}}
local markdown, dir, builds = false, nil, {}
local i = 1
while arg[i] do
  local a = arg[i]
  if a == "--markdown" then
    markdown = true
  elseif a == "--dir" then
    dir = arg[i + 1] or usage("--dir wants a folder")
    i = i + 1
  elseif a:find("^%-") then
    usage("unknown option '" .. a .. "'")
  else
    local label, list = a:match("^([^=]+)=(.+)$")
    local files = {}
    if label then
      for f in list:gmatch("[^,]+") do files[#files + 1] = f end
    elseif dir then
      label = a
      for r = 1, math.huge do
        local f = ("%s/%s%d.json"):format(dir, label, r)
        if not readable(f) then break end
        files[#files + 1] = f
      end
      if #files == 0 then usage(("no %s/%s1.json"):format(dir, label)) end
    else
      usage("'" .. a .. "': LABEL=FILE[,FILE...], or a label after --dir DIR")
    end
    for _, b in ipairs(builds) do
      if b.label == label then usage("the label '" .. label .. "' is given twice") end
    end
    builds[#builds + 1] = {label = label, files = files}
  end
  i = i + 1
end
if #builds < 2 then usage("two builds or more to compare") end

-- cells in the order the first build's first sweep ran them; per build and cell, the rounds;
-- the roofline of the first file read
local function key(row)
  return table.concat({row.op, row.pass, row.dtype, row.M, row.N, row.variant}, "\0")
end
local order, cells, meta = {}, {}, nil
for b, build in ipairs(builds) do
  for _, path in ipairs(build.files) do
    if not readable(path) then usage("cannot read " .. path) end
    local ok, res = pcall(report.from_json, path)
    if not ok then usage(("%s: %s"):format(path, res)) end
    meta = meta or res.meta
    for _, row in ipairs(res.rows) do
      local k = key(row)
      local cell = cells[k]
      if not cell then
        cell = {row = row, runs = {}}
        cells[k] = cell
        order[#order + 1] = k
      end
      cell.runs[b] = cell.runs[b] or {}
      local runs = cell.runs[b]
      runs[#runs + 1] = row.status == "ok" and row.gbps or row.status
    end
  end
end

-- a build's figure for a cell: mean and spread of its rounds, or the first status not ok
local function figure(runs)
  if not runs then return nil, "missing" end
  local sum, lo, hi = 0, math.huge, -math.huge
  for _, v in ipairs(runs) do
    if type(v) ~= "number" then return nil, tostring(v) end
    sum, lo, hi = sum + v, math.min(lo, v), math.max(hi, v)
  end
  local mean = sum / #runs
  return mean, nil, mean > 0 and (hi - lo) / mean or 0
end

local head = {"op", "dtype", "M", "N", "variant"}
for b, build in ipairs(builds) do
  head[#head + 1] = b == 1 and build.label or build.label .. " (change)"
end
local roof = meta and meta.roofline_gbps
local body, logs, counts = {}, {}, {}
for _, k in ipairs(order) do
  local cell = cells[k]
  local row = cell.row
  local line = {row.op .. "." .. row.pass, row.dtype, ("%d"):format(row.M), ("%d"):format(row.N), row.variant}
  local base
  for b = 1, #builds do
    local mean, status, spread = figure(cell.runs[b])
    if b == 1 then base = mean end
    local text
    if not mean then
      text = status
    else
      text = (mean >= 100 and "%.0f" or "%.3g"):format(mean)
      if roof and roof > 0 then text = text .. (" (%.0f%%)"):format(100 * mean / roof) end
      if b > 1 and base and base > 0 then
        text = text .. (" %+.1f%%"):format(100 * (mean / base - 1))
        logs[b] = (logs[b] or 0) + math.log(mean / base)
        counts[b] = (counts[b] or 0) + 1
      end
      if spread > 0.01 then text = text .. (" ±%.1f%%"):format(50 * spread) end
    end
    line[#line + 1] = text
  end
  body[#body + 1] = line
end

local function left(c) return c <= 2 or c == 5 end
local out = {}
if markdown then
  report.markdown_table(out, head, body, left)
else
  report.text_table(out, head, body, left)
end
print(table.concat(out, "\n"))
print(("GB/s, mean of each build's rounds%s; change: against %s; ±: half the rounds' spread where over 1%%")
  :format(roof and (", %% of the roofline %.0f GB/s"):format(roof) or "", builds[1].label))
for b = 2, #builds do
  if counts[b] then
    print(("%s / %s: geometric mean %.3fx over %d cells"):format(builds[b].label, builds[1].label,
      math.exp(logs[b] / counts[b]), counts[b]))
  end
end
