-- --devices (normlab.devices): one worker process per device, each a shard of the sweep,
-- merged back into the unsharded result; a worker that dies loses only its cells (merge's
-- partial mode). On the CPU: `--devices cpu,cpu` runs the whole path with two workers.
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
    -- the same table: header line, rows' keys and the speedup summary
    local function keys(text)
      local t = {}
      for line in text:gmatch("\n%s*(%d+%s+%d+%s+%w+)%s") do t[#t + 1] = line end
      return t
    end
    assert.are.same(keys(out), keys(out2))
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
    local function wait_until(cond)
      for _ = 1, 100 do
        if cond() then return true end
        os.execute("sleep 0.1")
      end
      return false
    end
    assert.is_true(wait_until(function() return workers() == 2 end), read_file(errf))
    os.execute("kill -INT " .. pid)
    -- os.execute's status is true (5.4) or 0 (LuaJIT) while the parent lives
    assert.is_true(wait_until(function() local a = alive(); return not (a == true or a == 0) end))
    assert.are.equal(0, workers())
    assert.truthy(read_file(errf):find("interrupted", 1, true), read_file(errf))
    os.remove(errf)
    os.remove(pidf)
  end)
end)
