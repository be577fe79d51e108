/*
 * nlk_cuda.h: the CUDA kernels as the core sees them, in C: the strategy tables of the norm
 * families (the registry's CUDA lines name their entries) and a few runtime helpers. Each
 * launcher returns NLK_OK or an NLK_ERR_* code, with the cudaError_t in k->cuda_error for
 * NLK_ERR_CUDA.
 */
#ifndef NL_NLK_CUDA_H
#define NL_NLK_CUDA_H

#include "nlk.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const nlk_strategy nlk_cuda_fwd[];  /* norm_fwd.cu */
extern const nlk_strategy nlk_cuda_bwd[];  /* norm_bwd.cu */
extern const nlk_strategy nlk_cuda_transpose[];  /* transpose.cu: the transpose op */

/* Fills rows x cols elements of elt_size bytes (1, 2, 4 or 8) with the low bytes of pattern;
 * returns a cudaError_t. */
int nlk_cuda_fill(void *p, int64_t rows, int64_t cols, int64_t stride, int elt_size,
                  uint64_t pattern, void *stream);

/* The readable name of a kernel (its host stub), e.g. "fwd_one<__nv_bfloat16, 8, 2, false,
 * true>", into buf; "" when the runtime cannot name it. */
void nlk_cuda_kernel_name(const void *kernel, char *buf, size_t cap);

/* The elements of x a pack of the kernels holds for k's rows: 16 bytes' worth, or 1 where N,
 * a stride or a pointer rules that out (rows of single elements). */
int nlk_cuda_pack_elems(const nlk_norm *k);

#ifdef __cplusplus
}
#endif

#endif
