-- normlab.merge: the shards of a sweep (nl.bench{shard = {I, N}}, an experiment's --shard I/N)
-- put back together into the one Result the unsharded run gives.
--
--   local r = nl.merge{"s1.json", "s2.json", r3}   -- paths, JSON texts or Results
--   r:print()                                      -- the unsharded run's table, speedups too
--   normlab merge s1.json s2.json [--json f] [--csv f] [--markdown f] [--svg f]
--
-- Every input must carry meta.sweep (normlab.sweep: the sweep's identity, its cell count and
-- hash) and, when it is a shard, meta.shard = {index, count, cells}. merge refuses, naming the
-- input and what differs: inputs of different sweeps (any identity field, the device model,
-- the speedup pairs or other table printed), different settings, shards of different splits (I/N with
-- another N), the same shard twice, a cell in two inputs, a row outside its input's cells
-- or outside the sweep, and cells (or rows) that no input has. The merged rows come in the
-- unsharded run's order (cell by cell, variants in the sweep's order); the merged meta is
-- the first input's without meta.shard, plus meta.merged = {{name, shard = "I/N", device,
-- roofline_gbps, date, binding}, ...} and, when the shards ran on different devices,
-- meta.sources (the header lists each) and each row's device. partial = true or
-- {[shard index] = reason} accepts missing cells: each variant of each becomes a failed row
-- (status "fail", the shard's reason, lost = true) and meta.lost lists them by shard
-- (normlab.devices, for a worker that died).
--
--   local r = nl.join{"h100.json", "h200.json"}    -- whole runs of one sweep, several devices
--   r:print()                    -- a column per variant and device: row@cuda:0, row@cuda:1, ...
--
-- join (an experiment's --devices ... --compare-devices) puts whole runs of one sweep on
-- several devices side by side instead; it shares merge's loading, checks and row indexing
-- (M.join says what it refuses and what it returns). Pure Lua.
local report = require("normlab.report")
local sweep = require("normlab.sweep")
local util = require("normlab.util")

local M = {}

local format, concat = string.format, table.concat
local floor = math.floor

-- who: "merge" or "join", the function the message names.
local function fail_as(who, fmt, ...)
  util.fail(who .. ": " .. format(fmt, ...))
end

local function fail(fmt, ...)
  fail_as("merge", fmt, ...)
end

local function int(x)
  if type(x) == "number" and x == floor(x) then return format("%d", x) end
  return tostring(x)
end

local function cell_name(c)
  return format("%s M=%s N=%s", tostring(c.dtype), int(c.M), int(c.N))
end

local function show(v)
  if type(v) == "table" then
    if #v > 0 or next(v) == nil then
      local parts = {}
      for i, x in ipairs(v) do parts[i] = show(x) end
      return "{" .. concat(parts, ", ") .. "}"
    end
    if v.kind then return tostring(v.kind) .. (v.model and (" (" .. tostring(v.model) .. ")") or "") end
    return sweep.canon(v)
  end
  if type(v) == "number" then return int(v) end
  return tostring(v)
end

-- An input as {name =, result =}: a Result, JSON text, or the path of a JSON file, holding
-- a sweep (meta.sweep, its hash intact). expected: what else an input may be, for messages.
local function load(who, item, i, expected)
  local inp
  if type(item) == "table" and getmetatable(item) == report.Result then
    inp = {name = format("result %d", i), result = item}
  elseif type(item) ~= "string" then
    fail_as(who, "input %d is a %s; expected %s", i, type(item), expected)
  else
    local name, text = item, item
    if not item:find("^%s*{") then
      local f, err = io.open(item, "r")
      if not f then fail_as(who, "cannot read %s", tostring(err)) end
      text = f:read("*a")
      f:close()
    else
      name = format("input %d", i)
    end
    local ok, r = pcall(report.from_json, text)
    if not ok then
      fail_as(who, "%s is not a normlab result (%s)", name,
        (tostring(r):gsub("^[^\n]-:%d+: ", "", 1)))
    end
    inp = {name = name, result = r}
  end
  local m = inp.result.meta
  if type(m.joined) == "table" then
    fail_as(who, "%s joins the runs of several devices (--compare-devices): it is no sweep " ..
      "of its own", inp.name)
  end
  if type(m.sweep) ~= "table" or type(m.sweep.cells) ~= "number" then
    fail_as(who, "%s has no sweep metadata (meta.sweep): it was not written by nl.bench or an " ..
      "experiment of this version, or it merges several sweeps", inp.name)
  end
  if m.sweep.hash ~= sweep.hash(sweep.identity(m.sweep)) then
    fail_as(who, "%s: meta.sweep.hash does not match its sweep (the file was edited?)", inp.name)
  end
  return inp
end

-- The cells of the sweep an input ran, and cell_of[cell_name] = its index.
local function cells_of(who, inp)
  local s = inp.result.meta.sweep
  local cells = sweep.cells(s.dtypes or {}, s.M or {}, s.N or {})
  if #cells ~= s.cells then
    fail_as(who, "%s: the sweep has %d cells (dtypes x M x N) but says %s", inp.name, #cells,
      int(s.cells))
  end
  local cell_of = {}
  for k, c in ipairs(cells) do cell_of[cell_name(c)] = k end
  return cells, cell_of
end

-- An input's rows by slot (cell k, variant j of variants: (k - 1) * #variants + j), each
-- inside the sweep and once; check(k, what), when given, refuses a row of cell k.
local function index_rows(who, inp, cell_of, variants, check)
  local variant_of, slots = {}, {}
  for j, v in ipairs(variants) do variant_of[tostring(v)] = j end
  for _, row in ipairs(inp.result.rows) do
    local what = format("%s at %s", tostring(row.variant), cell_name(row))
    local k = cell_of[cell_name(row)]
    if not k then
      fail_as(who, "%s has a row outside the sweep: %s", inp.name, what)
    end
    if check then check(k, what) end
    local j = variant_of[tostring(row.variant)]
    if not j then
      fail_as(who, "%s has a row of a variant outside the sweep: %s", inp.name, what)
    end
    local key = (k - 1) * #variants + j
    if slots[key] then
      fail_as(who, "%s has %s twice", inp.name, what)
    end
    slots[key] = row
  end
  return slots
end

-- The shard an input holds: {index, count} (1/1 for a whole sweep).
local function shard_of(inp)
  local s = inp.result.meta.shard
  if s == nil then return {index = 1, count = 1} end
  if type(s) ~= "table" or type(s.index) ~= "number" or type(s.count) ~= "number" then
    fail("%s: meta.shard is not {index, count, cells}", inp.name)
  end
  return s
end

-- Refuses an input whose sweep differs from the first's in an identity field other than
-- those of except; what: what they must be ("shards of one sweep").
local function same_identity(who, first, inp, what, except)
  local a, b = first.result.meta.sweep, inp.result.meta.sweep
  for _, k in ipairs(sweep.IDENTITY) do
    if not (except and except[k]) and sweep.canon(a[k]) ~= sweep.canon(b[k]) then
      fail_as(who, "%s and %s are not %s: %s is %s in %s but %s in %s", first.name, inp.name,
        what, k, show(a[k]), first.name, show(b[k]), inp.name)
    end
  end
end

-- Refuses an input whose sweep or settings differ from the first's.
local function same_sweep(first, inp)
  same_identity("merge", first, inp, "shards of one sweep")
  local a, b = first.result.meta, inp.result.meta
  local sa, sb = a.settings or {}, b.settings or {}
  local keys, seen = {}, {}
  for k in pairs(sa) do keys[#keys + 1] = k; seen[k] = true end
  for k in pairs(sb) do if not seen[k] then keys[#keys + 1] = k end end
  table.sort(keys, function(x, y) return tostring(x) < tostring(y) end)
  for _, k in ipairs(keys) do
    if sweep.canon(sa[k]) ~= sweep.canon(sb[k]) then
      fail("%s and %s ran with different settings: %s is %s in %s but %s in %s", first.name,
        inp.name, tostring(k), show(sa[k]), first.name, show(sb[k]), inp.name)
    end
  end
end

-- Refuses inputs that recorded different tables to print: different speedup pairs, or one
-- the crossover view and another not (inputs from nl.bench record none).
local function same_print(inputs)
  local first
  for _, inp in ipairs(inputs) do
    local m = inp.result.meta
    local pr = type(m.print) == "table" and m.print
    if pr then
      first = first or {inp = inp, pr = pr}
      if sweep.canon(first.pr) ~= sweep.canon(pr) then
        local a, b, what = first.pr, pr, "tables"
        if sweep.canon(a.speedup) ~= sweep.canon(b.speedup) then
          a, b, what = a.speedup, b.speedup, "speedup pairs"
        end
        fail("%s and %s print different %s: %s in %s but %s in %s", first.inp.name, inp.name,
          what, sweep.canon(a), first.inp.name, sweep.canon(b), inp.name)
      end
    end
  end
end

-- nl.merge{input, ...}: the merged Result (see the top of this file). opts.speedup (in the
-- same table) replaces the pairs the shards recorded.
function M.merge(spec)
  if type(spec) ~= "table" then
    fail("expected a list of inputs (paths, JSON texts or Results), got %s", type(spec))
  end
  for k in pairs(spec) do
    if not (type(k) == "number" and k >= 1 and k <= #spec and k == floor(k)) and k ~= "speedup"
        and k ~= "partial" then
      fail("unknown option %s (expected the inputs as a list, speedup and partial)", util.show(k))
    end
  end
  if #spec == 0 then fail("no inputs") end
  local inputs = {}
  for i = 1, #spec do
    inputs[i] = load("merge", spec[i], i, "a path, JSON text or a Result")
  end
  local first = inputs[1]
  local s = first.result.meta.sweep
  local cells, cell_of = cells_of("merge", first)

  for _, inp in ipairs(inputs) do same_sweep(first, inp) end
  same_print(inputs)

  -- the split: one N, each shard once, each cell in one input
  local count = shard_of(first).count
  local shard_by_index, owner = {}, {}
  for _, inp in ipairs(inputs) do
    local sh = shard_of(inp)
    local label = format("%s/%s", int(sh.index), int(sh.count))
    inp.label = label
    if sh.count ~= count then
      fail("%s is shard %s but %s is shard %s/%s: shards of different splits", inp.name, label,
        first.name, int(shard_of(first).index), int(count))
    end
    if shard_by_index[sh.index] then
      fail("shard %s is given twice: %s and %s", label, shard_by_index[sh.index].name, inp.name)
    end
    shard_by_index[sh.index] = inp
    local own = sh.cells or sweep.shard_cells(#cells, sh.count > 1 and {sh.index, sh.count} or nil)
    inp.cells = {}
    for _, k in ipairs(own) do
      if not cells[k] then
        fail("%s: cell %s of shard %s is not a cell of the sweep (%d cells)", inp.name, int(k),
          label, #cells)
      end
      if owner[k] then
        fail("%s and %s overlap: both hold cell %s (%s)", owner[k].name, inp.name,
          cell_name(cells[k]), label)
      end
      owner[k] = inp
      inp.cells[k] = true
    end
  end

  -- the rows: each in its input's cells, each (cell, variant) once
  local devices, ndevices = {}, 0
  for _, inp in ipairs(inputs) do
    local d = tostring(inp.result.meta.device)
    if not devices[d] then
      devices[d] = true
      ndevices = ndevices + 1
    end
    inp.slots = index_rows("merge", inp, cell_of, s.variants, function(k, what)
      if not inp.cells[k] then
        fail("%s has a row outside its shard %s: %s (a cell of %s)", inp.name, inp.label, what,
          owner[k] and owner[k].name or "no input")
      end
    end)
  end
  local partial = spec.partial
  if partial ~= nil and partial ~= false and type(partial) ~= "table" and partial ~= true then
    fail("partial must be true, false or {[shard index] = reason}, got %s", type(partial))
  end
  local missing, lost = {}, {}
  for k, c in ipairs(cells) do
    if not owner[k] then
      missing[#missing + 1] = cell_name(c)
      lost[k] = true
    end
  end
  if #missing > 0 and not partial then
    local absent = {}
    for i = 1, count do
      if not shard_by_index[i] then absent[#absent + 1] = format("%d/%d", i, count) end
    end
    fail("missing cells: %d of the sweep's %d are in no input (%s): %s%s", #missing, #cells,
      #absent > 0 and ("shard " .. concat(absent, ", ") .. " not given") or "no shard lists them",
      concat(missing, ", ", 1, math.min(#missing, 8)), #missing > 8 and ", ..." or "")
  end
  -- partial: each variant of a lost cell becomes a failed row, its reason the shard's
  local why = type(partial) == "table" and partial or {}
  local sop, spass = tostring(s.op or ""):match("^(.-)%.([^.]+)$")
  local rows = {}
  local lost_by_shard = {}
  for k, c in ipairs(cells) do
    if lost[k] then
      local index = (k - 1) % count + 1
      local reason = why[index] and tostring(why[index]) or
        format("no input holds this cell (shard %d/%d not given)", index, count)
      local l = lost_by_shard[index]
      if not l then
        l = {shard = format("%d/%d", index, count), reason = reason, cells = {}}
        lost_by_shard[index] = l
      end
      l.cells[#l.cells + 1] = k
      for _, v in ipairs(s.variants) do
        rows[#rows + 1] = {op = sop or s.op, pass = spass, variant = v, M = c.M, N = c.N,
          dtype = c.dtype, status = "fail", reason = reason, lost = true}
      end
    end
    for j, v in ipairs(lost[k] and {} or s.variants) do
      local row = owner[k].slots[(k - 1) * #s.variants + j]
      if not row then
        fail("%s (shard %s) lacks the row of %s at %s", owner[k].name, owner[k].label,
          tostring(v), cell_name(c))
      end
      if ndevices > 1 then
        local t = {}
        for f, x in pairs(row) do t[f] = x end
        t.device = t.device or owner[k].result.meta.device
        row = t
      end
      rows[#rows + 1] = row
    end
  end

  -- the meta: the first input's, whole again
  local meta = {}
  for k, v in pairs(first.result.meta) do meta[k] = v end
  meta.shard = nil
  meta.sources = nil
  -- a shard's crossover summary covers its cells only; the crossover view recomputes it
  meta.crossover = nil
  meta.merged = {}
  local sources = {}
  -- in shard order; a shard that holds no cell (N above the cell count) may be left out
  local given = {}
  for i = 1, count do given[#given + 1] = shard_by_index[i] end
  for _, inp in ipairs(given) do
    local m = inp.result.meta
    meta.merged[#meta.merged + 1] = {name = inp.name, shard = inp.label, device = m.device,
      roofline_gbps = m.roofline_gbps, date = m.date, binding = m.binding}
    sources[#sources + 1] = {device = m.device, device_info = m.device_info,
      roofline_gbps = m.roofline_gbps}
    if meta.print == nil and m.print ~= nil then meta.print = m.print end
  end
  if ndevices > 1 then meta.sources = sources end
  meta.lost = nil
  for i = 1, count do
    if lost_by_shard[i] then
      meta.lost = meta.lost or {}
      meta.lost[#meta.lost + 1] = lost_by_shard[i]
    end
  end
  if spec.speedup ~= nil then meta.print = {speedup = spec.speedup} end
  return report.new(rows, meta)
end

-- The identity fields in which join's runs may differ: each device runs its own variants.
local JOIN_FREE = {device = true, variants = true}

-- The column label of each of join's inputs: labels as given (distinct, without "@"), else
-- its device, with "#2", "#3", ... on the device's repeats ("cpu", "cpu#2").
local function join_labels(labels, inputs)
  local out, seen = {}, {}
  if labels == nil then
    for i, inp in ipairs(inputs) do
      seen[inp.device] = (seen[inp.device] or 0) + 1
      out[i] = seen[inp.device] > 1 and format("%s#%d", inp.device, seen[inp.device]) or inp.device
    end
    return out
  end
  if type(labels) ~= "table" or #labels ~= #inputs then
    fail_as("join", "labels must be a list of %d strings, one per input", #inputs)
  end
  for i, l in ipairs(labels) do
    if type(l) ~= "string" or not l:find("%S") or l:find("@", 1, true) then
      fail_as("join", "label %d must be a non-empty string without '@', got %s", i, util.show(l))
    end
    if seen[l] then fail_as("join", "label '%s' is given twice (inputs %d and %d)", l, seen[l], i) end
    seen[l] = i
    out[i] = l
  end
  return out
end

-- nl.join{a, b, ... [, labels = {...}]}: whole runs of one sweep on several devices (paths of
-- their JSON, JSON texts or Results; {device =, lost = reason} for a run that did not come
-- back) side by side, the Result whose table has a column per variant and device: the rows
-- cell by cell in the sweep's order, then by variant (first appearance), then by input, each
-- row's variant "<variant>@<label>", its device, device_name and roofline_gbps those of its
-- run. A lost run's cells are failed rows (its reason, lost = true) of the variants of a run
-- on the same kind of device, else of the first's. The runs must be of one sweep but for the
-- device and the variants (their settings may differ: a GPU model's defaults), each a whole
-- one (a shard 1/1 at most), each row once and none missing. The meta is the first run's
-- without what belongs to one device, plus meta.sources = {{label, device, device_info,
-- roofline_gbps, settings, date, binding, lost}, ...} (the header lists each), meta.joined =
-- {sweep = the first run's meta.sweep}, meta.lost = {{label, device, reason}, ...} and
-- meta.print, the runs' speedup pairs, each on its own device (persistent@cpu/row@cpu).
function M.join(spec)
  if type(spec) ~= "table" then
    fail_as("join", "expected a list of inputs (paths, JSON texts, Results or {device =, " ..
      "lost =}), got %s", type(spec))
  end
  for k in pairs(spec) do
    if not (type(k) == "number" and k >= 1 and k <= #spec and k == floor(k)) and k ~= "labels" then
      fail_as("join", "unknown option %s (expected the inputs as a list, and labels)", util.show(k))
    end
  end
  if #spec == 0 then fail_as("join", "no inputs") end
  local inputs, first = {}, nil
  for i = 1, #spec do
    local item, inp = spec[i], nil
    if type(item) == "table" and getmetatable(item) == nil and item.lost ~= nil then
      if type(item.device) ~= "string" or type(item.lost) ~= "string" then
        fail_as("join", "input %d: a lost run is {device = \"cuda:1\", lost = \"why\"}", i)
      end
      inp = {name = format("input %d", i), device = item.device, lost = item.lost}
    else
      inp = load("join", item, i, "a path, JSON text, Result or {device =, lost =}")
      local sh = inp.result.meta.shard
      if type(sh) == "table" and sh.count ~= 1 then
        fail_as("join", "%s is shard %s/%s of its sweep: join takes whole runs (merge its " ..
          "shards first)", inp.name, int(sh.index), int(sh.count))
      end
      inp.device = tostring(inp.result.meta.device)
      first = first or inp
    end
    inputs[i] = inp
  end
  if not first then fail_as("join", "every input is lost: nothing to join") end
  local cells, cell_of = cells_of("join", first)
  local labels = join_labels(spec.labels, inputs)
  for i, inp in ipairs(inputs) do
    inp.label = labels[i]
    if not inp.lost then
      same_identity("join", first, inp, "runs of one sweep", JOIN_FREE)
      inp.variants = inp.result.meta.sweep.variants
      inp.slots = index_rows("join", inp, cell_of, inp.variants)
    end
  end
  -- the table's variants, in order of first appearance
  local order, seen = {}, {}
  for _, inp in ipairs(inputs) do
    if inp.lost then
      local kind = inp.device:match("^%a+")
      inp.variants = first.variants
      for _, o in ipairs(inputs) do
        if o.variants and not o.lost and o.result.meta.sweep.device.kind == kind then
          inp.variants = o.variants
          break
        end
      end
    end
    inp.variant_of = {}
    for j, v in ipairs(inp.variants) do
      v = tostring(v)
      inp.variant_of[v] = j
      if not seen[v] then
        seen[v] = true
        order[#order + 1] = v
      end
    end
  end
  local sop, spass = tostring(first.result.meta.sweep.op):match("^(.-)%.([^.]+)$")
  local rows = {}
  for k, c in ipairs(cells) do
    for _, v in ipairs(order) do
      for _, inp in ipairs(inputs) do
        local j = inp.variant_of[v]
        local t
        if j and inp.lost then
          t = {op = sop, pass = spass, M = c.M, N = c.N, dtype = c.dtype, status = "fail",
            reason = inp.lost, lost = true, device = inp.device}
        elseif j then
          local row = inp.slots[(k - 1) * #inp.variants + j]
          if not row then
            fail_as("join", "%s lacks the row of %s at %s", inp.name, v, cell_name(c))
          end
          t = {}
          for f, x in pairs(row) do t[f] = x end
          if t.device == nil then
            local m = inp.result.meta
            t.device, t.roofline_gbps = inp.device, m.roofline_gbps
            t.device_name = type(m.device_info) == "table" and m.device_info.name or nil
          end
        end
        if t then
          t.variant = v .. "@" .. inp.label
          rows[#rows + 1] = t
        end
      end
    end
  end
  local meta = {}
  for k, v in pairs(first.result.meta) do meta[k] = v end
  for _, k in ipairs({"device", "device_info", "roofline_gbps", "settings", "sweep", "shard",
      "merged", "lost", "print", "sources"}) do
    meta[k] = nil
  end
  meta.joined = {sweep = first.result.meta.sweep}
  meta.sources = {}
  local speedup = {}
  for i, inp in ipairs(inputs) do
    local m = inp.lost and {} or inp.result.meta
    meta.sources[i] = {label = inp.label, device = inp.device, device_info = m.device_info,
      roofline_gbps = m.roofline_gbps, settings = m.settings, date = m.date, binding = m.binding,
      lost = inp.lost}
    if inp.lost then
      meta.lost = meta.lost or {}
      meta.lost[#meta.lost + 1] = {label = inp.label, device = inp.device, reason = inp.lost}
    end
    local sp = type(m.print) == "table" and type(m.print.speedup) == "table" and m.print.speedup
    for _, p in ipairs(sp and (type(sp[1]) == "table" and sp or {sp}) or {}) do
      speedup[#speedup + 1] = {p[1] .. "@" .. inp.label, p[2] .. "@" .. inp.label}
    end
  end
  meta.print = #speedup > 0 and {speedup = speedup} or nil
  return report.new(rows, meta)
end

-- `normlab merge a.json b.json ... [--json f] [--csv f] [--markdown f] [--svg f]`: the
-- executable runs this with the arguments after `merge`. Prints the merged table (the one
-- the shards' script printed: meta.print, the crossover view too); a bad
-- command line or a refusal is a usage error (the message alone, status 1).
function M.main(...)
  local cli = require("normlab.cli")
  local argparse = require("argparse")
  local p = argparse("normlab merge", "Put the JSON of a sweep's shards (--shard I/N) back "
    .. "together: prints the unsharded run's table and writes the files asked for.")
    :add_help(false)
  p:flag("-h --help", "Show this help and exit.")
  p:argument("inputs", "The shards' JSON files (--json of each run).")
    :args("*")
  p:option("--json", "Write the merged result as JSON to this file."):argname("<path>")
  p:option("--csv", "Write the rows as CSV to this file."):argname("<path>")
  p:option("--markdown", "Write the table as markdown to this file."):argname("<path>")
  p:option("--svg", "Write the chart as SVG to this file (GB/s bars, or the heat map of "
    .. "crossover shards)."):argname("<path>")
  local argv = {...}
  local ok, args = p:pparse(argv)
  if not ok then
    error(cli.usage_error(format("%s\n\nError: %s", p:get_usage(), args)))
  end
  if args.help then
    print(p:get_help())
    return
  end
  if #args.inputs == 0 then
    error(cli.usage_error(format("%s\n\nError: no input files", p:get_usage())))
  end
  local okm, r = pcall(M.merge, args.inputs)
  if not okm then
    error(cli.usage_error((tostring(r):gsub("^[^\n]-:%d+: ", "", 1))))
  end
  cli.emit(r, args, util.copy(r.meta.print or {}))
  return r
end

return M
