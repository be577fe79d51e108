-- normlab.report from synthetic rows: the wide table, skip and FAIL cells, speedups, CSV,
-- JSON round trips, markdown, SVG and merging. Pure Lua: runs without the C library, under
-- Lua 5.4 and LuaJIT alike.

local report = require("normlab.report")

local ROOF = 3000

local function ok_row(variant, M, N, dtype, ms, gbps, extra)
  local r = {op = "rmsnorm", pass = "bwd", variant = variant, resolved = "rmsnorm.bwd." .. variant,
    M = M, N = N, dtype = dtype, status = "ok", ms = ms, min_ms = ms * 0.9, max_ms = ms * 1.1,
    gbps = gbps, extra_gbps = 0, pct = 100 * gbps / ROOF, bytes = 1000000, extra_bytes = 0,
    deterministic = true, reduce = "partials", grid = 132, block = 256,
    check = {dx = {ok = true, n_bad = 0, max_abs = 1e-3, ulp_max = 1},
      dw = {ok = true, n_bad = 0, max_abs = 2e-4, ulp_max = 3}}}
  for k, v in pairs(extra or {}) do r[k] = v end
  return r
end

local META = {device = "cuda:0", device_info = {name = "Test GPU"}, roofline_gbps = ROOF,
  mode = "rotate", graph = false, date = "2025-01-02 03:04", version = "0.1.0", binding = "c",
  settings = {["rmsnorm.bwd.blockrow_max_n"] = 1024}}

-- Two shapes x two dtypes; persistent is skipped at N = 65536, auto fails once.
local function sample()
  local rows = {}
  for _, N in ipairs({1024, 65536}) do
    for _, dt in ipairs({"bf16", "fp32"}) do
      rows[#rows + 1] = ok_row("row", 4096, N, dt, 1.0, 1000)
      if N == 65536 then
        rows[#rows + 1] = {op = "rmsnorm", pass = "bwd", variant = "persistent", M = 4096, N = N,
          dtype = dt, status = "skip", reason = "N > 16384, beyond the register budget"}
      else
        rows[#rows + 1] = ok_row("persistent", 4096, N, dt, 0.5, 2000)
      end
      if N == 1024 and dt == "fp32" then
        rows[#rows + 1] = {op = "rmsnorm", pass = "bwd", variant = "auto",
          resolved = "rmsnorm.bwd.blockrow", M = 4096, N = N, dtype = dt, status = "fail",
          reason = "dw out of tolerance",
          check = {dx = {ok = true, n_bad = 0, max_abs = 0, ulp_max = 0},
            dw = {ok = false, n_bad = 17, max_abs = 0.03125, ulp_max = 812}}}
      else
        rows[#rows + 1] = ok_row("auto", 4096, N, dt, 0.4, 2500,
          {resolved = "rmsnorm.bwd.blockrow"})
      end
    end
  end
  return report.new(rows, META)
end

local function lines_of(text)
  local out = {}
  for line in text:gmatch("([^\n]*)\n") do out[#out + 1] = line end
  return out
end

-- The table's own lines: the header row ("M N dtype ...", "op M N ..."), the rule, the body.
local function table_lines(text)
  local all, out, started = lines_of(text), {}, false
  for _, line in ipairs(all) do
    if line:match("^%s*M%s+N%s+dtype") or line:match("^op%s+M%s+N%s+dtype") then
      started = true
    end
    if started then
      if line == "" then break end
      out[#out + 1] = line
    end
  end
  return out
end

local function find_line(lines, ...)
  for _, line in ipairs(lines) do
    local all = true
    for _, pat in ipairs({...}) do
      if not line:find(pat, 1, true) then all = false end
    end
    if all then return line end
  end
end

-- A small CSV reader (quoted fields with doubled quotes), enough to read r:csv() back.
local function parse_csv(text)
  local rows = {}
  for line in text:gmatch("([^\n]*)\n") do
    local fields, i = {}, 1
    while i <= #line + 1 do
      if line:sub(i, i) == '"' then
        local j, buf = i + 1, {}
        while true do
          local c = line:sub(j, j)
          if c == '"' and line:sub(j + 1, j + 1) == '"' then
            buf[#buf + 1] = '"'
            j = j + 2
          elseif c == '"' then
            break
          else
            buf[#buf + 1] = c
            j = j + 1
          end
        end
        fields[#fields + 1] = table.concat(buf)
        i = j + 2
      else
        local j = line:find(",", i, true) or #line + 1
        fields[#fields + 1] = line:sub(i, j - 1)
        i = j + 1
      end
    end
    rows[#rows + 1] = fields
  end
  return rows
end

local function close(a, b)
  return math.abs(a - b) <= 1e-12 * math.max(1, math.abs(a), math.abs(b))
end

describe("normlab.report wide table", function()
  it("has a header with device, roofline, mode and date", function()
    local text = sample():text()
    local first = lines_of(text)
    assert.truthy(first[1]:find("rmsnorm.bwd on cuda:0 (Test GPU)", 1, true))
    assert.truthy(first[2]:find("roofline 3000 GB/s", 1, true))
    assert.truthy(first[2]:find("mode rotate", 1, true))
    assert.truthy(first[2]:find("2025-01-02 03:04", 1, true))
  end)

  it("has one line per (M, N, dtype), sorted by M then N, dtypes in first-seen order", function()
    local t = table_lines(sample():text())
    assert.are.equal(2 + 4, #t) -- header, rule, four shapes
    assert.truthy(t[3]:match("^4096%s+1024%s+bf16"))
    assert.truthy(t[4]:match("^4096%s+1024%s+fp32"))
    assert.truthy(t[5]:match("^4096%s+65536%s+bf16"))
    assert.truthy(t[6]:match("^4096%s+65536%s+fp32"))
  end)

  it("shows GB/s with the percentage of the roofline", function()
    local t = table_lines(sample():text())
    local line = find_line(t, "1024", "bf16")
    assert.truthy(line:find("1000 (33%)", 1, true))
    assert.truthy(line:find("2000 (67%)", 1, true))
  end)

  it("computes the percentage from meta.roofline_gbps when a row has none", function()
    local row = ok_row("row", 8, 8, "fp32", 1, 1500)
    row.pct = nil
    local text = report.new({row}, META):text()
    assert.truthy(text:find("1500 (50%)", 1, true))
  end)

  it("shows skip cells with their reason and FAIL cells with the failing output", function()
    local t = table_lines(sample():text())
    local skipped = find_line(t, "65536", "bf16")
    assert.truthy(skipped:find("skip: N > 16384", 1, true))
    local failed = find_line(t, "1024", "fp32")
    assert.truthy(failed:find("FAIL: dw max_abs 0.031", 1, true))
  end)

  it("lists failures in full below the table, and clipped skip reasons", function()
    local text = sample():text({width = 16})
    assert.truthy(text:find("FAIL auto at 4096x1024 fp32: dw max_abs 0.031 ulp 812 bad 17 " ..
      "(dw out of tolerance)", 1, true))
    assert.truthy(text:find("skip persistent: N > 16384, beyond the register budget", 1, true))
  end)

  it("says what auto resolved to", function()
    local line = find_line(table_lines(sample():text()), "65536", "bf16")
    assert.truthy(line:find("[blockrow]", 1, true))
  end)

  it("aligns every column", function()
    local t = table_lines(sample():text({speedup = {"persistent", "row"}}))
    -- The last column is right-aligned, so aligned columns give lines of one length.
    for i = 2, #t do assert.are.equal(#t[1], #t[i]) end
    -- And each column starts where its header starts.
    local head = t[1]
    local col = head:find("persistent/row", 1, true)
    for i = 3, #t do
      assert.truthy(t[i]:sub(col - 1, col - 1) == " ")
    end
  end)

  it("adds speedup columns a/b = time(b) / time(a), '-' where one side did not run", function()
    local text = sample():text({speedup = {"persistent", "row"}})
    local t = table_lines(text)
    assert.truthy(t[1]:find("persistent/row", 1, true))
    assert.truthy(find_line(t, "1024", "bf16"):match("2%.00x$"))
    assert.truthy(find_line(t, "65536", "bf16"):match("%-$"))
    assert.truthy(text:find("persistent/row: geometric mean 2.00x over 2 shapes", 1, true))
  end)

  it("takes several speedup pairs", function()
    local t = table_lines(sample():text({speedup = {{"persistent", "row"}, {"auto", "row"}}}))
    assert.truthy(t[1]:find("persistent/row", 1, true))
    assert.truthy(t[1]:find("auto/row", 1, true))
    assert.truthy(find_line(t, "65536", "fp32"):match("2%.50x$"))
  end)

  it("rejects a speedup naming a variant that is not there, and unknown options", function()
    local r = sample()
    local ok, err = pcall(r.text, r, {speedup = {"cluster", "row"}})
    assert.is_false(ok)
    assert.truthy(err:find("no variant 'cluster'", 1, true))
    assert.truthy(err:find("row, persistent, auto", 1, true))
    ok, err = pcall(r.text, r, {speedups = {"persistent", "row"}})
    assert.is_false(ok)
    assert.truthy(err:find("unknown option 'speedups'", 1, true))
    ok, err = pcall(r.text, r, {metric = "tflops"})
    assert.is_false(ok)
    assert.truthy(err:find("metric", 1, true))
  end)

  it("shows median times with metric = 'us'", function()
    local line = find_line(table_lines(sample():text({metric = "us"})), "1024", "bf16")
    assert.truthy(line:find("1000 us", 1, true))
    assert.truthy(line:find("500 us", 1, true))
  end)

  it("prints to a file and returns the text; tostring gives the same table", function()
    local r = sample()
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    local text = r:print({file = f, speedup = {"persistent", "row"}})
    f:close()
    f = assert(io.open(path, "r"))
    local written = f:read("*a")
    f:close()
    os.remove(path)
    assert.are.equal(text, written)
    assert.are.equal(r:text(), tostring(r))
  end)

  it("handles an empty result", function()
    assert.truthy(report.new({}, {}):text():find("(no rows)", 1, true))
  end)

  it("adds an op column once results of several ops are merged", function()
    local fwd = report.new({ok_row("row", 4096, 1024, "bf16", 1, 900, {pass = "fwd",
      resolved = "rmsnorm.fwd.row"})}, META)
    local t = table_lines(report.merge(fwd, sample()):text())
    assert.truthy(t[1]:match("^op%s+M%s+N%s+dtype"))
    assert.truthy(t[3]:match("^rmsnorm%.fwd%s+4096"))
  end)
end)

describe("normlab.report markdown", function()
  it("renders a GitHub table with aligned columns and escaped pipes", function()
    local rows = {ok_row("row", 64, 128, "bf16", 1, 10),
      {op = "rmsnorm", pass = "bwd", variant = "persistent", M = 64, N = 128, dtype = "bf16",
        status = "skip", reason = "a|b"}}
    local md = report.new(rows, META):markdown({speedup = {"row", "persistent"}})
    local l = lines_of(md)
    assert.truthy(l[1]:find("^%*%*rmsnorm%.bwd on cuda:0"))
    assert.truthy(md:find("| M | N | dtype | row | persistent | row/persistent |", 1, true))
    assert.truthy(md:find("| ---: | ---: | :--- | ---: | ---: | ---: |", 1, true))
    assert.truthy(md:find("skip: a\\|b", 1, true))
  end)
end)

describe("normlab.report CSV", function()
  it("writes one line per row with every field, and reads back", function()
    local r = sample()
    r.rows[1].reason = 'has, a comma and "quotes"'
    local text = r:csv()
    local t = parse_csv(text)
    assert.are.equal(#r.rows + 1, #t)
    local col = {}
    for i, name in ipairs(t[1]) do col[name] = i end
    for _, name in ipairs({"op", "pass", "variant", "M", "N", "dtype", "status", "reason", "ms",
      "gbps", "pct", "check_dw_ok", "check_dw_max_abs", "check_dx_ulp_max", "device"}) do
      assert.truthy(col[name], name)
    end
    for i, row in ipairs(r.rows) do
      local f = t[i + 1]
      assert.are.equal(row.variant, f[col.variant])
      assert.are.equal(row.status, f[col.status])
      assert.are.equal(row.M, tonumber(f[col.M]))
      assert.are.equal(row.N, tonumber(f[col.N]))
      assert.are.equal(row.reason or "", f[col.reason])
      if row.ms then assert.are.equal(row.ms, tonumber(f[col.ms])) end
      -- Full precision: the text reads back as the same double.
      if row.pct then assert.are.equal(row.pct, tonumber(f[col.pct])) end
      assert.are.equal("cuda:0", f[col.device])
      if row.check then
        assert.are.equal(tostring(row.check.dw.ok), f[col.check_dw_ok])
      end
    end
  end)

  it("writes the file it is given", function()
    local path = os.tmpname()
    local text = sample():csv(path)
    local f = assert(io.open(path, "r"))
    assert.are.equal(text, f:read("*a"))
    f:close()
    os.remove(path)
  end)
end)

describe("normlab.report JSON", function()
  local cjson = require("cjson")

  it("round-trips rows and meta through cjson", function()
    local r = sample()
    local doc = cjson.decode(r:json())
    assert.are.equal(#r.rows, #doc.rows)
    for i, row in ipairs(r.rows) do
      for k, v in pairs(row) do
        if type(v) == "number" then
          assert.truthy(close(v, doc.rows[i][k]), k)
        elseif type(v) ~= "table" then
          assert.are.equal(v, doc.rows[i][k])
        end
      end
      if row.check then
        assert.are.equal(row.check.dw.ok, doc.rows[i].check.dw.ok)
        assert.truthy(close(row.check.dw.max_abs, doc.rows[i].check.dw.max_abs))
      end
    end
    assert.are.equal("cuda:0", doc.meta.device)
    assert.are.equal(ROOF, doc.meta.roofline_gbps)
    assert.are.equal(1024, doc.meta.settings["rmsnorm.bwd.blockrow_max_n"])
  end)

  it("keeps rows a JSON array, one row per line", function()
    local text = report.new({}, META):json()
    assert.truthy(text:find('"rows": [\n]', 1, true))
    local n = 0
    for _ in sample():json():gmatch('\n  {"') do n = n + 1 end
    assert.are.equal(#sample().rows, n)
  end)

  it("carries NaN and infinities as strings that report.from_json restores", function()
    local row = ok_row("row", 8, 8, "fp32", 1, 1)
    row.check.dx.ulp_max = 1 / 0
    row.check.dw.max_abs = 0 / 0
    local r = report.new({row}, META)
    local doc = cjson.decode(r:json())
    assert.are.equal("inf", doc.rows[1].check.dx.ulp_max)
    local back = report.from_json(r:json())
    assert.are.equal(math.huge, back.rows[1].check.dx.ulp_max)
    local nan = back.rows[1].check.dw.max_abs
    assert.is_true(nan ~= nan)
  end)

  it("reads back a file with report.from_json and prints the same table", function()
    local r = sample()
    local path = os.tmpname()
    r:json(path)
    local back = report.from_json(path)
    os.remove(path)
    assert.are.equal(r:text({speedup = {"persistent", "row"}}),
      back:text({speedup = {"persistent", "row"}}))
  end)
end)

describe("normlab.report SVG", function()
  it("draws one bar per timed cell, the roofline, a legend, escaped text", function()
    local r = sample()
    r.rows[1].variant = "row<&>"
    local svg = r:svg()
    assert.truthy(svg:match("^<svg "))
    assert.truthy(svg:match("</svg>\n$"))
    assert.truthy(svg:find("roofline 3000 GB/s", 1, true))
    assert.truthy(svg:find("row&lt;&amp;&gt;", 1, true))
    assert.is_nil(svg:find("row<&>", 1, true))
    local bars = 0
    for _ in svg:gmatch("<rect x=[^/]-><title>") do bars = bars + 1 end
    local timed = 0
    for _, row in ipairs(r.rows) do
      if row.status == "ok" then timed = timed + 1 end
    end
    assert.are.equal(timed, bars)
  end)
end)

describe("normlab.report merge", function()
  it("concatenates rows, refuses duplicates, and accepts labelled copies", function()
    local a = sample()
    local ok, err = pcall(report.merge, a, sample())
    assert.is_false(ok)
    assert.truthy(err:find("r:label", 1, true))
    local b = report.new(sample().rows, {device = "cuda:1", roofline_gbps = 4000, mode = "rotate"})
    local m = report.merge(a, b:label("h200"))
    assert.are.equal(#a.rows * 2, #m.rows)
    local t = table_lines(m:text({speedup = {"row@h200", "row"}}))
    assert.truthy(t[1]:find("row@h200", 1, true))
    assert.truthy(find_line(t, "1024", "bf16"):match("1%.00x$"))
    local first = lines_of(m:text())[1]
    assert.truthy(first:find("cuda:0 (Test GPU), cuda:1", 1, true))
    -- Rows take the device of the result they came from.
    assert.are.equal("cuda:1", m.rows[#m.rows].device)
    -- The inputs are left as they were.
    assert.are.equal("row", a.rows[1].variant)
    assert.is_nil(a.rows[1].device)
  end)

  it("selects rows by fields", function()
    local r = sample()
    assert.are.equal(2, #r:select({variant = "persistent", status = "ok"}))
    assert.are.equal(4, #r:select({variant = "row"}))
  end)

  it("checks its arguments", function()
    assert.has_error(function() report.new("rows") end)
    assert.has_error(function() report.merge({rows = {}}) end)
  end)
end)
