/*
 * norm_fwd.cu: the forward family. RMSNorm, add_rmsnorm with its residual add fused in front
 * (h = round(x + residual) goes to residual_out and is normalised) and LayerNorm; the ops
 * differ only where their math differs: the row's statistics (RMSNorm: the mean square;
 * LayerNorm: the mean, then the mean square about it, a second pass over the row held on
 * chip; the Norm template parameter), the output (LayerNorm's bias) and the residual add
 * (the RES template parameter).
 *
 * Strategies (nlk_cuda_fwd, at the end) and the row mappings they run as (plan.cuh):
 *   row         CTA: one CTA per row (SKEW for rows of single 16-bit elements: cut at x's
 *               16-byte boundaries into a head, 16-byte packs and a tail); LOOP for rows
 *               too wide for registers;
 *   blockrow    WARP: a warp or less per row, rmsnorm.fwd.blockrow_block threads per CTA;
 *   persistent  STRIDE: grid = SMs x resident CTAs striding over rows, the weight read once
 *               per CTA, each thread's packs of the next rmsnorm.fwd.stages - 1 rows in
 *               flight through cp.async; GROUPS (one-row kernels) where no stage fits, LOOP;
 *   staged      STAGED: one CTA per row, the row copied whole to shared memory.
 * In the one-row kernels a thread holds its packs of x in registers across the row's reduction,
 * so x is read once; RMSNorm's, up to rmsnorm.fwd.early_weight_max_n columns, load the weight
 * with x (grids of about one wave otherwise wait on the weight all at once, after the reduction),
 * and from rmsnorm.fwd.reload_min_n columns and reload_min_m rows hold nothing and read x twice,
 * the second time from L1, which fits more CTAs per SM (a grid of a few waves gains nothing from
 * that and pays the second read). Outputs leave through streaming stores, but for an fp8 y that
 * the core's external transpose reads next (FwdOut.keep_y: L2 keeps it). The rmsnorm.fwd.*
 * settings steer LayerNorm's kernels too. With RMSNorm's llama casting and 16-bit weights of x's
 * dtype, y is one packed multiply per two elements. Packs are 16 bytes when N, strides and
 * pointers allow, single elements otherwise.
 *
 * This file is compiled as itself for the strategies (host code only) and, through the
 * translation units CMake generates from instances.cu.in, once per dtype, pack width and norm
 * for the kernels (NLK_INSTANCE), so that a build runs them in parallel.
 */
#include "device.cuh"
#include "nlk_cuda.h"
#include "plan.cuh"
#include "tile.cuh"

namespace nlk {

/* The kernels' one argument: 112 bytes, two 64-byte lines of the constant cache (kernel
 * arguments start at offset 0x210 on sm_90), hence the narrow fields. Every launch starts
 * with both lines cold, and the kernels' first loads are `group` and `pdl`, one in each, so
 * that one round trip brings every field in; what the one-row kernels read up to their x
 * load sits in the first line with `group` (x, sx, N), the fields of RMSNorm's epilogue
 * there too or in the second line. Larger structs are read through a pointer to the
 * parameter space, and ptxas then holds more registers (47 instead of 40 in the one-row
 * kernel at 2 packs: a resident CTA fewer per SM). Row strides are int32 (fwd_supports
 * refuses wider ones; with one row the stride is unused and passed as 0). */
struct FwdArgs {
  /* first line: 0x210 .. 0x23f */
  const void *x, *w;
  void *y;
  float *rstd;
  int32_t sx, sy, N;
  int16_t group;
  int8_t cast;
  bool pair; /* llama casting, weights of x's dtype, no offset: y by packed multiplies */
  /* second line: 0x240 .. 0x27f */
  int64_t M;
  const void *res, *b;
  void *res_out;
  float *mean;
  int32_t sres, sres_out;
  float offset, eps, inv_n; /* inv_n: 1 / N, from the host */
  bool pdl, wf32, bf32;
  int8_t stages;
};
static_assert(sizeof(FwdArgs) == 112 && offsetof(FwdArgs, M) == 48,
              "FwdArgs: two 64-byte lines from offset 0x210, group in the first, pdl in the second");

/* Current scaling's two launches of one kernel, and delayed scaling's one (FwdOut.pass). */
enum FwdPass : int8_t { PASS_DELAYED = 0, PASS_AMAX = 1, PASS_Y = 2 };

/* The kernels' second argument: what an fp8 y and a strided yt need, apart from FwdArgs so
 * that it stays within 128 bytes; the plain kernels (Out::PLAIN) never read it. */
struct FwdOut {
  float *scale;  /* PASS_DELAYED: read (NULL: 1); PASS_Y: the scale used goes here (NULL: nowhere) */
  float *amax;   /* PASS_DELAYED: |y| reduced into it (NULL: not wanted); PASS_AMAX: the same,
                  * always set; PASS_Y: read for the scale */
  void *yt;      /* the transposed copy, y's dtype: yt[col * syt + row], stored strided by the
                  * epilogue (OUT with _T) or from the slab's tile; NULL: none */
  int64_t syt;
  int32_t slab_cols; /* SLAB: the columns of a CTA's slab (N / the cluster's CTAs) */
  int16_t slab_rows; /* SLAB: the rows of a cluster's block */
  int8_t pass;   /* FwdPass */
  bool keep_y;   /* an fp8 y stored for L2 to keep (the transpose reads it next) */
  /* the chunked transposed copy (fp8 outputs without _T): this launch's CTAs from row_ctas on
   * each transpose a tile_m x tile_n tile of the previous chunk's tile_rows rows of y
   * (tile_y, row stride FwdArgs.sy) into yt (tile_yt: yt at that chunk's first row) */
  const void *tile_y;
  void *tile_yt;
  int32_t tile_rows, row_ctas;
  int16_t tile_m, tile_n;
  bool chunked;
  bool tile_vec; /* y, yt and their rows 16-byte aligned: 16-byte tile loads and stores */
};
static_assert(sizeof(FwdOut) <= 128, "FwdOut: at most two 64-byte lines");

/* What a kernel writes y as (its OUT parameter): x's dtype and nothing else (PLAIN: the
 * kernels as they were before fp8, which take no register for the rest), x's dtype with a
 * strided yt (SAME), fp8 scaled with amax (E4M3, E5M2), and fp8 with a strided yt (E4M3_T,
 * E5M2_T: the yt stores' row index and stride held across the epilogue took the fp8 row
 * kernel from 39 to 56 registers, two resident CTAs fewer per SM, where no yt was asked). */
enum class Out : int8_t { PLAIN, SAME, E4M3, E5M2, E4M3_T, E5M2_T };
__host__ __device__ constexpr bool out_fp8(Out o) { return o != Out::PLAIN && o != Out::SAME; }
__host__ __device__ constexpr bool out_e4m3(Out o) { return o == Out::E4M3 || o == Out::E4M3_T; }
__host__ __device__ constexpr bool out_yt(Out o) { return o == Out::SAME || o == Out::E4M3_T || o == Out::E5M2_T; }

/* What a one-row kernel's thread holds across the reduction: its packs of x, the weight read
 * after the reduction from L1 (X); x and the weight loaded with it (EARLY_W); nothing, x read
 * again from L1 after the reduction (RELOAD). */
enum class Hold { X, EARLY_W, RELOAD };

/* Everything that selects a forward kernel besides the dtype, the pack width and the norm.
 * lanes: the one-row kernels' threads per row, to be compiled in where an instance has them
 * (one_kernel); 0, or no such instance: the general kernel, which reads FwdArgs.group. */
struct FwdKernel {
  Rows rows;
  int items;
  Hold hold;
  bool res;
  Out out;
  int lanes;
};

/* The kernel for a key, from the translation unit that instantiates T, VEC and NORM; NULL
 * when no kernel has that layout. */
template <typename T, int VEC, Norm NORM> const void *fwd_kernel(const FwdKernel &key);

/* The largest block per packs per thread (items 1, 2, 4, 8) and the CTAs of that size that
 * must fit an SM: at most 512 threads share a row from 2 packs up (wider rows take more packs
 * per thread: two resident rows of 512 threads move more than one of 1024), within 64
 * registers up to 4 packs. From ptxas's counts for bf16 (the hungriest dtype), so that
 * nothing spills. */
constexpr BlockLimits FWD_LIMITS{{1024, 512, 512, 256}, {1, 2, 2, 2}, 0, true};
constexpr BlockLimits FWD_PIPE_LIMITS{{1024, 1024, 512, 256}, {1, 1, 1, 1}, 512};
/* The pipelined kernels with an fp8 y hold about half as many registers again (ptxas: 244
 * instead of 128 at 8 packs, bf16 in), and with a strided yt of fp16 they spill at 8 packs
 * with a residual: half the threads for every output but the plain one. */
constexpr BlockLimits FWD_PIPE_OUT_LIMITS{{512, 512, 256, 128}, {1, 1, 1, 1}, 512};
constexpr const BlockLimits &pipe_limits(Out out)
{
  return out == Out::PLAIN ? FWD_PIPE_LIMITS : FWD_PIPE_OUT_LIMITS;
}
/* staged: any block up to 1024 threads within 32 registers, a full SM of threads (LayerNorm's
 * two passes need 64: one CTA of 1024). */
enum { STAGED_MAX_BLOCK = 1024 };
constexpr int staged_min_ctas(Norm norm) { return norm == Norm::LN ? 1 : 2; }
/* slab: at most 512 threads, 64 rows a block and 16 CTAs a cluster (sm_90's non-portable
 * maximum; above 8 the kernel opts in). */
enum { SLAB_MAX_BLOCK = 512, SLAB_MAX_ROWS = 64, SLAB_MAX_CLUSTER = 16 };

/* ---- The kernels, compiled once per dtype and pack width (NLK_INSTANCE) ---- */

#ifdef NLK_INSTANCE

namespace {

/* The early-weight kernels at 2 packs in fewer registers, three CTAs of 512: one CTA more
 * per SM is what an N = 4096 row needs to reach the roofline. */
constexpr BlockLimits FWD_EARLY_LIMITS{{1024, 512, 512, 256}, {1, 3, 2, 2}, 0, true};
/* Rows of single 16-bit elements with a y of x's dtype, no residual and the weight read after
 * the reduction: two CTAs of 1024 at 8 elements a thread (32 registers, no spill), so that a
 * row of up to 8192 columns, which takes a whole CTA of 1024, does not have its SM to itself
 * (the early weight's kernels spill within 32). */
constexpr BlockLimits FWD_SCALAR_LIMITS{{1024, 512, 512, 256}, {2, 2, 2, 2}, 0, true};
/* An fp8 y at 8 packs, no yt, no residual: four CTAs of 256 within 64 registers, where the two
 * of FWD_LIMITS let ptxas take 72-80 and keep three resident: +2-6% at 4096 to 16384 columns
 * (H200). LayerNorm's 16-bit rows spill 40-52 bytes within 64 with the full-rows copy
 * (fwd_one) and run faster in three CTAs of 80 registers, unspilled (FWD_FP8_LN16_LIMITS).
 * With a yt or a residual the kernel spills within 64; three CTAs (80) changed nothing there. */
constexpr BlockLimits FWD_FP8_LIMITS{{1024, 512, 512, 256}, {1, 2, 2, 4}, 0, true};
constexpr BlockLimits FWD_FP8_LN16_LIMITS{{1024, 512, 512, 256}, {1, 2, 2, 3}, 0, true};
/* The kernels those two bound: an fp8 y without yt or residual (fwd_one's 8-pack copy too). */
template <bool RES, Out OUT> constexpr bool FP8_BOUNDED = out_fp8(OUT) && !out_yt(OUT) && !RES;
template <typename T, int VEC, Norm NORM, bool RES, bool EARLY, Out OUT>
constexpr const BlockLimits &one_limits()
{
  if (EARLY)
    return FWD_EARLY_LIMITS;
  if (FP8_BOUNDED<RES, OUT>)
    return NORM == Norm::LN && sizeof(T) == 2 ? FWD_FP8_LN16_LIMITS : FWD_FP8_LIMITS;
  if (VEC == 1 && sizeof(T) == 2 && !RES && OUT == Out::PLAIN)
    return FWD_SCALAR_LIMITS;
  return FWD_LIMITS;
}
/* reload: nothing held across the reduction, so 32 registers and a full SM of threads up
 * to 2 packs; the first read's packs need more at 4 (three CTAs of 512) and 8. */
constexpr BlockLimits FWD_RELOAD_LIMITS{{1024, 512, 512, 256}, {2, 4, 3, 4}, 0, true};

/* A row's statistics: 1 / its root mean square r, about its mean mu for LayerNorm (mu = 0
 * for RMSNorm). */
struct Stats {
  float mu, r;
};

/* The pack count of a row that gives every thread of its group all ITEMS packs (N = G ITEMS
 * VEC), passed where an int nvec goes: each `v < nvec` test of a pack folds to true, so the
 * packs' loads, passes and stores compile without their branches. */
struct AllPacks {};
__device__ __forceinline__ constexpr bool operator<(int, AllPacks) { return true; }

/* What the epilogue hands each stored pack of y besides y itself: nothing (every kernel but
 * the slab, whose tile takes it). */
struct NoTap {
  template <typename P> __device__ __forceinline__ void operator()(const P &) const {}
};

/* The epilogue's output side for OUT (y's element type O): PLAIN folds away to a plain store.
 * fp8: y = satfinite(rne(v * scale)) of the fp32 value v (device.cuh's to_fp8_pack: the CPU's
 * bits), |v| into the thread's amax, committed once per CTA (commit(): every thread of the
 * CTA calls it once, at the end); the scale read once per thread (delayed) or computed from
 * the amax pass's result (current's y pass; CTA 0 writes it out). Current scaling's amax
 * pass stores nothing (stores() false: neither y nor h, rstd, the mean), since residual_out
 * may be the residual that the y pass reads again. yt: each element again at
 * yt[col * syt + row], a sector per element (the strided baseline). */
template <typename T, Out OUT> struct Epi {
  static constexpr bool fp8 = out_fp8(OUT);
  using O = std::conditional_t<!fp8, T, std::conditional_t<out_e4m3(OUT), __nv_fp8_e4m3, __nv_fp8_e5m2>>;
  const FwdOut &o;
  float scale = 1.f;
  float amax = 0.f; /* max |v| so far, NaN winning (max_abs_nan) */
  uint64_t keep_pol = 0; /* fp8: the evict_last policy of a kept y, made once */

  __device__ __forceinline__ explicit Epi(const FwdOut &out) : o(out)
  {
    if constexpr (fp8) {
      keep_pol = l2_policy<true>();
      if (o.pass == PASS_Y) {
        scale = scale_from_amax(*o.amax, fp8_max<out_e4m3(OUT) ? NLK_F8E4M3 : NLK_F8E5M2>());
        if (o.scale && blockIdx.x == 0 && threadIdx.x == 0)
          *o.scale = scale;
      } else if (o.pass == PASS_DELAYED && o.scale) {
        scale = *o.scale;
      }
    }
  }

  __device__ __forceinline__ bool stores() const
  {
    if constexpr (OUT == Out::PLAIN)
      return true;
    else
      return o.pass != PASS_AMAX;
  }

  /* Pack v of row `row` (y: the row's first pack) from its fp32 values f, also handed to tap
   * (the slab kernel's tile; nothing elsewhere). The amax pass converts too and only skips
   * the stores: with a branch around the conversion the pipelined kernel spilled twice as
   * much at the plain kernel's limits (ptxas). */
  template <bool STREAM, int VEC, typename Tap = NoTap>
  __device__ __forceinline__ void put(Pack<O, VEC> *y, int64_t row, int v, const float (&f)[VEC], Tap tap = {})
  {
    Pack<O, VEC> p;
    if constexpr (fp8)
      p = to_fp8_pack<O>(f, scale, amax);
    else
      p = pack_of<T>(f);
    if (!stores())
      return;
    if constexpr (fp8 && !out_yt(OUT) && STREAM)
      store_stream_or_keep(y + v, p, o.keep_y, keep_pol);
    else
      store_pack<STREAM>(y + v, p);
    tap(p);
    if constexpr (out_yt(OUT)) {
      if (o.yt) {
        O *t = static_cast<O *>(o.yt) + row;
#pragma unroll
        for (int j = 0; j < VEC; j++)
          t[(int64_t)(v * VEC + j) * o.syt] = p.v[j];
      }
    }
  }

  __device__ __forceinline__ void commit() const
  {
    if constexpr (fp8) {
      __shared__ unsigned red[32];
      if (o.amax && o.pass != PASS_Y)
        amax_commit(o.amax, amax, red);
    }
  }
};

/* LayerNorm's statistics in two passes over the thread's elements, which each(f) visits
 * (f(x) per element as fp32; nothing for a thread of an inactive row): the mean, then the
 * mean square about it, each summed over the row by sum(v, k) (k: the pass, 0 or 1; every
 * thread calls it the same number of times): a warp's shuffles, group_reduce or the slab's
 * cluster's. Two passes, as the reference: the one-pass E[x^2] - E[x]^2 loses the variance of
 * rows whose mean is large against their spread. */
template <typename Each, typename Sum>
__device__ __forceinline__ Stats ln_stats_by(const FwdArgs &a, Each each, Sum sum)
{
  float s = 0.f;
  each([&](float x) { s += x; });
  const float mu = sum(s, 0) * a.inv_n;
  float v = 0.f;
  each([&](float x) {
    const float d = x - mu;
    v += d * d;
  });
  return Stats{mu, rsqrtf(sum(v, 1) * a.inv_n + a.eps)};
}

/* The same over a group of G threads (group_reduce's groups). With MERGE, up to a warp: both
 * passes summed by shuffles; wider: each warp takes the two passes over its own elements (sum
 * and count, then the squares about the warp's mean m_w), and one exchange through shared
 * memory merges the warps exactly, M2 = sum over warps of M2_w + n_w (m_w - mean)^2 (Chan,
 * Golub and LeVeque): one barrier a row instead of a reduction's per pass, for a count summed
 * by one REDUX and a division. Every thread of a group adds the same values in the same
 * butterfly, so all get the same bits. Without MERGE (threads of one pack and an fp8 y,
 * where the two reductions measured faster, and the looping kernel, not measured with it):
 * group_reduce per pass. */
template <bool MERGE, typename Each>
__device__ __forceinline__ Stats ln_stats(const FwdArgs &a, Each each, int G, float (*red)[32], int &parity)
{
  if constexpr (!MERGE)
    return ln_stats_by(a, each, [&](float v, int) { return group_reduce(v, G, red, parity); });
  if (G <= 32)
    return ln_stats_by(a, each, [&](float v, int) { return group_sum(v, G); });
  __shared__ float4 part[2][32];
  float s = 0.f;
  unsigned c = 0;
  each([&](float x) {
    s += x;
    c++;
  });
  const float2 sc = make_float2(group_sum(s, 32), (float)warp_total(c));
  const float mw = sc.y > 0.f ? sc.x / sc.y : 0.f;
  float q = 0.f;
  each([&](float x) {
    const float d = x - mw;
    q += d * d;
  });
  q = group_sum(q, 32);
  if ((threadIdx.x & 31) == 0)
    part[parity][threadIdx.x >> 5] = make_float4(sc.x, sc.y, q, mw);
  __syncthreads();
  /* lane l of the group takes warp l's part (zero past the last warp of a whole CTA whose
   * warp count is not a power of two), as group_reduce's second stage */
  const int warps = G >> 5;
  int width = warps;
  float4 p;
  if (warps & (warps - 1)) {
    width = 1 << (32 - __clz(warps - 1));
    const int l = threadIdx.x & (width - 1);
    p = l < warps ? part[parity][l] : make_float4(0.f, 0.f, 0.f, 0.f);
  } else {
    p = part[parity][((threadIdx.x & ~(G - 1)) >> 5) + (threadIdx.x & (warps - 1))];
  }
  parity ^= 1;
  /* group_sum's butterflies over at most 32 warps, unrolled, each step behind a uniform test:
   * its loop over the run-time width spent three more instructions a step (unrolled in
   * group_sum itself, for every caller, it moved other kernels' registers by up to 20) */
  auto sum = [width](float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      if (o < width)
        v += shfl_xor(v, o);
    return v;
  };
  const float mu = sum(p.x) * a.inv_n, d = p.w - mu;
  return Stats{mu, rsqrtf(sum(fmaf(p.y * d, d, p.z)) * a.inv_n + a.eps)};
}

/* The thread's elements of a row held in packs, as ln_stats visits them: converted again in
 * each pass, since the row held as fp32 across the reductions takes twice the registers (a
 * resident CTA fewer per SM on wide rows; docs/kernels.md); rows of a warp or less at up to 2
 * packs a thread, and rows with an fp8 y at up to 4, hold it as fp32 (process_ln_held). */
template <typename T, int VEC, int ITEMS, typename NV>
__device__ __forceinline__ auto held(const Pack<T, VEC> (&xv)[ITEMS], bool active, int lane, int G, NV nvec)
{
  return [&xv, active, lane, G, nvec](auto f) {
    if (!active)
      return;
#pragma unroll
    for (int i = 0; i < ITEMS; i++)
      if (lane + i * G < nvec) {
        float x[VEC];
        unpack(xv[i], x);
#pragma unroll
        for (int j = 0; j < VEC; j++)
          f(x[j]);
      }
  };
}

/* A CTA's share of a row, pack(v) giving pack v, as ln_stats visits it (the staged and the
 * looping kernels: from shared memory, from global memory). */
template <typename T, int VEC, typename Get>
__device__ __forceinline__ auto strided(int nvec, Get pack)
{
  return [nvec, pack](auto f) {
    for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
      float x[VEC];
      unpack(pack(v), x);
#pragma unroll
      for (int j = 0; j < VEC; j++)
        f(x[j]);
    }
  };
}

/* A pack's values as store_y takes them: fp32, LayerNorm's less the row's mean. */
template <Norm NORM, typename T, int VEC>
__device__ __forceinline__ void values(const Pack<T, VEC> &p, const Stats &st, float (&f)[VEC])
{
  unpack(p, f);
  if constexpr (NORM == Norm::LN)
#pragma unroll
    for (int j = 0; j < VEC; j++)
      f[j] -= st.mu;
}

/* The row's statistics out (rstd always optional, LayerNorm's mean too): by one thread;
 * nothing in current scaling's amax pass (stores false). */
template <Norm NORM>
__device__ __forceinline__ void put_stats(const FwdArgs &a, int64_t row, const Stats &st, bool stores)
{
  if (!stores)
    return;
  if (a.rstd)
    a.rstd[row] = st.r;
  if (NORM == Norm::LN && a.mean)
    a.mean[row] = st.mu;
}

/* A thread's weight packs, held or read where used (Weights), and LayerNorm's bias, read
 * where used (held as well, it leaves the pipelined kernel no registers; the one-row kernels
 * measured no faster with it held). */
template <typename T, int VEC, int ITEMS, Norm NORM> struct Affine {
  Weights<T, VEC, ITEMS, true> w, b; /* the absent ones made late (load_w_raw) */
  __device__ __forceinline__ Affine(const FwdArgs &a, int lane, int G, int nvec, bool hold)
      : w(a.w, a.wf32, a.offset, lane, G, nvec, hold),
        b(NORM == Norm::LN ? a.b : nullptr, a.bf32, 0.f, lane, G, nvec, false, 0.f)
  {
  }
  __device__ __forceinline__ void refresh()
  {
    w.refresh();
    b.refresh();
  }
  /* LayerNorm's usual weight and bias: both packs of x's dtype, read where used */
  __device__ __forceinline__ bool plain() const { return w.plain() && b.plain(); }
};

/* Weights (or LayerNorm's biases) for packs that start `shift` columns into the row, as
 * Weights' interface gives them (item i unused): the skewed kernel's packs lie at a
 * row-dependent offset from the weight's 16-byte packs, so each element is its own load, from
 * L1 (every row reads the same columns), at an immediate offset from one address a pack. */
template <typename T, int VEC> struct SkewWeights {
  const void *w;
  int wf32;
  float offset, absent;
  int shift;
  __device__ __forceinline__ Pack<T, VEC> pack(int, int v) const
  {
    const T *p = static_cast<const T *>(w) + shift + v * VEC;
    Pack<T, VEC> r;
#pragma unroll
    for (int j = 0; j < VEC; j++)
      r.v[j] = p[j];
    return r;
  }
  __device__ __forceinline__ void get_raw(int, int v, float (&W)[VEC]) const
  {
    if (!w) {
#pragma unroll
      for (int j = 0; j < VEC; j++)
        W[j] = absent;
    } else if (wf32) {
      const float *p = static_cast<const float *>(w) + shift + v * VEC;
#pragma unroll
      for (int j = 0; j < VEC; j++)
        W[j] = p[j];
    } else {
      plain_raw(v, W);
    }
  }
  __device__ __forceinline__ void get(int i, int v, float (&W)[VEC]) const
  {
    get_raw(i, v, W);
    add_offset(w, offset, W);
  }
  __device__ __forceinline__ bool plain() const { return w && !wf32; }
  __device__ __forceinline__ void plain_raw(int v, float (&W)[VEC]) const { unpack(pack(0, v), W); }
};

/* The skewed kernel's weight and bias, Affine's members for packs `shift` columns in. */
template <typename T, int VEC, Norm NORM> struct SkewAffine {
  SkewWeights<T, VEC> w, b;
  __device__ __forceinline__ SkewAffine(const FwdArgs &a, int shift)
      : w{a.w, a.wf32, a.offset, 1.f, shift}, b{NORM == Norm::LN ? a.b : nullptr, a.bf32, 0.f, 0.f, shift}
  {
  }
  __device__ __forceinline__ bool plain() const { return w.plain() && b.plain(); }
};

template <typename T, int VEC, int ITEMS, bool RES, typename NV>
__device__ __forceinline__ void load_in(const FwdArgs &a, int64_t row, int lane, int G, NV nvec,
                                        Pack<T, VEC> (&xv)[ITEMS], Pack<T, VEC> (&rv)[ITEMS])
{
  load_row<T, VEC, ITEMS>(a.x, row, a.sx, lane, G, nvec, xv);
  if (RES)
    load_row<T, VEC, ITEMS>(a.res, row, a.sres, lane, G, nvec, rv);
}

/* add_rmsnorm's h = round(x + res), a pack at a time. */
template <typename T, int VEC>
__device__ __forceinline__ Pack<T, VEC> add_rounded(const Pack<T, VEC> &x, const Pack<T, VEC> &res)
{
  float f[VEC], rf[VEC];
  unpack(x, f);
  unpack(res, rf);
#pragma unroll
  for (int j = 0; j < VEC; j++)
    f[j] += rf[j];
  return pack_of<T>(f);
}

/* Adds a pack's squares to ss. RES (add_rmsnorm): first h = round(x + res) into x's pack
 * and out to res_out (unless !stores: current scaling's amax pass), which may be res itself
 * (the caller has read the pack). */
template <typename T, int VEC, bool RES>
__device__ __forceinline__ void add_square(const FwdArgs &a, int64_t row, int v, Pack<T, VEC> &x,
                                           const Pack<T, VEC> &res, float &ss, bool stores = true)
{
  float f[VEC];
  if (RES) {
    x = add_rounded(x, res);
    if (stores)
      store<T, VEC, true>(a.res_out, row, a.sres_out, v, x);
  }
  unpack(x, f);
#pragma unroll
  for (int j = 0; j < VEC; j++)
    ss += f[j] * f[j];
}

/* y for pack v of row `row` (y: its first pack) from its values f (values()), the row's
 * statistics, the weight and (LayerNorm) the bias of item i in wt, out through a streaming
 * store (STREAM) or a plain one. LayerNorm: (x - mean) (r W + r offset) + B, rounded once,
 * whatever the casting mode (the offset folded into the row's scale saves an add per
 * element); a weight and bias of x's dtype are one 16-byte load each, without get_raw's
 * per-pack tests of presence and dtype, which were half the epilogue's instructions.
 * RMSNorm: its casting modes (W rounded to T in mode none); with llama casting and 16-bit
 * weights of x's dtype and no offset (a.pair, decided on the host), one packed multiply per
 * two elements (a single element, one lane of it: no per-element tests of the weight's kind,
 * which were most of a scalar row's instructions). The flag decided once on the host and the
 * row's address computed once keep the epilogue short: evaluated per pack, the conditions and
 * the address cost about a quarter more instructions per row. Any other output (e: fp8,
 * strided yt) takes the fp32 values before the final rounding, the packed multiply's
 * unrounded product; the epilogue e stores them. The stored pack also goes to tap (the slab
 * kernel's tile). wt: an Affine, or the skewed kernel's SkewAffine (the same members).
 * PLAIN_WB: the caller has found LayerNorm's weight and bias plain once for the row, so no
 * pack tests it again. */
template <bool STREAM, Norm NORM, bool PLAIN_WB = false, typename T, int VEC, typename A, Out OUT,
          typename Tap = NoTap>
__device__ __forceinline__ void store_y(const FwdArgs &a, Epi<T, OUT> &e,
                                        Pack<typename Epi<T, OUT>::O, VEC> *y, int64_t row, int v,
                                        float (&f)[VEC], const Stats &st, const A &wt, int i, Tap tap = {})
{
  float W[VEC];
  if constexpr (NORM == Norm::LN) {
    float B[VEC];
    if (PLAIN_WB || wt.plain()) {
      wt.w.plain_raw(v, W);
      wt.b.plain_raw(v, B);
    } else {
      wt.w.get_raw(i, v, W);
      wt.b.get_raw(i, v, B);
    }
    const float ro = st.r * a.offset;
#pragma unroll
    for (int j = 0; j < VEC; j++)
      f[j] = fmaf(f[j], fmaf(st.r, W[j], ro), B[j]);
  } else {
    if constexpr (Pair<T>::ok && (VEC % 2 == 0 || VEC == 1) && OUT == Out::PLAIN) {
      if (a.pair) {
        Pack<T, VEC> o;
        const Pack<T, VEC> wp = wt.w.pack(i, v);
        if constexpr (VEC == 1)
          o.v[0] = mul_rounded(f[0] * st.r, wp.v[0]);
        else
#pragma unroll
          for (int j = 0; j < VEC; j += 2)
            mul_rounded(o.v + j, f[j] * st.r, f[j + 1] * st.r, wp.v + j);
        store_pack<STREAM>(y + v, o);
        tap(o);
        return;
      }
    }
    wt.w.get(i, v, W);
#pragma unroll
    for (int j = 0; j < VEC; j++)
      f[j] *= st.r;
    if (a.cast != NLK_CAST_GEMMA) {
      round_pack<T>(f);
      if (a.cast == NLK_CAST_NONE)
        round_pack<T>(W);
    }
#pragma unroll
    for (int j = 0; j < VEC; j++)
      f[j] *= W[j];
  }
  e.template put<STREAM>(y, row, v, f, tap);
}

/* The statistics of a row held in packs: RMSNorm's sum of squares (after add_rmsnorm's
 * residual add), LayerNorm's two passes (ln_stats, merged by warps where MERGE). */
template <typename T, int VEC, int ITEMS, Norm NORM, bool RES, bool MERGE, typename NV>
__device__ __forceinline__ Stats row_stats(const FwdArgs &a, int64_t row, bool active, int lane, int G,
                                           NV nvec, Pack<T, VEC> (&xv)[ITEMS],
                                           const Pack<T, VEC> (&rv)[ITEMS], float (*red)[32],
                                           int &parity, bool stores)
{
  if constexpr (NORM == Norm::LN) {
    return ln_stats<MERGE>(a, held(xv, active, lane, G, nvec), G, red, parity);
  } else {
    float ss = 0.f;
    if (active) {
#pragma unroll
      for (int i = 0; i < ITEMS; i++) {
        const int v = lane + i * G;
        if (v < nvec)
          add_square<T, VEC, RES>(a, row, v, xv[i], rv[i], ss, stores);
      }
    }
    ss = group_reduce(ss, G, red, parity);
    return Stats{0.f, rsqrtf(ss * a.inv_n + a.eps)};
  }
}

/* A row's outputs once its statistics are known: rstd (and LayerNorm's mean) from the group's
 * first thread, then y for each of the thread's packs from its values (values(i, f)). ONCE
 * (rows of a warp or less, compiled lanes; LayerNorm's fp8 y at 8 packs): a LayerNorm weight
 * and bias of x's dtype are found plain once a row and the packs' epilogue compiled apart for
 * them (store_y's PLAIN_WB), where per pack the test and both paths were a sixth of the held
 * row's instructions after the stats (about 11 instructions a pack). Wider rows with a y of
 * x's dtype keep the test per pack: the second path cost them registers (ITEMS 8: 64 -> 72)
 * and row's occupancy; the fp8 y's 72 -> 80 cost 14 -> 12 CTAs an SM and gained 1-2%, and
 * one_limits now holds it to 64 (80 for LayerNorm's 16-bit rows; docs/kernels.md). */
template <Norm NORM, int ITEMS, bool ONCE, typename T, int VEC, typename A, Out OUT, typename Values,
          typename NV>
__device__ __forceinline__ void put_row(const FwdArgs &a, Epi<T, OUT> &e, int64_t row, int lane, int G,
                                        NV nvec, const Stats &st, A &wt, Values values)
{
  wt.refresh();
  if (lane == 0)
    put_stats<NORM>(a, row, st, e.stores());
  auto *y = row_packs<typename Epi<T, OUT>::O, VEC>(a.y, row, a.sy);
  auto packs = [&](auto plain) {
#pragma unroll
    for (int i = 0; i < ITEMS; i++) {
      const int v = lane + i * G;
      if (v < nvec) {
        float f[VEC];
        values(i, f);
        store_y<true, NORM, decltype(plain)::value>(a, e, y, row, v, f, st, wt, i);
      }
    }
  };
  if constexpr (NORM == Norm::LN && ONCE) {
    if (wt.plain())
      packs(std::true_type{});
    else
      packs(std::false_type{});
  } else {
    packs(std::false_type{});
  }
}

/* One row: residual add (add_rmsnorm: h = round(x + res) to res_out, which may be res
 * itself: this thread read the element before overwriting it), the row's statistics summed
 * over the group (every thread of the CTA calls this the same number of times; LayerNorm's
 * merged by warps from 2 packs a thread unless y is fp8, in the one-row and the pipelined
 * kernels alike, so that a strategy's fallback from one to the other gives the same bits), y,
 * rstd and (LayerNorm) the mean. */
template <typename T, int VEC, int ITEMS, Norm NORM, bool RES, bool ONCE, Out OUT, typename NV>
__device__ __forceinline__ void process(const FwdArgs &a, Epi<T, OUT> &e, int64_t row, bool active,
                                        int lane, int G, NV nvec, Pack<T, VEC> (&xv)[ITEMS],
                                        const Pack<T, VEC> (&rv)[ITEMS],
                                        Affine<T, VEC, ITEMS, NORM> &wt, float (*red)[32],
                                        int &parity)
{
  constexpr bool merge = ITEMS > 1 && !out_fp8(OUT);
  const Stats st = row_stats<T, VEC, ITEMS, NORM, RES, merge>(a, row, active, lane, G, nvec, xv, rv,
                                                              red, parity, e.stores());
  if (!active)
    return;
#pragma unroll
  for (int i = 0; i < ITEMS; i++)
    opaque(xv[i]);
  put_row<NORM, ITEMS, ONCE, T, VEC>(a, e, row, lane, G, nvec, st, wt,
                                     [&](int i, float(&f)[VEC]) { values<NORM>(xv[i], st, f); });
}

/* process for LayerNorm rows that are issue-bound: rows of a warp or less (compiled lanes,
 * ONCE) at up to 2 packs a thread with y of x's dtype, and rows with an fp8 y (its epilogue's
 * extra work per element) at up to 4 packs. The packs are converted to fp32 once and held,
 * each value pinned (ptxas would otherwise convert the packs again in each pass), and x - mean
 * kept from the variance pass for the epilogue: three instructions an element fewer for more
 * registers, which at 8 packs (72 -> 104: 14 -> 9 CTAs an SM) cost more than they save
 * (docs/kernels.md, "LayerNorm's fp8 y held as fp32 up to 4 packs a thread"). The same sums
 * in the same order as ln_stats' group_reduce per pass, so the same bits as process; written
 * out rather than as ln_stats_by over the held values, which ptxas compiles 4-11 SASS
 * instructions longer (x - mean not shared). */
template <typename T, int VEC, int ITEMS, bool ONCE, Out OUT, typename NV>
__device__ __forceinline__ void process_ln_held(const FwdArgs &a, Epi<T, OUT> &e, int64_t row,
                                                bool active, int lane, int G, NV nvec,
                                                const Pack<T, VEC> (&xv)[ITEMS],
                                                Affine<T, VEC, ITEMS, Norm::LN> &wt, float (*red)[32],
                                                int &parity)
{
  float f[ITEMS][VEC], s = 0.f, q = 0.f;
  if (active) {
#pragma unroll
    for (int i = 0; i < ITEMS; i++)
      if (lane + i * G < nvec) {
        unpack(xv[i], f[i]);
#pragma unroll
        for (int j = 0; j < VEC; j++) {
          asm volatile("" : "+f"(f[i][j]));
          s += f[i][j];
        }
      }
  }
  const float mu = group_reduce(s, G, red, parity) * a.inv_n;
  if (active) {
#pragma unroll
    for (int i = 0; i < ITEMS; i++)
      if (lane + i * G < nvec)
#pragma unroll
        for (int j = 0; j < VEC; j++) {
          f[i][j] -= mu;
          q += f[i][j] * f[i][j];
        }
  }
  const Stats st{mu, rsqrtf(group_reduce(q, G, red, parity) * a.inv_n + a.eps)};
  if (!active)
    return;
  put_row<Norm::LN, ITEMS, ONCE, T, VEC>(a, e, row, lane, G, nvec, st, wt, [&](int i, float(&g)[VEC]) {
#pragma unroll
    for (int j = 0; j < VEC; j++)
      g[j] = f[i][j];
  });
}

/* The chunked transposed copy (nlk TRANSPOSE_CHUNKED): a forward in chunks of rows, launch c
 * running the rows of chunk c and, in its last CTAs, the tiles of chunk c - 1 (run_chunked).
 * A tile CTA waits (griddepcontrol.wait) for launch c - 1 to finish, so the kernel boundary
 * orders y's stores before the tile's loads: no counters, no fence per row, no order of CTAs
 * assumed; every launch lets the next one start at once (pdl_trigger), so the next chunk's
 * rows run while these tiles drain. y is stored for L2 to keep (keep_y) and read back by the
 * tile once (evict_first), one chunk of y in L2 at a time. Each tile: rows through cp.async
 * into the swizzled tile (tile.cuh), then its transposing read; element by element where y's
 * or yt's rows are not 16-byte aligned (tile_vec). Hazard: every launch with tiles waits on
 * the one before, so the last launch's end orders the whole chain. */
template <typename O> __device__ __forceinline__ void chunk_tile(const FwdArgs &a, const FwdOut &o)
{
  extern __shared__ __align__(16) unsigned char tile_smem[];
  const Tile<O, 16> t(tile_smem, o.tile_m, o.tile_n);
  const int tiles_n = (a.N + o.tile_n - 1) / o.tile_n;
  const int k = blockIdx.x - o.row_ctas, tr = k / tiles_n;
  const int64_t i0 = (int64_t)tr * o.tile_m;
  const int j0 = (k - tr * tiles_n) * o.tile_n;
  pdl_wait();
  t.stage(o.tile_y, a.sy, i0, j0, o.tile_rows, a.N, o.tile_m, o.tile_n, o.tile_vec, true);
  copy_wait(0);
  __syncthreads();
  t.template put_transposed<Cast::COPY>(i0, j0, o.tile_rows, a.N, o.tile_yt, o.syt, o.tile_vec, 1.f);
}

/* CTA, WARP and GROUPS: each group handles exactly one row. The weight (and LayerNorm's
 * bias) is read after the reduction, from L1 (the CTAs of an SM share it; x streams past it),
 * or with EARLY (Hold::EARLY_W, RMSNorm only: add_rmsnorm's residual packs leave no registers
 * for it, and LayerNorm measured no faster with its weight and bias held) together with x,
 * its latency hidden behind x's, and held in registers across the reduction. x (and the
 * residual) load evict-first with either hold: the default policy lost at small N on the
 * H200, up to 10% with the early weight (docs/kernels.md, "Cache policies"). Outputs other
 * than PLAIN hold the weight as X does. LANES > 0: the group's size compiled in (rows of a
 * warp or less), which takes the prologue from 54 PTX instructions before x's load to 32 and
 * leaves no branch on the group's size; small rows are where that prologue is a row's cost. */
template <typename T, int VEC, int ITEMS, Norm NORM, bool RES, bool EARLY, Out OUT, int LANES = 0>
__global__ void __launch_bounds__(FWD_LIMITS.at(ITEMS, VEC * sizeof(T)),
                                  (one_limits<T, VEC, NORM, RES, EARLY, OUT>()).ctas_at(ITEMS, VEC * sizeof(T)))
    fwd_one(FwdArgs a, FwdOut o)
{
  pdl_begin(a.pdl);
  if constexpr (out_fp8(OUT) && !out_yt(OUT)) {
    if (o.chunked) {
      pdl_trigger();
      if (blockIdx.x >= o.row_ctas) {
        chunk_tile<typename Epi<T, OUT>::O>(a, o);
        return;
      }
    }
  }
  Epi<T, OUT> e(o);
  const Group g(a.group, GroupMap::ANY_CTA, Lanes<LANES>{});
  const int G = g.G, lane = g.lane, nvec = a.N / VEC;
  const int64_t row = g.one_row();
  const bool active = row < a.M;
  __shared__ float red[2][32];
  int parity = 0;
  Pack<T, VEC> xv[ITEMS], rv[ITEMS];
  auto run = [&](auto nv) {
    if (active)
      load_in<T, VEC, ITEMS, RES>(a, row, lane, G, nv, xv, rv);
    Affine<T, VEC, ITEMS, NORM> wt(a, lane, G, nvec, EARLY && active);
    if constexpr (NORM == Norm::LN &&
                  (LANES > 0 && ITEMS <= 2 && OUT == Out::PLAIN || out_fp8(OUT) && ITEMS <= 4))
      process_ln_held<T, VEC, ITEMS, (LANES > 0)>(a, e, row, active, lane, G, nv, xv, wt, red, parity);
    else
      process<T, VEC, ITEMS, NORM, RES, (LANES > 0 || NORM == Norm::LN && out_fp8(OUT))>(
          a, e, row, active, lane, G, nv, xv, rv, wt, red, parity);
  };
  /* rows of an fp8 y at 4 packs a thread (LayerNorm's held, RMSNorm's not), issue-bound:
   * a row that fills every thread's packs (the usual widths) takes a copy without the
   * per-pack tests (AllPacks); twice the code, registers as before (bf16 ptxas: LayerNorm's
   * unchanged, RMSNorm's 60 -> 62, the same allocation), and at 8 packs where one_limits'
   * fp8 bounds hold it (no yt, no residual: +1-5% at 4096 to 16384 columns, H200); under
   * FWD_LIMITS it took 96 registers, one CTA fewer an SM, and lost up to 11% (LayerNorm's
   * strided yt: 80 -> 127; docs/kernels.md). */
  if constexpr (LANES == 0 && out_fp8(OUT) && (ITEMS == 4 || ITEMS == 8 && FP8_BOUNDED<RES, OUT>)) {
    if (nvec == G * ITEMS)
      run(AllPacks{});
    else
      run(nvec);
  } else {
    run(nvec);
  }
  e.commit();
}

/* Hold::RELOAD (RMSNorm's PLAIN output only: LayerNorm's two passes would read x three times): x is read twice instead of held across the reduction, the
 * second time from L1 (the first read asks L1 and L2 to keep the lines, the second to drop
 * them), so a thread holds no packs there: 32 registers and four CTAs of 512 threads per SM
 * where the register-held row fits three. The weight is read from L1 after the reduction. y
 * goes out through plain stores: streaming ones measured slower in this kernel alone. */
template <typename T, int VEC, int ITEMS>
__global__ void __launch_bounds__(FWD_RELOAD_LIMITS.at(ITEMS, VEC * sizeof(T)),
                                  FWD_RELOAD_LIMITS.ctas_at(ITEMS, VEC * sizeof(T)))
    fwd_reload(FwdArgs a, FwdOut o)
{
  pdl_begin(a.pdl);
  Epi<T, Out::PLAIN> e(o);
  const Group g(a.group);
  const int G = g.G, lane = g.lane, nvec = a.N / VEC;
  const int64_t row = g.one_row();
  const bool active = row < a.M;
  __shared__ float red[2][32];
  int parity = 0;
  float ss = 0.f;
  if (active) {
    Pack<T, VEC> xv[ITEMS];
#pragma unroll
    for (int i = 0; i < ITEMS; i++)
      if (lane + i * G < nvec)
        xv[i] = load_l1<T, VEC, true>(pack_at<T, VEC>(a.x, row, a.sx, lane + i * G));
#pragma unroll
    for (int i = 0; i < ITEMS; i++)
      if (lane + i * G < nvec)
        add_square<T, VEC, false>(a, row, lane + i * G, xv[i], xv[i], ss);
  }
  ss = group_reduce(ss, G, red, parity);
  const float r = rsqrtf(ss * a.inv_n + a.eps);
  if (!active)
    return;
  const Stats st{0.f, r};
  if (lane == 0)
    put_stats<Norm::RMS>(a, row, st, true);
  const Affine<T, VEC, ITEMS, Norm::RMS> wt(a, lane, G, nvec, false);
  Pack<T, VEC> *y = row_packs<T, VEC>(a.y, row, a.sy);
#pragma unroll
  for (int i = 0; i < ITEMS; i++) {
    const int v = lane + i * G;
    if (v < nvec) {
      float f[VEC];
      unpack(load_l1<T, VEC, false>(pack_at<T, VEC>(a.x, row, a.sx, v)), f);
      store_y<false, Norm::RMS>(a, e, y, row, v, f, st, wt, i);
    }
  }
}

/* SKEW (row, on rows of single 16-bit elements): one CTA per row, which x's 16-byte boundaries
 * cut into a head of up to 7 elements, 16-byte packs held as a 16-byte row's, and a tail of up
 * to 7; head and tail take an element a lane (a CTA has at least 32); add_rmsnorm's residual
 * and residual_out alike. An element a load, the one-element kernels issue about three times
 * the instructions a row (docs/kernels.md, "Rows of single elements"). Rows of up to 2048
 * whole packs (16391 columns). Hazards: y's rows (and the residual's, residual_out's) must sit
 * at x's offsets from 16 bytes (the host checks the pointers and strides), and the packs'
 * weights (biases) lie at a row-dependent column offset: SkewAffine's element loads. */
template <typename T, int ITEMS, Norm NORM, bool RES>
__global__ void __launch_bounds__(FWD_LIMITS.at(ITEMS, 16), FWD_LIMITS.ctas_at(ITEMS, 16))
    fwd_skew(FwdArgs a, FwdOut o)
{
  constexpr int VEC = 16 / sizeof(T);
  pdl_begin(a.pdl);
  Epi<T, Out::PLAIN> e(o);
  const int G = blockDim.x, lane = threadIdx.x;
  const int64_t row = blockIdx.x;
  const T *x = static_cast<const T *>(a.x) + row * a.sx;
  const int to16 = (int)((16 - ((uintptr_t)x & 15)) & 15) / (int)sizeof(T);
  const int head = to16 < a.N ? to16 : a.N, nb = (a.N - head) / VEC, tail = a.N - head - nb * VEC;
  __shared__ float red[2][32];
  int parity = 0;
  /* a row at x's offsets: its whole packs, and this lane's element of the head and the tail */
  auto load_cut = [&](const T *p, Pack<T, VEC>(&v)[ITEMS], Pack<T, 1> &h, Pack<T, 1> &t) {
    load_row<T, VEC, ITEMS>(p + head, 0, 0, lane, G, nb, v);
    load_u16_if(*reinterpret_cast<unsigned short *>(&h), p + lane, lane < head);
    load_u16_if(*reinterpret_cast<unsigned short *>(&t), p + head + nb * VEC + lane, lane < tail);
  };
  Pack<T, VEC> xv[ITEMS];
  Pack<T, 1> xh{}, xt{};
  load_cut(x, xv, xh, xt);
  if constexpr (RES) { /* h = round(x + res) to residual_out and on as x; both at x's offsets */
    const T *r = static_cast<const T *>(a.res) + row * a.sres;
    T *h = static_cast<T *>(a.res_out) + row * a.sres_out;
    Pack<T, VEC> rv[ITEMS];
    Pack<T, 1> rh{}, rt{};
    load_cut(r, rv, rh, rt);
#pragma unroll
    for (int i = 0; i < ITEMS; i++)
      if (lane + i * G < nb) {
        xv[i] = add_rounded(xv[i], rv[i]);
        store<T, VEC, true>(h + head, 0, 0, lane + i * G, xv[i]);
      }
    xh = add_rounded(xh, rh);
    xt = add_rounded(xt, rt);
    if (lane < head)
      store<T, 1, true>(h, 0, 0, lane, xh);
    if (lane < tail)
      store<T, 1, true>(h, 0, 0, head + nb * VEC + lane, xt);
  }
  auto each = [&](auto f) {
    held(xv, true, lane, G, nb)(f);
    float h[1], t[1];
    if (lane < head) {
      unpack(xh, h);
      f(h[0]);
    }
    if (lane < tail) {
      unpack(xt, t);
      f(t[0]);
    }
  };
  Stats st;
  if constexpr (NORM == Norm::LN) {
    st = ln_stats<(ITEMS > 1)>(a, each, G, red, parity);
  } else {
    float ss = 0.f;
    each([&](float v) { ss += v * v; });
    st = Stats{0.f, rsqrtf(group_reduce(ss, G, red, parity) * a.inv_n + a.eps)};
  }
#pragma unroll
  for (int i = 0; i < ITEMS; i++)
    opaque(xv[i]);
  if (lane == 0)
    put_stats<NORM>(a, row, st, true);
  T *y = static_cast<T *>(a.y) + row * a.sy;
  const SkewAffine<T, VEC, NORM> wt(a, head);
  auto *yp = reinterpret_cast<Pack<T, VEC> *>(y + head);
#pragma unroll
  for (int i = 0; i < ITEMS; i++) {
    const int v = lane + i * G;
    if (v < nb) {
      float f[VEC];
      values<NORM>(xv[i], st, f);
      store_y<true, NORM>(a, e, yp, row, v, f, st, wt, i);
    }
  }
  const Affine<T, 1, 1, NORM> w1(a, 0, 0, 0, false);
  auto *y1 = reinterpret_cast<Pack<T, 1> *>(y);
  float f[1];
  if (lane < head) {
    values<NORM>(xh, st, f);
    store_y<true, NORM>(a, e, y1, row, lane, f, st, w1, 0);
  }
  if (lane < tail) {
    values<NORM>(xt, st, f);
    store_y<true, NORM>(a, e, y1, row, head + nb * VEC + lane, f, st, w1, 0);
  }
  e.commit();
}

/* STRIDE: CTAs stride over rows with a trip count uniform across the CTA (rows past M
 * idle but still join the barriers). Stage s of a thread's staging holds its x (and
 * residual) packs of the row s iterations ahead; each iteration tops the pipeline up, waits
 * for the oldest stage and works on it from registers. */
template <typename T, int VEC, int ITEMS, Norm NORM, bool RES, Out OUT>
__global__ void __launch_bounds__(pipe_limits(OUT)(ITEMS), pipe_limits(OUT).ctas(ITEMS))
    fwd_stride(FwdArgs a, FwdOut o)
{
  pdl_begin(a.pdl);
  Epi<T, OUT> e(o);
  using P = Pack<T, VEC>;
  const Group g(a.group, GroupMap::POW2);
  const int G = g.G, grp = g.idx, lane = g.lane, nvec = a.N / VEC, S = a.stages;
  const int64_t step = (int64_t)gridDim.x * g.per_cta;
  extern __shared__ __align__(16) float dyn[];
  __shared__ float red[2][32];
  int parity = 0;
  const Staging<P, ITEMS> st(dyn, S, RES ? 2 : 1);
  Affine<T, VEC, ITEMS, NORM> wt(a, lane, G, nvec, true);

  auto fetch = [&](int64_t row, int stage) {
    if (row < a.M) {
#pragma unroll
      for (int i = 0; i < ITEMS; i++) {
        const int v = lane + i * G;
        if (v < nvec) {
          copy_async(st.at(stage, 0, i), pack_at<T, VEC>(a.x, row, a.sx, v));
          if (RES)
            copy_async(st.at(stage, 1, i), pack_at<T, VEC>(a.res, row, a.sres, v));
        }
      }
    }
    copy_commit();
  };
  const int64_t first = (int64_t)blockIdx.x * g.per_cta;
  for (int s = 0; s < S - 1; s++)
    fetch(first + grp + s * step, s);
  int stage = 0;
  for (int64_t base = first; base < a.M; base += step) {
    const int64_t row = base + grp;
    const bool active = row < a.M;
    fetch(row + (S - 1) * step, stage == 0 ? S - 1 : stage - 1);
    copy_wait(S - 1);
    P xv[ITEMS], rv[ITEMS];
    if (active)
#pragma unroll
      for (int i = 0; i < ITEMS; i++)
        if (lane + i * G < nvec) {
          xv[i] = load_shared<P>(st.at(stage, 0, i));
          if (RES)
            rv[i] = load_shared<P>(st.at(stage, 1, i));
        }
    process<T, VEC, ITEMS, NORM, RES, false>(a, e, row, active, lane, G, nvec, xv, rv, wt, red, parity);
    stage = stage + 1 == S ? 0 : stage + 1;
  }
  copy_wait(0);
  e.commit();
}

/* STAGED: one CTA per row, copied whole into shared memory through cp.async, so a thread
 * holds no packs across the reduction (32 registers): an SM keeps as many rows in flight as
 * its threads and shared memory allow (eight 256-thread CTAs of 16 KB at N = 8192 bf16,
 * against three register-held rows of 512 threads). Each thread reads back only the slots
 * it copied, so the reduction is the only barrier; the weight comes from L1 after it.
 * Limits: the row (and residual) must fit one CTA's shared memory. */
template <typename T, int VEC, Norm NORM, bool RES, Out OUT>
__global__ void __launch_bounds__(STAGED_MAX_BLOCK, staged_min_ctas(NORM)) fwd_staged(FwdArgs a, FwdOut o)
{
  pdl_begin(a.pdl);
  Epi<T, OUT> e(o);
  using P = Pack<T, VEC>;
  const int nvec = a.N / VEC;
  const int64_t row = blockIdx.x;
  extern __shared__ __align__(16) float dyn[];
  __shared__ float red[2][32];
  int parity = 0;
  P *xs = reinterpret_cast<P *>(dyn), *rs = xs + nvec;
  for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
    copy_async(xs + v, pack_at<T, VEC>(a.x, row, a.sx, v));
    if (RES)
      copy_async(rs + v, pack_at<T, VEC>(a.res, row, a.sres, v));
  }
  copy_commit();
  copy_wait(0);
  Stats st;
  if constexpr (NORM == Norm::LN) {
    st = ln_stats<!out_fp8(OUT)>(a, strided<T, VEC>(nvec, [xs](int v) { return xs[v]; }), blockDim.x, red,
                                 parity);
  } else {
    float ss = 0.f;
    for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
      P x = xs[v];
      add_square<T, VEC, RES>(a, row, v, x, RES ? rs[v] : x, ss, e.stores());
      if (RES)
        xs[v] = x;
    }
    ss = group_reduce(ss, blockDim.x, red, parity);
    st = Stats{0.f, rsqrtf(ss * a.inv_n + a.eps)};
  }
  if (threadIdx.x == 0)
    put_stats<NORM>(a, row, st, e.stores());
  const Affine<T, VEC, 1, NORM> wt(a, 0, 0, nvec, false);
  auto *y = row_packs<typename Epi<T, OUT>::O, VEC>(a.y, row, a.sy);
#pragma unroll 2
  for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
    float f[VEC];
    values<NORM>(xs[v], st, f);
    store_y<true, NORM>(a, e, y, row, v, f, st, wt, 0);
  }
  e.commit();
}

/* SLAB: a cluster of C CTAs per block of R rows (grid: blocks x C), CTA q of the cluster
 * copying columns [q W, (q + 1) W) of the block's rows into shared memory (cp.async, the whole
 * slab in flight at once, no registers held), W = N / C. Each row's sums over the slab go to
 * the cluster through distributed shared memory, where every CTA adds the C partials in rank
 * order (the same bits in each). y leaves from the slab, and the transposed copy (transpose
 * fused_tiled) through a tile of y's dtype that the CTA writes transposed
 * (Tile::put_transposed: R contiguous elements of each yt row): DRAM sees x once and y and yt
 * once each. Limits: sm_90 (clusters), 16-byte packs, W a power of two, C <= 16 (the host's
 * slab_plan). Hazards: every CTA of the cluster passes each cluster barrier (rows past M idle
 * through them), and none exits while a peer may still read its partials (the arrive after
 * the last remote read, the wait before exit). */
template <typename T, int VEC, Norm NORM, bool RES, Out OUT>
__global__ void __launch_bounds__(SLAB_MAX_BLOCK) fwd_slab(FwdArgs a, FwdOut o)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  pdl_begin(a.pdl);
  Epi<T, OUT> e(o);
  using P = Pack<T, VEC>;
  using O = typename Epi<T, OUT>::O;
  extern __shared__ __align__(16) float dyn[];
  __shared__ float part[NORM == Norm::LN ? 2 : 1][SLAB_MAX_ROWS];
  __shared__ Stats stats[SLAB_MAX_ROWS];
  const int R = o.slab_rows, W = o.slab_cols, U = W / VEC, C = a.N / W;
  const int lu = __ffs(U) - 1; /* U is a power of two */
  const unsigned q = cluster_rank();
  const int64_t i0 = (int64_t)(blockIdx.x / C) * R;
  const int v0 = (int)q * U; /* the slab's first pack in the row */
  P *xs = reinterpret_cast<P *>(dyn), *rs = xs + R * U;
  const Tile<O, 16 / sizeof(O)> tile(reinterpret_cast<unsigned char *>(xs + (RES ? 2 : 1) * R * U), R, W);

  for (int k = threadIdx.x; k < R * U; k += blockDim.x) {
    const int64_t i = i0 + (k >> lu);
    if (i < a.M) {
      copy_async(xs + k, pack_at<T, VEC>(a.x, i, a.sx, v0 + (k & (U - 1))));
      if (RES)
        copy_async(rs + k, pack_at<T, VEC>(a.res, i, a.sres, v0 + (k & (U - 1))));
    }
  }
  copy_commit();
  copy_wait(0);
  __syncthreads();

  /* the statistics: TR threads per row; a row's sum over the cluster from every CTA's part */
  const int TR = blockDim.x / R, r = threadIdx.x / TR, sub = threadIdx.x & (TR - 1);
  const int64_t row = i0 + r;
  const bool live = row < a.M;
  auto cluster_sum = [&](float s, float *slot) {
    s = group_sum(s, TR);
    if (sub == 0)
      slot[r] = s;
    if (C == 1) {
      __syncthreads();
      return slot[r];
    }
    cluster_sync();
    float t = 0.f;
    const unsigned at = (unsigned)__cvta_generic_to_shared(slot + r);
    for (int k = 0; k < C; k++)
      t += peer_load(peer_shared(at, k));
    return t;
  };
  P *xrow = xs + (r << lu);
  Stats st;
  if constexpr (NORM == Norm::LN) {
    const auto mine = [xrow, live, sub, TR, U](auto f) {
      for (int v = sub; live && v < U; v += TR) {
        float x[VEC];
        unpack(xrow[v], x);
#pragma unroll
        for (int j = 0; j < VEC; j++)
          f(x[j]);
      }
    };
    st = ln_stats_by(a, mine, [&](float v, int k) { return cluster_sum(v, part[k]); });
  } else {
    float ss = 0.f;
    for (int v = sub; live && v < U; v += TR) {
      P x = xrow[v];
      add_square<T, VEC, RES>(a, row, v0 + v, x, RES ? rs[(r << lu) + v] : x, ss, e.stores());
      if (RES)
        xrow[v] = x;
    }
    st = Stats{0.f, rsqrtf(cluster_sum(ss, part[0]) * a.inv_n + a.eps)};
  }
  if (C > 1)
    cluster_arrive_release(); /* done with the peers' partials; waited for before exit */
  if (sub == 0) {
    stats[r] = st;
    if (q == 0 && live)
      put_stats<NORM>(a, row, st, e.stores());
  }
  __syncthreads();

  /* y: a thread keeps its pack column u (and its weight) over the rows when the CTA covers
   * the slab's width, else walks columns over every row; with a yt, each pack also into the
   * tile, which the CTA then writes transposed */
  const bool yt = o.yt && e.stores();
  const int B = blockDim.x, rstep = B >= U ? B / U : 1;
  for (int u = threadIdx.x & (U - 1); u < U; u += B) {
    const Affine<T, VEC, 1, NORM> wt(a, v0 + u, 0, a.N / VEC, true);
    for (int rr = B >= U ? threadIdx.x >> lu : 0; rr < R; rr += rstep) {
      const int64_t i = i0 + rr;
      if (i >= a.M)
        break;
      float f[VEC];
      values<NORM>(xs[(rr << lu) + u], stats[rr], f);
      store_y<true, NORM>(a, e, row_packs<O, VEC>(a.y, i, a.sy), i, v0 + u, f, stats[rr], wt, 0,
                          [&](const Pack<O, VEC> &p) {
                            if (yt)
                              *tile.template at<Pack<O, VEC>>(rr, u * VEC) = p;
                          });
    }
  }
  if (yt) {
    __syncthreads();
    const bool vec = (reinterpret_cast<uintptr_t>(o.yt) | (uintptr_t)(o.syt * sizeof(O))) % 16 == 0;
    tile.template put_transposed<Cast::COPY>(i0, (int)q * W, a.M, a.N, o.yt, o.syt, vec, 1.f);
  }
  e.commit();
  if (C > 1)
    cluster_wait();
#endif
}

/* LOOP: rows wider than registers hold. The CTA loops over the row twice (LayerNorm: three
 * times, its statistics taking two passes), re-reading x (or h from res_out) and the weight,
 * mostly from L1 or L2. Current scaling's amax pass stores no h: it forms h again from x and
 * the residual. */
template <typename T, int VEC, Norm NORM, Out OUT>
__global__ void __launch_bounds__(LOOP_BLOCK) fwd_loop(FwdArgs a, FwdOut o)
{
  pdl_begin(a.pdl);
  Epi<T, OUT> e(o);
  const int nvec = a.N / VEC;
  const Affine<T, VEC, 1, NORM> wt(a, 0, 0, nvec, false);
  __shared__ float red[2][32];
  int parity = 0;
  for (int64_t row = blockIdx.x; row < a.M; row += gridDim.x) {
    const void *src = a.res ? a.res_out : a.x;
    const int64_t src_stride = a.res ? a.sres_out : a.sx;
    Stats st;
    if constexpr (NORM == Norm::LN) {
      st = ln_stats<false>(a, strided<T, VEC>(nvec, [&a, row](int v) { return load<T, VEC, false>(a.x, row, a.sx, v); }),
                           blockDim.x, red, parity);
    } else {
      float ss = 0.f;
      for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
        Pack<T, VEC> xv = load<T, VEC, false>(a.x, row, a.sx, v);
        if (a.res)
          add_square<T, VEC, true>(a, row, v, xv, load<T, VEC>(a.res, row, a.sres, v), ss, e.stores());
        else
          add_square<T, VEC, false>(a, row, v, xv, xv, ss);
      }
      ss = group_reduce(ss, blockDim.x, red, parity);
      st = Stats{0.f, rsqrtf(ss * a.inv_n + a.eps)};
    }
    if (threadIdx.x == 0)
      put_stats<NORM>(a, row, st, e.stores());
    auto *y = row_packs<typename Epi<T, OUT>::O, VEC>(a.y, row, a.sy);
    for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
      Pack<T, VEC> h;
      if (a.res && !e.stores()) {
        float unused = 0.f;
        h = load<T, VEC>(a.x, row, a.sx, v);
        add_square<T, VEC, true>(a, row, v, h, load<T, VEC>(a.res, row, a.sres, v), unused, false);
      } else {
        h = load<T, VEC>(src, row, src_stride, v);
      }
      float f[VEC];
      values<NORM>(h, st, f);
      store_y<true, NORM>(a, e, y, row, v, f, st, wt, 0);
    }
  }
  e.commit();
}

} // namespace

/* fwd_one with `lanes` threads per row compiled in: instances for 4, 8, 16 and 32 lanes with
 * 16-byte packs, a PLAIN y, the weight read after the reduction and up to 4 packs a thread;
 * the general kernel for any other key, the early weight and 8 packs a thread among them,
 * which ran slower with their lanes compiled in (docs/kernels.md, "Lanes compiled in"). */
template <typename T, int VEC, int ITEMS, Norm NORM, bool RES, bool EARLY, Out OUT>
const void *one_kernel(int lanes)
{
  if constexpr (VEC * sizeof(T) == 16 && OUT == Out::PLAIN && !EARLY && ITEMS <= 4) {
    switch (lanes) {
    case 4: return (const void *)fwd_one<T, VEC, ITEMS, NORM, RES, EARLY, OUT, 4>;
    case 8: return (const void *)fwd_one<T, VEC, ITEMS, NORM, RES, EARLY, OUT, 8>;
    case 16: return (const void *)fwd_one<T, VEC, ITEMS, NORM, RES, EARLY, OUT, 16>;
    case 32: return (const void *)fwd_one<T, VEC, ITEMS, NORM, RES, EARLY, OUT, 32>;
    }
  }
  return (const void *)fwd_one<T, VEC, ITEMS, NORM, RES, EARLY, OUT>;
}

/* RES picks add_rmsnorm's kernels, which exist for RMSNorm only; the early weight and the
 * reload are RMSNorm's PLAIN output's (the host asks Hold::X for the others). */
template <typename T, int VEC, Norm NORM, bool RES, Out OUT> const void *fwd_kernel_of(const FwdKernel &key)
{
  if constexpr (RES && NORM == Norm::LN) {
    return NULL;
  } else {
    if (key.rows == Rows::LOOP)
      return (const void *)fwd_loop<T, VEC, NORM, OUT>; /* the residual is a runtime pointer there */
    if (key.rows == Rows::STAGED)
      return (const void *)fwd_staged<T, VEC, NORM, RES, OUT>;
    if (key.rows == Rows::SKEW) { /* 16-byte packs of 16-bit elements, y of x's dtype */
      if constexpr (sizeof(T) == 2 && VEC * sizeof(T) == 16 && OUT == Out::PLAIN) {
        const void *kp = NULL;
        with_items(key.items, [&](auto I) {
          kp = (const void *)fwd_skew<T, decltype(I)::value, NORM, RES>;
          return 0;
        });
        return kp;
      }
      return NULL;
    }
    if (key.rows == Rows::SLAB) { /* 16-byte packs; the transposed copy is the kernel's own */
      if constexpr (VEC * sizeof(T) == 16 && !out_yt(OUT))
        return (const void *)fwd_slab<T, VEC, NORM, RES, OUT>;
      return NULL;
    }
    const void *kp = NULL;
    with_items(key.items, [&](auto I) {
      constexpr int IT = decltype(I)::value;
      if (key.rows == Rows::STRIDE)
        kp = (const void *)fwd_stride<T, VEC, IT, NORM, RES, OUT>;
      else if constexpr (RES || NORM == Norm::LN || OUT != Out::PLAIN)
        kp = one_kernel<T, VEC, IT, NORM, RES, false, OUT>(key.lanes);
      else
        kp = key.hold == Hold::RELOAD    ? (const void *)fwd_reload<T, VEC, IT>
             : key.hold == Hold::EARLY_W ? one_kernel<T, VEC, IT, NORM, false, true, OUT>(key.lanes)
                                         : one_kernel<T, VEC, IT, NORM, false, false, OUT>(key.lanes);
      return 0;
    });
    return kp;
  }
}

template <typename T, int VEC, Norm NORM, Out OUT> const void *fwd_kernel_out(const FwdKernel &key)
{
  return key.res ? fwd_kernel_of<T, VEC, NORM, true, OUT>(key) : fwd_kernel_of<T, VEC, NORM, false, OUT>(key);
}

template <typename T, int VEC, Norm NORM> const void *fwd_kernel(const FwdKernel &key)
{
  switch (key.out) {
  case Out::PLAIN: return fwd_kernel_out<T, VEC, NORM, Out::PLAIN>(key);
  case Out::SAME: return fwd_kernel_out<T, VEC, NORM, Out::SAME>(key);
  case Out::E4M3: return fwd_kernel_out<T, VEC, NORM, Out::E4M3>(key);
  case Out::E5M2: return fwd_kernel_out<T, VEC, NORM, Out::E5M2>(key);
  case Out::E4M3_T: return fwd_kernel_out<T, VEC, NORM, Out::E4M3_T>(key);
  case Out::E5M2_T: return fwd_kernel_out<T, VEC, NORM, Out::E5M2_T>(key);
  }
  return NULL;
}

template const void *fwd_kernel<NLK_INSTANCE_T, NLK_INSTANCE_VEC, NLK_INSTANCE_NORM>(const FwdKernel &);

#else


namespace {

/* Everything a forward launch decides. */
struct FwdPlan {
  Rows rows;
  RowCfg c;
  int stages;          /* STRIDE: rows in flight per thread */
  int cluster;         /* SLAB: CTAs per cluster (a block of rows) */
  int slab_rows, slab_cols;
  size_t smem;
  const void *kernel;
};

/* y's output kind: fp8, x's dtype with the strided yt (the core hands a kernel yt only for
 * the ways its line offers: strided, or fused, which the slab kernel writes whatever its
 * OUT), or x's dtype alone. */
Out out_of(const nlk_norm *k)
{
  const bool strided = k->yt && k->transpose == NLK_TRANSPOSE_STRIDED;
  if (k->ydt == NLK_F8E4M3)
    return strided ? Out::E4M3_T : Out::E4M3;
  if (k->ydt == NLK_F8E5M2)
    return strided ? Out::E5M2_T : Out::E5M2;
  return strided ? Out::SAME : Out::PLAIN;
}

Hold hold_of(const nlk_norm *k)
{
  if (k->res || norm_of(k) == Norm::LN || out_of(k) != Out::PLAIN)
    return Hold::X;
  if (k->fwd.reload_min_n > 0 && k->N >= k->fwd.reload_min_n && k->M >= k->fwd.reload_min_m)
    return Hold::RELOAD;
  return k->N <= k->fwd.early_weight_max_n ? Hold::EARLY_W : Hold::X;
}

/* blockrow's packs per thread: from blockrow_group_min_m rows as many as leave each row
 * blockrow_group threads (fewer threads shuffle less, and enough rows keep the GPU busy),
 * blockrow_items below (a small grid wants the most threads in flight). */
int blockrow_items(const nlk_norm *k)
{
  if (k->fwd.blockrow_group < 1 || k->M < k->fwd.blockrow_group_min_m)
    return k->fwd.blockrow_items;
  const int64_t per = k->N / row_pack_elems(k) / k->fwd.blockrow_group;
  int items = 1;
  while (items < MAX_ITEMS && items * 2 <= per)
    items *= 2;
  return items;
}

/* SLAB's layout for T: rmsnorm.fwd.slab_rows rows per block, the fewest CTAs per cluster C
 * (N = C x W, W a power of two, C <= SLAB_MAX_CLUSTER) whose slab of W columns is at most
 * rmsnorm.fwd.slab_cols wide, else the narrowest that fits; shared memory: the slab of x (and
 * of the residual), and with a fused yt the tile of y's dtype. NLK_OK, or why not. */
template <typename T>
int slab_plan(const nlk_norm *k, FwdPlan *p, char *why, size_t cap)
{
  const int elt = sizeof(T), vec = 16 / elt, streams = k->res ? 2 : 1;
  const bool yt = k->yt && k->transpose == NLK_TRANSPOSE_FUSED;
  const int oelt = out_fp8(out_of(k)) ? 1 : elt, R = k->fwd.slab_rows, B = k->fwd.slab_block;
  if ((R & (R - 1)) || R < 16 || R > SLAB_MAX_ROWS || (B & (B - 1)) || B > SLAB_MAX_BLOCK || B < R ||
      B / R > 32) {
    snprintf(why, cap, "N = %lld: rmsnorm.fwd.slab_rows (%d) and slab_block (%d) must be powers of two, "
             "16 <= rows <= %d, block <= %d, 1 to 32 threads per row", (long long)k->N, R, B,
             (int)SLAB_MAX_ROWS, (int)SLAB_MAX_BLOCK);
    return NLK_ERR_UNSUPPORTED;
  }
  if (row_pack_elems(k) != vec) {
    snprintf(why, cap, "N = %lld: the slab takes rows of 16-byte packs (N a multiple of %d, "
             "16-byte aligned rows and pointers)", (long long)k->N, vec);
    return NLK_ERR_UNSUPPORTED;
  }
  p->cluster = 0;
  for (int c = 1; c <= SLAB_MAX_CLUSTER; c++) {
    const int64_t w = k->N / c;
    const size_t smem = (size_t)R * w * (streams * elt + (yt ? oelt : 0));
    if (k->N % c || (w & (w - 1)) || w % vec || (int64_t)smem > smem_budget(k))
      continue;
    p->cluster = c;
    p->slab_cols = (int)w;
    p->smem = smem;
    if (w <= k->fwd.slab_cols)
      break;
  }
  if (!p->cluster) {
    snprintf(why, cap, "N = %lld is not C x a power of two (C <= %d) whose slab of %d rows fits "
             "a CTA's shared memory", (long long)k->N, (int)SLAB_MAX_CLUSTER, R);
    return NLK_ERR_UNSUPPORTED;
  }
  p->slab_rows = R;
  p->c = RowCfg{vec, 1, B, B, 0};
  const FwdKernel key{Rows::SLAB, 1, Hold::X, k->res != NULL, out_of(k), 0};
  p->kernel = with_norm(k, [&](auto N) { return fwd_kernel<T, 16 / sizeof(T), decltype(N)::value>(key); });
  cudaError_t e = p->kernel ? allow_smem(k, p->kernel, p->smem, true) : cudaErrorInvalidValue;
  if (e == cudaSuccess && p->cluster > 8)
    e = allow_cluster(k, p->kernel);
  /* a cluster of 2 at least: none fits before sm_90 */
  if (e != cudaSuccess || max_clusters(k, p->kernel, p->cluster < 2 ? 2 : p->cluster, B, p->smem) < 1) {
    snprintf(why, cap, "N = %lld: clusters of %d CTAs of %zu bytes of shared memory do not fit "
             "this GPU (clusters need sm_90)", (long long)k->N, p->cluster, p->smem);
    return NLK_ERR_UNSUPPORTED;
  }
  return NLK_OK;
}

/* SKEW's rows: single 16-bit elements (16-byte packs ruled out) and a y of x's dtype, whose
 * rows, and those of the residual and residual_out, sit at x's offsets from 16 bytes (each
 * pointer a multiple of 16 bytes from x, the same row stride). */
bool skew_rows(const nlk_norm *k)
{
  auto as_x = [k](const void *p, int64_t stride) {
    return !p || (((uintptr_t)p - (uintptr_t)k->x) % 16 == 0 && (k->M == 1 || stride == k->sx));
  };
  return single_16bit_rows(k) && out_of(k) == Out::PLAIN && as_x(k->y, k->sy) &&
         as_x(k->res, k->sres) && as_x(k->res_out, k->sres_out);
}

/* The candidate's layout for T, and its kernel; false when it does not fit. */
template <typename T>
bool fit(const nlk_norm *k, Rows rows, FwdPlan *p)
{
  const int elt = sizeof(T), streams = k->res ? 2 : 1;
  int want_items = rows == Rows::WARP ? blockrow_items(k) : k->fwd.items;
  /* SKEW: packs a thread of its own (the looping kernel still where items is 0) */
  if (rows == Rows::SKEW && want_items)
    want_items = k->fwd.skew_wide_n > 0 && k->N >= k->fwd.skew_wide_n ? MAX_ITEMS : k->fwd.skew_items;
  /* an fp8 y: at least fp8_items packs, over which its epilogue's per-thread cost spreads; with
   * a CTA per row more, up to MAX_ITEMS, until the CTA has at most fp8_max_threads threads (its
   * reductions and amax commit are paid once a row, and cost more the more warps they join),
   * fp8_many_max_threads from fp8_many_min_m rows (enough CTAs to fill the SMs with fewer
   * threads each, where a small grid wants the threads) */
  int items = want_items;
  if (out_fp8(out_of(k)) && want_items > 0) {
    if (items < k->fwd.fp8_items)
      items = k->fwd.fp8_items;
    if (rows == Rows::CTA && k->fwd.fp8_max_threads > 0) {
      const int64_t packs = (k->N * elt + 15) / 16;
      const int cap = k->M >= k->fwd.fp8_many_min_m ? k->fwd.fp8_many_max_threads : k->fwd.fp8_max_threads;
      while (items < MAX_ITEMS && packs > (int64_t)items * cap)
        items *= 2;
    }
  }
  const Want want{items, k->fwd.block, k->fwd.blockrow_block};
  p->rows = rows;
  p->stages = 0;
  p->cluster = 1;
  p->slab_rows = p->slab_cols = 0;
  p->smem = 0;
  switch (rows) {
  case Rows::SLAB: {
    char why[256];
    return slab_plan<T>(k, p, why, sizeof why) == NLK_OK;
  }
  case Rows::STRIDE:
    p->stages = fit_stages(k, k->N, elt, pipe_limits(out_of(k)), want, k->fwd.stages, streams, 0, &p->c);
    if (!p->stages)
      return false;
    p->smem = (size_t)staging_cost(p->stages, streams, p->c.vec * elt, 0, 0).bytes(p->c.block, p->c.items);
    break;
  case Rows::STAGED: {
    /* block: the threads that give each about staged_items packs of the row (32 to 1024);
     * shared memory: the row and, for add_rmsnorm, its residual */
    const int items = k->fwd.staged_items < 1 ? 1 : k->fwd.staged_items;
    p->c = loop_cfg(k, k->N, elt);
    const int block = pow2ceil((k->N / p->c.vec + items - 1) / items);
    p->c.group = p->c.block = block < 32 ? 32 : block > STAGED_MAX_BLOCK ? STAGED_MAX_BLOCK : block;
    p->smem = (size_t)streams * k->N * elt;
    if ((int64_t)p->smem > smem_budget(k))
      return false;
    break;
  }
  case Rows::LOOP:
    p->c = loop_cfg(k, k->N, elt);
    break;
  case Rows::SKEW:
    if (!skew_rows(k))
      return false;
    [[fallthrough]];
  default: /* CTA, WARP, GROUPS, SKEW: a row per group, in registers */
    p->c = row_cfg(k, k->N, elt, rows, FWD_LIMITS, want, SmemCost{0, 0, 0});
    if (!p->c.items)
      return false;
  }
  /* one-row groups up to fixed_lanes_max threads ask for their count compiled in (one_kernel) */
  const bool one = rows == Rows::CTA || rows == Rows::WARP || rows == Rows::GROUPS;
  auto kernel_for = [&](const RowCfg &c) {
    const FwdKernel key{rows, c.items, hold_of(k), k->res != NULL, out_of(k),
                        one && c.group <= k->fwd.fixed_lanes_max ? c.group : 0};
    return with_norm(k, [&](auto N) {
      return with_vec<T>(c.vec, [&](auto V) { return fwd_kernel<T, decltype(V)::value, decltype(N)::value>(key); });
    });
  };
  p->kernel = kernel_for(p->c);
  if (!p->kernel || allow_smem(k, p->kernel, p->smem) != cudaSuccess)
    return false;
  /* a CTA per row lives about two memory round trips, so a grid of a few waves takes as many
   * lifetimes as it has waves, the last one part-filled: where the CTAs need more than one wave
   * at the wanted packs, take the fewest doublings of them (fewer threads a row, more CTAs
   * resident; blockrow: also more rows a CTA, so fewer CTAs), up to
   * rmsnorm.fwd.one_wave_doublings (row) or blockrow_wave_doublings, that fit one wave, if any,
   * in CTAs of one_wave_min_block threads at least (one-warp CTAs lost even in one wave) and,
   * blockrow, rows of blockrow_wave_min_group threads at least (two threads a row, 32 bytes
   * of it a load, lost even in one wave) */
  const int doublings = rows == Rows::CTA    ? k->fwd.one_wave_doublings
                        : rows == Rows::WARP ? k->fwd.blockrow_wave_doublings
                                             : 0;
  auto fits_wave = [k](const void *kernel, const RowCfg &c) {
    return ctas_of(k->M, c) <= (int64_t)k->sm_count * occupancy(k, kernel, c.block, 0);
  };
  if (doublings > 0 && !fits_wave(p->kernel, p->c)) {
    RowCfg c = p->c;
    for (int d = 0; d < doublings && c.items < MAX_ITEMS; d++) {
      const int before = c.items;
      c = row_cfg(k, k->N, elt, rows, FWD_LIMITS, Want{before * 2, want.block, want.warp_block}, SmemCost{0, 0, 0});
      const bool lanes = rows != Rows::WARP || c.group >= k->fwd.blockrow_wave_min_group;
      const void *kernel = c.items > before && c.block >= k->fwd.one_wave_min_block && lanes ? kernel_for(c) : NULL;
      if (!kernel)
        break;
      if (fits_wave(kernel, c)) {
        p->c = c;
        p->kernel = kernel;
        break;
      }
    }
  }
  return true;
}

/* The plan's grid: one-row mappings a CTA per row group, STAGED a CTA per row, STRIDE and LOOP
 * as many CTAs as the GPU holds at once (or the settings' count per SM: the looping kernel
 * re-reads each row in its second pass, from L2 while the rows in flight fit it, so fewer CTAs
 * than fit can be faster), SLAB a cluster per block of rows. */
int64_t grid_of(const nlk_norm *k, const FwdPlan &p)
{
  if (p.rows == Rows::SLAB)
    return (k->M + p.slab_rows - 1) / p.slab_rows * p.cluster;
  const int64_t groups = ctas_of(k->M, p.c);
  if (p.rows != Rows::STRIDE && p.rows != Rows::LOOP)
    return groups;
  const int want = p.rows == Rows::STRIDE ? k->fwd.ctas_per_sm : k->fwd.loop_ctas_per_sm;
  const int per_sm = want > 0 ? want : occupancy(k, p.kernel, p.c.block, p.smem);
  const int64_t grid = (int64_t)k->sm_count * per_sm;
  return grid < groups ? grid : groups;
}

/* The first of `cands` that fits, planned into p. */
template <typename T>
bool plan(const nlk_norm *k, const Candidates &cands, FwdPlan *p)
{
  return first_fit(cands, [&](Candidate c) { return fit<T>(k, c.rows, p); });
}

/* The chunked transposed copy's tile columns: transpose.tile_n, or from
 * transpose.chunk_tile_div the power of two at or below N / chunk_tile_div where that is wider
 * (up to 1024): a tile CTA has the row kernel's block, which grows with the row, and narrow
 * tiles would leave its threads a chunk each (docs/kernels.md, "Chunks of rows chained by
 * programmatic dependent launch"). */
int chunk_tile_n(const nlk_norm *k)
{
  int tn = k->tr.tile_n;
  const int64_t want = k->tr.chunk_tile_div > 0 ? k->N / k->tr.chunk_tile_div : 0;
  while (tn < 1024 && (int64_t)tn * 2 <= want)
    tn *= 2;
  return tn;
}

/* The chunked transposed copy's rows per chunk: transpose.chunk_kb of y (fp8: a byte an
 * element), in whole tiles of rows, at least one. */
int64_t chunk_rows(const nlk_norm *k)
{
  const int64_t tm = k->tr.tile_m, rows = ((int64_t)k->tr.chunk_kb << 10) / k->N / tm * tm;
  return rows > tm ? rows : tm;
}

/* The chunked transposed copy's launches (chunk_tile): launch c runs the rows of chunk c (x,
 * y, the statistics and the residuals taken from the chunk's first row) and the tiles of
 * chunk c - 1 behind them, the last launch tiles only. Launch 0 starts as launch_norm's would
 * (waiting on the kernel before it when k->pdl, before it lets launch 1 start); the others
 * are programmatic dependents of the one before. */
template <typename T> int run_chunked(nlk_norm *k, const FwdPlan &p, const FwdArgs &a0, FwdOut o)
{
  const int64_t S = chunk_rows(k), chunks = (k->M + S - 1) / S;
  const int tile_n = chunk_tile_n(k);
  const int64_t tiles_n = (k->N + tile_n - 1) / tile_n;
  const size_t smem = (size_t)k->tr.tile_m * tile_n; /* a tile of fp8 y */
  const cudaError_t e = allow_smem(k, p.kernel, smem);
  if (e != cudaSuccess)
    return cuda_result(k, e);
  auto at = [](const void *base, int64_t row, int64_t stride, size_t elt) -> char * {
    return base ? (char *)base + row * stride * (int64_t)elt : NULL;
  };
  auto rows_of = [&](int64_t c) { return c < chunks ? (k->M - c * S < S ? k->M - c * S : S) : 0; };
  o.chunked = true;
  o.tile_vec = aligned16(k->y, k->M > 1 ? k->sy : 0, 1) && aligned16(k->yt, k->syt, 1);
  o.tile_m = (int16_t)k->tr.tile_m;
  o.tile_n = (int16_t)tile_n;
  k->grid = (int32_t)(ctas_of(rows_of(0), p.c) + (S + o.tile_m - 1) / o.tile_m * tiles_n);
  k->resident = occupancy(k, p.kernel, p.c.block, smem);
  for (int64_t c = 0; c <= chunks; c++) {
    const int64_t r0 = c * S, rows = rows_of(c), prev = c > 0 ? rows_of(c - 1) : 0;
    FwdArgs a = a0;
    a.x = at(a0.x, r0, k->sx, sizeof(T));
    a.y = at(a0.y, r0, k->sy, 1);
    a.rstd = a0.rstd ? a0.rstd + r0 : NULL;
    a.mean = a0.mean ? a0.mean + r0 : NULL;
    a.res = at(a0.res, r0, k->sres, sizeof(T));
    a.res_out = at(a0.res_out, r0, k->sres_out, sizeof(T));
    a.M = rows;
    a.pdl = c == 0 && a0.pdl;
    o.row_ctas = (int32_t)ctas_of(rows, p.c);
    o.tile_rows = (int32_t)prev;
    o.tile_y = c > 0 ? at(k->y, r0 - S, k->sy, 1) : NULL;
    o.tile_yt = c > 0 ? at(k->yt, r0 - S, 1, 1) : NULL;
    const int64_t grid = o.row_ctas + (prev + o.tile_m - 1) / o.tile_m * tiles_n;
    void *args[] = {&a, &o};
    const int rc = launch_kernel(k, p.kernel, grid, p.c.block, smem, args, 1, 1, c > 0 || k->pdl);
    if (rc != NLK_OK)
      return rc;
  }
  return NLK_OK;
}

/* Plans the first of `cands` that fits and launches it on grid_of's grid. An fp8 y: amax
 * cleared first (clear_amax); current scaling launches the kernel twice, for amax (storing
 * nothing), then for y with the scale from it (the inputs read twice: extra_bytes). */
template <typename T>
int run(nlk_norm *k, const Candidates &cands)
{
  FwdPlan p;
  if (!plan<T>(k, cands, &p))
    return NLK_ERR_UNSUPPORTED;
  const int64_t grid = grid_of(k, p);
  const bool ln = norm_of(k) == Norm::LN;
  /* one row: its stride is never used (and may be wider than int32) */
  auto stride = [k](int64_t s) { return k->M > 1 ? (int32_t)s : 0; };
  FwdArgs a{.x = k->x, .w = k->w, .y = k->y, .rstd = k->rstd, .sx = stride(k->sx), .sy = stride(k->sy),
            .N = (int32_t)k->N, .group = (int16_t)p.c.group, .cast = (int8_t)k->cast,
            .pair = !ln && k->cast == NLK_CAST_LLAMA && k->w && k->wdt == k->dt && k->offset == 0.f,
            .M = k->M, .res = k->res, .b = ln ? k->b : NULL, .res_out = k->res_out,
            .mean = ln ? k->mean : NULL, .sres = stride(k->sres), .sres_out = stride(k->sres_out),
            .offset = k->offset, .eps = k->eps, .inv_n = 1.f / (float)k->N, .pdl = k->pdl != 0,
            .wf32 = k->wdt == NLK_F32, .bf32 = k->bdt == NLK_F32, .stages = (int8_t)p.stages};
  const bool fp8 = nlk_is_fp8(k->ydt), current = fp8 && k->scaling == NLK_SCALING_CURRENT;
  FwdOut o{.scale = fp8 ? k->scale : NULL, .amax = fp8 ? k->amax : NULL, .yt = k->yt, .syt = k->syt,
           .slab_cols = p.slab_cols, .slab_rows = (int16_t)p.slab_rows, .pass = PASS_DELAYED,
           .keep_y = k->keep_y != 0};
  k->grid = (int32_t)grid;
  k->block = p.c.block;
  k->cluster_dim = p.cluster;
  k->kernel = p.kernel;
  k->resident = occupancy(k, p.kernel, p.c.block, p.smem);
  void *args[] = {&a, &o};
  if (o.amax) {
    const cudaError_t e = clear_amax(k);
    if (e != cudaSuccess)
      return cuda_result(k, e);
  }
  if (current) {
    o.pass = PASS_AMAX;
    const int rc = launch_norm(k, p.kernel, grid, p.c.block, p.smem, args, 1, p.cluster);
    if (rc != NLK_OK)
      return rc;
    o.pass = PASS_Y;
    k->current_passes = 2;
    k->extra_bytes = k->M * k->N * (int64_t)sizeof(T) * (k->res ? 2 : 1);
  }
  if (k->transpose == NLK_TRANSPOSE_CHUNKED)
    return run_chunked<T>(k, p, a, o);
  return launch_norm(k, p.kernel, grid, p.c.block, p.smem, args, 1, p.cluster);
}

int launch(nlk_norm *k, const Candidates &cands)
{
  return with_dtype(k->dt, [&](auto t) { return run<decltype(t)>(k, cands); });
}

/* Each strategy's row mappings, the first that fits taken. */
Candidates row_rows() { return Candidates().add(Rows::SKEW).add(Rows::CTA).add(Rows::LOOP); }
Candidates blockrow_rows() { return Candidates().add(Rows::WARP); }
Candidates persistent_rows() { return Candidates().add(Rows::STRIDE).add(Rows::GROUPS).add(Rows::LOOP); }
Candidates staged_rows() { return Candidates().add(Rows::STAGED); }
Candidates slab_rows() { return Candidates().add(Rows::SLAB); }

int launch_row(nlk_norm *k) { return launch(k, row_rows()); }
int launch_blockrow(nlk_norm *k) { return launch(k, blockrow_rows()); }
int launch_persistent(nlk_norm *k) { return launch(k, persistent_rows()); }
int launch_staged(nlk_norm *k) { return launch(k, staged_rows()); }
int launch_slab(nlk_norm *k) { return launch(k, slab_rows()); }

/* A strategy's waves (nlk_strategy.waves): the grid the first of its row mappings that fits
 * would take, for row after the one-wave doublings, over the CTAs of its kernel the GPU holds
 * at once (0 where none fits). */
template <Candidates (*ROWS)()>
double waves_of(const nlk_norm *k)
{
  double w = 0;
  with_dtype(k->dt, [&](auto t) {
    FwdPlan p;
    if (plan<decltype(t)>(k, ROWS(), &p)) {
      const int per_sm = occupancy(k, p.kernel, p.c.block, p.smem);
      w = nlk_waves(grid_of(k, p), k->sm_count, per_sm > 0 ? per_sm : 1);
    }
    return NLK_OK;
  });
  return w;
}

int slab_supports(const nlk_norm *k, char *why, size_t cap)
{
  FwdPlan p;
  return with_dtype(k->dt, [&](auto t) { return slab_plan<decltype(t)>(k, &p, why, cap); });
}

int staged_supports(const nlk_norm *k, char *why, size_t cap)
{
  const int64_t max_n = smem_budget(k) / ((k->res ? 2 : 1) * nlk_dtype_size(k->dt));
  if (k->N <= max_n)
    return NLK_OK;
  snprintf(why, cap, "N = %lld does not fit one CTA's shared memory (at most %lld %s%s)",
           (long long)k->N, (long long)max_n, nlk_dtype_name(k->dt), k->res ? " with its residual" : "");
  return NLK_ERR_UNSUPPORTED;
}

/* The chunked transposed copy (run_chunked): an fp8 y, rows of one-row kernels (fwd_one), a
 * tile of powers of two from 16 (a 16-byte yt chunk per tile column) that fits shared memory. */
template <Candidates (*ROWS)()> int chunked_supports(const nlk_norm *k, char *why, size_t cap)
{
  const int tm = k->tr.tile_m, tn = chunk_tile_n(k);
  if (!nlk_is_fp8(k->ydt)) {
    snprintf(why, cap, "the chunked transposed copy takes an fp8 y (y is %s)", nlk_dtype_name(k->ydt));
    return NLK_ERR_UNSUPPORTED;
  }
  if (tm < 16 || tn < 16 || (tm & (tm - 1)) || (tn & (tn - 1)) ||
      (int64_t)tm * tn > k->smem_optin - 1024) {
    snprintf(why, cap, "chunked: the tile %d x %d (transpose.tile_m x transpose.tile_n, widened by "
             "transpose.chunk_tile_div) is not of powers of two from 16 that fit a CTA's shared "
             "memory", tm, tn);
    return NLK_ERR_UNSUPPORTED;
  }
  return with_dtype(k->dt, [&](auto t) {
    FwdPlan p;
    if (plan<decltype(t)>(k, ROWS(), &p) &&
        (p.rows == Rows::CTA || p.rows == Rows::WARP || p.rows == Rows::GROUPS))
      return NLK_OK;
    snprintf(why, cap, "chunked: N = %lld is past the rows a one-row kernel holds in registers",
             (long long)k->N);
    return NLK_ERR_UNSUPPORTED;
  });
}

/* Every strategy's own limit, after FwdArgs' int32 row strides (unused with one row), and the
 * chunked transposed copy's where it is asked for. */
template <int (*LIMIT)(const nlk_norm *, char *, size_t), Candidates (*ROWS)()>
int fwd_supports(const nlk_norm *k, char *why, size_t cap)
{
  const int64_t strides[] = {k->sx, k->sy, k->res ? k->sres : 0, k->res ? k->sres_out : 0};
  for (const int64_t s : strides)
    if (k->M > 1 && s > INT32_MAX) {
      snprintf(why, cap, "a row stride of %lld elements is above the forward kernels' limit of %d",
               (long long)s, INT32_MAX);
      return NLK_ERR_UNSUPPORTED;
    }
  const int rc = LIMIT(k, why, cap);
  if (rc != NLK_OK || !k->yt || k->transpose != NLK_TRANSPOSE_CHUNKED)
    return rc;
  return chunked_supports<ROWS>(k, why, cap);
}

} // namespace

#endif

} // namespace nlk

#ifndef NLK_INSTANCE

extern "C" const nlk_strategy nlk_cuda_fwd[] = {
  {"row", NLK_FWD, nlk::launch_row, NULL, nlk::fwd_supports<nlk::max_n_supports, nlk::row_rows>,
   nlk::waves_of<nlk::row_rows>},
  {"blockrow", NLK_FWD, nlk::launch_blockrow, NULL,
   nlk::fwd_supports<nlk::warp_row_supports, nlk::blockrow_rows>,
   nlk::waves_of<nlk::blockrow_rows>},
  {"persistent", NLK_FWD, nlk::launch_persistent, NULL,
   nlk::fwd_supports<nlk::max_n_supports, nlk::persistent_rows>,
   nlk::waves_of<nlk::persistent_rows>},
  {"staged", NLK_FWD, nlk::launch_staged, NULL, nlk::fwd_supports<nlk::staged_supports, nlk::staged_rows>,
   nlk::waves_of<nlk::staged_rows>},
  {"slab", NLK_FWD, nlk::launch_slab, NULL, nlk::fwd_supports<nlk::slab_supports, nlk::slab_rows>,
   nlk::waves_of<nlk::slab_rows>},
  {NULL, 0, NULL, NULL, NULL, NULL},
};

#endif
