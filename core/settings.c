/*
 * settings.c: runtime settings on the context. Every dispatch threshold, kernel tuning knob
 * and harness default lives here as data, so experiments can sweep them
 * (nl.set("rmsnorm.fwd.blockrow_max_n", 512)).
 *
 * One table, one entry per setting: its key, the field of nl_knobs it lands in (and with it
 * its type: kernel tuning lands in nlk_fwd_tune / nlk_bwd_tune, which the kernels read from
 * nlk_norm), its default, range and doc, and the defaults that differ by GPU model. A launch
 * takes the values nl_set gave and, for the rest, the defaults of the GPU it runs on
 * (nl__knobs). The rmsnorm.* settings also drive add_rmsnorm and LayerNorm, which share its
 * kernels; a layernorm.* twin replaces one for LayerNorm where the best value differs.
 * docs/kernels.md has the measurements behind the defaults (normlab's are the H200's).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

enum kind { I32, I64, F64 };

typedef struct nl_setting_def {
  const char *key;
  size_t at;            /* offset of its field in nl_knobs */
  enum kind kind;       /* that field's type; I32 and I64 take integers only */
  double def, min, max;
  const char *doc;
  struct {
    const char *model;  /* a GPU whose name contains this takes `value` as its default */
    double value;
  } models[2];
} nl_setting_def;

#define AT(field, type) .at = offsetof(nl_knobs, field), .kind = type
#define N24 (1 << 24)
#define M12 1e12

static const nl_setting_def defs[] = {
  {.key = "cpu.threads", AT(cpu.threads, I32),
   .def = 0, .min = 0, .max = 4096,
   .doc = "CPU worker threads for kernels and harness (0: one per core)"},
  {.key = "cpu.persistent_min_m", AT(cpu.persistent_min_m, I64),
   .def = 16, .min = 1, .max = M12,
   .doc = "CPU auto (forward and backward): persistent from this many rows, row below"},
  {.key = "bench.warmup_ms", AT(bench.warmup_ms, F64),
   .def = 0, .min = 0, .max = 60000,
   .doc = "warm-up before timing (0: 300 ms on CUDA, enough to settle clocks; 50 ms on the CPU)"},
  {.key = "bench.batch_ms", AT(bench.batch_ms, F64),
   .def = 0, .min = 0, .max = 60000,
   .doc = "target time of one timed batch when reps are automatic (0: 20 ms CUDA, 30 ms CPU)"},
  {.key = "bench.batches", AT(bench.batches, I32),
   .def = 7, .min = 1, .max = 1000,
   .doc = "timed batches; the median is reported"},
  {.key = "bench.rotate_factor", AT(bench.rotate_factor, F64),
   .def = 4, .min = 0, .max = 64,
   .doc = "rotate mode: the buffer sets cycled cover at least this many times the L2 (CPU: LLC)"},
  {.key = "bench.max_sets", AT(bench.max_sets, I64),
   .def = 64, .min = 1, .max = 65536,
   .doc = "rotate mode: at most this many buffer sets; a cell whose sets stop short of rotate_factor x L2 finds part of its data in cache (tables name those cells)"},
  {.key = "cuda.pdl", AT(pdl, I32),
   .def = 0, .min = 0, .max = 1,
   .doc = "CUDA norm kernels: 1 launches them with programmatic dependent launch (sm_90), so each may start while the kernel before it in the stream drains, and waits for it before touching memory (the anchors do not)"},

  {.key = "rmsnorm.fwd.blockrow_max_n", AT(rms_fwd.blockrow_max_n, I64),
   .def = 1024, .min = 0, .max = N24, .models = {{"H100", 2048}},
   .doc = "CUDA auto forward: blockrow (a warp or less per row) for N up to this and M up to blockrow_max_m (0: never)"},
  {.key = "rmsnorm.fwd.blockrow_min_m", AT(rms_fwd.blockrow_min_m, I64),
   .def = 2048, .min = 1, .max = M12,
   .doc = "CUDA auto forward: blockrow from this many rows (rows narrower than row_min_n from narrow_min_m); fewer rows take a CTA each (row led blockrow by up to 44% from M = 1 to 1024 on an H100 at N >= 768, blockrow led at 4096)"},
  {.key = "rmsnorm.fwd.blockrow_max_m", AT(rms_fwd.blockrow_max_m, I64),
   .def = 4096, .min = 1, .max = M12,
   .doc = "CUDA auto forward: blockrow for M up to this (and N up to blockrow_max_n); row above, from row_min_n columns"},
  {.key = "rmsnorm.fwd.row_min_n", AT(rms_fwd.row_min_n, I64),
   .def = 768, .min = 1, .max = N24,
   .doc = "CUDA auto forward: rows narrower than this go to blockrow from narrow_min_m rows whatever M (a CTA per row has a warp or less: 8 threads at N = 64 bf16)"},
  {.key = "rmsnorm.fwd.many_row_min_n", AT(rms_fwd.many_row_min_n, I64),
   .def = 1024, .min = 1, .max = N24, .models = {{"H100", 768}},
   .doc = "CUDA auto forward, RMSNorm: row_min_n from blockrow_min_m rows (fewer rows, and add_rmsnorm, take row_min_n; H200 bf16, 8192-65536 rows: blockrow led row by 2.6-3.3% at N = 768, row led from 1024; below 2048 rows row led at 768 and 896 by 2-8%)"},
  {.key = "rmsnorm.fwd.narrow_min_m", AT(rms_fwd.narrow_min_m, I64),
   .def = 128, .min = 1, .max = M12, .models = {{"H100", 1}},
   .doc = "CUDA auto forward: rows narrower than row_min_n take blockrow from this many rows (H100 with blockrow_items 1: blockrow led row by 3-9% at M = 1 and 16 for N 64..512; with 2 packs row had led there by 2-9%)"},
  {.key = "rmsnorm.fwd.staged_min_n", AT(rms_fwd.staged_min_n, I64),
   .def = 32768, .min = 1, .max = N24,
   .doc = "CUDA auto forward: staged (the row in shared memory, read once) from this many columns where the row fits; row's looping kernel reads x twice there (H100 bf16: staged led by 11-114% at N = 32768 and 65536, row by up to 5% at 16384)"},
  {.key = "layernorm.fwd.row_min_n", AT(ln_fwd.row_min_n, I64),
   .def = 2048, .min = 1, .max = N24, .models = {{"H100", 768}},
   .doc = "CUDA auto forward, LayerNorm: rmsnorm.fwd.row_min_n's twin from rmsnorm.fwd.blockrow_min_m rows (fewer take rmsnorm's; H200 bf16, M = 16384 / 32768: blockrow led row by 18 / 22% at N = 768 and up to 5% at 1024; at 1024 rows row led by 4-13% at 768 and 1024)"},
  {.key = "layernorm.fwd.narrow_min_m", AT(ln_fwd.narrow_min_m, I64),
   .def = 1024, .min = 1, .max = M12, .models = {{"H100", 1}},
   .doc = "CUDA auto forward, LayerNorm: rmsnorm.fwd.narrow_min_m's twin (H200 bf16: row led blockrow by up to 19% at 128 rows of 64 to 1024 columns (10-19% but at 384 and 512: 0-1%), blockrow led by 0.5-9% at 1024 rows up to 512)"},
  {.key = "layernorm.fwd.staged_min_waves", AT(ln_fwd.staged_min_waves, F64),
   .def = 7, .min = 0, .max = 1e6, .models = {{"H100", 0}},
   .doc = "CUDA auto forward, LayerNorm, y in x's dtype: staged where row's CTAs (at layernorm.fwd.items packs) need at least this many waves (0: never; H200 bf16, 2048-32768 rows of 2048-16384 columns: row at 4 packs led staged by 2.5-4.6% up to 6.2 waves, staged led from 7.8, both ways between 9.5 and 12.4; H100: row led or tied everywhere)"},
  {.key = "layernorm.fwd.persistent_max_m", AT(ln_fwd.persistent_max_m, I64),
   .def = 0, .min = 0, .max = M12,
   .doc = "CUDA auto forward, LayerNorm: rmsnorm.fwd.persistent_max_m's twin (H100 bf16, 1 to 128 rows of 12288 and 16384 columns: persistent at 0.83-0.97x of the best, row or staged; 0: never)"},
  {.key = "layernorm.fwd.items", AT(ln_fwd.items, I32),
   .def = 4, .min = 0, .max = 8, .models = {{"H100", 2}},
   .doc = "CUDA forward, LayerNorm: rmsnorm.fwd.items from rmsnorm.fwd.blockrow_min_m rows (fewer keep RMSNorm's; its issue-bound rows pay their two reductions over twice the elements; H200, auto with 4 against 2 and staged_min_waves 7 against 3: bf16 +2.3-4.4% at 2048-8192 rows of 3072-8192 columns and 8192 x 1536 / 2048, fp16 / fp32 4096 x 4096 +7.2 / +4.1%, -2.4 / -3.5 / -4.4% at 2048 x 1536, 4096 x 1536 and 4096 x 2048 (4096 x 2048: 1.55 waves against 2.59), level at 12288 and 16384 columns, where 2 packs already gave 4)"},
  {.key = "layernorm.fwd.blockrow_items", AT(ln_fwd.blockrow_items, I32),
   .def = 1, .min = 1, .max = 8,
   .doc = "CUDA blockrow forward, LayerNorm: rmsnorm.fwd.blockrow_items below rmsnorm.fwd.blockrow_group_min_m rows; more rows keep RMSNorm's rule (H200 bf16 auto, 1 against 2: 2048 rows +15 / +6 / +5% at 64 / 128 / 256 columns, 4096 +4 / +5 / -1.5%, 8192 x 64 +4%, 8192 x 128 -2%, 512 and 1024 within 1%; from 16384 rows 1 lost up to 19% at 64 to 256 columns)"},
  {.key = "add_rmsnorm.fwd.blockrow_max_n", AT(add_fwd.blockrow_max_n, I64),
   .def = 1024, .min = 0, .max = N24,
   .doc = "CUDA auto forward, add_rmsnorm: rmsnorm.fwd.blockrow_max_n's twin (H100 bf16, M = 4096: row and staged led blockrow by 5-6% at N = 1536 and 2048, where RMSNorm's blockrow leads)"},
  {.key = "add_rmsnorm.fwd.narrow_min_m", AT(add_fwd.narrow_min_m, I64),
   .def = 1024, .min = 1, .max = M12, .models = {{"H100", 1}},
   .doc = "CUDA auto forward, add_rmsnorm: rmsnorm.fwd.narrow_min_m's twin (H200 bf16: row led blockrow by 12-16% at 128 rows of 64 to 256 columns, tied at 384, 7% behind at 512; blockrow led or tied at 1024 rows up to 512)"},
  {.key = "add_rmsnorm.fwd.fp8_max_threads", AT(add_fwd.fp8_max_threads, I32),
   .def = 0, .min = 0, .max = 1024,
   .doc = "CUDA row forward, add_rmsnorm with an fp8 y: rmsnorm.fwd.fp8_max_threads's twin (bf16, 128 against 0: H200 -0.2..-4% at 4096 and 32768 rows of 8192 and 16384 columns, H100 up to -2%)"},
  {.key = "add_rmsnorm.fwd.staged_max_waves", AT(add_fwd.staged_max_waves, F64),
   .def = 2, .min = 0, .max = 64,
   .doc = "CUDA auto forward, add_rmsnorm: staged where row's CTAs, after its one-wave doublings, need more than one wave and at most this many, and staged's fit one wave (0: never; measurements in docs/kernels.md, \"One wave of CTAs\")"},
  {.key = "rmsnorm.fwd.blockrow_block", AT(fwd.blockrow_block, I32),
   .def = 64, .min = 32, .max = 1024, .models = {{"H100", 128}},
   .doc = "CUDA blockrow forward: threads per CTA, rounded up to a power of two and capped by the kernel's register budget (rows per CTA = this / threads per row; H200 bf16, 64 against 256: LayerNorm +1-5% from 16384 rows at 256 to 1024 columns, add_rmsnorm up to +2% there, RMSNorm within -1.4..+1.5%)"},
  {.key = "rmsnorm.fwd.blockrow_items", AT(fwd.blockrow_items, I32),
   .def = 2, .min = 1, .max = 8, .models = {{"H100", 1}},
   .doc = "CUDA blockrow forward: target 16-byte packs per thread per row below blockrow_group_min_m rows (more where a row would need more than a warp; H100 at M = 4096, N 64 and 128: 1 led 2 by 6% and 5%)"},
  {.key = "rmsnorm.fwd.blockrow_group", AT(fwd.blockrow_group, I32),
   .def = 0, .min = 0, .max = 32, .models = {{"H100", 4}},
   .doc = "CUDA blockrow forward: from blockrow_group_min_m rows, this many threads per row (a power of two; more where a thread would hold over 8 packs; 0: blockrow_items whatever M; H100 at M = 16384 and 32768, N 64..256: 4 led by 5-14%)"},
  {.key = "rmsnorm.fwd.blockrow_group_min_m", AT(fwd.blockrow_group_min_m, I64),
   .def = 16384, .min = 1, .max = M12,
   .doc = "CUDA blockrow forward: rows from which blockrow_group sets the threads per row"},
  {.key = "rmsnorm.fwd.persistent_max_m", AT(rms_fwd.persistent_max_m, I64),
   .def = 128, .min = 0, .max = M12,
   .doc = "CUDA auto forward below staged_min_n columns: persistent for up to this many rows from persistent_min_n columns, row otherwise (bf16, 1 to 128 rows of 12288 and 16384 columns: persistent led row by 6-39% on an H200, by 2-10% on an H100; 0: never)"},
  {.key = "rmsnorm.fwd.persistent_min_n", AT(rms_fwd.persistent_min_n, I64),
   .def = 12288, .min = 1, .max = N24,
   .doc = "CUDA auto forward: persistent from this many columns (for up to persistent_max_m rows; at 8192 row led by 4-16% on an H200)"},
  {.key = "rmsnorm.fwd.items", AT(fwd.items, I32),
   .def = 2, .min = 0, .max = 8,
   .doc = "CUDA forward: target 16-byte packs per thread per row (1, 2, 4, 8); fewer threads per row as it grows; a CTA per row of single elements (N not a multiple of 16 bytes) takes as many elements as these packs hold, at most 8 (row cuts rows of 16-bit elements into 16-byte packs where it can: rmsnorm.fwd.skew_items); 0: row and persistent run the two-pass looping kernel"},
  {.key = "rmsnorm.fwd.fp8_items", AT(fwd.fp8_items, I32),
   .def = 4, .min = 1, .max = 8,
   .doc = "CUDA forward with an fp8 y: at least this many 16-byte packs per thread per row (the fp8 epilogue's per-thread cost spread over more elements)"},
  {.key = "rmsnorm.fwd.fp8_max_threads", AT(fwd.fp8_max_threads, I32),
   .def = 128, .min = 0, .max = 1024,
   .doc = "CUDA row forward with an fp8 y: packs per thread doubled (up to 8) until a row's CTA has at most this many threads; 0: off (8 packs against 4: H200 rmsnorm +8-18% and layernorm +10-16% at 4096 and 32768 rows of 8192 and 16384 bf16 columns, +8-38% at 4096 and 8192 fp32 columns but rmsnorm 4096 x 4096 (even); H100 bf16 32768 x 8192 rmsnorm +2.5%, layernorm +11%, 32768 x 16384 +11% / +9%, 4096 x 16384 +7% / +6%, up to 2% lost at 4096 x 8192 rmsnorm and by fp32 x; from fp8_many_min_m rows fp8_many_max_threads instead; add_rmsnorm has its own, add_rmsnorm.fwd.fp8_max_threads)"},
  {.key = "rmsnorm.fwd.fp8_many_max_threads", AT(fwd.fp8_many_max_threads, I32),
   .def = 64, .min = 1, .max = 1024, .models = {{"H100", 128}},
   .doc = "CUDA row forward with an fp8 y: fp8_max_threads from fp8_many_min_m rows, where that is on (H200 bf16 auto, 64 against 128, 8 packs a thread against 4 at 4096 columns: rmsnorm +2 / +5 / +6% at 16384 / 32768 / 65536 rows, layernorm +8 / +9 / +9%, fp32 layernorm 2048 columns +5 / +11%; 3072 columns within -1..+1.4%; the H100, at 99% with 128 there, not measured)"},
  {.key = "rmsnorm.fwd.fp8_many_min_m", AT(fwd.fp8_many_min_m, I64),
   .def = 16384, .min = 1, .max = M12,
   .doc = "CUDA row forward with an fp8 y: rows from which fp8_many_max_threads caps a row's CTA (H200 bf16, 64 against 128: at 8192 rows -3..+3%, at 4096 -4..-10%: fewer rows want the threads)"},
  {.key = "rmsnorm.fwd.block", AT(fwd.block, I32),
   .def = 1024, .min = 32, .max = 1024,
   .doc = "CUDA persistent forward: preferred threads per CTA (rows per CTA = block / threads per row)"},
  {.key = "rmsnorm.fwd.ctas_per_sm", AT(fwd.ctas_per_sm, I32),
   .def = 0, .min = 0, .max = 64,
   .doc = "CUDA persistent forward: CTAs per SM (0: as many as fit)"},
  {.key = "rmsnorm.fwd.loop_ctas_per_sm", AT(fwd.loop_ctas_per_sm, I32),
   .def = 0, .min = 0, .max = 64, .models = {{"H100", 2}},
   .doc = "CUDA forward looping kernel (rows wider than any register layout, or items = 0): CTAs per SM (0: as many as fit)"},
  {.key = "rmsnorm.fwd.stages", AT(fwd.stages, I32),
   .def = 3, .min = 2, .max = 4,
   .doc = "CUDA persistent forward: rows each thread has in flight through cp.async, the current one included"},
  {.key = "rmsnorm.fwd.early_weight_max_n", AT(fwd.early_weight_max_n, I64),
   .def = 4096, .min = 0, .max = N24, .models = {{"H100", 0}},
   .doc = "CUDA row and blockrow rmsnorm forward: for N up to this the weight is loaded with x and held in registers across the reduction; wider rows (and add_rmsnorm) read it after the reduction, from L1 (0: never early)"},
  {.key = "rmsnorm.fwd.reload_min_n", AT(fwd.reload_min_n, I64),
   .def = 4096, .min = 0, .max = N24, .models = {{"H100", 0}},
   .doc = "CUDA row and blockrow rmsnorm forward: from this many columns x is read twice, the second time from L1, instead of held in registers across the reduction (0: never; takes precedence over early_weight_max_n)"},
  {.key = "rmsnorm.fwd.reload_min_m", AT(fwd.reload_min_m, I64),
   .def = 4096, .min = 1, .max = M12,
   .doc = "CUDA row and blockrow rmsnorm forward: reload_min_n's second read of x only from this many rows (H200 bf16, N 4096..16384: the held row led by up to 20% at 16 to 1024 rows, reload by 0.5-11% from 4096 rows but 4096 x 4096, -2%; 2048 and 3072 rows mixed)"},
  {.key = "rmsnorm.fwd.fixed_lanes_max", AT(fwd.fixed_lanes_max, I32),
   .def = 32, .min = 0, .max = 32,
   .doc = "CUDA row, blockrow and persistent's one-row fallback, 16-byte packs, y in x's dtype, the weight read after the reduction (not early_weight_max_n's), up to 4 packs a thread: rows of up to this many threads (a power of two, 4 to 32) run a kernel compiled for that count (constant shifts, a shuffle-only sum, no group read from the arguments); 0: never (bf16, M = 4096, N 64..1024: LayerNorm +4-7% on an H100, +2-8% on an H200; RMSNorm +2-3% at N 64 / 128 on an H100, +4-6% on an H200)"},
  {.key = "rmsnorm.fwd.one_wave_doublings", AT(fwd.one_wave_doublings, I32),
   .def = 2, .min = 0, .max = 3,
   .doc = "CUDA row forward, a CTA per row of 16-byte packs or single elements: where the M CTAs need more than one wave of resident CTAs at rmsnorm.fwd.items packs per thread, the fewest doublings of the packs, up to this many (at most 8 packs), that fit one wave, if any (0: off; a part-filled second wave costs a whole CTA lifetime: H100 bf16, 512-2048 rows of 2048-12288 columns, +1-12% where it fired)"},
  {.key = "rmsnorm.fwd.one_wave_min_block", AT(fwd.one_wave_min_block, I32),
   .def = 64, .min = 32, .max = 1024,
   .doc = "CUDA row and blockrow forward: one_wave_doublings and blockrow_wave_doublings stop before a CTA of fewer threads than this (H100 bf16, one-warp CTAs in one wave against two or more waves of 64 or 128 threads: 4096 x 1024 -2.8%, 3072 x 2048 -4%, 4096 x 2048 -3%)"},
  {.key = "rmsnorm.fwd.blockrow_wave_doublings", AT(fwd.blockrow_wave_doublings, I32),
   .def = 1, .min = 0, .max = 3, .models = {{"H100", 0}},
   .doc = "CUDA blockrow forward: one_wave_doublings' twin, where its CTAs (M / rows per CTA) need more than one wave at the wanted packs: packs doubled (half the threads a row, twice the rows a CTA) up to this many times, the fewest that fit one wave, if any (0: off; H200 bf16, one doubling where it fired: 32768 x 128 RMSNorm +10%, LayerNorm +14%, add_rmsnorm +9%, 16384 x 256 +4-5%; a second lost up to 15%)"},
  {.key = "rmsnorm.fwd.blockrow_wave_min_group", AT(fwd.blockrow_wave_min_group, I32),
   .def = 4, .min = 1, .max = 32,
   .doc = "CUDA blockrow forward: blockrow_wave_doublings stop before rows of fewer threads than this (H200 bf16, 65536 x 64, 4 -> 2 threads a row in one wave: RMSNorm -5%, LayerNorm -3%, add_rmsnorm -15%)"},
  {.key = "rmsnorm.fwd.skew_items", AT(fwd.skew_items, I32),
   .def = 4, .min = 1, .max = 8,
   .doc = "CUDA row forward on rows of single 16-bit elements cut at x's 16-byte boundaries into a head, 16-byte packs and a tail: target packs per thread (1, 2, 4, 8; H100 bf16, M = 4096 / 32768, N = 4095 / 8191: 4 led 2 by 7-21%, 2 led 4 by up to 7% at 1023 and 2047 columns)"},
  {.key = "rmsnorm.fwd.skew_wide_n", AT(fwd.skew_wide_n, I64),
   .def = 8192, .min = 0, .max = N24,
   .doc = "CUDA row forward, the same cut rows: 8 packs per thread from this N (0: never; H100 bf16 at 16383 columns: layernorm +12%, rmsnorm +1-2% against 4)"},
  {.key = "rmsnorm.fwd.staged_items", AT(fwd.staged_items, I32),
   .def = 4, .min = 1, .max = 64,
   .doc = "CUDA staged forward: 16-byte packs per thread (threads per CTA = the row's packs / this, 32 to 1024)"},

  {.key = "rmsnorm.fwd.slab_rows", AT(fwd.slab_rows, I32),
   .def = 32, .min = 16, .max = 64,
   .doc = "CUDA slab forward: rows per cluster block, a power of two (the run of a fused yt row: 32 rows of fp8 fill a 32-byte sector)"},
  {.key = "rmsnorm.fwd.slab_cols", AT(fwd.slab_cols, I32),
   .def = 1024, .min = 16, .max = 65536,
   .doc = "CUDA slab forward: the widest slab of columns a CTA holds before the cluster grows (N = CTAs x a power of two, at most 16 CTAs)"},
  {.key = "rmsnorm.fwd.slab_block", AT(fwd.slab_block, I32),
   .def = 256, .min = 32, .max = 512,
   .doc = "CUDA slab forward: threads per CTA, a power of two (slab_rows to 32 x slab_rows)"},

  {.key = "transpose.tile_m", AT(tr.tile_m, I32),
   .def = 128, .min = 1, .max = 1024, .models = {{"H100", 64}},
   .doc = "tiled transposes (transpose.fwd.tiled, the external transposed copy): rows of x per tile, a power of two; the run of a yt row one tile writes"},
  {.key = "transpose.tile_n", AT(tr.tile_n, I32),
   .def = 128, .min = 1, .max = 1024,
   .doc = "tiled transposes: columns of x per tile (yt rows per tile), a power of two; the CUDA tile of tile_m x tile_n output elements sits in shared memory (from 128 bytes of output per tile row its XOR swizzle leaves no bank conflicts)"},

  {.key = "transpose.keep_max_mb", AT(tr.keep_max_mb, I32),
   .def = 96, .min = 0, .max = 1 << 20,
   .doc = "CUDA external transposed copy: an fp8 y of up to this many MB is stored for L2 to keep (evict_last) and the transpose reads it from there; a larger one streams (H100, y of 16-64 MB: +3-8%; 128 MB and more: within 1%)"},
  {.key = "transpose.chunk_tile_div", AT(tr.chunk_tile_div, I32),
   .def = 32, .min = 0, .max = 1 << 20,
   .doc = "CUDA chunked transposed copy: its tiles are at least N / this many columns wide (the power of two at or below, up to 1024; 0: transpose.tile_n), since a tile CTA has the row kernel's block, which grows with the row (2026-11-27, H100, 32768 rows, 16 MB chunks, tile columns 128 / 256 / 512: 2048 81 / 76 / 57% of the roofline, 4096 82 / 82 / 76%, 8192 79 / 80 / 77%, 16384 71 / 74 / 78%)"},
  {.key = "transpose.chunked_min_n", AT(tr_way.chunked_min_n, I64),
   .def = 0, .min = 0, .max = N24, .models = {{"H100", 2048}},
   .doc = "CUDA norm forwards with an fp8 y and the default transposed copy: chunked from this many columns up to transpose.chunked_max_n (RMSNorm; layernorm.fwd.chunked_max_n, add_rmsnorm.fwd.chunked_max_n) where the strategy takes it, its first of fused_tiled, external, strided otherwise (2026-11-27, bf16 auto at 32768 rows, chunked at 16 MB chunks / external, GB/s: H100 2048 2406 / 2337, 4096 2434 / 2312, 8192 2349 / 2325 (one call), 1024 and 16384 5-9% behind; H200 even at 4096 (2896 / 2883), 5-34% behind elsewhere; 2026-11-28, its widened tiles: 1-2% ahead from 4096 columns, behind at 4096 rows and below 4096 columns)"},
  {.key = "transpose.chunked_max_n", AT(tr_way.chunked_max_n, I64),
   .def = 0, .min = 0, .max = N24, .models = {{"H100", 8192}},
   .doc = "CUDA RMSNorm forwards: the widest rows whose fp8 y takes the chunked transposed copy by default (0: never)"},
  {.key = "layernorm.fwd.chunked_max_n", AT(tr_way.ln_chunked_max_n, I64),
   .def = 0, .min = 0, .max = N24,
   .doc = "CUDA LayerNorm forwards: transpose.chunked_max_n's twin (2026-11-27, H100, bf16 auto, chunked / external at 32768 / 4096 rows: 2048 columns +0.8% / +1.4%, 4096 +3.2% / -1.8%, 8192 -2.5% / +2.8%, 1024 and 16384 -4% to -12%: external kept)"},
  {.key = "add_rmsnorm.fwd.chunked_max_n", AT(tr_way.add_chunked_max_n, I64),
   .def = 0, .min = 0, .max = N24,
   .doc = "CUDA add_rmsnorm forwards: transpose.chunked_max_n's twin (2026-11-27, H100, bf16 auto, chunked / external at 32768 / 4096 rows: 2048 columns +2.5% / -5.6%, 4096 +1.1% / -0.2%, 8192 -1.0% / +3.0%, 1024 and 16384 -2% to -11%: external kept)"},
  {.key = "transpose.chunk_kb", AT(tr.chunk_kb, I32),
   .def = 16384, .min = 1, .max = 1 << 22,
   .doc = "CUDA chunked transposed copy: the KB of fp8 y per chunk of rows (whole tiles of transpose.tile_m rows, at least one); a chunk's y stays in L2 until the next launch's tiles read it"},

  {.key = "rmsnorm.bwd.blockrow_max_n", AT(rms_bwd.blockrow_max_n, I64),
   .def = 256, .min = 0, .max = N24, .models = {{"H100", 128}},
   .doc = "CUDA auto backward: blockrow for N up to this and M up to blockrow_max_m (bf16, H200: blockrow led at 1024 and 4096 rows of 64 to 256 columns, by 0.6-22%; H100: by 8% at 4096 x 128, partials and persistent by 6% at 4096 x 192 and 256; 0: never)"},
  {.key = "rmsnorm.bwd.blockrow_max_m", AT(rms_bwd.blockrow_max_m, I64),
   .def = 4096, .min = 1, .max = M12,
   .doc = "CUDA auto backward: blockrow for M up to this (and N up to blockrow_max_n)"},
  {.key = "rmsnorm.bwd.narrow_max_n", AT(rms_bwd.narrow_max_n, I64),
   .def = 64, .min = 0, .max = N24, .models = {{"H100", 512}},
   .doc = "CUDA auto backward: blockrow also for N up to this when M is at most narrow_max_m (H100, 1024 rows: blockrow led partials by 22% at N = 384 and 512, partials led from 768 and at 4096 rows; H200, 16384 rows of 64 columns: blockrow led by 21%, partials from 96; 0: never)"},
  {.key = "rmsnorm.bwd.narrow_max_m", AT(rms_bwd.narrow_max_m, I64),
   .def = 16384, .min = 1, .max = M12, .models = {{"H100", 1024}},
   .doc = "CUDA auto backward: the rows up to which blockrow takes N up to narrow_max_n"},
  {.key = "rmsnorm.bwd.blockrow_block", AT(bwd.blockrow_block, I32),
   .def = 256, .min = 32, .max = 1024,
   .doc = "CUDA blockrow backward: threads per CTA, rounded up to a power of two and capped by the kernel's register budget (one dW partial row per CTA)"},
  {.key = "rmsnorm.bwd.partials_min_m", AT(rms_bwd.partials_min_m, I64),
   .def = 256, .min = 1, .max = M12,
   .doc = "CUDA auto backward: row below this many rows up to row_max_n columns (a CTA per row: at M = 128 it led the grid-wide strategies by 11-39% on an H100); blockrow, partials or persistent from here"},
  {.key = "rmsnorm.bwd.row_max_n", AT(rms_bwd.row_max_n, I64),
   .def = 16384, .min = 0, .max = N24, .models = {{"H100", 12288}},
   .doc = "CUDA auto backward: row below partials_min_m rows only up to this many columns; wider rows take partials (row's M x N fp32 temp and column pass: at 1 to 128 rows partials led by 3x at N = 32768 on an H100 and by 5-6% at 16384, row by 2-15% up to 12288)"},
  {.key = "rmsnorm.bwd.persistent_min_m", AT(rms_bwd.persistent_min_m, I64),
   .def = 128, .min = 1, .max = M12,
   .doc = "CUDA auto backward above blockrow_max_n: persistent from this many rows, partials below (H100 bf16, M = 128 and 1024: persistent led partials by up to 5% from N = 1536, within 0.8% of it below, and 2.6% behind at 1024 x 65536; the same for LayerNorm and add_rmsnorm; H200 bf16: by 0.3-5% from N = 12288 at 128 and 1024 rows, within 0.4% below)"},
  {.key = "layernorm.bwd.blockrow_max_n", AT(ln_bwd.blockrow_max_n, I64),
   .def = 128, .min = 0, .max = N24,
   .doc = "CUDA auto backward, LayerNorm: rmsnorm.bwd.blockrow_max_n's twin (bf16, M = 4096: H100, persistent led blockrow by 4.5% / 5% at N = 192 / 256, blockrow led by 9% at 128; H200, blockrow led by 8-14% at 1024 and 4096 rows of 64 to 128 columns, persistent by 5% at 4096 x 192 / 256)"},
  {.key = "layernorm.bwd.narrow_max_n", AT(ln_bwd.narrow_max_n, I64),
   .def = 512, .min = 0, .max = N24,
   .doc = "CUDA auto backward, LayerNorm: rmsnorm.bwd.narrow_max_n's twin, with layernorm.bwd.narrow_max_m (bf16, 1024 rows: blockrow led by 4-8% at N = 192 to 512 on an H200, by up to 22% at 384 / 512 on an H100)"},
  {.key = "layernorm.bwd.narrow_max_m", AT(ln_bwd.narrow_max_m, I64),
   .def = 1024, .min = 1, .max = M12,
   .doc = "CUDA auto backward, LayerNorm: rmsnorm.bwd.narrow_max_m's twin, the rows up to which blockrow takes N up to layernorm.bwd.narrow_max_n and partials N up to layernorm.bwd.partials_max_n (H200 bf16, 192 to 512 columns: persistent or partials led blockrow by 5-21% at 4096 rows and by 30-40% at 16384)"},
  {.key = "layernorm.bwd.partials_max_n", AT(ln_bwd.partials_max_n, I64),
   .def = 3072, .min = 0, .max = N24, .models = {{"H100", 0}},
   .doc = "CUDA auto backward, LayerNorm: partials (not persistent) for N up to this past the blockrow bands when M is at most layernorm.bwd.narrow_max_m (H200 bf16, 1024 rows: partials led persistent by 11% / 4% / 9% at N = 1536 / 2048 / 3072, tied at 4096, behind by 5-11% at 5120 to 12288; 0: never; the H100 is not measured past 1024 x 1536, where partials led by 8%)"},
  {.key = "layernorm.bwd.row_max_n", AT(ln_bwd.row_max_n, I64),
   .def = 8192, .min = 0, .max = N24,
   .doc = "CUDA auto backward, LayerNorm: rmsnorm.bwd.row_max_n's twin (row's M x N fp32 temps are two, dW's and dB's; bf16, M = 1 to 128: partials or persistent led row by 8-18% at N = 12288 and 16384 on an H100, by 1-18% on an H200, row led by 10-15% at 8192 on an H100)"},
  {.key = "add_rmsnorm.bwd.blockrow_max_n", AT(add_bwd.blockrow_max_n, I64),
   .def = 0, .min = 0, .max = N24,
   .doc = "CUDA auto backward, add_rmsnorm: rmsnorm.bwd.blockrow_max_n's twin (H100 bf16, M = 4096: partials and persistent led blockrow by 5-12% at N = 64, 192 and 256 and by 0.7-1.7% at 96 and 128)"},
  {.key = "add_rmsnorm.bwd.narrow_max_n", AT(add_bwd.narrow_max_n, I64),
   .def = 64, .min = 0, .max = N24, .models = {{"H100", 128}},
   .doc = "CUDA auto backward, add_rmsnorm: rmsnorm.bwd.narrow_max_n's twin (H100 bf16, M = 1024: blockrow level with partials up to N = 128, 3-7% behind from 192 to 512; H200 bf16: blockrow led persistent by 9-16% at 4096 and 16384 rows of 64 columns, persistent led by 9-14% at 96 and 128)"},
  {.key = "add_rmsnorm.bwd.whole_warps", AT(add_bwd.whole_warps, I32),
   .def = 0, .min = 0, .max = 1,
   .doc = "CUDA persistent backward, add_rmsnorm: rmsnorm.bwd.whole_warps' twin (bf16, 1 against 0: H100 within 0.4% at 4096 and 32768 rows of 3072 to 12288 columns; H200 at 4 packs -3% to -6% at 3072 columns and at 32768 x 5120, +1.5-2% elsewhere)"},
  {.key = "rmsnorm.bwd.fp32_partials_max_n", AT(rms_bwd.fp32_partials_max_n, I64),
   .def = 8192, .min = 0, .max = N24,
   .doc = "CUDA auto backward, fp32 activations in 16-byte packs: partials instead of persistent up to this N (0: never; rows of single fp32 elements take persistent, which led partials by 27-59% at 1023 and 4095 columns on an H100)"},
  {.key = "rmsnorm.bwd.items", AT(bwd.items, I32),
   .def = 4, .min = 1, .max = 8, .models = {{"H100", 2}},
   .doc = "CUDA backward: target 16-byte packs per thread per row (1, 2, 4, 8)"},
  {.key = "layernorm.bwd.items", AT(ln_bwd.items, I32),
   .def = 2, .min = 1, .max = 8,
   .doc = "CUDA backward, LayerNorm: rmsnorm.bwd.items' twin; rows that 2 packs a thread do not fit in one CTA take 4, with dB's sums in shared memory (H200 bf16, persistent, 2026-11-27: 2 led 4 by 3-19% at 4096 and 32768 rows of 1024 ... 8192 columns, but for 32768 x 1024 (4 by 0.6%); H100: 2 led by 7-11% at 4096 and 8192 columns)"},
  {.key = "rmsnorm.bwd.held_items", AT(bwd.held_items, I32),
   .def = 4, .min = 1, .max = 8,
   .doc = "CUDA persistent and partials backward, rows of single 16-bit elements (N, a stride or a pointer off 16 bytes): target elements per thread per row (1, 2, 4, 8), the next row's held in registers (H100 bf16, M = 4096 / 16384, N = 500 ... 2047: 4 led 8 by 2-10% and 2 by 12-25%; a row that needs more per thread takes more)"},
  {.key = "rmsnorm.bwd.block", AT(bwd.block, I32),
   .def = 512, .min = 32, .max = 1024,
   .doc = "CUDA persistent and partials backward: preferred threads per CTA"},
  {.key = "rmsnorm.bwd.ctas_per_sm", AT(bwd.ctas_per_sm, I32),
   .def = 0, .min = 0, .max = 64,
   .doc = "CUDA persistent backward: CTAs per SM (0: as many as fit)"},
  {.key = "rmsnorm.bwd.loop_ctas_per_sm", AT(bwd.loop_ctas_per_sm, I32),
   .def = 2, .min = 0, .max = 64,
   .doc = "CUDA persistent backward's looping kernel (rows wider than any register layout): CTAs per SM (0: as many as fit)"},
  {.key = "rmsnorm.bwd.split_min_n", AT(bwd.split_min_n, I64),
   .def = 32768, .min = 0, .max = N24,
   .doc = "CUDA persistent and partials backward, 16-bit rows wider than any register layout: from this N a row-reduction kernel and a column kernel (dW in registers) replace the looping kernel (0: never); rows whose dW outgrows shared memory always take them"},
  {.key = "rmsnorm.bwd.fused_reduce", AT(bwd.fused_reduce, I32),
   .def = 0, .min = 0, .max = 1,
   .doc = "CUDA persistent backward: 1 reduces dW in the same kernel after a grid barrier, 0 launches the reduce kernel"},
  {.key = "rmsnorm.bwd.cluster", AT(bwd.cluster, I32),
   .def = 1, .min = 1, .max = 8,
   .doc = "CUDA persistent and partials backward (sm_90): CTAs per thread-block cluster, which sum their dW through distributed shared memory before writing one partial row per cluster (1: a partial row per CTA)"},
  {.key = "rmsnorm.bwd.share_n", AT(bwd.share_n, I64),
   .def = 16384, .min = 0, .max = N24, .models = {{"H100", 12288}},
   .doc = "CUDA persistent and partials backward (sm_90), 16-bit rows: rows of more columns than this are shared by a thread-block cluster of the fewest CTAs that leaves each at most this many (within rmsnorm.bwd.share_max), held in registers; the CTAs exchange each row's sum through distributed shared memory and write one partial row (0: never; rmsnorm.bwd.cluster does not apply to shared rows). Rows of single 16-bit elements are shared past 4096 columns whatever the value but 0, in uneven slices (H100 2026-11-27, 12288 against 8192, auto bf16 at 4096 / 32768 rows: RMSNorm +13% / +20% and add_rmsnorm +9% at 24576 columns, every other width from 12288 to 32768 within -1.2% .. +1.1%)"},
  {.key = "layernorm.bwd.share_n", AT(ln_bwd.share_n, I64),
   .def = 16384, .min = 0, .max = N24, .models = {{"H100", 12288}},
   .doc = "CUDA persistent and partials backward (sm_90), LayerNorm's 16-bit rows: rmsnorm.bwd.share_n's twin (2026-11-27, bf16 auto at 4096 / 32768 rows against 8192: H200 with 16384 +20-29% at 12288 columns, +15-21% at 16384, +31-36% at 24576, +21-26% at 32768; H100 with 12288 +12% at 12288, +27-30% at 24576, even at 16384, where 16384 (unshared) measured +2% / -8%)"},
  {.key = "layernorm.bwd.w32_share_n", AT(ln_bwd.w32_share_n, I64),
   .def = 8192, .min = 0, .max = N24,
   .doc = "CUDA persistent and partials backward (sm_90), LayerNorm's 16-bit rows with fp32 weights: layernorm.bwd.share_n in their place. Rows shared at 2 packs a thread hold fp32 weights in registers (rmsnorm.bwd.float_weights), where unshared rows of 3-4 packs read them from L1 twice a row (2026-11-27, auto bf16 at 4096 / 32768 rows, 8192 against 12288 / 16384: H200 +17% / +12% at 12288 columns, +45% / +42% at 16384 against 16384 (32768 x 16384 2476 -> 3520), +18% / +18% at 24576; H100 +26% / +22% at 12288 (32768 x 12288 2315 -> 2813), +43% / +35% at 16384 against 16384, +22% / +20% at 24576. RMSNorm with fp32 weights lost 1-12% by the same change on the H200 and keeps rmsnorm.bwd.share_n)"},
  {.key = "rmsnorm.bwd.fp32_share_n", AT(bwd.fp32_share_n, I64),
   .def = 8192, .min = 0, .max = N24,
   .doc = "CUDA persistent and partials backward (sm_90): rmsnorm.bwd.share_n for fp32 rows"},
  {.key = "rmsnorm.bwd.share_max", AT(bwd.share_max, I32),
   .def = 4, .min = 2, .max = 8,
   .doc = "CUDA persistent and partials backward (sm_90): the most CTAs a cluster shares a row among (rounded up to a power of two), unless a CTA's registers cannot hold the wider slice: then 8"},
  {.key = "rmsnorm.bwd.grid_sms", AT(bwd.grid_sms, I32),
   .def = 0, .min = 0, .max = 1 << 16, .models = {{"H100", 128}},
   .doc = "CUDA persistent and partials backward: SMs their grid spans (0: all of them; more than the GPU has: all), but for rows shared by a cluster, which take every cluster the GPU holds (H100 at 128: +1-5% at N <= 8192, shared rows -2-4%)"},
  {.key = "rmsnorm.bwd.reduce_pdl", AT(bwd.reduce_pdl, I32),
   .def = 1, .min = 0, .max = 1,
   .doc = "CUDA backward (sm_90): 1 launches the dW reduce kernel with programmatic dependent launch, queued while the main kernel drains (the pipelined kernel lets it launch once its rows are done; H100, M = 4096, bf16, against 0 in the same build: rmsnorm +0.4-2.4%, layernorm +0.1-3.1%); 0: an ordinary launch"},
  {.key = "rmsnorm.bwd.whole_warps", AT(bwd.whole_warps, I32),
   .def = 1, .min = 0, .max = 1,
   .doc = "CUDA persistent backward, 16-byte packs: 1 gives a row whose packs need a thread count that is not a power of two (5120 or 12288 bf16 columns) a CTA of that many threads rounded up to whole warps, one row a CTA; 0 rounds its group up to a power of two, whose last lanes idle (bf16, 4096 and 32768 rows, 1 against 0: H100 RMSNorm +3-6% at 3072 and 12288 columns, LayerNorm +4-10% at 3072 to 12288, add_rmsnorm within 0.4%; H200 RMSNorm +3-13% at 3072 to 6144, LayerNorm at its 2 packs +7-20%; powers of two unchanged; add_rmsnorm takes add_rmsnorm.bwd.whole_warps)"},
  {.key = "rmsnorm.bwd.scalar_lead", AT(bwd.scalar_lead, I32),
   .def = 1, .min = 0, .max = 2, .models = {{"H100", 2}},
   .doc = "CUDA persistent and partials backward, 16-byte packs (both ops): who stages a row's rstd (and mean) in shared memory: 1 one lane a warp, the others reading its slot after __syncwarp; 0 every lane its own copy; 2 one lane in rows shared by a cluster, every lane elsewhere (2026-11-27, bf16 auto, 1 against 0: H200 LayerNorm +4-9% at 4096 and 32768 rows of 1024 to 16384 columns, RMSNorm -2% .. +1.4%; H100 LayerNorm -6-7% at 32768 x 4096 and 8192, +3-5% on rows shared by a cluster, RMSNorm -1% .. +3%)"},
  {.key = "rmsnorm.bwd.float_weights", AT(bwd.float_weights, I32),
   .def = 1, .min = 0, .max = 2, .models = {{"H100", 2}},
   .doc = "CUDA persistent and partials backward, 16-bit x in 16-byte packs, 1 or 2 a thread (both ops): 1 holds a thread's weights as fp32 for the whole kernel, 0 as packs of x's dtype converted (and their kind tested) twice a row, 2 as fp32 where the weights are fp32 and as packs otherwise (2026-11-27, bf16 auto, 1 against 0: H200 LayerNorm +7-8% at 32768 x 2048 to 8192 (96-98% of the roofline), +2-7% at 4096 rows of 2048 to 8192, -2% at 4096 x 1024, with fp32 weights +27-30%; RMSNorm and add_rmsnorm within 1.2%; H100 with bf16 weights LayerNorm -5% at 32768 x 2048 to 8192, RMSNorm -5% at 32768 x 2048, though ncu times the main kernel alone the same, and with fp32 weights LayerNorm +9-22% at 4096 rows of 1024 to 16384 columns and +18% at 32768 x 16384, within 1.6% at 32768 x 2048 to 8192, RMSNorm +3-15% at 4096 rows, +12% at 32768 x 16384, -4.5-7% at 32768 x 2048 to 8192)"},
  {.key = "rmsnorm.bwd.stages", AT(bwd.stages, I32),
   .def = 2, .min = 2, .max = 4,
   .doc = "CUDA persistent and partials backward: rows each thread has in flight through cp.async, the current one included"},
};

enum {
  COUNT = (int)(sizeof defs / sizeof defs[0]),
  MODELS = (int)(sizeof defs[0].models / sizeof defs[0].models[0])
};
_Static_assert((int)COUNT <= (int)NL_SETTINGS_MAX, "raise NL_SETTINGS_MAX in internal.h");

/* The default of setting i on the GPU named gpu ("" or NULL: not a GPU), and its origin. */
static double default_for(const char *gpu, int i, const char **origin)
{
  for (int j = 0; gpu && gpu[0] && j < MODELS && defs[i].models[j].model; j++)
    if (strstr(gpu, defs[i].models[j].model)) {
      *origin = defs[i].models[j].model;
      return defs[i].models[j].value;
    }
  *origin = "normlab";
  return defs[i].def;
}

static double value_on(const nl_ctx *ctx, const char *gpu, int i)
{
  const char *origin;
  return ctx->settings_user[i] ? ctx->settings[i] : default_for(gpu, i, &origin);
}

void nl__knobs(const nl_ctx *ctx, const char *gpu, nl_knobs *out)
{
  memset(out, 0, sizeof *out);
  for (int i = 0; i < COUNT; i++) {
    const double v = value_on(ctx, gpu, i);
    char *field = (char *)out + defs[i].at;
    switch (defs[i].kind) {
    case I32: *(int32_t *)(void *)field = (int32_t)v; break;
    case I64: *(int64_t *)(void *)field = (int64_t)v; break;
    case F64: *(double *)(void *)field = v; break;
    }
  }
}

/* The GPU name of device d ("" for the CPU), from the context's cache of device properties,
 * so the pointer stays valid for the context's lifetime. */
nl_status nl__gpu_name(nl_ctx *ctx, nl_device d, const char **name)
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

int32_t nl_model_default_count(void)
{
  int n = 0;
  for (int i = 0; i < COUNT; i++)
    for (int j = 0; j < MODELS && defs[i].models[j].model; j++)
      n++;
  return n;
}

/* In table order: a setting's models one after the other. */
nl_status nl_model_default_describe(int32_t index, nl_model_default *out)
{
  if (!out || index < 0)
    return NL_EINVAL;
  for (int i = 0; i < COUNT; i++)
    for (int j = 0; j < MODELS && defs[i].models[j].model; j++)
      if (index-- == 0) {
        out->model = defs[i].models[j].model;
        out->key = defs[i].key;
        out->value = defs[i].models[j].value;
        return NL_OK;
      }
  return NL_EINVAL;
}

int32_t nl_setting_count(void) { return COUNT; }

static void describe(const nl_ctx *ctx, const char *gpu, int32_t index, nl_setting_desc *out)
{
  out->key = defs[index].key;
  out->doc = defs[index].doc;
  out->def = default_for(gpu, index, &out->origin);
  out->value = ctx->settings_user[index] ? ctx->settings[index] : out->def;
  out->builtin = defs[index].def;
  out->min = defs[index].min;
  out->max = defs[index].max;
  out->integer = defs[index].kind != F64;
  out->user = ctx->settings_user[index] ? 1 : 0;
}

nl_status nl_setting_describe(const nl_ctx *ctx, int32_t index, nl_setting_desc *out)
{
  if (!ctx || !out || index < 0 || index >= COUNT)
    return NL_EINVAL;
  describe(ctx, ctx->device_gpu, index, out);
  return NL_OK;
}

nl_status nl_setting_describe_on(nl_ctx *ctx, nl_device device, int32_t index,
                                 nl_setting_desc *out)
{
  const char *gpu;
  nl_status st;
  if (!ctx || !out || index < 0 || index >= COUNT)
    return NL_EINVAL;
  if ((st = nl__check_device(ctx, device)) != NL_OK ||
      (st = nl__gpu_name(ctx, device, &gpu)) != NL_OK)
    return st;
  describe(ctx, gpu, index, out);
  return NL_OK;
}

static int find(const char *key)
{
  for (int i = 0; i < COUNT; i++)
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
  if (defs[i].kind != F64 && value != floor(value))
    return nl__err(ctx, NL_EINVAL, "setting '%s' takes an integer, got %g", key, value);
  ctx->settings[i] = value;
  ctx->settings_user[i] = 1;
  return NL_OK;
}

/* As launches on the default device take it. */
nl_status nl_get(nl_ctx *ctx, const char *key, double *value)
{
  int i;
  if (!ctx || !value)
    return NL_EINVAL;
  if ((i = find(key)) < 0)
    return nl__err(ctx, NL_EINVAL, "unknown setting '%s'", key ? key : "(null)");
  *value = value_on(ctx, ctx->device_gpu, i);
  return NL_OK;
}

nl_status nl_reset(nl_ctx *ctx, const char *key)
{
  int i;
  nl_status st = nl__enter(ctx);
  if (st != NL_OK)
    return st;
  if (!key) {
    memset(ctx->settings_user, 0, sizeof ctx->settings_user);
    return NL_OK;
  }
  if ((i = find(key)) < 0)
    return nl__err(ctx, NL_EINVAL, "unknown setting '%s'", key);
  ctx->settings_user[i] = 0;
  ctx->settings[i] = 0;
  return NL_OK;
}
