-- --devices (normlab.devices): one worker process per device, each a shard of the sweep,
-- merged back into the unsharded result; a worker that dies loses only its cells (merge's
-- partial mode). On the CPU: `--devices cpu,cpu` runs the whole path with two workers.
-- --compare-devices: each worker runs the whole sweep and nl.join puts them side by side, a
-- column per variant and device; each column equals that device's own run, timings aside.
-- The executable runs through io.popen, so this spec runs under Lua 5.4 and LuaJIT alike.
local nl = require("normlab")
local helper = require("spec.helper")
local report = require("normlab.report")
local devices = require("normlab.devices")

local EXE, q, read_file, untimed = helper.EXE, helper.quote, helper.read_file, helper.untimed
local FAST = {["bench.warmup_ms"] = 1, ["bench.batch_ms"] = 1}
local unpack_ = table.unpack or unpack

-- The executable (helper.run), env a "NAME=value" prefix or nil: status, stdout, stderr.
local function run(args, env)
  return helper.run(args, {env = env})
end

local FASTE = "nl = require('normlab') nl.set('bench.warmup_ms', 1) nl.set('bench.batch_ms', 1)"
-- 2 dtypes x 3 sizes = 6 cells; worker K of 2 holds cells K, K+2, K+4.
local COMMON = {"--M", "4", "--N", "8,16,32", "--dtypes", "fp32,bf16", "--batches", "1",
  "--seed", "3"}

describe("--devices", function()
  it("parses device lists and all", function()
    assert.are.same({"cpu", "cpu"}, devices.parse("cpu,cpu"))
    assert.are.same({"cuda:0", "cuda:1"}, devices.parse("cuda, cuda:1"))
    assert.are.same({"cpu"}, devices.parse("all", function() return 0 end))
    assert.are.same({"cuda:0", "cuda:1"}, devices.parse("all", function() return 2 end))
    local l, err = devices.parse("gpu0")
    assert.is_nil(l)
    assert.truthy(err:find("'gpu0' is not cpu", 1, true), err)
    assert.is_nil((devices.parse("")))
  end)

  it("gives each worker the interpreter, its options, the script and its arguments", function()
    local a = {[-3] = "normlab", [-2] = "-e", [-1] = "x = 1", [0] = "s.lua", "--M", "4",
      "--devices", "cpu,cpu", "--json", "out.json", "--csv=out.csv", "--N", "8"}
    assert.are.same({"normlab", "-e", "x = 1", "s.lua", "--M", "4", "--N", "8", "--device", "cpu",
      "--shard", "2/3", "--json", "t.json"}, devices.worker_argv(a, "cpu", 2, 3, "t.json"))
  end)

  it("merge's partial mode makes the cells no input holds failed rows", function()
    local spec = {op = "rmsnorm.bwd", variants = {"row", "persistent"}, M = 4, N = {8, 16, 32},
      dtype = {"fp32", "bf16"}, device = "cpu", batches = 1, seed = 7, progress = false}
    local whole, s1
    helper.with_settings(FAST, function()
      whole = nl.bench(spec)
      spec.shard = {1, 2}
      s1 = nl.bench(spec)
    end)
    assert.has_error(function() nl.merge{s1} end)
    local r = nl.merge{s1, partial = {[2] = "worker 2 died"}}
    assert.are.equal(#whole.rows, #r.rows)
    for i, row in ipairs(r.rows) do
      local w = whole.rows[i]
      assert.are.same({w.variant, w.M, w.N, w.dtype}, {row.variant, row.M, row.N, row.dtype})
      local k = math.floor((i - 1) / 2) + 1 -- the cell
      if k % 2 == 1 then
        assert.are.same(untimed({w}), untimed({row}))
      else
        assert.are.equal("fail", row.status)
        assert.are.equal("worker 2 died", row.reason)
        assert.are.equal("rmsnorm", row.op)
        assert.are.equal("bwd", row.pass)
      end
    end
    assert.are.same({{shard = "2/2", reason = "worker 2 died", cells = {2, 4, 6}}}, r.meta.lost)
    assert.truthy(r:text():find("FAIL: worker 2 died", 1, true))
    -- partial = true: the reason names the shard not given
    r = nl.merge{s1, partial = true}
    assert.truthy(r.rows[3].reason:find("shard 2/2 not given", 1, true), r.rows[3].reason)
  end)

  it("a 2-worker run equals the unsharded run, timings aside", function()
    local dir = os.tmpname()
    local rc, out, err = run({"--device", "cpu", "-e", FASTE, "experiments/bwd_sweep.lua",
      "--json", dir .. ".full.json", unpack_(COMMON)})
    assert.are.equal(0, rc, err)
    local rc2, out2, err2 = run({"-e", FASTE, "experiments/bwd_sweep.lua", "--devices", "cpu,cpu",
      "--json", dir .. ".dev.json", unpack_(COMMON)})
    assert.are.equal(0, rc2, err2)
    -- one progress line for both workers, then the file written
    assert.truthy(err2:find("2 workers: cpu done, cpu done", 1, true), err2)
    assert.truthy(err2:find("wrote " .. dir .. ".dev.json", 1, true), err2)
    local f = report.from_json(read_file(dir .. ".full.json"))
    local d = report.from_json(read_file(dir .. ".dev.json"))
    assert.are.same(untimed(f.rows), untimed(d.rows))
    assert.are.same(f.meta.sweep, d.meta.sweep)
    assert.is_nil(d.meta.shard)
    assert.is_nil(d.meta.lost)
    assert.are.equal(2, #d.meta.merged)
    -- the same table: columns, rows' keys and the speedup summary
    assert.are.same(helper.table_shape(out), helper.table_shape(out2))
    assert.truthy(out2:find("persistent/row: geometric mean", 1, true), out2)
    for _, p in ipairs({".full.json", ".dev.json", ""}) do os.remove(dir .. p) end
  end)

  it("a worker that dies loses only its cells, reported failed with its stderr", function()
    local dir = os.tmpname()
    local rc, out, err = run({"-e", FASTE, "experiments/bwd_sweep.lua", "--devices", "cpu,cpu",
      "--json", dir .. ".dev.json", unpack_(COMMON)}, devices.TEST_KILL_ENV .. "=2")
    assert.are.equal(1, rc, err)
    assert.truthy(err:find("lost: worker 2/2 on cpu exited with status 9: test hook", 1, true), err)
    assert.truthy(out:find("FAIL", 1, true), out)
    local d = report.from_json(read_file(dir .. ".dev.json"))
    assert.are.equal(12, #d.rows)
    for i, row in ipairs(d.rows) do
      local k = math.floor((i - 1) / 2) + 1
      if k % 2 == 1 then
        assert.are.equal("ok", row.status)
      else
        assert.are.equal("fail", row.status)
        assert.truthy(row.reason:find("status 9", 1, true), row.reason)
        assert.truthy(row.reason:find("test hook: worker 2 exits 9", 1, true), row.reason)
      end
    end
    assert.are.same({2, 4, 6}, d.meta.lost[1].cells)
    os.remove(dir .. ".dev.json")
    os.remove(dir)
  end)

  it("refuses --devices with --shard or --device, and bad devices", function()
    local rc, _, err = run({"experiments/bwd_sweep.lua", "--devices", "cpu,cpu", "--shard", "1/2"})
    assert.are.equal(1, rc)
    assert.truthy(err:find("give --devices or --shard", 1, true), err)
    rc, _, err = run({"experiments/bwd_sweep.lua", "--devices", "cpu", "--device", "cpu"})
    assert.are.equal(1, rc)
    assert.truthy(err:find("give --devices or --device", 1, true), err)
    rc, _, err = run({"experiments/bwd_sweep.lua", "--devices", "tpu"})
    assert.are.equal(1, rc)
    assert.truthy(err:find("'tpu' is not cpu", 1, true), err)
    assert.falsy(err:find("traceback", 1, true), err)
  end)
  it("passes a SIGINT sent to the parent alone on to its workers, and waits for them", function()
    local errf, pidf = os.tmpname(), os.tmpname()
    local slow = "nl = require('normlab') nl.set('bench.warmup_ms', 50) nl.set('bench.batch_ms', 50)"
    -- a seed no other run uses, to find the workers in ps
    local seed = tostring(400000 + os.time() % 100000)
    os.execute(q(EXE) .. " -e " .. q(slow) .. " experiments/bwd_sweep.lua --devices cpu,cpu " ..
      "--M 4 --N 8..4096 --dtypes fp32,bf16 --seed " .. seed .. " </dev/null >/dev/null 2>" ..
      q(errf) .. " & echo $! >" .. q(pidf))
    local pid = read_file(pidf):match("%d+")
    local function workers()
      -- the workers' command lines start with the executable (not sh, not grep)
      -- (ps without the sanitizer runtime that test-asan preloads: it hangs there)
      local p = io.popen("LD_PRELOAD= ps -ww -eo args | grep -c -- '^[^ ]*normlab .*--seed " .. seed ..
        " --device cpu'")
      local n = tonumber(p:read("*a"):match("%d+")) or 0
      p:close()
      return n
    end
    local function alive()
      return os.execute("kill -0 " .. pid .. " 2>/dev/null")
    end
    -- up to 30 s, ending as soon as the condition holds: 10 s once ran out in a local run of
    -- the CPU specs on 2 cores (which wait was not recorded)
    local function wait_until(cond)
      for _ = 1, 300 do
        if cond() then return true end
        os.execute("sleep 0.1")
      end
      return false
    end
    assert.is_true(wait_until(function() return workers() == 2 end), read_file(errf))
    os.execute("kill -INT " .. pid)
    -- os.execute's status is true (5.4) or 0 (LuaJIT) while the parent lives
    assert.is_true(wait_until(function() local a = alive(); return not (a == true or a == 0) end),
      "the parent still runs 30 s after SIGINT: " .. read_file(errf))
    assert.are.equal(0, workers())
    assert.truthy(read_file(errf):find("interrupted", 1, true), read_file(errf))
    os.remove(errf)
    os.remove(pidf)
  end)
end)

-- The rows of a joined result's column group label, as the run of that device wrote them:
-- the variant without "@label", without the fields join adds.
local function column(rows, label)
  local out = {}
  for _, row in ipairs(rows) do
    local v = tostring(row.variant)
    if v:sub(-#label - 1) == "@" .. label then
      local t = {}
      for k, x in pairs(row) do t[k] = x end
      t.variant = v:sub(1, -#label - 2)
      t.device, t.device_name, t.roofline_gbps = nil, nil, nil
      out[#out + 1] = t
    end
  end
  return out
end

describe("--compare-devices", function()
  local spec = {op = "rmsnorm.bwd", variants = {"row", "persistent"}, M = 4, N = {8, 16, 32},
    dtype = {"fp32", "bf16"}, device = "cpu", batches = 1, seed = 7, progress = false}
  local function bench(extra)
    local s = {}
    for k, v in pairs(spec) do s[k] = v end
    for k, v in pairs(extra or {}) do s[k] = v end
    local r
    helper.with_settings(FAST, function() r = nl.bench(s) end)
    return r
  end
  local a, b

  local function refuses(inputs, pattern)
    local ok, err = pcall(nl.join, inputs)
    assert.is_false(ok, "join should refuse: " .. pattern)
    assert.truthy(tostring(err):find(pattern, 1, true), tostring(err))
  end

  it("nl.join puts whole runs side by side, a column per variant and device", function()
    a, b = bench(), bench()
    local j = nl.join{a, b}
    assert.are.equal(2 * #a.rows, #j.rows)
    -- cell by cell, then variant, then run
    assert.are.same({"row@cpu", "row@cpu#2", "persistent@cpu", "persistent@cpu#2"},
      {j.rows[1].variant, j.rows[2].variant, j.rows[3].variant, j.rows[4].variant})
    assert.are.same(untimed(a.rows), untimed(column(j.rows, "cpu")))
    assert.are.same(untimed(b.rows), untimed(column(j.rows, "cpu#2")))
    for _, row in ipairs(j.rows) do
      assert.are.equal("cpu", row.device)
      assert.are.equal(nl.device("cpu").info.name, row.device_name)
    end
    assert.are.equal(b.meta.roofline_gbps, j.rows[2].roofline_gbps)
    -- each device's identity, no device of its own
    assert.are.same({"cpu", "cpu#2"}, {j.meta.sources[1].label, j.meta.sources[2].label})
    assert.are.same(b.meta.device_info, j.meta.sources[2].device_info)
    assert.are.same(b.meta.settings, j.meta.sources[2].settings)
    assert.is_nil(j.meta.device)
    assert.is_nil(j.meta.sweep)
    assert.are.same(a.meta.sweep, j.meta.joined.sweep)
    local head = j:text():match("^[^\n]*\n[^\n]*")
    assert.truthy(head:find("cpu (" .. nl.device("cpu").info.name .. "), cpu#2 (", 1, true), head)
    assert.truthy(head:find("roofline cpu ", 1, true), head)
    assert.truthy(head:find(", cpu#2 ", 1, true), head)
    -- labels given; a device that runs other variants has only those columns
    local c = nl.join{a, bench({variants = {"row"}}), labels = {"h100", "h200"}}
    assert.are.same({"row@h100", "row@h200", "persistent@h100"},
      {c.rows[1].variant, c.rows[2].variant, c.rows[3].variant})
    assert.are.equal(#a.rows + #a.rows / 2, #c.rows)
  end)

  it("nl.join makes a lost run's cells failed rows, once noted", function()
    a = a or bench()
    local j = nl.join{a, {device = "cuda:1", lost = "worker 2/2 on cuda:1 exited with status 9"}}
    local lost = column(j.rows, "cuda:1")
    assert.are.equal(#a.rows, #lost)
    for i, row in ipairs(lost) do
      assert.are.same({a.rows[i].variant, a.rows[i].M, a.rows[i].N, a.rows[i].dtype, "rmsnorm", "bwd"},
        {row.variant, row.M, row.N, row.dtype, row.op, row.pass})
      assert.are.equal("fail", row.status)
      assert.is_true(row.lost)
    end
    assert.are.same({{label = "cuda:1", device = "cuda:1",
      reason = "worker 2/2 on cuda:1 exited with status 9"}}, j.meta.lost)
    local text = j:text()
    assert.truthy(text:find("cuda:1 (lost)", 1, true), text)
    local _, notes = text:gsub("FAIL, lost: worker 2/2 on cuda:1", "")
    assert.are.equal(1, notes, text)
  end)

  it("nl.join refuses shards, other sweeps, bad labels and lost-only inputs", function()
    a = a or bench()
    refuses({a, bench({shard = {1, 2}})}, "join: result 2 is shard 1/2 of its sweep: join takes " ..
      "whole runs (merge its shards first)")
    refuses({a, bench({seed = 8})}, "join: result 1 and result 2 are not runs of one sweep: seed " ..
      "is 7 in result 1 but 8 in result 2")
    refuses({a, a, labels = {"x"}}, "join: labels must be a list of 2 strings, one per input")
    refuses({a, a, labels = {"x", "x@y"}}, "join: label 2 must be a non-empty string without '@'")
    refuses({a, a, labels = {"x", "x"}}, "join: label 'x' is given twice (inputs 1 and 2)")
    refuses({{device = "cpu", lost = "gone"}}, "join: every input is lost: nothing to join")
    refuses({a, {device = 1, lost = "gone"}}, "join: input 2: a lost run is {device =")
    refuses({a, bogus = 1}, "join: unknown option 'bogus'")
    refuses({}, "join: no inputs")
    refuses({nl.join{a, a}}, "join: result 1 joins the runs of several devices (--compare-devices)")
    local ok, err = pcall(nl.merge, {nl.join{a, a}})
    assert.is_false(ok)
    assert.truthy(tostring(err):find("merge: result 1 joins the runs of several devices", 1, true), err)
  end)

  it("each column of `--devices cpu,cpu --compare-devices` equals that device's own run", function()
    local dir = os.tmpname()
    local rc, _, err = run({"--device", "cpu", "-e", FASTE, "experiments/bwd_sweep.lua",
      "--json", dir .. ".full.json", unpack_(COMMON)})
    assert.are.equal(0, rc, err)
    local rc2, out2, err2 = run({"-e", FASTE, "experiments/bwd_sweep.lua", "--devices", "cpu,cpu",
      "--compare-devices", "--json", dir .. ".cmp.json", "--csv", dir .. ".cmp.csv",
      "--markdown", dir .. ".cmp.md", unpack_(COMMON)})
    assert.are.equal(0, rc2, err2)
    assert.truthy(err2:find("2 workers: cpu done, cpu done", 1, true), err2)
    local f = report.from_json(read_file(dir .. ".full.json"))
    local d = report.from_json(read_file(dir .. ".cmp.json"))
    -- every worker ran every cell: each column group is the whole run
    assert.are.same(untimed(f.rows), untimed(column(d.rows, "cpu")))
    assert.are.same(untimed(f.rows), untimed(column(d.rows, "cpu#2")))
    assert.are.same(f.meta.sweep, d.meta.joined.sweep)
    for i = 1, 2 do
      local s = d.meta.sources[i]
      assert.are.same(f.meta.device_info, s.device_info)
      assert.is_true(s.roofline_gbps > 0)
    end
    -- the table: a column per variant and device, each device's speedup pair
    assert.are.same({"M", "N", "dtype", "row@cpu", "row@cpu#2", "persistent@cpu", "persistent@cpu#2",
      "persistent@cpu/row@cpu", "persistent@cpu#2/row@cpu#2"}, helper.table_shape(out2).cols)
    assert.truthy(out2:find("roofline cpu ", 1, true), out2)
    -- markdown and CSV carry every device's figures and identity
    local md = read_file(dir .. ".cmp.md")
    assert.truthy(md:find("| M | N | dtype | row@cpu | row@cpu#2 | persistent@cpu |", 1, true), md)
    assert.truthy(md:find("cpu#2 (" .. f.meta.device_info.name .. ")", 1, true), md)
    local csv = read_file(dir .. ".cmp.csv")
    assert.truthy(csv:find("^op,pass,variant,resolved,device,device_name,roofline_gbps,"), csv)
    assert.truthy(csv:find("\nrmsnorm,bwd,row@cpu#2,rmsnorm.bwd.row,cpu," .. f.meta.device_info.name
      .. ",", 1, true), csv)
    for _, p in ipairs({".full.json", ".cmp.json", ".cmp.csv", ".cmp.md", ""}) do os.remove(dir .. p) end
  end)

  it("a worker that dies fails its column only", function()
    local dir = os.tmpname()
    local rc, out, err = run({"-e", FASTE, "experiments/bwd_sweep.lua", "--devices", "cpu,cpu",
      "--compare-devices", "--json", dir .. ".cmp.json", unpack_(COMMON)},
      devices.TEST_KILL_ENV .. "=2")
    assert.are.equal(1, rc, err)
    assert.truthy(err:find("lost: worker 2/2 on cpu exited with status 9: test hook", 1, true), err)
    assert.truthy(out:find("cpu#2 (lost)", 1, true), out)
    local d = report.from_json(read_file(dir .. ".cmp.json"))
    assert.are.equal(24, #d.rows)
    for _, row in ipairs(column(d.rows, "cpu")) do assert.are.equal("ok", row.status) end
    for _, row in ipairs(column(d.rows, "cpu#2")) do
      assert.are.equal("fail", row.status)
      assert.truthy(row.reason:find("test hook: worker 2 exits 9", 1, true), row.reason)
    end
    assert.are.equal("cpu#2", d.meta.lost[1].label)
    os.remove(dir .. ".cmp.json")
    os.remove(dir)
  end)

  it("refuses --compare-devices without --devices", function()
    local rc, _, err = run({"experiments/bwd_sweep.lua", "--compare-devices"})
    assert.are.equal(1, rc)
    assert.truthy(err:find("--compare-devices needs --devices", 1, true), err)
    assert.falsy(err:find("traceback", 1, true), err)
    assert.are.same({"s.lua", "--M", "4", "--device", "cpu", "--json", "t.json"},
      devices.worker_argv({[0] = "s.lua", "--devices", "cpu,cpu", "--compare-devices", "--M", "4"},
        "cpu", 1, 2, "t.json", true))
  end)
end)
