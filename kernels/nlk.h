/*
 * nlk.h: what a kernel launcher sees. The core validates an op's arguments, resolves the
 * variant and flattens its buffers into this plain view; kernels know nothing of the
 * registry, of buffers or of Lua. Shared by kernels/cpu (C11) and kernels/cuda (CUDA C++).
 *
 * Element types are the nl_dtype values of normlab.h (0 fp32, 1 fp16, 2 bf16, 3 fp8e4m3,
 * 4 fp8e5m2, 5 fp64). Strides are in elements. Pointers that an op does not use are NULL.
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
enum { NLK_RMSNORM = 0, NLK_LAYERNORM = 1, NLK_ADD_RMSNORM = 2, NLK_TRANSPOSE = 3 };
enum { NLK_SCALING_DELAYED = 0, NLK_SCALING_CURRENT = 1 };
/* How a kernel writes yt (nl_transpose). A norm kernel sees STRIDED, FUSED or CHUNKED, or NONE
 * with yt NULL: EXTERNAL is the core's (the norm, then the transpose op's tiled kernel). */
enum { NLK_TRANSPOSE_NONE = 0, NLK_TRANSPOSE_STRIDED = 1, NLK_TRANSPOSE_EXTERNAL = 2,
       NLK_TRANSPOSE_FUSED = 3, NLK_TRANSPOSE_CHUNKED = 4 };
enum { NLK_FWD = 0, NLK_BWD = 1 };

/* Error codes of launchers: 0 ok; NLK_ERR_CUDA with the cudaError_t in nlk_norm.cuda_error. */
enum { NLK_OK = 0, NLK_ERR_CUDA = 1, NLK_ERR_NOMEM = 2, NLK_ERR_UNSUPPORTED = 3 };

/* The tuning of the CUDA forward strategies: where the rmsnorm.fwd.* settings land (the
 * table in core/settings.c names the field of each). */
typedef struct nlk_fwd_tune {
  int32_t items;              /* target 16-byte packs per thread per row; 0: looping kernel */
  int32_t fp8_items;          /* the same, at least, with an fp8 y */
  int32_t fp8_max_threads;    /* an fp8 y, a CTA per row: more packs until the CTA is this small (0: off) */
  int32_t fp8_many_max_threads; /* that size from fp8_many_min_m rows */
  int32_t block;              /* persistent: preferred threads per CTA */
  int32_t blockrow_block;     /* blockrow: threads per CTA */
  int32_t blockrow_items;     /* blockrow: target packs per thread (below blockrow_group_min_m) */
  int32_t blockrow_group;     /* blockrow: threads per row from blockrow_group_min_m rows (0: off) */
  int32_t ctas_per_sm;        /* persistent grid (0: as many as fit) */
  int32_t loop_ctas_per_sm;   /* looping kernel's grid (0: as many as fit) */
  int32_t stages;             /* persistent: rows in flight per thread, the current one included */
  int32_t staged_items;       /* staged: packs per thread */
  int32_t skew_items;         /* row, rows of 16-bit elements cut at x's 16-byte boundaries: packs per thread */
  int32_t slab_rows;          /* slab: rows per cluster block */
  int32_t slab_cols;          /* slab: widest slab of columns per CTA before a larger cluster */
  int32_t slab_block;         /* slab: threads per CTA */
  int32_t fixed_lanes_max;    /* one-row kernels: groups up to this many threads compiled in (0: never) */
  int32_t one_wave_doublings; /* row: packs doubled up to this many times to fit M CTAs in one wave */
  int32_t one_wave_min_block; /* row, blockrow: those doublings stop before CTAs of fewer threads */
  int32_t blockrow_wave_doublings; /* blockrow: the same doublings, to fit its M / rows-a-CTA CTAs in one wave */
  int32_t blockrow_wave_min_group; /* blockrow: those doublings stop before rows of fewer threads */
  int64_t early_weight_max_n; /* one-row kernels: the weight loaded with x up to this N */
  int64_t reload_min_n;       /* one-row kernels: x read twice from this N (0: never) */
  int64_t reload_min_m;       /* ... and from this M */
  int64_t skew_wide_n;        /* the same cut rows: 8 packs per thread from this N (0: never) */
  int64_t blockrow_group_min_m; /* blockrow: blockrow_group from this many rows */
  int64_t fp8_many_min_m;     /* an fp8 y: fp8_many_max_threads from this many rows */
} nlk_fwd_tune;

/* The tuning of the CUDA backward strategies (rmsnorm.bwd.*). */
typedef struct nlk_bwd_tune {
  int32_t items;              /* target 16-byte packs per thread per row */
  int32_t held_items;         /* persistent, partials: single 16-bit elements per thread */
  int32_t block;              /* persistent, partials: preferred threads per CTA */
  int32_t blockrow_block;     /* blockrow: threads per CTA */
  int32_t ctas_per_sm;        /* persistent grid (0: as many as fit) */
  int32_t loop_ctas_per_sm;   /* persistent's looping kernel's grid (0: as many as fit) */
  int32_t stages;             /* pipelined kernels: rows in flight per thread */
  int32_t fused_reduce;       /* persistent: dW reduced after a grid barrier in the same kernel */
  int32_t cluster;            /* CTAs per cluster summing dW in distributed shared memory */
  int32_t share_max;          /* most CTAs a cluster shares a row among */
  int32_t grid_sms;           /* SMs the persistent and partials grids span (0: all) */
  int32_t reduce_pdl;         /* dW reduce kernel launched with programmatic dependent launch */
  int32_t whole_warps;        /* pipelined kernel: rows of a thread count not a power of two take
                               * a CTA of whole warps sized to them */
  int32_t scalar_lead;        /* pipelined kernel: a row's rstd (mean) staged by one lane a warp
                               * (1), by every lane (0), or by one lane in shared rows only (2) */
  int32_t float_weights;      /* pipelined kernel, 16-bit x at 1-2 packs a thread: the weights
                               * held as fp32 for the whole kernel (1; 2: fp32 weights only) or
                               * as packs of x's dtype converted twice a row (0) */
  int64_t split_min_n;        /* 16-bit rows too wide for registers: split from this N */
  int64_t share_n;            /* 16-bit rows wider than this are shared by a cluster (0: never) */
  int64_t fp32_share_n;       /* the same for fp32 rows */
} nlk_bwd_tune;

/* The tiled transposes' tile (transpose.tile_m, transpose.tile_n): rows and columns of x one
 * tile covers, powers of two. */
typedef struct nlk_transpose_tune {
  int32_t tile_m;
  int32_t tile_n;
  int32_t keep_max_mb; /* external: a y of up to this many MB is left in L2 for the transpose */
  int32_t chunk_kb;    /* chunked: the KB of y per chunk of rows */
  int32_t chunk_tile_div; /* chunked: tiles at least N / this columns wide (0: tile_n) */
} nlk_transpose_tune;

typedef struct nlk_norm {
  int32_t op;             /* NLK_RMSNORM, NLK_LAYERNORM, NLK_ADD_RMSNORM, NLK_TRANSPOSE */
  int32_t dt;             /* activation dtype: x, residual, dy, dres, y, residual_out, dx */
  int32_t ydt;            /* dtype of y and yt: dt, or (forward, transpose) NLK_F8E4M3 / E5M2 */
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

  /* The fp8 output and the transposed copy (forward passes and the transpose op). An fp8 y
   * element is satfinite(rne(v * scale)) of its fp32 value v (ref: v rounded once from fp64
   * to fp32), so a kernel converts an fp32 product, as PTX's cvt.rn.satfinite does. */
  void *yt;         int64_t syt;    /* [out] [N, M], yt[j][i] = y[i][j] (ydt), optional; the
                                     * transpose op's output */
  float *scale;     /* fp8 y: delayed: read (NULL: 1); current: [out] (NULL: not wanted) */
  float *amax;      /* [out] fp8 y: max |y| before scaling over the whole tensor (transpose: max
                     * |x|), reduced as the bits of |v| (unsigned max: NaN above inf, so a NaN
                     * propagates; any order gives the same bits). Under current scaling never
                     * NULL (the core gives scratch when the caller wants no amax); kernels
                     * clear it themselves before reducing into it. */
  int32_t scaling;  /* NLK_SCALING_*, fp8 y only */
  int32_t transpose; /* NLK_TRANSPOSE_STRIDED, _FUSED or _CHUNKED when yt is set, else NONE */
  int32_t keep_y;   /* forward, fp8 y: stored for L2 to keep, the external transpose reading it
                     * next; transpose: x was, and this is its last read */
  nlk_transpose_tune tr;

  float eps;
  float offset;     /* added to w in fp32 */
  int32_t cast;
  int32_t reduce;   /* NLK_REDUCE_*, resolved by the core */

  void *ws;         /* scratch sized by the strategy's workspace query, on the data's device */
  size_t ws_bytes;

  /* execution */
  int32_t threads;  /* CPU worker threads */
  void *stream;     /* cudaStream_t */
  int32_t device;   /* CUDA ordinal: launchers key their per-device caches by it */
  int32_t sm_count;
  int64_t smem_optin; /* CUDA: dynamic shared memory one CTA may opt in to */
  void *sync;       /* CUDA: device words for grid barriers, zeroed once per context: word 0
                     * counts arrivals and must be left at zero, word 1 is a generation */
  int32_t pdl;      /* CUDA: programmatic dependent launch of the norm kernels (cuda.pdl) */
  nlk_fwd_tune fwd;
  nlk_bwd_tune bwd;

  int32_t cuda_error;     /* [out] cudaError_t when a launcher returns NLK_ERR_CUDA */
  int32_t grid;           /* [out] blocks (CUDA) or threads (CPU) used by the main kernel */
  int32_t block;          /* [out] threads per block */
  int32_t cluster_dim;    /* [out] CUDA: CTAs per thread-block cluster of the main kernel (1: none) */
  int32_t resident;       /* [out] CUDA: CTAs of the main kernel one SM holds at once (the occupancy
                           * API's count at its block and shared memory); 0: not known */
  int32_t current_passes; /* [out] current scaling: 2 (an amax pass, then y) or 1 (one kernel with a
                           * grid barrier) */
  int64_t extra_bytes;    /* [out] traffic beyond the byte model and the workspace, e.g. current
                           * scaling's second read of the input */
  const void *kernel;     /* [out] CUDA: the main kernel launched (its host stub) */
  const volatile int *interrupt; /* CPU kernels may poll it between rows; may be NULL */
} nlk_norm;

/* A strategy as its kernel file exports it. Each kernel file has one table of these, ended
 * by an entry whose name is NULL; a registry line (core/variants_*.c) names a strategy and
 * the core finds it there, so adding one touches the kernel file and that line. */
typedef struct nlk_strategy {
  const char *name;       /* the <strategy> of "<op>.<pass>.<strategy>" */
  int32_t pass;           /* NLK_FWD or NLK_BWD */
  int (*launch)(nlk_norm *k);
  size_t (*workspace)(const nlk_norm *k);   /* scratch bytes; NULL: none */
  /* Shapes beyond what the core validates: NLK_OK, or NLK_ERR_UNSUPPORTED with the reason
   * written to why. NULL: every validated argument set. */
  int (*supports)(const nlk_norm *k, char *why, size_t cap);
  /* The waves of resident CTAs its launch for k would take, as run info's waves, without
   * launching (0: it plans none). NULL: not counted (the resolvers that compare waves ask
   * only the CUDA forward's strategies). */
  double (*waves)(const nlk_norm *k);
} nlk_strategy;

static inline int nlk_dtype_size(int32_t dt)
{
  return dt == NLK_F64 ? 8 : dt == NLK_F32 ? 4 : (dt == NLK_F16 || dt == NLK_BF16) ? 2 : 1;
}

static inline const char *nlk_dtype_name(int32_t dt)
{
  static const char *const names[] = {"fp32", "fp16", "bf16", "fp8e4m3", "fp8e5m2", "fp64"};
  return dt >= 0 && dt <= NLK_F64 ? names[dt] : "?";
}

static inline int nlk_is_fp8(int32_t dt) { return dt == NLK_F8E4M3 || dt == NLK_F8E5M2; }

/* The waves of CTAs a grid takes on sm_count SMs that hold `resident` of its CTAs each: run
 * info's waves, and what the CUDA forward's plans report to the resolvers (0: not known). */
static inline double nlk_waves(int64_t grid, int32_t sm_count, int32_t resident)
{
  return resident > 0 && sm_count > 0 ? (double)grid / ((double)sm_count * resident) : 0;
}

/* The largest finite value of an fp8 dtype. */
static inline float nlk_fp8_max(int32_t dt) { return dt == NLK_F8E4M3 ? 448.0f : 57344.0f; }

#ifdef __cplusplus
}
#endif

#endif
