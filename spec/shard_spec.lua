-- Sharding a sweep and merging the shards (nl.bench{shard = {I, N}}, --shard I/N, nl.merge,
-- `normlab merge`), on the CPU with tiny shapes, a 1 ms warm-up and one 1 ms batch: the
-- shards partition the cells for every N, merging them gives the unsharded result (timings
-- aside), every refusal of merge says which input and what, and an experiment run in shards
-- through the executable merges back into the unsharded table.
local nl = require("normlab")
local helper = require("spec.helper")
local report = require("normlab.report")
local sweep = require("normlab.sweep")

local FAST = {["bench.warmup_ms"] = 1, ["bench.batch_ms"] = 1}

-- 2 dtypes x 3 sizes = 6 cells.
local BASE = {op = "rmsnorm.bwd", variants = {"row", "persistent"}, M = 4, N = {8, 16, 32},
  dtype = {"fp32", "bf16"}, device = "cpu", batches = 1, seed = 7, progress = false}

local function bench(extra)
  local spec = {}
  for k, v in pairs(BASE) do spec[k] = v end
  for k, v in pairs(extra or {}) do spec[k] = v end
  local r
  helper.with_settings(FAST, function() r = nl.bench(spec) end)
  return r
end

local untimed, read_file, run = helper.untimed, helper.read_file, helper.run
local shape_of = helper.table_shape

describe("sharding a sweep", function()
  it("splits the cells round robin: every N partitions them, N above the count too", function()
    local cells = sweep.cells({"fp32", "bf16"}, {4}, {8, 16, 32})
    assert.are.equal(6, #cells)
    assert.are.same({dtype = "fp32", M = 4, N = 8}, cells[1])
    assert.are.same({dtype = "bf16", M = 4, N = 32}, cells[6])
    for n = 1, #cells + 3 do
      local seen = {}
      for i = 1, n do
        for _, k in ipairs(sweep.shard_cells(#cells, {i, n})) do
          assert.is_nil(seen[k], string.format("cell %d twice with N = %d", k, n))
          assert.are.equal(i, (k - 1) % n + 1)
          seen[k] = i
        end
      end
      for k = 1, #cells do assert.truthy(seen[k], string.format("cell %d missing, N = %d", k, n)) end
    end
    assert.are.same({2, 5}, sweep.shard_cells(6, {2, 3}))
    assert.are.same({}, sweep.shard_cells(6, {8, 8}))
  end)

  it("nl.bench runs a shard's cells only, for every N up to more than the cells", function()
    local small = {variants = {"row"}, check = false, mode = "hot", dtype = "fp32"}
    local full = bench(small)
    assert.are.equal(3, full.meta.sweep.cells)
    assert.is_nil(full.meta.shard)
    for n = 1, 5 do
      local got = {}
      for i = 1, n do
        small.shard = {i, n}
        local r = bench(small)
        assert.are.same({index = i, count = n, cells = sweep.shard_cells(3, {i, n})},
          r.meta.shard)
        assert.are.equal(full.meta.sweep.hash, r.meta.sweep.hash)
        assert.are.equal(#r.meta.shard.cells, #r.rows)
        for j, row in ipairs(r.rows) do
          local want = sweep.cells({"fp32"}, {4}, BASE.N)[r.meta.shard.cells[j]]
          assert.are.same({want.dtype, want.M, want.N}, {row.dtype, row.M, row.N})
          local key = row.dtype .. " " .. row.N
          assert.is_nil(got[key], key .. " twice, N = " .. n)
          got[key] = true
        end
      end
      local count = 0
      for _ in pairs(got) do count = count + 1 end
      assert.are.equal(3, count, "N = " .. n)
    end
  end)

  it("refuses a bad shard option", function()
    for _, bad in ipairs({{0, 2}, {3, 2}, {1}, {1.5, 2}, "1/2", {1, 2, 3}}) do
      local ok, err = pcall(nl.bench, {op = "rmsnorm", device = "cpu", M = 4, N = 8, shard = bad})
      assert.is_false(ok)
      assert.truthy(tostring(err):find("option 'shard' must be {I, N} with 1 <= I <= N", 1, true),
        tostring(err))
    end
    assert.are.same({2, 4}, sweep.parse_shard("2/4"))
    for _, bad in ipairs({"0/4", "5/4", "2", "a/b", "1/0", ""}) do
      local v, err = sweep.parse_shard(bad)
      assert.is_nil(v)
      assert.truthy(err:find("--shard: expected I/N", 1, true))
    end
  end)
end)

describe("nl.merge", function()
  local full, shards4, shards8

  setup(function()
    full = bench()
    shards4, shards8 = {}, {}
    for i = 1, 4 do shards4[i] = bench({shard = {i, 4}}) end
    for i = 1, 8 do shards8[i] = bench({shard = {i, 8}}) end
  end)

  -- A JSON round trip of a Result (what a shard's --json file holds).
  local function json(r)
    return r:json()
  end

  it("gives the unsharded result but the timings, from Results, JSON texts and files", function()
    for _, set in ipairs({shards4, shards8}) do
      local m = nl.merge(set)
      assert.are.same(untimed(full.rows), untimed(m.rows))
      assert.are.same(full.meta.sweep, m.meta.sweep)
      assert.is_nil(m.meta.shard)
      assert.are.equal(#set, #m.meta.merged)
      -- in another order, and through JSON (shards 7/8 and 8/8 hold no cell)
      local texts = {}
      for i = #set, 1, -1 do texts[#texts + 1] = json(set[i]) end
      local mj = nl.merge(texts)
      assert.are.same(untimed(report.from_json(full:json()).rows), untimed(mj.rows))
      local mixed = {json(set[1]), speedup = {"persistent", "row"}}
      for i = 2, #set do mixed[i] = set[i] end
      local text = nl.merge(mixed):text()
      assert.truthy(text:find("persistent/row: geometric mean", 1, true), text)
      assert.are.same(shape_of(full:text{speedup = {"persistent", "row"}}), shape_of(text))
    end
    local paths = {}
    for i, r in ipairs(shards4) do
      paths[i] = os.tmpname()
      r:json(paths[i])
    end
    local m = nl.merge(paths)
    assert.are.equal(paths[3], m.meta.merged[3].name)
    local want = untimed(report.from_json(full:json()).rows)
    assert.are.same(want, untimed(m.rows))
    -- the merged JSON merges again, alone, into the same
    local again = nl.merge{m:json()}
    assert.are.same(want, untimed(again.rows))
    for _, p in ipairs(paths) do os.remove(p) end
  end)

  it("an empty shard merges", function()
    assert.are.equal(0, #shards8[8].rows)
    assert.truthy(shards8[8]:text():find("(no rows)", 1, true))
    local r = report.from_json(shards8[8]:json())
    assert.are.same({}, r.rows)
    -- 7/8 and 8/8 hold no cell: leaving them out loses nothing
    local some = {}
    for i = 1, 6 do some[i] = shards8[i] end
    assert.are.same(untimed(full.rows), untimed(nl.merge(some).rows))
  end)

  -- A copy of a Result through JSON, its meta changed by fn(meta, rows).
  local function altered(r, fn)
    local c = report.from_json(r:json())
    fn(c.meta, c.rows)
    return c
  end

  local function refuses(inputs, pattern)
    local ok, err = pcall(nl.merge, inputs)
    assert.is_false(ok, "merge should refuse: " .. pattern)
    assert.truthy(tostring(err):find(pattern, 1, true), tostring(err))
  end

  it("refuses shards of different sweeps, naming the input and the field", function()
    local s = shards4
    refuses({s[1], bench({shard = {2, 4}, variants = {"row"}}), s[3], s[4]},
      "merge: result 1 and result 2 are not shards of one sweep: variants is {row, persistent} " ..
      "in result 1 but {row} in result 2")
    refuses({s[1], bench({shard = {2, 4}, N = {8, 16, 64}}), s[3], s[4]},
      "N is {8, 16, 32} in result 1 but {8, 16, 64} in result 2")
    refuses({s[1], s[2], s[3], altered(s[4], function(m)
      m.sweep.device = {kind = "cpu", model = "Other CPU"}
      m.sweep.hash = sweep.hash(sweep.identity(m.sweep))
    end)}, "device is cpu (" .. nl.device("cpu").info.name .. ") in result 1 but cpu (Other CPU) " ..
      "in result 4")
    refuses({s[1], bench({shard = {2, 4}, weight = "x"})},
      "weight is fp32 in result 1 but x in result 2")
    refuses({s[1], s[2], altered(s[3], function(m) m.print = {speedup = {{"row", "persistent"}}} end),
      altered(s[4], function(m) m.print = {speedup = {{"persistent", "row"}}} end)},
      "result 3 and result 4 print different speedup pairs")
    refuses({s[1], s[2], s[3], altered(s[4], function(m) m.sweep.eps = 1 end)},
      "result 4: meta.sweep.hash does not match its sweep (the file was edited?)")
    refuses({s[1], altered(s[2], function(m) m.sweep = nil end)},
      "result 2 has no sweep metadata")
    refuses({"{\"rows\": 3}"}, "input 1 is not a normlab result")
    refuses({"/nonexistent/shard.json"}, "merge: cannot read /nonexistent/shard.json")
    refuses({}, "merge: no inputs")
    refuses({s[1], bogus = true}, "unknown option 'bogus'")
  end)

  it("refuses mismatched settings", function()
    local s = shards4
    local other
    local threads = nl.get("cpu.threads")
    helper.with_settings({["cpu.threads"] = threads + 1},
      function() other = bench({shard = {3, 4}}) end)
    refuses({s[1], s[2], other, s[4]}, string.format("merge: result 1 and result 3 ran with " ..
      "different settings: cpu.threads is %d in result 1 but %d in result 3", threads, threads + 1))
  end)

  it("refuses overlapping cells, a shard twice, different splits, stray and doubled rows", function()
    local s = shards4
    refuses({s[1], s[2], s[2], s[3], s[4]}, "merge: shard 2/4 is given twice: result 2 and result 3")
    refuses({s[1], s[2], s[3], altered(s[4], function(m) m.shard.cells = {4, 5} end)},
      "merge: result 1 and result 4 overlap: both hold cell bf16 M=4 N=16")
    refuses({s[1], s[2], shards8[3], s[4]},
      "merge: result 3 is shard 3/8 but result 1 is shard 1/4: shards of different splits")
    refuses({full, s[1]}, "result 2 is shard 1/4 but result 1 is shard 1/1")
    refuses({s[1], s[2], s[3], altered(s[4], function(_, rows)
      rows[#rows + 1] = {op = "rmsnorm", pass = "bwd", variant = "row", M = 4, N = 8,
        dtype = "fp32", status = "skip"}
    end)}, "merge: result 4 has a row outside its shard 4/4: row at fp32 M=4 N=8 (a cell of result 1)")
    refuses({s[1], s[2], s[3], altered(s[4], function(_, rows) rows[2] = rows[1] end)},
      "merge: result 4 has row at bf16 M=4 N=8 twice")
    refuses({s[1], s[2], s[3], altered(s[4], function(_, rows) rows[2].N = 4096 end)},
      "merge: result 4 has a row outside the sweep: persistent at bf16 M=4 N=4096")
  end)

  it("refuses missing cells and missing rows", function()
    local s = shards4
    refuses({s[1], s[3], s[4]}, "merge: missing cells: 2 of the sweep's 6 are in no input " ..
      "(shard 2/4 not given): fp32 M=4 N=16, bf16 M=4 N=32")
    refuses({s[1], s[2], s[3], altered(s[4], function(_, rows) table.remove(rows, 2) end)},
      "merge: result 4 (shard 4/4) lacks the row of persistent at bf16 M=4 N=8")
  end)
end)

describe("normlab merge", function()
  local unpack_ = table.unpack or unpack
  local COMMON = {"--M", "4", "--N", "8,16", "--dtypes", "fp32", "--batches", "1", "--seed", "3"}

  -- An experiment in this process (as spec/cli_spec.lua runs them: no copy roofline measured
  -- per run): ok, stdout, the error.
  local function in_process(path, args)
    local argv = {"--device", "cpu", unpack_(COMMON)}
    for _, a in ipairs(args) do argv[#argv + 1] = a end
    return helper.run_script(path, argv, FAST)
  end

  it("an empty shard prints no rows and keeps the script's speedup pairs", function()
    local path = os.tmpname()
    local ok, out, err = in_process("experiments/bwd_sweep.lua", {"--shard", "3/3", "--json", path})
    assert.is_true(ok, tostring(err))
    assert.truthy(out:find("(no rows)", 1, true), out)
    local r = report.from_json(read_file(path))
    assert.are.same({}, r.rows)
    assert.are.same({speedup = {{"persistent", "row"}}}, r.meta.print)
    assert.are.same({index = 3, count = 3, cells = {}}, r.meta.shard)
    os.remove(path)
  end)

  it("an experiment run in shards through the executable merges into the unsharded table", function()
    local dir = os.tmpname()
    local ok, whole, err = in_process("experiments/bwd_sweep.lua", {"--json", dir .. ".full.json"})
    assert.is_true(ok, tostring(err))
    local fast = "nl = require('normlab') nl.set('bench.warmup_ms', 1) nl.set('bench.batch_ms', 1)"
    local files = {}
    for i = 1, 2 do
      files[i] = dir .. ".s" .. i .. ".json"
      local rc, _, e = run({"--device", "cpu", "-e", fast, "experiments/bwd_sweep.lua",
        "--shard", i .. "/2", "--json", files[i], unpack_(COMMON)})
      assert.are.equal(0, rc, e)
    end
    local rc, out
    rc, out, err = run({"merge", files[2], files[1], "--json", dir .. ".m.json",
      "--markdown", dir .. ".m.md", "--csv", dir .. ".m.csv"})
    assert.are.equal(0, rc, err)
    assert.are.same(shape_of(whole), shape_of(out))
    assert.are.same({"M", "N", "dtype", "row", "persistent", "persistent/row"}, shape_of(out).cols)
    assert.truthy(out:find("persistent/row: geometric mean", 1, true), out)
    assert.truthy(err:find("wrote " .. dir .. ".m.json", 1, true), err)
    assert.truthy(read_file(dir .. ".m.md"):find("persistent/row", 1, true))
    assert.truthy(read_file(dir .. ".m.csv"):find("^op,pass,variant"))
    local m = report.from_json(read_file(dir .. ".m.json"))
    local f = report.from_json(read_file(dir .. ".full.json"))
    assert.are.same(untimed(f.rows), untimed(m.rows))
    assert.are.same(f.meta.sweep, m.meta.sweep)
    -- the merged JSON prints the same table again, speedups included
    assert.are.same(shape_of(f:text()), shape_of(m:text()))
    -- a refusal: the message alone, status 1
    rc, _, err = run({"merge", files[1]})
    assert.are.equal(1, rc)
    assert.truthy(err:find("merge: missing cells: 1 of the sweep's 2 are in no input (shard " ..
      "2/2 not given): fp32 M=4 N=16", 1, true), err)
    assert.falsy(err:find("traceback", 1, true), err)
    rc, _, err = run({"merge", files[1], dir .. ".full.json"})
    assert.are.equal(1, rc)
    assert.truthy(err:find("shards of different splits", 1, true), err)
    rc, _, err = run({"merge"})
    assert.are.equal(1, rc)
    assert.truthy(err:find("no input files", 1, true), err)
    rc, out = run({"merge", "--help"})
    assert.are.equal(0, rc)
    assert.truthy(out:find("--markdown", 1, true), out)
    for _, p in ipairs({".full.json", ".s1.json", ".s2.json", ".m.json", ".m.md", ".m.csv", ""}) do
      os.remove(dir .. p)
    end
  end)
end)
