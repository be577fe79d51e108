-- Buffers: creation, fields, seeded fills, copies and conversions, element access, and the
-- lifecycle (free, double free, use after free, __close, __gc, printing).
local nl = require("normlab")
local helper = require("spec.helper")

local cpu = nl.device("cpu")
local it_cuda = helper.cuda and it or pending

local function same_values(a, b)
  local va, vb = helper.flat(a), helper.flat(b)
  assert.are.equal(#va, #vb)
  for i = 1, #va do
    if va[i] ~= vb[i] then
      return false
    end
  end
  return true
end

describe("buffer creation", function()
  it("empty gives the shape, dtype, device and layout asked for", function()
    local b = cpu:empty({3, 5}, "bf16")
    assert.are.same({3, 5}, b.shape)
    assert.are.equal("bf16", b.dtype)
    assert.are.equal(cpu, b.device)
    assert.are.equal(2, b.ndim)
    assert.are.equal(5, b.stride)
    assert.are.equal(15, b.numel)
    assert.are.equal(15, #b)
    assert.are.equal(30, b.nbytes)
    b:free()
  end)

  it("takes a number or {N} for 1-D buffers and defaults to fp32", function()
    local a, b = cpu:empty(7), cpu:empty({7})
    for _, x in ipairs({a, b}) do
      assert.are.same({7}, x.shape)
      assert.are.equal(1, x.ndim)
      assert.are.equal("fp32", x.dtype)
      x:free()
    end
  end)

  it("knows every dtype name on the CPU", function()
    local sizes = {fp32 = 4, fp16 = 2, bf16 = 2, fp8e4m3 = 1, fp8e5m2 = 1, fp64 = 8}
    for dt, size in pairs(sizes) do
      local b = cpu:empty({2, 3}, dt)
      assert.are.equal(dt, b.dtype)
      assert.are.equal(6 * size, b.nbytes)
      b:free()
    end
  end)

  it("keeps a row stride and counts its padding in nbytes", function()
    local b = cpu:empty({4, 6}, "fp32", {stride = 8})
    assert.are.equal(8, b.stride)
    assert.are.equal(24, b.numel)
    assert.are.equal(4 * 8 * 4, b.nbytes)
    b:free()
  end)

  it("returns a fresh shape table each time", function()
    local b = cpu:empty({2, 3})
    local s = b.shape
    s[1] = 99
    assert.are.same({2, 3}, b.shape)
    b:free()
  end)

  it("zeros and full fill every element", function()
    local z, f = cpu:zeros({2, 3}, "fp16"), cpu:full({4}, 2.5, "bf16")
    assert.are.same({{0, 0, 0}, {0, 0, 0}}, z:totable())
    assert.are.same({2.5, 2.5, 2.5, 2.5}, f:totable())
    z:free()
    f:free()
  end)
end)

describe("seeded random fills", function()
  it("give the same values for the same seed and other values for another", function()
    local a = cpu:randn({16, 33}, "fp32", {seed = 42})
    local b = cpu:randn({16, 33}, "fp32", {seed = 42})
    local c = cpu:randn({16, 33}, "fp32", {seed = 43})
    assert.is_true(same_values(a, b))
    assert.is_false(same_values(a, c))
    assert.are.equal(42, a.seed)
    a:free(); b:free(); c:free()
  end)

  it("do not depend on the row stride", function()
    local a = cpu:randn({5, 7}, "fp32", {seed = 9})
    local b = cpu:empty({5, 7}, "fp32", {stride = 16}):randn({seed = 9})
    assert.is_true(same_values(a, b))
    a:free(); b:free()
  end)

  it("draw fresh seeds from the context and remember them", function()
    nl.seed(1000)
    local a, b = cpu:randn(64), cpu:randn(64)
    assert.are_not.equal(a.seed, b.seed)
    nl.seed(1000)
    local c = cpu:randn(64)
    assert.are.equal(a.seed, c.seed)
    assert.is_true(same_values(a, c))
    local d = cpu:randn(64, "fp32", {seed = a.seed})
    assert.is_true(same_values(a, d))
    a:free(); b:free(); c:free(); d:free()
  end)

  it("follow mean and std", function()
    local b = cpu:randn({256, 256}, "fp32", {seed = 5, mean = 3, std = 0.5})
    local sum, sq = 0, 0
    local v = helper.flat(b)
    for i = 1, #v do
      sum = sum + v[i]
      sq = sq + v[i] * v[i]
    end
    local mean = sum / #v
    local std = math.sqrt(sq / #v - mean * mean)
    assert.is_true(math.abs(mean - 3) < 0.01, "mean " .. mean)
    assert.is_true(math.abs(std - 0.5) < 0.01, "std " .. std)
    b:free()
  end)

  it("uniform stays in [lo, hi) and is seeded too", function()
    local a = cpu:uniform(1000, "fp32", {seed = 3, lo = -2, hi = 2})
    local b = cpu:uniform(1000, "fp32", {seed = 3, lo = -2, hi = 2})
    for _, x in ipairs(helper.flat(a)) do
      assert.is_true(x >= -2 and x <= 2)
    end
    assert.is_true(same_values(a, b))
    assert.are.equal(3, a.seed)
    a:free(); b:free()
  end)

  it_cuda("#cuda give the same values on the GPU as on the CPU", function()
    for _, dt in ipairs({"fp32", "fp16", "bf16"}) do
      local g = helper.cuda:randn({37, 1025}, dt, {seed = 77})
      local c = cpu:randn({37, 1025}, dt, {seed = 77})
      local back = g:to("cpu")
      assert.is_true(same_values(back, c), dt)
      g:free(); c:free(); back:free()
    end
  end)
end)

describe("copies and conversions", function()
  it("to() makes an independent copy", function()
    local a = cpu:from_table({1, 2, 3})
    local b = a:to("cpu")
    b:set(1, 10)
    assert.are.same({1, 2, 3}, a:totable())
    assert.are.same({10, 2, 3}, b:totable())
    a:free(); b:free()
  end)

  it("converts with one rounding to nearest even", function()
    -- 1 + 2^-8 is halfway between two bf16 values: ties go to even (1); 1 + 3*2^-8 goes up.
    local a = cpu:from_table({1 + 2 ^ -8, 1 + 3 * 2 ^ -8, 65504, 1e6}, "fp64")
    local b = a:to(cpu, "bf16")
    assert.are.same({1, 1 + 2 ^ -6, 65536, 999424}, b:totable())
    local h = a:astype("fp16")
    assert.are.equal("fp16", h.dtype)
    assert.are.equal(65504, h:get(3))
    assert.are.equal(math.huge, h:get(4))
    a:free(); b:free(); h:free()
  end)

  it("copy_ fills an existing buffer of the same shape, any dtype and stride", function()
    local src = cpu:from_table({{1, 2}, {3, 4}})
    local dst = cpu:empty({2, 2}, "fp16", {stride = 5})
    assert.are.equal(dst, dst:copy_(src))
    assert.are.same({{1, 2}, {3, 4}}, dst:totable())
    local wrong = cpu:empty({4})
    helper.raises("copy: shapes differ ([2, 2] into [1, 4])", function() wrong:copy_(src) end)
    src:free(); dst:free(); wrong:free()
  end)

  it("astype needs a dtype", function()
    local a = cpu:empty(3)
    helper.raises("astype: dtype is required", function() a:astype() end)
    a:free()
  end)

  it_cuda("#cuda round-trips through the GPU, also with strides and dtype changes", function()
    local a = cpu:randn({7, 37}, "fp32", {seed = 1})
    local g = helper.cuda:empty({7, 37}, "fp32", {stride = 64}):copy_(a)
    local back = g:to(cpu)
    assert.is_true(same_values(a, back))
    local gb = g:to(helper.cuda, "bf16")
    local cb = a:to(cpu, "bf16")
    local gbc = gb:to(cpu)
    assert.is_true(same_values(gbc, cb))
    a:free(); g:free(); back:free(); gb:free(); cb:free(); gbc:free()
  end)
end)

describe("element access", function()
  it("from_table builds 1-D and 2-D buffers and totable gives them back", function()
    local a = cpu:from_table({1, 2, 3, 4})
    local b = cpu:from_table({{1, 2, 3}, {4, 5, 6}}, "fp64")
    assert.are.same({4}, a.shape)
    assert.are.same({2, 3}, b.shape)
    assert.are.same({1, 2, 3, 4}, a:totable())
    assert.are.same({{1, 2, 3}, {4, 5, 6}}, b:totable())
    a:free(); b:free()
  end)

  it("from_table rejects ragged rows", function()
    helper.raises("from_table: row 2 has 1 values, row 1 has 2",
      function() cpu:from_table({{1, 2}, {3}}) end)
  end)

  it("get and set are 1-based, (i) for 1-D and (i, j) for 2-D, and check bounds", function()
    local v = cpu:zeros(3)
    local m = cpu:zeros({2, 3})
    v:set(3, 7)
    m:set(2, 1, 5)
    assert.are.equal(7, v:get(3))
    assert.are.equal(5, m:get(2, 1))
    assert.are.same({{0, 0, 0}, {5, 0, 0}}, m:totable())
    helper.raises("get: index 4 is outside [1, 3]", function() v:get(4) end)
    helper.raises("get: index {1} is outside [2, 3] (2-D buffers take (i, j))",
      function() m:get(1) end)
    helper.raises("set: index {3, 1} is outside [2, 3] (2-D buffers take (i, j))",
      function() m:set(3, 1, 0) end)
    v:free(); m:free()
  end)

  it("read and write skip the padding of strided rows", function()
    local b = cpu:empty({3, 2}, "fp32", {stride = 4})
    b:write(0, {1, 2, 3, 4, 5, 6})
    assert.are.same({3, 4, 5}, b:read(2, 3))
    b:free()
  end)
end)

describe("buffer lifecycle", function()
  it("free is idempotent and freed() tells", function()
    local b = cpu:empty(4)
    assert.is_false(b:freed())
    b:free()
    assert.is_true(b:freed())
    b:free()
    assert.is_true(b:freed())
  end)

  it("every use of a freed buffer is an error, not a crash", function()
    local b = cpu:randn({2, 3})
    local other = cpu:empty({2, 3})
    b:free()
    local uses = {
      function() return b.shape end, function() return b.dtype end,
      function() return b.device end, function() return b.numel end,
      function() return b.seed end, function() return #b end,
      function() b:fill(1) end, function() b:randn() end, function() b:to("cpu") end,
      function() b:astype("fp16") end, function() b:copy_(other) end,
      function() b:totable() end, function() b:get(1, 1) end, function() b:set(1, 1, 0) end,
      function() b:read(0, 1) end, function() b:write(0, {1}) end,
    }
    for _, use in ipairs(uses) do
      local ok, err = pcall(use)
      assert.is_false(ok)
      assert.truthy(err:find("buffer_spec.lua:%d+: buffer was freed$"), err)
    end
    helper.raises("argument 'src': buffer was freed", function() other:copy_(b) end)
    other:free()
  end)

  it("prints dtype, shape, device, stride and the first values", function()
    local b = cpu:from_table({{1, 2, 3}, {4, 5, 6}})
    assert.are.equal("<buffer fp32 [2,3] cpu stride 3: 1 2 3 4 ... >", tostring(b))
    local s = cpu:from_table({0.5, -1.25})
    assert.are.equal("<buffer fp32 [2] cpu stride 2: 0.5 -1.25>", tostring(s))
    b:free()
    assert.are.equal("<buffer freed>", tostring(b))
    s:free()
  end)

  it("is collected by the GC when unreachable", function()
    local weak = setmetatable({}, {__mode = "k"})
    local function make()
      for _ = 1, 8 do
        weak[cpu:empty({256, 1024})] = true
      end
    end
    make()
    -- A freed buffer goes through __gc as well: that must not free it twice.
    local f = cpu:empty(4)
    f:free()
    weak[f] = true
    f = nil -- luacheck: ignore
    collectgarbage()
    collectgarbage()
    assert.is_nil(next(weak))
  end)

  if _VERSION == "Lua 5.4" and nl.binding == "c" then
    it("is freed when a to-be-closed variable goes out of scope", function()
      local chunk = assert(load([[
        local cpu, keep = ...
        do
          local b <close> = cpu:empty(4)
          keep.b = b
        end
      ]]))
      local keep = {}
      chunk(cpu, keep)
      assert.is_true(keep.b:freed())
    end)
  end
end)
