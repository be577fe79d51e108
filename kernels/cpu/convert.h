/*
 * Host-side element conversions between fp64/fp32 and the storage dtypes, round to nearest
 * even. Shared by the core (buffers, compare) and the CPU kernels.
 *
 * fp16 goes through the compiler's _Float16 where it has one (F16C instructions when the
 * kernels are built with -march=native, libgcc otherwise; both round to nearest even), bf16
 * through bit arithmetic, fp8 through one exact generic routine: the value is scaled by a
 * power of two so that the target's quantum becomes 1, rounded with rint() (round to nearest
 * even in the default mode), and re-encoded. fp8 saturates like PTX's cvt .satfinite: any
 * |x| above the max finite value (infinities included) becomes +-max; NaN stays NaN.
 */
#ifndef NL_CONVERT_H
#define NL_CONVERT_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "nlk.h"

static inline uint32_t nl_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float nl_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* ---- a small binary float format: E exponent bits, M mantissa bits ---- */

typedef struct nl_fmt {
  int ebits, mbits;
  int has_inf;        /* IEEE-style: all-ones exponent is inf/NaN */
  double max;         /* largest finite value */
  uint32_t nan;       /* canonical quiet NaN, sign bit clear */
} nl_fmt;

static const nl_fmt NL_FMT_F16 = {5, 10, 1, 65504.0, 0x7e00u};
static const nl_fmt NL_FMT_BF16 = {8, 7, 1, 0x1.fep127, 0x7fc0u};
static const nl_fmt NL_FMT_E4M3 = {4, 3, 0, 448.0, 0x7fu};
static const nl_fmt NL_FMT_E5M2 = {5, 2, 1, 57344.0, 0x7eu};

/* Decodes the bit pattern `u` of format `f` exactly. */
static inline double nl_fmt_decode(const nl_fmt *f, uint32_t u)
{
  int bias = (1 << (f->ebits - 1)) - 1;
  uint32_t sign = (u >> (f->ebits + f->mbits)) & 1u;
  uint32_t e = (u >> f->mbits) & ((1u << f->ebits) - 1u);
  uint32_t m = u & ((1u << f->mbits) - 1u);
  uint32_t emax_field = (1u << f->ebits) - 1u;
  double v;
  if (f->has_inf && e == emax_field)
    v = m ? NAN : INFINITY;
  else if (!f->has_inf && e == emax_field && m == (1u << f->mbits) - 1u)
    v = NAN;                                  /* e4m3fn: S.1111.111 is the only NaN */
  else if (e == 0)
    v = ldexp((double)m, 1 - bias - f->mbits);
  else
    v = ldexp((double)(m | (1u << f->mbits)), (int)e - bias - f->mbits);
  return sign ? -v : v;
}

/* Rounds `x` to the nearest value of format `f` (ties to even) and encodes it. `saturate`
 * clamps overflow (and infinities) to +-max, as cvt .satfinite does; otherwise overflow gives
 * inf where the format has one and NaN where it does not. */
static inline uint32_t nl_fmt_encode(const nl_fmt *f, double x, int saturate)
{
  int bias = (1 << (f->ebits - 1)) - 1;
  uint32_t sign = signbit(x) ? 1u << (f->ebits + f->mbits) : 0u;
  uint32_t emax_field = (1u << f->ebits) - 1u;
  uint32_t inf_bits = f->has_inf ? emax_field << f->mbits : f->nan;
  double a = fabs(x), r;
  int e, emin = 1 - bias;
  if (isnan(x))
    return sign | f->nan;
  if (a == 0.0)
    return sign;
  if (isinf(a))
    return sign | (saturate ? nl_fmt_encode(f, f->max, 0) : inf_bits);
  frexp(a, &e);                               /* a = m * 2^e with m in [0.5, 1) */
  e -= 1;                                     /* a in [2^e, 2^(e+1)) */
  if (e < emin)
    e = emin;                                 /* subnormal range: fixed quantum */
  r = ldexp(rint(ldexp(a, f->mbits - e)), e - f->mbits);
  if (r > f->max)
    return sign | (saturate ? nl_fmt_encode(f, f->max, 0) : inf_bits);
  if (r < ldexp(1.0, emin))
    return sign | (uint32_t)ldexp(r, f->mbits - emin);
  frexp(r, &e);
  e -= 1;
  return sign | ((uint32_t)(e + bias) << f->mbits) |
         ((uint32_t)ldexp(r, f->mbits - e) & ((1u << f->mbits) - 1u));
}

/* ---- fast paths for the 16-bit types ---- */

static inline float nl_bf16_to_f32(uint16_t b) { return nl_bits_f32((uint32_t)b << 16); }

/* Round to nearest even by integer arithmetic; a NaN keeps its sign and becomes quiet. No
 * branch, so row loops over it vectorize. */
static inline uint16_t nl_f32_to_bf16(float f)
{
  uint32_t u = nl_f32_bits(f);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t q = (u >> 16) | 0x40u;
  return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
}

#if defined(__FLT16_MAX__) && !defined(NL_NO_FLOAT16)
static inline float nl_f16_to_f32(uint16_t h) { _Float16 v; memcpy(&v, &h, 2); return (float)v; }
static inline uint16_t nl_f32_to_f16(float f) { _Float16 v = (_Float16)f; uint16_t h; memcpy(&h, &v, 2); return h; }
static inline uint16_t nl_f64_to_f16(double d) { _Float16 v = (_Float16)d; uint16_t h; memcpy(&h, &v, 2); return h; }
#else
static inline float nl_f16_to_f32(uint16_t h) { return (float)nl_fmt_decode(&NL_FMT_F16, h); }
static inline uint16_t nl_f32_to_f16(float f) { return (uint16_t)nl_fmt_encode(&NL_FMT_F16, f, 0); }
static inline uint16_t nl_f64_to_f16(double d) { return (uint16_t)nl_fmt_encode(&NL_FMT_F16, d, 0); }
#endif

static inline uint16_t nl_f64_to_bf16(double d) { return (uint16_t)nl_fmt_encode(&NL_FMT_BF16, d, 0); }

/* ---- element access by dtype (slow path: one switch per element) ---- */

static inline double nl_load(int32_t dt, const void *p, int64_t i)
{
  switch (dt) {
  case NLK_F64: return ((const double *)p)[i];
  case NLK_F32: return ((const float *)p)[i];
  case NLK_F16: return nl_f16_to_f32(((const uint16_t *)p)[i]);
  case NLK_BF16: return nl_bf16_to_f32(((const uint16_t *)p)[i]);
  case NLK_F8E4M3: return nl_fmt_decode(&NL_FMT_E4M3, ((const uint8_t *)p)[i]);
  case NLK_F8E5M2: return nl_fmt_decode(&NL_FMT_E5M2, ((const uint8_t *)p)[i]);
  default: return NAN;
  }
}

/* Stores `v` rounded once, directly from fp64, to the dtype. */
static inline void nl_store(int32_t dt, void *p, int64_t i, double v)
{
  switch (dt) {
  case NLK_F64: ((double *)p)[i] = v; break;
  case NLK_F32: ((float *)p)[i] = (float)v; break;
  case NLK_F16: ((uint16_t *)p)[i] = nl_f64_to_f16(v); break;
  case NLK_BF16: ((uint16_t *)p)[i] = nl_f64_to_bf16(v); break;
  case NLK_F8E4M3: ((uint8_t *)p)[i] = (uint8_t)nl_fmt_encode(&NL_FMT_E4M3, v, 1); break;
  case NLK_F8E5M2: ((uint8_t *)p)[i] = (uint8_t)nl_fmt_encode(&NL_FMT_E5M2, v, 1); break;
  default: break;
  }
}

/* Rounds v to the dtype and back: the value a store followed by a load would give. */
static inline double nl_round_to(int32_t dt, double v)
{
  unsigned char tmp[8];
  nl_store(dt, tmp, 0, v);
  return nl_load(dt, tmp, 0);
}

/* Spacing of the dtype's values at |v| (one ULP), for error reports. */
static inline double nl_ulp(int32_t dt, double v)
{
  int mbits, emin, e;
  switch (dt) {
  case NLK_F64: mbits = 52; emin = -1022; break;
  case NLK_F32: mbits = 23; emin = -126; break;
  case NLK_F16: mbits = 10; emin = -14; break;
  case NLK_BF16: mbits = 7; emin = -126; break;
  case NLK_F8E4M3: mbits = 3; emin = -6; break;
  case NLK_F8E5M2: mbits = 2; emin = -14; break;
  default: return NAN;
  }
  v = fabs(v);
  if (!isfinite(v))
    return INFINITY;
  if (v == 0.0)
    e = emin;
  else {
    frexp(v, &e);
    e -= 1;
    if (e < emin)
      e = emin;
  }
  return ldexp(1.0, e - mbits);
}

#endif
