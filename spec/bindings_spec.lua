-- The two bindings behave alike: the same tables out of the structs of normlab.h (every
-- field, generated from the header), and the same checks and errors on the way in, now made
-- once in the Lua library (lua/normlab/check.lua). Each case below once differed between the
-- C module and the FFI binding; the specs run under both.
local nl = require("normlab")
local core = require("normlab.binding")
local helper = require("spec.helper")

local cpu = nl.device("cpu")
local keep = helper.keeper(after_each)
local raises = helper.raises

local function names(struct)
  local list = {}
  for i, f in ipairs(core.structs[struct]) do
    list[i] = f.name
  end
  return list
end

describe("structs", function()
  it("are described by the binding, from the header, in the header's order", function()
    assert.are.same({"backend", "index"}, names("nl_device"))
    assert.are.same({"x", "residual", "dy", "dres", "w", "b", "rstd", "mean", "y", "residual_out",
      "dx", "dw", "db", "yt", "scale", "amax", "eps", "offset", "cast", "reduce", "scaling",
      "transpose"}, names("nl_norm_args"))
    assert.are.same({name = "run", kind = "struct", struct = "nl_run_info"},
      core.structs.nl_bench_result[1])
    assert.are.same({name = "device", kind = "spread", struct = "nl_device"},
      core.structs.nl_buf_desc[1])
  end)

  it("reach Lua with every field", function()
    local x, w = keep(cpu:randn({4, 8}), cpu:full({8}, 1))
    local y = keep(cpu:empty({4, 8}))
    local info = nl.run("rmsnorm.fwd.row", {x = x, w = w, y = y, eps = 1e-6})
    for _, f in ipairs(core.structs.nl_run_info) do
      assert.is_not_nil(info[f.name], f.name)
    end
    assert.are.equal("string", type(info.kernel))
    assert.are.equal("cpu", info.backend)
    local desc = x:desc()
    for _, f in ipairs(core.structs.nl_buf_desc) do
      assert.is_true(f.kind == "spread" or desc[f.name] ~= nil, f.name)
    end
    assert.are.equal(0, desc.backend)
    assert.are.equal(0, desc.index)
  end)
end)

describe("encode and decode", function()
  it("take numbers only, never strings that read as numbers", function()
    raises("encode: element 2 must be a number, got string", nl.encode, "bf16", {1, "2"})
    raises("decode: element 1 must be a 16-bit pattern, got string", nl.decode, "bf16", {"1"})
  end)

  it("name the element that is no pattern of the dtype", function()
    raises("decode: element 2 must be a 8-bit pattern, got 256", nl.decode, "fp8e4m3", {1, 256})
    raises("decode: element 1 must be a 16-bit pattern, got -1", nl.decode, "fp16", {-1})
    raises("decode: element 1 must be a 32-bit pattern, got 0.5", nl.decode, "fp32", {0.5})
    raises("encode: fp64 bit patterns do not fit a Lua number; use fp32, fp16, bf16 or fp8",
      nl.encode, "fp64", {1})
  end)
end)

describe("read", function()
  it("refuses a count outside the buffer before making room for it", function()
    local b = keep(cpu:zeros(4))
    raises("read: bad count -1", b.read, b, 0, -1)
    raises("read: bad count 5", b.read, b, 0, 5)
    raises("read: bad count 1099511627776", b.read, b, 0, 1099511627776)
    raises("argument 'count' must be an integer, got 0.5", b.read, b, 0, 0.5)
    raises("read: range [2, 6) is outside the buffer's 4 elements", b.read, b, 2, 4)
  end)
end)

describe("integers", function()
  it("must fit the C type of the field they go to", function()
    local x = keep(cpu:randn({4, 8}))
    local y = keep(cpu:empty({4, 8}))
    raises("argument 'cast' must fit int32_t, got 4294967296", nl.run, "rmsnorm.fwd.ref",
      {x = x, y = y, eps = 1e-6, cast = 4294967296})
    raises("argument 'reduce' must be an integer, got 1.5", nl.run, "rmsnorm.fwd.ref",
      {x = x, y = y, eps = 1e-6, reduce = 1.5})
    raises("argument 'batches' must fit int32_t, got 2147483648", nl.bench,
      {op = "rmsnorm", M = 4, N = 8, device = "cpu", batches = 2147483648, progress = false})
  end)

  it("seeds are >= 0, so that both bindings draw the same numbers", function()
    local b = keep(cpu:empty(4))
    raises("argument 'seed' must fit uint64_t, got -1", b.randn, b, {seed = -1})
    raises("argument 'seed' must be an integer, got 1.5", b.uniform, b, {seed = 1.5})
  end)
end)
