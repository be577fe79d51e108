/*
 * binding_c.c: the Lua 5.4 module normlab.binding_c, a thin translation layer over normlab.h.
 *
 * lua/normlab/binding_ffi.lua offers the same interface under LuaJIT; the Lua library (init.lua
 * and the modules it loads) builds the public API on top of either and never looks at which
 * one it got. Enums cross this layer as numbers (the `constants` table maps every enumerator of
 * normlab.h to its value); names for users are the Lua library's business.
 *
 * One context per Lua state. It is created when the module is first loaded (on the CPU device,
 * which costs nothing; nl.device() moves it to the default device) and freed by the __gc of its
 * userdata at lua_close. Buffers hold a reference on it inside the core, so the order of the
 * finalizers does not matter. Loading the module again returns the same table, context and
 * buffer methods (busted re-requires modules for every spec file).
 *
 * Registry keys:
 *   "normlab.ctx"        light userdata: the state's nl_ctx*, valid until lua_close. The normlab
 *                        executable reads it once after loading this module and calls
 *                        nl_ctx_interrupt() on it from its SIGINT handler, so that Ctrl-C stops
 *                        a long nl_bench/nl_roofline inside C where no Lua hook can run.
 *                        (core.interrupt() does the same from Lua.)
 *   "normlab.binding_c"  the module table.
 *   "normlab.libprefix"  string set by core.lib_prefix(): chunk names starting with it belong to
 *                        the normlab Lua library. Errors raised here report the position of the
 *                        first Lua frame outside the library, i.e. the user's line.
 *   "normlab.failure"    the message of the latest error raised from a core status.
 *
 * Interface (numbers for enums; a device is a backend and an index):
 *   binding = "c"; constants; Buffer, the buffers' method table, and fields, getters that
 *   their __index consults after Buffer (fields[k](buf)), both extended by the Lua library;
 *   version(); cuda_compiled(); lib_prefix(s); last_failure() -> status, message of the
 *   latest error raised from a core status (so that a caller holding an error can tell
 *   whether it was that one); interrupt(); set_device(b, i); next_seed(); set_seed(s);
 *   sync(b, i); device_count(b); device_info(b, i); roofline(b, i); settings([b, i]);
 *   model_defaults(); set(key, v);
 *   get(key); variants(); buffer(b, i, dtype, shape, stride); is_buffer(v);
 *   compare(a, ref, atol, rtol); supports(name, args) -> true | false, reason;
 *   resolve(name, args); run(name, args); bench(name, args, opts); encode(dtype, values) ->
 *   bit patterns; decode(dtype, patterns) -> values (types of at most 32 bits).
 *   Buffer methods: free(), freed(), desc(), fill(v), fill_randn(seed, mean, std),
 *   fill_uniform(seed, lo, hi), copy_(src), read(offset, count), write(offset, list).
 *   Buffers' metatable: __index, __gc, __close, __len (numel), __tostring (Buffer.__tostring
 *   when the Lua library set one).
 */
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include "lauxlib.h"
#include "lua.h"
#include "normlab.h"

#define CTX_MT "normlab.context"
#define BUF_MT "normlab.buffer"
#define KEY_CTX "normlab.ctx"
#define KEY_MODULE "normlab.binding_c"
#define KEY_PREFIX "normlab.libprefix"
#define KEY_FAILURE "normlab.failure"

int luaopen_normlab_binding_c(lua_State *L);

typedef struct LCtx {
  nl_ctx *ctx;
  nl_status failed;  /* status of the latest error raised from a core status */
} LCtx;

typedef struct LBuf {
  nl_buf *buf;     /* NULL once freed */
} LBuf;

/* ---- errors ---- */

/* Pushes "chunk:line: " of the first Lua frame outside the normlab library, or "". */
static void push_where(lua_State *L)
{
  lua_Debug ar;
  size_t plen = 0;
  const char *prefix;
  int level;

  lua_getfield(L, LUA_REGISTRYINDEX, KEY_PREFIX);
  prefix = lua_tolstring(L, -1, &plen);
  for (level = 1; lua_getstack(L, level, &ar); level++) {
    lua_getinfo(L, "Sl", &ar);
    if (ar.currentline <= 0)
      continue;  /* a C function */
    if (prefix != NULL && strncmp(ar.source, prefix, plen) == 0)
      continue;
    lua_pop(L, 1);
    lua_pushfstring(L, "%s:%d: ", ar.short_src, ar.currentline);
    return;
  }
  lua_pop(L, 1);
  lua_pushliteral(L, "");
}

static int fail(lua_State *L, const char *fmt, ...)
{
  va_list ap;
  push_where(L);
  va_start(ap, fmt);
  lua_pushvfstring(L, fmt, ap);
  va_end(ap);
  lua_concat(L, 2);
  return lua_error(L);
}

static LCtx *getctx(lua_State *L)
{
  LCtx *c = (LCtx *)lua_touserdata(L, lua_upvalueindex(1));
  if (c->ctx == NULL)
    fail(L, "normlab: the context is closed");
  return c;
}

/* Every call into the core goes through here: a failure becomes a Lua error carrying the
 * context's message, remembered with its status for core.last_failure(). */
static void check(lua_State *L, LCtx *c, nl_status st)
{
  const char *msg;
  if (st == NL_OK)
    return;
  msg = nl_ctx_last_error(c->ctx);
  if (msg == NULL || *msg == '\0')
    msg = nl_status_name(st);
  push_where(L);
  lua_pushstring(L, msg);
  lua_concat(L, 2);
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, KEY_FAILURE);
  c->failed = st;
  lua_error(L);
}

/* ---- argument helpers ---- */

/* A number as itself, anything else as its type name: "got 1.5", "got string". */
static const char *shown(lua_State *L, int i)
{
  return lua_type(L, i) == LUA_TNUMBER ? luaL_tolstring(L, i, NULL) : luaL_typename(L, i);
}

/* Strict about types (no string coercion), like the FFI binding. */
static int64_t checkint(lua_State *L, int i, const char *what)
{
  int isnum = 0;
  lua_Integer v = 0;
  if (lua_type(L, i) == LUA_TNUMBER)
    v = lua_tointegerx(L, i, &isnum);
  if (!isnum)
    fail(L, "argument '%s' must be an integer, got %s", what, shown(L, i));
  return (int64_t)v;
}

static double checknum(lua_State *L, int i, const char *what)
{
  if (lua_type(L, i) != LUA_TNUMBER)
    fail(L, "argument '%s' must be a number, got %s", what, luaL_typename(L, i));
  return (double)lua_tonumber(L, i);
}

static const char *checkstr(lua_State *L, int i, const char *what)
{
  if (lua_type(L, i) != LUA_TSTRING)
    fail(L, "argument '%s' must be a string, got %s", what, luaL_typename(L, i));
  return lua_tostring(L, i);
}

static nl_device checkdevice(lua_State *L, int i)
{
  nl_device d;
  d.backend = (int32_t)checkint(L, i, "backend");
  d.index = (int32_t)checkint(L, i + 1, "index");
  return d;
}

static LBuf *checklbuf(lua_State *L, int i, const char *name)
{
  LBuf *b = (LBuf *)luaL_testudata(L, i, BUF_MT);
  if (b == NULL)
    fail(L, "argument '%s' must be a buffer, got %s", name ? name : "self", luaL_typename(L, i));
  return b;
}

/* The live nl_buf* of argument i. name NULL means self: "buffer was freed" alone. */
static nl_buf *checkbuf(lua_State *L, int i, const char *name)
{
  LBuf *b = checklbuf(L, i, name);
  if (b->buf == NULL) {
    if (name == NULL)
      fail(L, "buffer was freed");
    fail(L, "argument '%s': buffer was freed", name);
  }
  return b->buf;
}

static void setint(lua_State *L, const char *k, int64_t v)
{
  lua_pushinteger(L, (lua_Integer)v);
  lua_setfield(L, -2, k);
}

static void setnum(lua_State *L, const char *k, double v)
{
  lua_pushnumber(L, (lua_Number)v);
  lua_setfield(L, -2, k);
}

static void setstr(lua_State *L, const char *k, const char *v)
{
  if (v == NULL)
    return;
  lua_pushstring(L, v);
  lua_setfield(L, -2, k);
}

/* ---- nl_norm_args and nl_bench_opts from tables ---- */

static const struct {
  const char *name;
  size_t off;
} arg_bufs[] = {
  {"x", offsetof(nl_norm_args, x)},
  {"residual", offsetof(nl_norm_args, residual)},
  {"dy", offsetof(nl_norm_args, dy)},
  {"dres", offsetof(nl_norm_args, dres)},
  {"w", offsetof(nl_norm_args, w)},
  {"b", offsetof(nl_norm_args, b)},
  {"rstd", offsetof(nl_norm_args, rstd)},
  {"mean", offsetof(nl_norm_args, mean)},
  {"y", offsetof(nl_norm_args, y)},
  {"residual_out", offsetof(nl_norm_args, residual_out)},
  {"dx", offsetof(nl_norm_args, dx)},
  {"dw", offsetof(nl_norm_args, dw)},
  {"db", offsetof(nl_norm_args, db)},
};
#define ARG_KEYS "x, residual, dy, dres, w, b, rstd, mean, y, residual_out, dx, dw, db, eps, " \
                 "offset, cast, reduce"

/* Reads the args table at idx. Unknown keys are errors: a typo must not silently become a
 * missing buffer. */
static void toargs(lua_State *L, int idx, nl_norm_args *a)
{
  size_t i;
  memset(a, 0, sizeof *a);
  idx = lua_absindex(L, idx);
  if (!lua_istable(L, idx))
    fail(L, "argument 'args' must be a table, got %s", luaL_typename(L, idx));
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    const char *k;
    int found = 0;
    if (lua_type(L, -2) != LUA_TSTRING)
      fail(L, "args: keys must be strings, got %s", luaL_typename(L, -2));
    k = lua_tostring(L, -2);
    for (i = 0; i < sizeof arg_bufs / sizeof arg_bufs[0]; i++) {
      if (strcmp(k, arg_bufs[i].name) == 0) {
        nl_buf **slot = (nl_buf **)(void *)((char *)a + arg_bufs[i].off);
        *slot = lua_toboolean(L, -1) ? checkbuf(L, -1, k) : NULL;
        found = 1;
        break;
      }
    }
    if (found)
      ;
    else if (strcmp(k, "eps") == 0)
      a->eps = checknum(L, -1, k);
    else if (strcmp(k, "offset") == 0)
      a->offset = checknum(L, -1, k);
    else if (strcmp(k, "cast") == 0)
      a->cast = (int32_t)checkint(L, -1, k);
    else if (strcmp(k, "reduce") == 0)
      a->reduce = (int32_t)checkint(L, -1, k);
    else
      fail(L, "args: unknown field '%s' (expected: " ARG_KEYS ")", k);
    lua_pop(L, 1);
  }
}

static void toopts(lua_State *L, int idx, nl_bench_opts *o)
{
  memset(o, 0, sizeof *o);
  idx = lua_absindex(L, idx);
  if (lua_isnoneornil(L, idx))
    return;
  if (!lua_istable(L, idx))
    fail(L, "argument 'opts' must be a table, got %s", luaL_typename(L, idx));
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    const char *k;
    if (lua_type(L, -2) != LUA_TSTRING)
      fail(L, "opts: keys must be strings, got %s", luaL_typename(L, -2));
    k = lua_tostring(L, -2);
    if (strcmp(k, "mode") == 0)
      o->mode = (int32_t)checkint(L, -1, k);
    else if (strcmp(k, "graph") == 0)
      o->graph = lua_isboolean(L, -1) ? lua_toboolean(L, -1) : (int32_t)checkint(L, -1, k);
    else if (strcmp(k, "batches") == 0)
      o->batches = (int32_t)checkint(L, -1, k);
    else if (strcmp(k, "reps") == 0)
      o->reps = (int32_t)checkint(L, -1, k);
    else if (strcmp(k, "warmup_ms") == 0)
      o->warmup_ms = checknum(L, -1, k);
    else if (strcmp(k, "batch_ms") == 0)
      o->batch_ms = checknum(L, -1, k);
    else if (strcmp(k, "rotate_factor") == 0)
      o->rotate_factor = checknum(L, -1, k);
    else if (strcmp(k, "max_sets") == 0)
      o->max_sets = checkint(L, -1, k);
    else if (strcmp(k, "share_outputs") == 0)
      o->share_outputs =
          lua_isboolean(L, -1) ? lua_toboolean(L, -1) : (int32_t)checkint(L, -1, k);
    else
      fail(L, "opts: unknown field '%s' (expected: mode, graph, batches, reps, warmup_ms, "
              "batch_ms, rotate_factor, max_sets, share_outputs)", k);
    lua_pop(L, 1);
  }
}

/* ---- structs to tables ---- */

static void push_info(lua_State *L, const nl_run_info *r)
{
  lua_createtable(L, 0, 10);
  setstr(L, "variant", r->variant);
  setint(L, "backend", r->backend);
  setint(L, "reduce", r->reduce);
  setint(L, "deterministic", r->deterministic);
  setint(L, "grid", r->grid);
  setint(L, "block", r->block);
  setint(L, "cluster", r->cluster);
  setint(L, "bytes", r->bytes);
  setint(L, "extra_bytes", r->extra_bytes);
  setint(L, "workspace_bytes", r->workspace_bytes);
  setstr(L, "kernel", r->kernel);
}

static void push_desc(lua_State *L, const nl_buf_desc *d)
{
  lua_createtable(L, 0, 9);
  setint(L, "backend", d->device.backend);
  setint(L, "index", d->device.index);
  setint(L, "dtype", d->dtype);
  setint(L, "ndim", d->ndim);
  setint(L, "rows", d->rows);
  setint(L, "cols", d->cols);
  setint(L, "stride", d->stride);
  setint(L, "numel", d->numel);
  setint(L, "nbytes", d->nbytes);
}

/* ---- buffers ---- */

static LBuf *newbuf(lua_State *L)
{
  LBuf *b = (LBuf *)lua_newuserdatauv(L, sizeof *b, 0);
  b->buf = NULL;  /* a failed nl_buf_new leaves nothing to free */
  luaL_setmetatable(L, BUF_MT);
  return b;
}

static int buf_free(lua_State *L)
{
  LBuf *b = checklbuf(L, 1, NULL);
  if (b->buf != NULL) {
    nl_buf_free(b->buf);
    b->buf = NULL;
  }
  return 0;
}

static int buf_freed(lua_State *L)
{
  LBuf *b = checklbuf(L, 1, NULL);
  lua_pushboolean(L, b->buf == NULL);
  return 1;
}

static void describe(lua_State *L, nl_buf *buf, nl_buf_desc *d)
{
  /* nl_buf_describe takes no context, so its failure has no message beyond the status. */
  nl_status st = nl_buf_describe(buf, d);
  if (st != NL_OK)
    fail(L, "buffer: cannot describe: %s", nl_status_name(st));
}

static int buf_desc(lua_State *L)
{
  nl_buf_desc d;
  describe(L, checkbuf(L, 1, NULL), &d);
  push_desc(L, &d);
  return 1;
}

static int buf_len(lua_State *L)
{
  nl_buf_desc d;
  describe(L, checkbuf(L, 1, NULL), &d);
  lua_pushinteger(L, (lua_Integer)d.numel);
  return 1;
}

static int buf_fill(lua_State *L)
{
  LCtx *c = getctx(L);
  nl_buf *b = checkbuf(L, 1, NULL);
  check(L, c, nl_buf_fill(c->ctx, b, checknum(L, 2, "value")));
  lua_settop(L, 1);
  return 1;
}

static int buf_fill_randn(lua_State *L)
{
  LCtx *c = getctx(L);
  nl_buf *b = checkbuf(L, 1, NULL);
  uint64_t seed = (uint64_t)checkint(L, 2, "seed");
  check(L, c, nl_buf_randn(c->ctx, b, seed, checknum(L, 3, "mean"), checknum(L, 4, "std")));
  lua_settop(L, 1);
  return 1;
}

static int buf_fill_uniform(lua_State *L)
{
  LCtx *c = getctx(L);
  nl_buf *b = checkbuf(L, 1, NULL);
  uint64_t seed = (uint64_t)checkint(L, 2, "seed");
  check(L, c, nl_buf_uniform(c->ctx, b, seed, checknum(L, 3, "lo"), checknum(L, 4, "hi")));
  lua_settop(L, 1);
  return 1;
}

static int buf_copy(lua_State *L)
{
  LCtx *c = getctx(L);
  nl_buf *dst = checkbuf(L, 1, NULL);
  nl_buf *src = checkbuf(L, 2, "src");
  check(L, c, nl_buf_copy(c->ctx, src, dst));
  lua_settop(L, 1);
  return 1;
}

static int buf_read(lua_State *L)
{
  LCtx *c = getctx(L);
  nl_buf *b = checkbuf(L, 1, NULL);
  int64_t off = checkint(L, 2, "offset");
  int64_t n = checkint(L, 3, "count");
  double *tmp;
  int64_t i;
  if (n < 0 || (uint64_t)n > (uint64_t)(SIZE_MAX / sizeof(double)))
    fail(L, "read: bad count %I", (lua_Integer)n);
  /* Scratch as a userdata: collected even when the read raises. */
  tmp = (double *)lua_newuserdatauv(L, (size_t)n * sizeof(double) + 1, 0);
  check(L, c, nl_buf_read_f64(c->ctx, b, off, n, tmp));
  lua_createtable(L, n > INT32_MAX ? 0 : (int)n, 0);
  for (i = 0; i < n; i++) {
    lua_pushnumber(L, tmp[i]);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

static int buf_write(lua_State *L)
{
  LCtx *c = getctx(L);
  nl_buf *b = checkbuf(L, 1, NULL);
  int64_t off = checkint(L, 2, "offset");
  lua_Integer n, i;
  double *tmp;
  if (!lua_istable(L, 3))
    fail(L, "argument 'values' must be a table, got %s", luaL_typename(L, 3));
  n = luaL_len(L, 3);
  tmp = (double *)lua_newuserdatauv(L, (size_t)n * sizeof(double) + 1, 0);
  for (i = 0; i < n; i++) {
    int isnum;
    lua_rawgeti(L, 3, i + 1);
    isnum = lua_type(L, -1) == LUA_TNUMBER;
    tmp[i] = (double)lua_tonumber(L, -1);
    if (!isnum)
      fail(L, "write: values[%I] must be a number, got %s", i + 1, luaL_typename(L, -1));
    lua_pop(L, 1);
  }
  check(L, c, nl_buf_write_f64(c->ctx, b, off, (int64_t)n, tmp));
  lua_settop(L, 1);
  return 1;
}

/* __index: a method of Buffer (upvalue 1), else a getter of fields (upvalue 2). */
static int buf_index(lua_State *L)
{
  lua_pushvalue(L, 2);
  if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL)
    return 1;
  lua_pushvalue(L, 2);
  if (lua_rawget(L, lua_upvalueindex(2)) != LUA_TFUNCTION)
    return 0;
  lua_pushvalue(L, 1);
  lua_call(L, 1, 1);
  return 1;
}

/* __tostring: Buffer.__tostring (upvalue 1) when the library set one. */
static int buf_tostring(lua_State *L)
{
  LBuf *b = (LBuf *)luaL_checkudata(L, 1, BUF_MT);
  if (lua_getfield(L, lua_upvalueindex(1), "__tostring") == LUA_TFUNCTION) {
    lua_pushvalue(L, 1);
    lua_call(L, 1, 1);
    return 1;
  }
  if (b->buf == NULL)
    lua_pushliteral(L, "<buffer freed>");
  else
    lua_pushfstring(L, "<buffer %p>", (void *)b->buf);
  return 1;
}

/* ---- module functions ---- */

/* encode(dtype, {values}) -> {bit patterns}; decode(dtype, {patterns}) -> {values}: the
 * host conversions of nl_convert on raw elements of at most 32 bits (so that every pattern
 * is an exact Lua number under LuaJIT too). */
static int raw_size(lua_State *L, int dt)
{
  int es = nl_dtype_size(dt);
  if (es == 0 || es > 4)
    return luaL_error(L, "bit patterns: dtype %d is not a type of at most 32 bits", dt);
  return es;
}

static int l_encode(lua_State *L)
{
  int dt = (int)luaL_checkinteger(L, 1), es = raw_size(L, dt);
  lua_Integer n;
  double *src;
  unsigned char *dst;
  luaL_checktype(L, 2, LUA_TTABLE);
  n = luaL_len(L, 2);
  src = lua_newuserdatauv(L, (size_t)n * sizeof(double) + 1, 0);
  dst = lua_newuserdatauv(L, (size_t)n * (size_t)es + 1, 0);
  for (lua_Integer i = 0; i < n; i++) {
    lua_geti(L, 2, i + 1);
    if (!lua_isnumber(L, -1))
      return luaL_error(L, "encode: element %d is not a number", (int)(i + 1));
    src[i] = lua_tonumber(L, -1);
    lua_pop(L, 1);
  }
  nl_convert(NL_F64, src, dt, dst, n);
  lua_createtable(L, (int)n, 0);
  for (lua_Integer i = 0; i < n; i++) {
    uint32_t bits = 0;
    for (int b = es - 1; b >= 0; b--)
      bits = (bits << 8) | dst[i * es + b];
    lua_pushinteger(L, (lua_Integer)bits);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

static int l_decode(lua_State *L)
{
  int dt = (int)luaL_checkinteger(L, 1), es = raw_size(L, dt);
  lua_Integer n;
  unsigned char *src;
  double *dst;
  luaL_checktype(L, 2, LUA_TTABLE);
  n = luaL_len(L, 2);
  src = lua_newuserdatauv(L, (size_t)n * (size_t)es + 1, 0);
  dst = lua_newuserdatauv(L, (size_t)n * sizeof(double) + 1, 0);
  for (lua_Integer i = 0; i < n; i++) {
    lua_Integer bits;
    lua_geti(L, 2, i + 1);
    bits = lua_tointeger(L, -1);
    if (!lua_isinteger(L, -1) && !(lua_isnumber(L, -1) && lua_tonumber(L, -1) == (double)bits))
      return luaL_error(L, "decode: element %d is not an integer", (int)(i + 1));
    if (bits < 0 || bits >= ((lua_Integer)1 << (8 * es)))
      return luaL_error(L, "decode: element %d (%d) is not a %d-bit pattern", (int)(i + 1),
                        (int)bits, 8 * es);
    lua_pop(L, 1);
    for (int b = 0; b < es; b++)
      src[i * es + b] = (unsigned char)((uint64_t)bits >> (8 * b));
  }
  nl_convert(dt, src, NL_F64, dst, n);
  lua_createtable(L, (int)n, 0);
  for (lua_Integer i = 0; i < n; i++) {
    lua_pushnumber(L, dst[i]);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

static int l_version(lua_State *L)
{
  lua_pushstring(L, nl_version());
  return 1;
}

static int l_cuda_compiled(lua_State *L)
{
  lua_pushboolean(L, nl_cuda_compiled() != 0);
  return 1;
}

static int l_lib_prefix(lua_State *L)
{
  checkstr(L, 1, "prefix");
  lua_settop(L, 1);
  lua_setfield(L, LUA_REGISTRYINDEX, KEY_PREFIX);
  return 0;
}

static int l_last_failure(lua_State *L)
{
  LCtx *c = (LCtx *)lua_touserdata(L, lua_upvalueindex(1));
  if (c->failed == NL_OK)
    return 0;
  lua_pushinteger(L, c->failed);
  lua_getfield(L, LUA_REGISTRYINDEX, KEY_FAILURE);
  return 2;
}

static int l_interrupt(lua_State *L)
{
  nl_ctx_interrupt(getctx(L)->ctx);
  return 0;
}

static int l_set_device(lua_State *L)
{
  LCtx *c = getctx(L);
  check(L, c, nl_ctx_set_device(c->ctx, checkdevice(L, 1)));
  return 0;
}

static int l_next_seed(lua_State *L)
{
  lua_pushinteger(L, (lua_Integer)nl_ctx_next_seed(getctx(L)->ctx));
  return 1;
}

static int l_set_seed(lua_State *L)
{
  LCtx *c = getctx(L);
  nl_ctx_set_seed(c->ctx, (uint64_t)checkint(L, 1, "seed"));
  return 0;
}

static int l_sync(lua_State *L)
{
  LCtx *c = getctx(L);
  check(L, c, nl_ctx_sync(c->ctx, checkdevice(L, 1)));
  return 0;
}

static int l_device_count(lua_State *L)
{
  lua_pushinteger(L, nl_device_count((int32_t)checkint(L, 1, "backend")));
  return 1;
}

static int l_device_info(lua_State *L)
{
  LCtx *c = getctx(L);
  nl_device_info in;
  memset(&in, 0, sizeof in);
  check(L, c, nl_device_query(c->ctx, checkdevice(L, 1), &in));
  in.name[sizeof in.name - 1] = '\0';
  lua_createtable(L, 0, 14);
  setint(L, "backend", in.device.backend);
  setint(L, "index", in.device.index);
  setstr(L, "name", in.name);
  setint(L, "sm_count", in.sm_count);
  setint(L, "cc_major", in.cc_major);
  setint(L, "cc_minor", in.cc_minor);
  setint(L, "max_threads_per_sm", in.max_threads_per_sm);
  setint(L, "l2_bytes", in.l2_bytes);
  setint(L, "smem_per_block", in.smem_per_block);
  setint(L, "smem_per_block_optin", in.smem_per_block_optin);
  setint(L, "smem_per_sm", in.smem_per_sm);
  setint(L, "mem_bytes", in.mem_bytes);
  setnum(L, "mem_clock_khz", in.mem_clock_khz);
  setint(L, "mem_bus_bits", in.mem_bus_bits);
  return 1;
}

static int l_roofline(lua_State *L)
{
  LCtx *c = getctx(L);
  double gbps = 0;
  check(L, c, nl_roofline(c->ctx, checkdevice(L, 1), &gbps));
  lua_pushnumber(L, gbps);
  return 1;
}

/* settings([b, i]): as on the default device, or on device (b, i) */
static int l_settings(lua_State *L)
{
  LCtx *c = getctx(L);
  int32_t i, n = nl_setting_count();
  int on = !lua_isnoneornil(L, 1);
  nl_device d = {0, 0};
  if (on)
    d = checkdevice(L, 1);
  lua_createtable(L, n > 0 ? n : 0, 0);
  for (i = 0; i < n; i++) {
    nl_setting_desc s;
    check(L, c, on ? nl_setting_describe_on(c->ctx, d, i, &s) : nl_setting_describe(c->ctx, i, &s));
    lua_createtable(L, 0, 9);
    setstr(L, "key", s.key);
    setstr(L, "doc", s.doc);
    setnum(L, "value", s.value);
    setnum(L, "def", s.def);
    setnum(L, "builtin", s.builtin);
    setnum(L, "min", s.min);
    setnum(L, "max", s.max);
    setint(L, "integer", s.integer);
    setstr(L, "origin", s.origin);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

static int l_model_defaults(lua_State *L)
{
  int32_t i, n = nl_model_default_count();
  lua_createtable(L, n > 0 ? n : 0, 0);
  for (i = 0; i < n; i++) {
    nl_model_default m;
    nl_status st = nl_model_default_describe(i, &m);
    if (st != NL_OK)
      fail(L, "model_defaults: cannot describe entry %d: %s", (int)i, nl_status_name(st));
    lua_createtable(L, 0, 3);
    setstr(L, "model", m.model);
    setstr(L, "key", m.key);
    setnum(L, "value", m.value);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

static int l_set(lua_State *L)
{
  LCtx *c = getctx(L);
  const char *key = checkstr(L, 1, "key");
  check(L, c, nl_set(c->ctx, key, checknum(L, 2, "value")));
  return 0;
}

static int l_get(lua_State *L)
{
  LCtx *c = getctx(L);
  double v = 0;
  check(L, c, nl_get(c->ctx, checkstr(L, 1, "key"), &v));
  lua_pushnumber(L, v);
  return 1;
}

static int l_variants(lua_State *L)
{
  int32_t i, n = nl_variant_count();
  lua_createtable(L, n > 0 ? n : 0, 0);
  for (i = 0; i < n; i++) {
    nl_variant_desc v;
    nl_status st = nl_variant_describe(i, &v);
    if (st != NL_OK)
      fail(L, "variants: cannot describe entry %d: %s", (int)i, nl_status_name(st));
    lua_createtable(L, 0, 9);
    setstr(L, "name", v.name);
    setstr(L, "op", v.op);
    setstr(L, "pass", v.pass);
    setstr(L, "strategy", v.strategy);
    setint(L, "backend", v.backend);
    setint(L, "reduces", v.reduces);
    setint(L, "default_reduce", v.default_reduce);
    setstr(L, "summary", v.summary);
    setstr(L, "limits", v.limits);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

static int l_buffer(lua_State *L)
{
  LCtx *c = getctx(L);
  nl_device dev = checkdevice(L, 1);
  int32_t dtype = (int32_t)checkint(L, 3, "dtype");
  int64_t shape[2], stride;
  lua_Integer ndim, i;
  LBuf *b;
  if (!lua_istable(L, 4))
    fail(L, "argument 'shape' must be a table, got %s", luaL_typename(L, 4));
  ndim = luaL_len(L, 4);
  if (ndim < 1 || ndim > 2)
    fail(L, "shape must have 1 or 2 dimensions, got %I", ndim);
  for (i = 0; i < ndim; i++) {
    lua_geti(L, 4, i + 1);
    shape[i] = checkint(L, -1, "shape");
    lua_pop(L, 1);
  }
  stride = lua_isnoneornil(L, 5) ? 0 : checkint(L, 5, "stride");
  b = newbuf(L);
  check(L, c, nl_buf_new(c->ctx, dev, dtype, (int32_t)ndim, shape, stride, &b->buf));
  return 1;
}

static int l_is_buffer(lua_State *L)
{
  lua_pushboolean(L, luaL_testudata(L, 1, BUF_MT) != NULL);
  return 1;
}

static int l_compare(lua_State *L)
{
  LCtx *c = getctx(L);
  nl_buf *a = checkbuf(L, 1, "a");
  nl_buf *ref = checkbuf(L, 2, "ref");
  nl_cmp r;
  memset(&r, 0, sizeof r);
  check(L, c, nl_compare(c->ctx, a, ref, checknum(L, 3, "atol"), checknum(L, 4, "rtol"), &r));
  lua_createtable(L, 0, 12);
  setint(L, "n", r.n);
  setint(L, "n_bad", r.n_bad);
  setint(L, "n_nan", r.n_nan);
  setint(L, "worst", r.worst);
  setnum(L, "max_abs", r.max_abs);
  setnum(L, "max_rel", r.max_rel);
  setnum(L, "ulp_p50", r.ulp_p50);
  setnum(L, "ulp_p99", r.ulp_p99);
  setnum(L, "ulp_max", r.ulp_max);
  setnum(L, "a_worst", r.a_worst);
  setnum(L, "ref_worst", r.ref_worst);
  setnum(L, "rms_ref", r.rms_ref);
  return 1;
}

static int l_supports(lua_State *L)
{
  LCtx *c = getctx(L);
  const char *name = checkstr(L, 1, "variant");
  nl_norm_args a;
  nl_status st;
  toargs(L, 2, &a);
  st = nl_supports(c->ctx, name, &a);
  if (st == NL_EUNSUPPORTED) {
    lua_pushboolean(L, 0);
    lua_pushstring(L, nl_ctx_last_error(c->ctx));
    return 2;
  }
  check(L, c, st);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_resolve(lua_State *L)
{
  LCtx *c = getctx(L);
  const char *name = checkstr(L, 1, "variant");
  nl_norm_args a;
  char out[128];
  toargs(L, 2, &a);
  out[0] = '\0';
  check(L, c, nl_resolve(c->ctx, name, &a, out, (int64_t)sizeof out));
  out[sizeof out - 1] = '\0';
  lua_pushstring(L, out);
  return 1;
}

static int l_run(lua_State *L)
{
  LCtx *c = getctx(L);
  const char *name = checkstr(L, 1, "variant");
  nl_norm_args a;
  nl_run_info info;
  toargs(L, 2, &a);
  memset(&info, 0, sizeof info);
  check(L, c, nl_run(c->ctx, name, &a, &info));
  info.variant[sizeof info.variant - 1] = '\0';
  push_info(L, &info);
  return 1;
}

static int l_bench(lua_State *L)
{
  LCtx *c = getctx(L);
  const char *name = checkstr(L, 1, "variant");
  nl_norm_args a;
  nl_bench_opts o;
  nl_bench_result r;
  toargs(L, 2, &a);
  toopts(L, 3, &o);
  memset(&r, 0, sizeof r);
  check(L, c, nl_bench(c->ctx, name, &a, &o, &r));
  r.run.variant[sizeof r.run.variant - 1] = '\0';
  lua_createtable(L, 0, 12);
  push_info(L, &r.run);
  lua_setfield(L, -2, "run");
  setnum(L, "median_ms", r.median_ms);
  setnum(L, "min_ms", r.min_ms);
  setnum(L, "max_ms", r.max_ms);
  setnum(L, "mean_ms", r.mean_ms);
  setnum(L, "gbps", r.gbps);
  setnum(L, "extra_gbps", r.extra_gbps);
  setint(L, "batches", r.batches);
  setint(L, "reps", r.reps);
  setint(L, "sets", r.sets);
  setint(L, "mode", r.mode);
  setint(L, "footprint_bytes", r.footprint_bytes);
  return 1;
}

/* ---- the context userdata ---- */

static int ctx_gc(lua_State *L)
{
  LCtx *c = (LCtx *)luaL_checkudata(L, 1, CTX_MT);
  if (c->ctx != NULL) {
    nl_ctx_free(c->ctx);
    c->ctx = NULL;
  }
  return 0;
}

/* ---- module ---- */

#define K(name) {#name, name}
static const struct {
  const char *name;
  int value;
} constants[] = {
  K(NL_OK), K(NL_EINVAL), K(NL_ENOMEM), K(NL_EUNSUPPORTED), K(NL_ECUDA), K(NL_ENODEV),
  K(NL_EINTERRUPTED), K(NL_EINTERNAL),
  K(NL_CPU), K(NL_CUDA),
  K(NL_F32), K(NL_F16), K(NL_BF16), K(NL_F8E4M3), K(NL_F8E5M2), K(NL_F64),
  K(NL_CAST_LLAMA), K(NL_CAST_GEMMA), K(NL_CAST_NONE),
  K(NL_REDUCE_DEFAULT), K(NL_REDUCE_TEMP), K(NL_REDUCE_PARTIALS), K(NL_REDUCE_ATOMIC),
  K(NL_BENCH_ROTATE), K(NL_BENCH_FLUSH), K(NL_BENCH_HOT),
};
#undef K

/* Functions that take the context userdata as upvalue 1. */
static const luaL_Reg module_funcs[] = {
  {"version", l_version},
  {"encode", l_encode},
  {"decode", l_decode},
  {"cuda_compiled", l_cuda_compiled},
  {"lib_prefix", l_lib_prefix},
  {"last_failure", l_last_failure},
  {"interrupt", l_interrupt},
  {"set_device", l_set_device},
  {"next_seed", l_next_seed},
  {"set_seed", l_set_seed},
  {"sync", l_sync},
  {"device_count", l_device_count},
  {"device_info", l_device_info},
  {"roofline", l_roofline},
  {"settings", l_settings},
  {"model_defaults", l_model_defaults},
  {"set", l_set},
  {"get", l_get},
  {"variants", l_variants},
  {"buffer", l_buffer},
  {"is_buffer", l_is_buffer},
  {"compare", l_compare},
  {"supports", l_supports},
  {"resolve", l_resolve},
  {"run", l_run},
  {"bench", l_bench},
  {NULL, NULL},
};

static const luaL_Reg buffer_methods[] = {
  {"free", buf_free},
  {"freed", buf_freed},
  {"desc", buf_desc},
  {"fill", buf_fill},
  {"fill_randn", buf_fill_randn},
  {"fill_uniform", buf_fill_uniform},
  {"copy_", buf_copy},
  {"read", buf_read},
  {"write", buf_write},
  {NULL, NULL},
};

int luaopen_normlab_binding_c(lua_State *L)
{
  LCtx *c;
  nl_status st;
  nl_device cpu;
  size_t i;
  int mod, ud;

  if (lua_getfield(L, LUA_REGISTRYINDEX, KEY_MODULE) == LUA_TTABLE)
    return 1;
  lua_pop(L, 1);

  lua_newtable(L);
  mod = lua_gettop(L);

  c = (LCtx *)lua_newuserdatauv(L, sizeof *c, 0);
  ud = lua_gettop(L);
  c->ctx = NULL;
  c->failed = NL_OK;
  if (luaL_newmetatable(L, CTX_MT)) {
    lua_pushcfunction(L, ctx_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, ud);
  cpu.backend = NL_CPU;
  cpu.index = 0;
  st = nl_ctx_new(cpu, &c->ctx);
  if (st != NL_OK)
    return luaL_error(L, "normlab: cannot create a context: %s", nl_status_name(st));
  lua_pushlightuserdata(L, c->ctx);
  lua_setfield(L, LUA_REGISTRYINDEX, KEY_CTX);

  lua_pushvalue(L, mod);
  lua_pushvalue(L, ud);
  luaL_setfuncs(L, module_funcs, 1);  /* pops the upvalue */
  lua_pop(L, 1);
  lua_pushliteral(L, "c");
  lua_setfield(L, mod, "binding");

  lua_createtable(L, 0, (int)(sizeof constants / sizeof constants[0]));
  for (i = 0; i < sizeof constants / sizeof constants[0]; i++) {
    lua_pushinteger(L, constants[i].value);
    lua_setfield(L, -2, constants[i].name);
  }
  lua_setfield(L, mod, "constants");

  /* Buffer: methods; fields: getters. Both stay plain tables that init.lua extends. */
  lua_newtable(L);
  lua_pushvalue(L, ud);
  luaL_setfuncs(L, buffer_methods, 1);
  lua_pushvalue(L, -1);
  lua_setfield(L, mod, "Buffer");
  lua_newtable(L);
  lua_pushvalue(L, -1);
  lua_setfield(L, mod, "fields");
  /* stack: mod ud Buffer fields */

  luaL_newmetatable(L, BUF_MT);
  lua_pushvalue(L, -3);
  lua_pushvalue(L, -3);
  lua_pushcclosure(L, buf_index, 2);
  lua_setfield(L, -2, "__index");
  lua_pushvalue(L, -3);
  lua_pushcclosure(L, buf_tostring, 1);
  lua_setfield(L, -2, "__tostring");
  lua_pushcfunction(L, buf_free);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, buf_free);
  lua_setfield(L, -2, "__close");
  lua_pushcfunction(L, buf_len);
  lua_setfield(L, -2, "__len");
  lua_settop(L, mod);

  lua_pushvalue(L, mod);
  lua_setfield(L, LUA_REGISTRYINDEX, KEY_MODULE);
  return 1;
}
