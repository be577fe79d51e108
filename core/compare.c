/*
 * compare.c: error statistics of a result against a reference, on the host.
 *
 * The ULP error of an element is |a - ref| divided by the spacing of a's dtype at |ref|, so a
 * correctly rounded result scores at most 0.5 against an fp64 reference. Percentiles come
 * from a histogram (exact to 1/64 ULP below 1024 ULP, to about 1% above), which keeps the
 * pass over 10^8 elements in O(1) extra memory; the maximum is exact.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "internal.h"

enum { LIN_BINS = 1 + 1024 * 64, LOG_BINS = 64 * 64, NBINS = LIN_BINS + LOG_BINS + 1 };

/* Bin 0 holds exact matches, bin b in [1, LIN_BINS] errors in ((b-1)/64, b/64] ULP. */
static int ulp_bin(double u)
{
  if (u <= 0.0)
    return 0;
  if (u < 1024.0)
    return 1 + (int)(u * 64.0);
  if (!isfinite(u))
    return NBINS - 1;
  {
    double l = log2(u / 1024.0) * 64.0;
    return l >= LOG_BINS ? NBINS - 1 : LIN_BINS + (int)l;
  }
}

static double bin_upper(int b)
{
  if (b < LIN_BINS)
    return b / 64.0;
  if (b == NBINS - 1)
    return INFINITY;
  return 1024.0 * exp2((b - LIN_BINS + 1) / 64.0);
}

/* Smallest bin edge below which a fraction q of the n elements lies. */
static double percentile(const uint32_t *hist, int64_t n, double q)
{
  int64_t need = (int64_t)ceil(q * (double)n), seen = 0;
  int b = 0;
  while (b < NBINS - 1 && seen + hist[b] < need)
    seen += hist[b++];
  return bin_upper(b);
}

typedef struct part {
  int64_t n_bad, n_nan, worst;
  double worst_ratio, max_abs, max_rel, ulp_max, sumsq;
  int64_t n_fin;
  uint32_t *hist;
} part;

/* Host view of a buffer's elements: CPU buffers in place, CUDA ones through a dense copy. */
typedef struct view {
  const void *p;
  int64_t stride;
  void *owned;
} view;

static nl_status view_of(nl_ctx *ctx, const nl_buf *b, view *v)
{
  size_t bytes = (size_t)(b->rows * b->cols) * (size_t)nlk_dtype_size(b->dtype);
  v->owned = NULL;
  if (b->device.backend == NL_CPU) {
    v->p = b->data;
    v->stride = b->stride;
    return NL_OK;
  }
  v->owned = malloc(bytes);
  if (!v->owned)
    return nl__err(ctx, NL_ENOMEM, "compare: cannot allocate %zu bytes of host staging", bytes);
  v->p = v->owned;
  v->stride = b->cols;
  return nl_buf_download(ctx, b, v->owned, (int64_t)bytes);
}

nl_status nl_compare(nl_ctx *ctx, const nl_buf *a, const nl_buf *ref, double atol, double rtol,
                     nl_cmp *out)
{
  nl_status st = nl__enter(ctx);
  view va = {0}, vr = {0};
  part *parts = NULL;
  int threads;
  int64_t n;
  if (st != NL_OK)
    return st;
  if (!a || !ref || !out)
    return nl__err(ctx, NL_EINVAL, "compare: NULL argument");
  if (a->ctx != ctx || ref->ctx != ctx)
    return nl__err(ctx, NL_EINVAL, "compare: buffer belongs to another context");
  if (a->rows != ref->rows || a->cols != ref->cols)
    return nl__err(ctx, NL_EINVAL, "compare: shapes differ ([%lld, %lld] against [%lld, %lld])",
                   (long long)a->rows, (long long)a->cols, (long long)ref->rows,
                   (long long)ref->cols);
  if (!(atol >= 0) || !(rtol >= 0))
    return nl__err(ctx, NL_EINVAL, "compare: atol and rtol must be >= 0");
  memset(out, 0, sizeof *out);
  n = a->rows * a->cols;
  if ((st = view_of(ctx, a, &va)) != NL_OK || (st = view_of(ctx, ref, &vr)) != NL_OK)
    goto done;
  threads = nl__threads(ctx);
  parts = calloc((size_t)threads, sizeof *parts);
  if (!parts) {
    st = nl__err(ctx, NL_ENOMEM, "compare: out of host memory");
    goto done;
  }
  for (int t = 0; t < threads; t++) {
    parts[t].hist = calloc(NBINS, sizeof(uint32_t));
    parts[t].worst = -1;
    parts[t].worst_ratio = -1;
    if (!parts[t].hist) {
      st = nl__err(ctx, NL_ENOMEM, "compare: out of host memory");
      goto done;
    }
  }
#pragma omp parallel num_threads(threads)
  {
    part *p = &parts[omp_get_thread_num()];
#pragma omp for schedule(static)
    for (int64_t r = 0; r < a->rows; r++) {
      const char *ra = (const char *)va.p + (size_t)(r * va.stride) * nlk_dtype_size(a->dtype);
      const char *rr = (const char *)vr.p + (size_t)(r * vr.stride) * nlk_dtype_size(ref->dtype);
      for (int64_t c = 0; c < a->cols; c++) {
        double x = nl_load(a->dtype, ra, c), y = nl_load(ref->dtype, rr, c);
        double d = fabs(x - y), ratio, u;
        int mismatch = 0;
        if (isnan(x) || isnan(y) || isinf(x) || isinf(y)) {
          int same = (isnan(x) && isnan(y)) || (x == y);
          if (!same) {
            mismatch = 1;
            p->n_nan++;
          }
          d = same ? 0.0 : INFINITY;
        } else {
          if (d > p->max_abs)
            p->max_abs = d;
          if (y != 0 && d / fabs(y) > p->max_rel)
            p->max_rel = d / fabs(y);
          p->sumsq += y * y;
          p->n_fin++;
        }
        u = d == 0.0 ? 0.0 : d / nl_ulp(a->dtype, isfinite(y) ? y : 0.0);
        if (u > p->ulp_max)
          p->ulp_max = u;
        p->hist[ulp_bin(u)]++;
        {
          double tol = atol + rtol * (isfinite(y) ? fabs(y) : 0.0);
          ratio = d == 0.0 ? 0.0 : tol > 0 ? d / tol : INFINITY;
        }
        if (mismatch || ratio > 1.0)
          p->n_bad++;
        if (ratio > p->worst_ratio) {
          p->worst_ratio = ratio;
          p->worst = r * a->cols + c;
        }
      }
    }
  }
  {
    double sumsq = 0;
    int64_t n_fin = 0;
    double worst_ratio = -1;
    out->n = n;
    for (int t = 0; t < threads; t++) {
      part *p = &parts[t];
      out->n_bad += p->n_bad;
      out->n_nan += p->n_nan;
      out->max_abs = fmax(out->max_abs, p->max_abs);
      out->max_rel = fmax(out->max_rel, p->max_rel);
      out->ulp_max = fmax(out->ulp_max, p->ulp_max);
      sumsq += p->sumsq;
      n_fin += p->n_fin;
      if (p->worst >= 0 && (p->worst_ratio > worst_ratio ||
                            (p->worst_ratio == worst_ratio && p->worst < out->worst))) {
        worst_ratio = p->worst_ratio;
        out->worst = p->worst;
      }
      if (t > 0)
        for (int i = 0; i < NBINS; i++)
          parts[0].hist[i] += p->hist[i];
    }
    out->rms_ref = n_fin ? sqrt(sumsq / (double)n_fin) : 0.0;
    out->ulp_p50 = fmin(percentile(parts[0].hist, n, 0.50), out->ulp_max);
    out->ulp_p99 = fmin(percentile(parts[0].hist, n, 0.99), out->ulp_max);
    {
      int64_t w = out->worst, r = w / a->cols, c = w % a->cols;
      out->a_worst = nl_load(a->dtype, (const char *)va.p + (size_t)(r * va.stride) * nlk_dtype_size(a->dtype), c);
      out->ref_worst = nl_load(ref->dtype, (const char *)vr.p + (size_t)(r * vr.stride) * nlk_dtype_size(ref->dtype), c);
      /* one NaN for every NaN, as nl_buf_read_f64 hands out (LuaJIT mistakes some NaNs) */
      if (isnan(out->a_worst))
        out->a_worst = NAN;
      if (isnan(out->ref_worst))
        out->ref_worst = NAN;
    }
  }
done:
  if (parts)
    for (int t = 0; t < threads; t++)
      free(parts[t].hist);
  free(parts);
  free(va.owned);
  free(vr.owned);
  return st;
}
