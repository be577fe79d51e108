/*
 * device.cuh: the device-side vocabulary of the norm kernels: element types and rounding,
 * 16-byte packs and the loads and stores that move them (with their cache policies), group
 * and block sums, the weight a thread holds, cp.async staging for the pipelined kernels, the
 * grid barrier, programmatic dependent launch, the thread-block cluster primitives, and the
 * fp8 outputs: conversion with a scale, amax and current scaling's scale.
 * Everything here is a building block; the kernels of each pass are in norm_fwd.cu and
 * norm_bwd.cu, and docs/kernels.md gives the measurements behind the choices made here.
 */
#ifndef NL_DEVICE_CUH
#define NL_DEVICE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "nlk.h"

namespace nlk {

template <typename T> struct Dt;
/* Per dtype: its nlk_dtype id and the conversions from and to fp32 (round to nearest even). */
template <> struct Dt<float> {
  static constexpr int id = NLK_F32;
  static __device__ __forceinline__ float to_f(float v) { return v; }
  static __device__ __forceinline__ float from_f(float v) { return v; }
};
template <> struct Dt<__half> {
  static constexpr int id = NLK_F16;
  static __device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half from_f(float v) { return __float2half_rn(v); }
};
template <> struct Dt<__nv_bfloat16> {
  static constexpr int id = NLK_BF16;
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

/* The same for one element (rows of single elements): a lane of the packed multiply, the
 * same bits. */
template <typename T> __device__ __forceinline__ T mul_rounded(float a, T w)
{
  return __hmul(from_f<T>(a), w);
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

/* An L2 eviction policy for the cache_hint accesses: evict_last (LAST) or evict_first.
 * Volatile, so that it is made where it is used instead of held in two registers across a
 * kernel. */
template <bool LAST> __device__ __forceinline__ uint64_t l2_policy()
{
  uint64_t pol;
  if constexpr (LAST)
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
  else
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}

/* A load that tells the caches how long to keep its line: KEEP (L1 and L2 evict_last) for
 * data the same CTA reads again soon, else evict_first for its last read. Inline asm,
 * volatile, so that the compiler neither merges two reads of one address nor keeps the first
 * one's value in registers in place of the second read, which is the point of reading twice. */
template <typename T, int VEC, bool KEEP>
__device__ __forceinline__ Pack<T, VEC> load_l1(const Pack<T, VEC> *p)
{
  Pack<T, VEC> out;
  const uint64_t pol = l2_policy<KEEP>();
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
 * written back and dropped before the inputs'. A compile-time choice: decided at run time it
 * costs the one-row kernels registers and with them a resident CTA per SM. */
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

/* A streaming store (st.global.cs) or, with keep, one that L2 keeps before others
 * (evict_last): an fp8 y that the external transpose reads next. Both stores in one asm block
 * under complementary predicates, so that a streamed y keeps its `.cs` store and pays only the
 * predicate (docs/kernels.md, "y kept in L2 for the transpose", has what the other forms
 * cost). pol: l2_policy<true>(), made once by the caller (made here, it cost six uniform
 * instructions a pack). Packs of 4, 8 or 16 bytes; others are stored plainly. */
template <typename T, int VEC>
__device__ __forceinline__ void store_stream_or_keep(Pack<T, VEC> *d, const Pack<T, VEC> &p, bool keep,
                                                     uint64_t pol)
{
#define NLK_ST(TY, OPS, ...)                                                                                 \
  asm volatile("{\n.reg .pred k;\nsetp.ne.b32 k, %0, 0;\n@k st.global.L2::cache_hint" TY " [%1], " OPS    \
               ", %2;\n@!k st.global.cs" TY " [%1], " OPS ";\n}" ::"r"((int)keep), "l"(d), "l"(pol), __VA_ARGS__ \
               : "memory")
  if constexpr (sizeof(p) < 4) {
    *d = p;
  } else {
    if constexpr (sizeof(p) == 16) {
      const uint4 u = *reinterpret_cast<const uint4 *>(&p);
      NLK_ST(".v4.u32", "{%3, %4, %5, %6}", "r"(u.x), "r"(u.y), "r"(u.z), "r"(u.w));
    } else if constexpr (sizeof(p) == 8) {
      const uint2 u = *reinterpret_cast<const uint2 *>(&p);
      NLK_ST(".v2.u32", "{%3, %4}", "r"(u.x), "r"(u.y));
    } else {
      static_assert(sizeof(p) == 4, "packs of 1 to 16 bytes");
      NLK_ST(".u32", "%3", "r"(*reinterpret_cast<const unsigned *>(&p)));
    }
  }
#undef NLK_ST
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

/* A 16-bit element loaded where `ok` (streaming: evict-first), left as it was elsewhere: the
 * predicate inside the instruction, so that the compiler computes the address unconditionally
 * instead of under a branch per element. */
__device__ __forceinline__ void load_u16_if(unsigned short &u, const void *p, bool ok)
{
  asm volatile("{\n.reg .pred q;\nsetp.ne.b32 q, %2, 0;\n@q ld.global.cs.u16 %0, [%1];\n}"
               : "+h"(u) : "l"(p), "r"((int)ok));
}

/* The same for a store (plain: no cache hint). */
__device__ __forceinline__ void store_u16_if(void *p, unsigned short u, bool ok)
{
  asm volatile("{\n.reg .pred q;\nsetp.ne.b32 q, %2, 0;\n@q st.global.u16 [%0], %1;\n}"
               ::"l"(p), "h"(u), "r"((int)ok) : "memory");
}

/* The packs of one row that a thread of a G-thread group holds: v = lane + i*G, streamed
 * (evict-first: a row is read once). */
template <typename T, int VEC, int ITEMS, typename NV>
__device__ __forceinline__ void load_row(const void *base, int64_t row, int64_t stride, int lane,
                                         int G, NV nvec, Pack<T, VEC> (&out)[ITEMS])
{
  if constexpr (VEC == 1 && sizeof(T) == 2) {
    const T *p = static_cast<const T *>(base) + row * stride + lane;
#pragma unroll
    for (int i = 0; i < ITEMS; i++)
      load_u16_if(*reinterpret_cast<unsigned short *>(&out[i]), p + (int64_t)i * G, lane + i * G < nvec);
  } else {
#pragma unroll
    for (int i = 0; i < ITEMS; i++)
      if (lane + i * G < nvec)
        out[i] = load<T, VEC>(base, row, stride, lane + i * G);
  }
}

/* Sums of one value (float) or of two at once (float2: LayerNorm's backward reduces two row
 * sums together, through the same shuffles and barrier). */
__device__ __forceinline__ float2 operator+(float2 a, float2 b) { return make_float2(a.x + b.x, a.y + b.y); }
__device__ __forceinline__ float shfl_xor(float v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
__device__ __forceinline__ float2 shfl_xor(float2 v, int o)
{
  return make_float2(shfl_xor(v.x, o), shfl_xor(v.y, o));
}

/* Sum over aligned groups of `width` lanes (a power of two <= 32); every lane gets the sum. */
template <typename V> __device__ __forceinline__ V group_sum(V v, int width)
{
  for (int o = width >> 1; o > 0; o >>= 1)
    v = v + shfl_xor(v, o);
  return v;
}

/* An unsigned count summed over the warp: one REDUX on sm_80 and later. */
__device__ __forceinline__ unsigned warp_total(unsigned c)
{
#if __CUDA_ARCH__ >= 800
  return __reduce_add_sync(0xffffffffu, c);
#else
  for (int o = 16; o > 0; o >>= 1)
    c += __shfl_xor_sync(0xffffffffu, c, o);
  return c;
#endif
}

/* How Group and group_reduce map a CTA's threads to groups of a runtime G: ANY_CTA, a power
 * of two or the whole CTA of any warp count, by a branch; POW2, a power of two; ROUNDED,
 * shifts by G rounded up to a power of two, which make a CTA-wide group of any warp count one
 * group without the branch (bwd_stride's whole_warps, 16-byte instances: the branch cost its
 * 4-pack RMSNorm kernel 8 bytes of spill, the rounding nothing; its single-element instances
 * keep POW2, where the rounding cost up to 17 registers). */
enum class GroupMap { ANY_CTA, POW2, ROUNDED };

/* Sum over a group of G threads that share a row (a power of two, or a multiple of 32 that
 * is the whole CTA: a CTA per row sized to the row, not rounded up to a power of two); every
 * thread of the group gets the same sum. G <= 32: shuffles only. Larger groups add their
 * warps' sums through shared memory with one __syncthreads, so every thread of the CTA must
 * call it the same number of times: each lane reads one of its group's warp sums (zero past
 * the last warp) and a butterfly over the warps rounded up to a power of two adds them (a
 * constant cost where a loop over 16 or 32 slots was not). Warp sums alternate between two
 * slots, so slot p is rewritten only after every warp has passed the barrier of the next
 * call. Butterfly partners add the same two values, so every thread of a group gets a
 * bit-identical sum. The grid-stride kernels, where the padded path's registers made ptxas
 * spill, take POW2, or ROUNDED for the whole CTA of any warp count once zero_spare_slots has
 * zeroed the slots past its last warp, which the butterfly then reads instead of testing
 * each lane. */
template <GroupMap MAP = GroupMap::ANY_CTA, typename V>
__device__ __forceinline__ V group_reduce(V v, int G, V (*red)[32], int &parity)
{
  if (G <= 32)
    return group_sum(v, G);
  const int warps = G >> 5;
  v = group_sum(v, 32);
  if ((threadIdx.x & 31) == 0)
    red[parity][threadIdx.x >> 5] = v;
  __syncthreads();
  if (MAP == GroupMap::ANY_CTA && (warps & (warps - 1))) { /* the whole CTA, of a warp count not a power of two */
    const int width = 1 << (32 - __clz(warps - 1)), l = threadIdx.x & (width - 1);
    v = group_sum(l < warps ? red[parity][l] : V{}, width);
  } else if (MAP == GroupMap::ROUNDED) { /* the whole CTA's group starts at slot 0 */
    const int width = 1 << (32 - __clz(warps - 1));
    v = group_sum(red[parity][((threadIdx.x & ~(32 * width - 1)) >> 5) + (threadIdx.x & (width - 1))], width);
  } else {
    v = group_sum(red[parity][((threadIdx.x & ~(G - 1)) >> 5) + (threadIdx.x & (warps - 1))], warps);
  }
  parity ^= 1;
  return v;
}

/* The slots of group_reduce's `red` that no warp of this CTA writes, zeroed: call once before
 * the first group_reduce<ROUNDED> of a CTA whose warp count is not a power of two. */
template <typename V> __device__ __forceinline__ void zero_spare_slots(V (*red)[32])
{
  const int t = threadIdx.x;
  if (t < 32 && t >= (int)(blockDim.x >> 5))
    red[0][t] = red[1][t] = V{};
}

__host__ __device__ constexpr int log2_of(int v) { return v > 1 ? 1 + log2_of(v >> 1) : 0; }

/* A group size known at compile time, as Group's constructor takes it (0: not known). */
template <int LANES> using Lanes = std::integral_constant<int, LANES>;

/* A CTA's threads in groups of G that share a row (a power of two, or the whole CTA): the
 * thread's lane in its group, its group's index in the CTA and the groups per CTA, by shifts
 * (a division by a runtime G costs some twenty instructions before the first load can
 * issue). */
struct Group {
  int G, lane, idx, per_cta;
  /* LANES > 0: groups of LANES threads fixed at compile time (a power of two: the one-row
   * kernels' compiled lanes), whose shifts are constants and whose G, propagated into every
   * helper, unrolls the group's sums into shuffles alone; G_ is not read. */
  template <int LANES = 0>
  __device__ __forceinline__ explicit Group(int G_, GroupMap map = GroupMap::ANY_CTA, Lanes<LANES> = {})
  {
    if constexpr (LANES > 0) {
      static_assert((LANES & (LANES - 1)) == 0, "compiled lanes: a power of two");
      G = LANES;
      lane = threadIdx.x & (LANES - 1);
      idx = threadIdx.x >> log2_of(LANES);
      per_cta = blockDim.x >> log2_of(LANES);
      return;
    }
    G = G_;
    if (map == GroupMap::ANY_CTA && G_ == (int)blockDim.x) {
      lane = threadIdx.x;
      idx = 0;
      per_cta = 1;
      return;
    }
    if (map == GroupMap::ROUNDED) {
      const int shift = 32 - __clz(G_ - 1);
      lane = threadIdx.x & ((1 << shift) - 1);
      idx = threadIdx.x >> shift;
      per_cta = (blockDim.x + (1 << shift) - 1) >> shift;
      return;
    }
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

/* A pack from fp32, each value rounded to nearest even: 16-bit pairs in one packed conversion
 * (element by element, each takes a conversion and a merge into the 32-bit word). */
template <typename T, int VEC>
__device__ __forceinline__ Pack<T, VEC> pack_of(const float (&f)[VEC])
{
  Pack<T, VEC> p;
  if constexpr (Pair<T>::ok && VEC % 2 == 0) {
    using V = typename Pair<T>::V;
#pragma unroll
    for (int k = 0; k < VEC / 2; k++)
      reinterpret_cast<V *>(p.v)[k] = Pair<T>::make(f[2 * k], f[2 * k + 1]);
  } else {
#pragma unroll
    for (int j = 0; j < VEC; j++)
      p.v[j] = from_f<T>(f[j]);
  }
  return p;
}

/* Every value of f rounded to T in place (round_to<T> of each): 16-bit pairs by one packed
 * conversion, nothing for fp32. */
template <typename T, int VEC> __device__ __forceinline__ void round_pack(float (&f)[VEC])
{
  if constexpr (!std::is_same<T, float>::value)
    unpack(pack_of<T>(f), f);
}

/* The VEC weights of pack v as fp32 (`absent` when there is no weight: 1 for a weight, 0 for
 * a bias), in 16-byte loads through the read-only path: every row re-reads the same columns,
 * so they stay in L1. LATE: the absent values made only where there is no weight, by a
 * volatile move the compiler may not hoist; left to itself it fills them above the branch as
 * defaults, VEC moves that every row with a weight pays, which the forward's epilogue feels
 * (docs/kernels.md, Open targets); the backward keeps the compiler's choice (LayerNorm's
 * shared-row kernel spilled more without it). */
template <typename T, int VEC, bool LATE = false>
__device__ __forceinline__ void load_w_raw(const void *w, int wf32, int v, float (&out)[VEC], float absent)
{
  if (!w) {
    float a = absent;
    if constexpr (LATE)
      asm volatile("mov.b32 %0, %1;" : "=f"(a) : "f"(absent));
#pragma unroll
    for (int j = 0; j < VEC; j++)
      out[j] = a;
  } else if (wf32) {
    const Pack<float, VEC> p = reinterpret_cast<const Pack<float, VEC> *>(w)[v];
#pragma unroll
    for (int j = 0; j < VEC; j++)
      out[j] = p.v[j];
  } else {
    const Pack<T, VEC> p = reinterpret_cast<const Pack<T, VEC> *>(w)[v]; /* one 16-byte load: */
    unpack(p, out); /* unpacking the global pack in place would read it word by word */
  }
}

/* The offset added to weights W where there is a weight w (1 + offset would be wrong where
 * there is none: the absent weight is 1) and the offset is not 0 (a uniform branch over VEC
 * adds that most rows skip; w + 0 would also turn a -0 weight into +0, which the reference
 * does not do either). */
template <int VEC> __device__ __forceinline__ void add_offset(const void *w, float offset, float (&W)[VEC])
{
  if (w && offset != 0.f)
#pragma unroll
    for (int j = 0; j < VEC; j++)
      W[j] += offset;
}

/* The same with the offset added to a weight that is there. */
template <typename T, int VEC>
__device__ __forceinline__ void load_w(const void *w, int wf32, float offset, int v, float (&out)[VEC])
{
  load_w_raw<T, VEC>(w, wf32, v, out, 1.f);
  add_offset(w, offset, out);
}

/* A thread's weights (or LayerNorm's biases) for its packs. Preloaded (the pipelined kernels, which keep them for
 * the whole kernel, and the forward one-row kernels with an early weight): packs of x's
 * dtype are held as they are, in half the registers of fp32 values, and converted where used;
 * callers refresh() them once per row, after the reduction, so the compiler neither hoists
 * the conversions out of a loop nor moves them above the reduction into fp32 registers.
 * Otherwise get() reads them where used, from L1, after the row's reduction. fp32 weights
 * are always read where used. */
template <typename T, int VEC, int ITEMS, bool LATE = false> struct Weights {
  Pack<T, VEC> raw[ITEMS];
  const void *w;
  int wf32;
  float offset, absent; /* absent: the value of every element without a vector (1, a bias 0) */
  bool held;
  __device__ __forceinline__ Weights(const void *w_, int wf32_, float offset_, int lane, int G,
                                     int nvec, bool preload, float absent_ = 1.f)
      : w(w_), wf32(wf32_), offset(offset_), absent(absent_), held(preload && w_ && !wf32_)
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
    get_raw(i, v, W);
    add_offset(w, offset, W);
  }
  /* the same without the offset (a bias; a caller that folds the offset in elsewhere) */
  __device__ __forceinline__ void get_raw(int i, int v, float (&W)[VEC]) const
  {
    if (held)
      unpack(raw[i], W);
    else
      load_w_raw<T, VEC, LATE>(w, wf32, v, W, absent);
  }
  /* packs of x's dtype there and read where used: get_raw without its tests (plain_raw) */
  __device__ __forceinline__ bool plain() const { return w && !wf32 && !held; }
  __device__ __forceinline__ void plain_raw(int v, float (&W)[VEC]) const
  {
    const Pack<T, VEC> p = reinterpret_cast<const Pack<T, VEC> *>(w)[v]; /* one 16-byte load */
    unpack(p, W);
  }
};

/* Asynchronous global -> shared copies (cp.async, sm_80+). They hold no registers while in
 * flight, so a kernel can keep several rows' loads outstanding whatever its register budget.
 * 16-byte copies bypass L1 (.cg), keeping it for the weight; packs under 4 bytes (fp16/bf16
 * without 16-byte alignment) are copied synchronously. */
template <typename P>
__device__ __forceinline__ void copy_async(unsigned d, const P *src)
{
  if constexpr (sizeof(P) == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
  else if constexpr (sizeof(P) == 4 || sizeof(P) == 8)
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(d), "l"(src), "n"(sizeof(P))
                 : "memory");
  else {
    static_assert(sizeof(P) == 2, "packs of 2, 4, 8 or 16 bytes");
    asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(d), "h"(*reinterpret_cast<const unsigned short *>(src))
                 : "memory");
  }
}

template <typename P>
__device__ __forceinline__ void copy_async(P *dst, const P *src)
{
  copy_async((unsigned)__cvta_generic_to_shared(dst), src);
}

/* A shared-window load of a Staging slot (a float, or a pack of 2, 4, 8 or 16 bytes; 2-byte
 * packs come from the persistent forward's rows of single 16-bit elements, which copy_async
 * stores synchronously; the held backward keeps its rows in registers instead) */
template <typename P> __device__ __forceinline__ P load_shared(unsigned a)
{
  P p;
  if constexpr (sizeof(P) == 16) {
    uint4 &u = *reinterpret_cast<uint4 *>(&p);
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w) : "r"(a));
  } else if constexpr (sizeof(P) == 8) {
    uint2 &u = *reinterpret_cast<uint2 *>(&p);
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(u.x), "=r"(u.y) : "r"(a));
  } else if constexpr (sizeof(P) == 4) {
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(*reinterpret_cast<unsigned *>(&p)) : "r"(a));
  } else {
    static_assert(sizeof(P) == 2, "packs of 2, 4, 8 or 16 bytes");
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(*reinterpret_cast<unsigned short *>(&p)) : "r"(a));
  }
  return p;
}

/* A 16-byte store to a shared-window address (bwd_stride's dB sums kept in shared memory) */
__device__ __forceinline__ void store_shared(unsigned a, const float4 &v)
{
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(a), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
}

/* A 16-byte copy as above; last: the line's last read, which L2 may evict first (lifts an
 * evict_last that the writer gave it: store_stream_or_keep). */
template <typename P>
__device__ __forceinline__ void copy_async(P *dst, const P *src, bool last)
{
  static_assert(sizeof(P) == 16, "16-byte copies");
  if (!last)
    return copy_async(dst, src);
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
               "l"(l2_policy<false>()) : "memory");
}

__device__ __forceinline__ void copy_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

/* Waits until at most `pending` (0..3) of this thread's committed copy groups are in flight. */
__device__ __forceinline__ void copy_wait(int pending)
{
  if (pending == 1) /* the default two stages first: a jump table costs about ten instructions */
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
  else if (pending <= 0)
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  else if (pending == 2)
    asm volatile("cp.async.wait_group 2;\n" ::: "memory");
  else
    asm volatile("cp.async.wait_group 3;\n" ::: "memory");
}

/* A thread's private slots in a pipelined kernel's shared memory: for each of `stages` rows
 * in flight, one pack per item of each of `streams` inputs, then SCALARS floats per stage
 * (the backward's rstd and, for LayerNorm, mean). Laid out [stage][stream][item][thread],
 * then [stage][scalar][thread], so a warp's copies fill consecutive addresses; only the
 * thread that copies a pack's slot reads it, so no barrier guards the packs
 * (cp.async.wait_group makes a thread's own copies visible to it). A scalar's slot may be read
 * by the other lanes of its group within the warp, which the kernel guards with __syncwarp
 * (bwd_stride's LEAD). Slots are shared-window
 * addresses (copy_async's and load_shared's): from generic pointers the compiler rebuilt
 * dyn's address at every copy, in a loop whose instructions bound it (docs/kernels.md, "The
 * staging's addresses"). The host sizes it with staging_cost (plan.cuh). */
template <typename P, int ITEMS, int SCALARS = 1> struct Staging {
  unsigned packs, floats; /* this thread's first pack and float, shared-window byte addresses */
  int pack_b, stage_b, float_b; /* bytes between a thread's packs, its stages' packs, its floats */
  __device__ Staging(void *smem, int stages, int streams)
  {
    const unsigned base = (unsigned)__cvta_generic_to_shared(smem);
    pack_b = blockDim.x * (int)sizeof(P);
    stage_b = streams * ITEMS * pack_b;
    float_b = blockDim.x * (int)sizeof(float);
    packs = base + threadIdx.x * (unsigned)sizeof(P);
    floats = base + stages * stage_b + threadIdx.x * (unsigned)sizeof(float);
  }
  __device__ __forceinline__ unsigned at(int stage, int stream, int item) const
  {
    return packs + stage * stage_b + (stream * ITEMS + item) * pack_b;
  }
  __device__ __forceinline__ unsigned scalar(int stage, int k = 0) const
  {
    return floats + (stage * SCALARS + k) * float_b;
  }
  /* the CTA's first byte past its `stages` stages of staging (a shared-window address) */
  __device__ __forceinline__ unsigned past(int stages) const
  {
    return floats - threadIdx.x * (unsigned)sizeof(float) + stages * SCALARS * float_b;
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

/* Programmatic dependent launch (sm_90; no-ops before): a kernel launched with it waits
 * here for the kernel before it in the stream to finish and its writes to be visible. */
__device__ __forceinline__ void pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* Lets the kernel after this one in the stream launch, if it was launched for that (a no-op
 * otherwise): its CTAs then take the SM slots this grid leaves and wait (pdl_wait) for all of
 * it to finish, so no memory needs ordering around it; without the "memory" clobber ptxas
 * keeps the pipelined backward's registers (with it, fp32 at 2 packs took 64 -> 69). */
__device__ __forceinline__ void pdl_trigger()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

/* Programmatic dependent launch (nlk_norm.pdl): a kernel so launched may be running while
 * the one before it in the stream drains, so it must wait (griddepcontrol.wait) before it
 * reads or writes global memory; it then lets the next one launch at once, whose CTAs take
 * the SM slots this grid leaves. Every kernel that launch_norm starts calls this first. The
 * wait is skipped in a normal launch: it costs every CTA even there, which grids of many
 * small CTAs feel. Absent before sm_90. */
__device__ __forceinline__ void pdl_begin(int on)
{
  if (on) {
    pdl_wait();
    pdl_trigger();
  }
}

/* Thread-block cluster primitives (sm_90; the host launches clusters from sm_90 only). Its
 * two halves apart, a cluster barrier lets a CTA announce that it has started (and set up
 * what its peers may touch) and go on with its first loads before waiting for the others. The
 * kernels call these two on every architecture (as no-ops before sm_90). */
__device__ __forceinline__ void cluster_arrive()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif
}

__device__ __forceinline__ void cluster_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
#endif
}

/* ---- fp8 outputs (nlk.h's numerics): y_fp8 = satfinite(rne(v * scale)) of an fp32 v, amax
 * = max |v| over the tensor as unsigned bits, current scaling's scale from amax. The CPU's
 * conversions (kernels/cpu/convert.h, cpu_rows.h) give the same bits. ---- */

/* fp8 elements as types: Pack<__nv_fp8_e4m3, 16> is 16 of them; to_f is exact, from_f
 * saturates to the largest finite value (infinities included) and keeps NaN, rounding to
 * nearest even: cvt.rn.satfinite on sm_89 and later, the header's exact emulation before. */
template <typename O, __nv_fp8_interpretation_t KIND> struct Fp8Dt {
  static __device__ __forceinline__ float to_f(O v) { return static_cast<float>(v); }
  static __device__ __forceinline__ O from_f(float v)
  {
    O r;
    r.__x = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, KIND);
    return r;
  }
};
template <> struct Dt<__nv_fp8_e4m3> : Fp8Dt<__nv_fp8_e4m3, __NV_E4M3> {};
template <> struct Dt<__nv_fp8_e5m2> : Fp8Dt<__nv_fp8_e5m2, __NV_E5M2> {};

/* The fp8 type of an nlk dtype (NLK_F8E4M3, NLK_F8E5M2), and its largest finite value. */
template <int DT> using Fp8 = std::conditional_t<DT == NLK_F8E4M3, __nv_fp8_e4m3, __nv_fp8_e5m2>;
template <int DT> __host__ __device__ constexpr float fp8_max() { return DT == NLK_F8E4M3 ? 448.f : 57344.f; }

/* a * b rounded to nearest even, subnormals kept: the kernels build with --use_fast_math,
 * whose flush-to-zero would turn a subnormal fp32 input (bf16 has fp32's range) times a huge
 * scale into 0 where the CPU reference gives a normal fp8 value. */
__device__ __forceinline__ float mul_rn(float a, float b)
{
  float r;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

/* v scaled into fp8 type O (an fp32 product, then one satfinite rounding). */
template <typename O> __device__ __forceinline__ O to_fp8(float v, float scale)
{
  return from_f<O>(mul_rn(v, scale));
}

/* max(a, |b|) with NaN winning (max.NaN, sm_80+): one FMNMX.NAN with b's absolute value as
 * an operand modifier (taken outside the asm, fabsf costs an FADD of its own); |v| >= 0 and
 * NaN's canonical bits (0x7fffffff) order above inf, as amax_commit takes them. */
__device__ __forceinline__ float max_abs_nan(float a, float b)
{
#if __CUDA_ARCH__ >= 800
  float r;
  asm("{ .reg .f32 t; abs.f32 t, %2; max.NaN.f32 %0, %1, t; }" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return __uint_as_float(max(__float_as_uint(a), __float_as_uint(b) & 0x7fffffffu));
#endif
}

/* Four fp32 values (already scaled) as four fp8 of kind KIND in one 32-bit word, a first:
 * two cvt.rn.satfinite x2 conversions that merge into the word (sm_89+; F2FP ... MERGE_C),
 * where each 16-bit pair stored on its own took three byte moves more. */
template <__nv_fp8_interpretation_t KIND>
__device__ __forceinline__ unsigned fp8x4(float a, float b, float c, float d)
{
#if __CUDA_ARCH__ >= 890
  unsigned r;
  if constexpr (KIND == __NV_E4M3)
    asm("{ .reg .b16 lo, hi; cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1; cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;"
        " mov.b32 %0, {lo, hi}; }" : "=r"(r) : "f"(a), "f"(b), "f"(c), "f"(d));
  else
    asm("{ .reg .b16 lo, hi; cvt.rn.satfinite.e5m2x2.f32 lo, %2, %1; cvt.rn.satfinite.e5m2x2.f32 hi, %4, %3;"
        " mov.b32 %0, {lo, hi}; }" : "=r"(r) : "f"(a), "f"(b), "f"(c), "f"(d));
  return r;
#else
  return (unsigned)__nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, KIND) |
         (unsigned)__nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, KIND) << 16;
#endif
}

/* VEC fp32 values scaled into a pack of fp8 type O, four per 32-bit word (fp8x4), |v| (before
 * scaling) folded into the running max amax (max_abs_nan): the fp8 epilogue of the norms and
 * the transposes. Per element a multiply, a max and half a conversion (byte by byte, it
 * doubled the plain forward's instructions: ncu, 32768 x 4096). */
template <typename O, int VEC>
__device__ __forceinline__ Pack<O, VEC> to_fp8_pack(const float (&v)[VEC], float scale, float &amax)
{
  constexpr __nv_fp8_interpretation_t kind = std::is_same<O, __nv_fp8_e4m3>::value ? __NV_E4M3 : __NV_E5M2;
  Pack<O, VEC> p;
#pragma unroll
  for (int j = 0; j < VEC; j++)
    amax = max_abs_nan(amax, v[j]);
  if constexpr (VEC % 4 == 0) {
    unsigned *word = reinterpret_cast<unsigned *>(&p);
#pragma unroll
    for (int j = 0; j < VEC; j += 4)
      word[j / 4] = fp8x4<kind>(mul_rn(v[j], scale), mul_rn(v[j + 1], scale), mul_rn(v[j + 2], scale),
                                mul_rn(v[j + 3], scale));
  } else {
#pragma unroll
    for (int j = 0; j < VEC; j++)
      p.v[j] = to_fp8<O>(v[j], scale);
  }
  return p;
}

/* The max of v over the warp's 32 lanes, in every lane: one REDUX (sm_80+), where the
 * butterfly took five shuffles and five maxima in a chain of their latencies. */
__device__ __forceinline__ unsigned warp_max(unsigned v)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return __reduce_max_sync(0xffffffffu, v);
#else
  for (int o = 16; o > 0; o >>= 1)
    v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
#endif
}

/* A CTA's amax: the max of every thread's am (max_abs_nan's), then one atomicMax on the bits
 * of *amax (cleared before the kernel by clear_amax; NULL: nothing) unless *amax already holds
 * as much: thread 0 reads it as the reduction starts (its latency behind the reduction; no
 * register held across the kernel, which pushed the staged kernels past their 32) and skips
 * the atomic when the CTA's max is not above it, *amax only growing: with a CTA per row, tens
 * of thousands of atomics on the one address queue at its L2 slice. An unsigned max of |v|'s
 * bits orders them as the values, NaN above inf, and gives the same bits in any order. Every
 * thread of the CTA calls it (one __syncthreads where the CTA has several warps); red is 32
 * unsigned of shared memory. */
__device__ __forceinline__ void amax_commit(float *amax, float am, unsigned *red)
{
  const int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int warps = (blockDim.x * blockDim.y * blockDim.z + 31) >> 5;
  const unsigned seen = t == 0 && amax ? __ldcg(reinterpret_cast<const unsigned *>(amax)) : 0u;
  unsigned v = warp_max(__float_as_uint(am));
  if (warps > 1) { /* a CTA of one warp has its max already: no barrier, no second round */
    if ((t & 31) == 0)
      red[t >> 5] = v;
    __syncthreads();
    if (t >= 32)
      return;
    v = warp_max(t < warps ? red[t] : 0u);
  }
  if (t == 0 && amax && v > seen)
    atomicMax(reinterpret_cast<unsigned *>(amax), v);
}

/* Current scaling's scale from amax: fp8 max / amax correctly rounded (not the fast-math
 * approximation), 1 when amax is 0 or not finite, the largest fp32 when it overflows; the
 * bits of cpu_rows.h's nlc_scale_from_amax. */
__device__ __forceinline__ float scale_from_amax(float amax, float max_fp8)
{
  float s;
  if (!(amax > 0.f) || isinf(amax))
    return 1.f;
  asm("div.rn.f32 %0, %1, %2;" : "=f"(s) : "f"(max_fp8), "f"(amax));
  return isinf(s) ? 3.402823466e38f : s;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
/* The rest only in sm_90 code: a full cluster barrier (release, acquire), this CTA's rank in
 * its cluster, and the address of `addr` (in this CTA's shared memory) in CTA `rank`'s. */
__device__ __forceinline__ void cluster_sync()
{
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

__device__ __forceinline__ unsigned cluster_rank()
{
  unsigned q;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(q));
  return q;
}

__device__ __forceinline__ unsigned peer_shared(unsigned addr, unsigned rank)
{
  unsigned peer;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(peer) : "r"(addr), "r"(rank));
  return peer;
}

/* A float at a shared::cluster address (peer_shared's). */
__device__ __forceinline__ float peer_load(unsigned addr)
{
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
  return v;
}

/* The first half of a cluster barrier with release semantics: this CTA's reads of its peers'
 * shared memory are done before they pass the wait (cluster_wait) and may exit. */
__device__ __forceinline__ void cluster_arrive_release()
{
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}

#endif

} // namespace nlk

#endif
