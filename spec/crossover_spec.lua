-- The crossover view (normlab.crossover, nl.crossover) and experiments/crossover.lua, on the
-- CPU: on made-up results, the winner is the fastest variant that passed its check (never a
-- skipped or failed one, never auto), margins and auto's ratios and the summary are computed
-- right, the criterion holds exactly at its bounds; the table has a line per cell, the SVG
-- is well-formed with a square per cell and a legend; the script runs every op on a tiny
-- grid (a 1 ms warm-up and batch, one batch), a fp64 cell's skips never win, and its shards
-- merge (nl.merge, `normlab merge`) into the same winners. No timing is asserted.
local nl = require("normlab")
local helper = require("spec.helper")
local report = require("normlab.report")
local crossover = require("normlab.crossover")

local FAST = {["bench.warmup_ms"] = 1, ["bench.batch_ms"] = 1}
local unpack_ = table.unpack or unpack
local read_file = helper.read_file

-- A row of rmsnorm.fwd at M x N bf16: ok at gbps (ms from a 1 GB byte count), or extra's
-- status; auto's resolved variant comes in extra.
local function row(variant, M, N, gbps, extra)
  local r = {op = "rmsnorm", pass = "fwd", variant = variant, M = M, N = N, dtype = "bf16",
    status = "ok", gbps = gbps, ms = gbps and 1 / gbps, pct = gbps and gbps / 10,
    resolved = variant ~= "auto" and "rmsnorm.fwd." .. variant or nil}
  for k, v in pairs(extra or {}) do r[k] = v end
  return r
end

local function result(rows)
  return report.new(rows, {device = "cpu", roofline_gbps = 1000, mode = "rotate"})
end

-- The SVG's tags balance (each opened tag closed in order, self-closing ones aside), every
-- attribute's quotes pair up, every & starts an entity: well-formed XML without a parser.
-- Returns the tag names in order.
local function well_formed(svg)
  local stack, names = {}, {}
  local text = svg:gsub("<[^>]*>", function(tag)
    local close, name, rest = tag:match("^<(/?)([%w:_-]+)(.-)>$")
    assert.truthy(name, "a malformed tag: " .. tag)
    assert.are.equal(0, select(2, rest:gsub('"', "")) % 2, "unpaired quotes in " .. tag)
    if close == "/" then
      assert.are.equal(stack[#stack], name, "</" .. name .. "> closes <" ..
        tostring(stack[#stack]) .. ">")
      stack[#stack] = nil
    elseif rest:sub(-1) ~= "/" then
      stack[#stack + 1] = name
      names[#names + 1] = name
    else
      names[#names + 1] = name
    end
    return ""
  end)
  assert.are.same({}, stack, "unclosed tags")
  assert.falsy(text:find("[<>]"), "a stray < or > in the text")
  assert.falsy(text:gsub("&%a+;", ""):find("&", 1, true), "a stray & in the text")
  assert.are.equal("svg", names[1])
  return names
end

local function count(text, pattern)
  return select(2, text:gsub(pattern, ""))
end

describe("nl.crossover", function()
  -- 1x64: persistent wins over row by 20%, auto picked persistent at 0.96 of it.
  -- 1x128: row skipped (a rate recorded all the same) and blockrow failed: persistent
  --        alone, no runner-up.
  -- 1x256: every variant skipped, auto too: no winner.
  -- 16x64: auto faster than the winner (1.5x); row and persistent tie: row, the first column.
  local rows = {
    row("row", 1, 64, 10), row("blockrow", 1, 64, 8), row("persistent", 1, 64, 12),
    row("auto", 1, 64, 11.52, {resolved = "rmsnorm.fwd.persistent", dispatch = "default"}),
    row("row", 1, 128, 100, {status = "skip", reason = "N too wide"}),
    row("blockrow", 1, 128, 50, {status = "fail", reason = "y: max_abs 3",
      check = {y = {ok = false, max_abs = 3, ulp_max = 900, n_bad = 5}}}),
    row("persistent", 1, 128, 5), row("auto", 1, 128, 5, {resolved = "rmsnorm.fwd.persistent"}),
    row("row", 1, 256, nil, {status = "skip", reason = "no"}),
    row("blockrow", 1, 256, nil, {status = "skip", reason = "no"}),
    row("persistent", 1, 256, nil, {status = "skip", reason = "no"}),
    row("auto", 1, 256, nil, {status = "skip", reason = "no"}),
    row("row", 16, 64, 10), row("blockrow", 16, 64, 4), row("persistent", 16, 64, 10),
    row("auto", 16, 64, 15, {resolved = "rmsnorm.fwd.row"}),
  }
  local x = nl.crossover(result(rows))

  it("the winner is the fastest variant that passed its check; margins and auto's ratios", function()
    assert.are.equal(4, #x.cells)
    local c = x.cells
    assert.are.same({1, 64, "bf16"}, {c[1].M, c[1].N, c[1].dtype})
    assert.are.equal("persistent", c[1].winner.variant)
    assert.are.equal("row", c[1].runner_up.variant)
    assert.is_true(math.abs(c[1].margin - 0.2) < 1e-12)
    assert.are.equal("auto", c[1].dispatch[1].variant)
    assert.are.equal("persistent", c[1].dispatch[1].pick)
    assert.is_true(math.abs(c[1].dispatch[1].ratio - 0.96) < 1e-12)

    assert.are.equal("persistent", c[2].winner.variant)   -- not the skipped or failed faster rows
    assert.is_nil(c[2].runner_up)
    assert.is_nil(c[2].margin)
    assert.are.same({"row"}, {c[2].skipped[1].variant})
    assert.are.same({"blockrow"}, {c[2].failed[1].variant})

    assert.is_nil(c[3].winner)
    assert.is_nil(c[3].dispatch[1].ratio)
    assert.are.equal(4, #c[3].skipped)

    assert.are.equal("row", c[4].winner.variant)          -- a tie goes to the first column
    assert.are.equal("persistent", c[4].runner_up.variant)
    assert.are.equal(0, c[4].margin)
    assert.are.equal(1.5, c[4].dispatch[1].ratio)         -- auto never wins, even when faster
    assert.are.same({"row", "blockrow", "persistent"}, x.concrete)
    assert.are.same({"auto"}, x.dispatchers)
  end)

  it("summarizes auto: within 3/2/1%, the minimum and where, the wins", function()
    local s = x.summary
    assert.are.equal(4, s.cells)
    assert.are.equal(3, s.decided)
    assert.are.same({{variant = "persistent", cells = 2}, {variant = "row", cells = 1}}, s.wins)
    local a = s.dispatchers[1]
    assert.are.equal("auto", a.variant)
    assert.are.equal(3, a.ran)
    assert.are.equal(0, a.missing)
    assert.are.equal(1, a.below)
    assert.are.same({2, 2, 2}, {a.within[1].cells, a.within[2].cells, a.within[3].cells})
    assert.are.same({0.03, 0.02, 0.01}, {a.within[1].limit, a.within[2].limit, a.within[3].limit})
    assert.are.same({ratio = a.min.ratio, M = 1, N = 64, dtype = "bf16", pick = "persistent",
      winner = "persistent"}, a.min)
    assert.is_false(a.met)
  end)

  it("holds auto to the criterion at its bounds: 95% within 3%, never below 0.9x, always run", function()
    local function met(ratios)
      local rs = {}
      for i, r in ipairs(ratios) do
        rs[#rs + 1] = row("row", i, 64, 10)
        rs[#rs + 1] = r and row("auto", i, 64, 10 * r) or row("auto", i, 64, nil, {status = "fail"})
      end
      return nl.crossover(result(rs)).summary.dispatchers[1].met
    end
    local ratios = {}
    for i = 1, 20 do ratios[i] = 1 end
    assert.is_true(met(ratios))
    ratios[20] = 0.95                 -- 19 of 20 within 3%: 95%
    assert.is_true(met(ratios))
    ratios[19] = 0.969                -- 18 of 20: 90%
    assert.is_false(met(ratios))
    ratios[19] = 1
    ratios[20] = 0.89                 -- below 0.9x
    assert.is_false(met(ratios))
    ratios[20] = false                -- auto failed on a cell
    assert.is_false(met(ratios))
  end)

  it("prints a line per cell, the summary and the skips and failures", function()
    local text = x:text()
    assert.truthy(text:find("^rmsnorm.fwd bf16 crossover on cpu"), text)
    local head = text:match("\n(%s*M%s+N%s+dtype[^\n]*)\n")
    local cols = {}
    for w in head:gmatch("%S+") do cols[#cols + 1] = w end
    assert.are.same({"M", "N", "dtype", "winner", "GB/s", "roofline", "runner-up", "margin", "auto",
      "auto/best"}, cols)
    local lines = {}
    for l in text:gmatch("\n(%s*%d+%s+%d+%s+bf16[^\n]*)") do lines[#lines + 1] = l end
    assert.are.equal(4, #lines)
    assert.truthy(lines[1]:find("persistent%s+12%.0%s+1%.2%%%s+row%s+20%%%s+persistent%s+0%.96x %*$"),
      lines[1])
    assert.truthy(lines[2]:find("persistent%s+5%.00%s+0%.50%%%s+%-%s+%-%s+persistent%s+1%.00x$"),
      lines[2])
    assert.truthy(lines[3]:find("bf16%s+%-%s+%-%s+%-%s+%-%s+%-%s+skip%s+skip$"), lines[3])
    assert.truthy(lines[4]:find("row%s+10%.0%s+1%.0%%%s+persistent%s+0%.00%%%s+row%s+1%.50x$"),
      lines[4])
    assert.truthy(text:find("auto: within 3% of the best on 2 of 3 cells (66.7%), within 2% on 2 " ..
      "(66.7%), within 1% on 2 (66.7%); min 0.96x at M=1 N=64 bf16 (auto persistent, best " ..
      "persistent)", 1, true), text)
    assert.truthy(text:find("auto: criterion (within 3% of the best on >= 95% of the cells, never " ..
      "below 0.90x): NOT met", 1, true), text)
    assert.truthy(text:find("wins: persistent 2, row 1 (of 4 cells, 1 without a winner)", 1, true), text)
    assert.truthy(text:find("skip row at 1x128 bf16: N too wide", 1, true), text)
    assert.truthy(text:find("FAIL blockrow at 1x128 bf16: y max_abs 3 ulp 900 bad 5", 1, true), text)
    assert.truthy(text:find("skip persistent at 1x256 bf16: no", 1, true), text)
    local md = x:markdown()
    assert.truthy(md:find("| 1 | 64 | bf16 | persistent | 12.0 | 1.2% | row | 20% | persistent | 0.96x * |",
      1, true), md)
    assert.has_error(function() x:print{speedup = {"a", "b"}} end,
      "crossover: unknown option 'speedup' (expected: file, path)")
  end)

  it("draws a well-formed SVG: a square per cell, a legend, auto's misses outlined", function()
    local svg = x:svg()
    well_formed(svg)
    assert.are.equal(4, count(svg, '<rect class="cell'))
    -- 1x64 (0.96x) is a miss; 1x256 has no winner, so nothing to miss
    assert.are.equal(1, count(svg, '<rect class="cell miss"'))
    -- a swatch per strategy, "no winner" and the outline
    assert.are.equal(5, count(svg, '<rect class="legend"'))
    for _, v in ipairs({"row", "blockrow", "persistent", "no winner"}) do
      assert.truthy(svg:find(">" .. v .. "</text>", 1, true), v)
    end
    assert.truthy(svg:find("rmsnorm.fwd bf16 crossover on cpu", 1, true))
    assert.truthy(svg:find(">20%</text>", 1, true))      -- the margin, in its square
    assert.truthy(svg:find("auto: persistent 0.96x", 1, true))
  end)

  it("writes a CSV line per cell, and JSON that reads back into the same view", function()
    local csv = x:csv()
    local lines = {}
    for l in csv:gmatch("[^\n]+") do lines[#lines + 1] = l end
    assert.are.equal(5, #lines)
    assert.are.equal("op,dtype,M,N,winner,gbps,pct,runner_up,runner_up_gbps,margin,auto," ..
      "auto_status,auto_dispatch,auto_gbps,auto_ratio,skipped,failed", lines[1])
    assert.truthy(lines[2]:find("^rmsnorm.fwd,bf16,1,64,persistent,12,1.2,row,10,0.1999"), lines[2])
    assert.truthy(lines[3]:find(",row,blockrow$"), lines[3])
    assert.truthy(lines[4]:find("^rmsnorm.fwd,bf16,1,256,,,,,,,,skip,,,,row blockrow persistent auto,$"),
      lines[4])
    for _, l in ipairs(lines) do assert.are.equal(16, count(l, ","), l) end
    local back = report.from_json(x:json())
    assert.are.same({crossover = true}, back.meta.print)
    assert.are.equal(3, back.meta.crossover.decided)
    assert.are.equal(1, back.meta.crossover.dispatchers[1].below)
    local y = nl.crossover(back)
    for i, c in ipairs(x.cells) do
      assert.are.equal(c.winner and c.winner.variant, y.cells[i].winner and y.cells[i].winner.variant)
    end
    assert.has_error(function() nl.crossover({rows = {}}) end)
  end)
end)

describe("experiments/crossover.lua", function()
  local COMMON = {"--device", "cpu", "--M", "1,16", "--N", "8,96", "--batches", "1", "--seed", "3"}

  local function script(args)
    local argv = {unpack_(COMMON)}
    for _, a in ipairs(args) do argv[#argv + 1] = a end
    return helper.run_script("experiments/crossover.lua", argv, FAST)
  end

  -- The table's lines: M, N, dtype and the rest as words.
  local function table_lines(out)
    local lines = {}
    for l in out:gmatch("\n%s*(%d+%s+%d+%s+%w+%s[^\n]*)") do
      local w = {}
      for x in l:gmatch("%S+") do w[#w + 1] = x end
      lines[#lines + 1] = w
    end
    return lines
  end

  for _, op in ipairs({"rmsnorm.fwd", "layernorm.bwd", "add_rmsnorm.fwd"}) do
    it("--op " .. op .. ": a line per cell, every registered strategy and auto's pick", function()
      local path = os.tmpname()
      local ok, out, err = script({"--op", op, "--json", path})
      assert.is_true(ok, tostring(err))
      assert.truthy(out:find(op .. " bf16 crossover on cpu", 1, true), out)
      local lines = table_lines(out)
      assert.are.equal(4, #lines)
      local strategies = {}
      local o, pass = op:match("^(.-)%.(.*)$")
      for _, v in ipairs(nl.variants{op = o, pass = pass, backend = "cpu"}) do
        if v.strategy ~= "ref" and v.strategy ~= "auto" then strategies[v.strategy] = true end
      end
      for _, w in ipairs(lines) do
        assert.truthy(strategies[w[4]], "winner " .. w[4])
        assert.truthy(strategies[w[9]] or w[9]:match("^%d"), "auto's pick " .. w[9])
      end
      assert.truthy(out:find("auto: criterion", 1, true), out)
      assert.falsy(out:find("FAIL", 1, true), out)
      local r = report.from_json(read_file(path))
      assert.are.same({crossover = true}, r.meta.print)
      assert.are.equal(4, r.meta.crossover.cells)
      local want = {}
      for _, v in ipairs(nl.variants{op = o, pass = pass, backend = "cpu"}) do
        if v.strategy ~= "ref" then want[#want + 1] = v.strategy end
      end
      assert.are.same(want, r.meta.sweep.variants)
      for _, rr in ipairs(r.rows) do
        if rr.variant == "auto" then assert.are.equal("default", rr.dispatch) end
      end
      os.remove(path)
    end)
  end

  it("skipped variants never win: fp64 cells, which only ref and auto take", function()
    local ok, out, err = script({"--dtypes", "fp64,fp32", "--variants", "row,ref,auto"})
    assert.is_true(ok, tostring(err))
    local lines = table_lines(out)
    assert.are.equal(8, #lines)
    for _, w in ipairs(lines) do
      if w[3] == "fp64" then
        assert.are.equal("ref", w[4])
        assert.are.equal("ref", w[9])
      end
    end
    assert.truthy(out:find("skip row at 4 cells (1x8 fp64, 1x96 fp64, 16x8 fp64, 16x96 fp64): ",
      1, true), out)
  end)

  -- "16x8", from numbers (through JSON: floats under Lua 5.4) or the table's words
  local function key(M, N)
    return string.format("%dx%d", tonumber(M), tonumber(N))
  end

  it("shards merge into the same winners, through nl.merge and `normlab merge`", function()
    local dir = os.tmpname()
    local files, shards = {}, {}
    for i = 1, 3 do
      files[i] = dir .. ".s" .. i .. ".json"
      local ok, _, err = script({"--dtypes", "fp32", "--shard", i .. "/3", "--json", files[i]})
      assert.is_true(ok, tostring(err))
      shards[i] = nl.crossover(report.from_json(read_file(files[i])))
    end
    local merged = nl.crossover(nl.merge(files))
    assert.are.equal(4, #merged.cells)
    assert.is_nil(merged.result.meta.crossover)   -- a shard's summary is not the whole's
    local winner = {}
    for _, x in ipairs(shards) do
      for _, c in ipairs(x.cells) do winner[key(c.M, c.N)] = c.winner.variant end
    end
    for _, c in ipairs(merged.cells) do
      assert.are.equal(winner[key(c.M, c.N)], c.winner.variant)
    end
    local rc, out, err = helper.run({"merge", files[3], files[1], files[2], "--svg", dir .. ".svg",
      "--json", dir .. ".json"})
    assert.are.equal(0, rc, err)
    assert.truthy(out:find("rmsnorm.fwd fp32 crossover on cpu", 1, true), out)
    assert.are.equal(4, #table_lines(out))
    for _, w in ipairs(table_lines(out)) do
      assert.are.equal(winner[key(w[1], w[2])], w[4])
    end
    assert.truthy(out:find("auto: criterion", 1, true), out)
    local svg = read_file(dir .. ".svg")
    well_formed(svg)
    assert.are.equal(4, count(svg, '<rect class="cell'))
    local m = report.from_json(read_file(dir .. ".json"))
    assert.are.equal(4, m.meta.crossover.cells)
    -- a crossover shard and a plain sweep's do not merge
    local plain = report.from_json(read_file(files[2]))
    plain.meta.print = nil
    local bad = report.from_json(read_file(files[1]))
    bad.meta.print = {speedup = {{"persistent", "row"}}}
    local okm, msg = pcall(nl.merge, {files[1], bad, files[3]})
    assert.is_false(okm)
    assert.truthy(tostring(msg):find("print different speedup pairs", 1, true), tostring(msg))
    okm = pcall(nl.merge, {files[1], plain, files[3]})
    assert.is_true(okm)
    for _, p in ipairs({files[1], files[2], files[3], dir .. ".svg", dir .. ".json", dir}) do
      os.remove(p)
    end
  end)

  it("--with-tuned adds auto with the tuning cache consulted", function()
    local cache = os.tmpname() .. ".json"
    local ok, out, err = script({"--with-tuned", "--cache", cache})
    assert.is_false(ok)
    assert.truthy(tostring(err):find("--with-tuned: no tuning cache for cpu (" .. cache ..
      ": missing); experiments/tune.lua writes one", 1, true), tostring(err))
    local path = os.tmpname()
    nl.tune_cache(cache)
    helper.with_settings(FAST, function()
      nl.tune{op = "rmsnorm", pass = "fwd", M = {1, 16}, N = {8, 96}, dtype = "bf16",
        device = "cpu", batches = 1, progress = false, weight = "x",
        variants = {"row", "persistent"}}
    end)
    nl.tune_cache(false)
    ok, out, err = script({"--with-tuned", "--cache", cache, "--json", path})
    assert.is_true(ok, tostring(err))
    local head = out:match("\n(%s*M%s+N%s+dtype[^\n]*)\n")
    assert.truthy(head:find("auto%s+auto/best%s+auto@tuned%s+auto@tuned/best$"), head)
    assert.truthy(out:find("auto@tuned: criterion", 1, true), out)
    local r = report.from_json(read_file(path))
    local seen = 0
    for _, rr in ipairs(r.rows) do
      if rr.variant == "auto@tuned" then
        seen = seen + 1
        assert.are.equal("tuned", rr.dispatch)
      elseif rr.variant == "auto" then
        assert.are.equal("default", rr.dispatch)
      end
    end
    assert.are.equal(4, seen)
    -- the specs' own choice (no cache) is back
    assert.are.equal("off", nl.tune_cache().state)
    os.remove(cache)
    os.remove(path)
  end)

  it("refuses --set with several values, and --cache without --with-tuned", function()
    local ok, _, err = script({"--set", "cpu.threads=1,2"})
    assert.is_false(ok)
    assert.truthy(tostring(err):find("--set cpu.threads: one value per key here", 1, true),
      tostring(err))
    ok, _, err = script({"--cache", "x.json"})
    assert.is_false(ok)
    assert.truthy(tostring(err):find("--cache: the tuning cache is consulted with --with-tuned only",
      1, true), tostring(err))
    ok, _, err = script({"--set", "cpu.threads=1", "--variants", "row,auto", "--M", "4", "--N", "8"})
    assert.is_true(ok, tostring(err))
  end)
end)
