-- normlab: the public Lua API (docs/lua-api.md), the same under Lua 5.4 with the C module
-- and under LuaJIT with the FFI binding (normlab.binding picks one).
--
--   local nl = require("normlab")
--   local x = nl.device():randn({4096, 8192}, "bf16", {seed = 1})
--   local y, rstd = nl.rmsnorm(x, nl.device():full({8192}, 1.0), {variant = "persistent"})
--
-- This file only assembles the modules: devices and buffers live in normlab.buffer, ops and
-- the registry in normlab.ops, settings in normlab.settings, checks in normlab.compare and
-- normlab.tolerance, sweeps in normlab.bench, merging a sweep's shards and joining runs of
-- several devices in normlab.merge, the winners of a grid of shapes in normlab.crossover.
local core = require("normlab.binding")
local buffer = require("normlab.buffer")
local check = require("normlab.check")
local ops = require("normlab.ops")
local settings = require("normlab.settings")
local util = require("normlab.util")

local nl = {
  version = core.version(),
  binding = core.binding,
  cuda_compiled = core.cuda_compiled(),
  build_id = core.build_id(),

  device = buffer.device,
  set_device = buffer.set_device,
  devices = buffer.devices,

  rmsnorm = ops.rmsnorm,
  rmsnorm_bwd = ops.rmsnorm_bwd,
  layernorm = ops.layernorm,
  layernorm_bwd = ops.layernorm_bwd,
  add_rmsnorm = ops.add_rmsnorm,
  add_rmsnorm_bwd = ops.add_rmsnorm_bwd,
  transpose = ops.transpose,
  cast_transpose = ops.cast_transpose,
  run = ops.run,
  supports = ops.supports,
  resolve = ops.resolve,
  variants = ops.variants,
  catalog = require("normlab.catalog").markdown,

  settings = settings.list,
  model_defaults = settings.model_defaults,
  set = settings.set,
  get = settings.get,
  reset = settings.reset,

  compare = require("normlab.compare"),
  tolerance = require("normlab.tolerance"),
  bench = require("normlab.bench"),
  tune = require("normlab.tune").tune,
  tune_cache = require("normlab.tune").cache,
  merge = require("normlab.merge").merge,
  crossover = require("normlab.crossover").new,
  join = require("normlab.merge").join,
}

-- nl.encode(dtype, values) -> bit patterns (each value rounded to the dtype as a store would),
-- nl.decode(dtype, patterns) -> values, for the types of at most 32 bits:
--   nl.encode("fp8e4m3", {1.5, 500}) --> {60, 126}    nl.decode("bf16", {0x3f80}) --> {1}
-- Elements are numbers, never strings that read as numbers, and patterns integers below
-- 2^bits.
local function raw(who, fn, element)
  return function(dtype, list)
    if type(list) ~= "table" then
      util.failf("%s: expected a list, got %s", who, type(list))
    end
    local dt = buffer.dtype(who, dtype)
    local bits = 8 * core.dtype_size(dt)
    if bits > 32 then
      util.failf("%s: %s bit patterns do not fit a Lua number; use fp32, fp16, bf16 or fp8", who,
        dtype)
    end
    for i = 1, #list do
      element(who, i, list[i], bits)
    end
    return fn(dt, list)
  end
end

nl.encode = raw("encode", core.encode, function(who, i, v)
  if type(v) ~= "number" then
    util.failf("%s: element %d must be a number, got %s", who, i, type(v))
  end
end)

nl.decode = raw("decode", core.decode, function(who, i, v, bits)
  if type(v) ~= "number" or v ~= math.floor(v) or v < 0 or v >= 2 ^ bits then
    util.failf("%s: element %d must be a %d-bit pattern, got %s", who, i, bits,
      type(v) == "number" and tostring(v) or type(v))
  end
end)

-- nl.seed(s): restarts the context's seed counter, from which randn and uniform draw when no
-- seed is given, so that a whole script becomes reproducible.
function nl.seed(s)
  if type(s) ~= "number" or s < 0 or s ~= math.floor(s) then
    util.failf("seed: expected an integer >= 0, got %s", tostring(s))
  end
  core.set_seed(check.integer(s, "seed", "u64"))
end

return nl
