/*
 * common.cuh: what the CUDA norm kernels share: element types, 16-byte packs, rounding and
 * packed 16-bit products, warp and block sums, the weight held per thread, cp.async staging
 * for the pipelined kernels, the row-mapping configuration (register and shared-memory
 * budgets) and the grid barrier.
 */
#ifndef NL_COMMON_CUH
#define NL_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>
#include <utility>

#include "cuda_kernels.h"

namespace nlk {

template <typename T> struct Dt;
template <> struct Dt<float> {
  static __device__ __forceinline__ float to_f(float v) { return v; }
  static __device__ __forceinline__ float from_f(float v) { return v; }
};
template <> struct Dt<__half> {
  static __device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half from_f(float v) { return __float2half_rn(v); }
};
template <> struct Dt<__nv_bfloat16> {
  static __device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 from_f(float v) { return __float2bfloat16_rn(v); }
};

template <typename T> __device__ __forceinline__ float to_f(T v) { return Dt<T>::to_f(v); }
template <typename T> __device__ __forceinline__ T from_f(float v) { return Dt<T>::from_f(v); }
/* The value v takes once stored in T: the casting modes round intermediates like this. */
template <typename T> __device__ __forceinline__ float round_to(float v) { return to_f(from_f<T>(v)); }

/* Two 16-bit values at once: a and b rounded to T, times two weights of T, rounded once.
 * That is what llama casting computes in fp32 (a product of two 16-bit values is exact in
 * fp32, so one rounding of it is one correctly rounded packed multiply), in two
 * instructions instead of six. */
template <typename T> struct Pair {
  static constexpr bool ok = false;
};
template <> struct Pair<__nv_bfloat16> {
  static constexpr bool ok = true;
  using V = __nv_bfloat162;
  static __device__ __forceinline__ V make(float a, float b) { return __floats2bfloat162_rn(a, b); }
};
template <> struct Pair<__half> {
  static constexpr bool ok = true;
  using V = __half2;
  static __device__ __forceinline__ V make(float a, float b) { return __floats2half2_rn(a, b); }
};

template <typename T>
__device__ __forceinline__ void mul_rounded(T *out, float a, float b, const T *w)
{
  using V = typename Pair<T>::V;
  *reinterpret_cast<V *>(out) = __hmul2(Pair<T>::make(a, b), *reinterpret_cast<const V *>(w));
}

/* VEC elements moved as one access: 16 bytes when VEC = 16 / sizeof(T). */
template <typename T, int VEC> struct __align__(sizeof(T) * VEC) Pack {
  T v[VEC];
};

template <typename T, int VEC>
__device__ __forceinline__ const Pack<T, VEC> *pack_at(const void *base, int64_t row, int64_t stride,
                                                       int vec)
{
  return reinterpret_cast<const Pack<T, VEC> *>(static_cast<const T *>(base) + row * stride) + vec;
}

/* Row data is read once: streaming loads (evict-first), so that they do not push the
 * weight, which every row re-reads, out of L1. The looping kernels' first pass, whose data
 * the second pass reads again from L2, loads with the default policy (STREAM false). */
template <typename T, int VEC, bool STREAM = true>
__device__ __forceinline__ Pack<T, VEC> load(const void *base, int64_t row, int64_t stride, int vec)
{
  const Pack<T, VEC> *p = pack_at<T, VEC>(base, row, stride, vec);
  Pack<T, VEC> out;
  if constexpr (!STREAM)
    return *p;
  if constexpr (sizeof(out) == 16)
    *reinterpret_cast<uint4 *>(&out) = __ldcs(reinterpret_cast<const uint4 *>(p));
  else if constexpr (sizeof(out) == 8)
    *reinterpret_cast<uint2 *>(&out) = __ldcs(reinterpret_cast<const uint2 *>(p));
  else if constexpr (sizeof(out) == 4)
    *reinterpret_cast<unsigned *>(&out) = __ldcs(reinterpret_cast<const unsigned *>(p));
  else
    *reinterpret_cast<unsigned short *>(&out) = __ldcs(reinterpret_cast<const unsigned short *>(p));
  return out;
}

/* A load that tells the caches how long to keep its line: KEEP (L1 and L2 evict_last) for
 * data the same CTA reads again soon, else evict_first for its last read. Inline asm,
 * volatile, so that the compiler neither merges two reads of one address nor keeps the first
 * one's value in registers in place of the second read, which is the point of reading twice. */
template <typename T, int VEC, bool KEEP>
__device__ __forceinline__ Pack<T, VEC> load_l1(const Pack<T, VEC> *p)
{
  Pack<T, VEC> out;
  uint64_t pol;
  if constexpr (KEEP)
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
  else
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
#define NLK_LD(L1, TY, ...) asm volatile("ld.global.L1::" L1 ".L2::cache_hint" TY __VA_ARGS__)
  if constexpr (sizeof(out) == 16) {
    uint4 &u = *reinterpret_cast<uint4 *>(&out);
    if constexpr (KEEP)
      NLK_LD("evict_last", ".v4.u32 {%0, %1, %2, %3}, [%4], %5;",
             : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w) : "l"(p), "l"(pol));
    else
      NLK_LD("evict_first", ".v4.u32 {%0, %1, %2, %3}, [%4], %5;",
             : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w) : "l"(p), "l"(pol));
  } else if constexpr (sizeof(out) == 4) {
    unsigned &u = *reinterpret_cast<unsigned *>(&out);
    if constexpr (KEEP)
      NLK_LD("evict_last", ".u32 %0, [%1], %2;", : "=r"(u) : "l"(p), "l"(pol));
    else
      NLK_LD("evict_first", ".u32 %0, [%1], %2;", : "=r"(u) : "l"(p), "l"(pol));
  } else {
    static_assert(sizeof(out) == 2, "packs of 16, 4 or 2 bytes");
    unsigned short &u = *reinterpret_cast<unsigned short *>(&out);
    if constexpr (KEEP)
      NLK_LD("evict_last", ".u16 %0, [%1], %2;", : "=h"(u) : "l"(p), "l"(pol));
    else
      NLK_LD("evict_first", ".u16 %0, [%1], %2;", : "=h"(u) : "l"(p), "l"(pol));
  }
#undef NLK_LD
  return out;
}

/* STREAM: a streaming store (st.global.cs, evict-first), so that an output's lines are
 * written back and dropped before the inputs' (a compile-time choice: a runtime one costs the
 * one-row kernels registers, 48 -> 56 at 2 packs, and a CTA per SM). */
template <bool STREAM, typename T, int VEC>
__device__ __forceinline__ void store_pack(Pack<T, VEC> *d, const Pack<T, VEC> &p)
{
  if constexpr (STREAM && (sizeof(p) == 16 || sizeof(p) == 8 || sizeof(p) == 4)) {
    using W = std::conditional_t<sizeof(p) == 16, uint4, std::conditional_t<sizeof(p) == 8, uint2, unsigned>>;
    __stcs(reinterpret_cast<W *>(d), *reinterpret_cast<const W *>(&p));
  } else {
    *d = p;
  }
}

/* The first pack of a row, for kernels that store several packs of it. */
template <typename T, int VEC>
__device__ __forceinline__ Pack<T, VEC> *row_packs(void *base, int64_t row, int64_t stride)
{
  return reinterpret_cast<Pack<T, VEC> *>(static_cast<T *>(base) + row * stride);
}

template <typename T, int VEC, bool STREAM = false>
__device__ __forceinline__ void store(void *base, int64_t row, int64_t stride, int vec, const Pack<T, VEC> &p)
{
  store_pack<STREAM>(row_packs<T, VEC>(base, row, stride) + vec, p);
}

/* Hides a pack's value from the optimiser. Kernels call it on the packs they keep across a
 * row's reduction: otherwise the compiler keeps the fp32 conversions of the first pass alive
 * (two or four registers per packed one) instead of converting again, and occupancy drops. */
template <typename T, int VEC>
__device__ __forceinline__ void opaque(Pack<T, VEC> &p)
{
  if constexpr (sizeof(p) % 4 == 0) {
#pragma unroll
    for (int k = 0; k < (int)(sizeof(p) / 4); k++)
      asm volatile("" : "+r"(reinterpret_cast<unsigned *>(&p)[k]));
  } else if constexpr (sizeof(p) == 2) {
    asm volatile("" : "+h"(*reinterpret_cast<unsigned short *>(&p)));
  }
}

/* The packs of one row that a thread of a G-thread group holds: v = lane + i*G. */
template <typename T, int VEC, int ITEMS, bool STREAM = true>
__device__ __forceinline__ void load_row(const void *base, int64_t row, int64_t stride, int lane,
                                         int G, int nvec, Pack<T, VEC> (&out)[ITEMS])
{
#pragma unroll
  for (int i = 0; i < ITEMS; i++)
    if (lane + i * G < nvec)
      out[i] = load<T, VEC, STREAM>(base, row, stride, lane + i * G);
}

/* Sum over aligned groups of `width` lanes (a power of two <= 32); every lane gets the sum. */
__device__ __forceinline__ float group_sum(float v, int width)
{
  for (int o = width >> 1; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* Sum over a group of G threads (a power of two) that share a row; every thread of the
 * group gets the same sum. G <= 32: shuffles only. Larger groups add their warps' sums
 * through shared memory with one __syncthreads, so every thread of the CTA must call it
 * the same number of times: each lane reads one of its group's warp sums and a butterfly
 * adds them (a constant cost where a loop over 16 or 32 slots was not). Warp sums alternate
 * between two slots, so slot p is rewritten only after every warp has passed the barrier of
 * the next call. Butterfly partners add the same two values, so every thread of a group
 * gets a bit-identical sum. */
__device__ __forceinline__ float group_reduce(float v, int G, float (*red)[32], int &parity)
{
  if (G <= 32)
    return group_sum(v, G);
  const int warps = G >> 5, first = (threadIdx.x & ~(G - 1)) >> 5;
  v = group_sum(v, 32);
  if ((threadIdx.x & 31) == 0)
    red[parity][threadIdx.x >> 5] = v;
  __syncthreads();
  v = group_sum(red[parity][first + (threadIdx.x & (warps - 1))], warps);
  parity ^= 1;
  return v;
}

/* A CTA's threads in groups of G (a power of two) that share a row: the thread's lane in its
 * group, its group's index in the CTA and the groups per CTA, by shifts (a division by a
 * runtime G costs some twenty instructions before the first load can issue). */
struct Group {
  int G, lane, idx, per_cta;
  __device__ __forceinline__ explicit Group(int G_) : G(G_)
  {
    const int shift = __ffs(G_) - 1;
    lane = threadIdx.x & (G_ - 1);
    idx = threadIdx.x >> shift;
    per_cta = blockDim.x >> shift;
  }
  /* The row of a kernel whose groups take one row each (row, blockrow): this CTA's rows are
   * per_cta consecutive ones, group idx the idx-th. */
  __device__ __forceinline__ int64_t one_row() const { return (int64_t)blockIdx.x * per_cta + idx; }
};

/* A pack as fp32. bf16 pairs convert as a 32-bit word, with one shift or mask per element
 * (the element-wise conversion extracts the high half first: two instructions). */
template <typename T, int VEC>
__device__ __forceinline__ void unpack(const Pack<T, VEC> &p, float (&f)[VEC])
{
  if constexpr (std::is_same<T, __nv_bfloat16>::value && VEC % 2 == 0) {
    const unsigned *u = reinterpret_cast<const unsigned *>(&p);
#pragma unroll
    for (int k = 0; k < VEC / 2; k++) {
      f[2 * k] = __uint_as_float(u[k] << 16);
      f[2 * k + 1] = __uint_as_float(u[k] & 0xffff0000u);
    }
  } else {
#pragma unroll
    for (int j = 0; j < VEC; j++)
      f[j] = to_f(p.v[j]);
  }
}

/* The VEC weights of pack v as fp32 (offset added; 1 when non-affine), in 16-byte loads
 * through the read-only path: every row re-reads the same columns, so they stay in L1. */
template <typename T, int VEC>
__device__ __forceinline__ void load_w(const void *w, int wf32, float offset, int v, float (&out)[VEC])
{
  if (!w) {
#pragma unroll
    for (int j = 0; j < VEC; j++)
      out[j] = 1.f;
  } else if (wf32) {
    const Pack<float, VEC> p = reinterpret_cast<const Pack<float, VEC> *>(w)[v];
#pragma unroll
    for (int j = 0; j < VEC; j++)
      out[j] = p.v[j] + offset;
  } else {
    const Pack<T, VEC> p = reinterpret_cast<const Pack<T, VEC> *>(w)[v];
#pragma unroll
    for (int j = 0; j < VEC; j++)
      out[j] = to_f(p.v[j]) + offset;
  }
}

/* Shared memory that a pipelined launch stages per thread: `per_item` bytes for each pack
 * it holds plus `fixed`, within `budget` bytes per CTA (budget 0: nothing staged). */
struct SmemCost {
  int64_t per_item, fixed, budget;
  __host__ int64_t threads(int items) const
  {
    return budget ? budget / (items * per_item + fixed) : INT64_MAX;
  }
};

/* Asynchronous global -> shared copies (cp.async, sm_80+). They hold no registers while in
 * flight, so a kernel can keep several rows' loads outstanding whatever its register budget.
 * 16-byte copies bypass L1 (.cg), keeping it for the weight; packs under 4 bytes (fp16/bf16
 * without 16-byte alignment) are copied synchronously. */
template <typename P>
__device__ __forceinline__ void copy_async(P *dst, const P *src)
{
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  if constexpr (sizeof(P) == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
  else if constexpr (sizeof(P) == 4 || sizeof(P) == 8)
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(d), "l"(src), "n"(sizeof(P))
                 : "memory");
  else
    *dst = *src;
}

__device__ __forceinline__ void copy_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

/* Waits until at most `pending` (0..3) of this thread's committed copy groups are in flight. */
__device__ __forceinline__ void copy_wait(int pending)
{
  switch (pending) {
  case 0: asm volatile("cp.async.wait_group 0;\n" ::: "memory"); break;
  case 1: asm volatile("cp.async.wait_group 1;\n" ::: "memory"); break;
  case 2: asm volatile("cp.async.wait_group 2;\n" ::: "memory"); break;
  default: asm volatile("cp.async.wait_group 3;\n" ::: "memory"); break;
  }
}

/* A thread's private slots in a pipelined kernel's shared memory: for each of `stages` rows
 * in flight, one pack per item of each of `streams` inputs, then one float per stage (the
 * backward's rstd). Laid out [stage][stream][item][thread], so a warp's copies fill
 * consecutive addresses; only the thread that copies a slot reads it, so no barrier guards
 * the slots (cp.async.wait_group makes a thread's own copies visible to it). */
template <typename P, int ITEMS> struct Staging {
  P *packs;
  float *floats;
  int stages, streams;
  __device__ Staging(void *smem, int stages_, int streams_)
      : packs(static_cast<P *>(smem)), stages(stages_), streams(streams_)
  {
    floats = reinterpret_cast<float *>(packs + (size_t)stages * streams * ITEMS * blockDim.x);
  }
  __device__ P *at(int stage, int stream, int item) const
  {
    return packs + ((stage * streams + stream) * ITEMS + item) * blockDim.x + threadIdx.x;
  }
  __device__ float *scalar(int stage) const { return floats + stage * blockDim.x + threadIdx.x; }
};

/* The staging cost of Staging<P, ITEMS> per thread, for row_cfg. */
__host__ inline SmemCost staging_cost(int stages, int streams, int pack_bytes, int scalars,
                                      int64_t budget)
{
  return SmemCost{(int64_t)stages * streams * pack_bytes, (int64_t)stages * scalars * 4, budget};
}

/* A thread's weights for its packs. Preloaded (the pipelined kernels, which keep them for
 * the whole kernel, and the forward one-row kernels with early_weight): packs of x's dtype
 * are held as they are, in half the registers of fp32 values, and converted where used;
 * callers refresh() them once per row, after the reduction, so the compiler neither hoists
 * the conversions out of a loop nor moves them above the reduction into fp32 registers.
 * Otherwise get() reads them where used, from L1, after the row's reduction. fp32 weights
 * are always read where used. */
template <typename T, int VEC, int ITEMS> struct Weights {
  Pack<T, VEC> raw[ITEMS];
  const void *w;
  int wf32;
  float offset;
  bool held;
  __device__ __forceinline__ Weights(const void *w_, int wf32_, float offset_, int lane, int G,
                                     int nvec, bool preload)
      : w(w_), wf32(wf32_), offset(offset_), held(preload && w_ && !wf32_)
  {
    if (held)
#pragma unroll
      for (int i = 0; i < ITEMS; i++)
        if (lane + i * G < nvec)
          raw[i] = reinterpret_cast<const Pack<T, VEC> *>(w)[lane + i * G];
  }
  __device__ __forceinline__ void refresh()
  {
    if (held)
#pragma unroll
      for (int i = 0; i < ITEMS; i++)
        opaque(raw[i]);
  }
  /* item i's weight pack v as stored (x's dtype) */
  __device__ __forceinline__ Pack<T, VEC> pack(int i, int v) const
  {
    return held ? raw[i] : reinterpret_cast<const Pack<T, VEC> *>(w)[v];
  }
  /* item i's weights (pack v) as fp32, offset added */
  __device__ __forceinline__ void get(int i, int v, float (&W)[VEC]) const
  {
    if (held) {
#pragma unroll
      for (int j = 0; j < VEC; j++)
        W[j] = to_f(raw[i].v[j]) + offset;
    } else {
      load_w<T, VEC>(w, wf32, offset, v, W);
    }
  }
};

/* Grid-wide barrier for cooperative launches (all CTAs co-resident). sync[0] counts
 * arrivals and is back to zero afterwards; sync[1] is a generation number. */
__device__ __forceinline__ void grid_barrier(unsigned int *sync)
{
  __syncthreads();
  if (threadIdx.x == 0) {
    volatile unsigned int *gen = sync + 1;
    unsigned int g = *gen;
    __threadfence();
    if (atomicAdd(sync, 1u) == gridDim.x - 1) {
      atomicExch(sync, 0u);
      __threadfence();
      atomicAdd(sync + 1, 1u);
    } else {
      while (*gen == g)
        __nanosleep(64);
    }
    __threadfence();
  }
  __syncthreads();
}

/* Sets a thread's register array to zero (dW accumulators). */
template <int A, int B> __device__ __forceinline__ void zero(float (&v)[A][B])
{
#pragma unroll
  for (int i = 0; i < A; i++)
#pragma unroll
    for (int j = 0; j < B; j++)
      v[i][j] = 0.f;
}

/* How a launch maps rows to threads. `group` threads share a row; a CTA of `block` threads
 * holds block / group rows at a time; each thread keeps `items` packs of `vec` elements. */
struct RowCfg {
  int vec;
  int items;       /* 0: too wide for registers, the looping kernel runs */
  int group;
  int block;
  int64_t grid;
};

__host__ inline int pow2ceil(int64_t v)
{
  int p = 1;
  while (p < v)
    p <<= 1;
  return p;
}

/* 16-byte packs when N, every row stride and every base pointer allow them. */
__host__ inline int pick_vec(const nlk_norm *k, int elt)
{
  int vec = 16 / elt;
  const void *ptrs[] = {k->x, k->res, k->dy, k->dres, k->y, k->res_out, k->dx};
  const int64_t strides[] = {k->sx, k->sres, k->sdy, k->sdres, k->sy, k->sres_out, k->sdx};
  if (k->N % vec)
    return 1;
  for (int i = 0; i < 7; i++)
    if (ptrs[i] && (((uintptr_t)ptrs[i] % 16) || strides[i] % vec))
      return 1;
  return vec;
}

enum { MAX_ITEMS = 8, LOOP_BLOCK = 512 };

/* The largest block a kernel holding `items` packs per thread may run with, and the CTAs of
 * that size it must fit per SM (1 when not given): together the register budget per thread
 * (64K per SM / (block x CTAs)). ptxas takes every register the budget allows, so the
 * one-row kernels, whose occupancy hides their latency, give it tight budgets. Kernels
 * declare __launch_bounds__ from the same table, or ptxas would cap them at 64 registers
 * and spill. */
struct BlockLimits {
  int by_items[4];   /* items 1, 2, 4, 8 */
  int min_ctas[4];
  int max_group;     /* MANY_ROWS: the most threads sharing a row (0: the block limit) */
  static __host__ __device__ constexpr int slot(int items)
  {
    return items <= 1 ? 0 : items == 2 ? 1 : items == 4 ? 2 : 3;
  }
  __host__ __device__ constexpr int operator()(int items) const { return by_items[slot(items)]; }
  __host__ __device__ constexpr int ctas(int items) const
  {
    return min_ctas[slot(items)] > 1 ? min_ctas[slot(items)] : 1;
  }
};

enum RowMode {
  CTA_ROWS,   /* `row`: one row per CTA */
  WARP_ROWS,  /* `blockrow`: a warp or less per row, k->rows_block threads */
  MANY_ROWS   /* persistent / partials: as many rows per CTA as the preferred block holds */
};

/* Threads per row and packs per thread: the fewest packs per thread, from the target
 * k->items up, that fit the block limits. MANY_ROWS CTAs take `block_pref` threads (capped
 * by the limits), fewer when their staging would not fit the shared memory budget.
 * items == 0: the row is wider than any register layout (or one group's staging) allows; the
 * looping kernel runs (for WARP_ROWS the caller reports the row as too wide). */
__host__ inline RowCfg row_cfg(const nlk_norm *k, int elt, RowMode mode, BlockLimits limits,
                               int block_pref, SmemCost smem)
{
  RowCfg c;
  int target = k->items < 1 ? 1 : k->items > MAX_ITEMS ? MAX_ITEMS : pow2ceil(k->items);
  int64_t nvec;
  c.vec = pick_vec(k, elt);
  nvec = k->N / c.vec;
  c.grid = 0;
  if (k->items == 0 && mode != WARP_ROWS)  /* asked for the two-pass looping kernel */
    target = MAX_ITEMS * 2;
  for (int items = target; items <= MAX_ITEMS; items *= 2) {
    int group = pow2ceil((nvec + items - 1) / items);
    c.items = items;
    c.group = group;
    if (mode == WARP_ROWS) {
      if (group > 32 || limits(items) < group)
        continue;
      c.block = pow2ceil(k->rows_block < 32 ? 32 : k->rows_block);
      if (c.block > limits(items))
        c.block = limits(items);
      return c;
    }
    if (mode == CTA_ROWS) {
      c.group = group < 32 ? 32 : group;
      c.block = c.group;
    } else if (limits.max_group && group > limits.max_group) {
      continue;
    } else {
      const int64_t fit = smem.threads(items);
      int pref = pow2ceil(block_pref < 32 ? 32 : block_pref);
      c.block = pref > limits(items) ? limits(items) : pref;
      while (c.block > group && c.block > fit)
        c.block >>= 1;
      if (c.block < group)
        c.block = group < 32 ? 32 : group;
    }
    if (c.block > limits(items))  /* a limit of 0: no kernel with this many packs */
      continue;
    if (c.block > smem.threads(items))  /* more packs per thread would not fit either */
      break;
    return c;
  }
  c.items = 0;
  c.group = c.block = LOOP_BLOCK;
  return c;
}

__host__ inline int rows_per_cta(const RowCfg &c) { return c.block / c.group; }

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

__host__ inline int cuda_result(nlk_norm *k, cudaError_t e)
{
  if (e == cudaSuccess)
    return NLK_OK;
  k->cuda_error = (int)e;
  return NLK_ERR_CUDA;
}

/* Programmatic dependent launch (k->pdl): a kernel so launched may be running while the one
 * before it in the stream drains, so it must wait (griddepcontrol.wait) before it reads or
 * writes global memory; it then lets the next one launch at once, whose CTAs take the SM
 * slots this grid leaves. Every kernel that launch_norm starts calls this first with k->pdl.
 * The wait is skipped in a normal launch: it costs every CTA even there (15% on an H200 for
 * the 32768 64-thread CTAs of row at 32768 x 1024). Absent before sm_90. */
__device__ __forceinline__ void pdl_begin(int on)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (on) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  }
#endif
}

/* The launch attributes of a norm kernel: programmatic dependent launch when pdl, clusters of
 * `cluster` CTAs along x when above 1. Returns how many it set. */
__host__ inline unsigned norm_attrs(cudaLaunchAttribute (&attr)[2], int pdl, int cluster)
{
  unsigned n = 0;
  if (pdl) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n++].val.clusterDim = {(unsigned)cluster, 1, 1};
  }
  return n;
}

/* Launches a norm kernel (whose first statement is pdl_begin()) on k's stream: grid x grid_y
 * CTAs, in clusters of `cluster` along x. */
__host__ inline int launch_norm(nlk_norm *k, const void *kernel, int64_t grid, int block,
                                size_t smem, void **args, unsigned grid_y = 1, int cluster = 1)
{
  cudaLaunchAttribute attr[2];
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)grid, grid_y);
  cfg.blockDim = dim3((unsigned)block);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = (cudaStream_t)k->stream;
  cfg.attrs = attr;
  cfg.numAttrs = norm_attrs(attr, k->pdl, cluster);
  return cuda_result(k, cudaLaunchKernelExC(&cfg, kernel, args));
}

/* Lets a kernel take more than the default 48 KB of shared memory, static arrays (at most
 * 1 KB in these kernels) included (once per kernel and size; the attribute only grows). */
__host__ inline cudaError_t allow_smem(const void *kernel, size_t bytes)
{
  struct entry { const void *kernel; size_t bytes; };
  static entry memo[256];
  static int used;
  if (bytes + 1024 <= 48 * 1024)
    return cudaSuccess;
  for (int i = 0; i < used; i++)
    if (memo[i].kernel == kernel && memo[i].bytes >= bytes)
      return cudaSuccess;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
  if (e != cudaSuccess)
    cudaGetLastError();
  else if (used < 256)
    memo[used++] = entry{kernel, bytes};
  return e;
}

/* The dynamic shared memory one CTA may opt in to on the current device, less 1 KB for the
 * kernels' static arrays (once per process, like the occupancy memo below). */
__host__ inline int64_t smem_budget()
{
  static int64_t memo = -1;
  if (memo < 0) {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
      cudaGetLastError();
      v = 48 * 1024;
    }
    memo = (int64_t)v - 1024;
  }
  return memo;
}

/* The pipelined kernels' layout: the most stages, from k->stages down to 2, whose staging
 * (`streams` packs and `scalars` floats per thread and stage) fits the shared memory, and
 * the row layout for them in c. 0 when not even two fit (c.items is then 0 too). */
__host__ inline int fit_stages(const nlk_norm *k, int elt, RowMode mode, BlockLimits limits,
                               int streams, int scalars, RowCfg *c)
{
  const int pack = pick_vec(k, elt) * elt;
  for (int s = k->stages < 2 ? 2 : k->stages; s >= 2; s--) {
    *c = row_cfg(k, elt, mode, limits, k->block_pref,
                 staging_cost(s, streams, pack, scalars, smem_budget()));
    if (c->items != 0)
      return s;
  }
  return 0;
}

/* The CUDA occupancy queries below, memoised per (kernel, cluster, block, smem): benchmark
 * loops plan thousands of launches and the queries are not free. One table per query (per
 * `query` type); per process, assuming one GPU model per process. */
struct QueryKey {
  const void *kernel;
  int cluster, block;
  size_t smem;
  __host__ bool operator==(const QueryKey &o) const
  {
    return kernel == o.kernel && cluster == o.cluster && block == o.block && smem == o.smem;
  }
};

template <typename F> __host__ inline int memoised(const QueryKey &key, F &&query)
{
  struct entry { QueryKey key; int n; };
  static entry memo[256];
  static int used;
  for (int i = 0; i < used; i++)
    if (memo[i].key == key)
      return memo[i].n;
  const int n = query();
  if (used < 256)
    memo[used++] = entry{key, n};
  return n;
}

/* Resident CTAs per SM of a kernel at a block size and dynamic shared memory (at least 1). */
__host__ inline int occupancy(const void *kernel, int block, size_t smem)
{
  return memoised(QueryKey{kernel, 1, block, smem}, [&] {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, block, smem) != cudaSuccess) {
      cudaGetLastError();
      n = 1;
    }
    return n < 1 ? 1 : n;
  });
}

/* How many clusters of `cluster` CTAs of a kernel the GPU holds at once (0 before sm_90,
 * which has no clusters). */
__host__ inline int max_clusters(const void *kernel, int cluster, int block, size_t smem)
{
  return memoised(QueryKey{kernel, cluster, block, smem}, [&] {
    cudaLaunchAttribute attr[2];
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)cluster);
    cfg.blockDim = dim3((unsigned)block);
    cfg.dynamicSmemBytes = smem;
    cfg.attrs = attr;
    cfg.numAttrs = norm_attrs(attr, 0, cluster);
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
      cudaGetLastError();
      n = 0;
    }
    return n;
  });
}

} // namespace nlk

#endif
