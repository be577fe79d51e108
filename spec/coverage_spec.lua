-- Every registered variant is checked by some spec: the specs drive the ops spec/drivers.lua
-- lists, on each backend, with the variants the registry has. Runs everywhere (the CUDA
-- registry is compiled in wherever nvcc was, with or without a GPU), so CI catches a variant
-- added for an op that no spec drives yet.
local nl = require("normlab")
local drivers = require("spec.drivers")

describe("spec coverage", function()
  it("every registered variant belongs to an op some spec drives", function()
    local missing = drivers.uncovered(nl.variants())
    assert.are.same({}, missing, table.concat(missing, "\n"))
  end)

  it("an undriven variant is reported, with the spec to extend", function()
    local fake = {{name = "groupnorm.fwd.row", op = "groupnorm", pass = "fwd", backend = "cuda"},
      {name = "layernorm.fwd.row", op = "layernorm", pass = "fwd", backend = "cuda"},
      {name = "rmsnorm.bwd.row", op = "rmsnorm", pass = "bwd", backend = "cuda"},
      {name = "rmsnorm.fwd.row", op = "rmsnorm", pass = "fwd", backend = "tpu"}}
    assert.are.same({
      "groupnorm.fwd.row (cuda) is registered but no spec drives groupnorm.fwd on cuda: add a "
        .. "driver to spec/cuda_ops_spec.lua",
      "rmsnorm.fwd.row (tpu) is registered but no spec drives rmsnorm.fwd on tpu: add a driver "
        .. "to a spec for the tpu backend"}, drivers.uncovered(fake))
  end)

  it("the strategies a spec runs are the registry's, the reference aside", function()
    local registered = {}
    for _, v in ipairs(nl.variants{op = "rmsnorm", pass = "bwd", backend = "cpu"}) do
      registered[v.strategy] = true
    end
    local list, seen = drivers.strategies("cpu", "rmsnorm", "bwd"), {}
    for _, s in ipairs(list) do
      assert.is_true(registered[s] and s ~= "ref")
      seen[s] = true
    end
    for s in pairs(registered) do
      assert.is_true(seen[s] or s == "ref", s)
    end
    assert.has_error(function() drivers.strategies("cuda", "groupnorm", "fwd") end)
  end)
end)
