/*
 * settings.c: runtime settings on the context. Every dispatch threshold and harness default
 * lives here as data, so experiments can sweep them (nl.set("rmsnorm.fwd.blockrow_max_n", 512)).
 * The `auto` resolvers in the variant tables read these and nothing else.
 */
#include <math.h>
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
  [NL_SET_RMS_FWD_BLOCKROW_MAX_N] = {"rmsnorm.fwd.blockrow_max_n", 1024, 0, 1 << 20, 1,
    "CUDA auto forward: blockrow (several rows per CTA) for N up to this"},
  [NL_SET_RMS_FWD_BLOCKROW_MIN_M] = {"rmsnorm.fwd.blockrow_min_m", 1024, 1, 1e12, 1,
    "CUDA auto forward: blockrow only from this many rows"},
  [NL_SET_RMS_FWD_PERSISTENT_MIN_M] = {"rmsnorm.fwd.persistent_min_m", 1e12, 1, 1e12, 1,
    "CUDA auto forward: persistent (grid-stride, weight loaded once per CTA) from this many rows"},
  [NL_SET_RMS_BWD_BLOCKROW_MAX_N] = {"rmsnorm.bwd.blockrow_max_n", 1024, 0, 1 << 20, 1,
    "CUDA auto backward: blockrow for N up to this"},
  [NL_SET_RMS_BWD_PERSISTENT_MIN_M] = {"rmsnorm.bwd.persistent_min_m", 256, 1, 1e12, 1,
    "CUDA auto backward: persistent from this many rows (row below)"},
  [NL_SET_RMS_BWD_ROW_MAX_M] = {"rmsnorm.bwd.row_max_m", 0, 0, 1e12, 1,
    "unused by auto unless > 0: row backward for M up to this (it needs an M x N temp)"},
  [NL_SET_RMS_BWD_ATOMIC] = {"rmsnorm.bwd.atomic", 0, 0, 1, 1,
    "auto backward: 1 lets auto pick fp32-atomic dW reductions (not deterministic)"},
};

double nl__setting(const nl_ctx *ctx, enum nl_setting_id id) { return ctx->settings[id]; }

void nl__settings_defaults(nl_ctx *ctx)
{
  for (int i = 0; i < NL_SET_COUNT; i++)
    ctx->settings[i] = defs[i].def;
}

int32_t nl_setting_count(void) { return NL_SET_COUNT; }

nl_status nl_setting_describe(const nl_ctx *ctx, int32_t index, nl_setting_desc *out)
{
  if (!ctx || !out || index < 0 || index >= NL_SET_COUNT)
    return NL_EINVAL;
  out->key = defs[index].key;
  out->doc = defs[index].doc;
  out->value = ctx->settings[index];
  out->def = defs[index].def;
  out->min = defs[index].min;
  out->max = defs[index].max;
  out->integer = defs[index].integer;
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
  return NL_OK;
}

nl_status nl_get(nl_ctx *ctx, const char *key, double *value)
{
  int i;
  if (!ctx || !value)
    return NL_EINVAL;
  if ((i = find(key)) < 0)
    return nl__err(ctx, NL_EINVAL, "unknown setting '%s'", key ? key : "(null)");
  *value = ctx->settings[i];
  return NL_OK;
}
