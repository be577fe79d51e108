-- spec/drivers.lua: which ops each spec drives on each backend (forward and backward). The
-- specs take the ops they run from here and their variants from the registry, so this cannot
-- drift from what runs, and a new strategy of a driven op is tested without editing a list;
-- spec/coverage_spec.lua fails when a registered variant belongs to an op no spec drives.
local nl = require("normlab")

-- `ops`: the norms, which `spec` drives; `also`: further ops and the spec that drives each (the
-- transpose op, with the forwards' fp8 outputs and transposed copies).
local drivers = {
  cpu = {spec = "spec/cpu_ops_spec.lua", ops = {"rmsnorm", "layernorm", "add_rmsnorm"},
    also = {transpose = "spec/fp8_spec.lua"}},
  cuda = {spec = "spec/cuda_ops_spec.lua", ops = {"rmsnorm", "layernorm", "add_rmsnorm"},
    also = {transpose = "spec/cuda_fp8_spec.lua"}},
}

local function driven(backend, op)
  local d = drivers[backend]
  for _, o in ipairs(d and d.ops or {}) do
    if o == op then
      return true
    end
  end
  return d ~= nil and d.also[op] ~= nil
end

-- The registered strategies of op.pass on backend that a spec checks against the reference
-- (every one but the reference itself), in registry order.
function drivers.strategies(backend, op, pass)
  assert(driven(backend, op), "no spec drives " .. op .. " on " .. backend)
  local list = {}
  for _, v in ipairs(nl.variants{op = op, pass = pass, backend = backend}) do
    if v.strategy ~= "ref" then
      list[#list + 1] = v.strategy
    end
  end
  return list
end

-- A message for each variant of `variants` (nl.variants() entries) that no spec drives.
function drivers.uncovered(variants)
  local missing = {}
  for _, v in ipairs(variants) do
    if not driven(v.backend, v.op) then
      missing[#missing + 1] = string.format(
        "%s (%s) is registered but no spec drives %s.%s on %s: add a driver to %s", v.name,
        v.backend, v.op, v.pass, v.backend,
        drivers[v.backend] and drivers[v.backend].spec or "a spec for the " .. v.backend .. " backend")
    end
  end
  return missing
end

return drivers
