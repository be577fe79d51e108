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

#ifdef __cplusplus
}
#endif

#endif
