-- tools/fuzz.lua, the seeded randomized differential tester, on the CPU backend: its random
-- cases pass against the reference (and some really run), a case is drawn alike whatever was
-- drawn before it and under both bindings (the generator is pinned), the checker compares
-- (a zero tolerance fails) and counts a refusal as a skip, and the script's command line.
local nl = require("normlab")
local helper = require("spec.helper")
local fuzz = require("tools.fuzz")

local cpu = nl.device("cpu")

-- The failures of a run, one line each, for the assertion's message.
local function failures(s)
  local lines = {}
  for i, f in ipairs(s.failures) do
    lines[i] = string.format("case %d: %s: %s", f.case.index, fuzz.describe(f.case),
      f.result.reason)
  end
  return table.concat(lines, "\n")
end

describe("tools/fuzz.lua", function()
  it("runs random cases of every op and pass against the reference with no failure", function()
    local s = fuzz.run(cpu, {seed = 7, cases = 150, max_elems = 2e5})
    assert.are.equal(0, s.failed, failures(s))
    assert.are.equal(150, s.ran)
    assert.is_true(s.passed >= 100, s.passed .. " of 150 passed")
    for _, op in ipairs(fuzz.OPS) do
      for _, pass in ipairs(fuzz.PASSES) do
        assert.is_not_nil(s.passes[op .. "." .. pass], op .. "." .. pass .. " never passed")
      end
    end
  end)

  it("with runtime settings, fp8 outputs and transposed copies", function()
    local s = fuzz.run(cpu, {seed = 8, cases = 40, max_elems = 5e4, settings = true, fp8 = true})
    assert.are.equal(0, s.failed, failures(s))
    assert.is_true(s.passed >= 20, s.passed .. " of 40 passed")
  end)

  it("draws case K alike, whatever was drawn before it; other indices and seeds differ", function()
    local sp = fuzz.space(cpu, {settings = true, fp8 = true})
    local c = fuzz.case(sp, 7, 42)
    for k = 1, 41 do
      fuzz.case(sp, 7, k)
    end
    assert.are.same(c, fuzz.case(sp, 7, 42))
    assert.are.same(c, fuzz.case(fuzz.space(cpu, {settings = true, fp8 = true}), 7, 42))
    assert.are_not.same(c, fuzz.case(sp, 7, 43))
    assert.are_not.same(c, fuzz.case(sp, 8, 42))
    -- what a run checks as case 42, and what `--seed 7 --case 42` runs alone
    local seen = {}
    fuzz.run(cpu, {seed = 7, first = 41, cases = 2, settings = true, fp8 = true,
      each = function(case) seen[case.index] = case end})
    assert.are.same(c, seen[42])
  end)

  it("has a pinned generator: the same numbers under Lua 5.4 and LuaJIT", function()
    local rng, got = fuzz.rng(7, 42), {}
    for i = 1, 6 do
      got[i] = rng:int(1, 1000000)
    end
    got[7] = rng:log_int(1, 70000)
    assert.are.same({38395, 278693, 484148, 563940, 98262, 159388, 241}, got)
  end)

  it("compares every output: a zero tolerance fails, naming the output", function()
    local sp = fuzz.space(cpu, {ops = {"rmsnorm"}, passes = {"bwd"}})
    local c = fuzz.case(sp, 1, 1)
    c.variant, c.M, c.N, c.dtype, c.weight, c.reduce, c.inplace = "row", 64, 1000, "bf16", "fp32",
      "default", false
    local r = fuzz.check(c, cpu)
    assert.are.equal("pass", r.status, r.reason)
    assert.are.same({"dx", "dw"}, {r.outputs[1].name, r.outputs[2].name})
    r = fuzz.check(c, cpu, {tolerance = function() return 0, 0 end})
    assert.are.equal("fail", r.status)
    assert.truthy(r.reason:find("^dx: FAIL") or r.reason:find("^dw: FAIL"), r.reason)
  end)

  it("counts a refusal as a skip, with the variant's reason", function()
    local sp = fuzz.space(cpu, {ops = {"rmsnorm"}, passes = {"fwd"}, fp8 = true})
    local c, tile_m = fuzz.case(sp, 1, 1), nl.get("transpose.tile_m")
    c.variant, c.transpose, c.settings = "row", "external", {{"transpose.tile_m", 48}}
    local r = fuzz.check(c, cpu)
    assert.are.equal("skip", r.status)
    assert.truthy(r.reason:find("is not of powers of two", 1, true), r.reason)
    -- the case's settings hold for that case only
    assert.are.equal(tile_m, nl.get("transpose.tile_m"))
  end)

  it("stops at --time-s", function()
    local s = fuzz.run(cpu, {cases = 5, time_s = 0})
    assert.are.equal(0, s.ran)
    assert.truthy(s.stopped:find("--time-s", 1, true))
  end)

  it("runs as a script: the summary, status 0; --case K prints the case and its comparisons",
    function()
      local rc, out, err = helper.run({"tools/fuzz.lua", "--device", "cpu", "--cases", "20",
        "--max-elems", "1e4", "--seed", "3"})
      assert.are.equal(0, rc, err)
      assert.truthy(out:find("fuzz: 20 cases on cpu in %d+ s: %d+ passed, %d+ skipped, 0 failed "
        .. "%(seed 3%)"), out)
      rc, out, err = helper.run({"tools/fuzz.lua", "--device", "cpu", "--max-elems", "1e4",
        "--seed", "3", "--case", "5"})
      assert.are.equal(0, rc, err)
      local line = fuzz.describe(fuzz.case(fuzz.space(cpu, {max_elems = 1e4}), 3, 5))
      assert.truthy(out:find("case 5 pass: " .. line:gsub("%p", "%%%0")), out)
      assert.truthy(out:find("\n  dx%s+ok n=%d+"), out)
      rc, out, err = helper.run({"tools/fuzz.lua", "--device", "cpu", "--ops", "groupnorm"})
      assert.are.equal(1, rc)
      assert.truthy(err:find("--ops: unknown 'groupnorm'", 1, true), err)
    end)
end)
