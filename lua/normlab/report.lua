-- normlab.report: the Result of nl.bench, and its renderings.
--
--   local r = report.new(rows, meta)      -- rows and meta as in docs/lua-api.md, "Benchmarks"
--   r:print{speedup = {"persistent", "row"}}  -- wide table on stdout (or opts.file); returns it
--   r:text(opts), r:markdown(opts)         -- the same table as a string / GitHub markdown
--   r:csv(path), r:json(path), r:svg(path) -- path optional; each returns the text it wrote
--   report.merge(r1, r2, ...), r:label(suffix), report.from_json(text)
--
-- The wide table has one line per (M, N, dtype) (and op, once results of several ops are
-- merged), one column per variant holding "GB/s (% of roofline)", "skip: reason" or
-- "FAIL: what", then one column per speedup pair a/b = time(b) / time(a), so > 1 means a is
-- faster. Without opts.speedup, the pairs in meta.print.speedup (which cli.emit records, so
-- that a result read back from JSON, or merged from shards, prints the table its run printed)
-- are used. Pure Lua, 5.1-compatible: it runs under LuaJIT and without the C library.

local sweep = require("normlab.sweep")

local report = {}

local Result = {}
Result.__index = Result

local floor, huge = math.floor, math.huge
local concat, sort = table.concat, table.sort
local format, rep = string.format, string.rep

-- Numbers ------------------------------------------------------------------------------------

local function is_int(x)
  return type(x) == "number" and x == floor(x) and x > -huge and x < huge
end

local function finite(x)
  return type(x) == "number" and x == x and x > -huge and x < huge
end

-- Integers without ".0" (Lua 5.4's tostring of a float 4096.0, which JSON decoding gives).
local function int(x)
  if is_int(x) then return format("%d", x) end
  return tostring(x)
end

-- Three significant digits or more, no exponent for the magnitudes a table shows.
local function num(x)
  if not finite(x) then return tostring(x) end
  local a = math.abs(x)
  if a >= 100 then return format("%.0f", x) end
  if a >= 10 then return format("%.1f", x) end
  if a >= 1 then return format("%.2f", x) end
  return format("%.3g", x)
end

-- Percentages: "67%", "5.8%", "0.07%".
local function percent(x)
  local a = math.abs(x)
  if a >= 10 then return format("%.0f%%", x) end
  if a >= 1 then return format("%.1f%%", x) end
  return format("%.2f%%", x)
end

-- The shortest text that reads back as the same double: CSV keeps full precision.
local function exact(x)
  if is_int(x) and math.abs(x) < 2 ^ 53 then return format("%d", x) end
  local s = format("%.15g", x)
  if tonumber(s) ~= x then s = format("%.17g", x) end
  return s
end

-- Text ---------------------------------------------------------------------------------------

local function clip(s, width)
  if #s <= width then return s end
  return s:sub(1, width - 3) .. "..."
end

-- s padded to width: left-aligned when left is true, else right-aligned.
local function pad(s, width, left)
  local fill = rep(" ", width - #s)
  if left then return s .. fill end
  return fill .. s
end

-- The last component of "rmsnorm.bwd.persistent".
local function strategy(name)
  return (tostring(name):match("([^.]+)$"))
end

-- Rows ---------------------------------------------------------------------------------------

local function opname(row)
  if row.pass then return tostring(row.op) .. "." .. tostring(row.pass) end
  return tostring(row.op)
end

local function row_pct(row, meta)
  if finite(row.pct) then return row.pct end
  if finite(row.gbps) and meta and finite(meta.roofline_gbps) and meta.roofline_gbps > 0 then
    return 100 * row.gbps / meta.roofline_gbps
  end
end

-- The first output whose check failed, as "dw max_abs 3.1e-02 ulp 812", for FAIL cells.
local function failed_check(row)
  if type(row.check) ~= "table" then return nil end
  local names = {}
  for name, c in pairs(row.check) do
    if type(c) == "table" and c.ok == false then names[#names + 1] = name end
  end
  if #names == 0 then return nil end
  sort(names)
  local c = row.check[names[1]]
  local parts = {names[1]}
  if c.max_abs then parts[#parts + 1] = format("max_abs %.2g", c.max_abs) end
  if c.ulp_max then parts[#parts + 1] = format("ulp %s", num(c.ulp_max)) end
  if c.n_bad then parts[#parts + 1] = format("bad %s", int(c.n_bad)) end
  return concat(parts, " ")
end

local function fail_text(row)
  return failed_check(row) or (row.reason and tostring(row.reason)) or "failed"
end

-- The shape of a Result: the line keys in table order and the variants in column order.
-- Lines sort by op (first appearance), M, N, then dtype (first appearance); variants keep
-- their first appearance, which is the order nl.bench was asked for.
local function layout(self)
  local lines, by_key, variants, seen_variant = {}, {}, {}, {}
  local op_rank, dtype_rank, nops = {}, {}, 0
  for _, row in ipairs(self.rows) do
    local op = opname(row)
    if not op_rank[op] then
      nops = nops + 1
      op_rank[op] = nops
    end
    local dt = tostring(row.dtype)
    if not dtype_rank[dt] then
      local n = 0
      for _ in pairs(dtype_rank) do n = n + 1 end
      dtype_rank[dt] = n + 1
    end
    local key = op .. "\0" .. int(row.M) .. "\0" .. int(row.N) .. "\0" .. dt
    local line = by_key[key]
    if not line then
      line = {op = op, M = row.M, N = row.N, dtype = dt, cells = {}}
      by_key[key] = line
      lines[#lines + 1] = line
    end
    local v = tostring(row.variant)
    line.cells[v] = row -- a later row for the same cell wins (merge refuses duplicates)
    if not seen_variant[v] then
      seen_variant[v] = true
      variants[#variants + 1] = v
    end
  end
  local function num_or_text(a, b)
    if type(a) == "number" and type(b) == "number" then return a < b end
    return tostring(a) < tostring(b)
  end
  sort(lines, function(a, b)
    if a.op ~= b.op then return op_rank[a.op] < op_rank[b.op] end
    if a.M ~= b.M then return num_or_text(a.M, b.M) end
    if a.N ~= b.N then return num_or_text(a.N, b.N) end
    return dtype_rank[a.dtype] < dtype_rank[b.dtype]
  end)
  return lines, variants, nops
end

-- speedup = {"a", "b"} or {{"a", "b"}, {"c", "d"}} -> list of pairs, or nil and a message.
local function speedup_pairs(spec, variants)
  if spec == nil then return {} end
  if type(spec) ~= "table" then
    return nil, "speedup: expected {\"a\", \"b\"} or a list of such pairs, got " .. type(spec)
  end
  local pairs_ = type(spec[1]) == "table" and spec or {spec}
  local known = {}
  for _, v in ipairs(variants) do known[v] = true end
  for _, p in ipairs(pairs_) do
    if type(p) ~= "table" or #p ~= 2 then
      return nil, "speedup: each pair is {\"a\", \"b\"} (a/b = time(b) / time(a))"
    end
    for i = 1, 2 do
      if not known[tostring(p[i])] then
        return nil, format("speedup: no variant '%s' in this result (variants: %s)",
          tostring(p[i]), concat(variants, ", "))
      end
    end
  end
  return pairs_
end

local OPTIONS = {speedup = true, file = true, metric = true, width = true, path = true}

-- Options of print, text and markdown; errors name the caller's line (level 3).
local function check_opts(opts)
  if opts == nil then return {} end
  if type(opts) ~= "table" then error("report: options must be a table, got " .. type(opts), 3) end
  for k in pairs(opts) do
    if not OPTIONS[k] then
      error(format("report: unknown option '%s' (expected: file, metric, path, speedup, width)",
        tostring(k)), 3)
    end
  end
  if opts.metric ~= nil and opts.metric ~= "gbps" and opts.metric ~= "us" then
    error("report: metric must be \"gbps\" or \"us\", got " .. tostring(opts.metric), 3)
  end
  if opts.width ~= nil and not (type(opts.width) == "number" and opts.width >= 8) then
    error("report: width must be a number >= 8", 3)
  end
  return opts
end

-- opts with the speedup pairs of meta.print when opts has none.
local function defaults(self, opts)
  local saved = type(self.meta) == "table" and type(self.meta.print) == "table" and
    self.meta.print.speedup
  if opts.speedup ~= nil or not saved then return opts end
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  o.speedup = saved
  return o
end

-- time(b) / time(a) for one line, or nil when either cell has no time.
local function ratio(line, a, b)
  local ra, rb = line.cells[a], line.cells[b]
  if ra and rb and ra.status == "ok" and rb.status == "ok" and finite(ra.ms) and finite(rb.ms)
      and ra.ms > 0 then
    return rb.ms / ra.ms
  end
end

local function cell_text(row, meta, opts)
  if row == nil then return "" end
  local width = opts.width or 30
  if row.status == "skip" then
    return clip("skip: " .. tostring(row.reason or "unsupported"), width)
  elseif row.status == "fail" then
    return clip("FAIL: " .. fail_text(row), width)
  elseif row.status ~= "ok" then
    return clip(tostring(row.status) .. ": " .. tostring(row.reason or ""), width)
  end
  local s
  if opts.metric == "us" then
    s = finite(row.ms) and (num(row.ms * 1000) .. " us") or "?"
  else
    s = finite(row.gbps) and num(row.gbps) or "?"
    local pct = row_pct(row, meta)
    if pct then s = s .. " (" .. percent(pct) .. ")" end
  end
  -- Say what an "auto" (or any alias) resolved to: that is what a dispatch sweep is about.
  -- A label from r:label ("row@old") is not part of the name.
  local asked = tostring(row.variant):match("^[^@]*")
  if row.resolved and row.resolved ~= asked and strategy(row.resolved) ~= asked then
    s = s .. " [" .. strategy(row.resolved) .. "]"
  end
  return s
end

-- Header lines: what (the op) ran where, how it was timed, against which roofline. A source
-- with a label (nl.join: a column group per device) shows it for the device, and its roofline.
local function header(self, what)
  local m = self.meta or {}
  local sources = m.sources or {m}
  local devices, roofs, seen = {}, {}, {}
  for _, s in ipairs(sources) do
    local d = s.label and tostring(s.label) or s.device and tostring(s.device) or "?"
    if s.device_info and s.device_info.name then d = d .. " (" .. s.device_info.name .. ")" end
    if s.lost then d = d .. " (lost)" end
    if not seen[d] then
      seen[d] = true
      devices[#devices + 1] = d
      if finite(s.roofline_gbps) then
        roofs[#roofs + 1] = (s.label and tostring(s.label) .. " " or "") .. num(s.roofline_gbps)
          .. " GB/s"
      end
    end
  end
  local mode = m.mode and tostring(m.mode) or "?"
  if m.outputs == "shared" then mode = mode .. " (outputs shared across sets)" end
  if m.graph then mode = mode .. " + CUDA graph" end
  local date = m.date or os.date("%Y-%m-%d %H:%M")
  -- an fp8 y (and yt) for every line: said once here (fp8_sweep's mixed tables say it per column)
  local sw = m.sweep or {}
  if sw.out_dtype then
    what = format("%s, y in %s (%s scaling%s)", what, tostring(sw.out_dtype),
      tostring(sw.scaling), sw.transpose and ", yt " .. tostring(sw.transpose) or "")
  end
  local out = {format("%s on %s", what, concat(devices, ", "))}
  out[2] = format("roofline %s (device-to-device copy), mode %s, %s%s",
    #roofs > 0 and concat(roofs, ", ") or "unknown", mode, tostring(date),
    m.version and format(", normlab %s", tostring(m.version)) .. (m.binding and
      format(" (%s)", tostring(m.binding)) or "") or "")
  return out
end

-- What a table of these lines shows: their op, or "normlab bench" for several.
local function title(nops, lines)
  return nops == 1 and lines[1] and lines[1].op or "normlab bench"
end

-- Below the table: the cells whose buffer sets stopped short of the rotate footprint
-- (rotate_factor x L2; bench.max_sets caps the sets), so that part of their data stays in
-- cache from call to call and their GB/s are not all DRAM's. nil when there are none, or when
-- the rows predate target_bytes.
local function footprint_note(lines, variants)
  local short = {}
  for _, line in ipairs(lines) do
    local worst
    for _, v in ipairs(variants) do
      local row = line.cells[v]
      if row and finite(row.footprint_bytes) and finite(row.target_bytes)
          and row.footprint_bytes < row.target_bytes
          and (not worst or row.footprint_bytes / row.target_bytes
            < worst.footprint_bytes / worst.target_bytes) then
        worst = row
      end
    end
    if worst then
      short[#short + 1] = format("%sx%s %s (%s of %s MB)", int(line.M), int(line.N), line.dtype,
        num(worst.footprint_bytes / 1e6), num(worst.target_bytes / 1e6))
    end
  end
  local n = #short
  if n == 0 then return nil end
  return format("footprint short of bench.rotate_factor x L2 at %d cell%s, the buffer sets capped "
    .. "by bench.max_sets (part of the data stays in cache across calls): %s%s", n,
    n == 1 and "" or "s", concat(short, ", ", 1, math.min(n, 6)), n > 6 and ", ..." or "")
end

-- The table as strings: the header cells, the body lines, the number of key columns, the
-- notes and speedup summaries for below the table. Errors in opts.speedup raise at level 3.
local function grid(self, opts)
  local lines, variants, nops = layout(self)
  -- no rows (an empty shard): no variant to check the pairs against, and no column to show
  local sp, err = speedup_pairs(#lines > 0 and opts.speedup or nil, variants)
  if not sp then error("report: " .. err, 4) end
  local head = {}
  if nops > 1 then head[#head + 1] = "op" end
  head[#head + 1] = "M"
  head[#head + 1] = "N"
  head[#head + 1] = "dtype"
  local nkeys = #head
  for _, v in ipairs(variants) do head[#head + 1] = v end
  for _, p in ipairs(sp) do head[#head + 1] = p[1] .. "/" .. p[2] end
  local body, notes, noted = {}, {}, {}
  for _, line in ipairs(lines) do
    local cells = {}
    if nops > 1 then cells[#cells + 1] = line.op end
    cells[#cells + 1] = int(line.M)
    cells[#cells + 1] = int(line.N)
    cells[#cells + 1] = line.dtype
    for _, v in ipairs(variants) do
      local row = line.cells[v]
      cells[#cells + 1] = cell_text(row, self.meta, opts)
      -- Below the table: every failure in full (the cells of a lost run once, by its reason),
      -- and each skip reason the cells had to clip.
      local note
      if row and row.status == "fail" and row.lost then
        note = "FAIL, lost: " .. fail_text(row)
      elseif row and row.status == "fail" then
        note = format("FAIL %s at %sx%s %s: %s", v, int(line.M), int(line.N), line.dtype,
          fail_text(row))
        if row.reason and failed_check(row) then note = note .. " (" .. tostring(row.reason) .. ")" end
      elseif row and row.status == "skip" then
        local reason = tostring(row.reason or "unsupported")
        if #("skip: " .. reason) > (opts.width or 30) then note = "skip " .. v .. ": " .. reason end
      end
      if note and not noted[note] then
        noted[note] = true
        notes[#notes + 1] = note
      end
    end
    for _, p in ipairs(sp) do
      local x = ratio(line, p[1], p[2])
      cells[#cells + 1] = x and format("%.2fx", x) or "-"
    end
    body[#body + 1] = cells
  end
  local short = footprint_note(lines, variants)
  if short then notes[#notes + 1] = short end
  -- Geometric mean of each speedup over the lines where both variants ran.
  local summary = {}
  for _, p in ipairs(sp) do
    local logsum, n, lo, hi = 0, 0, huge, -huge
    for _, line in ipairs(lines) do
      local x = ratio(line, p[1], p[2])
      if x then
        logsum, n = logsum + math.log(x), n + 1
        if x < lo then lo = x end
        if x > hi then hi = x end
      end
    end
    if n > 0 then
      summary[#summary + 1] = format("%s/%s: geometric mean %.2fx over %d shapes (min %.2fx, max %.2fx)",
        p[1], p[2], math.exp(logsum / n), n, lo, hi)
    end
  end
  return head, body, nkeys, notes, summary, nops, lines
end

-- What the cells mean, under the header.
local function legend(opts)
  local s = opts.metric == "us" and "cells: median time per call" or
    "cells: GB/s (% of roofline) by the byte model (inputs read once, outputs written once)"
  if opts.speedup then s = s .. "; a/b = time(b) / time(a), > 1: a is faster" end
  return s
end

-- Result methods -----------------------------------------------------------------------------

-- Aligned text columns: the header cells, a rule, then the body's lines, appended to out;
-- column i is left-aligned when left(i) is true, else right-aligned.
local function text_table(out, head, body, left)
  local widths = {}
  for i, h in ipairs(head) do widths[i] = #h end
  for _, cells in ipairs(body) do
    for i, c in ipairs(cells) do
      if #c > widths[i] then widths[i] = #c end
    end
  end
  local function render(cells)
    local parts = {}
    for i, c in ipairs(cells) do parts[i] = pad(c, widths[i], left(i)) end
    return (concat(parts, "  "):gsub("%s+$", ""))
  end
  out[#out + 1] = render(head)
  local rule = {}
  for i = 1, #head do rule[i] = rep("-", widths[i]) end
  out[#out + 1] = concat(rule, "  ")
  for _, cells in ipairs(body) do out[#out + 1] = render(cells) end
  return out
end

local function render_text(self, opts)
  local head, body, nkeys, notes, summary, nops, lines = grid(self, opts)
  local out = header(self, title(nops, lines))
  out[#out + 1] = legend(opts)
  out[#out + 1] = ""
  if #body == 0 then
    out[#out + 1] = "(no rows)"
    return concat(out, "\n") .. "\n"
  end
  -- op and dtype read left-aligned; numbers and cells right-aligned.
  text_table(out, head, body, function(i) return i == nkeys or (nops > 1 and i == 1) end)
  if #summary > 0 then
    out[#out + 1] = ""
    for _, s in ipairs(summary) do out[#out + 1] = s end
  end
  if #notes > 0 then
    out[#out + 1] = ""
    for _, s in ipairs(notes) do out[#out + 1] = s end
  end
  return concat(out, "\n") .. "\n"
end

-- The wide table as plain text with aligned columns.
function Result:text(opts)
  return render_text(self, defaults(self, check_opts(opts)))
end

function Result:print(opts)
  opts = defaults(self, check_opts(opts))
  local text = render_text(self, opts)
  local file = opts.file or io.stdout
  file:write(text)
  if file.flush then file:flush() end
  return text
end

-- The wide table as GitHub markdown, header lines as a paragraph above it; opts.path: also
-- write it there.
local function esc(s) return (s:gsub("|", "\\|")) end

-- A GitHub markdown table (header, alignment row, body) appended to out; column i is
-- left-aligned when left(i) is true.
local function markdown_table(out, head, body, left)
  local function row(cells)
    local parts = {}
    for i, c in ipairs(cells) do parts[i] = esc(c) end
    return "| " .. concat(parts, " | ") .. " |"
  end
  out[#out + 1] = row(head)
  local align = {}
  for i = 1, #head do align[i] = left(i) and ":---" or "---:" end
  out[#out + 1] = "| " .. concat(align, " | ") .. " |"
  for _, cells in ipairs(body) do out[#out + 1] = row(cells) end
  return out
end

-- The header lines of a markdown document: the first bold, each ending in a line break.
local function markdown_header(lines)
  local out = {}
  for i, l in ipairs(lines) do out[i] = (i == 1 and "**" .. esc(l) .. "**" or esc(l)) .. "  " end
  return out
end

local function render_markdown(self, opts)
  local head, body, nkeys, notes, summary, nops, lines = grid(self, opts)
  local out = markdown_header(header(self, title(nops, lines)))
  out[#out + 1] = esc(legend(opts))
  out[#out + 1] = ""
  markdown_table(out, head, body, function(i) return i == nkeys or (nops > 1 and i == 1) end)
  if #summary + #notes > 0 then out[#out + 1] = "" end
  for _, s in ipairs(summary) do out[#out + 1] = "- " .. esc(s) end
  for _, s in ipairs(notes) do out[#out + 1] = "- " .. esc(s) end
  local text = concat(out, "\n") .. "\n"
  if opts.path then report.write_file(opts.path, text) end
  return text
end

function Result:markdown(opts)
  return render_markdown(self, defaults(self, check_opts(opts)))
end

function report.write_file(path, text)
  local f, err = io.open(path, "w")
  if not f then error("report: cannot write " .. tostring(err), 3) end
  f:write(text)
  f:close()
end

-- CSV: one line per row, every scalar field, plus check_<output>_<field> for each check.
-- A row without device takes meta's; without device_name and roofline_gbps (of the device
-- that ran it: pct is of that roofline), meta's when the result ran on one device.
local CSV_FIELDS = {"op", "pass", "variant", "resolved", "device", "device_name",
  "roofline_gbps", "M", "N", "dtype", "status", "reason", "ms", "min_ms", "max_ms", "gbps",
  "extra_gbps", "pct", "bytes", "extra_bytes", "deterministic", "reduce", "grid", "block",
  "cluster", "waves", "sets", "footprint_bytes", "target_bytes"}
local CHECK_FIELDS = {"ok", "n_bad", "max_abs", "max_rel", "ulp_p50", "ulp_p99", "ulp_max"}

local function csv_field(v)
  if v == nil then return "" end
  local s
  if type(v) == "number" then
    s = exact(v)
  else
    s = tostring(v)
  end
  if s:find('[,"\r\n]') then s = '"' .. s:gsub('"', '""') .. '"' end
  return s
end

function Result:csv(path)
  local outputs, seen = {}, {}
  for _, row in ipairs(self.rows) do
    if type(row.check) == "table" then
      for name in pairs(row.check) do
        if not seen[name] then
          seen[name] = true
          outputs[#outputs + 1] = name
        end
      end
    end
  end
  sort(outputs)
  local cols = {}
  for _, f in ipairs(CSV_FIELDS) do cols[#cols + 1] = f end
  for _, o in ipairs(outputs) do
    for _, f in ipairs(CHECK_FIELDS) do cols[#cols + 1] = "check_" .. o .. "_" .. f end
  end
  local m = self.meta or {}
  local one = {device = m.device}
  if m.sources == nil then
    one.device_name = type(m.device_info) == "table" and m.device_info.name or nil
    one.roofline_gbps = m.roofline_gbps
  end
  local lines = {concat(cols, ",")}
  for _, row in ipairs(self.rows) do
    local cells = {}
    for i, f in ipairs(CSV_FIELDS) do
      local v = row[f]
      if v == nil then v = one[f] end
      cells[i] = csv_field(v)
    end
    for _, o in ipairs(outputs) do
      local c = type(row.check) == "table" and row.check[o] or {}
      for _, f in ipairs(CHECK_FIELDS) do cells[#cells + 1] = csv_field(c[f]) end
    end
    lines[#lines + 1] = concat(cells, ",")
  end
  local text = concat(lines, "\n") .. "\n"
  if path then report.write_file(path, text) end
  return text
end

-- JSON ---------------------------------------------------------------------------------------

-- lua-cjson, else dkjson; a private cjson instance so its settings stay ours.
local function json_codec()
  local ok, cjson = pcall(require, "cjson")
  if ok then
    local c = cjson.new and cjson.new() or cjson
    return c.encode, c.decode
  end
  local ok2, dkjson = pcall(require, "dkjson")
  if ok2 then
    return dkjson.encode, function(s)
      local v, _, err = dkjson.decode(s)
      if err then error(err, 0) end
      return v
    end
  end
  -- Both load errors: "not found" and "found but failed to load" need different fixes.
  error("report: JSON needs lua-cjson or dkjson\n  cjson: " .. tostring(cjson) ..
    "\n  dkjson: " .. tostring(dkjson), 3)
end

-- also the tuning cache's (normlab.tune)
report.json_codec = json_codec

-- JSON has no NaN or infinity: they travel as the strings "nan", "inf" and "-inf", which
-- report.from_json turns back into numbers.
local function sanitize(v, depth)
  if type(v) == "number" then
    if v ~= v then return "nan" end
    if v == huge then return "inf" end
    if v == -huge then return "-inf" end
    return v
  elseif type(v) == "table" then
    if depth > 16 then return nil end
    local t = {}
    for k, x in pairs(v) do t[k] = sanitize(x, depth + 1) end
    return t
  elseif type(v) == "string" or type(v) == "boolean" then
    return v
  end
  return v ~= nil and tostring(v) or nil
end

-- {"meta": {...}, "rows": [ ... ]} with one row per line, so files diff and grep well.
function Result:json(path)
  local encode = json_codec()
  local rows = {}
  for i, row in ipairs(self.rows) do rows[i] = "  " .. encode(sanitize(row, 0)) end
  local text = '{"meta": ' .. encode(sanitize(self.meta or {}, 0)) .. ',\n"rows": [\n' ..
    concat(rows, ",\n") .. (#rows > 0 and "\n" or "") .. "]}\n"
  if path then report.write_file(path, text) end
  return text
end

local function restore(v)
  if v == "nan" then return 0 / 0 end
  if v == "inf" then return huge end
  if v == "-inf" then return -huge end
  if type(v) == "table" then
    for k, x in pairs(v) do v[k] = restore(x) end
  end
  return v
end

-- A Result from the text of r:json() (or a file path when it names a readable file).
function report.from_json(text)
  local f = not text:find("^%s*{") and io.open(text, "r")
  if f then
    text = f:read("*a")
    f:close()
  end
  local _, decode = json_codec()
  local doc = decode(text)
  if type(doc) ~= "table" or type(doc.rows) ~= "table" then
    error("report.from_json: expected {\"meta\": ..., \"rows\": [...]}", 2)
  end
  return report.new(restore(doc.rows), restore(doc.meta or {}))
end

-- SVG ----------------------------------------------------------------------------------------

local PALETTE = {"#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442",
  "#000000"}

local function xml(s)
  return (tostring(s):gsub("&", "&amp;"):gsub("<", "&lt;"):gsub(">", "&gt;"):gsub('"', "&quot;"))
end

-- A round axis maximum and tick step for values up to top.
local function axis(top)
  if not finite(top) or top <= 0 then top = 1 end
  local mag = 10 ^ floor(math.log(top) / math.log(10))
  local step = mag
  for _, f in ipairs({0.2, 0.25, 0.5, 1, 2}) do
    if top / (mag * f) <= 8 then
      step = mag * f
      break
    end
  end
  return math.ceil(top / step) * step, step
end

-- Grouped bars: one group per table line, one bar per variant, GB/s on the y axis, the
-- roofline as a dashed line; skipped and failed cells get a grey "s" / red "x" at the base.
function Result:svg(path)
  local lines, variants = layout(self)
  local meta = self.meta or {}
  local roof = finite(meta.roofline_gbps) and meta.roofline_gbps or nil
  local top = roof or 0
  for _, line in ipairs(lines) do
    for _, row in pairs(line.cells) do
      if row.status == "ok" and finite(row.gbps) and row.gbps > top then top = row.gbps end
    end
  end
  local ymax, step = axis(top * 1.05)
  local nv = math.max(#variants, 1)
  local bar = nv > 4 and 8 or 12
  local groupw = nv * bar + 14
  local left, right, topm, bottom = 64, 16, 40, 96
  local h = header(self, title(1, lines))
  -- Wide enough for the bars and for the header text (about 6.5 px a character at 11 px);
  -- the groups spread over whatever width that gives.
  local plotw = floor(math.max(#lines * groupw, 360, #h[1] * 8 - left, #h[2] * 6.5 - left))
  groupw = plotw / math.max(#lines, 1)
  bar = math.max(bar, math.min(24, floor((groupw - 14) / nv)))
  local ploth = 300
  local width, height = left + plotw + right, topm + ploth + bottom + 18 * math.ceil(nv / 4)
  local function y(v) return topm + ploth - ploth * v / ymax end
  local out = {}
  local function add(...) out[#out + 1] = format(...) end
  add('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" ' ..
    'font-family="sans-serif" font-size="11">', width, height, width, height)
  add('<rect width="100%%" height="100%%" fill="white"/>')
  add('<text x="%d" y="16" font-size="13" font-weight="bold">%s</text>', left, xml(h[1]))
  add('<text x="%d" y="31" fill="#555">%s</text>', left, xml(h[2]))
  local v = 0
  while v <= ymax + step / 2 do
    add('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>', left, left + plotw, y(v), y(v))
    add('<text x="%d" y="%.1f" text-anchor="end" fill="#555">%s</text>', left - 6, y(v) + 4, num(v))
    v = v + step
  end
  add('<text transform="translate(14 %d) rotate(-90)" text-anchor="middle">GB/s</text>',
    topm + ploth / 2)
  for i, line in ipairs(lines) do
    local x0 = left + (i - 1) * groupw + (groupw - nv * bar) / 2
    for j, name in ipairs(variants) do
      local row = line.cells[name]
      local x = x0 + (j - 1) * bar
      if row and row.status == "ok" and finite(row.gbps) then
        add('<rect x="%.1f" y="%.1f" width="%d" height="%.1f" fill="%s"><title>%s %s: %s GB/s</title></rect>',
          x, y(row.gbps), bar - 1, topm + ploth - y(row.gbps), PALETTE[(j - 1) % #PALETTE + 1],
          xml(name), xml(int(line.M) .. "x" .. int(line.N) .. " " .. line.dtype), num(row.gbps))
      elseif row then
        local fail = row.status == "fail"
        add('<text x="%.1f" y="%d" text-anchor="middle" fill="%s"><title>%s</title>%s</text>',
          x + bar / 2, topm + ploth - 3, fail and "#c00" or "#999",
          xml(fail and ("FAIL: " .. fail_text(row)) or ("skip: " .. tostring(row.reason))),
          fail and "x" or "s")
      end
    end
    local cx = x0 + nv * bar / 2
    add('<text transform="translate(%.1f %d) rotate(-40)" text-anchor="end">%s</text>',
      cx, topm + ploth + 14, xml(int(line.M) .. "x" .. int(line.N) .. " " .. line.dtype))
  end
  add('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#333"/>', left, left + plotw,
    topm + ploth, topm + ploth)
  if roof then
    add('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#c00" stroke-dasharray="6 4"/>',
      left, left + plotw, y(roof), y(roof))
    add('<text x="%d" y="%.1f" text-anchor="end" fill="#c00">roofline %s GB/s</text>',
      left + plotw, y(roof) - 4, num(roof))
  end
  for j, name in ipairs(variants) do
    local col, rowi = (j - 1) % 4, floor((j - 1) / 4)
    local lx, ly = left + col * 150, topm + ploth + bottom - 8 + rowi * 18
    add('<rect x="%d" y="%d" width="10" height="10" fill="%s"/>', lx, ly - 9,
      PALETTE[(j - 1) % #PALETTE + 1])
    add('<text x="%d" y="%d">%s</text>', lx + 14, ly, xml(name))
  end
  add("</svg>")
  local text = concat(out, "\n") .. "\n"
  if path then report.write_file(path, text) end
  return text
end

-- Combining ----------------------------------------------------------------------------------

local function copy_row(row, device)
  local t = {}
  for k, v in pairs(row) do t[k] = v end
  if t.device == nil then t.device = device end
  return t
end

-- A copy whose variants read "<variant>@<suffix>" (or fn(row) -> name), so that two runs of
-- the same variants (two settings, two devices) can be merged and compared side by side.
-- meta.sweep's variants are relabelled alike (fn gets {op =, pass =, variant =} for each;
-- a fn that fails on those drops meta.sweep: the result no longer says which sweep it is).
function Result:label(suffix)
  local function name(row)
    if type(suffix) == "function" then return suffix(row) end
    return tostring(row.variant) .. "@" .. tostring(suffix)
  end
  local rows = {}
  for i, row in ipairs(self.rows) do
    rows[i] = copy_row(row)
    rows[i].variant = name(row)
  end
  local meta = self.meta
  if type(meta) == "table" and type(meta.sweep) == "table" then
    meta = {}
    for k, v in pairs(self.meta) do meta[k] = v end
    local s = meta.sweep
    local op, pass = tostring(s.op):match("^(.-)%.(.*)$")
    local ok, labels = pcall(function()
      local l = {}
      for i, v in ipairs(s.variants or {}) do
        l[i] = tostring(name({op = op, pass = pass, variant = v}))
      end
      return l
    end)
    if ok then
      s = sweep.rehash(s)
      s.variants = labels
      meta.sweep = sweep.rehash(s)
    else
      meta.sweep = nil
    end
  end
  return report.new(rows, meta)
end

-- meta.sweep and meta.shard of report.merge's result: runs of one sweep over different
-- variants (dispatch_sweep's labelled combinations, all on the same shard) make one sweep
-- whose variants are all of theirs, in order; anything else is no longer one sweep (nil).
local function merged_sweep(results)
  local first = results[1].meta or {}
  if type(first.sweep) ~= "table" then return nil, nil end
  local function rest(m)
    local s = {}
    for k, v in pairs(m.sweep) do s[k] = v end
    s.variants, s.hash = nil, nil
    return sweep.canon(s) .. sweep.canon(m.shard)
  end
  local want = rest(first)
  local variants, seen = {}, {}
  for _, r in ipairs(results) do
    local m = r.meta or {}
    if type(m.sweep) ~= "table" or rest(m) ~= want then return nil, nil end
    for _, v in ipairs(m.sweep.variants or {}) do
      if not seen[v] then
        seen[v] = true
        variants[#variants + 1] = v
      end
    end
  end
  local s = sweep.rehash(first.sweep)
  s.variants = variants
  return sweep.rehash(s), first.shard
end

-- One Result with the rows of all; meta is the first's, with meta.sources listing every
-- meta (the header shows each device and roofline). Rows take their source's device. The
-- same (op, pass, variant, M, N, dtype) twice is an error: label one side first.
function report.merge(...)
  local results = {...}
  if #results == 0 then error("report.merge: no results", 2) end
  local rows, sources, seen = {}, {}, {}
  for i, r in ipairs(results) do
    if getmetatable(r) ~= Result then
      error(format("report.merge: argument %d is not a Result", i), 2)
    end
    local meta = r.meta or {}
    for _, s in ipairs(meta.sources or {meta}) do sources[#sources + 1] = s end
    for _, row in ipairs(r.rows) do
      local key = concat({opname(row), tostring(row.variant), int(row.M), int(row.N),
        tostring(row.dtype)}, " ")
      if seen[key] then
        error(format("report.merge: %s appears in results %d and %d; use r:label(suffix) " ..
          "on one of them", key, seen[key], i), 2)
      end
      seen[key] = i
      rows[#rows + 1] = copy_row(row, meta.device)
    end
  end
  local meta = {}
  for k, v in pairs(results[1].meta or {}) do meta[k] = v end
  meta.sources = sources
  meta.sweep, meta.shard = merged_sweep(results)
  return report.new(rows, meta)
end

-- Queries ------------------------------------------------------------------------------------

-- The rows matching every field of query, e.g. r:select{variant = "row", dtype = "bf16"}.
function Result:select(query)
  local out = {}
  for _, row in ipairs(self.rows) do
    local match = true
    for k, v in pairs(query or {}) do
      if row[k] ~= v then
        match = false
        break
      end
    end
    if match then out[#out + 1] = row end
  end
  return out
end

Result.__tostring = function(self) return self:text() end

-- rows: list of row tables; meta: table. Both are kept, not copied.
function report.new(rows, meta)
  if type(rows) ~= "table" then error("report.new: rows must be a list of tables", 2) end
  for i, row in ipairs(rows) do
    if type(row) ~= "table" then error(format("report.new: row %d is a %s", i, type(row)), 2) end
  end
  return setmetatable({rows = rows, meta = meta or {}}, Result)
end

report.Result = Result

-- The pieces other views of a Result build on (normlab.crossover): the lines of its table
-- (layout: lines {op, M, N, dtype, cells = {variant -> row}}, the variants in column order,
-- the number of ops), the header lines, aligned text and markdown tables, the text of a
-- failed row, number formats, XML escapes and the chart palette.
report.layout = layout
report.header = header
report.text_table = text_table
report.markdown_table = markdown_table
report.markdown_header = markdown_header
report.fail_text = fail_text
report.footprint_note = footprint_note
report.fmt = {int = int, num = num, percent = percent, csv = csv_field, xml = xml,
  markdown = esc, strategy = strategy, finite = finite}
report.PALETTE = PALETTE

return report
