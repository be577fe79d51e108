/*
 * variants_cpu.c: the CPU entries of the registry, a line per variant. The oracle (`ref`,
 * fp64) plus the CPU forms of the two strategies the main experiment compares, so that it
 * means something on a machine without a GPU, and the transpose op (the oracle and a tiled
 * copy). Their kernels are the strategy tables of kernels/cpu. Every CPU forward writes an
 * fp8 y under both scalings, and yt either in its row loop (strided) or through the tiled
 * transpose after it (external): the same bits either way.
 */
#include "cpu_kernels.h"
#include "registry.h"

const nlk_strategy *const nl__cpu_kernels[] = {nlk_cpu_ref, nlk_cpu_fwd, nlk_cpu_bwd, NULL};
const nlk_strategy *const nl__cpu_transpose_kernels[] = {nlk_cpu_transpose, NULL};

#define FAST_DT (NL_DT(NL_F32) | NL_DT(NL_F16) | NL_DT(NL_BF16))
#define REF_DT (FAST_DT | NL_DT(NL_F64))
#define ALL_DT (REF_DT | NL_DT(NL_F8E4M3) | NL_DT(NL_F8E5M2))
#define YT (NL_TR(NL_TRANSPOSE_STRIDED) | NL_TR_EXTERNAL)
#define TEMP NL_RED(NL_REDUCE_TEMP)
#define PARTIALS NL_RED(NL_REDUCE_PARTIALS)

static const char *transpose_auto(const nl_knobs *kn, const nlk_norm *k)
{
  (void)kn;
  (void)k;
  return "tiled";
}

/* persistent from cpu.persistent_min_m rows, row below; a requested reduction steers the
 * backward to the variant that has it (temp: row, partials: persistent). */
static const char *cpu_auto(const nl_knobs *kn, const nlk_norm *k)
{
  if (k->dt == NLK_F64)
    return "ref";
  if (k->reduce == NLK_REDUCE_TEMP || k->reduce == NLK_REDUCE_PARTIALS)
    return k->reduce == NLK_REDUCE_TEMP ? "row" : "persistent";
  return k->M >= kn->cpu.persistent_min_m ? "persistent" : "row";
}

/* A forward and a backward line: the op's name and value, the strategy, the dtypes of x it
 * takes, (backward) the dW reductions it offers and its default one, the resolver of `auto`
 * (else NULL), a summary and the limits. Forwards offer an fp8 y and yt (YT). */
#define FWD(OPNAME, OP, S, DT, AUTO, SUMMARY, LIMITS) \
  {OPNAME ".fwd." S, OP, NL_FWD, NL_CPU, S, SUMMARY, LIMITS, DT, 0, 0, NL_FP8_ALL, YT, AUTO}
#define BWD(OPNAME, OP, S, DT, RED, DEF, AUTO, SUMMARY, LIMITS) \
  {OPNAME ".bwd." S, OP, NL_BWD, NL_CPU, S, SUMMARY, LIMITS, DT, RED, DEF, 0, 0, AUTO}
/* The transpose op writes yt itself (no transposes bits), x of any dtype, fp8 out or not. */
#define TRANSPOSE(S, DT, AUTO, SUMMARY, LIMITS) \
  {"transpose.fwd." S, NL_OP_TRANSPOSE, NL_FWD, NL_CPU, S, SUMMARY, LIMITS, DT, 0, 0, NL_FP8_ALL, \
   0, AUTO}

#define REF_LIMITS "any M, N >= 1; fp32, fp16, bf16, fp64; every option"
#define FAST_LIMITS "any M, N >= 1; fp32, fp16, bf16; weight fp32, x dtype or none"
#define TR_LIMITS "any M, N >= 1; x of any dtype; y and yt x's dtype or fp8"
#define AUTO_SUMMARY "persistent from cpu.persistent_min_m rows, row below; ref for fp64"
#define AUTO_BWD_SUMMARY "persistent from cpu.persistent_min_m rows, row below; a requested " \
  "reduction steers it (temp: row, partials: persistent); ref for fp64"
#define AUTO_LIMITS "as the variant it picks"

#define OP_ENTRIES(O, OP)                                                                       \
  FWD(O, OP, "ref", REF_DT, NULL, "fp64 oracle, rows in parallel", REF_LIMITS),                 \
  FWD(O, OP, "row", FAST_DT, NULL, "contiguous row blocks per thread, fp32 math", FAST_LIMITS), \
  FWD(O, OP, "persistent", FAST_DT, NULL,                                                       \
      "threads stride over rows, weight converted once per thread", FAST_LIMITS),               \
  FWD(O, OP, "auto", REF_DT, cpu_auto, AUTO_SUMMARY, AUTO_LIMITS),                              \
  BWD(O, OP, "ref", REF_DT, 0, 0, NULL, "fp64 oracle; dW from fp64 partials", REF_LIMITS),      \
  BWD(O, OP, "row", FAST_DT, TEMP, NL_REDUCE_TEMP, NULL,                                        \
      "per-row dW into an M x N fp32 temp, then a column reduction (the old design)",           \
      FAST_LIMITS),                                                                             \
  BWD(O, OP, "persistent", FAST_DT, PARTIALS, NL_REDUCE_PARTIALS, NULL,                         \
      "threads stride over rows, dW in a per-thread fp32 partial row, then one reduction",      \
      FAST_LIMITS),                                                                             \
  BWD(O, OP, "auto", REF_DT, TEMP | PARTIALS, 0, cpu_auto, AUTO_BWD_SUMMARY, AUTO_LIMITS)

const nl_variant nl__cpu_variants[] = {
  OP_ENTRIES("rmsnorm", NL_OP_RMSNORM),
  OP_ENTRIES("layernorm", NL_OP_LAYERNORM),
  OP_ENTRIES("add_rmsnorm", NL_OP_ADD_RMSNORM),
  TRANSPOSE("ref", ALL_DT, NULL, "the oracle: element by element, fp64 scaling rounded once to "
            "fp32, threads over rows of yt", TR_LIMITS),
  TRANSPOSE("tiled", ALL_DT, NULL, "transpose.tile_m x transpose.tile_n tiles per thread, read "
            "along x's rows and written along yt's from cache", TR_LIMITS),
  TRANSPOSE("auto", ALL_DT, transpose_auto, "tiled", "as the variant it picks"),
};

const int nl__cpu_variant_count = (int)(sizeof nl__cpu_variants / sizeof nl__cpu_variants[0]);
