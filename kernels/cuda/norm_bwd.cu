/*
 * norm_bwd.cu: the backward family. dx from dy, x, w and the saved rstd (LayerNorm: and mean),
 * dW (LayerNorm: and dB) summed over rows; add_rmsnorm's backward (x is the forward's
 * residual_out h) adds the gradient arriving at residual_out into dx. The ops differ only
 * where their math does: the row sums (RMSNorm: sum(dy W xhat); LayerNorm: sum(dy W) too,
 * reduced together as a float2), grad() and the bias gradient, summed beside dW (the Norm
 * template parameter); dres.
 *
 * Strategies (nlk_cuda_bwd, at the end) and the row mappings they run as (plan.cuh):
 *   row         CTA: one CTA per row; each row's dW contribution goes to an M x N fp32
 *               temp, then a column-reduce kernel (the old design: 8MN extra bytes);
 *   blockrow    WARP: a warp (or less) per row, rmsnorm.bwd.blockrow_block threads per CTA;
 *               (CTAs x N) fp32 partials + reduce;
 *   partials    STRIDE over contiguous row chunks, grid = SM count; (SMs x N) partials +
 *               reduce;
 *   persistent  STRIDE with a grid stride, grid = SMs x resident CTAs; (grid x N) partials
 *               reduced in the same kernel after a grid barrier (cooperative launch:
 *               rmsnorm.bwd.fused_reduce) or by the reduce kernel.
 * STRIDE: a thread always owns the same columns, so its weight packs and dW accumulators live
 * in registers for the whole kernel, while its x, dy (and dres) packs of the next
 * rmsnorm.bwd.stages - 1 rows are in flight through cp.async (single 16-bit elements, which
 * cp.async cannot copy: the next rows held in registers); at the end clusters of
 * rmsnorm.bwd.cluster CTAs (sm_90) may sum their dW through distributed shared memory and
 * write one partial row. On sm_90, rows wider than rmsnorm.bwd.share_n (fp32_share_n) columns
 * are shared by the CTAs of a cluster, which exchange each row's sum through distributed
 * shared memory. Rows wider than registers hold otherwise run LOOP (the row read twice) or,
 * for 16-bit rows from rmsnorm.bwd.split_min_n and any row whose dW outgrows shared memory,
 * SPLIT: a row kernel and a column kernel. The dW (and dB) partial rows are pw floats wide: dW
 * at column 0, dB at column db_at (N, or 0 without dW), so one reduce kernel sums both.
 * The rmsnorm.bwd.* settings steer LayerNorm's kernels too. Every reduction sums in a fixed order, so results
 * are bitwise reproducible; the `atomic` reduction (fp32 atomicAdd into an accumulator) is
 * not. dx may overwrite dy in place: each thread reads its packs of a row before writing
 * them.
 *
 * Compiled as itself for the strategies and once per dtype and pack width for the kernels
 * (NLK_INSTANCE; see norm_fwd.cu).
 */
#include "device.cuh"
#include "nlk_cuda.h"
#include "plan.cuh"
#include "reduce.cuh"

namespace nlk {

struct BwdArgs {
  const void *x, *dy, *dres, *w;
  void *dx, *dw, *db;
  const float *rstd, *mean;
  float *partials;  /* [grid][pw] (row: [M][pw]); NULL when dW and dB are not reduced through them */
  float *accum;     /* atomic reduction: [pw] fp32, zeroed before the launch */
  float *rowc;      /* split: [M][sums] per-row means of the row sums (RowSum) */
  unsigned int *sync;
  int64_t sx, sdy, sdres, sdx;
  int64_t M, chunk; /* chunk > 0: CTA b (split: CTA row b) owns rows [b*chunk, (b+1)*chunk) */
  int N, group, wf32, cast, fused, dw_f32, db_f32, stages, pdl;
  int lead;         /* pipelined kernel, rmsnorm.bwd.scalar_lead: rstd (mean) staged by every
                     * lane (0), one lane a warp (1), one lane in shared rows only (2) */
  int pw, db_at;    /* partial rows: floats per row, and dB's first column */
  int acc_smem;     /* looping kernel: dW (dB) accumulates in shared memory (pw floats) */
  int cluster;      /* pipelined kernel: CTAs per cluster, one partial row each cluster */
  float offset;
};

/* The largest block per row mapping (CTA: row, WARP: blockrow, STRIDE: the pipelined kernel)
 * and items, from ptxas's register counts for bf16 (the hungriest dtype) so that nothing
 * spills; 0: no kernel with that many packs. STRIDE holds the weight and dW (2 x VEC floats
 * per item) on top of the packs, and LayerNorm's dB up to 2 packs; at 4 its dB lives in
 * shared memory (bwd_stride's DB_SMEM), which would otherwise halve the threads. */
constexpr BlockLimits bwd_limits(Rows rows)
{
  return rows == Rows::CTA    ? BlockLimits{{1024, 1024, 512, 256}, {1, 1, 1, 1}, 0}
         : rows == Rows::WARP ? BlockLimits{{1024, 512, 512, 256}, {1, 1, 1, 1}, 0}
                              : BlockLimits{{1024, 512, 512, 0}, {1, 1, 1, 1}, 0};
}

/* The pipelined kernel on rows of single 16-bit elements, which cp.async cannot copy: the next
 * row's elements are held in registers instead of staged (HELD), a register each for x and
 * dy of this row and of the next, so a thread takes up to 8 of them at 512 threads (a
 * 4095-column row in one CTA instead of the looping kernel) and up to 2 at 1024 (ptxas: no
 * spill; 8 at 1024 spilled 56-128 bytes). */
constexpr BlockLimits BWD_HELD_LIMITS{{1024, 1024, 512, 512}, {1, 1, 1, 1}, 0};
constexpr BlockLimits stride_limits(int pack)
{
  return pack < 4 ? BWD_HELD_LIMITS : bwd_limits(Rows::STRIDE);
}

/* ROW_SHARE's exchange: at most this many rows per CTA, and CTAs per cluster. */
enum { ROW_SHARE_GROUPS = 8, ROW_SHARE_MAX = 8 };

/* SPLIT's column kernel: threads per CTA, one column pack each. */
enum { SPLIT_BLOCK = 256 };

/* What the pipelined kernel's thread-block clusters (sm_90) do: nothing (SOLO); sum their dW
 * and write one partial row (DW_SUM, cluster_sum); or share each row (ROW_SHARE), CTA q of
 * C holding columns [q N/C, (q+1) N/C) and the row's sum exchanged (cluster_row_sum). */
enum ClusterUse { SOLO, DW_SUM, ROW_SHARE };

/* Everything that selects a backward kernel besides the dtype, the pack width and the norm
 * (SPLIT: the row-reduction kernel when row_pass, else the column kernel). */
struct BwdKernel {
  Rows rows;
  int items;
  ClusterUse cluster;
  bool row_pass;
  bool float_w; /* STRIDE, rmsnorm.bwd.float_weights (1, or 2 with fp32 weights): weights held
                 * as fp32 where they fit */
};

/* The kernel for a key, from the translation unit that instantiates T, VEC and NORM; NULL
 * when no kernel has that layout. */
template <typename T, int VEC, Norm NORM> const void *bwd_kernel(const BwdKernel &key);

/* A row's sums: sum(dy W xhat); LayerNorm's (x) sum(dy W) and (y) sum(dy W xhat). */
template <Norm NORM> using RowSum = std::conditional_t<NORM == Norm::LN, float2, float>;

/* ---- The kernels, compiled once per dtype and pack width (NLK_INSTANCE) ---- */

#ifdef NLK_INSTANCE

namespace {

/* After a grid barrier: CTA b sums the partials of its slice of columns over all CTAs, in
 * CTA order. Lanes take 32 adjacent columns, warps split the partial rows. */
template <typename T>
__device__ void reduce_slice(const BwdArgs &a, float *red)
{
  const int nb = gridDim.x, cs = (a.pw + nb - 1) / nb;
  const int c0 = blockIdx.x * cs, c1 = min(a.pw, c0 + cs);
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5, ny = blockDim.x >> 5;
  const GradOut out{a.dw, a.db, a.dw_f32 ? NLK_F32 : Dt<T>::id, a.db_f32 ? NLK_F32 : Dt<T>::id, a.db_at};
  for (int ct = c0; ct < c1; ct += 32) {
    const int col = ct + tx;
    float acc = 0.f;
    if (col < c1)
      for (int p = ty; p < nb; p += ny)
        acc += __ldcg(a.partials + (int64_t)p * a.pw + col);
    red[ty * 32 + tx] = acc;
    __syncthreads();
    if (ty == 0 && col < c1) {
      float sum = 0.f;
      for (int y = 0; y < ny; y++)
        sum += red[y * 32 + tx];
      out.store(col, sum);
    }
    __syncthreads();
  }
}

/* Stores VEC floats at column v*VEC of a row of floats, 16 bytes at a time when VEC allows
 * (rows start at multiples of N floats, and VEC divides N). */
template <int VEC>
__device__ __forceinline__ void put_floats(float *row, int v, const float (&c)[VEC])
{
  if (VEC % 4 == 0) {
#pragma unroll
    for (int q = 0; q < VEC / 4; q++)
      reinterpret_cast<float4 *>(row + v * VEC)[q] =
          make_float4(c[4 * q], c[4 * q + 1], c[4 * q + 2], c[4 * q + 3]);
  } else {
#pragma unroll
    for (int j = 0; j < VEC; j++)
      row[v * VEC + j] = c[j];
  }
}

/* What a row's gradients take besides its elements: rstd r, LayerNorm's mean mu, and the
 * means of the row sums: cx of dy W xhat, LayerNorm's cg of dy W (0 for RMSNorm). */
struct RowG {
  float r, mu, cx, cg;
};

template <Norm NORM>
__device__ __forceinline__ RowG row_g(float r, float mu, RowSum<NORM> s, float inv_n)
{
  if constexpr (NORM == Norm::LN)
    return RowG{r, mu, s.y * inv_n, s.x * inv_n};
  else
    return RowG{r, 0.f, s * inv_n, 0.f};
}

template <typename T, int VEC, int ITEMS, Norm NORM>
__device__ __forceinline__ void load_in(const BwdArgs &a, int64_t row, int lane, int G, int nvec,
                                        Pack<T, VEC> (&xv)[ITEMS], Pack<T, VEC> (&gv)[ITEMS], float &r,
                                        float &mu)
{
  load_row<T, VEC, ITEMS>(a.x, row, a.sx, lane, G, nvec, xv);
  load_row<T, VEC, ITEMS>(a.dy, row, a.sdy, lane, G, nvec, gv);
  r = a.rstd[row];
  if (NORM == Norm::LN)
    mu = a.mean[row];
}

/* Adds one element's terms to the row sums s: dy W x (times r later: RMSNorm), LayerNorm's dy W
 * and dy W (x - mu). */
template <Norm NORM>
__device__ __forceinline__ void add_terms(RowSum<NORM> &s, float dy, float W, float x, float mu)
{
  if constexpr (NORM == Norm::LN) {
    s.x += dy * W;
    s.y += dy * W * (x - mu);
  } else {
    s += dy * W * x;
  }
}

/* The thread's row sums scaled by rstd: the xhat = (x - mu) r in them. */
template <Norm NORM> __device__ __forceinline__ RowSum<NORM> scaled(RowSum<NORM> s, float r)
{
  if constexpr (NORM == Norm::LN)
    return make_float2(s.x, s.y * r);
  else
    return s * r;
}

/* One element's gradients: returns dx = r * (dy * W - xhat * cx) (LayerNorm: - cg too), plus
 * the residual gradient d when add_rmsnorm has one, and sets dW's contribution dy * xhat
 * (RMSNorm: xhat rounded to T as the forward used it, except in gemma mode) and dB's, dy.
 * LayerNorm in scalar packs (VEC 1) rounds dy * W before taking cg from it, as the row sum
 * took it, instead of fusing the two: a one-element row (whose dy W is its own mean cg, and
 * only scalar packs carry one) then gets exactly 0, as the reference, not the product's
 * rounding error times rstd (1 / sqrt(eps) there). The 16-byte kernels keep the fused
 * multiply-add, which measured faster (docs/kernels.md, "Random cases"). */
template <typename T, int VEC, Norm NORM>
__device__ __forceinline__ float grad(const BwdArgs &a, float dy, float x, float W, const RowG &g,
                                      float d, float &contrib, float &contrib_b)
{
  contrib_b = dy;
  if constexpr (NORM == Norm::LN) {
    const float xh = (x - g.mu) * g.r;
    contrib = dy * xh;
    return g.r * ((VEC == 1 ? __fmul_rn(dy, W) : dy * W) - g.cg - xh * g.cx);
  } else {
    const float xh = x * g.r;
    float dx = g.r * (dy * W - xh * g.cx);
    if (a.dres)
      dx += d;
    contrib = dy * (a.cast == NLK_CAST_GEMMA ? xh : round_to<T>(xh));
    return dx;
  }
}

/* A thread's weights held as fp32 for the whole kernel, the offset added (1 without a weight),
 * read once; 0 past the row. HELD (single elements): the held x and dy stay 0 there too
 * (PADDED), so that nothing in a row's work but the dx store tests its bounds; one test per
 * element for the weight's kind and another for its offset cost a single element what a
 * 16-byte pack pays once for eight (docs/kernels.md, "Rows of single elements"). bwd_stride's
 * FW (rmsnorm.bwd.float_weights), 16-byte packs of 16-bit x where a thread's weights fit
 * FLOAT_WEIGHTS registers (1 or 2 packs): Weights tests the weight's kind and converts its
 * packs twice a row, 15% of LayerNorm's instructions at 2 packs; the H200 gains by it, the
 * H100 only with fp32 weights, which Weights reads twice a row from L1 ("Weights held as
 * fp32"). fp32 x's packs spilled. */
constexpr int FLOAT_WEIGHTS = 16;
template <typename T, int VEC, int ITEMS> struct HeldWeights {
  float f[ITEMS][VEC];
  /* Weights' arguments, always preloaded */
  __device__ __forceinline__ HeldWeights(const void *w, int wf32, float offset, int lane, int G,
                                         int nvec, bool)
  {
#pragma unroll
    for (int i = 0; i < ITEMS; i++) {
#pragma unroll
      for (int j = 0; j < VEC; j++)
        f[i][j] = 0.f;
      if (lane + i * G < nvec)
        load_w<T, VEC>(w, wf32, offset, lane + i * G, f[i]);
    }
  }
  __device__ __forceinline__ void refresh() {}
  __device__ __forceinline__ void get(int i, int, float (&W)[VEC]) const
  {
#pragma unroll
    for (int j = 0; j < VEC; j++)
      W[j] = f[i][j];
  }
};

/* One row: its sums (RowSum) reduced over the group by reduce(s) (every thread of the CTA
 * calls this the same number of times), dx = r * (dy * W - xhat * cx) (LayerNorm: - cg; plus
 * the dres pack that dres_of(item, pack) gives), and the row's dW and dB contributions
 * (dy * xhat, dy) handed to take(item, pack, dW's, dB's). wt: Weights or HeldWeights.
 * PADDED: a thread's packs past the row hold zeros (and so do their weights), whose terms
 * and contributions are 0: only the dx store is bounded. */
template <typename T, int VEC, int ITEMS, Norm NORM, bool PADDED = false, typename WT,
          typename Reduce, typename Dres, typename Take>
__device__ __forceinline__ void process(const BwdArgs &a, int64_t row, bool active, int lane,
                                        int G, int nvec, Pack<T, VEC> (&xv)[ITEMS],
                                        Pack<T, VEC> (&gv)[ITEMS], float r, float mu,
                                        const WT &wt, Reduce reduce, Dres dres_of, Take take)
{
  RowSum<NORM> s{};
  if (active) {
#pragma unroll
    for (int i = 0; i < ITEMS; i++)
      if (PADDED || lane + i * G < nvec) {
        float W[VEC], g[VEC], x[VEC];
        wt.get(i, lane + i * G, W);
        unpack(gv[i], g);
        unpack(xv[i], x);
#pragma unroll
        for (int j = 0; j < VEC; j++)
          add_terms<NORM>(s, g[j], W[j], x[j], mu);
      }
    s = scaled<NORM>(s, r);
  }
  s = reduce(s);
  if (!active)
    return;
  const RowG rg = row_g<NORM>(r, mu, s, 1.f / (float)a.N);
#pragma unroll
  for (int i = 0; i < ITEMS; i++) {
    opaque(xv[i]);
    opaque(gv[i]);
  }
#pragma unroll
  for (int i = 0; i < ITEMS; i++) {
    const int v = lane + i * G;
    if (PADDED || v < nvec) {
      Pack<T, VEC> o;
      float W[VEC], contrib[VEC], contrib_b[VEC], g[VEC], x[VEC], d[VEC] = {};
      wt.get(i, v, W);
      unpack(gv[i], g);
      unpack(xv[i], x);
      if (NORM == Norm::RMS && a.dres)
        unpack(dres_of(i, v), d);
#pragma unroll
      for (int j = 0; j < VEC; j++)
        o.v[j] = from_f<T>(grad<T, VEC, NORM>(a, g[j], x[j], W[j], rg, d[j], contrib[j], contrib_b[j]));
      if constexpr (PADDED) /* one row pointer, the bounds as the store's predicate */
        store_u16_if(static_cast<T *>(a.dx) + row * a.sdx + v,
                     reinterpret_cast<const unsigned short &>(o), v < nvec);
      else
        store<T, VEC>(a.dx, row, a.sdx, v, o);
      take(i, v, contrib, contrib_b);
    }
  }
}

/* Pack v's VEC values c added into the atomic accumulator `acc`. */
template <int VEC>
__device__ __forceinline__ void add_atomic(float *acc, int v, const float (&c)[VEC])
{
#pragma unroll
  for (int j = 0; j < VEC; j++)
    atomicAdd(acc + v * VEC + j, c[j]);
}

/* A CTA's sums of pack v into its partial row `out`, or (out NULL) added into the atomic
 * accumulator `acc` (NULL too: not wanted). */
template <int VEC>
__device__ __forceinline__ void put_contrib(float *out, float *acc, int v, const float (&c)[VEC])
{
  if (out)
    put_floats<VEC>(out, v, c);
  else if (acc)
    add_atomic<VEC>(acc, v, c);
}

/* Row r of the fp32 partials (NULL when dW is not reduced through them). */
__device__ __forceinline__ float *partial_row(const BwdArgs &a, int64_t r)
{
  return a.partials ? a.partials + r * a.pw : NULL;
}

/* Column col of this CTA's dW (or dB) into its partial row `out`, or (out NULL) added into
 * the atomic accumulator `acc`. */
__device__ __forceinline__ void emit(float *out, float *acc, int col, float v)
{
  if (out)
    out[col] = v;
  else
    atomicAdd(acc + col, v);
}

/* The cluster's dW (sm_90, C CTAs; N a multiple of 4), once each CTA has put its groups' dW
 * rows (R x N) into its own shared memory `sm`: CTA q of the cluster sums the q-th slice of
 * the columns over the cluster's CTAs and their groups (rank order, then group order)
 * through distributed shared memory, into the cluster's partial row `out`, four columns at
 * a time: C times fewer partial rows to write and to reduce. The cluster barriers: every
 * peer's rows are written before any is read, and each CTA's shared memory stays alive
 * until its peers have read it. */
__device__ __forceinline__ void cluster_sum(float *out, const float *sm, int N, int R, int C)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cluster_sync();
  const unsigned q = cluster_rank(), base = (unsigned)__cvta_generic_to_shared(sm);
  const int units = N / 4, per = (units + C - 1) / C, u1 = min(units, ((int)q + 1) * per);
  for (int u = (int)q * per + threadIdx.x; u < u1; u += blockDim.x) {
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int k = 0; k < C; k++) {
      const unsigned peer = peer_shared(base, k);
      for (int r = 0; r < R; r++) {
        float4 v;
        asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                     : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                     : "r"(peer + (unsigned)((r * N + u * 4) * 4)));
        acc.x += v.x;
        acc.y += v.y;
        acc.z += v.z;
        acc.w += v.w;
      }
    }
    reinterpret_cast<float4 *>(out)[u] = acc;
  }
  cluster_sync();
#endif
}

/* ROW_SHARE's exchange of row sums (V: RowSum), in each CTA's shared memory: for each of its
 * groups (rows, at most ROW_SHARE_GROUPS) and two alternating sets, a slot per CTA of the
 * cluster (at most ROW_SHARE_MAX) and the mbarrier that counts their bytes in. */
template <typename V> struct Exchange {
  V slots[2][ROW_SHARE_GROUPS][ROW_SHARE_MAX];
  unsigned long long bars[2][ROW_SHARE_GROUPS];
};

/* Once per CTA, before the cluster barrier that starts ROW_SHARE: every mbarrier expects one
 * arrival (its group's lane 0, which also announces the bytes) per phase; the fence makes the
 * initialisation visible to the peers' asynchronous stores. */
template <typename V> __device__ __forceinline__ void exchange_init(Exchange<V> &ex)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (threadIdx.x < 2 * ROW_SHARE_GROUPS) {
    const unsigned bar = (unsigned)__cvta_generic_to_shared(&ex.bars[0][0] + threadIdx.x);
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
  }
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

/* ROW_SHARE: the row's sums over the cluster's C CTAs, from s, the sums over this CTA's columns
 * (the same in every thread of group grp). Lane k of the group stores s into slot q (this
 * CTA's rank) of CTA k's set `set`, an asynchronous store that counts its bytes on CTA k's
 * mbarrier of that slot set; lane 0 announces the C x sizeof(V) bytes its own mbarrier awaits. Every
 * thread waits for that phase (`phase`: the set's uses so far, mod 2) and adds the C slots in
 * rank order, so every CTA gets the same bits. No cluster barrier per row: one barrier a row
 * (its release also waits for the thread's global stores) measured much slower on both GPUs
 * (docs/kernels.md). A set is rewritten two rows later: a peer sends that row only
 * after it received this CTA's sum of the row between, which this CTA sends only after reading
 * the set. The host launches it from sm_90 only. */
template <typename V>
__device__ __forceinline__ V cluster_row_sum(V s, Exchange<V> &ex, int set, int grp, int lane, int C,
                                             unsigned phase)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned q = cluster_rank(), bar = (unsigned)__cvta_generic_to_shared(&ex.bars[set][grp]);
  V *slots = ex.slots[set][grp];
  if (lane == 0)
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                 "r"((int)sizeof(V) * C) : "memory");
  if (lane < C) {
    const unsigned mine = (unsigned)__cvta_generic_to_shared(slots + q);
    const unsigned peer_slot = peer_shared(mine, lane), peer_bar = peer_shared(bar, lane);
    if constexpr (sizeof(V) == 8)
      asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];"
                   ::"r"(peer_slot), "f"(reinterpret_cast<const float2 &>(s).x),
                   "f"(reinterpret_cast<const float2 &>(s).y), "r"(peer_bar) : "memory");
    else
      asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];"
                   ::"r"(peer_slot), "r"(__float_as_uint(reinterpret_cast<const float &>(s))),
                   "r"(peer_bar) : "memory");
  }
  unsigned done = 0;
  while (!done)
    asm volatile("{\n\t.reg .pred p;\n\t"
                 "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n\t"
                 "selp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(done) : "r"(bar), "r"(phase) : "memory");
  s = V{};
  for (int k = 0; k < C; k++)
    s = s + slots[k];
#endif
  return s;
}

/* ROW_SHARE: the arguments as CTA q of its cluster sees them, every column pointer advanced
 * to its first column c0 = q N / C (the partial row is the caller's). */
template <typename T>
__device__ __forceinline__ void shift_cols(BwdArgs &a, int64_t c0)
{
  a.x = static_cast<const T *>(a.x) + c0;
  a.dy = static_cast<const T *>(a.dy) + c0;
  a.dx = static_cast<T *>(a.dx) + c0;
  if (a.dres)
    a.dres = static_cast<const T *>(a.dres) + c0;
  if (a.w)
    a.w = a.wf32 ? (const void *)(static_cast<const float *>(a.w) + c0)
                 : (const void *)(static_cast<const T *>(a.w) + c0);
  if (a.accum)
    a.accum += c0;
}

/* The CTA's dW (or dB) over its ncols columns: each group's register accumulators go to its
 * own row of ncols floats in shared memory (R x ncols, `sm`), then every column is summed in
 * group order and emitted into `out` (the CTA's partial row from the gradient's first column;
 * NULL: the atomic accumulator `acc`), or summed over the cluster (DW_SUM) into the cluster's
 * partial row from column col0. A CTA of one group outside DW_SUM clusters stores its
 * registers straight into `out`. The barrier first: `sm` may be the pipeline's staging, or
 * the rows of the gradient summed before, which other threads may still read. */
template <int VEC, int ITEMS, int CL = SOLO>
__device__ __forceinline__ void cta_dw(const BwdArgs &a, const float (&dw)[ITEMS][VEC], int lane,
                                       int G, int nvec, int ncols, float *out, float *acc, int col0,
                                       float *sm)
{
  const Group g(G);
  const bool dw_sum = CL == DW_SUM && a.cluster > 1;
  if (g.per_cta == 1 && out && !dw_sum) {
#pragma unroll
    for (int i = 0; i < ITEMS; i++)
      if (lane + i * G < nvec)
        put_floats<VEC>(out, lane + i * G, dw[i]);
    return;
  }
  __syncthreads();
  float *mine = sm + (int64_t)g.idx * ncols;
#pragma unroll
  for (int i = 0; i < ITEMS; i++)
    if (lane + i * G < nvec)
      put_floats<VEC>(mine, lane + i * G, dw[i]);
  if constexpr (CL == DW_SUM)
    if (dw_sum) {
      cluster_sum(a.partials + (int64_t)(blockIdx.x / a.cluster) * a.pw + col0, sm, a.N, g.per_cta,
                  a.cluster);
      return;
    }
  __syncthreads();
  for (int col = threadIdx.x; col < ncols; col += blockDim.x) {
    float sum = 0.f;
    for (int k = 0; k < g.per_cta; k++)
      sum += sm[(int64_t)k * ncols + col];
    emit(out, acc, col, sum);
  }
}

/* The CTA's dW and (LayerNorm with a bias) dB, by cta_dw, into the partial row `out` from the
 * CTA's first column (NULL: the atomic accumulator, shifted the same way, `acc`). */
template <int VEC, int ITEMS, Norm NORM, int CL = SOLO>
__device__ __forceinline__ void cta_grads(const BwdArgs &a, const float (&dw)[ITEMS][VEC],
                                          const float (&db)[ITEMS][VEC], int lane, int G, int nvec,
                                          int ncols, float *out, float *acc, float *sm)
{
  if (NORM == Norm::RMS || a.dw)
    cta_dw<VEC, ITEMS, CL>(a, dw, lane, G, nvec, ncols, out, acc, 0, sm);
  if (NORM == Norm::LN && a.db)
    cta_dw<VEC, ITEMS, CL>(a, db, lane, G, nvec, ncols, out ? out + a.db_at : NULL,
                           acc ? acc + a.db_at : NULL, a.db_at, sm);
}

/* CTA (row: each row's dW contribution straight into its row of the temp) and WARP
 * (blockrow: summed in registers, then the CTA's groups through shared memory): each group
 * handles exactly one row. The weight is read where used, from L1 (the CTAs of an SM share
 * it), to keep registers for occupancy. */
template <typename T, int VEC, int ITEMS, Norm NORM, Rows R>
__global__ void __launch_bounds__(bwd_limits(R)(ITEMS)) bwd_one(BwdArgs a)
{
  pdl_begin(a.pdl);
  const Group g(a.group);
  const int G = g.G, lane = g.lane, nvec = a.N / VEC;
  const int64_t row = g.one_row();
  const bool active = row < a.M;
  extern __shared__ __align__(16) float dyn[];
  __shared__ RowSum<NORM> red[2][32];
  int parity = 0;
  Pack<T, VEC> xv[ITEMS], gv[ITEMS];
  float r = 0.f, mu = 0.f;
  if (active)
    load_in<T, VEC, ITEMS, NORM>(a, row, lane, G, nvec, xv, gv, r, mu);
  const Weights<T, VEC, ITEMS> wt(a.w, a.wf32, a.offset, lane, G, nvec, false);
  auto dres_of = [&](int, int v) { return load<T, VEC>(a.dres, row, a.sdres, v); };
  auto reduce = [&](RowSum<NORM> s) { return group_reduce(s, G, red, parity); };
  if constexpr (R == Rows::CTA) {
    process<T, VEC, ITEMS, NORM>(a, row, active, lane, G, nvec, xv, gv, r, mu, wt, reduce, dres_of,
                                 [&](int, int v, const float(&c)[VEC], const float(&cb)[VEC]) {
                                   if (a.partials) {
                                     if (NORM == Norm::RMS || a.dw)
                                       put_floats<VEC>(a.partials + row * a.pw, v, c);
                                     if (NORM == Norm::LN && a.db)
                                       put_floats<VEC>(a.partials + row * a.pw + a.db_at, v, cb);
                                   } else if (a.accum) {
                                     if (NORM == Norm::RMS || a.dw)
                                       add_atomic<VEC>(a.accum, v, c);
                                     if (NORM == Norm::LN && a.db)
                                       add_atomic<VEC>(a.accum + a.db_at, v, cb);
                                   }
                                 });
  } else {
    float dw[ITEMS][VEC], db[ITEMS][VEC];
    zero(dw);
    zero(db);
    process<T, VEC, ITEMS, NORM>(a, row, active, lane, G, nvec, xv, gv, r, mu, wt, reduce, dres_of,
                                 [&](int i, int, const float(&c)[VEC], const float(&cb)[VEC]) {
#pragma unroll
                                   for (int j = 0; j < VEC; j++) {
                                     dw[i][j] = c[j];
                                     db[i][j] = cb[j];
                                   }
                                 });
    if (a.partials || a.accum)
      cta_grads<VEC, ITEMS, NORM>(a, dw, db, lane, G, nvec, a.N, partial_row(a, blockIdx.x), a.accum,
                                  dyn);
  }
}

/* STRIDE (partials, persistent): groups walk rows (a contiguous chunk per CTA, or a grid stride)
 * with a trip count uniform across the CTA; idle groups still join the barriers. Stage s of
 * a thread's staging holds its x, dy (and dres) packs and the rstd (and mean) of the row s
 * iterations ahead, which LEAD copies once per group in a warp; each iteration tops the
 * pipeline up, waits for the oldest stage and works on it from registers. dW stays in
 * registers until the end (LayerNorm's dB too, but at 4 packs of 16 bytes, where it sits in
 * shared memory to leave room for 512 threads): the CTA's row of
 * partials (DW_SUM: the cluster's), then (fused) a grid barrier and this CTA's slice of the
 * final reduction.
 * ROW_SHARE: the C CTAs of a cluster walk the same rows, each over N / C columns (its
 * registers then hold rows C times wider), and exchange each row's sum (cluster_row_sum:
 * asynchronous stores counted in by mbarriers); the cluster writes one partial row, a slice
 * from each CTA. HELD (single 16-bit elements): the next rows' x and dy in registers, AHEAD
 * rows ahead whatever rmsnorm.bwd.stages says, and nothing staged. Groups are a power of two,
 * or (rmsnorm.bwd.whole_warps) the whole CTA of as many warps as the row needs. */
template <typename T, int VEC, int ITEMS, Norm NORM, int CL, bool FW = false>
__global__ void __launch_bounds__(stride_limits(VEC * sizeof(T))(ITEMS)) bwd_stride(BwdArgs a)
{
  pdl_begin(a.pdl);
  using Sum = RowSum<NORM>;
  __shared__ Exchange<Sum> ex; /* ROW_SHARE only: the other instances drop it */
  if constexpr (CL == ROW_SHARE) {
    exchange_init(ex);
    cluster_arrive();
  }
  using P = Pack<T, VEC>;
  constexpr bool HELD = sizeof(P) < 4;
  /* whole_warps' CTA-wide groups come only in 16-byte packs */
  constexpr GroupMap MAP = sizeof(P) == 16 ? GroupMap::ROUNDED : GroupMap::POW2;
  /* ROW_SHARE: CTA q's slice of the row, from column c0 (held single elements split N
   * unevenly, the last slice the shortest) */
  const int C = CL == ROW_SHARE ? a.cluster : 1, per = HELD ? (a.N + C - 1) / C : a.N / C;
  const int64_t c0 = (int64_t)(blockIdx.x % C) * per;
  const int ncols = HELD ? min(per, a.N - (int)c0) : per;
  const int64_t unit = blockIdx.x / C, units = gridDim.x / C;
  if constexpr (CL == ROW_SHARE)
    shift_cols<T>(a, c0);
  const Group g(a.group, MAP);
  const int G = g.G, R = g.per_cta, grp = g.idx, lane = g.lane, nvec = ncols / VEC;
  /* HELD: the rows held ahead of the one at hand, LayerNorm's two and RMSNorm's one, each the
   * faster count for its op (docs/kernels.md, "Rows of single elements") */
  constexpr int AHEAD = HELD && NORM == Norm::LN ? 2 : 1;
  const int S = HELD ? AHEAD + 1 : a.stages;
  extern __shared__ __align__(16) float dyn[];
  __shared__ Sum red[2][32];
  if constexpr (MAP == GroupMap::ROUNDED)
    zero_spare_slots(red);
  int parity = 0;
  unsigned uses = 0; /* ROW_SHARE: rows exchanged so far */
  constexpr int SCALARS = NORM == Norm::LN ? 2 : 1;
  const Staging<P, ITEMS, SCALARS> st(dyn, S, a.dres ? 3 : 2);
  using WT = std::conditional_t<HELD || FW, HeldWeights<T, VEC, ITEMS>, Weights<T, VEC, ITEMS>>;
  WT wt(a.w, a.wf32, a.offset, lane, G, nvec, true);
  float dw[ITEMS][VEC], db[ITEMS][VEC];
  zero(dw);
  if (NORM == Norm::LN)
    zero(db);
  /* DB_SMEM (LayerNorm at 4 packs of 16 bytes): dB's sums in shared memory past the staging
   * instead of registers, a thread's ITEMS x VEC floats in 16-byte slots (slot k of every
   * thread side by side: no bank conflicts), so that the kernel fits 512 threads as RMSNorm's
   * 4-pack kernel does; the host sizes it (fit) */
  constexpr bool DB_SMEM = NORM == Norm::LN && ITEMS >= WIDE_ITEMS && sizeof(P) == 16;
  const unsigned db_slots = st.past(S) + threadIdx.x * 16u, db_stride = blockDim.x * 16u;
  /* slot k holds pack i's floats 4q .. 4q + 3 for k = i VEC / 4 + q */
  auto db_slot = [&](int k) { return db_slots + k * db_stride; };
  if constexpr (DB_SMEM) {
#pragma unroll
    for (int k = 0; k < ITEMS * VEC / 4; k++)
      store_shared(db_slot(k), make_float4(0.f, 0.f, 0.f, 0.f));
  }
  /* a row's dW and dB contributions for pack i */
  auto take = [&](int i, int, const float(&c)[VEC], const float(&cb)[VEC]) {
#pragma unroll
    for (int j = 0; j < VEC; j++) {
      dw[i][j] += c[j];
      if (NORM == Norm::LN && !DB_SMEM)
        db[i][j] += cb[j];
    }
    if constexpr (DB_SMEM) {
#pragma unroll
      for (int q = 0; q < VEC / 4; q++) {
        const unsigned at = db_slot(i * VEC / 4 + q);
        float4 b = load_shared<float4>(at);
        b.x += cb[4 * q];
        b.y += cb[4 * q + 1];
        b.z += cb[4 * q + 2];
        b.w += cb[4 * q + 3];
        store_shared(at, b);
      }
    }
  };

  int64_t begin, end, step;
  if (a.chunk > 0) {
    begin = unit * a.chunk;
    end = min(a.M, begin + a.chunk);
    step = R;
  } else {
    begin = unit * R;
    end = a.M;
    step = units * R;
  }
  /* HELD: the next AHEAD rows' x and dy (set 0 the nearest), the row at hand's dres; zeros
   * past the row (PADDED) */
  P hx[AHEAD][ITEMS], hg[AHEAD][ITEMS], hd[ITEMS];
  float hr[AHEAD], hmu[AHEAD];
  if constexpr (HELD) {
#pragma unroll
    for (int i = 0; i < ITEMS; i++) {
      hd[i] = P{};
#pragma unroll
      for (int s = 0; s < AHEAD; s++)
        hx[s][i] = hg[s][i] = P{};
    }
#pragma unroll
    for (int s = 0; s < AHEAD; s++)
      hr[s] = hmu[s] = 0.f;
  }
  /* LEAD (rmsnorm.bwd.scalar_lead): the row's rstd (and mean) are copied once per group within
   * a warp, by its first lane (sub 0), into that lane's slot, and read from there by the
   * others after a __syncwarp; every lane copying the same 4 bytes costs the LSU about 30
   * wavefronts a warp-instruction, which the H200 feels and the H100 mostly does not
   * (docs/kernels.md, "One lane stages the row's scalars"). Without LEAD each lane copies
   * into and reads its own slot. The __syncwarp before the fetch keeps the first lane's next
   * copy into a stage behind the others' reads of it. */
  const bool lead = !HELD && (a.lead == 1 || (a.lead == 2 && CL == ROW_SHARE));
  const int sub = lead ? (int)threadIdx.x & ((G < 32 ? G : 32) - 1) : 0;
  auto fetch = [&](int64_t row, int stage) {
    if constexpr (HELD) { /* the sets move one nearer, the farthest takes `row` */
#pragma unroll
      for (int s = 0; s + 1 < AHEAD; s++) {
#pragma unroll
        for (int i = 0; i < ITEMS; i++) {
          hx[s][i] = hx[s + 1][i];
          hg[s][i] = hg[s + 1][i];
        }
        hr[s] = hr[s + 1];
        hmu[s] = hmu[s + 1];
      }
      if (row < end) {
        load_row<T, VEC, ITEMS>(a.x, row, a.sx, lane, G, nvec, hx[AHEAD - 1]);
        load_row<T, VEC, ITEMS>(a.dy, row, a.sdy, lane, G, nvec, hg[AHEAD - 1]);
        hr[AHEAD - 1] = a.rstd[row];
        if (NORM == Norm::LN)
          hmu[AHEAD - 1] = a.mean[row];
      }
      return;
    }
    if (row < end) {
#pragma unroll
      for (int i = 0; i < ITEMS; i++) {
        const int v = lane + i * G;
        if (v < nvec) {
          copy_async(st.at(stage, 0, i), pack_at<T, VEC>(a.x, row, a.sx, v));
          copy_async(st.at(stage, 1, i), pack_at<T, VEC>(a.dy, row, a.sdy, v));
          if (a.dres)
            copy_async(st.at(stage, 2, i), pack_at<T, VEC>(a.dres, row, a.sdres, v));
        }
      }
      if (sub == 0) {
        copy_async(st.scalar(stage), a.rstd + row);
        if (NORM == Norm::LN)
          copy_async(st.scalar(stage, 1), a.mean + row);
      }
    }
    copy_commit();
  };
  auto reduce = [&](Sum s) {
    s = group_reduce<MAP>(s, G, red, parity);
    if constexpr (CL == ROW_SHARE) {
      s = cluster_row_sum(s, ex, uses & 1, grp, lane, C, (uses >> 1) & 1);
      uses++;
    }
    return s;
  };
  /* ROW_SHARE waits for its peers before the prologue's copies rather than overlapping them
   * with the barrier: with cp.async between arrive and wait, racecheck took a peer for a writer
   * of this CTA's staging; waiting first costs nothing measurable (docs/kernels.md, "Sanitizers") */
  if constexpr (CL == ROW_SHARE)
    cluster_wait();
  for (int s = 0; s < S - 1; s++)
    fetch(begin + grp + s * step, s);
  int stage = 0;
  for (int64_t base = begin; base < end; base += step) {
    const int64_t row = base + grp;
    const bool active = row < end;
    P xv[ITEMS], gv[ITEMS];
    /* HELD takes r and mu from its set, the staged kernels from the staging below (giving
     * them hr[0] too moved their PTX's register order, and ptxas spilled at 64 registers) */
    float r = 0.f, mu = 0.f;
    if constexpr (HELD) {
      r = hr[0];
      mu = hmu[0];
#pragma unroll
      for (int i = 0; i < ITEMS; i++) {
        xv[i] = hx[0][i];
        gv[i] = hg[0][i];
      }
      fetch(row + AHEAD * step, 0);
      /* dres only for the row at hand (registers: the 8-element kernel spilled holding the
       * next row's), in flight during the row's reduction */
      if (a.dres && active)
        load_row<T, VEC, ITEMS>(a.dres, row, a.sdres, lane, G, nvec, hd);
    } else {
      if (lead)
        __syncwarp();
      fetch(row + (S - 1) * step, stage == 0 ? S - 1 : stage - 1);
      copy_wait(S - 1);
      if (lead)
        __syncwarp();
    }
    if constexpr (!HELD) {
      if (active) {
        r = load_shared<float>(st.scalar(stage) - 4u * sub);
        if (NORM == Norm::LN)
          mu = load_shared<float>(st.scalar(stage, 1) - 4u * sub);
#pragma unroll
        for (int i = 0; i < ITEMS; i++)
          if (lane + i * G < nvec) {
            xv[i] = load_shared<P>(st.at(stage, 0, i));
            gv[i] = load_shared<P>(st.at(stage, 1, i));
          }
      }
    }
    wt.refresh();
    process<T, VEC, ITEMS, NORM, HELD>(a, row, active, lane, G, nvec, xv, gv, r, mu, wt, reduce,
                                       [&](int i, int) {
                                         if constexpr (HELD)
                                           return hd[i];
                                         else
                                           return load_shared<P>(st.at(stage, 2, i));
                                       },
                                       take);
    stage = stage + 1 == S ? 0 : stage + 1;
  }
  copy_wait(0);
  if (!a.partials && !a.accum)
    return;
  pdl_trigger(); /* the reduce kernel may launch (rmsnorm.bwd.reduce_pdl) */
  /* the CTA's partial row (sharing: its cluster's, from the CTA's first column, recomputed
   * here rather than held in a register across the row loop) */
  float *out = a.partials ? a.partials + unit * a.pw + c0 : NULL;
  if constexpr (DB_SMEM) { /* cta_grads' rows (ITEMS x VEC floats a thread) end before the staging does */
#pragma unroll
    for (int i = 0; i < ITEMS; i++)
#pragma unroll
      for (int q = 0; q < VEC / 4; q++) {
        const float4 b = load_shared<float4>(db_slot(i * VEC / 4 + q));
        db[i][4 * q] = b.x;
        db[i][4 * q + 1] = b.y;
        db[i][4 * q + 2] = b.z;
        db[i][4 * q + 3] = b.w;
      }
  }
  cta_grads<VEC, ITEMS, NORM, CL>(a, dw, db, lane, G, nvec, ncols, out, a.accum, dyn);
  if (a.fused) {
    __threadfence();
    grid_barrier(a.sync);
    reduce_slice<T>(a, dyn);
  }
}

/* The row's RowG, the CTA's threads striding over its packs and reducing the row sums (every
 * thread of the CTA calls this): the first pass of the kernels for rows wider than registers
 * hold. Loads stream (evict-first) when STREAM, for a row read once; the looping kernel's
 * second pass reads the row again, from L2. */
template <typename T, int VEC, Norm NORM, bool STREAM>
__device__ __forceinline__ RowG row_sums(const BwdArgs &a, int64_t row, float r, float mu,
                                         RowSum<NORM> (*red)[32], int &parity)
{
  RowSum<NORM> s{};
  for (int v = threadIdx.x; v < a.N / VEC; v += blockDim.x) {
    const Pack<T, VEC> xv = load<T, VEC, STREAM>(a.x, row, a.sx, v);
    const Pack<T, VEC> gv = load<T, VEC, STREAM>(a.dy, row, a.sdy, v);
    float W[VEC];
    load_w<T, VEC>(a.w, a.wf32, a.offset, v, W);
#pragma unroll
    for (int j = 0; j < VEC; j++)
      add_terms<NORM>(s, to_f(gv.v[j]), W[j], to_f(xv.v[j]), mu);
  }
  return row_g<NORM>(r, mu, group_reduce(scaled<NORM>(s, r), blockDim.x, red, parity), 1.f / (float)a.N);
}

/* Adds pack v's VEC values c to the row `out`, or (out NULL) into the atomic accumulator
 * `acc` (NULL too: not wanted). */
template <int VEC>
__device__ __forceinline__ void add_cols(float *out, float *acc, int v, const float (&c)[VEC])
{
  if (out)
#pragma unroll
    for (int j = 0; j < VEC; j++)
      out[v * VEC + j] += c[j];
  else if (acc)
#pragma unroll
    for (int j = 0; j < VEC; j++)
      atomicAdd(acc + v * VEC + j, c[j]);
}

/* LOOP: rows wider than registers hold. Two passes over the row, the second re-reading x and dy
 * (mostly from L2). dW (and dB) accumulate in a row of pw floats that each column's thread
 * alone touches: in shared memory when it fits (acc_smem), else the CTA's partial row in
 * global memory; the shared row is emitted at the end. Columns are zeroed and emitted by
 * other threads than the ones that accumulate them, hence the barriers around the row loop. */
template <typename T, int VEC, Norm NORM>
__global__ void __launch_bounds__(LOOP_BLOCK) bwd_loop(BwdArgs a)
{
  pdl_begin(a.pdl);
  const int nvec = a.N / VEC;
  __shared__ RowSum<NORM> red[2][32];
  extern __shared__ __align__(16) float dyn[];
  int parity = 0;
  float *out = a.acc_smem ? dyn : partial_row(a, blockIdx.x);
  float *out_b = out ? out + a.db_at : NULL, *acc_b = a.accum ? a.accum + a.db_at : NULL;
  if (out) {
    for (int col = threadIdx.x; col < a.pw; col += blockDim.x)
      out[col] = 0.f;
    __syncthreads(); /* the zeroing threads are not the accumulating ones */
  }
  int64_t begin = a.chunk > 0 ? (int64_t)blockIdx.x * a.chunk : blockIdx.x;
  int64_t end = a.chunk > 0 ? min(a.M, begin + a.chunk) : a.M;
  int64_t step = a.chunk > 0 ? 1 : gridDim.x;
  for (int64_t row = begin; row < end; row += step) {
    const float r = a.rstd[row], mu = NORM == Norm::LN ? a.mean[row] : 0.f;
    const RowG rg = row_sums<T, VEC, NORM, false>(a, row, r, mu, red, parity);
    for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
      Pack<T, VEC> xv = load<T, VEC>(a.x, row, a.sx, v), gv = load<T, VEC>(a.dy, row, a.sdy, v), o;
      float W[VEC], d[VEC] = {};
      load_w<T, VEC>(a.w, a.wf32, a.offset, v, W);
      if (NORM == Norm::RMS && a.dres)
        unpack(load<T, VEC>(a.dres, row, a.sdres, v), d);
      float contrib[VEC], contrib_b[VEC];
#pragma unroll
      for (int j = 0; j < VEC; j++)
        o.v[j] = from_f<T>(grad<T, VEC, NORM>(a, to_f(gv.v[j]), to_f(xv.v[j]), W[j], rg, d[j], contrib[j],
                                         contrib_b[j]));
      store<T, VEC>(a.dx, row, a.sdx, v, o);
      if (NORM == Norm::RMS || a.dw)
        add_cols<VEC>(out, a.accum, v, contrib);
      if (NORM == Norm::LN && a.db)
        add_cols<VEC>(out_b, acc_b, v, contrib_b);
    }
  }
  if (a.acc_smem) {
    __syncthreads();
    for (int col = threadIdx.x; col < a.pw; col += blockDim.x)
      emit(partial_row(a, blockIdx.x), a.accum, col, dyn[col]);
  }
  if (a.fused) {
    __threadfence();
    grid_barrier(a.sync);
    reduce_slice<T>(a, dyn);
  }
}

/* SPLIT: rows the looping kernel would take, where its dW row outgrows shared memory (N >
 * 58112 on sm_90: it then goes to global memory) or, for 16-bit rows, from
 * rmsnorm.bwd.split_min_n: the row reduction and the columns run as two kernels.
 * bwd_rowc reduces each row's sums (RowG's cx, and LayerNorm's cg) into rowc (CTAs stride
 * over rows); in bwd_cols a thread owns one pack of columns over a contiguous chunk of rows
 * (blockIdx.y), so its weight and dW (dB) stay in registers for any N. The price: x and dy
 * are read twice, five streams where the minimum is three. No barrier after the column
 * split, so threads past the row return at once. */
template <typename T, int VEC, Norm NORM>
__global__ void __launch_bounds__(LOOP_BLOCK) bwd_rowc(BwdArgs a)
{
  pdl_begin(a.pdl);
  __shared__ RowSum<NORM> red[2][32];
  int parity = 0;
  for (int64_t row = blockIdx.x; row < a.M; row += gridDim.x) {
    const float mu = NORM == Norm::LN ? a.mean[row] : 0.f;
    const RowG rg = row_sums<T, VEC, NORM, true>(a, row, a.rstd[row], mu, red, parity);
    if (threadIdx.x == 0) {
      if constexpr (NORM == Norm::LN)
        reinterpret_cast<float2 *>(a.rowc)[row] = make_float2(rg.cx, rg.cg);
      else
        a.rowc[row] = rg.cx;
    }
  }
}

template <typename T, int VEC, Norm NORM>
__global__ void __launch_bounds__(SPLIT_BLOCK) bwd_cols(BwdArgs a)
{
  pdl_begin(a.pdl);
  const int v = blockIdx.x * blockDim.x + threadIdx.x;
  if (v >= a.N / VEC)
    return;
  const int64_t begin = (int64_t)blockIdx.y * a.chunk, end = min(a.M, begin + a.chunk);
  float W[VEC], dw[VEC], db[VEC];
  load_w<T, VEC>(a.w, a.wf32, a.offset, v, W);
#pragma unroll
  for (int j = 0; j < VEC; j++)
    dw[j] = db[j] = 0.f;
#pragma unroll 4
  for (int64_t row = begin; row < end; row++) {
    RowG rg;
    if constexpr (NORM == Norm::LN) {
      const float2 c = reinterpret_cast<const float2 *>(a.rowc)[row];
      rg = RowG{a.rstd[row], a.mean[row], c.x, c.y};
    } else {
      rg = RowG{a.rstd[row], 0.f, a.rowc[row], 0.f};
    }
    const Pack<T, VEC> xv = load<T, VEC>(a.x, row, a.sx, v), gv = load<T, VEC>(a.dy, row, a.sdy, v);
    Pack<T, VEC> o;
    float d[VEC] = {};
    if (NORM == Norm::RMS && a.dres)
      unpack(load<T, VEC>(a.dres, row, a.sdres, v), d);
#pragma unroll
    for (int j = 0; j < VEC; j++) {
      float contrib, contrib_b;
      o.v[j] = from_f<T>(grad<T, VEC, NORM>(a, to_f(gv.v[j]), to_f(xv.v[j]), W[j], rg, d[j], contrib,
                                       contrib_b));
      dw[j] += contrib;
      db[j] += contrib_b;
    }
    store<T, VEC>(a.dx, row, a.sdx, v, o);
  }
  float *out = a.partials ? a.partials + (int64_t)blockIdx.y * a.pw : NULL;
  if (NORM == Norm::RMS || a.dw)
    put_contrib<VEC>(out, a.accum, v, dw);
  if (NORM == Norm::LN && a.db)
    put_contrib<VEC>(out ? out + a.db_at : NULL, a.accum ? a.accum + a.db_at : NULL, v, db);
}

} // namespace

template <typename T, int VEC, Norm NORM> const void *bwd_kernel(const BwdKernel &key)
{
  if (key.rows == Rows::LOOP)
    return (const void *)bwd_loop<T, VEC, NORM>;
  if (key.rows == Rows::SPLIT)
    return key.row_pass ? (const void *)bwd_rowc<T, VEC, NORM> : (const void *)bwd_cols<T, VEC, NORM>;
  const void *kp = NULL;
  with_items(key.items, [&](auto I) {
    constexpr int IT = decltype(I)::value;
    if (key.rows == Rows::CTA)
      kp = (const void *)bwd_one<T, VEC, IT, NORM, Rows::CTA>;
    else if (key.rows == Rows::WARP)
      kp = (const void *)bwd_one<T, VEC, IT, NORM, Rows::WARP>;
    else if constexpr (stride_limits(VEC * sizeof(T))(IT) > 0) {
      /* no cluster instances at one item: at 1024 threads (64 registers) they would spill;
       * shared rows in 16-byte packs or held single 16-bit elements (fp32's scalar instance
       * spilled) */
      auto pick = [&](auto FW) -> const void * {
        [[maybe_unused]] constexpr bool F = decltype(FW)::value; /* unused by fp32's scalar instances */
        if constexpr (IT == 1)
          return key.cluster != SOLO ? NULL : (const void *)bwd_stride<T, VEC, IT, NORM, SOLO, F>;
        else if constexpr (VEC == 1 && sizeof(T) == 4)
          return key.cluster == DW_SUM ? (const void *)bwd_stride<T, VEC, IT, NORM, DW_SUM>
                 : key.cluster == SOLO ? (const void *)bwd_stride<T, VEC, IT, NORM, SOLO>
                                       : NULL;
        else
          return key.cluster == DW_SUM ? (const void *)bwd_stride<T, VEC, IT, NORM, DW_SUM, F>
                 : key.cluster == ROW_SHARE
                     ? (const void *)bwd_stride<T, VEC, IT, NORM, ROW_SHARE, F>
                     : (const void *)bwd_stride<T, VEC, IT, NORM, SOLO, F>;
      };
      /* weights held as fp32: 16-byte packs of 16-bit x, 1 or 2 a thread */
      if constexpr (sizeof(T) == 2 && VEC > 1 && IT * VEC <= FLOAT_WEIGHTS)
        kp = key.float_w ? pick(std::true_type{}) : pick(std::false_type{});
      else
        kp = pick(std::false_type{});
    }
    return 0;
  });
  return kp;
}

template const void *bwd_kernel<NLK_INSTANCE_T, NLK_INSTANCE_VEC, NLK_INSTANCE_NORM>(const BwdKernel &);

#else

/* ---- The strategies: plans and launches (host) ---- */

namespace {

enum class Strategy { ROW, BLOCKROW, PARTIALS, PERSISTENT };

/* Everything a backward launch and its workspace query must agree on. */
struct BwdPlan {
  Rows rows;
  RowCfg c;
  const void *kernel;
  size_t smem;
  int64_t chunk;         /* > 0: CTA b (SPLIT: CTA row b) takes rows [b*chunk, (b+1)*chunk) */
  int stages;            /* STRIDE: rows in flight per thread */
  bool acc_smem;         /* LOOP: dW (dB) accumulated in shared memory */
  const void *pre;       /* SPLIT: the row kernel, on pre_grid CTAs, before the column kernel's
                          * c.grid x col_blocks CTAs */
  int64_t pre_grid, col_blocks;
  bool fused;            /* dW reduced after a grid barrier in the main kernel */
  int cluster;           /* CTAs per cluster (1: none) */
  bool share;            /* the cluster's CTAs share each row (ROW_SHARE), else they sum dW */
  int64_t partial_rows;  /* rows of the fp32 partials/temp buffer (0: none) */
  bool accum_in_ws;      /* atomic reduction into an fp32 accumulator in the workspace */
  /* The workspace in floats: the partials (or temp), then the accumulator (each row
   * grad_cols's pw floats), then (SPLIT) the M rows' sums, which start at float rowc_at. */
  size_t rowc_at, ws_floats;
};

/* The gradient reduction's buffers (`rows` partial rows unless atomic; an fp32 accumulator
 * for an atomic reduction, unless into an fp32 dW alone) and the workspace's layout. */
void layout_ws(const nlk_norm *k, BwdPlan *p, int64_t rows)
{
  const GradCols g = grad_cols(k);
  const bool any = g.pw > 0, atomic = k->reduce == NLK_REDUCE_ATOMIC;
  const int sums = norm_of(k) == Norm::LN ? 2 : 1;
  p->partial_rows = any && !atomic ? rows : 0;
  p->accum_in_ws = any && atomic && (k->wdt != NLK_F32 || g.db);
  p->rowc_at = (size_t)(p->partial_rows + (p->accum_in_ws ? 1 : 0)) * (size_t)g.pw;
  p->rowc_at += p->rowc_at % sums; /* LayerNorm's float2 row sums start 8-byte aligned */
  p->ws_floats = p->rowc_at + (p->rows == Rows::SPLIT ? (size_t)k->M * sums : 0);
}

template <typename T>
const void *kernel_of(const nlk_norm *k, const RowCfg &c, BwdKernel key)
{
  key.items = c.items;
  key.float_w = k->bwd.float_weights == 1 || (k->bwd.float_weights == 2 && k->wdt == NLK_F32);
  return with_norm(k, [&](auto N) {
    return with_vec<T>(c.vec, [&](auto V) { return bwd_kernel<T, decltype(V)::value, decltype(N)::value>(key); });
  });
}

/* The most single 16-bit elements a held row of the pipelined kernel takes (MAX_ITEMS a
 * thread at BWD_HELD_LIMITS' threads). */
constexpr int64_t HELD_ROW_MAX = (int64_t)MAX_ITEMS * BWD_HELD_LIMITS(MAX_ITEMS);

/* The CTAs that would share each row: the fewest, a power of two, that bring a CTA's slice
 * to the setting's columns or fewer (rows of single 16-bit elements: to HELD_ROW_MAX, in
 * slices of ceil(N / C) columns, the last one shorter; the setting 0 turns both off), at most
 * rmsnorm.bwd.share_max; 1 (no sharing) for narrower rows, for the fused reduction (its grid
 * barrier sums one partial row per CTA) and where 16-byte packs do not split evenly. Whether
 * the GPU runs such clusters is the plan's to find. */
int row_share(const nlk_norm *k, Strategy s)
{
  const int64_t setting = k->dt == NLK_F32 ? k->bwd.fp32_share_n : k->bwd.share_n;
  const bool held = single_16bit_rows(k);
  const int64_t share_n = held && setting > 0 ? HELD_ROW_MAX : setting;
  if ((s != Strategy::PARTIALS && s != Strategy::PERSISTENT) || share_n <= 0 || k->N <= share_n)
    return 1;
  if (s == Strategy::PERSISTENT && k->dw && k->reduce != NLK_REDUCE_ATOMIC && k->bwd.fused_reduce)
    return 1;
  const int most = k->bwd.share_max < 2 ? 2 : k->bwd.share_max > ROW_SHARE_MAX ? ROW_SHARE_MAX : k->bwd.share_max;
  int c = pow2ceil((k->N + share_n - 1) / share_n);
  c = c > most ? pow2ceil(most) : c;
  return held || k->N % c == 0 ? c : 1;
}

/* The row mappings a strategy may run as, best first. partials and persistent: rows shared
 * by a cluster (from row_share's count, doubled up to ROW_SHARE_MAX while a CTA's slice does
 * not fit its registers), a row per group, then for rows too wide for registers SPLIT (where
 * it applies) or LOOP. */
Candidates candidates(const nlk_norm *k, Strategy s)
{
  Candidates c;
  switch (s) {
  case Strategy::ROW: return c.add(Rows::CTA).add(Rows::LOOP);
  case Strategy::BLOCKROW: return c.add(Rows::WARP);
  default: break;
  }
  int share = row_share(k, s);
  if (share > 1) {
    c.add(Rows::STRIDE, share);
    while (share < ROW_SHARE_MAX && (single_16bit_rows(k) || k->N % (2 * share) == 0))
      c.add(Rows::STRIDE, share *= 2);
  }
  return c.add(Rows::STRIDE).add(Rows::SPLIT).add(Rows::LOOP);
}

/* SPLIT, where the looping kernel's dW row would spill out of shared memory, and for 16-bit
 * rows from split_min_n (fp32 rows run faster in the looping kernel until then): the row
 * kernel on as many CTAs as fit (at most one per row), the column kernel on about as many
 * as fit the GPU once, column blocks x row chunks. */
template <typename T>
bool fit_split(const nlk_norm *k, BwdPlan *p)
{
  const bool dw_spills = grad_cols(k).pw * (int64_t)sizeof(float) > smem_budget(k);
  if (!dw_spills && !(sizeof(T) == 2 && k->bwd.split_min_n > 0 && k->N >= k->bwd.split_min_n))
    return false;
  p->c = loop_cfg(k, k->N, sizeof(T));
  p->pre = kernel_of<T>(k, p->c, BwdKernel{Rows::SPLIT, 0, SOLO, true});
  p->kernel = kernel_of<T>(k, p->c, BwdKernel{Rows::SPLIT, 0, SOLO, false});
  const int64_t pre = (int64_t)k->sm_count * occupancy(k, p->pre, LOOP_BLOCK, 0);
  p->pre_grid = pre < k->M ? pre : k->M;
  p->col_blocks = (k->N / p->c.vec + SPLIT_BLOCK - 1) / SPLIT_BLOCK;
  const int64_t fit = (int64_t)k->sm_count * occupancy(k, p->kernel, SPLIT_BLOCK, 0);
  int64_t chunks = (fit + p->col_blocks - 1) / p->col_blocks;
  chunks = chunks > k->M ? k->M : chunks < 1 ? 1 : chunks;
  p->chunk = (k->M + chunks - 1) / chunks;
  p->c.grid = (k->M + p->chunk - 1) / p->chunk;
  p->c.block = SPLIT_BLOCK;
  layout_ws(k, p, p->c.grid);
  return true;
}

/* The bytes a thread of the pipelined kernel keeps per pack for dB in shared memory at 4 packs
 * a thread (bwd_stride's DB_SMEM): LayerNorm's 16-byte packs, a float per element; else 0. */
__host__ inline int db_smem_bytes(const nlk_norm *k, int pack, int elt)
{
  return norm_of(k) == Norm::LN && pack == 16 ? pack / elt * 4 : 0;
}

/* The candidate's layout, kernel, clusters and grid; false when it does not fit. Grids: row
 * and blockrow a CTA per row group; partials contiguous row chunks over the SMs; persistent
 * as many CTAs as the SMs hold at once (or the settings' count per SM: the looping kernel
 * re-reads each row in its second pass, from L2 while the rows in flight fit it, and writes
 * a partial row per CTA, so fewer CTAs than fit can be faster); clusters whole. */
template <typename T>
bool fit(const nlk_norm *k, Strategy s, Candidate cand, BwdPlan *p)
{
  const int elt = sizeof(T), share = cand.share;
  const int64_t pw = grad_cols(k).pw;
  const bool dw = pw > 0, atomic = k->reduce == NLK_REDUCE_ATOMIC;
  const int64_t ncols = (k->N + share - 1) / share; /* the columns a CTA holds (at most) */
  /* the pipelined kernel stages x, dy (dres) and rstd (and mean) per row, but holds single
   * 16-bit elements in registers (HELD), rmsnorm.bwd.held_items a thread */
  const int pack = pick_vec(k, ncols, elt) * elt;
  const bool held = cand.rows == Rows::STRIDE && pack < 4;
  const int streams = held ? 0 : k->dres ? 3 : 2, scalars = held ? 0 : norm_of(k) == Norm::LN ? 2 : 1;
  /* whole warps: 16-byte packs (bwd_stride's GroupMap::ROUNDED), and persistent only, whose
   * grid takes as many CTAs as fit (partials' one CTA per SM would be one row per SM) */
  const Want want{held ? k->bwd.held_items : k->bwd.items, k->bwd.block, k->bwd.blockrow_block,
                  k->bwd.whole_warps != 0 && pack == 16 && s == Strategy::PERSISTENT};
  *p = BwdPlan{};
  p->rows = cand.rows;
  p->cluster = 1;
  switch (cand.rows) {
  case Rows::STRIDE:
    /* LayerNorm at 4 packs keeps dB's sums in shared memory (bwd_stride's DB_SMEM), also where
     * row_cfg takes 4 for a row that 2 do not fit */
    p->stages = fit_stages(k, ncols, elt, stride_limits(pack), want, k->bwd.stages, streams,
                           scalars, &p->c, db_smem_bytes(k, pack, elt));
    /* a shared row: the slice in 16-byte packs as the whole row, or held single elements;
     * each of the first `share` lanes of a group sends the row's sum to one peer;
     * ROW_SHARE_GROUPS rows a CTA */
    if (!p->stages ||
        (share > 1 && (!(held ? single_16bit_rows(k) : p->c.vec > 1 && row_pack_elems(k) > 1) ||
                       p->c.group < share || rows_per_cta(p->c) > ROW_SHARE_GROUPS)))
      return false;
    break;
  case Rows::SPLIT:
    return fit_split<T>(k, p);
  case Rows::LOOP:
    p->c = loop_cfg(k, k->N, elt);
    break;
  default: /* CTA, WARP */
    p->c = row_cfg(k, k->N, elt, cand.rows, bwd_limits(cand.rows), want, SmemCost{0, 0, 0});
    if (!p->c.items)
      return false;
  }
  p->kernel = kernel_of<T>(k, p->c, BwdKernel{cand.rows, 0, share > 1 ? ROW_SHARE : SOLO, false});
  if (!p->kernel)
    return false;
  /* shared memory: STRIDE's staging, then (STRIDE, WARP) each group's row of dW (then of dB,
   * in the same place); LOOP: the CTA's dW (and dB) row, where it fits */
  const int64_t per_cta = rows_per_cta(p->c);
  if (p->c.items != 0 && cand.rows != Rows::CTA) {
    const size_t staging =
        cand.rows == Rows::STRIDE
            ? (size_t)staging_cost(p->stages, streams, pack, scalars, 0, db_smem_bytes(k, pack, elt))
                  .bytes(p->c.block, p->c.items)
            : 0;
    const size_t rows = (size_t)(per_cta * ncols) * sizeof(float);
    p->smem = staging > rows ? staging : rows;
  } else if (p->c.items == 0 && dw && pw * (int64_t)sizeof(float) <= smem_budget(k)) {
    p->acc_smem = true;
    p->smem = (size_t)pw * sizeof(float);
  }
  p->fused = s == Strategy::PERSISTENT && dw && !atomic && k->bwd.fused_reduce;
  if (p->fused && p->smem < (size_t)p->c.block * sizeof(float))
    p->smem = (size_t)p->c.block * sizeof(float);
  if (allow_smem(k, p->kernel, p->smem) != cudaSuccess)
    return false;
  /* clusters (none before sm_90): `share` CTAs sharing each row, or rmsnorm.bwd.cluster CTAs
   * summing dW into one partial row (only into partials); no more CTAs than the GPU holds in
   * clusters at once */
  int64_t cluster_cap = 0;
  if (share > 1) {
    cluster_cap = (int64_t)max_clusters(k, p->kernel, share, p->c.block, p->smem) * share;
    if (cluster_cap < share)
      return false;
    p->cluster = share;
    p->share = true;
  } else if (cand.rows == Rows::STRIDE && dw && !atomic && !p->fused && k->bwd.cluster > 1 &&
             k->N % 4 == 0) {
    const void *kc = kernel_of<T>(k, p->c, BwdKernel{Rows::STRIDE, 0, DW_SUM, false});
    if (kc && allow_smem(k, kc, p->smem) == cudaSuccess)
      cluster_cap = (int64_t)max_clusters(k, kc, k->bwd.cluster, p->c.block, p->smem) * k->bwd.cluster;
    if (cluster_cap >= k->bwd.cluster) {
      p->cluster = k->bwd.cluster;
      p->kernel = kc;
    }
  }
  /* row groups: each a CTA's rows, or a cluster's when it shares them */
  const int64_t groups = ctas_of(k->M, p->c), per_group = p->share ? share : 1;
  int64_t grid = groups * per_group;
  /* grid_sms trims the grid (an H100's unshared kernels run each row faster on 128 SMs than
   * on 132); rows shared by a cluster measured slower with fewer clusters, and keep every SM */
  const int64_t sms = !p->share && k->bwd.grid_sms > 0 && k->bwd.grid_sms < k->sm_count ? k->bwd.grid_sms
                                                                                         : k->sm_count;
  if (s == Strategy::PARTIALS) {
    grid = sms < grid ? sms : grid;
    if (p->cluster > 1 && grid > cluster_cap)
      grid = cluster_cap;
    const int64_t units = grid / per_group > 0 ? grid / per_group : 1;
    p->chunk = (k->M + units - 1) / units;
    grid = (k->M + p->chunk - 1) / p->chunk * per_group;
  } else if (s == Strategy::PERSISTENT) {
    const int occ = occupancy(k, p->kernel, p->c.block, p->smem);
    const int want_sm = p->c.items == 0 ? k->bwd.loop_ctas_per_sm : k->bwd.ctas_per_sm;
    int per_sm = want_sm > 0 ? want_sm : occ;
    if (p->fused && per_sm > occ)
      per_sm = occ; /* a cooperative launch needs every CTA resident */
    const int64_t fit = sms * per_sm;
    if (fit < grid)
      grid = fit;
    if (p->cluster > 1 && grid > cluster_cap)
      grid = cluster_cap;
  }
  /* whole clusters: sharing ones round down (each cluster takes a row group), summing ones up
   * (a cluster's CTAs past the last row take no rows and add zeros) */
  grid = p->share ? (grid / share > 0 ? grid / share : 1) * share
                  : (grid + p->cluster - 1) / p->cluster * p->cluster;
  p->c.grid = grid;
  layout_ws(k, p, grid / p->cluster);
  return true;
}

template <typename T>
bool plan(const nlk_norm *k, Strategy s, BwdPlan *p)
{
  return first_fit(candidates(k, s), [&](Candidate c) { return fit<T>(k, s, c, p); });
}

template <typename T>
int run(nlk_norm *k, Strategy s)
{
  BwdPlan p;
  if (!plan<T>(k, s, &p))
    return NLK_ERR_UNSUPPORTED;
  cudaStream_t stream = (cudaStream_t)k->stream;
  const GradCols g = grad_cols(k);
  const bool dw = g.pw > 0, atomic = k->reduce == NLK_REDUCE_ATOMIC, ln = norm_of(k) == Norm::LN;
  float *ws = (float *)k->ws;
  BwdArgs a{.x = k->x, .dy = k->dy, .dres = k->dres, .w = k->w, .dx = k->dx, .dw = k->dw,
            .db = g.db ? k->db : NULL, .rstd = k->rstd, .mean = ln ? k->mean : NULL,
            .partials = p.partial_rows ? ws : NULL, .accum = NULL,
            .rowc = p.rows == Rows::SPLIT ? ws + p.rowc_at : NULL, .sync = (unsigned int *)k->sync,
            .sx = k->sx, .sdy = k->sdy, .sdres = k->sdres, .sdx = k->sdx, .M = k->M,
            .chunk = p.chunk, .N = (int)k->N, .group = p.c.group, .wf32 = k->wdt == NLK_F32,
            .cast = k->cast, .fused = p.fused, .dw_f32 = k->wdt == NLK_F32,
            .db_f32 = k->bdt == NLK_F32, .stages = p.stages, .pdl = k->pdl && !p.fused,
            .lead = k->bwd.scalar_lead,
            .pw = (int)g.pw, .db_at = (int)g.db_at, .acc_smem = p.acc_smem, .cluster = p.cluster,
            .offset = k->offset};
  int rc;
  if (dw && atomic) {
    a.accum = p.accum_in_ws ? ws : (float *)k->dw;
    rc = cuda_result(k, cudaMemsetAsync(a.accum, 0, (size_t)g.pw * sizeof(float), stream));
    if (rc != NLK_OK)
      return rc;
  }
  k->grid = (int32_t)(p.rows == Rows::SPLIT ? p.c.grid * p.col_blocks : p.c.grid);
  k->block = p.c.block;
  k->cluster_dim = p.cluster;
  k->kernel = p.kernel;
  k->resident = p.rows == Rows::SPLIT ? occupancy(k, p.kernel, SPLIT_BLOCK, 0)
                                      : occupancy(k, p.kernel, p.c.block, p.smem);
  void *args[] = {&a};
  if (p.fused)
    rc = cuda_result(k, cudaLaunchCooperativeKernel(p.kernel, dim3((unsigned)p.c.grid),
                                                    dim3(p.c.block), args, p.smem, stream));
  else if (p.rows == Rows::SPLIT) {
    rc = launch_norm(k, p.pre, p.pre_grid, LOOP_BLOCK, 0, args);
    if (rc == NLK_OK)
      rc = launch_norm(k, p.kernel, p.col_blocks, SPLIT_BLOCK, 0, args, (unsigned)p.c.grid);
  } else
    rc = launch_norm(k, p.kernel, p.c.grid, p.c.block, p.smem, args, 1, p.cluster);
  if (rc != NLK_OK || !dw)
    return rc;
  /* row's M x N temp keeps its lines in L2 (the rows beyond L2 have gone back to DRAM before
   * the reduce anyway, and dropping the rest measured slower); every other strategy's
   * partials are dropped once read */
  if (p.partial_rows && !p.fused) {
    /* launched with PDL, the reduce kernel is queued behind the main one (sm_90), which lets
     * it launch before its grid has finished */
    return reduce_partials(k, ws, p.partial_rows, s != Strategy::ROW, k->bwd.reduce_pdl > 0);
  }
  if (p.accum_in_ws)
    return convert_accum(k, ws);
  return NLK_OK;
}

int launch(nlk_norm *k, Strategy s)
{
  return with_dtype(k->dt, [&](auto t) { return run<decltype(t)>(k, s); });
}

size_t workspace(const nlk_norm *k, Strategy s)
{
  size_t bytes = 0;
  with_dtype(k->dt, [&](auto t) {
    BwdPlan p;
    if (plan<decltype(t)>(k, s, &p))
      bytes = p.ws_floats * sizeof(float);
    return 0;
  });
  return bytes;
}

int launch_row(nlk_norm *k) { return launch(k, Strategy::ROW); }
int launch_blockrow(nlk_norm *k) { return launch(k, Strategy::BLOCKROW); }
int launch_partials(nlk_norm *k) { return launch(k, Strategy::PARTIALS); }
int launch_persistent(nlk_norm *k) { return launch(k, Strategy::PERSISTENT); }
size_t workspace_row(const nlk_norm *k) { return workspace(k, Strategy::ROW); }
size_t workspace_blockrow(const nlk_norm *k) { return workspace(k, Strategy::BLOCKROW); }
size_t workspace_partials(const nlk_norm *k) { return workspace(k, Strategy::PARTIALS); }
size_t workspace_persistent(const nlk_norm *k) { return workspace(k, Strategy::PERSISTENT); }

} // namespace

#endif

} // namespace nlk

#ifndef NLK_INSTANCE

extern "C" const nlk_strategy nlk_cuda_bwd[] = {
  {"row", NLK_BWD, nlk::launch_row, nlk::workspace_row, nlk::max_n_supports, NULL},
  {"blockrow", NLK_BWD, nlk::launch_blockrow, nlk::workspace_blockrow, nlk::warp_row_supports,
   NULL},
  {"partials", NLK_BWD, nlk::launch_partials, nlk::workspace_partials, nlk::max_n_supports, NULL},
  {"persistent", NLK_BWD, nlk::launch_persistent, nlk::workspace_persistent, nlk::max_n_supports,
   NULL},
  {NULL, 0, NULL, NULL, NULL, NULL},
};

#endif
