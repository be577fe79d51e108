-- normlab.binding_ffi: the LuaJIT FFI binding. It has the interface of the Lua 5.4 C module
-- normlab.binding_c (documented at the top of lua/binding_c.c) so that init.lua does not care
-- which one it got: same functions, same tables, same error messages. Like that module, it
-- trusts its arguments (the library checked them, lua/normlab/check.lua) except for what only
-- a binding can tell: that a buffer argument is one of its buffers and still alive.
--
-- What it knows of normlab.h comes from files the build generates from the header into
-- <build>/lua/normlab/, never from a hand copy: cdef.lua (the declarations, for ffi.cdef) and
-- structs.lua (every struct's fields in order, which drive the conversions between structs and
-- tables). libnormlab.so is loaded from the same directory. NORMLAB_LIBDIR overrides it.
local ffi = require("ffi")
local util = require("normlab.util")

-- ffi.cdef and ffi.metatype can run only once per state, and busted reloads modules for every
-- spec file: the first load keeps the module in the registry and later loads return it.
local registry = debug.getregistry()
if registry["normlab.binding_ffi"] then
  return registry["normlab.binding_ffi"]
end

local function locate()
  local dir = os.getenv("NORMLAB_LIBDIR")
  if dir ~= nil and dir ~= "" then
    return dir
  end
  local path = package.searchpath("normlab.cdef", package.path)
  if path == nil then
    error("normlab: normlab/cdef.lua is not on package.path; build normlab first "
      .. "(cmake --build build) or set NORMLAB_LIBDIR", 0)
  end
  return path:match("^(.*)[/\\][^/\\]*$") or "."
end

local libdir = locate()

-- The value a generated Lua file of libdir returns.
local function generated(name)
  local path = libdir .. "/" .. name
  local chunk, err = loadfile(path)
  if chunk == nil then
    error("normlab: cannot load " .. path .. ": " .. tostring(err), 0)
  end
  return chunk()
end

local cdef, structs = generated("cdef.lua"), generated("structs.lua")
ffi.cdef(cdef)
-- The buffer object: a struct, so that free() can NULL the pointer that every copy of the
-- cdata reference sees.
ffi.cdef("typedef struct nl_lua_buf { nl_buf *buf; } nl_lua_buf;")
local C = ffi.load(libdir .. "/libnormlab.so")

local M = {binding = "ffi", Buffer = {}, fields = {}, constants = {}, structs = structs}
local Buffer, fields = M.Buffer, M.fields

-- Every enumerator of the header, by name; values from ffi's own parse of it.
for name in cdef:gmatch("(NL_[%w_]+)%s*=") do
  M.constants[name] = tonumber(C[name])
end

local function status_name(st)
  return ffi.string(C.nl_status_name(st))
end

local pctx = ffi.new("nl_ctx*[1]")
do
  local st = C.nl_ctx_new(ffi.new("nl_device", C.NL_CPU, 0), pctx)
  if st ~= C.NL_OK then
    error("normlab: cannot create a context: " .. status_name(st), 0)
  end
end
-- Buffers hold a reference on the context inside the core, so the order in which the
-- collector finalizes them and the context does not matter.
local ctx = ffi.gc(pctx[0], C.nl_ctx_free)
local failed, failure  -- status and message of the latest error raised from a core status

-- Every call into the core goes through here: a failure becomes a Lua error carrying the
-- context's message, remembered with its status for last_failure().
local function check(st)
  if st ~= C.NL_OK then
    local msg = ffi.string(C.nl_ctx_last_error(ctx))
    failed, failure = st, util.where() .. (msg ~= "" and msg or status_name(st))
    error(failure, 0)
  end
end

-- A describe call that takes no context fails with a status alone.
local function described(what, i, st)
  if st ~= C.NL_OK then
    util.failf("%s: cannot describe entry %d: %s", what, i, status_name(st))
  end
end

---- arguments ----

local function device(backend, index)
  return ffi.new("nl_device", backend, index)
end

local buf_ct = ffi.typeof("nl_lua_buf")

-- b, when it is a buffer of this binding (freed or not); name nil means self.
local function lbuf(b, name)
  if not ffi.istype(buf_ct, b) then
    util.failf("argument '%s' must be a buffer, got %s", name or "self", type(b))
  end
  return b
end

-- The live nl_buf* of a buffer argument; name nil means self: "buffer was freed" alone.
local function live(b, name)
  if lbuf(b, name).buf == nil then
    util.fail(name and ("argument '" .. name .. "': buffer was freed") or "buffer was freed")
  end
  return b.buf
end

-- The first n elements of a C array as a Lua list of numbers.
local function numbers(arr, n)
  local t = {}
  for i = 1, n do
    t[i] = tonumber(arr[i - 1])
  end
  return t
end

---- structs and tables ----

-- A field's value as Lua gets it, by kind (cmake/gen_structs.cmake). A NULL string is nil,
-- which leaves its key out.
local VALUE = {
  i32 = tonumber, i64 = tonumber, u32 = tonumber, u64 = tonumber, f64 = tonumber,
  string = function(p)
    if p ~= nil then
      return ffi.string(p)
    end
  end,
  -- up to the NUL, or the whole array when the core filled it to the last byte
  chars = function(a)
    return (ffi.string(a, ffi.sizeof(a)):match("^%Z*"))
  end,
}

-- Sets the fields of s, a `struct`, into t. Buffers have no entry in VALUE: the structs that
-- hold one only go in (nl_norm_args).
local function set_fields(t, struct, s)
  for _, f in ipairs(structs[struct]) do
    local v = s[f.name]
    if f.kind == "spread" then
      set_fields(t, f.struct, v)
    elseif f.kind == "struct" then
      t[f.name] = set_fields({}, f.struct, v)
    elseif VALUE[f.kind] then
      t[f.name] = VALUE[f.kind](v)
    end
  end
  return t
end

local function totable(struct, s)
  return set_fields({}, struct, s)
end

-- A new `struct` from the table t (nil: all zero). The library checked t against structs
-- (check.lua): keys it lacks stay 0 or NULL, and so do buffers given as false; the other
-- kinds it lets in are numbers.
local function tostruct(struct, t)
  local s = ffi.new(struct)
  if t == nil then
    return s
  end
  for _, f in ipairs(structs[struct]) do
    local v = t[f.name]
    if f.kind == "buffer" then
      s[f.name] = v and live(v, f.name) or nil
    elseif v ~= nil then
      s[f.name] = v
    end
  end
  return s
end

---- buffers ----

function Buffer.free(b)
  lbuf(b)
  if b.buf ~= nil then
    C.nl_buf_free(b.buf)
    b.buf = nil
  end
end

function Buffer.freed(b)
  return lbuf(b).buf == nil
end

local desc_out = ffi.new("nl_buf_desc")

local function describe(p)
  -- nl_buf_describe takes no context, so its failure has no message beyond the status.
  local st = C.nl_buf_describe(p, desc_out)
  if st ~= C.NL_OK then
    util.fail("buffer: cannot describe: " .. status_name(st))
  end
  return desc_out
end

function Buffer.desc(b)
  return totable("nl_buf_desc", describe(live(b)))
end

ffi.metatype(buf_ct, {
  -- A method of Buffer, else a getter of fields (both tables are extended by init.lua).
  __index = function(b, k)
    local m = Buffer[k]
    if m ~= nil then
      return m
    end
    local get = fields[k]
    if get ~= nil then
      return get(b)
    end
  end,
  __gc = Buffer.free,
  __len = function(b)
    return tonumber(describe(live(b)).numel)
  end,
  -- Buffer.__tostring when the library set one, else as the C module's "<buffer %p>"
  __tostring = function(b)
    if Buffer.__tostring ~= nil then
      return Buffer.__tostring(b)
    end
    if b.buf == nil then
      return "<buffer freed>"
    end
    return "<buffer " .. tostring(b.buf):match("0x%x+") .. ">"
  end,
})

function M.fill(b, v)
  check(C.nl_buf_fill(ctx, live(b), v))
end

function M.fill_randn(b, seed, mean, std)
  check(C.nl_buf_randn(ctx, live(b), seed, mean, std))
end

function M.fill_uniform(b, seed, lo, hi)
  check(C.nl_buf_uniform(ctx, live(b), seed, lo, hi))
end

function M.copy(dst, src)
  local p = live(dst)
  check(C.nl_buf_copy(ctx, live(src, "src"), p))
end

function M.read(b, offset, count)
  local p = live(b)
  local tmp = ffi.new("double[?]", count + 1)
  check(C.nl_buf_read_f64(ctx, p, offset, count, tmp))
  return numbers(tmp, count)
end

function M.write(b, offset, values)
  local p = live(b)
  local n = #values
  local tmp = ffi.new("double[?]", n + 1)
  for i = 1, n do
    tmp[i - 1] = values[i]
  end
  check(C.nl_buf_write_f64(ctx, p, offset, n, tmp))
end

---- module functions ----

function M.dtype_size(dt)
  return C.nl_dtype_size(dt)
end

-- encode(dtype, values) -> bit patterns, decode(dtype, patterns) -> values: nl_convert on raw
-- elements of dtype_size(dtype) <= 4 bytes (every pattern is an exact Lua number).
local RAW = {[1] = "uint8_t[?]", [2] = "uint16_t[?]", [4] = "uint32_t[?]"}

function M.encode(dt, values)
  local n = #values
  local src, dst = ffi.new("double[?]", n + 1), ffi.new(RAW[C.nl_dtype_size(dt)], n + 1)
  for i = 1, n do
    src[i - 1] = values[i]
  end
  C.nl_convert(C.NL_F64, src, dt, dst, n)
  return numbers(dst, n)
end

function M.decode(dt, bits)
  local n = #bits
  local src, dst = ffi.new(RAW[C.nl_dtype_size(dt)], n + 1), ffi.new("double[?]", n + 1)
  for i = 1, n do
    src[i - 1] = bits[i]
  end
  C.nl_convert(dt, src, C.NL_F64, dst, n)
  return numbers(dst, n)
end

function M.version()
  return ffi.string(C.nl_version())
end

function M.cuda_compiled()
  return C.nl_cuda_compiled() ~= 0
end

function M.build_id()
  return ffi.string(C.nl_build_id())
end

function M.lib_prefix(prefix)
  util.prefix = prefix
end

function M.last_failure()
  if failed ~= nil then
    return failed, failure
  end
end

function M.interrupt()
  C.nl_ctx_interrupt(ctx)
end

function M.set_device(backend, index)
  check(C.nl_ctx_set_device(ctx, device(backend, index)))
end

function M.next_seed()
  -- A counter: exact as a double for the first 2^53 draws.
  return tonumber(C.nl_ctx_next_seed(ctx))
end

function M.set_seed(seed)
  C.nl_ctx_set_seed(ctx, seed)
end

function M.sync(backend, index)
  check(C.nl_ctx_sync(ctx, device(backend, index)))
end

function M.device_count(backend)
  return C.nl_device_count(backend)
end

function M.device_info(backend, index)
  local i = ffi.new("nl_device_info")
  check(C.nl_device_query(ctx, device(backend, index), i))
  return totable("nl_device_info", i)
end

function M.roofline(backend, index)
  local gbps = ffi.new("double[1]")
  check(C.nl_roofline(ctx, device(backend, index), gbps))
  return gbps[0]
end

function M.settings(backend, index)
  local list, s = {}, ffi.new("nl_setting_desc")
  local d = backend ~= nil and device(backend, index) or nil
  for i = 0, C.nl_setting_count() - 1 do
    check(d and C.nl_setting_describe_on(ctx, d, i, s) or C.nl_setting_describe(ctx, i, s))
    list[i + 1] = totable("nl_setting_desc", s)
  end
  return list
end

function M.model_defaults()
  local list, m = {}, ffi.new("nl_model_default")
  for i = 0, C.nl_model_default_count() - 1 do
    described("model_defaults", i, C.nl_model_default_describe(i, m))
    list[i + 1] = totable("nl_model_default", m)
  end
  return list
end

function M.variants()
  local list, v = {}, ffi.new("nl_variant_desc")
  for i = 0, C.nl_variant_count() - 1 do
    described("variants", i, C.nl_variant_describe(i, v))
    list[i + 1] = totable("nl_variant_desc", v)
  end
  return list
end

function M.set(key, value)
  check(C.nl_set(ctx, key, value))
end

-- reset(key): key nil resets every setting
function M.reset(key)
  check(C.nl_reset(ctx, key))
end

function M.get(key)
  local v = ffi.new("double[1]")
  check(C.nl_get(ctx, key, v))
  return v[0]
end

function M.buffer(backend, index, dtype, shape, stride)
  local dims = ffi.new("int64_t[2]", shape[1], shape[2] or 0)
  local out = ffi.new("nl_buf*[1]")
  check(C.nl_buf_new(ctx, device(backend, index), dtype, #shape, dims, stride or 0, out))
  local b = buf_ct()
  b.buf = out[0]
  return b
end

function M.is_buffer(v)
  return ffi.istype(buf_ct, v)
end

function M.compare(a, ref, atol, rtol)
  local pa, pr = live(a, "a"), live(ref, "ref")
  local r = ffi.new("nl_cmp")
  check(C.nl_compare(ctx, pa, pr, atol, rtol, r))
  return totable("nl_cmp", r)
end

function M.supports(name, args)
  local st = C.nl_supports(ctx, name, tostruct("nl_norm_args", args))
  if st == C.NL_EUNSUPPORTED then
    return false, ffi.string(C.nl_ctx_last_error(ctx))
  end
  check(st)
  return true
end

function M.resolve(name, args)
  local out = ffi.new("char[128]")
  check(C.nl_resolve(ctx, name, tostruct("nl_norm_args", args), out, 128))
  return VALUE.chars(out)
end

function M.run(name, args)
  local info = ffi.new("nl_run_info")
  check(C.nl_run(ctx, name, tostruct("nl_norm_args", args), info))
  return totable("nl_run_info", info)
end

function M.bench(name, args, opts)
  local a, o = tostruct("nl_norm_args", args), tostruct("nl_bench_opts", opts)
  local r = ffi.new("nl_bench_result")
  check(C.nl_bench(ctx, name, a, o, r))
  return totable("nl_bench_result", r)
end

registry["normlab.binding_ffi"] = M
return M
