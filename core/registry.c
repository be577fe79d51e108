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

static const char *const op_names[] = {"rmsnorm", "layernorm", "add_rmsnorm"};
static const char *const pass_names[] = {"fwd", "bwd"};
static const char *const reduce_names[] = {"default", "temp", "partials", "atomic"};

/* ---- the argument table: which fields each op and pass reads and writes ---- */

enum field { F_X, F_RES, F_DY, F_DRES, F_W, F_B, F_RSTD, F_MEAN, F_Y, F_RES_OUT, F_DX, F_DW, F_DB,
             F_COUNT = NL_ARG_COUNT };

const size_t nl__arg_offsets[NL_ARG_COUNT] = {
  offsetof(nl_norm_args, x), offsetof(nl_norm_args, residual), offsetof(nl_norm_args, dy),
  offsetof(nl_norm_args, dres), offsetof(nl_norm_args, w), offsetof(nl_norm_args, b),
  offsetof(nl_norm_args, rstd), offsetof(nl_norm_args, mean), offsetof(nl_norm_args, y),
  offsetof(nl_norm_args, residual_out), offsetof(nl_norm_args, dx), offsetof(nl_norm_args, dw),
  offsetof(nl_norm_args, db),
};
enum use { NO = 0, REQ = 1, OPT = 2 };
enum kind { ACT, VEC, STAT };

static const struct {
  const char *name;
  enum kind kind;
} fields[F_COUNT] = {
  {"x", ACT}, {"residual", ACT}, {"dy", ACT}, {"dres", ACT}, {"w", VEC}, {"b", VEC},
  {"rstd", STAT}, {"mean", STAT}, {"y", ACT}, {"residual_out", ACT}, {"dx", ACT}, {"dw", VEC},
  {"db", VEC},
};

/* use[op][pass][field]; dw and db are further tied to the presence of w and b. */
static const unsigned char use[3][2][F_COUNT] = {
  /*            x    res  dy   dres w    b    rstd mean y    rout dx   dw   db */
  [NL_OP_RMSNORM] = {
    {REQ, NO,  NO,  NO,  OPT, NO,  OPT, NO,  REQ, NO,  NO,  NO,  NO},
    {REQ, NO,  REQ, NO,  OPT, NO,  REQ, NO,  NO,  NO,  REQ, OPT, NO}},
  [NL_OP_LAYERNORM] = {
    {REQ, NO,  NO,  NO,  OPT, OPT, OPT, OPT, REQ, NO,  NO,  NO,  NO},
    {REQ, NO,  REQ, NO,  OPT, OPT, REQ, REQ, NO,  NO,  REQ, OPT, OPT}},
  [NL_OP_ADD_RMSNORM] = {
    {REQ, REQ, NO,  NO,  OPT, NO,  OPT, NO,  REQ, REQ, NO,  NO,  NO},
    {REQ, NO,  REQ, OPT, OPT, NO,  REQ, NO,  NO,  NO,  REQ, OPT, NO}},
};

static int is_output(int pass, enum field f)
{
  return f == F_Y || f == F_RES_OUT || f == F_DX || f == F_DW || f == F_DB ||
         (pass == NL_FWD && (f == F_RSTD || f == F_MEAN));
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
  for (int i = 0; i < 3; i++)
    if ((size_t)(d1 - name) == strlen(op_names[i]) && strncmp(name, op_names[i], (size_t)(d1 - name)) == 0)
      *op = i;
  for (int i = 0; i < 2; i++)
    if ((size_t)(d2 - d1 - 1) == strlen(pass_names[i]) && strncmp(d1 + 1, pass_names[i], 3) == 0)
      *pass = i;
  if (*op < 0)
    return nl__err(ctx, NL_EINVAL, "unknown op in '%s' (ops: rmsnorm, layernorm, add_rmsnorm)", name);
  if (*pass < 0)
    return nl__err(ctx, NL_EINVAL, "unknown pass in '%s' (passes: fwd, bwd)", name);
  if (strlen(d2 + 1) >= cap)
    return nl__err(ctx, NL_EINVAL, "unknown variant '%s'", name);
  strcpy(strategy, d2 + 1);
  return NL_OK;
}

/* ---- the registry ---- */

/* The kernels of `strategy` for a pass on a backend, from its kernel files' tables. */
static const nlk_strategy *kernels_of(int backend, int pass, const char *strategy)
{
  const nlk_strategy *const *tables = backend == NL_CUDA ? nl__cuda_kernels : nl__cpu_kernels;
  for (; *tables; tables++)
    for (const nlk_strategy *s = *tables; s->name; s++)
      if (s->pass == pass && strcmp(s->name, strategy) == 0)
        return s;
  return NULL;
}

int nl__fits(int backend, int pass, const char *strategy, const nlk_norm *k)
{
  char why[256];
  const nlk_strategy *s = kernels_of(backend, pass, strategy);
  return s && (!s->supports || s->supports(k, why, sizeof why) == NLK_OK);
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
  if (!v->resolve && !kernels_of(v->backend, v->pass, v->strategy))
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
      if (b->rows != M || b->cols != N)
        return nl__err(ctx, NL_EINVAL, "%s: argument '%s' is [%lld, %lld] but x is [%lld, %lld]",
                       vname, fn, (long long)b->rows, (long long)b->cols, (long long)M,
                       (long long)N);
      if (b->dtype != x->dtype)
        return nl__err(ctx, NL_EINVAL, "%s: argument '%s' is %s but x is %s (activations share one dtype)",
                       vname, fn, nl_dtype_name(b->dtype), nl_dtype_name(x->dtype));
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
    }
  }
  if (a->dw && a->dw->dtype != a->w->dtype)
    return nl__err(ctx, NL_EINVAL, "%s: argument 'dw' is %s but w is %s", vname,
                   nl_dtype_name(a->dw->dtype), nl_dtype_name(a->w->dtype));
  if (a->db && a->db->dtype != a->b->dtype)
    return nl__err(ctx, NL_EINVAL, "%s: argument 'db' is %s but b is %s", vname,
                   nl_dtype_name(a->db->dtype), nl_dtype_name(a->b->dtype));

  /* Aliasing: an output may only share its buffer with the input it overwrites in place. */
  for (int f = 0; f < F_COUNT; f++) {
    const nl_buf *b = field(a, (enum field)f);
    if (!b || !is_output(pass, (enum field)f))
      continue;
    for (int g = 0; g < F_COUNT; g++) {
      int allowed = (f == F_DX && g == F_DY) || (f == F_RES_OUT && g == F_RES);
      if (g != f && field(a, (enum field)g) == b && !allowed)
        return nl__err(ctx, NL_EINVAL, "%s: output '%s' is the same buffer as '%s'%s", vname,
                       fields[f].name, fields[g].name,
                       f == F_DX || f == F_RES_OUT ? "" : " (outputs must be distinct buffers)");
    }
  }

  if (pass == NL_FWD && !(a->eps > 0 && isfinite(a->eps)))
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
#undef VIEW
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

/* Validates, takes the settings of the data's device (its GPU model's defaults), resolves
 * `auto` and checks that the strategy takes the shape. */
nl_status nl__plan(nl_ctx *ctx, const char *variant, const nl_norm_args *args, nl_plan *plan)
{
  char strategy[48], why[256], list[256];
  const nl_variant *v;
  int op, pass, backend;
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
  plan->ks = kernels_of(backend, pass, v->strategy);
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
  if (plan->ks->supports && plan->ks->supports(&plan->k, why, sizeof why) != NLK_OK)
    return nl__err(ctx, NL_EUNSUPPORTED, "%s: %s", v->name, why);
  return NL_OK;
}

nl_status nl__plan_workspace(nl_ctx *ctx, nl_plan *plan)
{
  nl_status st = NL_OK;
  size_t bytes = plan->ks->workspace ? plan->ks->workspace(&plan->k) : 0;
  plan->k.ws_bytes = bytes;
  plan->k.ws = bytes ? nl__ws(ctx, plan->device, bytes, &st) : NULL;
  return st;
}

nl_status nl__launch(nl_ctx *ctx, nl_plan *plan)
{
  plan->k.cluster_dim = plan->device.backend == NL_CUDA ? 1 : 0;
  plan->k.kernel = NULL;
  int rc = plan->ks->launch(&plan->k);
  switch (rc) {
  case NLK_OK: return NL_OK;
  case NLK_ERR_CUDA: return nl__cuda_check(ctx, plan->k.cuda_error, plan->v->name);
  case NLK_ERR_NOMEM: return nl__err(ctx, NL_ENOMEM, "%s: out of memory", plan->v->name);
  case NLK_ERR_UNSUPPORTED:
    return nl__err(ctx, NL_EUNSUPPORTED, "%s: the kernel refused these arguments", plan->v->name);
  default: return nl__err(ctx, NL_EINTERNAL, "%s: launcher returned %d", plan->v->name, rc);
  }
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
  info->bytes = plan->bytes;
  info->workspace_bytes = (int64_t)plan->k.ws_bytes;
  info->extra_bytes = 2 * (int64_t)plan->k.ws_bytes;
  if (plan->device.backend == NL_CUDA)
    nl__cuda_kernel_name(plan->k.kernel, info->kernel, sizeof info->kernel);
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
