/*
 * fast_bwd.c: the CPU forms of the `row` and `persistent` backward strategies, fp32 math.
 *
 * Both compute dx row by row in fp32 with the same two-pass row kernel (see bwd_row_t) and
 * differ in how the weight (and bias) gradient is reduced over rows, which is what the main
 * experiment measures:
 *   row         the old design: every row writes its dw (and db) contribution into an M x N
 *               fp32 temp, then a second phase sums the temp over rows, columns split over
 *               the threads: 2*M*N*4 extra bytes per gradient output.
 *   persistent  the new design: worker t takes rows t, t+T, ... and accumulates into its own
 *               fp32 partial row; one reduction over the T partials: 2*T*N*4 extra bytes.
 * Both reductions sum in a fixed row order, so dw/db are reproducible for a thread count.
 * As a CTA per row would, `row` also converts the weight for every row.
 */
/* The fused loops are instruction-bound with the 256-bit vectors GCC picks by default for
 * -march=native on recent Intel parts; 512-bit ones halve the instruction count where
 * AVX-512 is enabled. Set before the includes so that inlined helpers agree on the target. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__)
#pragma GCC target("prefer-vector-width=512")
#endif

#include <math.h>
#include <stdlib.h>

#include "cpu_kernels.h"
#include "cpu_rows.h"

/* One backward row in fp32, specialized on the constant dt. blk holds 5 NLC_BLK-float scratch
 * blocks; W = w + offset (never rounded: g = dy*W in every mode). Pass 1 streams x and dy for
 * the row sums. Pass 2 reads them again, now from cache, a block at a time, forms dx and
 * xhat_w, stores dx and adds dy*xhat_w (and dy) to pw (pb) (NULL: not wanted; added when
 * `acc`, else stored). fp32 and bf16 convert inside the fused loops; fp16, which GCC does not
 * vectorize, through F16C block conversions to and from fp32 blocks. In-place (dx == dy) a dy
 * block is copied before the dx block over it is stored. */
NLC_INLINE void bwd_row_t(const nlk_norm *k, int64_t i, int64_t next, const float *W,
                          float *blk, float *pw, float *pb, int acc, const int32_t dt)
{
  const int32_t ldt = dt == NLK_F16 ? NLK_F32 : dt;   /* what the fused loops read/write */
  const int64_t n = k->N;
  const int sz = nlk_dtype_size(dt);
  const int ln = k->op == NLK_LAYERNORM;
  const int round_xw = !ln && pw != NULL && k->cast != NLK_CAST_GEMMA;
  const int inplace = k->dx == k->dy;
  const float fn = (float)n;
  const float r = k->rstd[i], mu = ln ? k->mean[i] : 0.0f;
  const char *x = (const char *)nlc_at(k->x, i, k->sx, dt);
  const char *dy = (const char *)nlc_at(k->dy, i, k->sdy, dt);
  const char *dres = k->dres != NULL ? (const char *)nlc_at(k->dres, i, k->sdres, dt) : NULL;
  char *dx = (char *)nlc_at_mut(k->dx, i, k->sdx, dt);
  float *xb = blk, *gb = blk + NLC_BLK, *hb = blk + 2 * NLC_BLK, *ob = blk + 3 * NLC_BLK;
  float *rb = blk + 4 * NLC_BLK;
  float sx = 0.0f, sg = 0.0f, cx, cg;
  int64_t c, j;

  /* pass 1: sg = sum(dy*W), sx = sum(dy*W*(x - mean)) */
  for (c = 0; c < n; c += NLC_BLK) {
    const int64_t len = n - c < NLC_BLK ? n - c : NLC_BLK;
    const float *Wb = W + c;
    const void *xs = x + c * sz, *gs = dy + c * sz;
    if (dt == NLK_F16) {
      nlc_f16_to_f32_row((const uint16_t *)xs, xb, len);
      nlc_f16_to_f32_row((const uint16_t *)gs, gb, len);
      xs = xb;
      gs = gb;
    }
#pragma omp simd reduction(+ : sx, sg)
    for (j = 0; j < len; j++) {
      const float gw = nlc_ld1(ldt, gs, j) * Wb[j];
      sg += gw;
      sx += gw * (nlc_ld1(ldt, xs, j) - mu);
    }
  }
  cx = sx * r / fn;                           /* mean(g*xhat) */
  cg = ln ? sg / fn : 0.0f;                   /* mean(g): LayerNorm only */

  /* pass 2: dx = rstd*(g - mean(g) - xhat*mean(g*xhat)) (+ dres); xhat_w is x*rstd rounded
   * to dt unless GEMMA (what the forward multiplied W by) */
  for (c = 0; c < n; c += NLC_BLK) {
    const int64_t len = n - c < NLC_BLK ? n - c : NLC_BLK;
    const float *Wb = W + c;
    const void *xs = x + c * sz, *gs = dy + c * sz, *rs = dres != NULL ? dres + c * sz : NULL;
    void *ds = dx + c * sz;
    if (next >= 0) {
      nlc_prefetch(nlc_at(k->x, next, k->sx, dt), c * sz, len * sz);
      nlc_prefetch(nlc_at(k->dy, next, k->sdy, dt), c * sz, len * sz);
    }
    if (dt == NLK_F16) {
      nlc_f16_to_f32_row((const uint16_t *)xs, xb, len);
      nlc_f16_to_f32_row((const uint16_t *)gs, gb, len);
      if (rs != NULL)
        nlc_f16_to_f32_row((const uint16_t *)rs, rb, len);
      xs = xb;
      gs = gb;
      rs = rs != NULL ? rb : NULL;
      ds = ob;
    } else if (inplace) {
      memcpy(gb, gs, (size_t)(len * sz));
      gs = gb;
    }
    if (rs != NULL) {
      for (j = 0; j < len; j++) {
        const float xh = (nlc_ld1(ldt, xs, j) - mu) * r;
        const float g = nlc_ld1(ldt, gs, j) * Wb[j];
        hb[j] = round_xw ? nlc_rnd1(ldt, xh) : xh;
        nlc_st1(ldt, ds, j, nlc_ld1(ldt, rs, j) + r * (g - cg - xh * cx));
      }
    } else {
      for (j = 0; j < len; j++) {
        const float xh = (nlc_ld1(ldt, xs, j) - mu) * r;
        const float g = nlc_ld1(ldt, gs, j) * Wb[j];
        hb[j] = round_xw ? nlc_rnd1(ldt, xh) : xh;
        nlc_st1(ldt, ds, j, r * (g - cg - xh * cx));
      }
    }
    if (dt == NLK_F16) {
      nlc_f32_to_f16_row(ob, (uint16_t *)(dx + c * sz), len);
      if (round_xw)
        nlc_round_f16_row(hb, len);
    }
    if (pw != NULL && acc)
      for (j = 0; j < len; j++)
        pw[c + j] += nlc_ld1(ldt, gs, j) * hb[j];
    else if (pw != NULL)
      for (j = 0; j < len; j++)
        pw[c + j] = nlc_ld1(ldt, gs, j) * hb[j];
    if (pb != NULL && acc)
      for (j = 0; j < len; j++)
        pb[c + j] += nlc_ld1(ldt, gs, j);
    else if (pb != NULL)
      for (j = 0; j < len; j++)
        pb[c + j] = nlc_ld1(ldt, gs, j);
  }
}

/* One backward row: bwd_row_t instantiated for the dtype (checked by nlc_fast_ok). Row
 * `next` (the worker's next row, -1 for none) is prefetched during pass 2, so that its pass 1
 * finds it in cache and the row's compute overlaps the next row's memory traffic. */
static void bwd_row(const nlk_norm *k, int64_t i, int64_t next, const float *W, float *blk,
                    float *pw, float *pb, int acc)
{
  if (next >= k->M)
    next = -1;
  switch (k->dt) {
  case NLK_BF16: bwd_row_t(k, i, next, W, blk, pw, pb, acc, NLK_BF16); break;
  case NLK_F16: bwd_row_t(k, i, next, W, blk, pw, pb, acc, NLK_F16); break;
  default: bwd_row_t(k, i, next, W, blk, pw, pb, acc, NLK_F32); break;
  }
}

/* Gradient outputs (dw, db) this call must produce. */
static int bwd_outputs(const nlk_norm *k) { return nlc_has_dw(k) + nlc_has_db(k); }

static size_t row_bwd_ws(const nlk_norm *k)
{
  return (size_t)k->M * (size_t)k->N * sizeof(float) * (size_t)bwd_outputs(k);
}

static size_t persistent_bwd_ws(const nlk_norm *k)
{
  return (size_t)nlc_threads(k) * (size_t)k->N * sizeof(float) * (size_t)bwd_outputs(k);
}

/* Shared driver. The workspace holds `rows` fp32 rows of N per gradient output, dw's first:
 * rows = M (row) or the requested thread count (persistent). Each thread mallocs N + 5 NLC_BLK
 * floats of scratch (W and five blocks); a failure makes it skip its rows and the call return
 * NLK_ERR_NOMEM. After the row phase's barrier the columns are split over the threads, each
 * summing its columns over the rows that were used, in order, into row 0, then storing. */
static int bwd_run(nlk_norm *k, int persistent)
{
  const int64_t n = k->N, m = k->M;
  const int T = nlc_threads(k);
  const int64_t rows = persistent ? T : m;
  float *tw = NULL, *tb = NULL;
  int err = 0, used = 1;

  if (!nlc_fast_ok(k) || !nlc_bwd_stats_ok(k))
    return NLK_ERR_UNSUPPORTED;
  if (bwd_outputs(k) > 0) {
    size_t need = persistent ? persistent_bwd_ws(k) : row_bwd_ws(k);
    if (k->ws == NULL || k->ws_bytes < need)
      return NLK_ERR_UNSUPPORTED;
    tw = nlc_has_dw(k) ? (float *)k->ws : NULL;
    tb = nlc_has_db(k) ? (float *)k->ws + (tw != NULL ? rows * n : 0) : NULL;
  }
#pragma omp parallel num_threads(T)
  {
    const int tid = omp_get_thread_num(), nth = omp_get_num_threads();
    float *s = (float *)malloc(((size_t)n + 5 * NLC_BLK) * sizeof(float));
    int64_t i;
    int failed;

    if (tid == 0)
      used = nth;
    if (s == NULL) {
#pragma omp atomic write
      err = 1;
    } else if (persistent) {
      float *pw = tw != NULL ? tw + tid * n : NULL;
      float *pb = tb != NULL ? tb + tid * n : NULL;
      if (pw != NULL)
        memset(pw, 0, (size_t)n * sizeof(float));
      if (pb != NULL)
        memset(pb, 0, (size_t)n * sizeof(float));
      nlc_weight_f(k, s, 0);
      for (i = tid; i < m; i += nth)
        bwd_row(k, i, i + nth, s, s + n, pw, pb, 1);
    } else {
      const int64_t lo = m * tid / nth, hi = m * (tid + 1) / nth;
      for (i = lo; i < hi; i++) {
        nlc_weight_f(k, s, 0);
        bwd_row(k, i, i + 1 < hi ? i + 1 : -1, s, s + n, tw != NULL ? tw + i * n : NULL,
                tb != NULL ? tb + i * n : NULL, 0);
      }
    }
    free(s);
#pragma omp barrier
#pragma omp atomic read
    failed = err;
    if (!failed) {
      const int64_t used_rows = persistent ? nth : m;
      int64_t lo, hi;
      nlc_split(n, tid, nth, &lo, &hi);
      if (tw != NULL)
        nlc_colsum(tw, used_rows, n, lo, hi, k->wdt, k->dw);
      if (tb != NULL)
        nlc_colsum(tb, used_rows, n, lo, hi, k->bdt, k->db);
    }
  }
  k->grid = used;
  k->block = 0;
  return err ? NLK_ERR_NOMEM : NLK_OK;
}

static int row_bwd(nlk_norm *k) { return bwd_run(k, 0); }

static int persistent_bwd(nlk_norm *k) { return bwd_run(k, 1); }

const nlk_strategy nlk_cpu_bwd[] = {
  {"row", NLK_BWD, row_bwd, row_bwd_ws, NULL, NULL},
  {"persistent", NLK_BWD, persistent_bwd, persistent_bwd_ws, NULL, NULL},
  {NULL, 0, NULL, NULL, NULL, NULL},
};
