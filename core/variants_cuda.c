/*
 * variants_cuda.c: the CUDA entries of the registry (empty when built without CUDA), a line
 * per strategy; the kernels are the strategy tables of kernels/cuda/norm_fwd.cu and
 * norm_bwd.cu, found by name. Every op runs the same kernel family: add_rmsnorm the RMSNorm
 * kernels with the residual add (forward) or the residual gradient (backward) switched on,
 * LayerNorm their LayerNorm instances; so the ops list the same strategies and take the same
 * rmsnorm.* settings. The `auto` resolvers read the dispatch settings (settings.c).
 */
#include "registry.h"

#ifdef NL_HAVE_CUDA
#include "cuda/nlk_cuda.h"

const nlk_strategy *const nl__cuda_kernels[] = {nlk_cuda_fwd, nlk_cuda_bwd, NULL};
const nlk_strategy *const nl__cuda_transpose_kernels[] = {nlk_cuda_transpose, NULL};

#define DTYPES (NL_DT(NL_F32) | NL_DT(NL_F16) | NL_DT(NL_BF16))
#define PARTIALS NL_RED(NL_REDUCE_PARTIALS)
#define ATOMIC NL_RED(NL_REDUCE_ATOMIC)
#define TEMP NL_RED(NL_REDUCE_TEMP)
#define TR_DTYPES (DTYPES | NL_DT(NL_F8E4M3) | NL_DT(NL_F8E5M2))
/* what the forward norm kernels offer for an fp8 y (NL_SC bits: both scalings, in every
 * strategy: norm_fwd.cu's fp8 epilogue, current scaling as two launches) and yt (NL_TR bits:
 * strided, each element stored again by the norm kernel, in every strategy; external, the
 * core's tiled transpose after the kernel) */
#define FP8 NL_FP8_ALL
#define YT (NL_TR_EXTERNAL | NL_TR(NL_TRANSPOSE_STRIDED))
/* the one-row strategies also chunked: launches of a chunk of rows and the tiles of the chunk
 * before (norm_fwd.cu's chunk_tile; an fp8 y, rows that fit registers) */
#define ROW_YT (YT | NL_TR(NL_TRANSPOSE_CHUNKED))
/* slab: yt from its own tile (fused_tiled), or the core's external transpose */
#define SLAB_YT (NL_TR_EXTERNAL | NL_TR(NL_TRANSPOSE_FUSED))

/* auto forward: staged from staged_min_n columns where the row fits a CTA's shared memory
 * (row's looping kernel reads x twice there; staged reads it once); blockrow up to
 * blockrow_max_n columns, from blockrow_min_m rows (fewer rows want a CTA each) up to
 * blockrow_max_m, and for rows narrower than row_min_n from narrow_min_m rows whatever M above
 * that (a CTA per row has a warp or less: with a few rows it still wins, from about a hundred
 * it leaves the SMs idle); then persistent for up to persistent_max_m rows from
 * persistent_min_n columns below staged_min_n (a few wide rows, where it led row on an H100 and
 * an H200; wider rows that staged cannot hold take row's looping kernel), row otherwise. From
 * blockrow_min_m rows RMSNorm takes many_row_min_n for row_min_n (with many rows blockrow keeps
 * its lead to a wider row). LayerNorm takes its own narrow_min_m, row_min_n (from
 * blockrow_min_m rows) and persistent_max_m (layernorm.fwd.*: its two passes make the row
 * kernel issue-bound sooner with many rows, and its persistent kernel lost the few wide rows to
 * row), and, y in x's dtype, staged where row's CTAs (at layernorm.fwd.items packs from
 * blockrow_min_m rows) need at least layernorm.fwd.staged_min_waves waves (staged holds no row
 * in registers: more rows in flight per SM, which only a grid of several waves uses).
 * add_rmsnorm takes its own blockrow_max_n and narrow_min_m (add_rmsnorm.fwd.*: the residual's
 * packs), and for a y in x's dtype staged instead of row where row's CTAs need more than one
 * wave and at most
 * add_rmsnorm.fwd.staged_max_waves while staged's fit one (the residual's registers leave row's
 * one-wave doublings short there, and a CTA per row lives about two round trips; wide fp32 rows
 * fill staged's shared memory).
 * The thresholds come from the H100 and H200 crossovers (docs/kernels.md). */
static const char *auto_fwd(const nl_knobs *kn, const nlk_norm *k)
{
  const int ln = k->op == NLK_LAYERNORM, add = k->op == NLK_ADD_RMSNORM;
  const int64_t row_min_n = k->M < kn->rms_fwd.blockrow_min_m ? kn->rms_fwd.row_min_n
                            : ln                                ? kn->ln_fwd.row_min_n
                            : add                               ? kn->rms_fwd.row_min_n
                                                                : kn->rms_fwd.many_row_min_n;
  const int64_t narrow_min_m = ln    ? kn->ln_fwd.narrow_min_m
                               : add ? kn->add_fwd.narrow_min_m
                                     : kn->rms_fwd.narrow_min_m;
  const int64_t persistent_max_m = ln ? kn->ln_fwd.persistent_max_m : kn->rms_fwd.persistent_max_m;
  const int64_t blockrow_max_n = add ? kn->add_fwd.blockrow_max_n : kn->rms_fwd.blockrow_max_n;
  const int plain_y = !nlk_is_fp8(k->ydt) && !k->yt;
  if (k->N >= kn->rms_fwd.staged_min_n && nl__fits(NL_CUDA, NL_FWD, "staged", k))
    return "staged";
  const int narrow = k->N < row_min_n && k->M >= narrow_min_m;
  if ((narrow || (k->M >= kn->rms_fwd.blockrow_min_m && k->M <= kn->rms_fwd.blockrow_max_m)) &&
      k->N <= blockrow_max_n && nl__fits(NL_CUDA, NL_FWD, "blockrow", k))
    return "blockrow";
  if (k->M <= persistent_max_m && k->N >= kn->rms_fwd.persistent_min_n &&
      k->N < kn->rms_fwd.staged_min_n && k->transpose != NLK_TRANSPOSE_CHUNKED)
    return "persistent";
  if (ln && kn->ln_fwd.staged_min_waves > 0 && plain_y && nl__fits(NL_CUDA, NL_FWD, "staged", k) &&
      nl__waves(NL_CUDA, NL_FWD, "row", k) >= kn->ln_fwd.staged_min_waves)
    return "staged";
  if (k->op == NLK_ADD_RMSNORM && kn->add_fwd.staged_max_waves > 0 && plain_y &&
      nl__fits(NL_CUDA, NL_FWD, "staged", k)) {
    const double waves = nl__waves(NL_CUDA, NL_FWD, "row", k);
    if (waves > 1 && waves <= kn->add_fwd.staged_max_waves &&
        nl__waves(NL_CUDA, NL_FWD, "staged", k) <= 1)
      return "staged";
  }
  return "row";
}

/* auto backward: row below partials_min_m rows up to row_max_n columns (a CTA per row: few
 * rows leave the grid-wide strategies idle, but row's M x N fp32 temp and column pass cost
 * more than that on wide rows), then blockrow up to blockrow_max_n columns and blockrow_max_m
 * rows or up to narrow_max_n columns and narrow_max_m rows, then persistent from
 * persistent_min_m rows (partials for fp32 rows of 16-byte packs up to fp32_partials_max_n:
 * they favour partials' contiguous row chunks over persistent's grid stride, 16-bit rows and
 * fp32 rows of single elements do not: H100, persistent +27-59% at 1023 and 4095 columns),
 * partials below; a requested reduction steers it to a variant that has one (temp: row;
 * partials: not row; atomic: not partials). LayerNorm and add_rmsnorm take their own twins of
 * some of these (layernorm.bwd.*, add_rmsnorm.bwd.*: LayerNorm's row keeps two temps, dW's
 * and dB's, and both ops' extra row traffic moves the crossovers); LayerNorm's narrow rows
 * also take partials up to layernorm.bwd.partials_max_n columns past the blockrow bands. */
static const char *auto_bwd(const nl_knobs *kn, const nlk_norm *k)
{
  const int ln = k->op == NLK_LAYERNORM, add = k->op == NLK_ADD_RMSNORM;
  const int atomic = k->reduce == NLK_REDUCE_ATOMIC, partials = k->reduce == NLK_REDUCE_PARTIALS;
  const int64_t row_max_n = ln ? kn->ln_bwd.row_max_n : kn->rms_bwd.row_max_n;
  const int64_t blockrow_max_n = ln    ? kn->ln_bwd.blockrow_max_n
                                 : add ? kn->add_bwd.blockrow_max_n
                                       : kn->rms_bwd.blockrow_max_n;
  const int64_t narrow_max_n = ln    ? kn->ln_bwd.narrow_max_n
                               : add ? kn->add_bwd.narrow_max_n
                                     : kn->rms_bwd.narrow_max_n;
  const int64_t narrow_max_m = ln ? kn->ln_bwd.narrow_max_m : kn->rms_bwd.narrow_max_m;
  if (k->reduce == NLK_REDUCE_TEMP ||
      (!partials && k->M < kn->rms_bwd.partials_min_m && k->N <= row_max_n))
    return "row";
  if (((k->N <= blockrow_max_n && k->M <= kn->rms_bwd.blockrow_max_m) ||
       (k->N <= narrow_max_n && k->M <= narrow_max_m)) &&
      nl__fits(NL_CUDA, NL_BWD, "blockrow", k))
    return "blockrow";
  if (ln && !atomic && k->N <= kn->ln_bwd.partials_max_n && k->M <= narrow_max_m)
    return "partials";
  if (k->M >= kn->rms_bwd.persistent_min_m)
    return k->dt == NLK_F32 && !atomic && k->N <= kn->rms_bwd.fp32_partials_max_n &&
                   nlk_cuda_pack_elems(k) > 1
               ? "partials"
               : "persistent";
  return atomic ? "persistent" : "partials";
}

/* The transpose op: tiled everywhere (naive is the baseline it is measured against). */
static const char *auto_transpose(const nl_knobs *kn, const nlk_norm *k)
{
  (void)kn;
  (void)k;
  return "tiled";
}

/* A forward and a backward line: the op's name and value, the strategy, (backward) the dW
 * reductions it offers and its default one, the resolver of `auto` (else NULL), a summary
 * and the limits. */
#define FWD(OPNAME, OP, S, AUTO, SUMMARY, LIMITS) FWD_YT(OPNAME, OP, S, AUTO, SUMMARY, LIMITS, YT)
#define FWD_YT(OPNAME, OP, S, AUTO, SUMMARY, LIMITS, WAYS) \
  {OPNAME ".fwd." S, OP, NL_FWD, NL_CUDA, S, SUMMARY, LIMITS, DTYPES, 0, 0, FP8, WAYS, AUTO}
#define BWD(OPNAME, OP, S, RED, DEF, AUTO, SUMMARY, LIMITS) \
  {OPNAME ".bwd." S, OP, NL_BWD, NL_CUDA, S, SUMMARY, LIMITS, DTYPES, RED, DEF, 0, 0, AUTO}
#define TRANSPOSE(S, AUTO, SUMMARY, LIMITS) \
  {"transpose.fwd." S, NL_OP_TRANSPOSE, NL_FWD, NL_CUDA, S, SUMMARY, LIMITS, TR_DTYPES, 0, 0, \
   NL_FP8_ALL, 0, AUTO}

#define LIMITS "any M; N <= 2^24; fp32, fp16, bf16; 16-byte packs when N and strides allow"
#define ST_LIMITS "any M; N x element size (x 2 with a residual) within a CTA's shared memory " \
  "(227 KB on sm_90: N <= 115712 bf16); fp32, fp16, bf16"
#define BR_LIMITS "N <= 2048 (bf16/fp16) or 1024 (fp32) with 16-byte packs, 256 / 256 without"
#define AUTO_LIMITS "as the variant it picks"
#define SLAB_LIMITS "sm_90; any M; N = C x a power of two, C <= 16 CTAs a cluster; 16-byte packs; " \
  "fp32, fp16, bf16 (y also fp8e4m3, fp8e5m2)"
#define TR_LIMITS "any M, N >= 1 (M, N < 2^31); x fp32, fp16, bf16, fp8; y and yt x's dtype or fp8"

#define NORM_ENTRIES(O, OP)                                                                        \
  FWD_YT(O, OP, "row", NULL, "one CTA per row, row held in registers (RMSNorm: read twice, the "     \
      "second time from L1, from rmsnorm.fwd.reload_min_n columns), more packs per thread where " \
      "that fits the grid in one wave (rmsnorm.fwd.one_wave_doublings); rows of single 16-bit "   \
      "elements in 16-byte packs between an unaligned head and tail where y sits as x", LIMITS,   \
      ROW_YT),                                                                                    \
  FWD_YT(O, OP, "blockrow", NULL, "a warp or less per row, rmsnorm.fwd.blockrow_block threads per "  \
      "CTA, shuffle reductions only; packs per thread: rmsnorm.fwd.blockrow_items (LayerNorm: "   \
      "layernorm.fwd.blockrow_items), or blockrow_group threads per row from "                    \
      "blockrow_group_min_m rows, doubled where that fits the grid in one wave "                  \
      "(rmsnorm.fwd.blockrow_wave_doublings)", BR_LIMITS, ROW_YT),                                \
  FWD(O, OP, "persistent", NULL, "grid = SMs x resident CTAs striding over rows, weight in "      \
      "registers once per CTA, the next rows in flight through cp.async (rmsnorm.fwd.stages)",    \
      LIMITS),                                                                                    \
  FWD(O, OP, "staged", NULL, "one CTA per row, the row copied to shared memory through "          \
      "cp.async (no packs held in registers: many rows per SM in flight), "                       \
      "rmsnorm.fwd.staged_items packs per thread", ST_LIMITS),                                    \
  FWD_YT(O, OP, "slab", NULL, "a cluster of CTAs per block of rmsnorm.fwd.slab_rows rows, each "   \
      "CTA a slab of their columns in shared memory (cp.async), the rows' sums exchanged over "   \
      "the cluster; y from the slab, yt transposed on chip (fused_tiled)", SLAB_LIMITS, SLAB_YT), \
  FWD_YT(O, OP, "auto", auto_fwd, "staged from rmsnorm.fwd.staged_min_n columns where it fits, "  \
      "blockrow for N <= rmsnorm.fwd.blockrow_max_n and rmsnorm.fwd.blockrow_min_m <= M <= "      \
      "rmsnorm.fwd.blockrow_max_m (below rmsnorm.fwd.row_min_n columns from "                     \
      "rmsnorm.fwd.narrow_min_m rows whatever M), persistent for M <= "                           \
      "rmsnorm.fwd.persistent_max_m from rmsnorm.fwd.persistent_min_n columns, row otherwise "    \
      "(LayerNorm: layernorm.fwd.narrow_min_m, row_min_n, persistent_max_m, and staged from "     \
      "layernorm.fwd.staged_min_waves of row's waves; add_rmsnorm: "                              \
      "add_rmsnorm.fwd.blockrow_max_n, narrow_min_m, staged up to "                               \
      "add_rmsnorm.fwd.staged_max_waves; with the chunked transposed copy never persistent)",     \
      AUTO_LIMITS, ROW_YT),                                                                       \
  BWD(O, OP, "row", TEMP | ATOMIC, NL_REDUCE_TEMP, NULL, "one CTA per row; dW through an M x N "  \
      "fp32 temp and a column-reduce kernel (the old design)", LIMITS),                           \
  BWD(O, OP, "blockrow", PARTIALS | ATOMIC, NL_REDUCE_PARTIALS, NULL, "a warp or less per row, "  \
      "rmsnorm.bwd.blockrow_block threads per CTA; (CTAs x N) fp32 partials + reduce kernel",     \
      BR_LIMITS),                                                                                 \
  BWD(O, OP, "partials", PARTIALS, NL_REDUCE_PARTIALS, NULL, "grid = SM count over contiguous "   \
      "row chunks, next rows in flight through cp.async, dW in registers, rows over "             \
      "rmsnorm.bwd.share_n shared by a cluster (sm_90); (SMs x N) partials + reduce", LIMITS),    \
  BWD(O, OP, "persistent", PARTIALS | ATOMIC, NL_REDUCE_PARTIALS, NULL, "grid = SMs x resident "  \
      "CTAs striding over rows, next rows in flight through cp.async, dW in registers, rows "     \
      "over rmsnorm.bwd.share_n shared by a cluster (sm_90); partials reduced after a grid "      \
      "barrier in the same kernel (rmsnorm.bwd.fused_reduce) or by the reduce kernel", LIMITS),   \
  BWD(O, OP, "auto", TEMP | PARTIALS | ATOMIC, 0, auto_bwd,                                       \
      "row below rmsnorm.bwd.partials_min_m rows up to rmsnorm.bwd.row_max_n columns, "           \
      "blockrow for N <= rmsnorm.bwd.blockrow_max_n and M <= rmsnorm.bwd.blockrow_max_m (or N "   \
      "<= rmsnorm.bwd.narrow_max_n and M <= rmsnorm.bwd.narrow_max_m), then persistent from "     \
      "rmsnorm.bwd.persistent_min_m rows (fp32 in 16-byte packs: partials up to "                 \
      "rmsnorm.bwd.fp32_partials_max_n), partials below; a requested reduction steers it to a "   \
      "variant that has one (temp: row; partials: not row; atomic: not partials; LayerNorm: "     \
      "layernorm.bwd.row_max_n, blockrow_max_n, narrow_max_n and narrow_max_m, and partials up "  \
      "to layernorm.bwd.partials_max_n columns for at most narrow_max_m rows; add_rmsnorm: "      \
      "add_rmsnorm.bwd.blockrow_max_n and narrow_max_n)", AUTO_LIMITS)

const nl_variant nl__cuda_variants[] = {
  NORM_ENTRIES("rmsnorm", NL_OP_RMSNORM),
  NORM_ENTRIES("layernorm", NL_OP_LAYERNORM),
  NORM_ENTRIES("add_rmsnorm", NL_OP_ADD_RMSNORM),
  TRANSPOSE("naive", NULL, "one element per thread, a 32 x 8 block per 32 x 32 tile: reads along "
            "x's rows, writes strided along yt's columns (the baseline)", TR_LIMITS),
  TRANSPOSE("tiled", NULL, "transpose.tile_m x transpose.tile_n tiles through shared memory "
            "(XOR-swizzled: no bank conflicts), 16-byte cp.async copies along x's rows and "
            "16-byte stores along yt's, cast and amax on the way", TR_LIMITS),
  TRANSPOSE("auto", auto_transpose, "tiled", AUTO_LIMITS),
};

const int nl__cuda_variant_count = (int)(sizeof nl__cuda_variants / sizeof nl__cuda_variants[0]);

#else

/* C has no empty arrays: one unused sentinel that the count excludes. */
const nl_variant nl__cuda_variants[] = {
  {NULL, 0, 0, NL_CUDA, NULL, NULL, NULL, 0, 0, 0, 0, 0, NULL},
};

const int nl__cuda_variant_count = 0;

const nlk_strategy *const nl__cuda_kernels[] = {NULL};
const nlk_strategy *const nl__cuda_transpose_kernels[] = {NULL};

#endif
