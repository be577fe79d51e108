-- normlab.buffer: devices and the Lua-side part of buffers (fields, filling, copies,
-- conversions, element access, printing). The binding owns the buffer object itself and the
-- methods that take no argument (free, freed, desc); this module extends the binding's
-- Buffer and fields tables, which every buffer's __index consults, and checks what its
-- methods hand on to the binding.
local core = require("normlab.binding")
local check = require("normlab.check")
local enums = require("normlab.enums")
local util = require("normlab.util")

local K = core.constants
local Buffer, fields = core.Buffer, core.fields
local M = {}

---- argument helpers shared with ops.lua and bench.lua ----

-- The dtype value of a name; fp32 when nil.
function M.dtype(who, name)
  if name == nil then
    return K.NL_F32
  end
  local v = enums.dtype.value[name]
  if v == nil then
    util.failf("%s: unknown dtype %s (expected %s)", who, util.show(name),
      table.concat(enums.dtype.names, ", "))
  end
  return v
end

local function positive_int(v)
  return type(v) == "number" and v >= 1 and v == math.floor(v) and v < 2 ^ 53
end

-- A shape as the binding takes it: {N} or {M, N} of positive integers; a number means {N}.
function M.shape(who, shape)
  local s = type(shape) == "number" and {shape} or shape
  local ok = type(s) == "table" and (#s == 1 or #s == 2)
  for i = 1, ok and #s or 0 do
    ok = ok and positive_int(s[i])
  end
  if not ok then
    util.failf("%s: shape must be N or {N} or {M, N} with positive integer sizes, got %s", who,
      util.show(shape))
  end
  return {s[1], s[2]}
end

-- Checks an argument that must be a live buffer (or may be absent when optional).
function M.arg(who, name, v, optional)
  if v == nil or (optional and v == false) then
    if optional then
      return nil
    end
    util.failf("%s: argument '%s' is required", who, name)
  end
  if not core.is_buffer(v) then
    util.failf("%s: argument '%s' must be a buffer, got %s", who, name, type(v))
  end
  if v:freed() then
    util.failf("%s: argument '%s': buffer was freed", who, name)
  end
  return v
end

-- Runs fn(b, ...) on a buffer just allocated for the caller; frees it when fn fails, so a
-- failed call leaves nothing behind.
function M.init(b, fn, ...)
  local ok, err = pcall(fn, b, ...)
  if not ok then
    b:free()
    error(err, 0)
  end
  return b
end

local function shape_of(d)
  return d.ndim == 1 and {d.cols} or {d.rows, d.cols}
end

---- devices ----

local Device = {}
Device.__index = Device

local devices = {}   -- name -> Device: one object per device, so == works
local default         -- the default Device, resolved on first use

local function make(backend, index)
  local name = backend == K.NL_CPU and "cpu" or ("cuda:" .. index)
  local d = devices[name]
  if d == nil then
    d = setmetatable({name = name, kind = enums.backend.name[backend], index = index,
      backend = backend, info = core.device_info(backend, index)}, Device)
    devices[name] = d
  end
  return d
end

function Device:__tostring()
  return "<device " .. self.name .. ": " .. self.info.name .. ">"
end

local function cuda(spec, index)
  local n = core.device_count(K.NL_CUDA)
  if index >= n then
    if not core.cuda_compiled() then
      util.failf("normlab: no CUDA device %s: normlab was built without the CUDA backend", spec)
    end
    util.failf("normlab: no CUDA device %s (%d visible)", spec, n)
  end
  return make(K.NL_CUDA, index)
end

local function parse(spec)
  if getmetatable(spec) == Device then
    return spec
  end
  if spec == "cpu" then
    return make(K.NL_CPU, 0)
  elseif spec == "auto" then
    return core.device_count(K.NL_CUDA) > 0 and make(K.NL_CUDA, 0) or make(K.NL_CPU, 0)
  elseif spec == "cuda" then
    return cuda(spec, 0)
  end
  local index = type(spec) == "string" and spec:match("^cuda:(%d+)$")
  if not index then
    util.failf("normlab: unknown device %s (expected cpu, cuda, cuda:N, auto or a Device)",
      util.show(spec))
  end
  return cuda(spec, tonumber(index))
end

-- nl.device([spec]): nil gives the default device: NORMLAB_DEVICE (the executable's --device
-- sets it), else cuda:0 when there is a GPU, else the CPU. The context follows it.
function M.device(spec)
  if spec ~= nil then
    return parse(spec)
  end
  if default == nil then
    local env = os.getenv("NORMLAB_DEVICE")
    local ok, d = pcall(parse, (env ~= nil and env ~= "") and env or "auto")
    if not ok then
      error(d .. " (from NORMLAB_DEVICE)", 0)
    end
    core.set_device(d.backend, d.index)
    default = d
  end
  return default
end

-- nl.set_device(dev): dev (a Device or a spec as nl.device takes) is the default device from
-- now on: what nl.device() returns and where buffers, nl.bench and nl.tune go when not told;
-- the context follows. Returns it.
function M.set_device(spec)
  local d = parse(spec)
  core.set_device(d.backend, d.index)
  default = d
  return d
end

function M.devices()
  local list = {make(K.NL_CPU, 0)}
  for i = 0, core.device_count(K.NL_CUDA) - 1 do
    list[#list + 1] = make(K.NL_CUDA, i)
  end
  return list
end

function Device:empty(shape, dtype, opts)
  local o = util.options("empty", opts, {"stride"})
  return core.buffer(self.backend, self.index, M.dtype("empty", dtype), M.shape("empty", shape),
    o.stride ~= nil and check.integer(o.stride, "stride") or nil)
end

function Device:zeros(shape, dtype)
  local b = core.buffer(self.backend, self.index, M.dtype("zeros", dtype), M.shape("zeros", shape))
  return M.init(b, b.fill, 0)
end

function Device:full(shape, value, dtype)
  if type(value) ~= "number" then
    util.failf("full: value must be a number, got %s", type(value))
  end
  local b = core.buffer(self.backend, self.index, M.dtype("full", dtype), M.shape("full", shape))
  return M.init(b, b.fill, value)
end

function Device:randn(shape, dtype, opts)
  util.options("randn", opts, {"seed", "mean", "std"})
  local b = core.buffer(self.backend, self.index, M.dtype("randn", dtype), M.shape("randn", shape))
  return M.init(b, b.randn, opts)
end

function Device:uniform(shape, dtype, opts)
  util.options("uniform", opts, {"seed", "lo", "hi"})
  local b = core.buffer(self.backend, self.index, M.dtype("uniform", dtype),
    M.shape("uniform", shape))
  return M.init(b, b.uniform, opts)
end

-- A flat list gives a 1-D buffer, a list of equal-length lists a 2-D one.
function Device:from_table(t, dtype)
  if type(t) ~= "table" or #t == 0 then
    util.fail("from_table: expected a non-empty list of numbers or of rows")
  end
  local flat, shape = t, {#t}
  if type(t[1]) == "table" then
    flat, shape = {}, {#t, #t[1]}
    for i, row in ipairs(t) do
      if type(row) ~= "table" or #row ~= shape[2] then
        util.failf("from_table: row %d has %s values, row 1 has %d", i,
          type(row) == "table" and #row or "no", shape[2])
      end
      for j = 1, #row do
        flat[#flat + 1] = row[j]
      end
    end
  end
  local b = core.buffer(self.backend, self.index, M.dtype("from_table", dtype),
    M.shape("from_table", shape))
  return M.init(b, b.write, 0, flat)
end

function Device:sync()
  core.sync(self.backend, self.index)
end

-- Device-to-device copy bandwidth in GB/s, measured once per device and process.
function Device:roofline()
  if self.roofline_gbps == nil then
    self.roofline_gbps = core.roofline(self.backend, self.index)
  end
  return self.roofline_gbps
end

---- buffers: fields ----

-- Seeds of randn/uniform fills, weak so that buffers still get collected.
local seeds = setmetatable({}, {__mode = "k"})

function fields.shape(b)
  return shape_of(b:desc())
end

function fields.dtype(b)
  return enums.dtype.name[b:desc().dtype]
end

function fields.device(b)
  local d = b:desc()
  return make(d.backend, d.index)
end

for _, k in ipairs({"stride", "numel", "ndim", "nbytes"}) do
  fields[k] = function(b)
    return b:desc()[k]
  end
end

function fields.seed(b)
  b:desc()  -- a freed buffer has no seed: same error as every other access
  return seeds[b]
end

---- buffers: methods ----

function Buffer:fill(v)
  core.fill(self, check.number(v, "value"))
  return self
end

-- The seed of a fill: the one given, else the next one of the context; a freed buffer does
-- not use one up. Never negative: the C module would pass -1 as 2^64 - 1, LuaJIT as 2^63.
local function seed_of(b, seed)
  b:desc()
  return seed == nil and core.next_seed() or check.integer(seed, "seed", "u64")
end

function Buffer:randn(opts)
  local o = util.options("randn", opts, {"seed", "mean", "std"})
  local seed = seed_of(self, o.seed)
  core.fill_randn(self, seed, check.number(o.mean or 0, "mean"), check.number(o.std or 1, "std"))
  seeds[self] = seed
  return self
end

function Buffer:uniform(opts)
  local o = util.options("uniform", opts, {"seed", "lo", "hi"})
  local seed = seed_of(self, o.seed)
  core.fill_uniform(self, seed, check.number(o.lo or 0, "lo"), check.number(o.hi or 1, "hi"))
  seeds[self] = seed
  return self
end

-- copy_(src): src's values into this buffer (same shape), converted to its dtype.
function Buffer:copy_(src)
  core.copy(self, src)
  return self
end

-- read(offset, count) -> the count values from flat element offset (0-based) on, as numbers.
-- The binding makes room for count values before the core checks the range, so count is
-- bounded here by the buffer's size.
function Buffer:read(offset, count)
  check.integer(offset, "offset")
  check.integer(count, "count")
  if count < 0 or count > self:desc().numel then
    util.failf("read: bad count %d", count)
  end
  return core.read(self, offset, count)
end

-- write(offset, values): values (a list of numbers) from flat element offset (0-based) on.
function Buffer:write(offset, values)
  check.integer(offset, "offset")
  if type(values) ~= "table" then
    util.failf("argument 'values' must be a table, got %s", type(values))
  end
  for i = 1, #values do
    if type(values[i]) ~= "number" then
      util.failf("write: values[%d] must be a number, got %s", i, type(values[i]))
    end
  end
  core.write(self, offset, values)
  return self
end

-- A new buffer on dev (a Device or a name) holding this one's values, converted to dtype
-- (default: the same dtype) with one rounding.
function Buffer:to(dev, dtype)
  local d = self:desc()
  local target = parse(dev)
  local out = core.buffer(target.backend, target.index, dtype and M.dtype("to", dtype) or d.dtype,
    shape_of(d))
  return M.init(out, out.copy_, self)
end

function Buffer:astype(dtype)
  if dtype == nil then
    util.fail("astype: dtype is required")
  end
  local d = self:desc()
  return self:to(make(d.backend, d.index), dtype)
end

function Buffer:totable()
  local d = self:desc()
  local flat = self:read(0, d.numel)
  if d.ndim == 1 then
    return flat
  end
  local t = {}
  for i = 1, d.rows do
    local row = {}
    for j = 1, d.cols do
      row[j] = flat[(i - 1) * d.cols + j]
    end
    t[i] = row
  end
  return t
end

-- The flat 0-based offset of element (i [, j]), 1-based indices, checked.
local function offset(who, b, i, j)
  local d = b:desc()
  local ok
  if d.ndim == 1 then
    ok = j == nil and positive_int(i) and i <= d.cols
    if not ok then
      util.failf("%s: index %s is outside [1, %d]", who, util.show(j == nil and i or {i, j}),
        d.cols)
    end
    return i - 1
  end
  ok = positive_int(i) and positive_int(j) and i <= d.rows and j <= d.cols
  if not ok then
    util.failf("%s: index %s is outside [%d, %d] (2-D buffers take (i, j))", who, util.show({i, j}),
      d.rows, d.cols)
  end
  return (i - 1) * d.cols + (j - 1)
end

function Buffer:get(i, j)
  return self:read(offset("get", self, i, j), 1)[1]
end

-- set(i, v) on 1-D buffers, set(i, j, v) on 2-D ones.
function Buffer:set(i, j, v)
  if self:desc().ndim == 1 then
    j, v = nil, j
  end
  if type(v) ~= "number" then
    util.failf("set: value must be a number, got %s", type(v))
  end
  self:write(offset("set", self, i, j), {v})
  return self
end

-- <buffer bf16 [4096,8192] cuda:0 stride 8192: 0.1216 -1.234 ... >
local SHOW = 4

function Buffer:__tostring()
  if self:freed() then
    return "<buffer freed>"
  end
  local d = self:desc()
  local vals = self:read(0, math.min(d.numel, SHOW))
  for k, v in ipairs(vals) do
    vals[k] = string.format("%.4g", v)
  end
  return string.format("<buffer %s [%s] %s stride %d: %s%s>", enums.dtype.name[d.dtype],
    table.concat(shape_of(d), ","), make(d.backend, d.index).name, d.stride,
    table.concat(vals, " "), d.numel > SHOW and " ... " or "")
end

return M
