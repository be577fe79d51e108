/*
 * variants_cpu.c: the CPU entries of the registry. The oracle (`ref`, fp64) plus the CPU
 * forms of the two strategies the main experiment compares, so that it means something on
 * a machine without a GPU.
 */
#include "cpu_kernels.h"
#include "registry.h"

#define FAST_DT (NL_DT(NL_F32) | NL_DT(NL_F16) | NL_DT(NL_BF16))
#define REF_DT (FAST_DT | NL_DT(NL_F64))

static const char *cpu_auto(const nl_ctx *ctx, const nlk_norm *k)
{
  if (k->dt == NLK_F64)
    return "ref";
  return k->M >= (int64_t)nl__setting(ctx, NL_SET_CPU_PERSISTENT_MIN_M) ? "persistent" : "row";
}

#define REF_LIMITS "any M, N >= 1; fp32, fp16, bf16, fp64; every option"
#define FAST_LIMITS "any M, N >= 1; fp32, fp16, bf16; weight fp32, x dtype or none"
#define AUTO_SUMMARY "persistent from cpu.persistent_min_m rows, row below; ref for fp64"

#define OP_ENTRIES(OPNAME, OP)                                                                  \
  {OPNAME ".fwd.ref", OP, NL_FWD, NL_CPU, "ref", "fp64 oracle, rows in parallel", REF_LIMITS,   \
   REF_DT, 0, 0, NULL, NULL, nlk_cpu_ref_fwd, NULL, NULL},                                            \
  {OPNAME ".fwd.row", OP, NL_FWD, NL_CPU, "row", "contiguous row blocks per thread, fp32 math", \
   FAST_LIMITS, FAST_DT, 0, 0, NULL, NULL, nlk_cpu_row_fwd, NULL, NULL},                              \
  {OPNAME ".fwd.persistent", OP, NL_FWD, NL_CPU, "persistent",                                  \
   "threads stride over rows, weight converted once per thread", FAST_LIMITS, FAST_DT, 0, 0,    \
   NULL, NULL, nlk_cpu_persistent_fwd, NULL, NULL},                                                   \
  {OPNAME ".fwd.auto", OP, NL_FWD, NL_CPU, "auto", AUTO_SUMMARY, "as the variant it picks",     \
   REF_DT, 0, 0, NULL, NULL, NULL, cpu_auto, NULL},                                                   \
  {OPNAME ".bwd.ref", OP, NL_BWD, NL_CPU, "ref", "fp64 oracle; dW from fp64 partials",         \
   REF_LIMITS, REF_DT, 0, 0, NULL, NULL, nlk_cpu_ref_bwd, NULL, NULL},                                \
  {OPNAME ".bwd.row", OP, NL_BWD, NL_CPU, "row",                                                \
   "per-row dW into an M x N fp32 temp, then a column reduction (the old design)", FAST_LIMITS, \
   FAST_DT, NL_RED(NL_REDUCE_TEMP), NL_REDUCE_TEMP, NULL, nlk_cpu_row_bwd_ws, nlk_cpu_row_bwd,  \
   NULL, NULL},                                                                                       \
  {OPNAME ".bwd.persistent", OP, NL_BWD, NL_CPU, "persistent",                                  \
   "threads stride over rows, dW in a per-thread fp32 partial row, then one reduction",         \
   FAST_LIMITS, FAST_DT, NL_RED(NL_REDUCE_PARTIALS), NL_REDUCE_PARTIALS, NULL,                  \
   nlk_cpu_persistent_bwd_ws, nlk_cpu_persistent_bwd, NULL, NULL},                                    \
  {OPNAME ".bwd.auto", OP, NL_BWD, NL_CPU, "auto", AUTO_SUMMARY, "as the variant it picks",     \
   REF_DT, NL_RED(NL_REDUCE_TEMP) | NL_RED(NL_REDUCE_PARTIALS), 0, NULL, NULL, NULL, cpu_auto, NULL}

const nl_variant nl__cpu_variants[] = {
  OP_ENTRIES("rmsnorm", NL_OP_RMSNORM),
  OP_ENTRIES("layernorm", NL_OP_LAYERNORM),
  OP_ENTRIES("add_rmsnorm", NL_OP_ADD_RMSNORM),
};

const int nl__cpu_variant_count = (int)(sizeof nl__cpu_variants / sizeof nl__cpu_variants[0]);
