/*
 * registry.c: validation of op arguments, the variant registry, `auto` resolution and
 * launches. Everything a variant may rely on is checked here once, so launchers only see
 * consistent shapes, dtypes, devices and aliasing; bad input changes nothing.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "registry.h"

static const char *const op_names[] = {"rmsnorm", "layernorm", "add_rmsnorm", "transpose"};
static const char *const pass_names[] = {"fwd", "bwd"};
static const char *const reduce_names[] = {"default", "temp", "partials", "atomic"};
static const char *const scaling_names[] = {"delayed", "current"};
static const char *const transpose_names[] = {"default", "strided", "external", "fused_tiled",
                                              "chunked"};
enum { N_OPS = (int)(sizeof op_names / sizeof op_names[0]) };

#define NAME_OF(names, v)                                                                         \
  ((v) >= 0 && (v) < (int32_t)(sizeof names / sizeof names[0]) ? names[v] : NULL)
const char *nl_reduce_name(int32_t reduce) { return NAME_OF(reduce_names, reduce); }
const char *nl_scaling_name(int32_t scaling) { return NAME_OF(scaling_names, scaling); }
const char *nl_transpose_name(int32_t way) { return NAME_OF(transpose_names, way); }
#undef NAME_OF

/* ---- the argument table: which fields each op and pass reads and writes ---- */

enum field { F_X, F_RES, F_DY, F_DRES, F_W, F_B, F_RSTD, F_MEAN, F_Y, F_RES_OUT, F_DX, F_DW, F_DB,
             F_YT, F_SCALE, F_AMAX, F_COUNT = NL_ARG_COUNT };

const size_t nl__arg_offsets[NL_ARG_COUNT] = {
  offsetof(nl_norm_args, x), offsetof(nl_norm_args, residual), offsetof(nl_norm_args, dy),
  offsetof(nl_norm_args, dres), offsetof(nl_norm_args, w), offsetof(nl_norm_args, b),
  offsetof(nl_norm_args, rstd), offsetof(nl_norm_args, mean), offsetof(nl_norm_args, y),
  offsetof(nl_norm_args, residual_out), offsetof(nl_norm_args, dx), offsetof(nl_norm_args, dw),
  offsetof(nl_norm_args, db), offsetof(nl_norm_args, yt), offsetof(nl_norm_args, scale),
  offsetof(nl_norm_args, amax),
};
enum use { NO = 0, REQ = 1, OPT = 2 };
/* ACT: [M, N] of x's dtype; OUT: y, [M, N] of x's dtype or (forward) fp8; TRANS: [N, M] of y's
 * dtype; VEC: [N]; STAT: fp32 [M]; ONE: fp32 [1] */
enum kind { ACT, OUT, TRANS, VEC, STAT, ONE };

static const struct {
  const char *name;
  enum kind kind;
} fields[F_COUNT] = {
  {"x", ACT}, {"residual", ACT}, {"dy", ACT}, {"dres", ACT}, {"w", VEC}, {"b", VEC},
  {"rstd", STAT}, {"mean", STAT}, {"y", OUT}, {"residual_out", ACT}, {"dx", ACT}, {"dw", VEC},
  {"db", VEC}, {"yt", TRANS}, {"scale", ONE}, {"amax", ONE},
};

/* use[op][pass][field]; dw and db are further tied to the presence of w and b, scale and amax
 * to an fp8 y. The transpose op has a forward only. */
static const unsigned char use[N_OPS][2][F_COUNT] = {
  /*            x    res  dy   dres w    b    rstd mean y    rout dx   dw   db   yt   scal amax */
  [NL_OP_RMSNORM] = {
    {REQ, NO,  NO,  NO,  OPT, NO,  OPT, NO,  REQ, NO,  NO,  NO,  NO,  OPT, OPT, OPT},
    {REQ, NO,  REQ, NO,  OPT, NO,  REQ, NO,  NO,  NO,  REQ, OPT, NO,  NO,  NO,  NO}},
  [NL_OP_LAYERNORM] = {
    {REQ, NO,  NO,  NO,  OPT, OPT, OPT, OPT, REQ, NO,  NO,  NO,  NO,  OPT, OPT, OPT},
    {REQ, NO,  REQ, NO,  OPT, OPT, REQ, REQ, NO,  NO,  REQ, OPT, OPT, NO,  NO,  NO}},
  [NL_OP_ADD_RMSNORM] = {
    {REQ, REQ, NO,  NO,  OPT, NO,  OPT, NO,  REQ, REQ, NO,  NO,  NO,  OPT, OPT, OPT},
    {REQ, NO,  REQ, OPT, OPT, NO,  REQ, NO,  NO,  NO,  REQ, OPT, NO,  NO,  NO,  NO}},
  [NL_OP_TRANSPOSE] = {
    {REQ, NO,  NO,  NO,  NO,  NO,  NO,  NO,  OPT, NO,  NO,  NO,  NO,  REQ, OPT, OPT},
    {NO,  NO,  NO,  NO,  NO,  NO,  NO,  NO,  NO,  NO,  NO,  NO,  NO,  NO,  NO,  NO}},
};

/* Whether the op writes field f: the outputs, a forward's statistics, and the scale that
 * current scaling computes. */
static int is_output(int pass, int scaling, enum field f)
{
  return f == F_Y || f == F_RES_OUT || f == F_DX || f == F_DW || f == F_DB || f == F_YT ||
         f == F_AMAX || (pass == NL_FWD && (f == F_RSTD || f == F_MEAN)) ||
         (f == F_SCALE && scaling == NL_SCALING_CURRENT);
}

int nl__arg_written(const nl_norm_args *a, int f)
{
  return is_output(a->dy ? NL_BWD : NL_FWD, a->scaling, (enum field)f);
}

static nl_buf *field(const nl_norm_args *a, enum field f) { return nl__arg(a, (int)f); }

/* Splits "<op>.<pass>.<strategy>". */
static nl_status parse_name(nl_ctx *ctx, const char *name, int *op, int *pass, char *strategy,
                            size_t cap)
{
  const char *d1, *d2;
  *op = *pass = -1;
  if (!name)
    return nl__err(ctx, NL_EINVAL, "variant name is NULL");
  d1 = strchr(name, '.');
  d2 = d1 ? strchr(d1 + 1, '.') : NULL;
  if (!d1 || !d2 || strchr(d2 + 1, '.') || !d2[1])
    return nl__err(ctx, NL_EINVAL,
                   "variant '%s' is not of the form <op>.<pass>.<strategy> (e.g. rmsnorm.bwd.row)",
                   name);
  for (int i = 0; i < N_OPS; i++)
    if ((size_t)(d1 - name) == strlen(op_names[i]) && strncmp(name, op_names[i], (size_t)(d1 - name)) == 0)
      *op = i;
  for (int i = 0; i < 2; i++)
    if ((size_t)(d2 - d1 - 1) == strlen(pass_names[i]) && strncmp(d1 + 1, pass_names[i], 3) == 0)
      *pass = i;
  if (*op < 0)
    return nl__err(ctx, NL_EINVAL,
                   "unknown op in '%s' (ops: rmsnorm, layernorm, add_rmsnorm, transpose)", name);
  if (*pass < 0)
    return nl__err(ctx, NL_EINVAL, "unknown pass in '%s' (passes: fwd, bwd)", name);
  if (strlen(d2 + 1) >= cap)
    return nl__err(ctx, NL_EINVAL, "unknown variant '%s'", name);
  strcpy(strategy, d2 + 1);
  return NL_OK;
}

/* ---- the registry ---- */

/* The kernels of `strategy` for an op and pass on a backend, from its kernel files' tables
 * (the norms' or the transpose op's). */
static const nlk_strategy *kernels_of(int backend, int op, int pass, const char *strategy)
{
  const int tr = op == NL_OP_TRANSPOSE;
  const nlk_strategy *const *tables =
      backend == NL_CUDA ? (tr ? nl__cuda_transpose_kernels : nl__cuda_kernels)
                         : (tr ? nl__cpu_transpose_kernels : nl__cpu_kernels);
  for (; *tables; tables++)
    for (const nlk_strategy *s = *tables; s->name; s++)
      if (s->pass == pass && strcmp(s->name, strategy) == 0)
        return s;
  return NULL;
}

static const nl_variant *find(int op, int pass, const char *strategy, int backend);

/* Whether variant v offers what k asks of its outputs: an fp8 y under k's scaling, and yt
 * written the way k->transpose asks (NLK_TRANSPOSE_NONE: any way it has). NL_OK, or
 * NL_EUNSUPPORTED with the reason in why. */
static nl_status caps_ok(const nl_variant *v, const nlk_norm *k, char *why, size_t cap)
{
  if (nlk_is_fp8(k->ydt) && !(v->fp8 & NL_SC(k->scaling))) {
    if (v->fp8)
      snprintf(why, cap, "%s: %s scaling of an fp8 output is not supported by this strategy",
               v->name, scaling_names[k->scaling]);
    else
      snprintf(why, cap, "%s: fp8 output (%s) not supported by this strategy", v->name,
               nlk_dtype_name(k->ydt));
    return NL_EUNSUPPORTED;
  }
  if (k->yt && v->op != NL_OP_TRANSPOSE &&
      (k->transpose ? !(v->transposes & NL_TR(k->transpose)) : !v->transposes)) {
    if (k->transpose)
      snprintf(why, cap, "%s: transpose '%s' (the transposed copy yt) is not supported by this strategy",
               v->name, transpose_names[k->transpose]);
    else
      snprintf(why, cap, "%s: no transposed copy yt from this strategy", v->name);
    return NL_EUNSUPPORTED;
  }
  return NL_OK;
}

/* Whether strategy s's kernels take the call k (its supports; none: every call); why: the
 * reason when they do not. */
static int takes(const nlk_strategy *s, const nlk_norm *k, char *why, size_t cap)
{
  return !s->supports || s->supports(k, why, cap) == NLK_OK;
}

int nl__fits(int backend, int pass, const char *strategy, const nlk_norm *k)
{
  char why[256];
  const nl_variant *v = find(k->op, pass, strategy, backend);
  const nlk_strategy *s = kernels_of(backend, k->op, pass, strategy);
  return v && s && caps_ok(v, k, why, sizeof why) == NL_OK && takes(s, k, why, sizeof why);
}

double nl__waves(int backend, int pass, const char *strategy, const nlk_norm *k)
{
  const nlk_strategy *s = kernels_of(backend, k->op, pass, strategy);
  return s && s->waves ? s->waves(k) : 0;
}

int32_t nl_variant_count(void) { return nl__cpu_variant_count + nl__cuda_variant_count; }

static const nl_variant *variant_at(int i)
{
  if (i < 0)
    return NULL;
  if (i < nl__cpu_variant_count)
    return &nl__cpu_variants[i];
  i -= nl__cpu_variant_count;
  return i < nl__cuda_variant_count ? &nl__cuda_variants[i] : NULL;
}

nl_status nl_variant_describe(int32_t index, nl_variant_desc *out)
{
  const nl_variant *v = variant_at(index);
  if (!v || !out)
    return NL_EINVAL;
  if (!v->resolve && !kernels_of(v->backend, v->op, v->pass, v->strategy))
    return NL_EINTERNAL; /* a registry line naming a strategy no kernel file exports */
  out->name = v->name;
  out->op = op_names[v->op];
  out->pass = pass_names[v->pass];
  out->strategy = v->strategy;
  out->backend = v->backend;
  out->reduces = v->reduces;
  out->default_reduce = v->default_reduce;
  out->summary = v->summary;
  out->limits = v->limits;
  out->fp8 = v->fp8;
  out->transposes = v->transposes;
  return NL_OK;
}

static const nl_variant *find(int op, int pass, const char *strategy, int backend)
{
  for (int i = 0; i < nl_variant_count(); i++) {
    const nl_variant *v = variant_at(i);
    if (v->op == op && v->pass == pass && v->backend == backend && strcmp(v->strategy, strategy) == 0)
      return v;
  }
  return NULL;
}

/* "ref, row, persistent, auto" for an op and pass over all backends, without repeats. */
static void list_strategies(int op, int pass, char *buf, size_t cap)
{
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < nl_variant_count(); i++) {
    const nl_variant *v = variant_at(i);
    int seen = 0;
    if (v->op != op || v->pass != pass)
      continue;
    for (int j = 0; j < i && !seen; j++) {
      const nl_variant *u = variant_at(j);
      seen = u->op == op && u->pass == pass && strcmp(u->strategy, v->strategy) == 0;
    }
    if (!seen && len < cap)
      len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", v->strategy);
  }
}

static void list_reduces(uint32_t mask, char *buf, size_t cap)
{
  size_t len = 0;
  buf[0] = '\0';
  for (int r = 1; r <= NL_REDUCE_ATOMIC; r++)
    if ((mask & NL_RED(r)) && len < cap)
      len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", reduce_names[r]);
}

static void list_dtypes(uint32_t mask, char *buf, size_t cap)
{
  size_t len = 0;
  buf[0] = '\0';
  for (int d = NL_F32; d <= NL_F64; d++)
    if ((mask & NL_DT(d)) && len < cap)
      len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", nl_dtype_name(d));
}

/* ---- validation: args -> kernel view ---- */

static nl_status validate(nl_ctx *ctx, const char *vname, int op, int pass,
                          const nl_norm_args *a, nl_plan *plan)
{
  nlk_norm *k = &plan->k;
  const nl_buf *x = a->x;
  char dn1[32], dn2[32];
  int64_t M, N;
  int32_t ydt;
  memset(plan, 0, sizeof *plan);
  for (int f = 0; f < F_COUNT; f++) {
    const nl_buf *b = field(a, (enum field)f);
    unsigned u = use[op][pass][f];
    if (b && b->ctx != ctx)
      return nl__err(ctx, NL_EINVAL, "%s: argument '%s' belongs to another context", vname,
                     fields[f].name);
    if (!b && u == REQ)
      return nl__err(ctx, NL_EINVAL, "%s: argument '%s' is required", vname, fields[f].name);
    if (b && u == NO)
      return nl__err(ctx, NL_EINVAL, "%s: argument '%s' is not used by this op and pass", vname,
                     fields[f].name);
  }
  if (pass == NL_BWD && (a->w != NULL) != (a->dw != NULL))
    return nl__err(ctx, NL_EINVAL, a->w ? "%s: argument 'dw' is required when w is given"
                                        : "%s: argument 'dw' is given but there is no weight w",
                   vname);
  if (pass == NL_BWD && (a->b != NULL) != (a->db != NULL))
    return nl__err(ctx, NL_EINVAL, a->b ? "%s: argument 'db' is required when b is given"
                                        : "%s: argument 'db' is given but there is no bias b",
                   vname);

  M = x->ndim == 2 ? x->rows : 1;
  N = x->cols;
  /* y's dtype, which yt shares: the transpose op without y takes yt's */
  ydt = a->y ? a->y->dtype : a->yt ? a->yt->dtype : x->dtype;
  for (int f = 0; f < F_COUNT; f++) {
    const nl_buf *b = field(a, (enum field)f);
    const char *fn = fields[f].name;
    if (!b)
      continue;
    if (!nl__same_device(b->device, x->device))
      return nl__err(ctx, NL_EINVAL, "%s: argument '%s' is on %s but x is on %s", vname, fn,
                     nl__device_name(b->device, dn1, sizeof dn1),
                     nl__device_name(x->device, dn2, sizeof dn2));
    switch (fields[f].kind) {
    case ACT:
    case OUT:
      if (b->rows != M || b->cols != N)
        return nl__err(ctx, NL_EINVAL, "%s: argument '%s' is [%lld, %lld] but x is [%lld, %lld]",
                       vname, fn, (long long)b->rows, (long long)b->cols, (long long)M,
                       (long long)N);
      if (fields[f].kind == OUT && b->dtype != x->dtype && !(pass == NL_FWD && nlk_is_fp8(b->dtype)))
        return nl__err(ctx, NL_EINVAL, "%s: argument '%s' is %s but x is %s (y is x's dtype, or "
                       "fp8e4m3 / fp8e5m2 from a forward pass)",
                       vname, fn, nl_dtype_name(b->dtype), nl_dtype_name(x->dtype));
      if (fields[f].kind == ACT && b->dtype != x->dtype)
        return nl__err(ctx, NL_EINVAL, "%s: argument '%s' is %s but x is %s (activations share one dtype)",
                       vname, fn, nl_dtype_name(b->dtype), nl_dtype_name(x->dtype));
      break;
    case TRANS:
      if (b->rows != N || b->cols != M)
        return nl__err(ctx, NL_EINVAL, "%s: argument '%s' is [%lld, %lld] but must be [%lld, %lld] "
                       "(x is [%lld, %lld]; yt is y transposed)", vname, fn, (long long)b->rows,
                       (long long)b->cols, (long long)N, (long long)M, (long long)M, (long long)N);
      if (a->y && b->dtype != a->y->dtype)
        return nl__err(ctx, NL_EINVAL, "%s: argument '%s' is %s but y is %s (yt is y transposed)",
                       vname, fn, nl_dtype_name(b->dtype), nl_dtype_name(a->y->dtype));
      if (b->dtype != x->dtype && !nlk_is_fp8(b->dtype))
        return nl__err(ctx, NL_EINVAL, "%s: argument '%s' is %s but x is %s (yt is x's dtype or "
                       "fp8e4m3 / fp8e5m2)", vname, fn, nl_dtype_name(b->dtype), nl_dtype_name(x->dtype));
      break;
    case VEC:
      if (b->rows != 1 || b->cols != N)
        return nl__err(ctx, NL_EINVAL, "%s: argument '%s' has %lld element%s, x has rows of %lld",
                       vname, fn, (long long)(b->rows * b->cols), b->rows * b->cols == 1 ? "" : "s",
                       (long long)N);
      if (b->dtype != NL_F32 && b->dtype != x->dtype)
        return nl__err(ctx, NL_EINVAL, "%s: argument '%s' is %s; weights are fp32 or x's dtype (%s)",
                       vname, fn, nl_dtype_name(b->dtype), nl_dtype_name(x->dtype));
      break;
    case STAT:
      if (b->ndim != 1 || b->cols != M)
        return nl__err(ctx, NL_EINVAL, "%s: argument '%s' must be a 1-D buffer of %lld elements (one per row)",
                       vname, fn, (long long)M);
      if (b->dtype != NL_F32)
        return nl__err(ctx, NL_EINVAL, "%s: argument '%s' is %s; rstd and mean are always fp32",
                       vname, fn, nl_dtype_name(b->dtype));
      break;
    case ONE:
      if (b->rows * b->cols != 1 || b->dtype != NL_F32)
        return nl__err(ctx, NL_EINVAL, "%s: argument '%s' must be a 1-element fp32 buffer, got %s [%lld, %lld]",
                       vname, fn, nl_dtype_name(b->dtype), (long long)b->rows, (long long)b->cols);
      if (!nlk_is_fp8(ydt))
        return nl__err(ctx, NL_EINVAL, "%s: argument '%s' comes with an fp8 output, but y is %s",
                       vname, fn, nl_dtype_name(ydt));
      break;
    }
  }
  if (a->dw && a->dw->dtype != a->w->dtype)
    return nl__err(ctx, NL_EINVAL, "%s: argument 'dw' is %s but w is %s", vname,
                   nl_dtype_name(a->dw->dtype), nl_dtype_name(a->w->dtype));
  if (a->db && a->db->dtype != a->b->dtype)
    return nl__err(ctx, NL_EINVAL, "%s: argument 'db' is %s but b is %s", vname,
                   nl_dtype_name(a->db->dtype), nl_dtype_name(a->b->dtype));
  if (a->scaling < NL_SCALING_DELAYED || a->scaling > NL_SCALING_CURRENT)
    return nl__err(ctx, NL_EINVAL, "%s: unknown scaling %d (0 delayed, 1 current)", vname,
                   (int)a->scaling);
  if (a->scaling == NL_SCALING_CURRENT && !nlk_is_fp8(ydt))
    return nl__err(ctx, NL_EINVAL, "%s: scaling 'current' needs an fp8 output, but y is %s", vname,
                   nl_dtype_name(ydt));
  if (a->transpose < NL_TRANSPOSE_DEFAULT || a->transpose > NL_TRANSPOSE_CHUNKED)
    return nl__err(ctx, NL_EINVAL, "%s: unknown transpose %d (0 default, 1 strided, 2 external, "
                   "3 fused_tiled, 4 chunked)", vname, (int)a->transpose);
  if (a->transpose != NL_TRANSPOSE_DEFAULT && op == NL_OP_TRANSPOSE)
    return nl__err(ctx, NL_EINVAL, "%s: option transpose '%s' applies to the norms' transposed copy; "
                   "the transpose op writes yt itself", vname, transpose_names[a->transpose]);
  if (a->transpose != NL_TRANSPOSE_DEFAULT && !a->yt)
    return nl__err(ctx, NL_EINVAL, "%s: option transpose '%s' needs yt, the buffer of the transposed "
                   "copy", vname, transpose_names[a->transpose]);

  /* Aliasing: an output may only share its buffer with the input it overwrites in place. */
  for (int f = 0; f < F_COUNT; f++) {
    const nl_buf *b = field(a, (enum field)f);
    if (!b || !is_output(pass, a->scaling, (enum field)f))
      continue;
    for (int g = 0; g < F_COUNT; g++) {
      int allowed = (f == F_DX && g == F_DY) || (f == F_RES_OUT && g == F_RES);
      if (g != f && field(a, (enum field)g) == b && !allowed)
        return nl__err(ctx, NL_EINVAL, "%s: output '%s' is the same buffer as '%s'%s", vname,
                       fields[f].name, fields[g].name,
                       f == F_DX || f == F_RES_OUT ? "" : " (outputs must be distinct buffers)");
    }
  }

  if (pass == NL_FWD && op != NL_OP_TRANSPOSE && !(a->eps > 0 && isfinite(a->eps)))
    return nl__err(ctx, NL_EINVAL, "%s: eps must be finite and > 0, got %g", vname, a->eps);
  if (!isfinite(a->offset))
    return nl__err(ctx, NL_EINVAL, "%s: offset must be finite", vname);
  if (a->offset != 0 && !a->w)
    return nl__err(ctx, NL_EINVAL, "%s: offset %g needs a weight (w is absent)", vname, a->offset);
  if (a->cast < NL_CAST_LLAMA || a->cast > NL_CAST_NONE)
    return nl__err(ctx, NL_EINVAL, "%s: unknown cast mode %d (0 llama, 1 gemma, 2 none)", vname,
                   (int)a->cast);
  if (a->reduce < NL_REDUCE_DEFAULT || a->reduce > NL_REDUCE_ATOMIC)
    return nl__err(ctx, NL_EINVAL, "%s: unknown reduction %d (0 default, 1 temp, 2 partials, 3 atomic)",
                   vname, (int)a->reduce);

  plan->device = x->device;
  k->op = op;
  k->dt = x->dtype;
  k->ydt = ydt;
  k->wdt = a->w ? a->w->dtype : NLK_NONE;
  k->bdt = a->b ? a->b->dtype : NLK_NONE;
  k->M = M;
  k->N = N;
#define VIEW(ptr, ld, buf) do { if (buf) { ptr = (buf)->data; ld = (buf)->stride; } } while (0)
  VIEW(k->x, k->sx, a->x);
  VIEW(k->res, k->sres, a->residual);
  VIEW(k->dy, k->sdy, a->dy);
  VIEW(k->dres, k->sdres, a->dres);
  VIEW(k->y, k->sy, a->y);
  VIEW(k->res_out, k->sres_out, a->residual_out);
  VIEW(k->dx, k->sdx, a->dx);
  VIEW(k->yt, k->syt, a->yt);
#undef VIEW
  k->scale = a->scale ? a->scale->data : NULL;
  k->amax = a->amax ? a->amax->data : NULL;
  plan->amax_given = a->amax != NULL;
  k->scaling = a->scaling;
  k->transpose = a->transpose; /* as asked (NONE: the variant's choice); nl__plan resolves it */
  k->w = a->w ? a->w->data : NULL;
  k->b = a->b ? a->b->data : NULL;
  k->dw = a->dw ? a->dw->data : NULL;
  k->db = a->db ? a->db->data : NULL;
  k->rstd = a->rstd ? a->rstd->data : NULL;
  k->mean = a->mean ? a->mean->data : NULL;
  k->eps = (float)a->eps;
  k->offset = (float)a->offset;
  k->cast = op == NL_OP_LAYERNORM ? NLK_CAST_GEMMA : a->cast;
  k->threads = nl__threads(ctx);
  k->interrupt = &ctx->interrupt;

  /* The byte model: every buffer the op reads or writes, once, at its logical size. In the
   * backward pass b is only a flag (db is written) and is not read. */
  plan->bytes = 0;
  for (int f = 0; f < F_COUNT; f++) {
    const nl_buf *b = field(a, (enum field)f);
    if (!b || (pass == NL_BWD && f == F_B))
      continue;
    if ((f == F_RES_OUT && b == a->residual) || (f == F_DX && b == a->dy)) {
      plan->bytes += b->rows * b->cols * nlk_dtype_size(b->dtype); /* written, read counted */
      continue;
    }
    plan->bytes += b->rows * b->cols * nlk_dtype_size(b->dtype);
  }
  return NL_OK;
}

/* Whether an fp8 y's transposed copy is chunked by default: from transpose.chunked_min_n to the
 * op's chunked_max_n columns, where the strategy offers it and its kernels take it. */
static int chunked_default(const nl_plan *plan)
{
  const nlk_norm *k = &plan->k;
  const int64_t max_n = k->op == NLK_LAYERNORM     ? plan->kn.tr_way.ln_chunked_max_n
                        : k->op == NLK_ADD_RMSNORM ? plan->kn.tr_way.add_chunked_max_n
                                                   : plan->kn.tr_way.chunked_max_n;
  return (plan->v->transposes & NL_TR(NL_TRANSPOSE_CHUNKED)) && nlk_is_fp8(k->ydt) &&
         k->N >= plan->kn.tr_way.chunked_min_n && k->N <= max_n;
}

/* The way a norm forward writes yt: the one asked for, else chunked (chunked_default, unless
 * try_chunked is 0: the strategy turned it down), else the variant's first of fused, external,
 * strided (caps_ok has checked that it has it). External
 * is the core's: the norm kernel sees no yt, and the backend's tiled transpose
 * (transpose.fwd.tiled) copies y into yt after it (ext_k), bit for bit: y is already in its
 * final dtype and scaled. */
static nl_status plan_transpose(nl_ctx *ctx, nl_plan *plan, int try_chunked)
{
  static const int order[] = {NL_TRANSPOSE_FUSED, NL_TRANSPOSE_EXTERNAL, NL_TRANSPOSE_STRIDED};
  nlk_norm *k = &plan->k, *t = &plan->ext_k;
  const nl_variant *tv;
  char why[256];
  int tr = k->transpose;
  if (!k->yt || plan->v->op == NL_OP_TRANSPOSE) {
    k->transpose = NLK_TRANSPOSE_NONE;
    return NL_OK;
  }
  if (tr == NL_TRANSPOSE_DEFAULT && try_chunked && chunked_default(plan))
    tr = NL_TRANSPOSE_CHUNKED;
  for (int i = 0; tr == NL_TRANSPOSE_DEFAULT && i < 3; i++)
    if (plan->v->transposes & NL_TR(order[i]))
      tr = order[i];
  plan->transpose = tr;
  k->transpose = tr;
  /* chunked: each chunk's y is stored for L2 to keep until its tiles read it back */
  k->keep_y = tr == NL_TRANSPOSE_CHUNKED;
  if (tr != NL_TRANSPOSE_EXTERNAL)
    return NL_OK;
  tv = find(NL_OP_TRANSPOSE, NL_FWD, "tiled", plan->device.backend);
  plan->ext = tv ? kernels_of(plan->device.backend, NL_OP_TRANSPOSE, NL_FWD, "tiled") : NULL;
  if (!plan->ext)
    return nl__err(ctx, NL_EINTERNAL, "%s: external transpose: no transpose.fwd.tiled on this backend",
                   plan->v->name);
  *t = *k;
  t->op = NLK_TRANSPOSE;
  t->dt = k->ydt;
  t->x = k->y;
  t->sx = k->sy;
  t->res = t->dy = t->dres = t->w = t->b = NULL;
  t->y = t->res_out = t->dx = t->dw = t->db = NULL;
  t->rstd = t->mean = t->scale = t->amax = NULL;
  t->scaling = NLK_SCALING_DELAYED;
  t->transpose = NLK_TRANSPOSE_NONE;
  t->ws = NULL;
  t->ws_bytes = 0;
  k->yt = NULL;
  k->transpose = NLK_TRANSPOSE_NONE;
  /* an fp8 y small enough is stored for L2 to keep, and the transpose reads it from there */
  k->keep_y = t->keep_y = nlk_is_fp8(k->ydt) && k->M * k->N <= (int64_t)k->tr.keep_max_mb << 20;
  if (!takes(plan->ext, t, why, sizeof why))
    return nl__err(ctx, NL_EUNSUPPORTED, "%s: external transpose: %s", plan->v->name, why);
  return NL_OK;
}

/* Validates, takes the settings of the data's device (its GPU model's defaults), resolves
 * `auto` and checks that the strategy takes the shape. */
nl_status nl__plan(nl_ctx *ctx, const char *variant, const nl_norm_args *args, nl_plan *plan)
{
  char strategy[48], why[256], list[256];
  const nl_variant *v;
  int op, pass, backend, ok;
  nl_status st = nl__enter(ctx);
  if (st != NL_OK)
    return st;
  if (!args || !plan)
    return nl__err(ctx, NL_EINVAL, "NULL arguments");
  if ((st = parse_name(ctx, variant, &op, &pass, strategy, sizeof strategy)) != NL_OK)
    return st;
  list_strategies(op, pass, list, sizeof list);
  if (!find(op, pass, strategy, NL_CPU) && !find(op, pass, strategy, NL_CUDA))
    return nl__err(ctx, NL_EINVAL, "unknown variant '%s' (%s.%s strategies: %s)", variant,
                   op_names[op], pass_names[pass], list);
  if (!args->x)
    return nl__err(ctx, NL_EINVAL, "%s: argument 'x' is required", variant);
  if ((st = validate(ctx, variant, op, pass, args, plan)) != NL_OK)
    return st;
  backend = plan->device.backend;
  if (backend == NL_CUDA) {
    nl_device_info info;
    const int dev = plan->device.index;
    if ((st = nl_device_query(ctx, plan->device, &info)) != NL_OK)
      return st;
    plan->k.stream = nl__cuda_stream(ctx, dev, &st);
    if (st != NL_OK)
      return st;
    plan->k.sync = nl__cuda_sync_words(ctx, dev, &st);
    if (st != NL_OK)
      return st;
    plan->k.device = dev;
    plan->k.sm_count = info.sm_count;
    plan->k.smem_optin = info.smem_per_block_optin;
    nl__knobs(ctx, ctx->cuda_info[dev].name, &plan->kn);
  } else {
    nl__knobs(ctx, "", &plan->kn);
  }
  plan->k.pdl = plan->kn.pdl;
  plan->k.fwd = plan->kn.fwd;
  plan->k.bwd = plan->kn.bwd;
  if (op == NL_OP_LAYERNORM) {
    plan->k.bwd.share_n =
        plan->k.wdt == NLK_F32 ? plan->kn.ln_bwd.w32_share_n : plan->kn.ln_bwd.share_n;
    plan->k.bwd.items = plan->kn.ln_bwd.items;
    if (plan->k.M >= plan->kn.rms_fwd.blockrow_min_m)
      plan->k.fwd.items = plan->kn.ln_fwd.items;
    if (plan->k.M < plan->kn.fwd.blockrow_group_min_m)
      plan->k.fwd.blockrow_items = plan->kn.ln_fwd.blockrow_items;
  } else if (op == NL_OP_ADD_RMSNORM) {
    plan->k.fwd.fp8_max_threads = plan->kn.add_fwd.fp8_max_threads;
    plan->k.bwd.whole_warps = plan->kn.add_bwd.whole_warps;
  }
  plan->k.tr = plan->kn.tr;
  v = find(op, pass, strategy, backend);
  if (!v)
    return nl__err(ctx, NL_EUNSUPPORTED, "%s has no %s implementation (%s.%s on %s: %s)", variant,
                   backend == NL_CUDA ? "CUDA" : "CPU", op_names[op], pass_names[pass],
                   backend == NL_CUDA ? "cuda" : "cpu", list);
  if (v->resolve) {
    const char *s;
    plan->k.reduce = args->reduce; /* what the caller asked for (0: any), for the resolver */
    s = v->resolve(&plan->kn, &plan->k);
    const nl_variant *r = find(op, pass, s, backend);
    if (!r || r->resolve)
      return nl__err(ctx, NL_EINTERNAL, "%s resolved to '%s', which does not exist", variant, s);
    v = r;
  }
  plan->v = v;
  plan->ks = kernels_of(backend, op, pass, v->strategy);
  if (!plan->ks)
    return nl__err(ctx, NL_EINTERNAL, "%s: no kernel file exports strategy '%s'", v->name,
                   v->strategy);
  if (!(v->dtypes & NL_DT(plan->k.dt))) { /* weights are fp32 or x's dtype: validated */
    list_dtypes(v->dtypes, list, sizeof list);
    return nl__err(ctx, NL_EUNSUPPORTED, "%s: dtype %s is not supported (it takes %s)", v->name,
                   nl_dtype_name(plan->k.dt), list);
  }
  if (pass == NL_BWD && v->reduces) {
    int r = args->reduce ? args->reduce : v->default_reduce;
    if (!(v->reduces & NL_RED(r))) {
      list_reduces(v->reduces, list, sizeof list);
      return nl__err(ctx, NL_EUNSUPPORTED, "%s: no '%s' reduction of dW (it supports: %s)", v->name,
                     reduce_names[r], list);
    }
    plan->k.reduce = r;
  }
  plan->deterministic = plan->k.reduce != NLK_REDUCE_ATOMIC;
  if (caps_ok(v, &plan->k, why, sizeof why) != NL_OK)
    return nl__err(ctx, NL_EUNSUPPORTED, "%s", why);
  if ((st = plan_transpose(ctx, plan, 1)) != NL_OK)
    return st;
  ok = takes(plan->ks, &plan->k, why, sizeof why);
  if (!ok && plan->transpose == NL_TRANSPOSE_CHUNKED && args->transpose == NL_TRANSPOSE_DEFAULT) {
    /* chunked was the default's pick, not the caller's: the variant's ordinary way instead
     * (plan_transpose sets keep_y anew) */
    plan->k.transpose = NL_TRANSPOSE_DEFAULT;
    if ((st = plan_transpose(ctx, plan, 0)) != NL_OK)
      return st;
    ok = takes(plan->ks, &plan->k, why, sizeof why);
  }
  if (!ok)
    return nl__err(ctx, NL_EUNSUPPORTED, "%s: %s", v->name, why);
  return NL_OK;
}

/* The strategy's scratch, then (current scaling without an amax buffer) 4 bytes for the amax
 * the kernels reduce into, at a 16-byte aligned offset. */
static size_t plan_ws_bytes(const nl_plan *plan, size_t *amax_at)
{
  size_t bytes = plan->ks->workspace ? plan->ks->workspace(&plan->k) : 0;
  *amax_at = (bytes + 15) & ~(size_t)15;
  if (plan->k.scaling == NLK_SCALING_CURRENT && !plan->amax_given)
    bytes = *amax_at + 16;
  return bytes;
}

void nl__plan_use_workspace(nl_plan *plan, void *ws)
{
  size_t amax_at;
  plan->k.ws_bytes = plan_ws_bytes(plan, &amax_at);
  plan->k.ws = plan->k.ws_bytes ? ws : NULL;
  if (plan->k.scaling == NLK_SCALING_CURRENT && !plan->amax_given)
    plan->k.amax = (float *)(void *)((char *)ws + amax_at);
}

nl_status nl__plan_workspace(nl_ctx *ctx, nl_plan *plan)
{
  nl_status st = NL_OK;
  size_t amax_at, bytes = plan_ws_bytes(plan, &amax_at);
  void *ws = bytes ? nl__ws(ctx, plan->device, bytes, &st) : NULL;
  if (st == NL_OK)
    nl__plan_use_workspace(plan, ws);
  return st;
}

static nl_status launched(nl_ctx *ctx, const nl_plan *plan, const nlk_norm *k, int rc)
{
  switch (rc) {
  case NLK_OK: return NL_OK;
  case NLK_ERR_CUDA: return nl__cuda_check(ctx, k->cuda_error, plan->v->name);
  case NLK_ERR_NOMEM: return nl__err(ctx, NL_ENOMEM, "%s: out of memory", plan->v->name);
  case NLK_ERR_UNSUPPORTED:
    return nl__err(ctx, NL_EUNSUPPORTED, "%s: the kernel refused these arguments", plan->v->name);
  default: return nl__err(ctx, NL_EINTERNAL, "%s: launcher returned %d", plan->v->name, rc);
  }
}

nl_status nl__launch(nl_ctx *ctx, nl_plan *plan)
{
  nl_status st;
  plan->k.cluster_dim = plan->device.backend == NL_CUDA ? 1 : 0;
  plan->k.resident = 0;
  plan->k.kernel = NULL;
  plan->k.current_passes = 0;
  plan->k.extra_bytes = 0;
  st = launched(ctx, plan, &plan->k, plan->ks->launch(&plan->k));
  if (st == NL_OK && plan->ext)
    st = launched(ctx, plan, &plan->ext_k, plan->ext->launch(&plan->ext_k));
  return st;
}

void nl__plan_info(const nl_plan *plan, nl_run_info *info)
{
  memset(info, 0, sizeof *info);
  snprintf(info->variant, sizeof info->variant, "%s", plan->v->name);
  info->backend = plan->device.backend;
  info->reduce = plan->k.reduce;
  info->deterministic = plan->deterministic;
  info->grid = plan->k.grid;
  info->block = plan->k.block;
  info->cluster = plan->k.cluster_dim;
  info->waves = nlk_waves(plan->k.grid, plan->k.sm_count, plan->k.resident);
  info->bytes = plan->bytes;
  info->workspace_bytes = (int64_t)plan->k.ws_bytes;
  info->extra_bytes = 2 * (int64_t)plan->k.ws_bytes + plan->k.extra_bytes;
  if (plan->ext || plan->transpose == NL_TRANSPOSE_CHUNKED) /* the transpose reads y again */
    info->extra_bytes += plan->k.M * plan->k.N * nlk_dtype_size(plan->k.ydt);
  if (plan->device.backend == NL_CUDA)
    nl__cuda_kernel_name(plan->k.kernel, info->kernel, sizeof info->kernel);
  info->transpose = plan->transpose;
  if (nlk_is_fp8(plan->k.ydt) && plan->k.scaling == NLK_SCALING_CURRENT)
    snprintf(info->scaling, sizeof info->scaling, "current: %s",
             plan->k.current_passes == 1 ? "grid barrier" : "two passes");
  else if (nlk_is_fp8(plan->k.ydt))
    snprintf(info->scaling, sizeof info->scaling, "delayed");
}

nl_status nl_supports(nl_ctx *ctx, const char *variant, const nl_norm_args *args)
{
  nl_plan plan;
  return nl__plan(ctx, variant, args, &plan);
}

nl_status nl_resolve(nl_ctx *ctx, const char *variant, const nl_norm_args *args, char *name,
                     int64_t cap)
{
  nl_plan plan;
  nl_status st = nl__plan(ctx, variant, args, &plan);
  if (st != NL_OK)
    return st;
  if (!name || cap <= (int64_t)strlen(plan.v->name))
    return nl__err(ctx, NL_EINVAL, "nl_resolve: name buffer too small");
  strcpy(name, plan.v->name);
  return NL_OK;
}

nl_status nl_run(nl_ctx *ctx, const char *variant, const nl_norm_args *args, nl_run_info *info)
{
  nl_plan plan;
  nl_status st = nl__plan(ctx, variant, args, &plan);
  if (st == NL_OK)
    st = nl__plan_workspace(ctx, &plan);
  if (st == NL_OK)
    st = nl__launch(ctx, &plan);
  if (st == NL_OK && info)
    nl__plan_info(&plan, info);
  return st;
}
