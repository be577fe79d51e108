/*
 * settings.c: runtime settings on the context. Every dispatch threshold and harness default
 * lives here as data, so experiments can sweep them (nl.set("rmsnorm.fwd.blockrow_max_n", 512)).
 * The `auto` resolvers and tuning hooks of the variant tables read these and nothing else.
 * The rmsnorm.* settings also drive add_rmsnorm, which shares its kernels.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

typedef struct nl_setting_def {
  const char *key;
  double def, min, max;
  int integer;
  const char *doc;
} nl_setting_def;

static const nl_setting_def defs[NL_SET_COUNT] = {
  [NL_SET_CPU_THREADS] = {"cpu.threads", 0, 0, 4096, 1,
    "CPU worker threads for kernels and harness (0: one per core)"},
  [NL_SET_CPU_PERSISTENT_MIN_M] = {"cpu.persistent_min_m", 16, 1, 1e12, 1,
    "CPU auto (forward and backward): persistent from this many rows, row below"},
  [NL_SET_BENCH_WARMUP_MS] = {"bench.warmup_ms", 0, 0, 60000, 0,
    "warm-up before timing (0: 300 ms on CUDA, enough to settle clocks; 50 ms on the CPU)"},
  [NL_SET_BENCH_BATCH_MS] = {"bench.batch_ms", 0, 0, 60000, 0,
    "target time of one timed batch when reps are automatic (0: 20 ms CUDA, 30 ms CPU)"},
  [NL_SET_BENCH_BATCHES] = {"bench.batches", 7, 1, 1000, 1,
    "timed batches; the median is reported"},
  [NL_SET_BENCH_ROTATE_FACTOR] = {"bench.rotate_factor", 4, 0, 64, 0,
    "rotate mode: the buffer sets cycled cover at least this many times the L2 (CPU: LLC)"},
  [NL_SET_CUDA_PDL] = {"cuda.pdl", 0, 0, 1, 1,
    "CUDA norm kernels: 1 launches them with programmatic dependent launch (sm_90), so each may start while the kernel before it in the stream drains, and waits for it before touching memory (the anchors do not)"},
  [NL_SET_RMS_FWD_BLOCKROW_MAX_N] = {"rmsnorm.fwd.blockrow_max_n", 1024, 0, 1 << 24, 1,
    "CUDA auto forward: blockrow (a warp or less per row) for N up to this and M up to blockrow_max_m (0: never)"},
  [NL_SET_RMS_FWD_BLOCKROW_MAX_M] = {"rmsnorm.fwd.blockrow_max_m", 4096, 1, 1e12, 1,
    "CUDA auto forward: blockrow for M up to this (and N up to blockrow_max_n); row above"},
  [NL_SET_RMS_FWD_BLOCKROW_BLOCK] = {"rmsnorm.fwd.blockrow_block", 256, 32, 1024, 1,
    "CUDA blockrow forward: threads per CTA, rounded up to a power of two and capped by the kernel's register budget (rows per CTA = this / threads per row)"},
  [NL_SET_RMS_FWD_PERSISTENT_MIN_M] = {"rmsnorm.fwd.persistent_min_m", 1e12, 1, 1e12, 1,
    "CUDA auto forward above blockrow_max_n: persistent from this many rows and persistent_min_n columns, row otherwise"},
  [NL_SET_RMS_FWD_PERSISTENT_MIN_N] = {"rmsnorm.fwd.persistent_min_n", 4096, 1, 1 << 24, 1,
    "CUDA auto forward: persistent from this many columns (and persistent_min_m rows)"},
  [NL_SET_RMS_FWD_ITEMS] = {"rmsnorm.fwd.items", 2, 0, 8, 1,
    "CUDA forward: target 16-byte packs per thread per row (1, 2, 4, 8); fewer threads per row as it grows; 0: row and persistent run the two-pass looping kernel"},
  [NL_SET_RMS_FWD_BLOCK] = {"rmsnorm.fwd.block", 1024, 32, 1024, 1,
    "CUDA persistent forward: preferred threads per CTA (rows per CTA = block / threads per row)"},
  [NL_SET_RMS_FWD_CTAS_PER_SM] = {"rmsnorm.fwd.ctas_per_sm", 0, 0, 64, 1,
    "CUDA persistent forward: CTAs per SM (0: as many as fit)"},
  [NL_SET_RMS_FWD_LOOP_CTAS_PER_SM] = {"rmsnorm.fwd.loop_ctas_per_sm", 0, 0, 64, 1,
    "CUDA forward looping kernel (rows wider than any register layout, or items = 0): CTAs per SM (0: as many as fit)"},
  [NL_SET_RMS_FWD_STAGES] = {"rmsnorm.fwd.stages", 3, 2, 4, 1,
    "CUDA persistent forward: rows each thread has in flight through cp.async, the current one included"},
  [NL_SET_RMS_FWD_EARLY_WEIGHT_MAX_N] = {"rmsnorm.fwd.early_weight_max_n", 4096, 0, 1 << 24, 1,
    "CUDA row and blockrow rmsnorm forward: for N up to this the weight is loaded with x and held in registers across the reduction; wider rows (and add_rmsnorm) read it after the reduction, from L1 (0: never early)"},
  [NL_SET_RMS_FWD_RELOAD_MIN_N] = {"rmsnorm.fwd.reload_min_n", 4096, 0, 1 << 24, 1,
    "CUDA row and blockrow rmsnorm forward: from this many columns x is read twice, the second time from L1, instead of held in registers across the reduction (0: never; takes precedence over early_weight_max_n)"},
  [NL_SET_RMS_FWD_STAGED_ITEMS] = {"rmsnorm.fwd.staged_items", 4, 1, 64, 1,
    "CUDA staged forward: 16-byte packs per thread (threads per CTA = the row's packs / this, 32 to 1024)"},
  [NL_SET_RMS_BWD_BLOCKROW_MAX_N] = {"rmsnorm.bwd.blockrow_max_n", 0, 0, 1 << 24, 1,
    "CUDA auto backward: blockrow for N up to this (0: never)"},
  [NL_SET_RMS_BWD_BLOCKROW_BLOCK] = {"rmsnorm.bwd.blockrow_block", 256, 32, 1024, 1,
    "CUDA blockrow backward: threads per CTA, rounded up to a power of two and capped by the kernel's register budget (one dW partial row per CTA)"},
  [NL_SET_RMS_BWD_PARTIALS_MIN_M] = {"rmsnorm.bwd.partials_min_m", 1, 1, 1e12, 1,
    "CUDA auto backward below persistent_min_m: partials from this many rows, row below"},
  [NL_SET_RMS_BWD_PERSISTENT_MIN_M] = {"rmsnorm.bwd.persistent_min_m", 4096, 1, 1e12, 1,
    "CUDA auto backward above blockrow_max_n: persistent from this many rows"},
  [NL_SET_RMS_BWD_FP32_PARTIALS_MAX_N] = {"rmsnorm.bwd.fp32_partials_max_n", 8192, 0, 1 << 24, 1,
    "CUDA auto backward, fp32 activations: partials instead of persistent up to this N (0: never)"},
  [NL_SET_RMS_BWD_ITEMS] = {"rmsnorm.bwd.items", 4, 1, 8, 1,
    "CUDA backward: target 16-byte packs per thread per row (1, 2, 4, 8)"},
  [NL_SET_RMS_BWD_BLOCK] = {"rmsnorm.bwd.block", 512, 32, 1024, 1,
    "CUDA persistent and partials backward: preferred threads per CTA"},
  [NL_SET_RMS_BWD_CTAS_PER_SM] = {"rmsnorm.bwd.ctas_per_sm", 0, 0, 64, 1,
    "CUDA persistent backward: CTAs per SM (0: as many as fit)"},
  [NL_SET_RMS_BWD_LOOP_CTAS_PER_SM] = {"rmsnorm.bwd.loop_ctas_per_sm", 2, 0, 64, 1,
    "CUDA persistent backward's looping kernel (rows wider than any register layout): CTAs per SM (0: as many as fit)"},
  [NL_SET_RMS_BWD_SPLIT_MIN_N] = {"rmsnorm.bwd.split_min_n", 32768, 0, 1 << 24, 1,
    "CUDA persistent and partials backward, 16-bit rows wider than any register layout: from this N a row-reduction kernel and a column kernel (dW in registers) replace the looping kernel (0: never); rows whose dW outgrows shared memory always take them"},
  [NL_SET_RMS_BWD_STAGES] = {"rmsnorm.bwd.stages", 2, 2, 4, 1,
    "CUDA persistent and partials backward: rows each thread has in flight through cp.async, the current one included"},
  [NL_SET_RMS_BWD_FUSED_REDUCE] = {"rmsnorm.bwd.fused_reduce", 0, 0, 1, 1,
    "CUDA persistent backward: 1 reduces dW in the same kernel after a grid barrier, 0 launches the reduce kernel"},
  [NL_SET_RMS_BWD_CLUSTER] = {"rmsnorm.bwd.cluster", 1, 1, 8, 1,
    "CUDA persistent and partials backward (sm_90): CTAs per thread-block cluster, which sum their dW through distributed shared memory before writing one partial row per cluster (1: a partial row per CTA)"},
  [NL_SET_RMS_BWD_SHARE_N] = {"rmsnorm.bwd.share_n", 16384, 0, 1 << 24, 1,
    "CUDA persistent and partials backward (sm_90), 16-bit rows: rows of more columns than this are shared by a thread-block cluster of the fewest CTAs that leaves each at most this many (within rmsnorm.bwd.share_max), held in registers; the CTAs exchange each row's sum through distributed shared memory and write one partial row (0: never; rmsnorm.bwd.cluster does not apply to shared rows)"},
  [NL_SET_RMS_BWD_FP32_SHARE_N] = {"rmsnorm.bwd.fp32_share_n", 8192, 0, 1 << 24, 1,
    "CUDA persistent and partials backward (sm_90): rmsnorm.bwd.share_n for fp32 rows"},
  [NL_SET_RMS_BWD_SHARE_MAX] = {"rmsnorm.bwd.share_max", 4, 2, 8, 1,
    "CUDA persistent and partials backward (sm_90): the most CTAs a cluster shares a row among (rounded up to a power of two), unless a CTA's registers cannot hold the wider slice: then 8"},
  [NL_SET_RMS_BWD_GRID_SMS] = {"rmsnorm.bwd.grid_sms", 0, 0, 1 << 16, 1,
    "CUDA persistent and partials backward: SMs their grid spans (0: all of them; more than the GPU has: all)"},
};

/* Defaults that differ by GPU model, from same-run sweeps on each (notes/perf-2026-11-22d.md
 * and -22e.md give the evidence): launches on a CUDA GPU whose name contains `model` take
 * its entries for the settings nl_set has not given. The defaults above are the H200's. */
static const struct {
  const char *model;
  enum nl_setting_id id;
  double value;
} model_defs[] = {
  {"H100", NL_SET_RMS_FWD_BLOCKROW_MAX_N, 2048},
  {"H100", NL_SET_RMS_FWD_BLOCKROW_BLOCK, 128},
  {"H100", NL_SET_RMS_FWD_EARLY_WEIGHT_MAX_N, 0},
  {"H100", NL_SET_RMS_FWD_RELOAD_MIN_N, 0},
  {"H100", NL_SET_RMS_FWD_LOOP_CTAS_PER_SM, 2},
  {"H100", NL_SET_RMS_BWD_ITEMS, 2},
  {"H100", NL_SET_RMS_BWD_SHARE_N, 8192},
};

#define MODEL_DEFS ((int)(sizeof model_defs / sizeof model_defs[0]))

/* The default of setting id on the GPU named gpu (NULL or "": not a GPU), and where it comes
 * from. */
static double default_for(const char *gpu, int id, const char **origin)
{
  for (int j = 0; gpu && gpu[0] && j < MODEL_DEFS; j++)
    if ((int)model_defs[j].id == id && strstr(gpu, model_defs[j].model)) {
      *origin = model_defs[j].model;
      return model_defs[j].value;
    }
  *origin = "normlab";
  return defs[id].def;
}

/* While a launch is planned, its GPU's defaults; otherwise the default device's. */
double nl__setting(const nl_ctx *ctx, enum nl_setting_id id)
{
  const char *origin;
  if (ctx->settings_user[id])
    return ctx->settings[id];
  return default_for(ctx->plan_gpu[0] ? ctx->plan_gpu : ctx->device_gpu, id, &origin);
}

/* The GPU name of device d ("" for the CPU), from the context's cache of device properties,
 * so the pointer stays valid for the context's lifetime. */
static nl_status gpu_name(nl_ctx *ctx, nl_device d, const char **name)
{
  nl_device_info info;
  nl_status st;
  *name = "";
  if (d.backend != NL_CUDA)
    return NL_OK;
  if ((st = nl_device_query(ctx, d, &info)) != NL_OK)
    return st;
  *name = ctx->cuda_info[d.index].name;
  return NL_OK;
}

void nl__settings_defaults(nl_ctx *ctx)
{
  memset(ctx->settings_user, 0, sizeof ctx->settings_user);
  ctx->device_gpu = ctx->plan_gpu = "";
}

nl_status nl__settings_for_device(nl_ctx *ctx)
{
  return gpu_name(ctx, ctx->device, &ctx->device_gpu);
}

void nl__settings_for_plan(nl_ctx *ctx, const char *gpu)
{
  ctx->plan_gpu = gpu ? gpu : "";
}

int32_t nl_model_default_count(void) { return MODEL_DEFS; }

nl_status nl_model_default_describe(int32_t index, nl_model_default *out)
{
  if (!out || index < 0 || index >= MODEL_DEFS)
    return NL_EINVAL;
  out->model = model_defs[index].model;
  out->key = defs[model_defs[index].id].key;
  out->value = model_defs[index].value;
  return NL_OK;
}

int32_t nl_setting_count(void) { return NL_SET_COUNT; }

static void describe(const nl_ctx *ctx, const char *gpu, int32_t index, nl_setting_desc *out)
{
  out->key = defs[index].key;
  out->doc = defs[index].doc;
  out->def = default_for(gpu, index, &out->origin);
  out->value = ctx->settings_user[index] ? ctx->settings[index] : out->def;
  out->builtin = defs[index].def;
  out->min = defs[index].min;
  out->max = defs[index].max;
  out->integer = defs[index].integer;
}

nl_status nl_setting_describe(const nl_ctx *ctx, int32_t index, nl_setting_desc *out)
{
  if (!ctx || !out || index < 0 || index >= NL_SET_COUNT)
    return NL_EINVAL;
  describe(ctx, ctx->device_gpu, index, out);
  return NL_OK;
}

nl_status nl_setting_describe_on(nl_ctx *ctx, nl_device device, int32_t index,
                                 nl_setting_desc *out)
{
  const char *gpu;
  nl_status st;
  if (!ctx || !out || index < 0 || index >= NL_SET_COUNT)
    return NL_EINVAL;
  if ((st = nl__check_device(ctx, device)) != NL_OK || (st = gpu_name(ctx, device, &gpu)) != NL_OK)
    return st;
  describe(ctx, gpu, index, out);
  return NL_OK;
}

static int find(const char *key)
{
  for (int i = 0; i < NL_SET_COUNT; i++)
    if (key && strcmp(defs[i].key, key) == 0)
      return i;
  return -1;
}

nl_status nl_set(nl_ctx *ctx, const char *key, double value)
{
  int i;
  nl_status st = nl__enter(ctx);
  if (st != NL_OK)
    return st;
  if ((i = find(key)) < 0)
    return nl__err(ctx, NL_EINVAL, "unknown setting '%s'", key ? key : "(null)");
  if (isnan(value) || value < defs[i].min || value > defs[i].max)
    return nl__err(ctx, NL_EINVAL, "setting '%s': %g is outside [%g, %g]", key, value,
                   defs[i].min, defs[i].max);
  if (defs[i].integer && value != floor(value))
    return nl__err(ctx, NL_EINVAL, "setting '%s' takes an integer, got %g", key, value);
  ctx->settings[i] = value;
  ctx->settings_user[i] = 1;
  return NL_OK;
}

nl_status nl_get(nl_ctx *ctx, const char *key, double *value)
{
  int i;
  if (!ctx || !value)
    return NL_EINVAL;
  if ((i = find(key)) < 0)
    return nl__err(ctx, NL_EINVAL, "unknown setting '%s'", key ? key : "(null)");
  *value = nl__setting(ctx, (enum nl_setting_id)i);
  return NL_OK;
}
