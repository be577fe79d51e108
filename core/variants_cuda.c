/*
 * variants_cuda.c: the CUDA entries of the registry (empty when built without CUDA).
 * add_rmsnorm runs the RMSNorm kernels with the residual add (forward) or the residual
 * gradient (backward) switched on, so both ops list the same strategies and settings.
 */
#include <stdio.h>

#include "registry.h"

#ifdef NL_HAVE_CUDA
#include "cuda/cuda_kernels.h"

#define DTYPES (NL_DT(NL_F32) | NL_DT(NL_F16) | NL_DT(NL_BF16))
#define MAX_N ((int64_t)1 << 24)

static nl_status rms_supports(const nl_ctx *ctx, const nlk_norm *k, char *why, size_t cap)
{
  if (k->N > MAX_N) {
    snprintf(why, cap, "N = %lld is above the CUDA kernels' limit of %lld", (long long)k->N,
             (long long)MAX_N);
    return NL_EUNSUPPORTED;
  }
  return NL_OK;
}

static nl_status blockrow_supports(const nl_ctx *ctx, const nlk_norm *k, char *why, size_t cap)
{
  int64_t max_n = nlk_cuda_blockrow_max_n(k);
  if (k->N > max_n) {
    snprintf(why, cap, "N = %lld is too wide for a warp per row (at most %lld for %s rows%s)",
             (long long)k->N, (long long)max_n, nl_dtype_name(k->dt),
             max_n < 32 * 8 * 4 ? " without 16-byte alignment" : "");
    return NL_EUNSUPPORTED;
  }
  return NL_OK;
}

static void tune_fwd(const nl_ctx *ctx, nlk_norm *k)
{
  k->items = (int32_t)nl__setting(ctx, NL_SET_RMS_FWD_ITEMS);
  k->block_pref = (int32_t)nl__setting(ctx, NL_SET_RMS_FWD_BLOCK);
  k->rows_block = (int32_t)nl__setting(ctx, NL_SET_RMS_FWD_BLOCKROW_BLOCK);
  k->ctas_per_sm = (int32_t)nl__setting(ctx, NL_SET_RMS_FWD_CTAS_PER_SM);
  k->loop_ctas = (int32_t)nl__setting(ctx, NL_SET_RMS_FWD_LOOP_CTAS_PER_SM);
  k->stages = (int32_t)nl__setting(ctx, NL_SET_RMS_FWD_STAGES);
  k->early_weight = k->N <= (int64_t)nl__setting(ctx, NL_SET_RMS_FWD_EARLY_WEIGHT_MAX_N);
  k->reload = nl__setting(ctx, NL_SET_RMS_FWD_RELOAD_MIN_N) > 0 &&
              k->N >= (int64_t)nl__setting(ctx, NL_SET_RMS_FWD_RELOAD_MIN_N);
}

static void tune_fwd_staged(const nl_ctx *ctx, nlk_norm *k)
{
  k->items = (int32_t)nl__setting(ctx, NL_SET_RMS_FWD_STAGED_ITEMS);
}

static nl_status staged_supports(const nl_ctx *ctx, const nlk_norm *k, char *why, size_t cap)
{
  int64_t max_n = nlk_cuda_staged_max_n(k);
  if (k->N > max_n) {
    snprintf(why, cap, "N = %lld does not fit one CTA's shared memory (at most %lld %s%s)",
             (long long)k->N, (long long)max_n, nl_dtype_name(k->dt),
             k->res ? " with its residual" : "");
    return NL_EUNSUPPORTED;
  }
  return NL_OK;
}

static void tune_bwd(const nl_ctx *ctx, nlk_norm *k)
{
  k->items = (int32_t)nl__setting(ctx, NL_SET_RMS_BWD_ITEMS);
  k->block_pref = (int32_t)nl__setting(ctx, NL_SET_RMS_BWD_BLOCK);
  k->rows_block = (int32_t)nl__setting(ctx, NL_SET_RMS_BWD_BLOCKROW_BLOCK);
  k->ctas_per_sm = (int32_t)nl__setting(ctx, NL_SET_RMS_BWD_CTAS_PER_SM);
  k->loop_ctas = (int32_t)nl__setting(ctx, NL_SET_RMS_BWD_LOOP_CTAS_PER_SM);
  k->split_min_n = (int64_t)nl__setting(ctx, NL_SET_RMS_BWD_SPLIT_MIN_N);
  k->fused_reduce = (int32_t)nl__setting(ctx, NL_SET_RMS_BWD_FUSED_REDUCE);
  k->cluster = (int32_t)nl__setting(ctx, NL_SET_RMS_BWD_CLUSTER);
  k->share_n = (int64_t)nl__setting(ctx, k->dt == NLK_F32 ? NL_SET_RMS_BWD_FP32_SHARE_N
                                                          : NL_SET_RMS_BWD_SHARE_N);
  k->share_max = (int32_t)nl__setting(ctx, NL_SET_RMS_BWD_SHARE_MAX);
  k->grid_sms = (int32_t)nl__setting(ctx, NL_SET_RMS_BWD_GRID_SMS);
  k->stages = (int32_t)nl__setting(ctx, NL_SET_RMS_BWD_STAGES);
}

static int blockrow_fits(const nl_ctx *ctx, const nlk_norm *k, enum nl_setting_id max_n)
{
  return k->N <= (int64_t)nl__setting(ctx, max_n) && k->N <= nlk_cuda_blockrow_max_n(k);
}

/* auto forward: blockrow up to blockrow_max_n columns and blockrow_max_m rows (when a warp
 * holds the row), then persistent from persistent_min_m rows and persistent_min_n columns,
 * row otherwise. staged is not picked: it led row by 1.4% at most on an H200, never on an
 * H100 (notes/perf-h200-2026-11-22c.md). */
static const char *auto_fwd(const nl_ctx *ctx, const nlk_norm *k)
{
  if (k->M <= (int64_t)nl__setting(ctx, NL_SET_RMS_FWD_BLOCKROW_MAX_M) &&
      blockrow_fits(ctx, k, NL_SET_RMS_FWD_BLOCKROW_MAX_N))
    return "blockrow";
  if (k->M >= (int64_t)nl__setting(ctx, NL_SET_RMS_FWD_PERSISTENT_MIN_M) &&
      k->N >= (int64_t)nl__setting(ctx, NL_SET_RMS_FWD_PERSISTENT_MIN_N))
    return "persistent";
  return "row";
}

/* auto backward: blockrow up to blockrow_max_n, then persistent from persistent_min_m rows
 * (partials for fp32 rows up to fp32_partials_max_n), partials from partials_min_m, row
 * below; a requested reduction steers it to a variant that has one (temp: row; atomic: not
 * partials). fp32 favours partials' contiguous row chunks over persistent's grid stride:
 * 2-11% on an H100 at M = 1024 to 32768 and N = 1024 to 8192, up to 20% on an H200 at
 * M = 4096 (notes/perf-2026-11-22e.md); bf16 and fp16 do not. */
static const char *auto_bwd(const nl_ctx *ctx, const nlk_norm *k)
{
  const int atomic = k->reduce == NLK_REDUCE_ATOMIC;
  if (k->reduce == NLK_REDUCE_TEMP)
    return "row";
  if (blockrow_fits(ctx, k, NL_SET_RMS_BWD_BLOCKROW_MAX_N))
    return "blockrow";
  if (k->M >= (int64_t)nl__setting(ctx, NL_SET_RMS_BWD_PERSISTENT_MIN_M))
    return k->dt == NLK_F32 && !atomic &&
                   k->N <= (int64_t)nl__setting(ctx, NL_SET_RMS_BWD_FP32_PARTIALS_MAX_N)
               ? "partials"
               : "persistent";
  if (k->M >= (int64_t)nl__setting(ctx, NL_SET_RMS_BWD_PARTIALS_MIN_M))
    return atomic ? "persistent" : "partials";
  return "row";
}

#define LIMITS "any M; N <= 2^24; fp32, fp16, bf16; 16-byte packs when N and strides allow"
#define ST_LIMITS "any M; N x element size (x 2 with a residual) within a CTA's shared memory " \
  "(227 KB on sm_90: N <= 115712 bf16); fp32, fp16, bf16"
#define BR_LIMITS "N <= 2048 (bf16/fp16) or 1024 (fp32) with 16-byte packs, 256 / 256 without"
#define RED_TP (NL_RED(NL_REDUCE_PARTIALS) | NL_RED(NL_REDUCE_ATOMIC))

#define RMS_ENTRIES(OPNAME, OP)                                                                 \
  {OPNAME ".fwd.row", OP, NL_FWD, NL_CUDA, "row",                                                  \
   "one CTA per row, row held in registers (read twice, the second time from L1, from "            \
   "rmsnorm.fwd.reload_min_n columns)",                                                            \
   LIMITS, DTYPES, 0, 0, rms_supports, NULL, nlk_cuda_rms_fwd_row, NULL, tune_fwd},                \
  {OPNAME ".fwd.blockrow", OP, NL_FWD, NL_CUDA, "blockrow",                                        \
   "a warp or less per row, rmsnorm.fwd.blockrow_block threads per CTA, shuffle reductions "      \
   "only", BR_LIMITS, DTYPES, 0, 0,                                                                \
   blockrow_supports, NULL, nlk_cuda_rms_fwd_blockrow, NULL, tune_fwd},                            \
  {OPNAME ".fwd.persistent", OP, NL_FWD, NL_CUDA, "persistent",                                    \
   "grid = SMs x resident CTAs striding over rows, weight in registers once per CTA, the next "    \
   "rows in flight through cp.async (rmsnorm.fwd.stages)", LIMITS,                                 \
   DTYPES, 0, 0, rms_supports, NULL, nlk_cuda_rms_fwd_persistent, NULL, tune_fwd},                 \
  {OPNAME ".fwd.staged", OP, NL_FWD, NL_CUDA, "staged",                                            \
   "one CTA per row, the row copied to shared memory through cp.async (no packs held in "         \
   "registers: many rows per SM in flight), rmsnorm.fwd.staged_items packs per thread",           \
   ST_LIMITS, DTYPES, 0, 0, staged_supports, NULL, nlk_cuda_rms_fwd_staged, NULL, tune_fwd_staged}, \
  {OPNAME ".fwd.auto", OP, NL_FWD, NL_CUDA, "auto",                                                \
   "blockrow for N <= rmsnorm.fwd.blockrow_max_n, persistent from rmsnorm.fwd.persistent_min_m "   \
   "rows and rmsnorm.fwd.persistent_min_n columns, row otherwise", "as the variant it picks",      \
   DTYPES, 0, 0, NULL, NULL, NULL, auto_fwd, NULL},                                                \
  {OPNAME ".bwd.row", OP, NL_BWD, NL_CUDA, "row",                                                  \
   "one CTA per row; dW through an M x N fp32 temp and a column-reduce kernel (the old design)",   \
   LIMITS, DTYPES, NL_RED(NL_REDUCE_TEMP) | NL_RED(NL_REDUCE_ATOMIC), NL_REDUCE_TEMP,              \
   rms_supports, nlk_cuda_rms_bwd_row_ws, nlk_cuda_rms_bwd_row, NULL, tune_bwd},                   \
  {OPNAME ".bwd.blockrow", OP, NL_BWD, NL_CUDA, "blockrow",                                        \
   "a warp or less per row, rmsnorm.bwd.blockrow_block threads per CTA; (CTAs x N) fp32 "        \
   "partials + reduce kernel",                                                                     \
   BR_LIMITS, DTYPES, RED_TP, NL_REDUCE_PARTIALS, blockrow_supports,                               \
   nlk_cuda_rms_bwd_blockrow_ws, nlk_cuda_rms_bwd_blockrow, NULL, tune_bwd},                       \
  {OPNAME ".bwd.partials", OP, NL_BWD, NL_CUDA, "partials",                                        \
   "grid = SM count over contiguous row chunks, next rows in flight through cp.async, dW in "      \
   "registers, rows over rmsnorm.bwd.share_n shared by a cluster (sm_90); (SMs x N) "          \
   "partials + reduce",                                                                            \
   LIMITS, DTYPES, NL_RED(NL_REDUCE_PARTIALS), NL_REDUCE_PARTIALS, rms_supports,                   \
   nlk_cuda_rms_bwd_partials_ws, nlk_cuda_rms_bwd_partials, NULL, tune_bwd},                       \
  {OPNAME ".bwd.persistent", OP, NL_BWD, NL_CUDA, "persistent",                                    \
   "grid = SMs x resident CTAs striding over rows, next rows in flight through cp.async, dW in "   \
   "registers, rows over rmsnorm.bwd.share_n shared by a cluster (sm_90); partials reduced "   \
   "after a grid barrier in the same kernel (rmsnorm.bwd.fused_reduce) or by the reduce kernel",   \
   LIMITS, DTYPES, RED_TP, NL_REDUCE_PARTIALS, rms_supports, nlk_cuda_rms_bwd_persistent_ws,       \
   nlk_cuda_rms_bwd_persistent, NULL, tune_bwd},                                                   \
  {OPNAME ".bwd.auto", OP, NL_BWD, NL_CUDA, "auto",                                                \
   "blockrow for N <= rmsnorm.bwd.blockrow_max_n, then persistent from "                           \
   "rmsnorm.bwd.persistent_min_m rows (fp32: partials up to rmsnorm.bwd.fp32_partials_max_n), "  \
   "partials from rmsnorm.bwd.partials_min_m, row below; a requested reduction steers it to a "    \
   "variant that has one",                                                                         \
   "as the variant it picks",                                                                      \
   DTYPES, 0, 0, NULL, NULL, NULL, auto_bwd, NULL}

const nl_variant nl__cuda_variants[] = {
  RMS_ENTRIES("rmsnorm", NL_OP_RMSNORM),
  RMS_ENTRIES("add_rmsnorm", NL_OP_ADD_RMSNORM),
};

const int nl__cuda_variant_count = (int)(sizeof nl__cuda_variants / sizeof nl__cuda_variants[0]);

#else

/* C has no empty arrays: one unused sentinel that the count excludes. */
const nl_variant nl__cuda_variants[] = {
  {NULL, 0, 0, NL_CUDA, NULL, NULL, NULL, 0, 0, 0, NULL, NULL, NULL, NULL, NULL},
};

const int nl__cuda_variant_count = 0;

#endif
