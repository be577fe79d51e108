-- Slurm (tools/slurm): a sweep run as a job array, a shard per task (sweep.sbatch), and put
-- back together by a job that depends on the array (merge.sbatch) equals the unsharded run,
-- timings aside. Against a real slurmctld and slurmd: tools/slurm/local-cluster.sh starts a
-- one-node cluster on localhost for the test (as root, with Debian's slurm-wlm and munge);
-- where it cannot, the test is pending and says why. Tagged #slurm: `make test` runs it once,
-- under Lua 5.4 (test-c). How sweep.sbatch numbers the shards, and what the two scripts
-- refuse, is checked without Slurm (the task's variables set by hand).
local helper = require("spec.helper")
local report = require("normlab.report")

local q, read_file, untimed = helper.quote, helper.read_file, helper.untimed
local unpack_ = table.unpack or unpack

local CLUSTER = "tools/slurm/local-cluster.sh"
-- One CPU thread: a task is bound to the CPU Slurm gave it, and the threads set each row's grid.
local FASTE = "nl = require('normlab') nl.set('bench.warmup_ms', 1) nl.set('bench.batch_ms', 1) " ..
  "nl.set('cpu.threads', 1)"
-- normlab's arguments: 2 dtypes x 3 sizes = 6 cells, 2 in each shard of 3
local SWEEP = {"-e", FASTE, "experiments/fwd_sweep.lua", "--device", "cpu", "--M", "4", "--N",
  "8,16,32", "--dtypes", "fp32,bf16", "--batches", "1", "--seed", "3"}

-- A shell command line: status, stdout, stderr.
local function sh(line, env)
  return helper.run({"-c", line}, {exe = "sh", env = env})
end

describe("tools/slurm", function()
  it("sweep.sbatch runs the task's place in the array's range as shard K/N", function()
    local dir, fake = os.tmpname(), os.tmpname()
    os.remove(dir)
    -- a normlab that shows its arguments
    helper.write_file(fake, "#!/bin/sh\nfor a; do printf '[%s]' \"$a\"; done\n")
    os.execute("chmod +x " .. q(fake))
    -- id, min, max, count, step -> the shard
    local function task(id, min, max, count, step)
      local env = string.format("NORMLAB_EXE=%s SLURM_ARRAY_TASK_ID=%d " ..
        "SLURM_ARRAY_TASK_MIN=%d SLURM_ARRAY_TASK_MAX=%d SLURM_ARRAY_TASK_COUNT=%d " ..
        "SLURM_ARRAY_TASK_STEP=%d", q(fake), id, min, max, count, step)
      return helper.run({"tools/slurm/sweep.sbatch", dir, "-e", "x = 1", "s.lua", "--M", "4"},
        {exe = "bash", env = env})
    end
    local rc, out, err = task(0, 0, 3, 4, 1)
    assert.are.equal(0, rc, err)
    assert.are.equal("[-e][x = 1][s.lua][--M][4][--shard][1/4][--json][" .. dir ..
      "/shard-1-of-4.json]", out)
    assert.truthy(select(2, task(4, 1, 4, 4, 1)):find("[--shard][4/4]", 1, true))
    assert.truthy(select(2, task(30, 10, 40, 4, 10)):find("[--shard][3/4][--json][" .. dir ..
      "/shard-3-of-4.json]", 1, true))
    -- --array=2,5,9: three tasks, no range
    rc, out, err = task(5, 2, 9, 3, 1)
    assert.are.equal(2, rc)
    assert.are.equal("", out)
    assert.truthy(err:find("sweep.sbatch: the array must be a range (--array=1-3, or lo-hi:step), " ..
      "not a list: task 5 of 2..9 has no place K of 3", 1, true), err)
    rc, _, err = helper.run({"tools/slurm/sweep.sbatch", dir, "s.lua"}, {exe = "bash"})
    assert.are.equal(2, rc)
    assert.truthy(err:find("not a task of a job array: submit with sbatch --array=1-N", 1, true), err)
    rc, _, err = helper.run({"tools/slurm/merge.sbatch", dir}, {exe = "bash",
      env = "NORMLAB_EXE=" .. q(fake)})
    assert.are.equal(2, rc)
    assert.truthy(err:find("merge.sbatch: no shards in " .. dir, 1, true), err)
    os.execute("rm -rf " .. q(dir) .. " " .. q(fake))
  end)

  it("#slurm a job array of shards and a dependent merge give the unsharded run", function()
    local base = os.tmpname()
    local cluster, dir = base .. ".cluster", base .. ".run"
    local rc, out, err = helper.run({"start", cluster}, {exe = CLUSTER})
    if rc ~= 0 then
      os.remove(base)
      pending(string.format("no local Slurm cluster here (%s start, status %d): %s", CLUSTER, rc,
        (err:gsub("%s+$", ""))))
    end
    finally(function()
      helper.run({"stop", cluster}, {exe = CLUSTER})
      os.execute("rm -rf " .. q(dir) .. " " .. q(base) .. " " .. q(base .. ".full.json"))
    end)
    assert.truthy(out:find("export SLURM_CONF=" .. cluster .. "/slurm.conf", 1, true), out)
    local env = "SLURM_CONF=" .. q(cluster .. "/slurm.conf") .. " NORMLAB_EXE=" .. q(helper.EXE)
    os.execute("mkdir -p " .. q(dir))
    local array
    rc, array, err = helper.run({"--parsable", "--array=1-3", "-o", dir .. "/%x-%A_%a.out",
      "tools/slurm/sweep.sbatch", dir, unpack_(SWEEP)}, {exe = "sbatch", env = env})
    assert.are.equal(0, rc, err)
    array = array:match("^(%d+)")
    local merge
    rc, merge, err = helper.run({"--parsable", "--dependency=afterok:" .. array,
      "--kill-on-invalid-dep=yes", "-o", dir .. "/merge.out", "tools/slurm/merge.sbatch", dir,
      "--markdown", dir .. "/merged.md"}, {exe = "sbatch", env = env})
    assert.are.equal(0, rc, err)
    merge = merge:match("^(%d+)")
    -- every job leaves the queue (3 minutes at most), then says how it ended
    local jobs = array .. "," .. merge
    rc = sh("i=0; while [ -n \"$(squeue -h -j " .. jobs .. " -o %i)\" ]; do " ..
      "[ $i -ge 900 ] && exit 1; i=$((i + 1)); sleep 0.2; done", env)
    local _, states = sh("scontrol -o show job " .. array .. "; scontrol -o show job " .. merge, env)
    local outputs = {}
    for _, f in ipairs({"normlab-sweep-" .. array .. "_1.out", "normlab-sweep-" .. array .. "_2.out",
        "normlab-sweep-" .. array .. "_3.out", "merge.out"}) do
      outputs[#outputs + 1] = "== " .. f .. "\n" .. read_file(dir .. "/" .. f)
    end
    local why = states .. table.concat(outputs, "\n")
    assert.are.equal(0, rc, "jobs still queued after 3 minutes:\n" .. why)
    local n = 0
    for state in states:gmatch("JobState=(%S+)") do
      assert.are.equal("COMPLETED", state, why)
      n = n + 1
    end
    assert.are.equal(4, n, why)

    -- the unsharded run, here
    local args = {unpack_(SWEEP)}
    args[#args + 1] = "--json"
    args[#args + 1] = base .. ".full.json"
    rc, out, err = helper.run(args)
    assert.are.equal(0, rc, err)
    local full = report.from_json(read_file(base .. ".full.json"))
    local merged = report.from_json(read_file(dir .. "/merged.json"))
    assert.are.same(untimed(full.rows), untimed(merged.rows))
    assert.are.same(full.meta.sweep, merged.meta.sweep)
    assert.are.same(full.meta.print, merged.meta.print)
    assert.is_nil(merged.meta.shard)
    local parts = {}
    for i, m in ipairs(merged.meta.merged) do parts[i] = m.shard end
    assert.are.same({"1/3", "2/3", "3/3"}, parts)
    -- each task ran its shard: cells K and K + 3
    for k = 1, 3 do
      local s = report.from_json(read_file(string.format("%s/shard-%d-of-3.json", dir, k)))
      assert.are.same({index = k, count = 3, cells = {k, k + 3}}, s.meta.shard)
    end
    -- the merge job printed the unsharded table and wrote the markdown asked for
    assert.are.same(helper.table_shape(out), helper.table_shape(read_file(dir .. "/merge.out")))
    assert.truthy(read_file(dir .. "/merged.md"):find("| M | N | dtype | row |", 1, true))
  end)
end)
