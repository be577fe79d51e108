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
 * Interface (numbers for enums; a device is a backend and an index; a struct of normlab.h is
 * a table keyed by its field names, those of a nested nl_device spread into it):
 *   binding = "c"; constants; structs: every struct of normlab.h as the list of its fields,
 *   {name =, kind = [, struct =]} (generated from the header: cmake/gen_structs.cmake);
 *   Buffer, the buffers' method table, and fields, getters that their __index consults
 *   after Buffer (fields[k](buf)), both extended by the Lua library;
 *   version(); cuda_compiled(); build_id(); lib_prefix(s); last_failure() -> status, message of the
 *   latest error raised from a core status (so that a caller holding an error can tell
 *   whether it was that one); interrupt(); set_device(b, i); next_seed(); set_seed(s);
 *   sync(b, i); device_count(b); device_info(b, i) -> nl_device_info; roofline(b, i);
 *   settings([b, i]) -> list of nl_setting_desc; model_defaults() -> list of nl_model_default;
 *   set(key, v); get(key); reset([key]) (nil: every setting); variants() -> list of nl_variant_desc;
 *   buffer(b, i, dtype, shape, stride); is_buffer(v); compare(a, ref, atol, rtol) -> nl_cmp;
 *   supports(name, args) -> true | false, reason; resolve(name, args) -> name;
 *   run(name, args) -> nl_run_info; bench(name, args, opts) -> nl_bench_result (args: the
 *   fields of nl_norm_args, a buffer or false/nil each; opts: nl_bench_opts, or nil);
 *   dtype_size(dtype); encode(dtype, values) -> bit patterns; decode(dtype, patterns) ->
 *   values; fill(b, v); fill_randn(b, seed, mean, std); fill_uniform(b, seed, lo, hi);
 *   copy(dst, src); read(b, offset, count) -> values; write(b, offset, values).
 *   Buffer methods: free(), freed(), desc() -> nl_buf_desc.
 *   Buffers' metatable: __index, __gc, __close, __len (numel), __tostring (Buffer.__tostring
 *   when the Lua library set one).
 *
 * Arguments are the Lua library's, which checked them (lua/normlab/check.lua): types,
 * integers, ranges, the keys of args and opts. This file checks only what the library cannot:
 * that a buffer argument is one of this module's buffers and still alive, and that a string
 * argument is a string (the core gets its pointer).
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

/* ---- the structs of normlab.h, described by the generated structs.h ---- */

/* Field kinds (cmake/gen_structs.cmake says which C type each stands for) and their names in
 * `structs`, in the same order. */
enum {
  KIND_I32, KIND_I64, KIND_U32, KIND_U64, KIND_F64, KIND_STRING, KIND_CHARS, KIND_STRUCT,
  KIND_SPREAD, KIND_BUFFER
};
static const char *const kind_names[] = {
  "i32", "i64", "u32", "u64", "f64", "string", "chars", "struct", "spread", "buffer"
};

typedef struct Struct Struct;

typedef struct Field {
  const char *name;
  size_t offset;
  size_t size;         /* chars: the array's length */
  int kind;
  const Struct *sub;   /* struct and spread: the nested struct */
} Field;

struct Struct {
  const char *name;
  size_t size;
  size_t n;
  const Field *fields;
};

#define FIELD(T, f, kind, sub) {#f, offsetof(T, f), sizeof(((T *)0)->f), KIND_##kind, sub}
#define STRUCT(T) {#T, sizeof(T), sizeof fields_##T / sizeof fields_##T[0], fields_##T}
#include "structs.h"
#undef FIELD
#undef STRUCT

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
 * context's message, remembered with its status for last_failure(). */
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

/* ---- arguments ---- */

static nl_device todevice(lua_State *L, int i)
{
  nl_device d;
  d.backend = (int32_t)lua_tointeger(L, i);
  d.index = (int32_t)lua_tointeger(L, i + 1);
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

/* ---- structs and tables ---- */

/* Sets the fields of the struct s at p into the table on top of the stack. A NULL string
 * leaves its key out. */
static void set_fields(lua_State *L, const Struct *s, const void *p)
{
  size_t i;
  for (i = 0; i < s->n; i++) {
    const Field *f = &s->fields[i];
    const void *at = (const char *)p + f->offset;
    switch (f->kind) {
    case KIND_I32:
      lua_pushinteger(L, *(const int32_t *)at);
      break;
    case KIND_I64:
      lua_pushinteger(L, (lua_Integer)*(const int64_t *)at);
      break;
    case KIND_U32:
      lua_pushinteger(L, *(const uint32_t *)at);
      break;
    case KIND_U64:
      /* An integer where one holds the value, else the nearest number (what LuaJIT gets). */
      if (*(const uint64_t *)at <= (uint64_t)LUA_MAXINTEGER)
        lua_pushinteger(L, (lua_Integer)*(const uint64_t *)at);
      else
        lua_pushnumber(L, (lua_Number)*(const uint64_t *)at);
      break;
    case KIND_F64:
      lua_pushnumber(L, *(const double *)at);
      break;
    case KIND_STRING:
      if (*(const char *const *)at == NULL)
        continue;
      lua_pushstring(L, *(const char *const *)at);
      break;
    case KIND_CHARS: {
      /* Up to the NUL, or the whole array when the core filled it to the last byte. */
      const char *end = memchr(at, '\0', f->size);
      lua_pushlstring(L, at, end != NULL ? (size_t)(end - (const char *)at) : f->size);
      break;
    }
    case KIND_STRUCT:
      lua_createtable(L, 0, (int)f->sub->n);
      set_fields(L, f->sub, at);
      break;
    case KIND_SPREAD:
      set_fields(L, f->sub, at);
      continue;
    default:
      continue;  /* a buffer: the structs that hold one only go in (nl_norm_args) */
    }
    lua_setfield(L, -2, f->name);
  }
}

static void push_struct(lua_State *L, const Struct *s, const void *p)
{
  lua_createtable(L, 0, (int)s->n);
  set_fields(L, s, p);
}

/* The struct s at p from the table at idx (nil: all zero). The library checked the table
 * against `structs` (check.lua); keys it lacks stay 0 or NULL, and so do buffers given as
 * false. */
static void to_struct(lua_State *L, int idx, const Struct *s, void *p)
{
  size_t i;
  memset(p, 0, s->size);
  idx = lua_absindex(L, idx);
  if (lua_isnoneornil(L, idx))
    return;
  for (i = 0; i < s->n; i++) {
    const Field *f = &s->fields[i];
    void *at = (char *)p + f->offset;
    if (lua_getfield(L, idx, f->name) != LUA_TNIL) {
      switch (f->kind) {
      case KIND_I32:
        *(int32_t *)at = (int32_t)lua_tointeger(L, -1);
        break;
      case KIND_I64:
        *(int64_t *)at = (int64_t)lua_tointeger(L, -1);
        break;
      case KIND_U32:
        *(uint32_t *)at = (uint32_t)lua_tointeger(L, -1);
        break;
      case KIND_U64:
        *(uint64_t *)at = (uint64_t)lua_tointeger(L, -1);
        break;
      case KIND_F64:
        *(double *)at = (double)lua_tonumber(L, -1);
        break;
      case KIND_BUFFER:
        *(nl_buf **)at = lua_toboolean(L, -1) ? checkbuf(L, -1, f->name) : NULL;
        break;
      default:
        break;  /* check.lua lets no other kind in */
      }
    }
    lua_pop(L, 1);
  }
}

/* structs: {name = {{name =, kind = [, struct =]}, ...}, ...} */
static void push_structs(lua_State *L)
{
  size_t i, j;
  lua_createtable(L, 0, (int)(sizeof structs / sizeof structs[0]));
  for (i = 0; i < sizeof structs / sizeof structs[0]; i++) {
    lua_createtable(L, (int)structs[i]->n, 0);
    for (j = 0; j < structs[i]->n; j++) {
      const Field *f = &structs[i]->fields[j];
      lua_createtable(L, 0, 3);
      lua_pushstring(L, f->name);
      lua_setfield(L, -2, "name");
      lua_pushstring(L, kind_names[f->kind]);
      lua_setfield(L, -2, "kind");
      if (f->sub != NULL) {
        lua_pushstring(L, f->sub->name);
        lua_setfield(L, -2, "struct");
      }
      lua_rawseti(L, -2, (lua_Integer)j + 1);
    }
    lua_setfield(L, -2, structs[i]->name);
  }
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
  push_struct(L, &struct_nl_buf_desc, &d);
  return 1;
}

static int buf_len(lua_State *L)
{
  nl_buf_desc d;
  describe(L, checkbuf(L, 1, NULL), &d);
  lua_pushinteger(L, (lua_Integer)d.numel);
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

static int l_fill(lua_State *L)
{
  LCtx *c = getctx(L);
  check(L, c, nl_buf_fill(c->ctx, checkbuf(L, 1, NULL), lua_tonumber(L, 2)));
  return 0;
}

static int l_fill_randn(lua_State *L)
{
  LCtx *c = getctx(L);
  nl_buf *b = checkbuf(L, 1, NULL);
  check(L, c, nl_buf_randn(c->ctx, b, (uint64_t)lua_tointeger(L, 2), lua_tonumber(L, 3),
                           lua_tonumber(L, 4)));
  return 0;
}

static int l_fill_uniform(lua_State *L)
{
  LCtx *c = getctx(L);
  nl_buf *b = checkbuf(L, 1, NULL);
  check(L, c, nl_buf_uniform(c->ctx, b, (uint64_t)lua_tointeger(L, 2), lua_tonumber(L, 3),
                             lua_tonumber(L, 4)));
  return 0;
}

static int l_copy(lua_State *L)
{
  LCtx *c = getctx(L);
  nl_buf *dst = checkbuf(L, 1, NULL);
  check(L, c, nl_buf_copy(c->ctx, checkbuf(L, 2, "src"), dst));
  return 0;
}

/* read(b, offset, count): count is at most the buffer's size (the library checked), so the
 * scratch below is a real allocation. */
static int l_read(lua_State *L)
{
  LCtx *c = getctx(L);
  nl_buf *b = checkbuf(L, 1, NULL);
  int64_t off = (int64_t)lua_tointeger(L, 2), n = (int64_t)lua_tointeger(L, 3), i;
  /* Scratch as a userdata: collected even when the read raises. */
  double *tmp = (double *)lua_newuserdatauv(L, (size_t)n * sizeof(double) + 1, 0);
  check(L, c, nl_buf_read_f64(c->ctx, b, off, n, tmp));
  lua_createtable(L, n > INT32_MAX ? 0 : (int)n, 0);
  for (i = 0; i < n; i++) {
    lua_pushnumber(L, tmp[i]);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

static int l_write(lua_State *L)
{
  LCtx *c = getctx(L);
  nl_buf *b = checkbuf(L, 1, NULL);
  int64_t off = (int64_t)lua_tointeger(L, 2);
  lua_Integer n = luaL_len(L, 3), i;
  double *tmp = (double *)lua_newuserdatauv(L, (size_t)n * sizeof(double) + 1, 0);
  for (i = 0; i < n; i++) {
    lua_geti(L, 3, i + 1);
    tmp[i] = (double)lua_tonumber(L, -1);
    lua_pop(L, 1);
  }
  check(L, c, nl_buf_write_f64(c->ctx, b, off, (int64_t)n, tmp));
  return 0;
}

/* ---- module functions ---- */

static int l_dtype_size(lua_State *L)
{
  lua_pushinteger(L, nl_dtype_size((int32_t)lua_tointeger(L, 1)));
  return 1;
}

/* encode(dtype, {values}) -> {bit patterns}; decode(dtype, {patterns}) -> {values}: the
 * host conversions of nl_convert on raw elements of dtype_size(dtype) <= 4 bytes (so that
 * every pattern is an exact Lua number under LuaJIT too), little-endian. */
static int l_encode(lua_State *L)
{
  int32_t dt = (int32_t)lua_tointeger(L, 1);
  int es = nl_dtype_size(dt), b;
  lua_Integer n = luaL_len(L, 2), i;
  double *src = (double *)lua_newuserdatauv(L, (size_t)n * sizeof(double) + 1, 0);
  unsigned char *dst = (unsigned char *)lua_newuserdatauv(L, (size_t)n * (size_t)es + 1, 0);
  for (i = 0; i < n; i++) {
    lua_geti(L, 2, i + 1);
    src[i] = (double)lua_tonumber(L, -1);
    lua_pop(L, 1);
  }
  nl_convert(NL_F64, src, dt, dst, n);
  lua_createtable(L, (int)n, 0);
  for (i = 0; i < n; i++) {
    uint32_t bits = 0;
    for (b = es - 1; b >= 0; b--)
      bits = (bits << 8) | dst[i * es + b];
    lua_pushinteger(L, (lua_Integer)bits);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

static int l_decode(lua_State *L)
{
  int32_t dt = (int32_t)lua_tointeger(L, 1);
  int es = nl_dtype_size(dt), b;
  lua_Integer n = luaL_len(L, 2), i;
  unsigned char *src = (unsigned char *)lua_newuserdatauv(L, (size_t)n * (size_t)es + 1, 0);
  double *dst = (double *)lua_newuserdatauv(L, (size_t)n * sizeof(double) + 1, 0);
  for (i = 0; i < n; i++) {
    uint64_t bits;
    lua_geti(L, 2, i + 1);
    bits = (uint64_t)lua_tointeger(L, -1);
    lua_pop(L, 1);
    for (b = 0; b < es; b++)
      src[i * es + b] = (unsigned char)(bits >> (8 * b));
  }
  nl_convert(dt, src, NL_F64, dst, n);
  lua_createtable(L, (int)n, 0);
  for (i = 0; i < n; i++) {
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

static int l_build_id(lua_State *L)
{
  lua_pushstring(L, nl_build_id());
  return 1;
}

static int l_lib_prefix(lua_State *L)
{
  luaL_checkstring(L, 1);
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
  check(L, c, nl_ctx_set_device(c->ctx, todevice(L, 1)));
  return 0;
}

static int l_next_seed(lua_State *L)
{
  lua_pushinteger(L, (lua_Integer)nl_ctx_next_seed(getctx(L)->ctx));
  return 1;
}

static int l_set_seed(lua_State *L)
{
  nl_ctx_set_seed(getctx(L)->ctx, (uint64_t)lua_tointeger(L, 1));
  return 0;
}

static int l_sync(lua_State *L)
{
  LCtx *c = getctx(L);
  check(L, c, nl_ctx_sync(c->ctx, todevice(L, 1)));
  return 0;
}

static int l_device_count(lua_State *L)
{
  lua_pushinteger(L, nl_device_count((int32_t)lua_tointeger(L, 1)));
  return 1;
}

static int l_device_info(lua_State *L)
{
  LCtx *c = getctx(L);
  nl_device_info in;
  memset(&in, 0, sizeof in);
  check(L, c, nl_device_query(c->ctx, todevice(L, 1), &in));
  push_struct(L, &struct_nl_device_info, &in);
  return 1;
}

static int l_roofline(lua_State *L)
{
  LCtx *c = getctx(L);
  double gbps = 0;
  check(L, c, nl_roofline(c->ctx, todevice(L, 1), &gbps));
  lua_pushnumber(L, gbps);
  return 1;
}

/* settings([b, i]): as on the default device, or on device (b, i) */
static int l_settings(lua_State *L)
{
  LCtx *c = getctx(L);
  int32_t i, n = nl_setting_count();
  int on = !lua_isnoneornil(L, 1);
  nl_device d = todevice(L, 1);
  lua_createtable(L, n > 0 ? n : 0, 0);
  for (i = 0; i < n; i++) {
    nl_setting_desc s;
    check(L, c, on ? nl_setting_describe_on(c->ctx, d, i, &s) : nl_setting_describe(c->ctx, i, &s));
    push_struct(L, &struct_nl_setting_desc, &s);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

/* A describe call that takes no context fails with a status alone. */
static void described(lua_State *L, const char *what, int32_t i, nl_status st)
{
  if (st != NL_OK)
    fail(L, "%s: cannot describe entry %d: %s", what, (int)i, nl_status_name(st));
}

static int l_model_defaults(lua_State *L)
{
  int32_t i, n = nl_model_default_count();
  lua_createtable(L, n > 0 ? n : 0, 0);
  for (i = 0; i < n; i++) {
    nl_model_default m;
    described(L, "model_defaults", i, nl_model_default_describe(i, &m));
    push_struct(L, &struct_nl_model_default, &m);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

static int l_variants(lua_State *L)
{
  int32_t i, n = nl_variant_count();
  lua_createtable(L, n > 0 ? n : 0, 0);
  for (i = 0; i < n; i++) {
    nl_variant_desc v;
    described(L, "variants", i, nl_variant_describe(i, &v));
    push_struct(L, &struct_nl_variant_desc, &v);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

static int l_set(lua_State *L)
{
  LCtx *c = getctx(L);
  check(L, c, nl_set(c->ctx, luaL_checkstring(L, 1), lua_tonumber(L, 2)));
  return 0;
}

/* reset([key]): key nil resets every setting */
static int l_reset(lua_State *L)
{
  LCtx *c = getctx(L);
  check(L, c, nl_reset(c->ctx, lua_isnoneornil(L, 1) ? NULL : luaL_checkstring(L, 1)));
  return 0;
}

static int l_get(lua_State *L)
{
  LCtx *c = getctx(L);
  double v = 0;
  check(L, c, nl_get(c->ctx, luaL_checkstring(L, 1), &v));
  lua_pushnumber(L, v);
  return 1;
}

static int l_buffer(lua_State *L)
{
  LCtx *c = getctx(L);
  int64_t shape[2] = {0, 0};
  lua_Integer ndim = luaL_len(L, 4), i;
  LBuf *b;
  for (i = 0; i < ndim && i < 2; i++) {
    lua_geti(L, 4, i + 1);
    shape[i] = (int64_t)lua_tointeger(L, -1);
    lua_pop(L, 1);
  }
  b = newbuf(L);
  /* ndim goes to the core as given: it refuses anything but 1 or 2 before reading shape. */
  check(L, c, nl_buf_new(c->ctx, todevice(L, 1), (int32_t)lua_tointeger(L, 3), (int32_t)ndim,
                         shape, (int64_t)lua_tointeger(L, 5), &b->buf));
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
  check(L, c, nl_compare(c->ctx, a, ref, lua_tonumber(L, 3), lua_tonumber(L, 4), &r));
  push_struct(L, &struct_nl_cmp, &r);
  return 1;
}

static int l_supports(lua_State *L)
{
  LCtx *c = getctx(L);
  const char *name = luaL_checkstring(L, 1);
  nl_norm_args a;
  nl_status st;
  to_struct(L, 2, &struct_nl_norm_args, &a);
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
  const char *name = luaL_checkstring(L, 1);
  nl_norm_args a;
  char out[128];
  to_struct(L, 2, &struct_nl_norm_args, &a);
  out[0] = '\0';
  check(L, c, nl_resolve(c->ctx, name, &a, out, (int64_t)sizeof out));
  out[sizeof out - 1] = '\0';
  lua_pushstring(L, out);
  return 1;
}

static int l_run(lua_State *L)
{
  LCtx *c = getctx(L);
  const char *name = luaL_checkstring(L, 1);
  nl_norm_args a;
  nl_run_info info;
  to_struct(L, 2, &struct_nl_norm_args, &a);
  memset(&info, 0, sizeof info);
  check(L, c, nl_run(c->ctx, name, &a, &info));
  push_struct(L, &struct_nl_run_info, &info);
  return 1;
}

static int l_bench(lua_State *L)
{
  LCtx *c = getctx(L);
  const char *name = luaL_checkstring(L, 1);
  nl_norm_args a;
  nl_bench_opts o;
  nl_bench_result r;
  to_struct(L, 2, &struct_nl_norm_args, &a);
  to_struct(L, 3, &struct_nl_bench_opts, &o);
  memset(&r, 0, sizeof r);
  check(L, c, nl_bench(c->ctx, name, &a, &o, &r));
  push_struct(L, &struct_nl_bench_result, &r);
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
  K(NL_SCALING_DELAYED), K(NL_SCALING_CURRENT),
  K(NL_TRANSPOSE_DEFAULT), K(NL_TRANSPOSE_STRIDED), K(NL_TRANSPOSE_EXTERNAL), K(NL_TRANSPOSE_FUSED),
  K(NL_TRANSPOSE_CHUNKED),
};
#undef K

/* Functions that take the context userdata as upvalue 1. */
static const luaL_Reg module_funcs[] = {
  {"version", l_version},
  {"cuda_compiled", l_cuda_compiled},
  {"build_id", l_build_id},
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
  {"reset", l_reset},
  {"variants", l_variants},
  {"buffer", l_buffer},
  {"is_buffer", l_is_buffer},
  {"compare", l_compare},
  {"supports", l_supports},
  {"resolve", l_resolve},
  {"run", l_run},
  {"bench", l_bench},
  {"dtype_size", l_dtype_size},
  {"encode", l_encode},
  {"decode", l_decode},
  {"fill", l_fill},
  {"fill_randn", l_fill_randn},
  {"fill_uniform", l_fill_uniform},
  {"copy", l_copy},
  {"read", l_read},
  {"write", l_write},
  {NULL, NULL},
};

static const luaL_Reg buffer_methods[] = {
  {"free", buf_free},
  {"freed", buf_freed},
  {"desc", buf_desc},
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
  push_structs(L);
  lua_setfield(L, mod, "structs");

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
