/*
 * variants_cuda.c: the CUDA entries of the registry (empty when built without CUDA).
 */
#include "registry.h"

#ifdef NL_HAVE_CUDA
#include "cuda/cuda_kernels.h"
#endif

/* C has no empty arrays: the table ends with an unused sentinel that the count excludes. */
const nl_variant nl__cuda_variants[] = {
  {NULL, 0, 0, NL_CUDA, NULL, NULL, NULL, 0, 0, 0, NULL, NULL, NULL, NULL},
};

const int nl__cuda_variant_count = (int)(sizeof nl__cuda_variants / sizeof nl__cuda_variants[0]) - 1;
