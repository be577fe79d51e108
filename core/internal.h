/*
 * internal.h: what the core's files share and nothing outside core/ may include.
 */
#ifndef NL_INTERNAL_H
#define NL_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "normlab.h"
#include "nlk.h"

enum { NL_MAX_CUDA = 16 };

/* The settings' values for one launch: nl_set's values, else the defaults of the launch's
 * GPU model (settings.c's table says which setting lands in which field). */
typedef struct nl_knobs {
  struct {
    int32_t threads;
    int64_t persistent_min_m;
  } cpu;
  struct {
    double warmup_ms, batch_ms, rotate_factor;
    int32_t batches;
    int64_t max_sets;
  } bench;
  int32_t pdl;
  /* the CUDA auto resolvers' thresholds */
  struct {
    int64_t blockrow_max_n, blockrow_min_m, blockrow_max_m, row_min_n, many_row_min_n, narrow_min_m;
    int64_t staged_min_n, persistent_max_m, persistent_min_n;
  } rms_fwd;
  /* LayerNorm's twins of rms_fwd's, where its best value differs */
  struct {
    int64_t row_min_n, narrow_min_m, persistent_max_m;
    double staged_min_waves;
    int32_t items;          /* the kernels' rmsnorm.fwd.items for LayerNorm, from
                             * rmsnorm.fwd.blockrow_min_m rows */
    int32_t blockrow_items; /* the kernels' rmsnorm.fwd.blockrow_items for LayerNorm, below
                             * rmsnorm.fwd.blockrow_group_min_m rows */
  } ln_fwd;
  /* add_rmsnorm's */
  struct {
    int64_t blockrow_max_n, narrow_min_m;
    double staged_max_waves;
    int32_t fp8_max_threads; /* the kernels' rmsnorm.fwd.fp8_max_threads for add_rmsnorm */
  } add_fwd;
  struct {
    int64_t blockrow_max_n, blockrow_max_m, narrow_max_n, narrow_max_m, partials_min_m, row_max_n;
    int64_t persistent_min_m, fp32_partials_max_n;
  } rms_bwd;
  /* LayerNorm's twins of rms_bwd's, where its best value differs */
  struct {
    int64_t blockrow_max_n, narrow_max_n, narrow_max_m, row_max_n;
    int64_t partials_max_n; /* LayerNorm only: partials up to this many columns, narrow_max_m rows */
    int64_t share_n;     /* the kernels' rmsnorm.bwd.share_n for LayerNorm */
    int64_t w32_share_n; /* and that with fp32 weights */
    int32_t items;       /* and their rmsnorm.bwd.items */
  } ln_bwd;
  /* add_rmsnorm's */
  struct {
    int64_t blockrow_max_n, narrow_max_n;
    int32_t whole_warps; /* the kernels' rmsnorm.bwd.whole_warps for add_rmsnorm */
  } add_bwd;
  /* the kernels' tuning, copied into nlk_norm */
  nlk_fwd_tune fwd;
  nlk_bwd_tune bwd;
  nlk_transpose_tune tr;
  /* the default way of an fp8 y's transposed copy (plan_transpose): chunked from chunked_min_n
   * to the op's chunked_max_n columns where the strategy takes it */
  struct {
    int64_t chunked_min_n, chunked_max_n, ln_chunked_max_n, add_chunked_max_n;
  } tr_way;
} nl_knobs;

/* build_id.c, generated: SHA-256 over kernels/, the registry lines and the build configuration */
extern const char nl__build_id[];

enum { NL_SETTINGS_MAX = 128 };

/* Scratch memory of one device, grown on demand and kept for the context's lifetime. */
typedef struct nl_ws {
  void *p;
  size_t bytes;
} nl_ws;

struct nl_cuda_state;  /* cuda.c: stream, events, flush buffer of one device */

struct nl_ctx {
  int refs;                       /* the owner plus one per live buffer */
  nl_device device;               /* default device */
  nl_status sticky;               /* latched fatal CUDA error, NL_OK otherwise */
  char err[1024];
  double settings[NL_SETTINGS_MAX];              /* values given with nl_set */
  unsigned char settings_user[NL_SETTINGS_MAX];  /* which settings nl_set gave; the others
                                                  * take the defaults of the GPU in use */
  const char *device_gpu;         /* the default device's GPU name, "" for the CPU */
  uint64_t seed;
  volatile int interrupt;         /* set from signal handlers; cleared at the start of long calls */
  nl_ws ws_cpu;
  nl_ws ws_cuda[NL_MAX_CUDA];
  struct nl_cuda_state *cuda[NL_MAX_CUDA];
  /* Each GPU's properties, queried once (every CUDA plan reads them). */
  nl_device_info cuda_info[NL_MAX_CUDA];
  unsigned char cuda_info_ok[NL_MAX_CUDA];
  double roofline_cpu;
  double roofline_cuda[NL_MAX_CUDA];
};

struct nl_buf {
  nl_ctx *ctx;
  nl_device device;
  int32_t dtype;
  int32_t ndim;
  int64_t rows, cols, stride;
  size_t nbytes;
  void *data;
};

/* errors.c / context.c */
nl_status nl__err(nl_ctx *ctx, nl_status st, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 3, 4)))
#endif
  ;
nl_status nl__enter(nl_ctx *ctx);     /* NL_OK, or the latched sticky error (message kept) */
void nl__ctx_release(nl_ctx *ctx);
int nl__threads(const nl_ctx *ctx);
const char *nl__device_name(nl_device d, char *buf, size_t cap);
nl_status nl__check_device(nl_ctx *ctx, nl_device d);
int nl__same_device(nl_device a, nl_device b);
void *nl__ws(nl_ctx *ctx, nl_device d, size_t bytes, nl_status *st);
double nl__now_ms(void);

/* settings.c: the knobs of a launch on the GPU named gpu ("": the CPU), and that name for
 * a device (the context keeps it). */
void nl__knobs(const nl_ctx *ctx, const char *gpu, nl_knobs *out);
nl_status nl__gpu_name(nl_ctx *ctx, nl_device d, const char **name);

/* buffer.c */
size_t nl__buf_row_bytes(const nl_buf *b);
nl_status nl__buf_clone(nl_ctx *ctx, const nl_buf *src, nl_buf **out); /* same layout and contents */

/* registry.c: the buffer fields of nl_norm_args (x, residual, dy, dres, w, b, rstd, mean, y,
 * residual_out, dx, dw, db, yt, scale, amax, in that order) for code that walks all of them. */
enum { NL_ARG_COUNT = 16 };
extern const size_t nl__arg_offsets[NL_ARG_COUNT];

static inline nl_buf *nl__arg(const nl_norm_args *a, int f)
{
  return *(nl_buf *const *)((const char *)a + nl__arg_offsets[f]);
}

static inline nl_buf **nl__arg_slot(nl_norm_args *a, int f)
{
  return (nl_buf **)((char *)a + nl__arg_offsets[f]);
}

/* registry.c: a validated, resolved run */
typedef struct nl_variant nl_variant;
typedef struct nl_plan {
  const nl_variant *v;
  const nlk_strategy *ks;   /* v's kernels */
  nl_device device;
  nl_knobs kn;              /* the settings this launch takes */
  nlk_norm k;
  int64_t bytes;
  int32_t deterministic;
  int32_t transpose;        /* nl_transpose that writes yt (0: no yt) */
  int32_t amax_given;       /* the caller's amax buffer (else current scaling's is scratch) */
  /* NL_TRANSPOSE_EXTERNAL: the backend's tiled transpose of y into yt, launched after v */
  const nlk_strategy *ext;
  nlk_norm ext_k;
} nl_plan;
nl_status nl__plan(nl_ctx *ctx, const char *variant, const nl_norm_args *args, nl_plan *plan);
nl_status nl__plan_workspace(nl_ctx *ctx, nl_plan *plan);
/* Points the plan at workspace ws, allocated for a plan of the same variant and arguments
 * (bench's buffer sets share one). */
void nl__plan_use_workspace(nl_plan *plan, void *ws);
/* Whether the op writes buffer field f of a (its outputs; a forward's statistics; the scale
 * under current scaling). */
int nl__arg_written(const nl_norm_args *a, int f);
nl_status nl__launch(nl_ctx *ctx, nl_plan *plan);
void nl__plan_info(const nl_plan *plan, nl_run_info *info);

/* cuda.c: the CUDA runtime behind a C interface; every function returns NL_ENODEV when
 * normlab was built without CUDA. */
int nl__cuda_count(void);
nl_status nl__cuda_query(nl_ctx *ctx, int dev, nl_device_info *info);
nl_status nl__cuda_check(nl_ctx *ctx, int err, const char *what);
nl_status nl__cuda_alloc(nl_ctx *ctx, int dev, size_t bytes, void **out);
void nl__cuda_free(nl_ctx *ctx, int dev, void *p);
nl_status nl__cuda_copy2d(nl_ctx *ctx, int dev, void *dst, size_t dpitch, const void *src,
                          size_t spitch, size_t width, size_t height);
nl_status nl__cuda_fill(nl_ctx *ctx, int dev, void *p, int64_t rows, int64_t cols, int64_t stride,
                        int elt_size, uint64_t pattern);
nl_status nl__cuda_sync(nl_ctx *ctx, int dev);
void *nl__cuda_stream(nl_ctx *ctx, int dev, nl_status *st);
void nl__cuda_release(nl_ctx *ctx);
void *nl__cuda_sync_words(nl_ctx *ctx, int dev, nl_status *st);
void nl__cuda_kernel_name(const void *kernel, char *buf, size_t cap); /* "" without CUDA */
/* Timing of a batch of launches on one device's stream. */
nl_status nl__cuda_timer_start(nl_ctx *ctx, int dev);
nl_status nl__cuda_timer_stop(nl_ctx *ctx, int dev, double *ms);
nl_status nl__cuda_flush_l2(nl_ctx *ctx, int dev);
nl_status nl__cuda_graph_begin(nl_ctx *ctx, int dev);
nl_status nl__cuda_graph_end(nl_ctx *ctx, int dev);   /* instantiates the captured graph */
nl_status nl__cuda_graph_launch(nl_ctx *ctx, int dev);
void nl__cuda_graph_drop(nl_ctx *ctx, int dev);
nl_status nl__cuda_copy_bw(nl_ctx *ctx, int dev, double *gbps);

#endif
