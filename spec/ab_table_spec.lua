-- tools/ab_table.lua, the table of a tools/ab.sh run, over sweeps' JSON written here with known
-- figures: each build's mean over its rounds, the change against the first build, the spread
-- of the rounds, a cell's status where it did not run, the geometric mean; bad command lines.
local report = require("normlab.report")
local helper = require("spec.helper")

local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p " .. helper.quote(dir))

-- one sweep's JSON: rmsnorm.fwd, bf16, M 4096, the given N -> GB/s (or a status string)
local function sweep(name, cells)
  local rows = {}
  for _, c in ipairs(cells) do
    local n, v = c[1], c[2]
    rows[#rows + 1] = {op = "rmsnorm", pass = "fwd", dtype = "bf16", M = 4096, N = n, variant = "auto",
      status = type(v) == "number" and "ok" or v, gbps = type(v) == "number" and v or nil}
  end
  report.new(rows, {roofline_gbps = 4000}):json(dir .. "/" .. name .. ".json")
end

describe("tools/ab_table.lua", function()
  teardown(function() os.execute("rm -rf " .. helper.quote(dir)) end)

  it("prints each build's mean, its change against the first and the geometric mean", function()
    sweep("old1", {{1024, 2000}, {2048, 3000}, {4096, 3000}})
    sweep("old2", {{1024, 2000}, {2048, 3000}, {4096, 3000}})
    sweep("new1", {{1024, 2100}, {2048, 3000}, {4096, "skip"}})
    sweep("new2", {{1024, 2300}, {2048, 3000}, {4096, 3300}})
    local rc, out, err = helper.run({"tools/ab_table.lua", "--dir", dir, "old", "new"})
    assert.are.equal(0, rc, err)
    -- 1024: mean 2200 (55% of 4000), +10.0%, rounds 2100 and 2300 (half the spread 4.5%)
    assert.truthy(out:find("rmsnorm.fwd%s+bf16%s+4096%s+1024%s+auto%s+2000 %(50%%%)%s+2200 %(55%%%) %+10.0%% ±4.5%%"), out)
    assert.truthy(out:find("2048%s+auto%s+3000 %(75%%%)%s+3000 %(75%%%) %+0.0%%\n"), out)
    assert.truthy(out:find("4096%s+auto%s+3000 %(75%%%)%s+skip\n"), out)
    -- over the two cells both ran: sqrt(1.1 * 1.0)
    assert.truthy(out:find(("new / old: geometric mean %.3fx over 2 cells"):format(math.sqrt(1.1)), 1, true), out)
  end)

  it("takes LABEL=FILE,FILE and writes markdown", function()
    local rc, out, err = helper.run({"tools/ab_table.lua", "--markdown", "a=" .. dir .. "/old1.json",
      "b=" .. dir .. "/new1.json," .. dir .. "/new2.json"})
    assert.are.equal(0, rc, err)
    assert.truthy(out:find("| op | dtype | M | N | variant | a | b (change) |", 1, true), out)
    assert.truthy(out:find("| rmsnorm.fwd | bf16 | 4096 | 1024 | auto | 2000 (50%) | 2200 (55%) +10.0% ±4.5% |",
      1, true), out)
  end)

  it("refuses a file it cannot read, one build alone and a label given twice", function()
    local rc, _, err = helper.run({"tools/ab_table.lua", "a=" .. dir .. "/none.json", "b=" .. dir .. "/old1.json"})
    assert.are.equal(2, rc)
    assert.truthy(err:find("cannot read " .. dir .. "/none.json", 1, true), err)
    rc, _, err = helper.run({"tools/ab_table.lua", "--dir", dir, "old"})
    assert.are.equal(2, rc)
    assert.truthy(err:find("two builds or more", 1, true), err)
    rc, _, err = helper.run({"tools/ab_table.lua", "--dir", dir, "old", "old"})
    assert.are.equal(2, rc)
    assert.truthy(err:find("the label 'old' is given twice", 1, true), err)
    rc, _, err = helper.run({"tools/ab_table.lua", "--dir", dir, "old", "nothing"})
    assert.are.equal(2, rc)
    assert.truthy(err:find("no " .. dir .. "/nothing1.json", 1, true), err)
  end)
end)
