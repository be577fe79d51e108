/*
 * ref.c: the fp64 reference ("ref"), the oracle every other variant is checked against.
 *
 * Every row is loaded into fp64, computed in fp64 and stored with one rounding per output
 * element; the only roundings in between are the ones the numerics contract prescribes (the
 * residual sum h, and x*rstd and the weight in RMSNorm's LLAMA/NONE modes). Rows are split
 * over OpenMP threads in fixed contiguous blocks; the weight and bias gradients go through
 * per-thread fp64 partial rows summed in thread order, so for a given thread count every
 * output is bitwise reproducible.
 *
 * An fp8 y is the fp64 value times the scale, rounded once to fp32 and then to fp8
 * (nlc_store_fp8), with no rounding to x's dtype in between; amax is max |y| as fp32. Current
 * scaling runs the rows twice: for amax, then to write. yt (strided) is written from each
 * stored row.
 */
#include <math.h>
#include <stdlib.h>

#include "cpu_kernels.h"
#include "cpu_rows.h"

/* The dtypes the reference handles: every storage dtype, fp64 included. */
static int ref_dtype_ok(int32_t dt, int allow_none)
{
  return (allow_none && dt == NLK_NONE) || (dt >= NLK_F32 && dt <= NLK_F64);
}

static int ref_ok(const nlk_norm *k)
{
  return k->M > 0 && k->N > 0 && ref_dtype_ok(k->dt, 0) && ref_dtype_ok(k->wdt, 1) &&
         (k->op != NLK_LAYERNORM || ref_dtype_ok(k->bdt, 1)) &&
         (k->op == NLK_RMSNORM || k->op == NLK_LAYERNORM || k->op == NLK_ADD_RMSNORM);
}

/* W = w + offset in fp64 (w itself at offset 0, so that a -0 weight stays -0 as in the GPU's
 * kernels; 1 when non-affine: the offset then has nothing to shift), rounded to the activation
 * dtype when `round` (RMSNorm NONE mode); B = b or 0. */
static void ref_weights(const nlk_norm *k, double *W, double *B, int round)
{
  int64_t j, n = k->N;
  if (k->w != NULL && k->wdt != NLK_NONE) {
    nlc_load_d(k->wdt, k->w, W, n);
    for (j = 0; k->offset != 0.f && j < n; j++)
      W[j] += (double)k->offset;
    if (round)
      nlc_round_d(k->dt, W, n);
  } else {
    for (j = 0; j < n; j++)
      W[j] = 1.0;
  }
  if (B == NULL)
    return;
  if (k->op == NLK_LAYERNORM && k->b != NULL && k->bdt != NLK_NONE)
    nlc_load_d(k->bdt, k->b, B, n);
  else
    for (j = 0; j < n; j++)
      B[j] = 0.0;
}

/* One forward row. a and t are N-element fp64 scratch rows. RMSNorm family: the residual
 * row is loaded before h is stored, so residual_out may alias residual. |y| goes into *amax
 * when it is given. */
static void ref_fwd_row(const nlk_norm *k, int64_t i, const double *W, const double *B,
                        double *a, double *t, const nlc_out *o, uint32_t *amax)
{
  const int64_t n = k->N;
  const int32_t dt = k->dt;
  const double eps = (double)k->eps;
  double s = 0.0, r;
  int64_t j;
  void *y;

  nlc_load_d(dt, nlc_at(k->x, i, k->sx, dt), a, n);
  if (k->op == NLK_LAYERNORM) {
    double mu, v = 0.0;
#pragma omp simd reduction(+ : s)
    for (j = 0; j < n; j++)
      s += a[j];
    mu = s / (double)n;
#pragma omp simd reduction(+ : v)
    for (j = 0; j < n; j++)
      v += (a[j] - mu) * (a[j] - mu);
    r = 1.0 / sqrt(v / (double)n + eps);
    for (j = 0; j < n; j++)
      t[j] = (a[j] - mu) * r * W[j] + B[j];
    if (k->mean != NULL && !o->amax_only)
      k->mean[i] = (float)mu;
  } else {
    if (k->op == NLK_ADD_RMSNORM) {
      nlc_load_d(dt, nlc_at(k->res, i, k->sres, dt), t, n);
      for (j = 0; j < n; j++)
        a[j] += t[j];
      nlc_round_d(dt, a, n);
      if (!o->amax_only)
        nlc_store_d(dt, a, nlc_at_mut(k->res_out, i, k->sres_out, dt), n);
    }
#pragma omp simd reduction(+ : s)
    for (j = 0; j < n; j++)
      s += a[j] * a[j];
    r = 1.0 / sqrt(s / (double)n + eps);
    if (k->cast == NLK_CAST_GEMMA) {
      for (j = 0; j < n; j++)
        t[j] = a[j] * r * W[j];
    } else {                                  /* LLAMA, NONE: W is pre-rounded for NONE */
      for (j = 0; j < n; j++)
        t[j] = a[j] * r;
      nlc_round_d(dt, t, n);
      for (j = 0; j < n; j++)
        t[j] *= W[j];
    }
  }
  for (j = 0; amax != NULL && j < n; j++) {
    const uint32_t m = nlc_abs_bits(t[j]);
    if (m > *amax)
      *amax = m;
  }
  if (o->amax_only)
    return;
  y = nlc_at_mut(k->y, i, k->sy, k->ydt);
  if (k->ydt == dt)
    nlc_store_d(dt, t, y, n);
  else
    for (j = 0; j < n; j++)
      nlc_store_fp8(k->ydt, y, j, t[j], o->scale);
  if (k->yt != NULL)
    nlc_scatter_col(k, i, y, 0, n);
  if (k->rstd != NULL)
    k->rstd[i] = (float)r;
}

/* One pass over all rows (nlc_pass_fn): threads take contiguous row blocks; each allocates
 * its own scratch (W, B and two rows: 4N doubles) and reports allocation failure through
 * `err`. */
static int ref_fwd_pass(nlk_norm *k, const void *arg, const nlc_out *o, int want_amax,
                        uint32_t *amax_out)
{
  int err = 0, used = 1;
  uint32_t amax = 0;
  const int64_t n = k->N;
  const int round_w = k->op != NLK_LAYERNORM && k->cast == NLK_CAST_NONE;
  (void)arg;

#pragma omp parallel num_threads(nlc_threads(k)) reduction(max : amax)
  {
    double *s = (double *)malloc((size_t)n * 4 * sizeof(double));
    int64_t i;
    if (s == NULL) {
#pragma omp atomic write
      err = 1;
    } else {
      ref_weights(k, s, s + n, round_w);
    }
#pragma omp single nowait
    used = omp_get_num_threads();
#pragma omp for schedule(static)
    for (i = 0; i < k->M; i++)
      if (s != NULL)
        ref_fwd_row(k, i, s, s + n, s + 2 * n, s + 3 * n, o, want_amax ? &amax : NULL);
    free(s);
  }
  k->grid = used;
  k->block = 0;
  *amax_out = amax;
  return err ? NLK_ERR_NOMEM : NLK_OK;
}

/* Forward of all three ops; an fp8 y under either scaling (current scaling's first pass
 * reads x, and add_rmsnorm's residual, again). */
static int ref_fwd(nlk_norm *k)
{
  if (!ref_ok(k) || (k->ydt != k->dt && !nlk_is_fp8(k->ydt)))
    return NLK_ERR_UNSUPPORTED;
  return nlc_scaled_run(k, ref_fwd_pass, NULL,
                        k->M * k->N * nlk_dtype_size(k->dt) * (k->op == NLK_ADD_RMSNORM ? 2 : 1));
}

/* One backward row: dx into the dx row, the row's dw/db contributions added to pw/pb (NULL:
 * not wanted). x, dy (and dres) are all read into scratch before dx is stored, so dx may
 * alias dy. a, g, o are N-element fp64 scratch rows. */
static void ref_bwd_row(const nlk_norm *k, int64_t i, const double *W, double *a, double *g,
                        double *o, double *pw, double *pb)
{
  const int64_t n = k->N;
  const int32_t dt = k->dt;
  const double r = (double)k->rstd[i];
  double s = 0.0;
  int64_t j;

  nlc_load_d(dt, nlc_at(k->x, i, k->sx, dt), a, n);
  nlc_load_d(dt, nlc_at(k->dy, i, k->sdy, dt), g, n);
  if (k->dres != NULL)
    nlc_load_d(dt, nlc_at(k->dres, i, k->sdres, dt), o, n);
  else
    for (j = 0; j < n; j++)
      o[j] = 0.0;

  if (k->op == NLK_LAYERNORM) {
    const double mu = (double)k->mean[i];
    double sg = 0.0, cg, cx;
    for (j = 0; j < n; j++)
      a[j] = (a[j] - mu) * r;
#pragma omp simd reduction(+ : s, sg)
    for (j = 0; j < n; j++) {
      sg += g[j] * W[j];
      s += g[j] * W[j] * a[j];
    }
    cg = sg / (double)n;
    cx = s / (double)n;
    for (j = 0; j < n; j++)
      o[j] += r * (g[j] * W[j] - cg - a[j] * cx);
    if (pb != NULL)
      for (j = 0; j < n; j++)
        pb[j] += g[j];
  } else {
    double c;
    for (j = 0; j < n; j++)
      a[j] *= r;
#pragma omp simd reduction(+ : s)
    for (j = 0; j < n; j++)
      s += g[j] * W[j] * a[j];
    c = s / (double)n;
    for (j = 0; j < n; j++)
      o[j] += r * (g[j] * W[j] - a[j] * c);
    /* dw pairs dy with the value the forward multiplied W by: the rounded x*rstd unless
     * GEMMA. */
    if (pw != NULL && k->cast != NLK_CAST_GEMMA)
      nlc_round_d(dt, a, n);
  }
  if (pw != NULL)
    for (j = 0; j < n; j++)
      pw[j] += g[j] * a[j];
  nlc_store_d(dt, o, nlc_at_mut(k->dx, i, k->sdx, dt), n);
}

/* Backward of all three ops. Threads take contiguous row blocks and accumulate dw/db in their
 * own fp64 partial rows (allocated up front for the requested thread count); after the row
 * loop the columns are split over the threads, each summing the partials in thread order and
 * storing with one rounding. dres, when given, is added to dx (add_rmsnorm). */
static int ref_bwd(nlk_norm *k)
{
  const int64_t n = k->N;
  const int T = nlc_threads(k);
  const int want_w = nlc_has_dw(k) && k->dw != NULL;
  const int want_b = nlc_has_db(k) && k->db != NULL;
  double *parts = NULL;
  int err = 0, used = 1;

  if (!ref_ok(k) || !nlc_bwd_stats_ok(k))
    return NLK_ERR_UNSUPPORTED;
  if (want_w || want_b) {
    parts = (double *)malloc((size_t)T * (size_t)n * 2 * sizeof(double));
    if (parts == NULL)
      return NLK_ERR_NOMEM;
  }
#pragma omp parallel num_threads(T)
  {
    const int tid = omp_get_thread_num(), nth = omp_get_num_threads();
    double *s = (double *)malloc((size_t)n * 4 * sizeof(double));
    double *pw = want_w ? parts + (size_t)tid * (size_t)n : NULL;
    double *pb = want_b ? parts + ((size_t)T + (size_t)tid) * (size_t)n : NULL;
    int64_t i, j;
    int failed;

    if (s == NULL) {
#pragma omp atomic write
      err = 1;
    } else {
      ref_weights(k, s, NULL, 0);
    }
    for (j = 0; pw != NULL && j < n; j++)
      pw[j] = 0.0;
    for (j = 0; pb != NULL && j < n; j++)
      pb[j] = 0.0;
    if (tid == 0)
      used = nth;
#pragma omp for schedule(static)
    for (i = 0; i < k->M; i++)
      if (s != NULL)
        ref_bwd_row(k, i, s, s + n, s + 2 * n, s + 3 * n, pw, pb);
    /* the implicit barrier above makes every partial complete and `err` visible */
#pragma omp atomic read
    failed = err;
    if (!failed && (want_w || want_b)) {
      int64_t lo, hi;
      int t;
      nlc_split(n, tid, nth, &lo, &hi);
      for (j = lo; j < hi; j++) {
        double sw = 0.0, sb = 0.0;
        for (t = 0; t < nth; t++) {
          if (want_w)
            sw += parts[(size_t)t * (size_t)n + (size_t)j];
          if (want_b)
            sb += parts[((size_t)T + (size_t)t) * (size_t)n + (size_t)j];
        }
        if (want_w)
          nl_store(k->wdt, k->dw, j, sw);
        if (want_b)
          nl_store(k->bdt, k->db, j, sb);
      }
    }
    free(s);
  }
  free(parts);
  k->grid = used;
  k->block = 0;
  return err ? NLK_ERR_NOMEM : NLK_OK;
}

const nlk_strategy nlk_cpu_ref[] = {
  {"ref", NLK_FWD, ref_fwd, NULL, NULL, NULL},
  {"ref", NLK_BWD, ref_bwd, NULL, NULL, NULL},
  {NULL, 0, NULL, NULL, NULL, NULL},
};
