-- normlab.binding_ffi: the LuaJIT FFI binding. It has the interface of the Lua 5.4 C module
-- normlab.binding_c (documented at the top of lua/binding_c.c) so that init.lua does not care
-- which one it got: same functions, same tables, same error messages.
--
-- The declarations are the generated <build>/lua/normlab/cdef.lua (normlab.h without its #
-- lines), never a hand copy; libnormlab.so is loaded from the same directory.
-- NORMLAB_LIBDIR overrides that directory.
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
    return dir, dir .. "/cdef.lua"
  end
  local path = package.searchpath("normlab.cdef", package.path)
  if path == nil then
    error("normlab: normlab/cdef.lua is not on package.path; build normlab first "
      .. "(cmake --build build) or set NORMLAB_LIBDIR", 0)
  end
  return path:match("^(.*)[/\\][^/\\]*$") or ".", path
end

local libdir, cdef_path = locate()
local chunk, load_err = loadfile(cdef_path)
if chunk == nil then
  error("normlab: cannot load " .. cdef_path .. ": " .. tostring(load_err), 0)
end
local cdef = chunk()
ffi.cdef(cdef)
-- The buffer object: a struct, so that free() can NULL the pointer that every copy of the
-- cdata reference sees.
ffi.cdef("typedef struct nl_lua_buf { nl_buf *buf; } nl_lua_buf;")
local C = ffi.load(libdir .. "/libnormlab.so")

local M = {binding = "ffi", Buffer = {}, fields = {}, constants = {}}
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

---- argument helpers ----

local function shown(v)
  return type(v) == "number" and tostring(v) or type(v)
end

local function checkint(v, what)
  if type(v) ~= "number" or v ~= math.floor(v) or math.abs(v) >= 2 ^ 63 then
    util.failf("argument '%s' must be an integer, got %s", what, shown(v))
  end
  return v
end

local function checknum(v, what)
  if type(v) ~= "number" then
    util.failf("argument '%s' must be a number, got %s", what, type(v))
  end
  return v
end

local function checkstr(v, what)
  if type(v) ~= "string" then
    util.failf("argument '%s' must be a string, got %s", what, type(v))
  end
  return v
end

local function device(backend, index)
  return ffi.new("nl_device", checkint(backend, "backend"), checkint(index, "index"))
end

local buf_ct = ffi.typeof("nl_lua_buf")

-- The live nl_buf* of a buffer argument; name nil means self.
local function live(b, name)
  if not ffi.istype(buf_ct, b) then
    util.failf("argument '%s' must be a buffer, got %s", name or "self", type(b))
  end
  if b.buf == nil then
    util.fail(name and ("argument '" .. name .. "': buffer was freed") or "buffer was freed")
  end
  return b.buf
end

local function str(p)
  if p ~= nil then
    return ffi.string(p)
  end
end

---- nl_norm_args and nl_bench_opts from tables ----

local BUF_FIELDS = {x = true, residual = true, dy = true, dres = true, w = true, b = true,
  rstd = true, mean = true, y = true, residual_out = true, dx = true, dw = true, db = true}
local ARG_KEYS = "x, residual, dy, dres, w, b, rstd, mean, y, residual_out, dx, dw, db, eps, "
  .. "offset, cast, reduce"

-- Unknown keys are errors: a typo must not silently become a missing buffer.
-- The first n elements of a C array as a Lua list of numbers.
local function numbers(arr, n)
  local t = {}
  for i = 1, n do
    t[i] = tonumber(arr[i - 1])
  end
  return t
end

local function toargs(t)
  if type(t) ~= "table" then
    util.failf("argument 'args' must be a table, got %s", type(t))
  end
  local a = ffi.new("nl_norm_args")
  for k, v in pairs(t) do
    if type(k) ~= "string" then
      util.failf("args: keys must be strings, got %s", type(k))
    end
    if BUF_FIELDS[k] then
      a[k] = v and live(v, k) or nil
    elseif k == "eps" or k == "offset" then
      a[k] = checknum(v, k)
    elseif k == "cast" or k == "reduce" then
      a[k] = checkint(v, k)
    else
      util.failf("args: unknown field '%s' (expected: %s)", k, ARG_KEYS)
    end
  end
  return a
end

local OPT_INT = {mode = true, batches = true, reps = true, max_sets = true}
local OPT_NUM = {warmup_ms = true, batch_ms = true, rotate_factor = true}

local function toopts(t)
  local o = ffi.new("nl_bench_opts")
  if t == nil then
    return o
  end
  if type(t) ~= "table" then
    util.failf("argument 'opts' must be a table, got %s", type(t))
  end
  for k, v in pairs(t) do
    if type(k) ~= "string" then
      util.failf("opts: keys must be strings, got %s", type(k))
    end
    if OPT_INT[k] then
      o[k] = checkint(v, k)
    elseif OPT_NUM[k] then
      o[k] = checknum(v, k)
    elseif k == "graph" or k == "share_outputs" then
      o[k] = type(v) == "boolean" and (v and 1 or 0) or checkint(v, k)
    else
      util.failf("opts: unknown field '%s' (expected: mode, graph, batches, reps, warmup_ms, "
        .. "batch_ms, rotate_factor, max_sets, share_outputs)", k)
    end
  end
  return o
end

---- structs to tables ----

local function info_table(r)
  return {
    variant = ffi.string(r.variant), backend = r.backend, reduce = r.reduce,
    deterministic = r.deterministic, grid = r.grid, block = r.block, cluster = r.cluster,
    bytes = tonumber(r.bytes), extra_bytes = tonumber(r.extra_bytes),
    workspace_bytes = tonumber(r.workspace_bytes), kernel = ffi.string(r.kernel),
  }
end

---- buffers ----

function Buffer.free(b)
  if not ffi.istype(buf_ct, b) then
    util.failf("argument 'self' must be a buffer, got %s", type(b))
  end
  if b.buf ~= nil then
    C.nl_buf_free(b.buf)
    b.buf = nil
  end
end

function Buffer.freed(b)
  if not ffi.istype(buf_ct, b) then
    util.failf("argument 'self' must be a buffer, got %s", type(b))
  end
  return b.buf == nil
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
  local d = describe(live(b))
  return {
    backend = d.device.backend, index = d.device.index, dtype = d.dtype, ndim = d.ndim,
    rows = tonumber(d.rows), cols = tonumber(d.cols), stride = tonumber(d.stride),
    numel = tonumber(d.numel), nbytes = tonumber(d.nbytes),
  }
end

function Buffer.fill(b, v)
  local p = live(b)
  check(C.nl_buf_fill(ctx, p, checknum(v, "value")))
  return b
end

function Buffer.fill_randn(b, seed, mean, std)
  local p = live(b)
  seed = checkint(seed, "seed")
  check(C.nl_buf_randn(ctx, p, seed, checknum(mean, "mean"), checknum(std, "std")))
  return b
end

function Buffer.fill_uniform(b, seed, lo, hi)
  local p = live(b)
  seed = checkint(seed, "seed")
  check(C.nl_buf_uniform(ctx, p, seed, checknum(lo, "lo"), checknum(hi, "hi")))
  return b
end

function Buffer.copy_(b, src)
  local dst = live(b)
  check(C.nl_buf_copy(ctx, live(src, "src"), dst))
  return b
end

function Buffer.read(b, offset, count)
  local p = live(b)
  offset, count = checkint(offset, "offset"), checkint(count, "count")
  if count < 0 then
    util.failf("read: bad count %d", count)
  end
  local tmp = ffi.new("double[?]", count + 1)
  check(C.nl_buf_read_f64(ctx, p, offset, count, tmp))
  return numbers(tmp, count)
end

function Buffer.write(b, offset, values)
  local p = live(b)
  offset = checkint(offset, "offset")
  if type(values) ~= "table" then
    util.failf("argument 'values' must be a table, got %s", type(values))
  end
  local n = #values
  local tmp = ffi.new("double[?]", n + 1)
  for i = 1, n do
    local v = values[i]
    if type(v) ~= "number" then
      util.failf("write: values[%d] must be a number, got %s", i, type(v))
    end
    tmp[i - 1] = v
  end
  check(C.nl_buf_write_f64(ctx, p, offset, n, tmp))
  return b
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
  __tostring = function(b)
    if Buffer.__tostring ~= nil then
      return Buffer.__tostring(b)
    end
    return b.buf == nil and "<buffer freed>" or ("<buffer " .. tostring(b.buf) .. ">")
  end,
})

---- module functions ----

-- encode(dtype, values) -> bit patterns, decode(dtype, patterns) -> values: nl_convert on
-- raw elements of at most 32 bits (every pattern is an exact Lua number).
local RAW = {[1] = "uint8_t[?]", [2] = "uint16_t[?]", [4] = "uint32_t[?]"}

local function raw_type(dt)
  local es = tonumber(C.nl_dtype_size(checkint(dt, "dtype")))
  if not RAW[es] then
    util.failf("bit patterns: dtype %d is not a type of at most 32 bits", dt)
  end
  return RAW[es], es
end

function M.encode(dt, values)
  local ct = raw_type(dt)
  local n = #values
  local src, dst = ffi.new("double[?]", n + 1), ffi.new(ct, n + 1)
  for i = 1, n do
    src[i - 1] = checknum(values[i], "values[" .. i .. "]")
  end
  C.nl_convert(C.NL_F64, src, dt, dst, n)
  return numbers(dst, n)
end

function M.decode(dt, bits)
  local ct, es = raw_type(dt)
  local n = #bits
  local src, dst = ffi.new(ct, n + 1), ffi.new("double[?]", n + 1)
  for i = 1, n do
    local b = checkint(bits[i], "bits[" .. i .. "]")
    if b < 0 or b >= 2 ^ (8 * es) then
      util.failf("decode: element %d (%d) is not a %d-bit pattern", i, b, 8 * es)
    end
    src[i - 1] = b
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

function M.lib_prefix(prefix)
  util.prefix = checkstr(prefix, "prefix")
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
  C.nl_ctx_set_seed(ctx, checkint(seed, "seed"))
end

function M.sync(backend, index)
  check(C.nl_ctx_sync(ctx, device(backend, index)))
end

function M.device_count(backend)
  return C.nl_device_count(checkint(backend, "backend"))
end

function M.device_info(backend, index)
  local d = device(backend, index)
  local i = ffi.new("nl_device_info")
  check(C.nl_device_query(ctx, d, i))
  return {
    backend = i.device.backend, index = i.device.index, name = ffi.string(i.name),
    sm_count = i.sm_count, cc_major = i.cc_major, cc_minor = i.cc_minor,
    max_threads_per_sm = i.max_threads_per_sm, l2_bytes = tonumber(i.l2_bytes),
    smem_per_block = tonumber(i.smem_per_block),
    smem_per_block_optin = tonumber(i.smem_per_block_optin),
    smem_per_sm = tonumber(i.smem_per_sm), mem_bytes = tonumber(i.mem_bytes),
    mem_clock_khz = i.mem_clock_khz, mem_bus_bits = i.mem_bus_bits,
  }
end

function M.roofline(backend, index)
  local d = device(backend, index)
  local gbps = ffi.new("double[1]")
  check(C.nl_roofline(ctx, d, gbps))
  return gbps[0]
end

function M.settings(backend, index)
  local list, s = {}, ffi.new("nl_setting_desc")
  local d = backend ~= nil and device(backend, index) or nil
  for i = 0, C.nl_setting_count() - 1 do
    check(d and C.nl_setting_describe_on(ctx, d, i, s) or C.nl_setting_describe(ctx, i, s))
    list[i + 1] = {key = str(s.key), doc = str(s.doc), value = s.value, def = s.def,
      builtin = s.builtin, min = s.min, max = s.max, integer = s.integer, origin = str(s.origin)}
  end
  return list
end

function M.model_defaults()
  local list, m = {}, ffi.new("nl_model_default")
  for i = 0, C.nl_model_default_count() - 1 do
    check(C.nl_model_default_describe(i, m))
    list[i + 1] = {model = str(m.model), key = str(m.key), value = m.value}
  end
  return list
end

function M.set(key, value)
  key = checkstr(key, "key")
  check(C.nl_set(ctx, key, checknum(value, "value")))
end

function M.get(key)
  key = checkstr(key, "key")
  local v = ffi.new("double[1]")
  check(C.nl_get(ctx, key, v))
  return v[0]
end

function M.variants()
  local list, v = {}, ffi.new("nl_variant_desc")
  for i = 0, C.nl_variant_count() - 1 do
    local st = C.nl_variant_describe(i, v)
    if st ~= C.NL_OK then
      util.failf("variants: cannot describe entry %d: %s", i, status_name(st))
    end
    list[i + 1] = {name = str(v.name), op = str(v.op), pass = str(v.pass),
      strategy = str(v.strategy), backend = v.backend, reduces = tonumber(v.reduces),
      default_reduce = v.default_reduce, summary = str(v.summary), limits = str(v.limits)}
  end
  return list
end

function M.buffer(backend, index, dtype, shape, stride)
  local d = device(backend, index)
  dtype = checkint(dtype, "dtype")
  if type(shape) ~= "table" then
    util.failf("argument 'shape' must be a table, got %s", type(shape))
  end
  local ndim = #shape
  if ndim < 1 or ndim > 2 then
    util.failf("shape must have 1 or 2 dimensions, got %d", ndim)
  end
  local dims = ffi.new("int64_t[2]")
  for i = 1, ndim do
    dims[i - 1] = checkint(shape[i], "shape")
  end
  stride = stride == nil and 0 or checkint(stride, "stride")
  local out = ffi.new("nl_buf*[1]")
  check(C.nl_buf_new(ctx, d, dtype, ndim, dims, stride, out))
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
  check(C.nl_compare(ctx, pa, pr, checknum(atol, "atol"), checknum(rtol, "rtol"), r))
  return {
    n = tonumber(r.n), n_bad = tonumber(r.n_bad), n_nan = tonumber(r.n_nan),
    worst = tonumber(r.worst), max_abs = r.max_abs, max_rel = r.max_rel, ulp_p50 = r.ulp_p50,
    ulp_p99 = r.ulp_p99, ulp_max = r.ulp_max, a_worst = r.a_worst, ref_worst = r.ref_worst,
    rms_ref = r.rms_ref,
  }
end

function M.supports(name, args)
  name = checkstr(name, "variant")
  local st = C.nl_supports(ctx, name, toargs(args))
  if st == C.NL_EUNSUPPORTED then
    return false, ffi.string(C.nl_ctx_last_error(ctx))
  end
  check(st)
  return true
end

function M.resolve(name, args)
  name = checkstr(name, "variant")
  local a = toargs(args)
  local out = ffi.new("char[128]")
  check(C.nl_resolve(ctx, name, a, out, 128))
  return ffi.string(out)
end

function M.run(name, args)
  name = checkstr(name, "variant")
  local a = toargs(args)
  local info = ffi.new("nl_run_info")
  check(C.nl_run(ctx, name, a, info))
  return info_table(info)
end

function M.bench(name, args, opts)
  name = checkstr(name, "variant")
  local a, o = toargs(args), toopts(opts)
  local r = ffi.new("nl_bench_result")
  check(C.nl_bench(ctx, name, a, o, r))
  return {
    run = info_table(r.run), median_ms = r.median_ms, min_ms = r.min_ms, max_ms = r.max_ms,
    mean_ms = r.mean_ms, gbps = r.gbps, extra_gbps = r.extra_gbps, batches = r.batches,
    reps = r.reps, sets = r.sets, mode = r.mode, footprint_bytes = tonumber(r.footprint_bytes),
  }
end

registry["normlab.binding_ffi"] = M
return M
