/*
 * reduce.cuh: the backward's weight-gradient reductions (reduce.cu), which every backward
 * strategy that does not sum dW (and dB) in its own kernel ends with, and the layout of the
 * fp32 partial rows they sum.
 */
#ifndef NL_REDUCE_CUH
#define NL_REDUCE_CUH

#include "device.cuh"
#include "nlk.h"

namespace nlk {

/* The gradients a backward sums over rows: dW when affine, dB for a LayerNorm with a bias.
 * They lie side by side in each fp32 partial row (and in an atomic reduction's accumulator):
 * pw floats, dW from column 0, dB from column db_at. */
struct GradCols {
  bool dw, db;
  int64_t pw, db_at;
};

inline GradCols grad_cols(const nlk_norm *k)
{
  GradCols g;
  g.dw = k->dw != NULL;
  g.db = k->op == NLK_LAYERNORM && k->db != NULL && k->bdt != NLK_NONE;
  g.db_at = g.dw ? k->N : 0;
  g.pw = k->N * ((g.dw ? 1 : 0) + (g.db ? 1 : 0));
  return g;
}

/* Where a summed column goes, in grad_cols's numbering: dW's column col, or from db_at dB's,
 * each in its dtype (wdt, bdt: fp32, fp16 or bf16). The reduce kernels and the persistent
 * backward's fused reduction store through it. */
struct GradOut {
  void *dw, *db;
  int wdt, bdt, db_at;
  __device__ __forceinline__ void store(int col, float v) const
  {
    const bool b = db && col >= db_at;
    void *out = b ? db : dw;
    col -= b ? db_at : 0;
    switch (b ? bdt : wdt) {
    case NLK_F32: static_cast<float *>(out)[col] = v; break;
    case NLK_F16: static_cast<__half *>(out)[col] = from_f<__half>(v); break;
    default: static_cast<__nv_bfloat16 *>(out)[col] = from_f<__nv_bfloat16>(v); break;
    }
  }
};

/* dW (in k->wdt, at k->dw) and dB (k->bdt, k->db) = the column sums of `rows` fp32 partial
 * rows at P (grad_cols's layout), on k's stream; drop: P is scratch, and its lines may be
 * dropped from L2 once read; pdl: launched with programmatic dependent launch, waiting for
 * the kernel that wrote P before reading it. */
int reduce_partials(nlk_norm *k, const float *P, int64_t rows, bool drop, bool pdl);

/* dW and dB from the accumulator of an atomic reduction (grad_cols's layout). */
int convert_accum(nlk_norm *k, const float *acc);

} // namespace nlk

#endif
