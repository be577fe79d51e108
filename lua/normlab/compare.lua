-- normlab.compare: nl.compare(a, ref [, {atol=, rtol=}]) -> Cmp, error statistics of a
-- result against a reference of the same shape. The core reads buffers on any device and
-- of any dtype (ULPs are counted in a's dtype), so nothing is copied here.
local core = require("normlab.binding")
local buffer = require("normlab.buffer")
local check = require("normlab.check")
local tolerance = require("normlab.tolerance")
local util = require("normlab.util")

local Cmp = {}
Cmp.__index = Cmp

function Cmp:__tostring()
  return string.format("%s n=%d bad=%d nan=%d max_abs=%.3g max_rel=%.3g"
    .. " ulp p50/p99/max=%.3g/%.3g/%.3g worst #%d: %.7g vs ref %.7g"
    .. " (rms_ref %.3g, atol %.3g, rtol %.3g)",
    self.ok and "ok" or "FAIL", self.n, self.n_bad, self.n_nan, self.max_abs, self.max_rel,
    self.ulp_p50, self.ulp_p99, self.ulp_max, self.worst, self.a_worst, self.ref_worst,
    self.rms_ref, self.atol, self.rtol)
end

-- Without atol/rtol, the tolerance of an op output "y" in a's dtype.
return function(a, ref, opts)
  local o = util.options("compare", opts, {"atol", "rtol"})
  a, ref = buffer.arg("compare", "a", a), buffer.arg("compare", "ref", ref)
  local atol, rtol = o.atol, o.rtol
  if atol == nil or rtol == nil then
    local ta, tr = tolerance(a.dtype, "y")
    atol, rtol = atol or ta, rtol or tr
  end
  local r = core.compare(a, ref, check.number(atol, "atol"), check.number(rtol, "rtol"))
  r.worst = r.worst + 1
  r.ok = r.n_bad == 0
  r.atol, r.rtol = atol, rtol
  return setmetatable(r, Cmp)
end
