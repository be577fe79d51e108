/*
 * fast_fwd.c: the CPU forms of the `row` and `persistent` forward strategies, fp32 math.
 *
 * A row is read once into an fp32 scratch row while its sum is taken, then normalized and
 * converted back a block at a time, with plain loops the compiler vectorizes (sums through
 * `omp simd` reductions, whose lane-wise order is fixed at compile time, so results are
 * reproducible). The two strategies differ as their GPU namesakes do: `row` hands each thread
 * a contiguous block of rows and converts the weight for every row, as a CTA per row loads
 * it; `persistent` deals rows round-robin to the threads, each converting the weight once.
 *
 * An fp8 y goes through the fp32 block as fp16 does, then out scaled (nlc_store_fp8), with
 * |y| into the worker's amax; current scaling runs the rows twice (amax first, storing
 * nothing, then everything). yt (strided) is copied from each stored block of y.
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

/* One forward row in fp32, specialized on the constant dt. xs is an N-float scratch row
 * (the row, or h, in fp32), blk 2 NLC_BLK-float blocks; W is the fp32 weight (already rounded
 * for RMSNorm's NONE mode), B the fp32 bias or NULL. Pass 1 streams x (and the residual,
 * forming and storing h) for the row sum; pass 2 forms y from xs and stores it. fp32 and
 * bf16 convert inside the fused loops; fp16, which GCC does not vectorize, through F16C
 * block conversions, and so does an fp8 y. With residual_out == residual a residual block is
 * copied before h is stored over it. |y| goes into *amax when given. */
NLC_INLINE void fwd_row_t(const nlk_norm *k, int64_t i, int64_t next, const float *W,
                          const float *B, float *xs, float *blk, const nlc_out *o,
                          uint32_t *amax, const int32_t dt)
{
  const int fp8 = k->ydt != dt;
  const int via_block = dt == NLK_F16 || fp8;           /* y formed in ob, then converted */
  const int32_t ldt = via_block ? NLK_F32 : dt;         /* what the fused loops write */
  const int64_t n = k->N;
  const int sz = nlk_dtype_size(dt);
  const int ln = k->op == NLK_LAYERNORM;
  const int add = k->op == NLK_ADD_RMSNORM;
  const int round_n = !ln && k->cast != NLK_CAST_GEMMA;
  const float fn = (float)n;
  const char *x = (const char *)nlc_at(k->x, i, k->sx, dt);
  const char *res = add ? (const char *)nlc_at(k->res, i, k->sres, dt) : NULL;
  char *ro = add ? (char *)nlc_at_mut(k->res_out, i, k->sres_out, dt) : NULL;
  char *y = (char *)nlc_at_mut(k->y, i, k->sy, k->ydt);
  const int ysz = nlk_dtype_size(k->ydt);
  float *rb = blk, *ob = blk + NLC_BLK;
  float s = 0.0f, r, mu = 0.0f;
  int64_t c, j;

  /* pass 1: xs = x (or h = round(x + residual), stored); s = sum(xs) or sum(xs^2) */
  for (c = 0; c < n; c += NLC_BLK) {
    const int64_t len = n - c < NLC_BLK ? n - c : NLC_BLK;
    float *xb = xs + c;
    if (dt == NLK_F16) {
      nlc_f16_to_f32_row((const uint16_t *)(x + c * sz), xb, len);
      if (add) {
        nlc_f16_to_f32_row((const uint16_t *)(res + c * sz), rb, len);
        for (j = 0; j < len; j++)
          xb[j] += rb[j];
        nlc_round_f16_row(xb, len);
        if (!o->amax_only)
          nlc_f32_to_f16_row(xb, (uint16_t *)(ro + c * sz), len);
      }
    } else if (add) {
      const void *rs = res + c * sz;
      if (ro == res) {
        memcpy(rb, rs, (size_t)(len * sz));
        rs = rb;
      }
      for (j = 0; j < len; j++)
        xb[j] = nlc_rnd1(dt, nlc_ld1(dt, x + c * sz, j) + nlc_ld1(dt, rs, j));
      for (j = 0; !o->amax_only && j < len; j++)
        nlc_st1(dt, ro + c * sz, j, xb[j]);
    } else {
      for (j = 0; j < len; j++)
        xb[j] = nlc_ld1(dt, x + c * sz, j);
    }
    if (ln) {
#pragma omp simd reduction(+ : s)
      for (j = 0; j < len; j++)
        s += xb[j];
    } else {
#pragma omp simd reduction(+ : s)
      for (j = 0; j < len; j++)
        s += xb[j] * xb[j];
    }
  }
  if (ln) {
    float v = 0.0f;
    mu = s / fn;
#pragma omp simd reduction(+ : v)
    for (j = 0; j < n; j++)
      v += (xs[j] - mu) * (xs[j] - mu);
    r = 1.0f / sqrtf(v / fn + k->eps);
    if (k->mean != NULL && !o->amax_only)
      k->mean[i] = mu;
  } else {
    r = 1.0f / sqrtf(s / fn + k->eps);
  }

  /* pass 2: y = (x - mean)*rstd*W + b (LayerNorm), x*rstd*W (GEMMA), round(x*rstd)*W */
  for (c = 0; c < n; c += NLC_BLK) {
    const int64_t len = n - c < NLC_BLK ? n - c : NLC_BLK;
    const float *xb = xs + c, *Wb = W + c;
    void *ys = via_block ? (void *)ob : (void *)(y + c * sz);
    if (next >= 0) {
      nlc_prefetch(nlc_at(k->x, next, k->sx, dt), c * sz, len * sz);
      if (add)
        nlc_prefetch(nlc_at(k->res, next, k->sres, dt), c * sz, len * sz);
    }
    if (ln && B != NULL) {
      for (j = 0; j < len; j++)
        nlc_st1(ldt, ys, j, (xb[j] - mu) * r * Wb[j] + B[c + j]);
    } else if (ln) {
      for (j = 0; j < len; j++)
        nlc_st1(ldt, ys, j, (xb[j] - mu) * r * Wb[j]);
    } else if (!round_n) {
      for (j = 0; j < len; j++)
        nlc_st1(ldt, ys, j, xb[j] * r * Wb[j]);
    } else if (dt == NLK_F16) {
      for (j = 0; j < len; j++)
        ob[j] = xb[j] * r;
      nlc_round_f16_row(ob, len);
      for (j = 0; j < len; j++)
        ob[j] *= Wb[j];
    } else {
      for (j = 0; j < len; j++)
        nlc_st1(ldt, ys, j, nlc_rnd1(dt, xb[j] * r) * Wb[j]);
    }
    for (j = 0; amax != NULL && j < len; j++) {
      const uint32_t m = nlc_abs_bits(ob[j]);
      if (m > *amax)
        *amax = m;
    }
    if (o->amax_only)
      continue;
    if (fp8)
      for (j = 0; j < len; j++)
        nlc_store_fp8(k->ydt, y + c * ysz, j, ob[j], o->scale);
    else if (dt == NLK_F16)
      nlc_f32_to_f16_row(ob, (uint16_t *)(y + c * sz), len);
    if (k->yt != NULL)
      nlc_scatter_col(k, i, y, c, len);
  }
  if (k->rstd != NULL && !o->amax_only)
    k->rstd[i] = r;
}

/* One forward row: fwd_row_t instantiated for the dtype (checked by nlc_fast_ok). Row `next`
 * (the worker's next row; none when out of range) is prefetched during pass 2, so that the
 * row's compute overlaps the next row's memory traffic. */
static void fwd_row(const nlk_norm *k, int64_t i, int64_t next, const float *W, const float *B,
                    float *xs, float *blk, const nlc_out *o, uint32_t *amax)
{
  if (next >= k->M)
    next = -1;
  switch (k->dt) {
  case NLK_BF16: fwd_row_t(k, i, next, W, B, xs, blk, o, amax, NLK_BF16); break;
  case NLK_F16: fwd_row_t(k, i, next, W, B, xs, blk, o, amax, NLK_F16); break;
  default: fwd_row_t(k, i, next, W, B, xs, blk, o, amax, NLK_F32); break;
  }
}

/* Loads the fp32 bias into B; returns B, or NULL when the op has no bias. */
static const float *fwd_bias(const nlk_norm *k, float *B)
{
  if (k->op != NLK_LAYERNORM || k->b == NULL || k->bdt == NLK_NONE)
    return NULL;
  nlc_load_f(k->bdt, k->b, B, k->N);
  return B;
}

/* One pass over the rows (nlc_pass_fn; arg: whether persistent). Each thread mallocs 3N +
 * 2 NLC_BLK floats (W, B, a row, two blocks); a failed allocation makes that thread skip its
 * rows and the call return NLK_ERR_NOMEM. */
static int fwd_pass(nlk_norm *k, const void *arg, const nlc_out *o, int want_amax,
                    uint32_t *amax_out)
{
  const int persistent = *(const int *)arg;
  const int64_t n = k->N;
  const int round_w = k->op != NLK_LAYERNORM && k->cast == NLK_CAST_NONE;
  int err = 0, used = 1;
  uint32_t amax = 0;

#pragma omp parallel num_threads(nlc_threads(k)) reduction(max : amax)
  {
    const int tid = omp_get_thread_num(), nth = omp_get_num_threads();
    float *s = (float *)malloc(((size_t)n * 3 + 2 * NLC_BLK) * sizeof(float));
    uint32_t *am = want_amax ? &amax : NULL;
    int64_t i;
    if (tid == 0)
      used = nth;
    if (s == NULL) {
#pragma omp atomic write
      err = 1;
    } else if (persistent) {
      const float *B = fwd_bias(k, s + n);
      nlc_weight_f(k, s, round_w);
      for (i = tid; i < k->M; i += nth)
        fwd_row(k, i, i + nth, s, B, s + 2 * n, s + 3 * n, o, am);
    } else {
      const int64_t lo = k->M * tid / nth, hi = k->M * (tid + 1) / nth;
      for (i = lo; i < hi; i++) {
        nlc_weight_f(k, s, round_w);
        fwd_row(k, i, i + 1 < hi ? i + 1 : -1, s, fwd_bias(k, s + n), s + 2 * n, s + 3 * n, o,
                am);
      }
    }
    free(s);
  }
  k->grid = used;
  k->block = 0;
  *amax_out = amax;
  return err ? NLK_ERR_NOMEM : NLK_OK;
}

/* Shared driver of both strategies. */
static int fwd_run(nlk_norm *k, int persistent)
{
  if (!nlc_fast_ok(k) || (k->ydt != k->dt && !nlk_is_fp8(k->ydt)))
    return NLK_ERR_UNSUPPORTED;
  return nlc_scaled_run(k, fwd_pass, &persistent,
                        k->M * k->N * nlk_dtype_size(k->dt) * (k->op == NLK_ADD_RMSNORM ? 2 : 1));
}

static int row_fwd(nlk_norm *k) { return fwd_run(k, 0); }

static int persistent_fwd(nlk_norm *k) { return fwd_run(k, 1); }

const nlk_strategy nlk_cpu_fwd[] = {
  {"row", NLK_FWD, row_fwd, NULL, NULL, NULL},
  {"persistent", NLK_FWD, persistent_fwd, NULL, NULL, NULL},
  {NULL, 0, NULL, NULL, NULL, NULL},
};
