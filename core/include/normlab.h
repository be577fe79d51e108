/*
 * normlab.h: the public C ABI of normlab.
 *
 * This one header drives both Lua bindings: the Lua 5.4 C module includes it, and the build
 * feeds it to LuaJIT's ffi.cdef after dropping every line that starts with '#'. So the
 * declarations stay in the subset ffi.cdef parses: no macros inside declarations, fixed-width
 * integers, explicit enum values, opaque handles, plain structs.
 *
 * Conventions: every call that can fail returns nl_status; the message of the last failure
 * lives in the context (nl_ctx_last_error). Argument order: context, inputs, outputs,
 * scalars, options. "[out]" marks what a call writes. Library code never exits, aborts or
 * longjmps. A CUDA error that poisons the device context is latched: every later call on that
 * context fails fast with the original message.
 */
#ifndef NORMLAB_H
#define NORMLAB_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum nl_status {
  NL_OK = 0,
  NL_EINVAL = 1,          /* bad argument: shape, dtype, device, option, aliasing */
  NL_ENOMEM = 2,          /* host or device allocation failed */
  NL_EUNSUPPORTED = 3,    /* a valid request this variant or backend cannot do; message says why */
  NL_ECUDA = 4,           /* CUDA runtime error; sticky ones are latched on the context */
  NL_ENODEV = 5,          /* no such device, or backend not compiled in */
  NL_EINTERRUPTED = 6,    /* nl_ctx_interrupt() stopped a long call (bench, roofline) */
  NL_EINTERNAL = 7
} nl_status;

typedef enum nl_backend {
  NL_CPU = 0,
  NL_CUDA = 1
} nl_backend;

typedef enum nl_dtype {
  NL_F32 = 0,
  NL_F16 = 1,
  NL_BF16 = 2,
  NL_F8E4M3 = 3,          /* OCP e4m3fn: no inf, max 448, NaN = S.1111.111 */
  NL_F8E5M2 = 4,          /* OCP e5m2: IEEE-like, max 57344 */
  NL_F64 = 5              /* host-side oracle precision; the CPU backend and ref only */
} nl_dtype;

/* Casting modes of RMSNorm (the HF conventions). */
typedef enum nl_cast {
  NL_CAST_LLAMA = 0,      /* x*rstd rounded to x's dtype before the weight multiply */
  NL_CAST_GEMMA = 1,      /* everything in fp32, one rounding at the end */
  NL_CAST_NONE = 2        /* each intermediate rounded to x's dtype */
} nl_cast;

/* How an fp8 y is scaled (TransformerEngine's recipes): y_fp8 = satfinite(rne(y * scale)). */
typedef enum nl_scaling {
  NL_SCALING_DELAYED = 0, /* scale given (read from its buffer; none: 1), amax of this y recorded
                           * for a later step's scale */
  NL_SCALING_CURRENT = 1  /* amax of this y first, scale = fp8 max / amax (1 when amax is 0 or not
                           * finite), then y: the op writes the scale it used */
} nl_scaling;

/* How a forward writes yt, the transposed copy of y (the weight-gradient GEMM's operand). */
typedef enum nl_transpose {
  NL_TRANSPOSE_DEFAULT = 0,  /* the variant's choice: chunked for an fp8 y of
                              * transpose.chunked_min_n to chunked_max_n columns, else fused, else
                              * external, else strided */
  NL_TRANSPOSE_STRIDED = 1,  /* the norm kernel stores yt's elements itself (uncoalesced) */
  NL_TRANSPOSE_EXTERNAL = 2, /* the norm writes y, then the op transpose's tiled kernel copies it */
  NL_TRANSPOSE_FUSED = 3,    /* the norm kernel stages tiles of y on chip and stores yt's rows */
  NL_TRANSPOSE_CHUNKED = 4   /* the norm in chunks of rows, each launch also transposing the tiles
                              * of the chunk before it, read back from L2 */
} nl_transpose;

/* How the weight (and bias) gradient is reduced over rows. */
typedef enum nl_reduce {
  NL_REDUCE_DEFAULT = 0,  /* the variant's own choice */
  NL_REDUCE_TEMP = 1,     /* M x N fp32 temp, then a column reduction (deterministic) */
  NL_REDUCE_PARTIALS = 2, /* (workers x N) fp32 partials, then a reduction (deterministic) */
  NL_REDUCE_ATOMIC = 3    /* fp32 atomics into an fp32 accumulator (order varies run to run) */
} nl_reduce;

typedef enum nl_bench_mode {
  NL_BENCH_ROTATE = 0,    /* cycle over buffer sets whose footprint is >= rotate_factor x L2 */
  NL_BENCH_FLUSH = 1,     /* one set; overwrite 2x L2 between reps, each rep timed alone */
  NL_BENCH_HOT = 2        /* one set, reused: data stays in cache when it fits */
} nl_bench_mode;

typedef struct nl_ctx nl_ctx;
typedef struct nl_buf nl_buf;

typedef struct nl_device {
  int32_t backend;        /* nl_backend */
  int32_t index;          /* CUDA ordinal; 0 for the CPU */
} nl_device;

typedef struct nl_device_info {
  nl_device device;
  char name[128];
  int32_t sm_count;       /* CUDA: multiprocessors; CPU: worker threads */
  int32_t cc_major;
  int32_t cc_minor;
  int32_t max_threads_per_sm;
  int64_t l2_bytes;       /* CUDA: L2; CPU: last-level cache */
  int64_t smem_per_block;       /* default dynamic shared-memory limit per block */
  int64_t smem_per_block_optin; /* limit after cudaFuncSetAttribute opt-in */
  int64_t smem_per_sm;
  int64_t mem_bytes;
  double mem_clock_khz;
  int32_t mem_bus_bits;
  int32_t driver_version; /* CUDA: cudaDriverGetVersion (e.g. 12040); CPU: 0 */
  int32_t runtime_version; /* CUDA: cudaRuntimeGetVersion of the runtime linked in; CPU: 0 */
} nl_device_info;

typedef struct nl_buf_desc {
  nl_device device;
  int32_t dtype;          /* nl_dtype */
  int32_t ndim;           /* 1 or 2 */
  int64_t rows;           /* 1-D buffers: 1 */
  int64_t cols;           /* 1-D buffers: the length */
  int64_t stride;         /* elements between row starts, >= cols */
  int64_t numel;          /* rows * cols */
  int64_t nbytes;         /* bytes allocated: rows * stride * element size */
} nl_buf_desc;

/* Result of nl_compare: `a` against a reference `ref` of the same shape. */
typedef struct nl_cmp {
  int64_t n;              /* elements compared */
  int64_t n_bad;          /* elements with |a - ref| > atol + rtol * |ref|, NaN mismatches included */
  int64_t n_nan;          /* positions where exactly one side is NaN, or infinities differ */
  int64_t worst;          /* flat index of the largest |a - ref| / (atol + rtol * |ref|) */
  double max_abs;         /* max |a - ref| over finite pairs */
  double max_rel;         /* max |a - ref| / |ref| over pairs with ref != 0 */
  double ulp_p50;         /* |a - ref| in units of a's dtype spacing at |ref|: percentiles */
  double ulp_p99;
  double ulp_max;
  double a_worst;         /* the values at `worst` */
  double ref_worst;
  double rms_ref;         /* sqrt(mean(ref^2)) over finite ref, for scale */
} nl_cmp;

/*
 * Arguments of every norm op and pass. Unused fields are NULL / 0. Which fields an op reads
 * and writes:
 *   rmsnorm.fwd      x, w?          -> y, rstd?
 *   layernorm.fwd    x, w?, b?      -> y, mean?, rstd?
 *   add_rmsnorm.fwd  x, residual, w? -> y, residual_out, rstd?   (h = x + residual)
 *   rmsnorm.bwd      dy, x, w?, rstd -> dx, dw (iff w)
 *   layernorm.bwd    dy, x, w?, mean, rstd -> dx, dw (iff w), db (iff b given as a flag)
 *   add_rmsnorm.bwd  dy, dres?, x (= the forward's residual_out h), w?, rstd -> dx, dw (iff w)
 *   transpose.fwd    x, scale?       -> yt, y?, amax?   (cast-transpose: yt = y transposed)
 * Activations (x, residual, dy, dres, y, residual_out, dx) share one dtype, except that a
 * forward's y (and the transpose op's y and yt) may be fp8e4m3 or fp8e5m2, scaled by `scale`;
 * w, b, dw and db are fp32 or x's dtype; rstd and mean are fp32 [M]. The forward passes may
 * also write yt, y transposed ([N, M], y's dtype). scale and amax come with an fp8 y only.
 * dx may be the same buffer as dy (in-place backward), residual_out the same as residual; no
 * other aliasing is allowed.
 */
typedef struct nl_norm_args {
  nl_buf *x;              /* [M,N] */
  nl_buf *residual;       /* [M,N] add_rmsnorm.fwd */
  nl_buf *dy;             /* [M,N] bwd */
  nl_buf *dres;           /* [M,N] add_rmsnorm.bwd: gradient arriving at residual_out, optional */
  nl_buf *w;              /* [N] weight, optional (non-affine when NULL) */
  nl_buf *b;              /* [N] bias, layernorm.fwd; in layernorm.bwd only its presence matters */
  nl_buf *rstd;           /* [M] fp32: [out] in fwd (optional), read in bwd */
  nl_buf *mean;           /* [M] fp32 layernorm: [out] in fwd (optional), read in bwd */
  nl_buf *y;              /* [out] [M,N] fwd */
  nl_buf *residual_out;   /* [out] [M,N] add_rmsnorm.fwd */
  nl_buf *dx;             /* [out] [M,N] bwd */
  nl_buf *dw;             /* [out] [N] bwd, when w is given */
  nl_buf *db;             /* [out] [N] layernorm.bwd, when b is given */
  nl_buf *yt;             /* [out] [N,M] forward passes: y transposed, y's dtype (optional, the
                           * transpose op's output) */
  nl_buf *scale;          /* fp32 [1] on x's device, fp8 y only: delayed scaling reads it (absent:
                           * 1); current scaling writes the scale it computed (optional) */
  nl_buf *amax;           /* [out] fp32 [1], fp8 y only, optional: max |y| over the whole tensor
                           * before scaling (transpose: max |x|); a NaN anywhere makes it NaN */
  double eps;             /* > 0 */
  double offset;          /* added to the weight in fp32: 1.0 for Gemma's (1 + w) */
  int32_t cast;           /* nl_cast, RMSNorm only */
  int32_t reduce;         /* nl_reduce */
  int32_t scaling;        /* nl_scaling, fp8 y only */
  int32_t transpose;      /* nl_transpose: how a norm forward writes yt (given only with yt) */
} nl_norm_args;

/* What a run did. */
typedef struct nl_run_info {
  char variant[64];       /* the concrete variant that ran (auto resolved) */
  int32_t backend;
  int32_t reduce;         /* reduction actually used; NL_REDUCE_DEFAULT for forward passes */
  int32_t deterministic;  /* 1 when results are bitwise reproducible run to run */
  int32_t grid;           /* CUDA: blocks launched by the main kernel; CPU: worker threads */
  int32_t block;          /* CUDA: threads per block; CPU: 0 */
  int32_t cluster;        /* CUDA: CTAs per thread-block cluster of the main kernel (1: none); CPU: 0 */
  int64_t bytes;          /* byte model: every input read once + every output written once */
  int64_t extra_bytes;    /* scratch traffic (temps, partials) written plus read */
  int64_t workspace_bytes;
  char kernel[128];       /* CUDA: the main kernel that ran, e.g. "fwd_one<__nv_bfloat16, 8, 2,
                           * false, true>" (a plan's row mapping and layout); CPU: "" */
  int32_t transpose;      /* how yt was written (nl_transpose), 0 when there is no yt */
  char scaling[48];       /* fp8 y: "delayed", "current: two passes" (an amax pass, then y) or
                           * "current: grid barrier" (one persistent kernel); "" otherwise */
  double waves;           /* CUDA: the main kernel's grid over the CTAs of it the GPU holds at once
                           * (SMs x the occupancy API's CTAs per SM): up to 1, one wave; CPU: 0 */
} nl_run_info;

typedef struct nl_bench_opts {
  int32_t mode;           /* nl_bench_mode */
  int32_t graph;          /* CUDA: capture each batch's launches in a CUDA graph */
  int32_t batches;        /* timed batches, >= 1 (0: 7) */
  int32_t reps;           /* launches per batch (0: enough for batch_ms) */
  double warmup_ms;       /* run the variant this long before timing (0: backend default) */
  double batch_ms;        /* target time of one batch when reps = 0 (0: backend default) */
  double rotate_factor;   /* rotate mode: footprint >= this x L2 (0: 4) */
  int64_t max_sets;       /* cap on buffer sets (0: the bench.max_sets setting) */
  int32_t share_outputs;  /* rotate mode: every set writes the same output buffers (they stay in
                           * L2, as when an allocator hands each call the block the previous
                           * one freed); only the inputs rotate */
} nl_bench_opts;

typedef struct nl_bench_result {
  nl_run_info run;
  double median_ms;       /* per call */
  double min_ms;
  double max_ms;
  double mean_ms;
  double gbps;            /* run.bytes / median */
  double extra_gbps;      /* run.extra_bytes / median */
  int32_t batches;
  int32_t reps;
  int32_t sets;
  int32_t mode;
  int64_t footprint_bytes; /* bytes of all buffer sets cycled */
  int64_t target_bytes;    /* rotate mode: the footprint aimed at, rotate_factor x L2 (CPU:
                            * LLC); above footprint_bytes where max_sets cut the sets short, so
                            * that part of the data stays in cache from call to call. 0: other
                            * modes */
} nl_bench_result;

/* Registry entry, as listed by `normlab --list`. Strings live as long as the library. */
typedef struct nl_variant_desc {
  const char *name;       /* <op>.<pass>.<strategy>, stable forever */
  const char *op;
  const char *pass;
  const char *strategy;
  int32_t backend;        /* nl_backend */
  uint32_t reduces;       /* bit (1 << nl_reduce) per supported reduction */
  int32_t default_reduce;
  const char *summary;    /* one line: the strategy */
  const char *limits;     /* one line: shapes, dtypes, alignment it accepts */
  uint32_t fp8;           /* bit (1 << nl_scaling) per scaling it offers with an fp8 y; 0: none */
  uint32_t transposes;    /* forward passes: bit (1 << nl_transpose) per way it writes yt */
} nl_variant_desc;

/* A runtime dispatch or harness setting, e.g. "rmsnorm.fwd.blockrow_max_n". */
typedef struct nl_setting_desc {
  const char *key;
  const char *doc;
  double value;           /* what launches on the device described take: nl_set's value,
                           * else def */
  double def;             /* the default on the device described (nl_setting_describe: the
                           * context's default device) */
  double builtin;         /* normlab's default, before any GPU model's table */
  double min;
  double max;
  int32_t integer;        /* 1 when only integers are accepted */
  const char *origin;     /* where def comes from: "normlab", or the GPU model whose table
                           * (nl_model_default_describe) set it on this device */
  int32_t user;           /* 1 when nl_set gave the value (launches take it on every device),
                           * 0 when launches take def (never set, or nl_reset since) */
} nl_setting_desc;

/* A setting's default on one GPU model: launches on a CUDA GPU whose name contains `model`
 * take it, unless the setting was given with nl_set. */
typedef struct nl_model_default {
  const char *model;
  const char *key;
  double value;
} nl_model_default;

/* Library */
const char *nl_version(void);
const char *nl_status_name(nl_status status);
int32_t nl_cuda_compiled(void);
/* What identifies this build of the kernels: a SHA-256 (hex) CMake computes over kernels/,
 * the registry lines (core/variants_*.c) and the build configuration (type, CUDA
 * architectures, -march=native, compilers). Tuning results are valid for one build id. */
const char *nl_build_id(void);

/* Context: default device, dispatch settings, seed counter, error state, scratch. */
nl_status nl_ctx_new(nl_device device, nl_ctx **out);
void nl_ctx_free(nl_ctx *ctx);
const char *nl_ctx_last_error(const nl_ctx *ctx);
nl_status nl_ctx_sticky(const nl_ctx *ctx);
void nl_ctx_clear_error(nl_ctx *ctx);
void nl_ctx_interrupt(nl_ctx *ctx);
nl_device nl_ctx_device(const nl_ctx *ctx);
nl_status nl_ctx_set_device(nl_ctx *ctx, nl_device device);
uint64_t nl_ctx_next_seed(nl_ctx *ctx);
void nl_ctx_set_seed(nl_ctx *ctx, uint64_t seed);
nl_status nl_ctx_sync(nl_ctx *ctx, nl_device device);

/* Devices */
int32_t nl_device_count(int32_t backend);
nl_status nl_device_query(nl_ctx *ctx, nl_device device, nl_device_info *info);

/* Settings */
int32_t nl_setting_count(void);
nl_status nl_setting_describe(const nl_ctx *ctx, int32_t index, nl_setting_desc *out);
nl_status nl_setting_describe_on(nl_ctx *ctx, nl_device device, int32_t index,
                                 nl_setting_desc *out);
nl_status nl_set(nl_ctx *ctx, const char *key, double value);
nl_status nl_get(nl_ctx *ctx, const char *key, double *value);
/* Back to "not set": launches take the default of the GPU they run on again. key NULL: every
 * setting. Restoring what nl_get read with nl_set is not the same: that marks it set, so a
 * GPU model's own default is lost. */
nl_status nl_reset(nl_ctx *ctx, const char *key);
int32_t nl_model_default_count(void);
nl_status nl_model_default_describe(int32_t index, nl_model_default *out);

/* Buffers. shape has ndim (1 or 2) entries; stride 0 means dense (= cols). */
nl_status nl_buf_new(nl_ctx *ctx, nl_device device, int32_t dtype, int32_t ndim,
                     const int64_t *shape, int64_t stride, nl_buf **out);
void nl_buf_free(nl_buf *buf);
nl_status nl_buf_describe(const nl_buf *buf, nl_buf_desc *out);
nl_status nl_buf_fill(nl_ctx *ctx, nl_buf *buf, double value);
nl_status nl_buf_randn(nl_ctx *ctx, nl_buf *buf, uint64_t seed, double mean, double std);
nl_status nl_buf_uniform(nl_ctx *ctx, nl_buf *buf, uint64_t seed, double lo, double hi);
nl_status nl_buf_copy(nl_ctx *ctx, const nl_buf *src, nl_buf *dst);
nl_status nl_buf_write_f64(nl_ctx *ctx, nl_buf *dst, int64_t offset, int64_t count,
                           const double *src);
nl_status nl_buf_read_f64(nl_ctx *ctx, const nl_buf *src, int64_t offset, int64_t count,
                          double *dst);
nl_status nl_buf_upload(nl_ctx *ctx, nl_buf *dst, const void *src, int64_t nbytes);
nl_status nl_buf_download(nl_ctx *ctx, const nl_buf *src, void *dst, int64_t nbytes);

/* Host-side dtype conversion, round to nearest even; fp8 saturates to its max finite value.
 * NaNs converted to fp64 come out as the one canonical quiet NaN. */
nl_status nl_convert(int32_t src_dtype, const void *src, int32_t dst_dtype, void *dst, int64_t n);
int32_t nl_dtype_size(int32_t dtype);
const char *nl_dtype_name(int32_t dtype);
int32_t nl_dtype_parse(const char *name);
/* The names of NL_REDUCE_*, NL_SCALING_* and NL_TRANSPOSE_* values as users write them
 * ("partials", "current", "chunked"); NULL for a value out of range. */
const char *nl_reduce_name(int32_t reduce);
const char *nl_scaling_name(int32_t scaling);
const char *nl_transpose_name(int32_t way);

nl_status nl_compare(nl_ctx *ctx, const nl_buf *a, const nl_buf *ref, double atol, double rtol,
                     nl_cmp *out);

/* Registry and dispatch */
int32_t nl_variant_count(void);
nl_status nl_variant_describe(int32_t index, nl_variant_desc *out);
nl_status nl_supports(nl_ctx *ctx, const char *variant, const nl_norm_args *args);
nl_status nl_resolve(nl_ctx *ctx, const char *variant, const nl_norm_args *args,
                     char *name, int64_t cap);
nl_status nl_run(nl_ctx *ctx, const char *variant, const nl_norm_args *args, nl_run_info *info);

/* Measuring */
nl_status nl_bench(nl_ctx *ctx, const char *variant, const nl_norm_args *proto,
                   const nl_bench_opts *opts, nl_bench_result *out);
nl_status nl_roofline(nl_ctx *ctx, nl_device device, double *copy_gbps);

#ifdef __cplusplus
}
#endif

#endif
