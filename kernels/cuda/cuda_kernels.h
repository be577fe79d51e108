/*
 * CUDA launchers, callable from C. Each returns 0 (NLK_OK) or an NLK_ERR_* code; CUDA errors
 * are returned as NLK_ERR_CUDA with the cudaError_t in k->cuda_error. The `util` launchers
 * return a cudaError_t directly.
 */
#ifndef NL_CUDA_KERNELS_H
#define NL_CUDA_KERNELS_H

#include "nlk.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fills rows x cols elements of elt_size bytes (1, 2, 4 or 8) with the low bytes of pattern. */
int nlk_cuda_fill(void *p, int64_t rows, int64_t cols, int64_t stride, int elt_size,
                  uint64_t pattern, void *stream);

/* RMSNorm (and add_rmsnorm) forward: rmsnorm_fwd.cu */
int nlk_cuda_rms_fwd_row(nlk_norm *k);
int nlk_cuda_rms_fwd_blockrow(nlk_norm *k);
int nlk_cuda_rms_fwd_persistent(nlk_norm *k);
int nlk_cuda_rms_fwd_staged(nlk_norm *k);
/* The widest row the staged forward holds in one CTA's shared memory (with its residual
 * for add_rmsnorm). */
int64_t nlk_cuda_staged_max_n(const nlk_norm *k);

/* RMSNorm (and add_rmsnorm) backward: rmsnorm_bwd.cu. The _ws functions give the scratch
 * each needs for the same nlk_norm (partials or temp, fp32). */
int nlk_cuda_rms_bwd_row(nlk_norm *k);
int nlk_cuda_rms_bwd_blockrow(nlk_norm *k);
int nlk_cuda_rms_bwd_partials(nlk_norm *k);
int nlk_cuda_rms_bwd_persistent(nlk_norm *k);
size_t nlk_cuda_rms_bwd_row_ws(const nlk_norm *k);
size_t nlk_cuda_rms_bwd_blockrow_ws(const nlk_norm *k);
size_t nlk_cuda_rms_bwd_partials_ws(const nlk_norm *k);
size_t nlk_cuda_rms_bwd_persistent_ws(const nlk_norm *k);

/* The widest row a warp-per-row (blockrow) kernel holds in registers for k's dtype and
 * alignment. */
int64_t nlk_cuda_blockrow_max_n(const nlk_norm *k);

#ifdef __cplusplus
}
#endif

#endif
