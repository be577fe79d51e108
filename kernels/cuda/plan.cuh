/*
 * plan.cuh: how every op and pass plans a launch. A strategy (row, blockrow, persistent, ...)
 * lists the row mappings it may run as, best first; the plan is the first candidate whose
 * layout fits the row: a register layout within the kernel's block limits, staging within
 * the shared memory, clusters the GPU can hold. The kernels of a pass take the plan's
 * layout as template parameters and the rest as one argument struct.
 *
 * Also here: launch helpers (programmatic dependent launch, clusters) and the per-device
 * caches behind them (plan.cu): shared-memory opt-in and occupancy, keyed by device.
 */
#ifndef NL_PLAN_CUH
#define NL_PLAN_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <type_traits>

#include "nlk.h"

namespace nlk {

/* The normalisation a kernel computes, a template parameter of every kernel of the family:
 * RMSNorm (add_rmsnorm too: its residual add is a forward switch of its own, its residual
 * gradient a runtime pointer) or LayerNorm (the mean subtracted, a bias; its backward has
 * two row sums and a bias gradient). Instances of each are compiled in translation units of
 * their own. */
enum class Norm { RMS, LN };

__host__ inline Norm norm_of(const nlk_norm *k) { return k->op == NLK_LAYERNORM ? Norm::LN : Norm::RMS; }

/* Calls f(std::integral_constant<Norm, ...>) for k's norm. */
template <typename F> __host__ inline auto with_norm(const nlk_norm *k, F &&f)
{
  return norm_of(k) == Norm::LN ? f(std::integral_constant<Norm, Norm::LN>{})
                                : f(std::integral_constant<Norm, Norm::RMS>{});
}

/* How a launch maps rows to threads; every plan is one of these. */
enum class Rows {
  CTA,     /* one CTA per row, the row in registers (the CTA is the row's threads) */
  WARP,    /* a warp or less per row, a fixed CTA size (the *.blockrow_block setting) */
  GROUPS,  /* a group per row within the preferred CTA size, one row each */
  STRIDE,  /* groups walk rows with the next ones in flight through cp.async, keeping
            * per-thread state (weight, dW) across rows; on sm_90 a row may be shared by
            * the CTAs of a cluster */
  STAGED,  /* one CTA per row, the whole row staged in shared memory */
  LOOP,    /* a CTA per row at a time looping over it twice: rows too wide for registers */
  SLAB,    /* forward: a cluster per block of rows, each CTA a slab of their columns in
            * shared memory, the rows' sums exchanged over the cluster (sm_90) */
  SPLIT,   /* backward rows too wide for registers: a row-reduction kernel, then a column
            * kernel */
  SKEW,    /* forward: one CTA per row of single 16-bit elements, cut at x's 16-byte
            * boundaries into a head, 16-byte packs and a tail */
};

enum { MAX_ITEMS = 8, LOOP_BLOCK = 512 };

/* The largest block a kernel holding `items` packs per thread may run with, and the CTAs of
 * that size it must fit per SM (1 when not given): together the register budget per thread
 * (64K per SM / (block x CTAs)). ptxas takes every register the budget allows, so the
 * one-row kernels, whose occupancy hides their latency, get tight budgets. Kernels declare
 * __launch_bounds__ from the same table, or ptxas would cap them at 64 registers and spill. */
struct BlockLimits {
  int by_items[4];   /* items 1, 2, 4, 8 */
  int min_ctas[4];
  int max_group;     /* GROUPS and STRIDE: the most threads sharing a row (0: the block limit) */
  /* packs narrower than 16 bytes (rows of single elements) count as the 16-byte packs their
   * elements fill, in the plans and in the kernels' launch bounds alike: 8 bf16 elements a
   * thread take one 16-byte pack's registers, not eight packs' */
  bool by_bytes;
  static __host__ __device__ constexpr int slot(int items)
  {
    return items <= 1 ? 0 : items == 2 ? 1 : items == 4 ? 2 : 3;
  }
  __host__ __device__ constexpr int operator()(int items) const { return by_items[slot(items)]; }
  __host__ __device__ constexpr int ctas(int items) const
  {
    return min_ctas[slot(items)] > 1 ? min_ctas[slot(items)] : 1;
  }
  /* the same for `items` packs of `pack` bytes */
  __host__ __device__ constexpr int filled(int items, int pack) const
  {
    return by_bytes && pack < 16 ? (items * pack + 15) / 16 : items;
  }
  __host__ __device__ constexpr int at(int items, int pack) const { return (*this)(filled(items, pack)); }
  __host__ __device__ constexpr int ctas_at(int items, int pack) const { return ctas(filled(items, pack)); }
};

/* A row layout: `group` threads share a row, each keeping `items` packs of `vec` elements; a
 * CTA of `block` threads holds block / group rows at a time. items = 0: the row does not fit
 * registers (the looping kernel's layout). */
struct RowCfg {
  int vec;
  int items;
  int group;
  int block;
  int64_t grid;
};

__host__ inline int rows_per_cta(const RowCfg &c) { return c.block / c.group; }
/* The CTAs that hold `rows` rows in layout c, the last one part-filled. */
__host__ inline int64_t ctas_of(int64_t rows, const RowCfg &c)
{
  const int64_t per_cta = rows_per_cta(c);
  return (rows + per_cta - 1) / per_cta;
}

/* What a pass's settings ask of a layout (nlk_fwd_tune / nlk_bwd_tune): packs per thread to
 * aim for, the preferred CTA size of GROUPS and STRIDE, the CTA size of WARP, and whether a
 * STRIDE row whose threads are not a power of two takes a CTA of whole warps sized to it. */
struct Want {
  int items;
  int block;
  int warp_block;
  bool whole_warps = false;
};

/* From this many packs a thread, SmemCost's wide_item applies: LayerNorm's backward keeps dB's
 * sums in shared memory there (bwd_stride's DB_SMEM). */
constexpr int WIDE_ITEMS = 4;

/* Shared memory that a pipelined launch stages per thread: `per_item` bytes for each pack
 * it holds plus `fixed`, within `budget` bytes per CTA (budget 0: nothing staged). */
struct SmemCost {
  int64_t per_item, fixed, budget;
  int64_t wide_item = 0; /* more bytes per item from WIDE_ITEMS items */
  /* the bytes a CTA of `block` threads at `items` packs each takes */
  __host__ int64_t bytes(int64_t block, int items) const
  {
    return block * (items * (per_item + (items >= WIDE_ITEMS ? wide_item : 0)) + fixed);
  }
  __host__ int64_t threads(int items) const
  {
    const int64_t per = bytes(1, items);
    return budget && per ? budget / per : INT64_MAX;
  }
};

/* The staging cost of device.cuh's Staging: for each of `stages` rows in flight, a pack of
 * each of `streams` inputs per item and `scalars` floats; and `wide_item` bytes a pack once,
 * outside the stages, from WIDE_ITEMS packs a thread. */
__host__ inline SmemCost staging_cost(int stages, int streams, int pack_bytes, int scalars,
                                      int64_t budget, int64_t wide_item = 0)
{
  return SmemCost{(int64_t)stages * streams * pack_bytes, (int64_t)stages * scalars * 4, budget,
                  wide_item};
}

/* The dynamic shared memory a CTA may use, less 1 KB for the kernels' static arrays. */
__host__ inline int64_t smem_budget(const nlk_norm *k) { return k->smem_optin - 1024; }

__host__ inline int pow2ceil(int64_t v)
{
  int p = 1;
  while (p < v)
    p <<= 1;
  return p;
}

/* A buffer whose base and row stride (in elements of elt bytes) allow 16-byte accesses; an
 * absent buffer does not stand in the way. */
__host__ inline bool aligned16(const void *p, int64_t stride, int elt)
{
  return !p || ((uintptr_t)p % 16 == 0 && stride * elt % 16 == 0);
}

/* 16-byte packs when n (the columns a CTA holds), every row stride and every base pointer
 * allow them, single elements otherwise. */
__host__ inline int pick_vec(const nlk_norm *k, int64_t n, int elt)
{
  int vec = 16 / elt;
  const void *ptrs[] = {k->x, k->res, k->dy, k->dres, k->y, k->res_out, k->dx};
  const int64_t strides[] = {k->sx, k->sres, k->sdy, k->sdres, k->sy, k->sres_out, k->sdx};
  if (n % vec)
    return 1;
  for (int i = 0; i < 7; i++)
    if (ptrs[i] && (((uintptr_t)ptrs[i] % 16) || strides[i] % vec))
      return 1;
  return vec;
}

/* The elements in a pack of x's rows: 16 bytes' worth where N, the strides and the pointers
 * allow (pick_vec), else 1. */
__host__ inline int row_pack_elems(const nlk_norm *k) { return pick_vec(k, k->N, nlk_dtype_size(k->dt)); }

/* Rows of single 16-bit elements: the rows the forward cuts at x's 16-byte boundaries (SKEW)
 * and the backward holds an element a lane (its held layout). */
__host__ inline bool single_16bit_rows(const nlk_norm *k)
{
  return nlk_dtype_size(k->dt) == 2 && row_pack_elems(k) == 1;
}

/* The layout of a row of n columns mapped as `rows` (CTA, SKEW, WARP, GROUPS or STRIDE): the
 * fewest packs per thread, from want.items up, that fit the block limits (SKEW: 16-byte packs,
 * as many as N has whole, whatever the pointers). GROUPS and STRIDE CTAs
 * take want.block threads (capped by the limits), fewer when their staging would not fit
 * `smem`. items = 0 in the result: no register layout fits (for want.items = 0, CTA, GROUPS
 * and STRIDE report that at once, so that the looping kernel runs). A CTA per row of single
 * elements under limits by_bytes starts from as many elements as want.items 16-byte packs
 * hold (up to MAX_ITEMS), so that a thread keeps about as many bytes in flight as on a
 * 16-byte row (docs/kernels.md, "Rows of single elements"). */
__host__ inline RowCfg row_cfg(const nlk_norm *k, int64_t n, int elt, Rows rows, BlockLimits limits,
                               Want want, SmemCost smem)
{
  RowCfg c;
  int target = want.items < 1 ? 1 : want.items > MAX_ITEMS ? MAX_ITEMS : pow2ceil(want.items);
  int64_t nvec;
  c.vec = rows == Rows::SKEW ? 16 / elt : pick_vec(k, n, elt); /* SKEW: the most whole packs */
  nvec = n / c.vec;
  c.grid = 0;
  /* GROUPS (persistent's fallback) keeps the layout of the pipelined kernel it stands in for,
   * whose limits count packs whatever their width: y's bits stay those of the pipelined
   * kernel, with or without a transposed copy (which sends it to GROUPS) */
  const int pack = rows == Rows::GROUPS ? 16 : c.vec * elt;
  if (want.items == 0 && rows != Rows::WARP)
    target = MAX_ITEMS * 2;
  else if (rows == Rows::CTA && limits.by_bytes && pack < 16)
    target = target * 16 / pack > MAX_ITEMS ? MAX_ITEMS : pow2ceil(target * 16 / pack);
  for (int items = target; items <= MAX_ITEMS; items *= 2) {
    const int64_t per = (nvec + items - 1) / items; /* threads that cover the row */
    const int whole = per <= 32 ? 32 : (int)((per + 31) / 32 * 32); /* whole warps that do */
    int group = pow2ceil(per);
    c.items = items;
    c.group = group;
    if (rows == Rows::WARP) {
      if (group > 32 || limits.at(items, pack) < group)
        continue;
      c.block = pow2ceil(want.warp_block < 32 ? 32 : want.warp_block);
      if (c.block > limits.at(items, pack))
        c.block = limits.at(items, pack);
      return c;
    }
    if (rows == Rows::CTA || rows == Rows::SKEW ||
        (rows == Rows::STRIDE && want.whole_warps && whole < group)) {
      /* one row a CTA of whole warps, not a power of two: a 5120-column bf16 row at 2 packs a
       * thread takes 320 threads, where 512 would leave 37% of them idle and holding registers
       * (docs/kernels.md, "The acceptance grid", rule 3) */
      c.group = c.block = whole;
    } else if (limits.max_group && group > limits.max_group) {
      continue;
    } else {
      const int64_t fit = smem.threads(items);
      int pref = pow2ceil(want.block < 32 ? 32 : want.block);
      c.block = pref > limits.at(items, pack) ? limits.at(items, pack) : pref;
      while (c.block > group && c.block > fit)
        c.block >>= 1;
      if (c.block < group)
        c.block = group < 32 ? 32 : group;
    }
    if (c.block > limits.at(items, pack))  /* a limit of 0: no kernel with this many packs */
      continue;
    if (c.block > smem.threads(items))  /* more packs per thread would not fit either */
      break;
    return c;
  }
  c.items = 0;
  c.group = c.block = LOOP_BLOCK;
  return c;
}

/* The looping kernels' layout: LOOP_BLOCK threads over the whole row. */
__host__ inline RowCfg loop_cfg(const nlk_norm *k, int64_t n, int elt)
{
  return RowCfg{pick_vec(k, n, elt), 0, LOOP_BLOCK, LOOP_BLOCK, 0};
}

/* STRIDE's layout: the most stages, from `stages` down to 2, whose staging (staging_cost's
 * `streams` packs and `scalars` floats per thread and stage, and `wide_item` bytes per pack)
 * fits the shared memory, and the row layout for them in c. 0 when not even two fit (c.items
 * is then 0 too). */
__host__ inline int fit_stages(const nlk_norm *k, int64_t n, int elt, BlockLimits limits, Want want,
                               int stages, int streams, int scalars, RowCfg *c, int wide_item = 0)
{
  const int pack = pick_vec(k, n, elt) * elt;
  for (int s = stages < 2 ? 2 : stages; s >= 2; s--) {
    *c = row_cfg(k, n, elt, Rows::STRIDE, limits, want,
                 staging_cost(s, streams, pack, scalars, smem_budget(k), wide_item));
    if (c->items != 0)
      return s;
  }
  return 0;
}

/* Every strategy's shape limit: N up to 2^24 (columns and pack indices are int). */
__host__ inline int max_n_supports(const nlk_norm *k, char *why, size_t cap)
{
  const int64_t max_n = (int64_t)1 << 24;
  if (k->N <= max_n)
    return NLK_OK;
  snprintf(why, cap, "N = %lld is above the CUDA kernels' limit of %lld", (long long)k->N,
           (long long)max_n);
  return NLK_ERR_UNSUPPORTED;
}

/* WARP (blockrow): the row must fit a warp's registers, MAX_ITEMS packs a lane. */
__host__ inline int64_t warp_row_max_n(const nlk_norm *k)
{
  return (int64_t)32 * MAX_ITEMS * row_pack_elems(k);
}

__host__ inline int warp_row_supports(const nlk_norm *k, char *why, size_t cap)
{
  const int64_t max_n = warp_row_max_n(k);
  if (k->N <= max_n)
    return NLK_OK;
  snprintf(why, cap, "N = %lld is too wide for a warp per row (at most %lld for %s rows%s)",
           (long long)k->N, (long long)max_n, nlk_dtype_name(k->dt),
           max_n < 32 * MAX_ITEMS * 4 ? " without 16-byte alignment" : "");
  return NLK_ERR_UNSUPPORTED;
}

/* A plan's candidates, best first: a row mapping, and for STRIDE the CTAs of a cluster that
 * share each row (1: none). */
struct Candidate {
  Rows rows;
  int share;
};

struct Candidates {
  enum { MAX = 12 }; /* the longest list, the backward's: 3 cluster sizes and 3 more */
  Candidate list[MAX];
  int n = 0;
  Candidates &add(Rows rows, int share = 1)
  {
    if (n < MAX)
      list[n++] = Candidate{rows, share};
    return *this;
  }
};

/* The first candidate that fit(candidate) accepts (it fills the plan); false when none does. */
template <typename Fit> __host__ inline bool first_fit(const Candidates &cands, Fit &&fit)
{
  for (int i = 0; i < cands.n; i++)
    if (fit(cands.list[i]))
      return true;
  return false;
}

/* Calls f(std::integral_constant<int, I>) for the runtime value i in {1, 2, 4, 8}. */
template <typename F> __host__ inline int with_items(int i, F &&f)
{
  switch (i) {
  case 1: return f(std::integral_constant<int, 1>{});
  case 2: return f(std::integral_constant<int, 2>{});
  case 4: return f(std::integral_constant<int, 4>{});
  case 8: return f(std::integral_constant<int, 8>{});
  default: return NLK_ERR_UNSUPPORTED;
  }
}

/* Calls f(T{}) for the activation dtype. */
template <typename F> __host__ inline int with_dtype(int dt, F &&f)
{
  switch (dt) {
  case NLK_F32: return f(float{});
  case NLK_F16: return f(__half{});
  case NLK_BF16: return f(__nv_bfloat16{});
  default: return NLK_ERR_UNSUPPORTED;
  }
}

/* f(std::integral_constant<int, VEC>) for a pack width of T: 1 or 16 bytes' worth. */
template <typename T, typename F> __host__ inline auto with_vec(int vec, F &&f)
{
  return vec == 1 ? f(std::integral_constant<int, 1>{})
                  : f(std::integral_constant<int, 16 / (int)sizeof(T)>{});
}

__host__ inline int cuda_result(nlk_norm *k, cudaError_t e)
{
  if (e == cudaSuccess)
    return NLK_OK;
  k->cuda_error = (int)e;
  return NLK_ERR_CUDA;
}

/* Launches `kernel` on k's stream: grid x grid_y CTAs, in clusters of `cluster` along x, with
 * programmatic dependent launch when pdl (the kernel must then wait, device.cuh's pdl_wait,
 * before it reads what the kernel before it wrote). */
int launch_kernel(nlk_norm *k, const void *kernel, int64_t grid, int block, size_t smem, void **args,
                  unsigned grid_y, int cluster, bool pdl);

/* Launches a norm kernel (whose first statement is pdl_begin(), device.cuh) on k's stream:
 * grid x grid_y CTAs, in clusters of `cluster` along x, with programmatic dependent launch
 * when k->pdl. */
inline int launch_norm(nlk_norm *k, const void *kernel, int64_t grid, int block, size_t smem,
                       void **args, unsigned grid_y = 1, int cluster = 1)
{
  return launch_kernel(k, kernel, grid, block, smem, args, grid_y, cluster, k->pdl != 0);
}

/* Zeroes an fp8 output's amax on k's stream before the kernels reduce into it. */
cudaError_t clear_amax(const nlk_norm *k);

/* Lets a kernel take more than the default 48 KB of dynamic shared memory on k's device and,
 * with max_carveout, prefer the largest shared-memory carveout (once per device, kernel and
 * size; the attributes only grow). */
cudaError_t allow_smem(const nlk_norm *k, const void *kernel, size_t bytes, bool max_carveout = false);

/* Lets a kernel launch in clusters of more than 8 CTAs (sm_90's non-portable sizes; once per
 * device and kernel). */
cudaError_t allow_cluster(const nlk_norm *k, const void *kernel);

/* Resident CTAs per SM of a kernel at a block size and dynamic shared memory (at least 1). */
int occupancy(const nlk_norm *k, const void *kernel, int block, size_t smem);

/* How many clusters of `cluster` CTAs of a kernel k's GPU holds at once (0 before sm_90,
 * which has no clusters). */
int max_clusters(const nlk_norm *k, const void *kernel, int cluster, int block, size_t smem);

} // namespace nlk

#endif
