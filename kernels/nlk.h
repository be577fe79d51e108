/*
 * nlk.h: what a kernel launcher sees. The core validates an op's arguments, resolves the
 * variant and flattens its buffers into this plain view; kernels know nothing of the
 * registry, of buffers or of Lua. Shared by kernels/cpu (C11) and kernels/cuda (CUDA C++).
 *
 * Element types are the nl_dtype values of normlab.h (0 fp32, 1 fp16, 2 bf16, 5 fp64).
 * Strides are in elements. Pointers that an op does not use are NULL.
 */
#ifndef NLK_H
#define NLK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { NLK_F32 = 0, NLK_F16 = 1, NLK_BF16 = 2, NLK_F8E4M3 = 3, NLK_F8E5M2 = 4, NLK_F64 = 5 };
enum { NLK_NONE = -1 };
enum { NLK_CAST_LLAMA = 0, NLK_CAST_GEMMA = 1, NLK_CAST_NONE = 2 };
enum { NLK_REDUCE_TEMP = 1, NLK_REDUCE_PARTIALS = 2, NLK_REDUCE_ATOMIC = 3 };
enum { NLK_RMSNORM = 0, NLK_LAYERNORM = 1, NLK_ADD_RMSNORM = 2 };

/* Error codes of launchers: 0 ok; NLK_ERR_CUDA with the cudaError_t in nlk_norm.cuda_error. */
enum { NLK_OK = 0, NLK_ERR_CUDA = 1, NLK_ERR_NOMEM = 2, NLK_ERR_UNSUPPORTED = 3 };

typedef struct nlk_norm {
  int32_t op;             /* NLK_RMSNORM, NLK_LAYERNORM, NLK_ADD_RMSNORM */
  int32_t dt;             /* activation dtype: x, residual, dy, dres, y, residual_out, dx */
  int32_t wdt;            /* dtype of w (and dw); NLK_NONE when non-affine */
  int32_t bdt;            /* dtype of b (and db); NLK_NONE without bias */
  int64_t M, N;

  const void *x;    int64_t sx;     /* fwd: input; add_rmsnorm.bwd: the forward's residual_out */
  const void *res;  int64_t sres;   /* add_rmsnorm.fwd residual */
  const void *dy;   int64_t sdy;
  const void *dres; int64_t sdres;  /* add_rmsnorm.bwd, optional */
  void *y;          int64_t sy;
  void *res_out;    int64_t sres_out;
  void *dx;         int64_t sdx;    /* may equal dy (same stride): read a row before writing it */
  const void *w;
  const void *b;
  void *dw;
  void *db;
  float *rstd;      /* fwd: [out], optional; bwd: read */
  float *mean;      /* layernorm: as rstd */

  float eps;
  float offset;     /* added to w in fp32 */
  int32_t cast;
  int32_t reduce;   /* NLK_REDUCE_*, resolved by the core */

  void *ws;         /* scratch sized by the variant's workspace query, on the data's device */
  size_t ws_bytes;

  /* execution */
  int32_t threads;  /* CPU worker threads */
  void *stream;     /* cudaStream_t */
  int32_t sm_count;
  int32_t pdl;      /* CUDA: programmatic dependent launch of the norm kernels */
  void *sync;       /* CUDA: device words for grid barriers, zeroed once per context: word 0
                     * counts arrivals and must be left at zero, word 1 is a generation */

  /* tuning, set from the context's settings before supports/workspace/launch */
  int32_t items;          /* target 16-byte vectors per thread per row */
  int32_t block_pref;     /* persistent / partials: preferred threads per CTA */
  int32_t rows_block;     /* blockrow: threads per CTA */
  int32_t ctas_per_sm;    /* persistent grids: CTAs per SM (0: as many as fit) */
  int32_t loop_ctas;      /* the same for the looping kernels (rows wider than registers) */
  int64_t split_min_n;    /* backward 16-bit rows the looping kernel would take: from this N, a
                           * row kernel and a column kernel instead (0: only where the looping
                           * kernel's dW row outgrows shared memory) */
  int32_t fused_reduce;   /* persistent backward: reduce dW partials in-kernel after a grid barrier */
  int32_t grid_sms;       /* persistent / partials backward: SMs the grid spans (0: all) */
  int32_t cluster;        /* pipelined backward (sm_90): CTAs per cluster summing dW through
                           * distributed shared memory, one partial row per cluster */
  int64_t share_n;        /* pipelined backward (sm_90): rows of more columns are shared by a
                           * cluster of CTAs, each holding at most this many (0: never); the
                           * setting for x's dtype */
  int32_t share_max;      /* ... in clusters of at most this many CTAs, 8 where a CTA's
                           * registers need it */
  int32_t stages;         /* pipelined kernels (persistent, partials backward): rows each
                           * thread has in flight, the current one included (2..4) */
  int32_t early_weight;   /* one-row forward: load the weight with x, before the reduction */
  int32_t reload;         /* one-row rmsnorm forward: read x twice, the second time from L1 */
  int32_t cuda_error;     /* [out] cudaError_t when a launcher returns NLK_ERR_CUDA */
  int32_t grid;           /* [out] blocks (CUDA) or threads (CPU) used by the main kernel */
  int32_t block;          /* [out] threads per block */
  int32_t cluster_dim;    /* [out] CUDA: CTAs per thread-block cluster of the main kernel (1: none) */
  const volatile int *interrupt; /* CPU kernels may poll it between rows; may be NULL */
} nlk_norm;

static inline int nlk_dtype_size(int32_t dt)
{
  return dt == NLK_F64 ? 8 : dt == NLK_F32 ? 4 : (dt == NLK_F16 || dt == NLK_BF16) ? 2 : 1;
}

#ifdef __cplusplus
}
#endif

#endif
