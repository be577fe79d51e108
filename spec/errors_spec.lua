-- Bad input gets a clear error, reported at the caller's line, and changes nothing: outputs
-- passed in keep their contents and settings keep their values. NaN and Inf inputs are data,
-- not errors: they flow through to NaN/Inf outputs.
local nl = require("normlab")
local helper = require("spec.helper")

local cpu = nl.device("cpu")
local raises = helper.raises
local it_cuda = helper.cuda and it or pending

-- Buffers of one test, freed together.
local keep = helper.keeper(after_each)

local function sentinel(shape, dtype)
  return keep(cpu:full(shape, 7, dtype))
end

local function untouched(b)
  for _, v in ipairs(helper.flat(b)) do
    if v ~= 7 then
      return false
    end
  end
  return true
end

local function inputs(M, N, dtype)
  local x = keep(cpu:randn({M, N}, dtype or "fp32", {seed = 11}))
  local w = keep(cpu:randn({N}, "fp32", {seed = 12, mean = 1, std = 0.1}))
  return x, w
end

describe("shapes", function()
  it("a weight of the wrong length is named, and the given outputs are untouched", function()
    local x = inputs(4, 8)
    local w = keep(cpu:full({7}, 1))
    local y, rstd = sentinel({4, 8}), sentinel({4})
    raises("rmsnorm.fwd.auto: argument 'w' has 7 elements, x has rows of 8",
      nl.rmsnorm, x, w, {out = y, rstd = rstd})
    assert.is_true(untouched(y))
    assert.is_true(untouched(rstd))
  end)

  it("mismatched activations in a backward pass leave dx and dw untouched", function()
    local x, w = inputs(4, 8)
    local dy = keep(cpu:randn({4, 9}))
    local rstd = keep(cpu:full({4}, 1))
    local dx, dw = sentinel({4, 8}), sentinel({8})
    raises("rmsnorm.bwd.row: argument 'dy' is [4, 9] but x is [4, 8]",
      nl.rmsnorm_bwd, dy, x, w, rstd, {variant = "row", dx = dx, dw = dw})
    assert.is_true(untouched(dx))
    assert.is_true(untouched(dw))
  end)

  it("rstd must hold one value per row", function()
    local x, w = inputs(4, 8)
    raises("rmsnorm.fwd.auto: argument 'rstd' must be a 1-D buffer of 4 elements (one per row)",
      nl.rmsnorm, x, w, {rstd = keep(cpu:empty({5}))})
  end)

  it("zero, negative, fractional and 3-D sizes are refused", function()
    for _, shape in ipairs({0, {0, 4}, {4, -1}, {2.5}, {1, 2, 3}, {}, "4"}) do
      local ok, err = pcall(cpu.empty, cpu, shape)
      assert.is_false(ok)
      assert.truthy(err:find("empty: shape must be N or {N} or {M, N} with positive integer sizes",
        1, true), err)
    end
  end)

  it("a buffer too large to address is refused with its size", function()
    raises("buffer of 1073741824 x 1073741824 elements is too large",
      cpu.empty, cpu, {2 ^ 30, 2 ^ 30})
  end)
end)

describe("dtypes", function()
  it("unknown dtype names are listed", function()
    raises("empty: unknown dtype 'float8' (expected fp32, fp16, bf16, fp8e4m3, fp8e5m2, fp64)",
      cpu.empty, cpu, 4, "float8")
  end)

  it("weights must be fp32 or x's dtype", function()
    local x = inputs(4, 8, "bf16")
    local w = keep(cpu:full({8}, 1, "fp16"))
    local y = sentinel({4, 8}, "bf16")
    raises("rmsnorm.fwd.auto: argument 'w' is fp16; weights are fp32 or x's dtype (bf16)",
      nl.rmsnorm, x, w, {out = y})
    assert.is_true(untouched(y))
  end)

  it("activations share one dtype", function()
    local x, w = inputs(4, 8)
    local r = keep(cpu:randn({4, 8}, "fp16"))
    local y, ro = sentinel({4, 8}), sentinel({4, 8})
    raises("add_rmsnorm.fwd.auto: argument 'residual' is fp16 but x is fp32 "
      .. "(activations share one dtype)",
      nl.add_rmsnorm, x, r, w, {out = y, residual_out = ro})
    assert.is_true(untouched(y))
    assert.is_true(untouched(ro))
  end)

  it("a dtype a variant cannot run is a skip reason, not a crash", function()
    local x = keep(cpu:randn({4, 8}, "fp64"))
    local ok, why = nl.supports("rmsnorm.fwd.row", {x = x, y = keep(cpu:empty({4, 8}, "fp64")),
      eps = 1e-6})
    assert.is_false(ok)
    assert.are.equal("rmsnorm.fwd.row: dtype fp64 is not supported (it takes fp32, fp16, bf16)",
      why)
  end)
end)

describe("devices", function()
  it("unknown devices are named", function()
    raises("normlab: unknown device 'tpu' (expected cpu, cuda, cuda:N, auto or a Device)",
      nl.device, "tpu")
    local ok, err = pcall(nl.device, "cuda:99")
    assert.is_false(ok)
    assert.truthy(err:find("normlab: no CUDA device cuda:99", 1, true), err)
  end)

  it_cuda("#cuda mixing a CPU x with a CUDA w is refused and changes nothing", function()
    local x = inputs(4, 8)
    local w = keep(helper.cuda:full({8}, 1))
    local y = sentinel({4, 8})
    raises("rmsnorm.fwd.auto: argument 'w' is on " .. helper.cuda.name .. " but x is on cpu",
      nl.rmsnorm, x, w, {out = y})
    assert.is_true(untouched(y))
  end)

  it_cuda("#cuda fp64 buffers live on the CPU only", function()
    raises("fp64 buffers live on the CPU only (asked for " .. helper.cuda.name .. ")",
      helper.cuda.empty, helper.cuda, 4, "fp64")
  end)
end)

describe("freed buffers", function()
  it("passed to an op are named", function()
    local x, w = inputs(4, 8)
    local dead = cpu:empty({4, 8})
    dead:free()
    raises("rmsnorm: argument 'x': buffer was freed", nl.rmsnorm, dead, w)
    local dead_w = cpu:empty({8})
    dead_w:free()
    raises("rmsnorm: argument 'w': buffer was freed", nl.rmsnorm, x, dead_w)
    raises("rmsnorm: argument 'out': buffer was freed", nl.rmsnorm, x, w, {out = dead})
    raises("argument 'x': buffer was freed", nl.run, "rmsnorm.fwd.ref", {x = dead, eps = 1e-6})
    raises("compare: argument 'ref': buffer was freed", nl.compare, x, dead)
  end)

  it("values of the wrong type are named", function()
    local _, w = inputs(4, 8)
    raises("rmsnorm: argument 'x' must be a buffer, got number", nl.rmsnorm, 42, w)
    raises("rmsnorm: argument 'x' is required", nl.rmsnorm, nil, w)
    raises("rmsnorm: options must be a table, got string", nl.rmsnorm, w, w, "fast")
  end)
end)

describe("options", function()
  it("unknown keys are listed with the expected ones", function()
    local x, w = inputs(4, 8)
    local y = sentinel({4, 8})
    raises("unknown option 'epsilon' for rmsnorm (expected: eps, variant, cast, offset, out, rstd, "
      .. "out_dtype, scale, amax, scaling, transpose, yt)",
      nl.rmsnorm, x, w, {epsilon = 1e-5, out = y})
    assert.is_true(untouched(y))
    raises("unknown option 'dres' for rmsnorm_bwd (expected: variant, reduce, inplace, cast, "
      .. "offset, eps, dx, dw)", nl.rmsnorm_bwd, x, x, w, x, {dres = x})
    raises("args: unknown field 'z' (expected: x, residual, dy, dres, w, b, rstd, mean, y, "
      .. "residual_out, dx, dw, db, yt, scale, amax, eps, offset, cast, reduce, scaling, transpose)",
      nl.run, "rmsnorm.fwd.ref", {z = 1})
  end)

  it("unknown variants list the strategies of the op", function()
    local x, w = inputs(4, 8)
    local y = sentinel({4, 8})
    local ok, err = pcall(nl.rmsnorm, x, w, {variant = "fastest", out = y})
    assert.is_false(ok)
    assert.truthy(err:find("rmsnorm: unknown variant 'fastest' (rmsnorm.fwd strategies: ref, row,",
      1, true), err)
    assert.is_true(untouched(y))
    raises("rmsnorm: variant 'layernorm.fwd.row' is not a rmsnorm.fwd variant",
      nl.rmsnorm, x, w, {variant = "layernorm.fwd.row"})
    local ok2, err2 = pcall(nl.run, "rmsnorm.fwd.fastest", {x = x, y = y, eps = 1e-6})
    assert.is_false(ok2)
    assert.truthy(err2:find("unknown variant 'rmsnorm.fwd.fastest'", 1, true), err2)
  end)

  it("eps must be a finite number > 0", function()
    local x, w = inputs(4, 8)
    local y = sentinel({4, 8})
    for _, eps in ipairs({0, -1e-6, 0 / 0, math.huge}) do
      local ok, err = pcall(nl.rmsnorm, x, w, {eps = eps, out = y})
      assert.is_false(ok)
      assert.truthy(err:find("rmsnorm: option 'eps' must be a finite number > 0, got", 1, true),
        err)
      -- The core refuses it too when called directly.
      ok, err = pcall(nl.run, "rmsnorm.fwd.ref", {x = x, w = w, y = y, eps = eps})
      assert.is_false(ok)
      assert.truthy(err:find("rmsnorm.fwd.ref: eps must be finite and > 0", 1, true), err)
    end
    assert.is_true(untouched(y))
  end)

  it("names of enums are checked", function()
    local x, w = inputs(4, 8)
    raises("rmsnorm: option 'cast' must be one of llama, gemma, none, got 'mistral'",
      nl.rmsnorm, x, w, {cast = "mistral"})
    raises("rmsnorm_bwd: option 'reduce' must be one of default, temp, partials, atomic, "
      .. "got 'tree'",
      nl.rmsnorm_bwd, x, x, w, x, {reduce = "tree"})
  end)

  it("a reduction a variant lacks is refused with the ones it has", function()
    local x, w = inputs(4, 8)
    local dy, rstd = keep(cpu:randn({4, 8})), keep(cpu:full({4}, 1))
    local dx, dw = sentinel({4, 8}), sentinel({8})
    raises("rmsnorm.bwd.row: no 'atomic' reduction of dW (it supports: temp)",
      nl.rmsnorm_bwd, dy, x, w, rstd, {variant = "row", reduce = "atomic", dx = dx, dw = dw})
    assert.is_true(untouched(dx))
    assert.is_true(untouched(dw))
  end)

  it("outputs may not alias inputs, except in place", function()
    local x, w = inputs(4, 8)
    raises("rmsnorm.fwd.auto: output 'y' is the same buffer as 'x' "
      .. "(outputs must be distinct buffers)",
      nl.rmsnorm, x, w, {out = x})
    raises("rmsnorm_bwd: give either inplace=true or dx, not both",
      nl.rmsnorm_bwd, x, x, w, x, {inplace = true, dx = x})
  end)
end)

describe("settings", function()
  it("unknown keys suggest close ones and change nothing", function()
    local before = nl.get("rmsnorm.fwd.blockrow_max_n")
    local ok, err = pcall(nl.set, "rmsnorm.blockrow_max_n", 1)
    assert.is_false(ok)
    assert.truthy(err:find("set: unknown setting 'rmsnorm.blockrow_max_n' (did you mean ", 1, true),
      err)
    assert.truthy(err:find("'rmsnorm.fwd.blockrow_max_n'", 1, true), err)
    raises("get: unknown setting 'zzz' (nl.settings() lists them)", nl.get, "zzz")
    assert.are.equal(before, nl.get("rmsnorm.fwd.blockrow_max_n"))
  end)

  it("values out of range or not integral are refused and change nothing", function()
    local before = nl.get("cpu.threads")
    raises("setting 'cpu.threads': -1 is outside [0, 4096]", nl.set, "cpu.threads", -1)
    raises("setting 'cpu.threads' takes an integer, got 1.5", nl.set, "cpu.threads", 1.5)
    raises("set: value of 'cpu.threads' must be a number or a boolean, got string",
      nl.set, "cpu.threads", "4")
    assert.are.equal(before, nl.get("cpu.threads"))
  end)
end)

describe("NaN and Inf inputs", function()
  local function finite(v)
    return v == v and v ~= math.huge and v ~= -math.huge
  end

  local function row_states(b)
    local t, states = b:totable(), {}
    for i, row in ipairs(t) do
      local all_finite, none_finite = true, true
      for _, v in ipairs(row) do
        all_finite = all_finite and finite(v)
        none_finite = none_finite and not finite(v)
      end
      states[i] = all_finite and "finite" or none_finite and "nonfinite" or "mixed"
    end
    return states
  end

  for _, strategy in ipairs({"ref", "row", "persistent"}) do
    it("flow through " .. strategy .. " forward and backward without a crash", function()
      local x, w = inputs(3, 16)
      x:set(1, 5, 0 / 0)
      x:set(2, 9, math.huge)
      local y, rstd = nl.rmsnorm(x, w, {variant = strategy})
      keep(y); keep(rstd)
      -- An Inf makes rstd 0: Inf * 0 is NaN, the finite values become 0.
      local states = row_states(y)
      assert.are.same({"nonfinite", "mixed", "finite"}, states)
      local dy = keep(cpu:randn({3, 16}, "fp32", {seed = 3}))
      local dx, dw = nl.rmsnorm_bwd(dy, x, w, rstd, {variant = strategy})
      keep(dx); keep(dw)
      assert.are.equal("finite", row_states(dx)[3])
      assert.are.equal(16, #helper.flat(dw))
      local yl, mean, rl = nl.layernorm(x, w, nil, {variant = strategy})
      keep(yl); keep(mean); keep(rl)
      states = row_states(yl)
      assert.are.equal("nonfinite", states[1])
      assert.are_not.equal("finite", states[2])
      assert.are.equal("finite", states[3])
    end)
  end
end)
