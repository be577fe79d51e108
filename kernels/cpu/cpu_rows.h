/*
 * cpu_rows.h: private helpers of the CPU kernels (ref.c, fast_fwd.c, fast_bwd.c).
 *
 * Conversions work a row (or block) at a time: one switch on the dtype, then a tight loop
 * the compiler vectorizes (bf16 by shifts, fp16 by F16C where the build enables it), or one
 * element at a time inside loops specialized on a constant dtype. Every conversion has the
 * semantics of convert.h (tested bit for bit); the fp64 -> bf16 rounding below is a fast
 * form of nl_f64_to_bf16, which goes through frexp/ldexp.
 * Also here: worker counts, the per-thread column split and the ordered column reduction
 * that make the weight gradients deterministic for a given thread count.
 */
#ifndef NL_CPU_ROWS_H
#define NL_CPU_ROWS_H

#include <float.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "convert.h"
#include "nlk.h"

/* GCC 12 does not vectorize _Float16 conversions; F16C does 8 at a time (vcvtph2ps, and
 * vcvtps2ph with RNE, bit-identical to convert.h's scalar path, which the tails use). */
#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#define NLC_F16C 1
#endif

/* Columns of one reduction chunk: its fp32 accumulator (16 KiB) stays in L1 while the
 * reduction streams over the rows of the temp or partials matrix. */
enum { NLC_CHUNK = 4096 };

/* Columns of one block of a row in the fast kernels: a row is converted and processed block
 * by block so that the several simple loops over a block hit L1 (2 KiB per fp32 block)
 * instead of streaming whole rows through L2 once per loop. */
enum { NLC_BLK = 512 };

/* Worker threads a kernel asks OpenMP for; the workspace queries size with the same count. */
static inline int nlc_threads(const nlk_norm *k)
{
  return k->threads > 0 ? k->threads : omp_get_max_threads();
}

/* Element i*stride of a strided 2-D array of dtype dt (strides are in elements). */
static inline const void *nlc_at(const void *base, int64_t i, int64_t stride, int32_t dt)
{
  return (const char *)base + i * stride * nlk_dtype_size(dt);
}

static inline void *nlc_at_mut(void *base, int64_t i, int64_t stride, int32_t dt)
{
  return (char *)base + i * stride * nlk_dtype_size(dt);
}

/* Prefetches bytes [off, off + len) of p, a cache line at a time. */
static inline void nlc_prefetch(const void *p, int64_t off, int64_t len)
{
#if defined(__GNUC__)
  int64_t b;
  for (b = off; b < off + len; b += 64)
    __builtin_prefetch((const char *)p + b, 0, 3);
#else
  (void)p;
  (void)off;
  (void)len;
#endif
}

/* Columns [*lo, *hi) of worker t out of nth: even shares, inner boundaries on multiples of
 * 16 elements so that two workers rarely write the same cache line of an fp32 row. */
static inline void nlc_split(int64_t n, int t, int nth, int64_t *lo, int64_t *hi)
{
  *lo = t == 0 ? 0 : (n * t / nth) & ~(int64_t)15;
  *hi = t == nth - 1 ? n : (n * (t + 1) / nth) & ~(int64_t)15;
}

/* fp64 -> bf16, one rounding to nearest even, identical to nl_f64_to_bf16 (tested bit for
 * bit): overflow gives inf, NaN the canonical quiet NaN with the sign kept. Normal results
 * round the fp64 significand to 8 bits in place; subnormal ones (|d| < 2^-126) are integer
 * multiples of 2^-133, which rint() finds exactly after an exact scaling. */
static inline uint16_t nlc_f64_to_bf16(double d)
{
  uint64_t u, a;
  uint16_t sign;
  memcpy(&u, &d, 8);
  sign = (uint16_t)((u >> 48) & 0x8000u);
  a = u & 0x7fffffffffffffffull;
  if (a > 0x7ff0000000000000ull)
    return (uint16_t)(sign | 0x7fc0u);
  if (a < 0x3810000000000000ull)              /* below 2^-126, the smallest normal bf16 */
    return (uint16_t)(sign | (uint16_t)rint(fabs(d) * 0x1p133));
  a += (1ull << 44) - 1 + ((a >> 45) & 1u);
  if (a >= 0x47f0000000000000ull)             /* rounded up to 2^128 or beyond: inf */
    return (uint16_t)(sign | 0x7f80u);
  return (uint16_t)(sign | (uint16_t)((((a >> 52) - 1023 + 127) << 7) | ((a >> 45) & 0x7fu)));
}

/* ---- fp8 outputs (the numerics of nlk.h: an fp32 product, then one fp8 rounding) ---- */

/* |v| as the bits of an fp32: amax is their unsigned max (NaN above inf, so a NaN anywhere
 * gives a NaN amax), the same bits in any order. */
static inline uint32_t nlc_abs_bits(double v) { return nl_f32_bits((float)v) & 0x7fffffffu; }

/* Current scaling's scale: the fp8 dtype's max / amax in fp32, 1 when amax is 0 or not finite,
 * the largest fp32 when the quotient overflows. device.cuh's scale_from_amax gives the same
 * bits. */
static inline float nlc_scale_from_amax(float amax, int32_t ydt)
{
  float s;
  if (!(amax > 0.0f) || isinf(amax))
    return 1.0f;
  s = nlk_fp8_max(ydt) / amax;
  return isinf(s) ? FLT_MAX : s;
}

/* Stores v * scale rounded once to fp32 (exactly the fp32 product when v is an fp32), then to
 * the fp8 dtype with convert.h's satfinite RNE: what the GPU's cvt of its fp32 product gives. */
static inline void nlc_store_fp8(int32_t ydt, void *p, int64_t j, double v, float scale)
{
  nl_store(ydt, p, j, (double)(float)(v * (double)scale));
}

/* What one pass over a forward's rows does: compute amax alone (current scaling's first pass,
 * which writes nothing), or write every output, an fp8 y scaled by `scale`. */
typedef struct nlc_out {
  int amax_only;
  float scale;
} nlc_out;

/* A kernel's pass: `o` says what to do, arg is the kernel's own; with want_amax the max of
 * nlc_abs_bits over what the pass saw goes to *amax. Returns NLK_OK or an error. */
typedef int (*nlc_pass_fn)(nlk_norm *k, const void *arg, const nlc_out *o, int want_amax,
                           uint32_t *amax);

/* Runs a forward (or the transpose op) through its pass: once under delayed scaling (amax
 * recorded when asked), twice under current scaling: amax first, then the scale from it, then
 * the outputs (reported as two passes, the inputs read twice). */
static inline int nlc_scaled_run(nlk_norm *k, nlc_pass_fn pass, const void *arg, int64_t in_bytes)
{
  const int fp8 = nlk_is_fp8(k->ydt);
  nlc_out o = {0, fp8 ? (k->scale != NULL ? *k->scale : 1.0f) : 1.0f};
  uint32_t amax;
  int rc;
  if (fp8 && k->scaling == NLK_SCALING_CURRENT) {
    const nlc_out first = {1, 1.0f};
    if ((rc = pass(k, arg, &first, 1, &amax)) != NLK_OK)
      return rc;
    *k->amax = nl_bits_f32(amax);
    o.scale = nlc_scale_from_amax(*k->amax, k->ydt);
    if (k->scale != NULL)
      *k->scale = o.scale;
    k->current_passes = 2;
    k->extra_bytes = in_bytes;
    return pass(k, arg, &o, 0, &amax);
  }
  rc = pass(k, arg, &o, fp8 && k->amax != NULL, &amax);
  if (rc == NLK_OK && fp8 && k->amax != NULL)
    *k->amax = nl_bits_f32(amax);
  return rc;
}

/* Copies element j of row y (dtype dt) to yt[j][i]: the strided transposed copy. */
static inline void nlc_scatter_col(const nlk_norm *k, int64_t i, const void *yrow, int64_t lo,
                                   int64_t len)
{
  const int sz = nlk_dtype_size(k->ydt);
  int64_t j;
  for (j = lo; j < lo + len; j++)
    memcpy((char *)k->yt + (j * k->syt + i) * sz, (const char *)yrow + j * sz, (size_t)sz);
}

/* Forces inlining where a dtype argument must become a constant, so that the per-element
 * switches below fold away and the enclosing loop vectorizes. */
#if defined(__GNUC__)
#define NLC_INLINE static inline __attribute__((always_inline))
#else
#define NLC_INLINE static inline
#endif

/* ---- fp16 rows ---- */

static inline void nlc_f16_to_f32_row(const uint16_t *s, float *d, int64_t n)
{
  int64_t j = 0;
#ifdef NLC_F16C
  for (; j + 8 <= n; j += 8)
    _mm256_storeu_ps(d + j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + j))));
#endif
  for (; j < n; j++)
    d[j] = nl_f16_to_f32(s[j]);
}

static inline void nlc_f32_to_f16_row(const float *s, uint16_t *d, int64_t n)
{
  int64_t j = 0;
#ifdef NLC_F16C
  for (; j + 8 <= n; j += 8)
    _mm_storeu_si128((__m128i *)(d + j),
                     _mm256_cvtps_ph(_mm256_loadu_ps(s + j), _MM_FROUND_TO_NEAREST_INT));
#endif
  for (; j < n; j++)
    d[j] = nl_f32_to_f16(s[j]);
}

/* Rounds fp32 values to fp16 and back in place. */
static inline void nlc_round_f16_row(float *v, int64_t n)
{
  int64_t j = 0;
#ifdef NLC_F16C
  for (; j + 8 <= n; j += 8)
    _mm256_storeu_ps(v + j, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(v + j),
                                                             _MM_FROUND_TO_NEAREST_INT)));
#endif
  for (; j < n; j++)
    v[j] = nl_f16_to_f32(nl_f32_to_f16(v[j]));
}

/* ---- fp64 rows (the reference) ---- */

static inline void nlc_load_d(int32_t dt, const void *src, double *dst, int64_t n)
{
  int64_t j;
  switch (dt) {
  case NLK_F64:
    memcpy(dst, src, (size_t)n * sizeof(double));
    break;
  case NLK_F32: {
    const float *s = (const float *)src;
    for (j = 0; j < n; j++)
      dst[j] = s[j];
    break;
  }
  case NLK_BF16: {
    const uint16_t *s = (const uint16_t *)src;
    for (j = 0; j < n; j++)
      dst[j] = nl_bf16_to_f32(s[j]);
    break;
  }
  case NLK_F16: {
    const uint16_t *s = (const uint16_t *)src;
    for (j = 0; j < n; j++)
      dst[j] = nl_f16_to_f32(s[j]);
    break;
  }
  default:                                    /* fp8: the exact generic decoder */
    for (j = 0; j < n; j++)
      dst[j] = nl_load(dt, src, j);
  }
}

/* Stores fp64 values with one rounding each, as nl_store does. */
static inline void nlc_store_d(int32_t dt, const double *src, void *dst, int64_t n)
{
  int64_t j;
  switch (dt) {
  case NLK_F64:
    memcpy(dst, src, (size_t)n * sizeof(double));
    break;
  case NLK_F32: {
    float *d = (float *)dst;
    for (j = 0; j < n; j++)
      d[j] = (float)src[j];
    break;
  }
  case NLK_BF16: {
    uint16_t *d = (uint16_t *)dst;
    for (j = 0; j < n; j++)
      d[j] = nlc_f64_to_bf16(src[j]);
    break;
  }
  case NLK_F16: {
    uint16_t *d = (uint16_t *)dst;
    for (j = 0; j < n; j++)
      d[j] = nl_f64_to_f16(src[j]);
    break;
  }
  default:
    for (j = 0; j < n; j++)
      nl_store(dt, dst, j, src[j]);
  }
}

/* Rounds fp64 values to dt and back in place: what nl_round_to does to each. */
static inline void nlc_round_d(int32_t dt, double *v, int64_t n)
{
  int64_t j;
  switch (dt) {
  case NLK_F64:
    break;
  case NLK_F32:
    for (j = 0; j < n; j++)
      v[j] = (float)v[j];
    break;
  case NLK_BF16:
    for (j = 0; j < n; j++)
      v[j] = nl_bf16_to_f32(nlc_f64_to_bf16(v[j]));
    break;
  case NLK_F16:
    for (j = 0; j < n; j++)
      v[j] = nl_f16_to_f32(nl_f64_to_f16(v[j]));
    break;
  default:
    for (j = 0; j < n; j++)
      v[j] = nl_round_to(dt, v[j]);
  }
}

/* ---- fp32 rows (the fast strategies) ---- */

static inline void nlc_load_f(int32_t dt, const void *src, float *dst, int64_t n)
{
  int64_t j;
  switch (dt) {
  case NLK_F32:
    memcpy(dst, src, (size_t)n * sizeof(float));
    break;
  case NLK_BF16: {
    const uint16_t *s = (const uint16_t *)src;
    for (j = 0; j < n; j++)
      dst[j] = nl_bf16_to_f32(s[j]);
    break;
  }
  case NLK_F16:
    nlc_f16_to_f32_row((const uint16_t *)src, dst, n);
    break;
  default:
    for (j = 0; j < n; j++)
      dst[j] = (float)nl_load(dt, src, j);
  }
}

static inline void nlc_store_f(int32_t dt, const float *src, void *dst, int64_t n)
{
  int64_t j;
  switch (dt) {
  case NLK_F32:
    memcpy(dst, src, (size_t)n * sizeof(float));
    break;
  case NLK_BF16: {
    uint16_t *d = (uint16_t *)dst;
    for (j = 0; j < n; j++)
      d[j] = nl_f32_to_bf16(src[j]);
    break;
  }
  case NLK_F16:
    nlc_f32_to_f16_row(src, (uint16_t *)dst, n);
    break;
  default:
    for (j = 0; j < n; j++)
      nl_store(dt, dst, j, src[j]);
  }
}

/* Rounds fp32 values to dt and back in place (RNE): the intermediate casts of the LLAMA and
 * NONE modes. */
static inline void nlc_round_f(int32_t dt, float *v, int64_t n)
{
  int64_t j;
  switch (dt) {
  case NLK_F32:
    break;
  case NLK_BF16:
    for (j = 0; j < n; j++)
      v[j] = nl_bf16_to_f32(nl_f32_to_bf16(v[j]));
    break;
  case NLK_F16:
    nlc_round_f16_row(v, n);
    break;
  default:
    for (j = 0; j < n; j++)
      v[j] = (float)nl_round_to(dt, v[j]);
  }
}

/* ---- single elements, for fused loops specialized on a constant dt (fp32 or bf16: GCC 12
 * does not vectorize _Float16 conversions, so the fast kernels convert fp16 a block at a
 * time with the row helpers above instead) ---- */

NLC_INLINE float nlc_ld1(int32_t dt, const void *p, int64_t j)
{
  if (dt == NLK_BF16)
    return nl_bf16_to_f32(((const uint16_t *)p)[j]);
  return ((const float *)p)[j];
}

NLC_INLINE void nlc_st1(int32_t dt, void *p, int64_t j, float v)
{
  if (dt == NLK_BF16)
    ((uint16_t *)p)[j] = nl_f32_to_bf16(v);
  else
    ((float *)p)[j] = v;
}

NLC_INLINE float nlc_rnd1(int32_t dt, float v)
{
  return dt == NLK_BF16 ? nl_bf16_to_f32(nl_f32_to_bf16(v)) : v;
}

/* The fp32 weight the fast kernels multiply by: w + offset (in fp32; w itself at offset 0),
 * 1 when non-affine; rounded to the activation dtype when `round` (RMSNorm's NONE mode,
 * forward only). */
static inline void nlc_weight_f(const nlk_norm *k, float *W, int round)
{
  int64_t j, n = k->N;
  if (k->w == NULL || k->wdt == NLK_NONE) {
    for (j = 0; j < n; j++)
      W[j] = 1.0f;
    return;
  }
  nlc_load_f(k->wdt, k->w, W, n);
  for (j = 0; k->offset != 0.f && j < n; j++)
    W[j] += k->offset;
  if (round)
    nlc_round_f(k->dt, W, n);
}

/* Whether the fast (fp32) kernels take these dtypes: activations fp32/fp16/bf16, weight and
 * bias absent, fp32 or the activation dtype; and a non-empty shape. */
static inline int nlc_fast_ok(const nlk_norm *k)
{
  int dt = k->dt;
  if (dt != NLK_F32 && dt != NLK_F16 && dt != NLK_BF16)
    return 0;
  if (k->wdt != NLK_NONE && k->wdt != NLK_F32 && k->wdt != dt)
    return 0;
  if (k->op == NLK_LAYERNORM && k->bdt != NLK_NONE && k->bdt != NLK_F32 && k->bdt != dt)
    return 0;
  return k->M > 0 && k->N > 0;
}

/* The saved statistics a backward pass reads: rstd always, mean for LayerNorm. */
static inline int nlc_bwd_stats_ok(const nlk_norm *k)
{
  return k->rstd != NULL && (k->op != NLK_LAYERNORM || k->mean != NULL);
}

/* Gradient outputs of a backward pass, from the dtypes (pointers may not be set yet when the
 * core asks for the workspace size): dw when affine, db for a LayerNorm with bias. */
static inline int nlc_has_dw(const nlk_norm *k) { return k->wdt != NLK_NONE; }
static inline int nlc_has_db(const nlk_norm *k)
{
  return k->op == NLK_LAYERNORM && k->bdt != NLK_NONE;
}

/* Sums rows 0..nrows-1 (row stride N) of the fp32 matrix p over columns [lo, hi), in row
 * order, into row 0, then stores that segment of row 0 to out (dtype dt; NULL: no store).
 * Row order fixed and columns independent: the result depends on nrows only. */
static inline void nlc_colsum(float *p, int64_t nrows, int64_t N, int64_t lo, int64_t hi,
                              int32_t dt, void *out)
{
  int64_t c, r, j;
  for (c = lo; c < hi; c += NLC_CHUNK) {
    int64_t len = hi - c < NLC_CHUNK ? hi - c : NLC_CHUNK;
    float *acc = p + c;
    for (r = 1; r < nrows; r++) {
      const float *q = p + r * N + c;
      for (j = 0; j < len; j++)
        acc[j] += q[j];
    }
  }
  if (out != NULL && hi > lo)
    nlc_store_f(dt, p + lo, nlc_at_mut(out, lo, 1, dt), hi - lo);
}

#endif
