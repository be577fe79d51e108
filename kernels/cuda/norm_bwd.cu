/*
 * norm_bwd.cu: the backward family. dx from dy, x, w and the saved rstd, and dW summed over
 * rows; add_rmsnorm's backward (x is the forward's residual_out h) adds the gradient arriving
 * at residual_out into dx. The ops differ only where their math does (grad(), dres).
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
 * rmsnorm.bwd.stages - 1 rows are in flight through cp.async; at the end clusters of
 * rmsnorm.bwd.cluster CTAs (sm_90) may sum their dW through distributed shared memory and
 * write one partial row. On sm_90, rows wider than rmsnorm.bwd.share_n (fp32_share_n) columns
 * are shared by the CTAs of a cluster, which exchange each row's sum through distributed
 * shared memory. Rows wider than registers hold otherwise run LOOP (the row read twice) or,
 * for 16-bit rows from rmsnorm.bwd.split_min_n and any row whose dW outgrows shared memory,
 * SPLIT: a row kernel and a column kernel. Every reduction sums in a fixed order, so results
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
  void *dx, *dw;
  const float *rstd;
  float *partials;  /* [grid][N] (row: [M][N]); NULL when dW is not reduced through them */
  float *accum;     /* atomic reduction: [N] fp32, zeroed before the launch */
  float *rowc;      /* split: [M] per-row sum(dy * W * xhat) / N */
  unsigned int *sync;
  int64_t sx, sdy, sdres, sdx;
  int64_t M, chunk; /* chunk > 0: CTA b (split: CTA row b) owns rows [b*chunk, (b+1)*chunk) */
  int N, group, wf32, cast, fused, dw_f32, stages, pdl;
  int acc_smem;     /* looping kernel: dW accumulates in shared memory (N floats) */
  int cluster;      /* pipelined kernel: CTAs per cluster, one partial row each cluster */
  float offset;
};

/* The largest block per row mapping (CTA: row, WARP: blockrow, STRIDE: the pipelined kernel)
 * and items, from ptxas's register counts for bf16 (the hungriest dtype) so that nothing
 * spills; 0: no kernel with that many packs. STRIDE holds the weight and dW (2 x VEC floats
 * per item) on top of the packs. */
constexpr BlockLimits bwd_limits(Rows rows)
{
  return rows == Rows::CTA    ? BlockLimits{{1024, 1024, 512, 256}, {1, 1, 1, 1}, 0}
         : rows == Rows::WARP ? BlockLimits{{1024, 512, 512, 256}, {1, 1, 1, 1}, 0}
                              : BlockLimits{{1024, 512, 512, 0}, {1, 1, 1, 1}, 0};
}

/* ROW_SHARE's exchange: at most this many rows per CTA, and CTAs per cluster. */
enum { ROW_SHARE_GROUPS = 8, ROW_SHARE_MAX = 8 };

/* SPLIT's column kernel: threads per CTA, one column pack each. */
enum { SPLIT_BLOCK = 256 };

/* What the pipelined kernel's thread-block clusters (sm_90) do: nothing (SOLO); sum their dW
 * and write one partial row (DW_SUM, cluster_sum); or share each row (ROW_SHARE), CTA q of
 * C holding columns [q N/C, (q+1) N/C) and the row's sum exchanged (cluster_row_sum). */
enum ClusterUse { SOLO, DW_SUM, ROW_SHARE };

/* Everything that selects a backward kernel besides the dtype and the pack width (SPLIT:
 * the row-reduction kernel when row_pass, else the column kernel). */
struct BwdKernel {
  Rows rows;
  int items;
  ClusterUse cluster;
  bool row_pass;
};

/* The kernel for a key, from the translation unit that instantiates T and VEC; NULL when no
 * kernel has that layout. */
template <typename T, int VEC> const void *bwd_kernel(const BwdKernel &key);

/* ---- The kernels, compiled once per dtype and pack width (NLK_INSTANCE) ---- */

#ifdef NLK_INSTANCE

namespace {

template <typename T>
__device__ __forceinline__ void store_dw(void *dw, int dw_f32, int col, float v)
{
  if (dw_f32)
    static_cast<float *>(dw)[col] = v;
  else
    static_cast<T *>(dw)[col] = from_f<T>(v);
}

/* After a grid barrier: CTA b sums the partials of its slice of columns over all CTAs, in
 * CTA order. Lanes take 32 adjacent columns, warps split the partial rows. */
template <typename T>
__device__ void reduce_slice(const BwdArgs &a, float *red)
{
  const int nb = gridDim.x, cs = (a.N + nb - 1) / nb;
  const int c0 = blockIdx.x * cs, c1 = min(a.N, c0 + cs);
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5, ny = blockDim.x >> 5;
  for (int ct = c0; ct < c1; ct += 32) {
    const int col = ct + tx;
    float acc = 0.f;
    if (col < c1)
      for (int p = ty; p < nb; p += ny)
        acc += __ldcg(a.partials + (int64_t)p * a.N + col);
    red[ty * 32 + tx] = acc;
    __syncthreads();
    if (ty == 0 && col < c1) {
      float sum = 0.f;
      for (int y = 0; y < ny; y++)
        sum += red[y * 32 + tx];
      store_dw<T>(a.dw, a.dw_f32, col, sum);
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

template <typename T, int VEC, int ITEMS>
__device__ __forceinline__ void load_in(const BwdArgs &a, int64_t row, int lane, int G, int nvec,
                                        Pack<T, VEC> (&xv)[ITEMS], Pack<T, VEC> (&gv)[ITEMS], float &r)
{
  load_row<T, VEC, ITEMS>(a.x, row, a.sx, lane, G, nvec, xv);
  load_row<T, VEC, ITEMS>(a.dy, row, a.sdy, lane, G, nvec, gv);
  r = a.rstd[row];
}

/* One element's gradients: returns dx = r * (dy * W - xhat * c), plus the residual gradient d
 * when add_rmsnorm has one, and sets dW's contribution dy * xhat, xhat rounded to T as the
 * forward used it (except in gemma mode). */
template <typename T>
__device__ __forceinline__ float grad(const BwdArgs &a, float dy, float x, float W, float r, float c,
                                      float d, float &contrib)
{
  const float xh = x * r;
  float dx = r * (dy * W - xh * c);
  if (a.dres)
    dx += d;
  contrib = dy * (a.cast == NLK_CAST_GEMMA ? xh : round_to<T>(xh));
  return dx;
}

/* One row: s = sum(dy * W * xhat) reduced over the group by reduce(s) (every thread of the
 * CTA calls this the same number of times), dx = r * (dy * W - xhat * s / N) (+ the dres
 * pack that dres_of(item, pack) gives), and the row's dW contribution dy * xhat (xhat
 * rounded to T as the forward used it, except in gemma mode) handed to take(item, pack,
 * contribution). */
template <typename T, int VEC, int ITEMS, typename Reduce, typename Dres, typename Take>
__device__ __forceinline__ void process(const BwdArgs &a, int64_t row, bool active, int lane,
                                        int G, int nvec, Pack<T, VEC> (&xv)[ITEMS],
                                        Pack<T, VEC> (&gv)[ITEMS], float r,
                                        const Weights<T, VEC, ITEMS> &wt, Reduce reduce,
                                        Dres dres_of, Take take)
{
  float s = 0.f;
  if (active) {
#pragma unroll
    for (int i = 0; i < ITEMS; i++)
      if (lane + i * G < nvec) {
        float W[VEC], g[VEC], x[VEC];
        wt.get(i, lane + i * G, W);
        unpack(gv[i], g);
        unpack(xv[i], x);
#pragma unroll
        for (int j = 0; j < VEC; j++)
          s += g[j] * W[j] * x[j];
      }
    s *= r;
  }
  s = reduce(s);
  if (!active)
    return;
  const float c = s * (1.f / (float)a.N);
#pragma unroll
  for (int i = 0; i < ITEMS; i++) {
    opaque(xv[i]);
    opaque(gv[i]);
  }
#pragma unroll
  for (int i = 0; i < ITEMS; i++) {
    const int v = lane + i * G;
    if (v < nvec) {
      Pack<T, VEC> o;
      float W[VEC], contrib[VEC], g[VEC], x[VEC], d[VEC] = {};
      wt.get(i, v, W);
      unpack(gv[i], g);
      unpack(xv[i], x);
      if (a.dres)
        unpack(dres_of(i, v), d);
#pragma unroll
      for (int j = 0; j < VEC; j++)
        o.v[j] = from_f<T>(grad<T>(a, g[j], x[j], W[j], r, c, d[j], contrib[j]));
      store<T, VEC>(a.dx, row, a.sdx, v, o);
      take(i, v, contrib);
    }
  }
}

/* Row r of the fp32 partials (NULL when dW is not reduced through them). */
__device__ __forceinline__ float *partial_row(const BwdArgs &a, int64_t r)
{
  return a.partials ? a.partials + r * a.N : NULL;
}

/* Column col of this CTA's dW into its partial row `out` (NULL: the atomic accumulator). */
__device__ __forceinline__ void emit(const BwdArgs &a, float *out, int col, float v)
{
  if (out)
    out[col] = v;
  else
    atomicAdd(a.accum + col, v);
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

/* ROW_SHARE's exchange of row sums, in each CTA's shared memory: for each of its groups
 * (rows, at most ROW_SHARE_GROUPS) and two alternating sets, a slot per CTA of the cluster
 * (at most ROW_SHARE_MAX) and the mbarrier that counts their bytes in. */
struct Exchange {
  float slots[2][ROW_SHARE_GROUPS][ROW_SHARE_MAX];
  unsigned long long bars[2][ROW_SHARE_GROUPS];
};

/* Once per CTA, before the cluster barrier that starts ROW_SHARE: every mbarrier expects one
 * arrival (its group's lane 0, which also announces the bytes) per phase; the fence makes the
 * initialisation visible to the peers' asynchronous stores. */
__device__ __forceinline__ void exchange_init(Exchange &ex)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (threadIdx.x < 2 * ROW_SHARE_GROUPS) {
    const unsigned bar = (unsigned)__cvta_generic_to_shared(&ex.bars[0][0] + threadIdx.x);
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
  }
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

/* ROW_SHARE: the row's sum over the cluster's C CTAs, from s, the sum over this CTA's columns
 * (the same in every thread of group grp). Lane k of the group stores s into slot q (this
 * CTA's rank) of CTA k's set `set`, an asynchronous store that counts its 4 bytes on CTA k's
 * mbarrier of that slot set; lane 0 announces the C x 4 bytes its own mbarrier awaits. Every
 * thread waits for that phase (`phase`: the set's uses so far, mod 2) and adds the C slots in
 * rank order, so every CTA gets the same bits. No cluster barrier per row: one barrier a row
 * (its release also waits for the thread's global stores) measured much slower on both GPUs
 * (docs/kernels.md). A set is rewritten two rows later: a peer sends that row only
 * after it received this CTA's sum of the row between, which this CTA sends only after reading
 * the set. The host launches it from sm_90 only. */
__device__ __forceinline__ float cluster_row_sum(float s, Exchange &ex, int set, int grp, int lane,
                                                 int C, unsigned phase)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned q = cluster_rank(), bar = (unsigned)__cvta_generic_to_shared(&ex.bars[set][grp]);
  float *slots = ex.slots[set][grp];
  if (lane == 0)
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(4 * C)
                 : "memory");
  if (lane < C) {
    const unsigned mine = (unsigned)__cvta_generic_to_shared(slots + q);
    const unsigned peer_slot = peer_shared(mine, lane), peer_bar = peer_shared(bar, lane);
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];"
                 ::"r"(peer_slot), "r"(__float_as_uint(s)), "r"(peer_bar) : "memory");
  }
  unsigned done = 0;
  while (!done)
    asm volatile("{\n\t.reg .pred p;\n\t"
                 "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n\t"
                 "selp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(done) : "r"(bar), "r"(phase) : "memory");
  s = 0.f;
  for (int k = 0; k < C; k++)
    s += slots[k];
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

/* The CTA's dW over its ncols columns: each group's register accumulators go to its own row
 * of ncols floats in shared memory (R x ncols, `sm`), then every column is summed in group
 * order and emitted into `out` (the CTA's partial row; NULL: the atomic accumulator), or
 * summed over the cluster (DW_SUM). A CTA of one group outside DW_SUM clusters stores its
 * registers straight into `out`. The barrier first: `sm` may be the pipeline's staging,
 * which other threads may still read. */
template <int VEC, int ITEMS, int CL = SOLO>
__device__ __forceinline__ void cta_dw(const BwdArgs &a, const float (&dw)[ITEMS][VEC], int lane,
                                       int G, int nvec, int ncols, float *out, float *sm)
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
      cluster_sum(a.partials + (int64_t)(blockIdx.x / a.cluster) * a.N, sm, a.N, g.per_cta,
                  a.cluster);
      return;
    }
  __syncthreads();
  for (int col = threadIdx.x; col < ncols; col += blockDim.x) {
    float sum = 0.f;
    for (int k = 0; k < g.per_cta; k++)
      sum += sm[(int64_t)k * ncols + col];
    emit(a, out, col, sum);
  }
}

/* CTA (row: each row's dW contribution straight into its row of the temp) and WARP
 * (blockrow: summed in registers, then the CTA's groups through shared memory): each group
 * handles exactly one row. The weight is read where used, from L1 (the CTAs of an SM share
 * it), to keep registers for occupancy. */
template <typename T, int VEC, int ITEMS, Rows R>
__global__ void __launch_bounds__(bwd_limits(R)(ITEMS)) bwd_one(BwdArgs a)
{
  pdl_begin(a.pdl);
  const Group g(a.group);
  const int G = g.G, lane = g.lane, nvec = a.N / VEC;
  const int64_t row = g.one_row();
  const bool active = row < a.M;
  extern __shared__ __align__(16) float dyn[];
  __shared__ float red[2][32];
  int parity = 0;
  Pack<T, VEC> xv[ITEMS], gv[ITEMS];
  float r = 0.f;
  if (active)
    load_in<T, VEC, ITEMS>(a, row, lane, G, nvec, xv, gv, r);
  const Weights<T, VEC, ITEMS> wt(a.w, a.wf32, a.offset, lane, G, nvec, false);
  auto dres_of = [&](int, int v) { return load<T, VEC>(a.dres, row, a.sdres, v); };
  auto reduce = [&](float s) { return group_reduce(s, G, red, parity); };
  if constexpr (R == Rows::CTA) {
    process<T, VEC, ITEMS>(a, row, active, lane, G, nvec, xv, gv, r, wt, reduce, dres_of,
                           [&](int, int v, const float(&c)[VEC]) {
                             if (a.partials)
                               put_floats<VEC>(a.partials + row * a.N, v, c);
                             else if (a.accum)
#pragma unroll
                               for (int j = 0; j < VEC; j++)
                                 atomicAdd(a.accum + v * VEC + j, c[j]);
                           });
  } else {
    float dw[ITEMS][VEC];
    zero(dw);
    process<T, VEC, ITEMS>(a, row, active, lane, G, nvec, xv, gv, r, wt, reduce, dres_of,
                           [&](int i, int, const float(&c)[VEC]) {
#pragma unroll
                             for (int j = 0; j < VEC; j++)
                               dw[i][j] = c[j];
                           });
    if (a.partials || a.accum)
      cta_dw<VEC, ITEMS>(a, dw, lane, G, nvec, a.N, partial_row(a, blockIdx.x), dyn);
  }
}

/* STRIDE (partials, persistent): groups walk rows (a contiguous chunk per CTA, or a grid stride)
 * with a trip count uniform across the CTA; idle groups still join the barriers. Stage s of
 * a thread's staging holds its x, dy (and dres) packs and the rstd of the row s iterations
 * ahead; each iteration tops the pipeline up, waits for the oldest stage and works on it from
 * registers. dW stays in registers until the end: the CTA's row of partials (DW_SUM: the
 * cluster's), then (fused) a grid barrier and this CTA's slice of the final reduction.
 * ROW_SHARE: the C CTAs of a cluster walk the same rows, each over N / C columns (its
 * registers then hold rows C times wider), and exchange each row's sum (cluster_row_sum:
 * asynchronous stores counted in by mbarriers); the cluster writes one partial row, a slice
 * from each CTA. */
template <typename T, int VEC, int ITEMS, int CL>
__global__ void __launch_bounds__(bwd_limits(Rows::STRIDE)(ITEMS)) bwd_stride(BwdArgs a)
{
  pdl_begin(a.pdl);
  __shared__ Exchange ex; /* ROW_SHARE only: the other instances drop it */
  if constexpr (CL == ROW_SHARE) {
    exchange_init(ex);
    cluster_arrive();
  }
  using P = Pack<T, VEC>;
  const int C = CL == ROW_SHARE ? a.cluster : 1, ncols = a.N / C;
  const int64_t unit = blockIdx.x / C, units = gridDim.x / C;
  if constexpr (CL == ROW_SHARE)
    shift_cols<T>(a, (int64_t)(blockIdx.x % C) * ncols);
  const Group g(a.group);
  const int G = g.G, R = g.per_cta, grp = g.idx, lane = g.lane, nvec = ncols / VEC, S = a.stages;
  extern __shared__ __align__(16) float dyn[];
  __shared__ float red[2][32];
  int parity = 0;
  unsigned uses = 0; /* ROW_SHARE: rows exchanged so far */
  const Staging<P, ITEMS> st(dyn, S, a.dres ? 3 : 2);
  Weights<T, VEC, ITEMS> wt(a.w, a.wf32, a.offset, lane, G, nvec, true);
  float dw[ITEMS][VEC];
  zero(dw);

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
  auto fetch = [&](int64_t row, int stage) {
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
      copy_async(st.scalar(stage), a.rstd + row);
    }
    copy_commit();
  };
  auto reduce = [&](float s) {
    s = group_reduce(s, G, red, parity);
    if constexpr (CL == ROW_SHARE) {
      s = cluster_row_sum(s, ex, uses & 1, grp, lane, C, (uses >> 1) & 1);
      uses++;
    }
    return s;
  };
  for (int s = 0; s < S - 1; s++)
    fetch(begin + grp + s * step, s);
  if constexpr (CL == ROW_SHARE)
    cluster_wait();
  int stage = 0;
  for (int64_t base = begin; base < end; base += step) {
    const int64_t row = base + grp;
    const bool active = row < end;
    fetch(row + (S - 1) * step, stage == 0 ? S - 1 : stage - 1);
    copy_wait(S - 1);
    P xv[ITEMS], gv[ITEMS];
    float r = 0.f;
    if (active) {
      r = *st.scalar(stage);
#pragma unroll
      for (int i = 0; i < ITEMS; i++)
        if (lane + i * G < nvec) {
          xv[i] = *st.at(stage, 0, i);
          gv[i] = *st.at(stage, 1, i);
        }
    }
    wt.refresh();
    process<T, VEC, ITEMS>(a, row, active, lane, G, nvec, xv, gv, r, wt, reduce,
                           [&](int i, int) { return *st.at(stage, 2, i); },
                           [&](int i, int, const float(&c)[VEC]) {
#pragma unroll
                             for (int j = 0; j < VEC; j++)
                               dw[i][j] += c[j];
                           });
    stage = stage + 1 == S ? 0 : stage + 1;
  }
  copy_wait(0);
  if (!a.partials && !a.accum)
    return;
  /* the CTA's partial row (sharing: its cluster's, from the CTA's first column, recomputed
   * here rather than held in a register across the row loop) */
  float *out = a.partials ? a.partials + unit * a.N + (int64_t)(blockIdx.x % C) * ncols : NULL;
  cta_dw<VEC, ITEMS, CL>(a, dw, lane, G, nvec, ncols, out, dyn);
  if (a.fused) {
    __threadfence();
    grid_barrier(a.sync);
    reduce_slice<T>(a, dyn);
  }
}

/* c = sum(dy * W * xhat) / N of one row, the CTA's threads striding over its packs and
 * reducing (every thread of the CTA calls this): the first pass of the kernels for rows
 * wider than registers hold. Loads stream (evict-first) when STREAM, for a row read once;
 * the looping kernel's second pass reads the row again, from L2. */
template <typename T, int VEC, bool STREAM>
__device__ __forceinline__ float row_c(const BwdArgs &a, int64_t row, float r, float (*red)[32],
                                       int &parity)
{
  float s = 0.f;
  for (int v = threadIdx.x; v < a.N / VEC; v += blockDim.x) {
    const Pack<T, VEC> xv = load<T, VEC, STREAM>(a.x, row, a.sx, v);
    const Pack<T, VEC> gv = load<T, VEC, STREAM>(a.dy, row, a.sdy, v);
    float W[VEC];
    load_w<T, VEC>(a.w, a.wf32, a.offset, v, W);
#pragma unroll
    for (int j = 0; j < VEC; j++)
      s += to_f(gv.v[j]) * W[j] * to_f(xv.v[j]);
  }
  return group_reduce(s * r, blockDim.x, red, parity) * (1.f / (float)a.N);
}

/* LOOP: rows wider than registers hold. Two passes over the row, the second re-reading x and dy
 * (mostly from L2). dW accumulates in a row of N floats that each column's thread alone
 * touches: in shared memory when it fits (acc_smem), else the CTA's partial row in global
 * memory; the shared row is emitted at the end. Columns are zeroed and emitted by other
 * threads than the ones that accumulate them, hence the barriers around the row loop. */
template <typename T, int VEC>
__global__ void __launch_bounds__(LOOP_BLOCK) bwd_loop(BwdArgs a)
{
  pdl_begin(a.pdl);
  const int nvec = a.N / VEC;
  __shared__ float red[2][32];
  extern __shared__ __align__(16) float dyn[];
  int parity = 0;
  float *out = a.acc_smem ? dyn : partial_row(a, blockIdx.x);
  if (out) {
    for (int col = threadIdx.x; col < a.N; col += blockDim.x)
      out[col] = 0.f;
    __syncthreads(); /* the zeroing threads are not the accumulating ones */
  }
  int64_t begin = a.chunk > 0 ? (int64_t)blockIdx.x * a.chunk : blockIdx.x;
  int64_t end = a.chunk > 0 ? min(a.M, begin + a.chunk) : a.M;
  int64_t step = a.chunk > 0 ? 1 : gridDim.x;
  for (int64_t row = begin; row < end; row += step) {
    const float r = a.rstd[row], c = row_c<T, VEC, false>(a, row, r, red, parity);
    for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
      Pack<T, VEC> xv = load<T, VEC>(a.x, row, a.sx, v), gv = load<T, VEC>(a.dy, row, a.sdy, v), o;
      float W[VEC], d[VEC] = {};
      load_w<T, VEC>(a.w, a.wf32, a.offset, v, W);
      if (a.dres)
        unpack(load<T, VEC>(a.dres, row, a.sdres, v), d);
#pragma unroll
      for (int j = 0; j < VEC; j++) {
        const int col = v * VEC + j;
        float contrib;
        o.v[j] = from_f<T>(grad<T>(a, to_f(gv.v[j]), to_f(xv.v[j]), W[j], r, c, d[j], contrib));
        if (out)
          out[col] += contrib;
        else if (a.accum)
          atomicAdd(a.accum + col, contrib);
      }
      store<T, VEC>(a.dx, row, a.sdx, v, o);
    }
  }
  if (a.acc_smem) {
    __syncthreads();
    for (int col = threadIdx.x; col < a.N; col += blockDim.x)
      emit(a, partial_row(a, blockIdx.x), col, dyn[col]);
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
 * bwd_rowc reduces each row's c = sum(dy * W * xhat) / N (CTAs stride over rows); in
 * bwd_cols a thread owns one pack of columns over a contiguous chunk of rows
 * (blockIdx.y), so its weight and dW stay in registers for any N. The price: x and dy are
 * read twice, five streams where the minimum is three. No barrier after the column split,
 * so threads past the row return at once. */
template <typename T, int VEC>
__global__ void __launch_bounds__(LOOP_BLOCK) bwd_rowc(BwdArgs a)
{
  pdl_begin(a.pdl);
  __shared__ float red[2][32];
  int parity = 0;
  for (int64_t row = blockIdx.x; row < a.M; row += gridDim.x) {
    const float c = row_c<T, VEC, true>(a, row, a.rstd[row], red, parity);
    if (threadIdx.x == 0)
      a.rowc[row] = c;
  }
}

template <typename T, int VEC>
__global__ void __launch_bounds__(SPLIT_BLOCK) bwd_cols(BwdArgs a)
{
  pdl_begin(a.pdl);
  const int v = blockIdx.x * blockDim.x + threadIdx.x;
  if (v >= a.N / VEC)
    return;
  const int64_t begin = (int64_t)blockIdx.y * a.chunk, end = min(a.M, begin + a.chunk);
  float W[VEC], dw[1][VEC];
  load_w<T, VEC>(a.w, a.wf32, a.offset, v, W);
  zero(dw);
#pragma unroll 4
  for (int64_t row = begin; row < end; row++) {
    const float r = a.rstd[row], c = a.rowc[row];
    const Pack<T, VEC> xv = load<T, VEC>(a.x, row, a.sx, v), gv = load<T, VEC>(a.dy, row, a.sdy, v);
    Pack<T, VEC> o;
    float d[VEC] = {};
    if (a.dres)
      unpack(load<T, VEC>(a.dres, row, a.sdres, v), d);
#pragma unroll
    for (int j = 0; j < VEC; j++) {
      float contrib;
      o.v[j] = from_f<T>(grad<T>(a, to_f(gv.v[j]), to_f(xv.v[j]), W[j], r, c, d[j], contrib));
      dw[0][j] += contrib;
    }
    store<T, VEC>(a.dx, row, a.sdx, v, o);
  }
  if (a.partials)
    put_floats<VEC>(a.partials + (int64_t)blockIdx.y * a.N, v, dw[0]);
  else if (a.accum)
#pragma unroll
    for (int j = 0; j < VEC; j++)
      atomicAdd(a.accum + v * VEC + j, dw[0][j]);
}

} // namespace

template <typename T, int VEC> const void *bwd_kernel(const BwdKernel &key)
{
  if (key.rows == Rows::LOOP)
    return (const void *)bwd_loop<T, VEC>;
  if (key.rows == Rows::SPLIT)
    return key.row_pass ? (const void *)bwd_rowc<T, VEC> : (const void *)bwd_cols<T, VEC>;
  const void *kp = NULL;
  with_items(key.items, [&](auto I) {
    constexpr int IT = decltype(I)::value;
    if (key.rows == Rows::CTA)
      kp = (const void *)bwd_one<T, VEC, IT, Rows::CTA>;
    else if (key.rows == Rows::WARP)
      kp = (const void *)bwd_one<T, VEC, IT, Rows::WARP>;
    else if constexpr (bwd_limits(Rows::STRIDE)(IT) > 0) {
      /* no cluster instances at one item: at 1024 threads (64 registers) they would spill;
       * shared rows only in 16-byte packs (the scalar instance spilled) */
      if constexpr (IT == 1)
        kp = key.cluster != SOLO ? NULL : (const void *)bwd_stride<T, VEC, IT, SOLO>;
      else if constexpr (VEC == 1)
        kp = key.cluster == DW_SUM ? (const void *)bwd_stride<T, VEC, IT, DW_SUM>
             : key.cluster == SOLO ? (const void *)bwd_stride<T, VEC, IT, SOLO>
                                   : NULL;
      else
        kp = key.cluster == DW_SUM      ? (const void *)bwd_stride<T, VEC, IT, DW_SUM>
             : key.cluster == ROW_SHARE ? (const void *)bwd_stride<T, VEC, IT, ROW_SHARE>
                                        : (const void *)bwd_stride<T, VEC, IT, SOLO>;
    }
    return 0;
  });
  return kp;
}

template const void *bwd_kernel<NLK_INSTANCE_T, NLK_INSTANCE_VEC>(const BwdKernel &);

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
  bool acc_smem;         /* LOOP: dW accumulated in shared memory */
  const void *pre;       /* SPLIT: the row kernel, on pre_grid CTAs, before the column kernel's
                          * c.grid x col_blocks CTAs */
  int64_t pre_grid, col_blocks;
  bool fused;            /* dW reduced after a grid barrier in the main kernel */
  int cluster;           /* CTAs per cluster (1: none) */
  bool share;            /* the cluster's CTAs share each row (ROW_SHARE), else they sum dW */
  int64_t partial_rows;  /* rows of the fp32 partials/temp buffer (0: none) */
  bool accum_in_ws;      /* atomic reduction into an fp32 accumulator in the workspace */
  /* The workspace in floats: the partials (or temp), then the accumulator, then (SPLIT)
   * the M row sums, which start at float rowc_at. */
  size_t rowc_at, ws_floats;
};

/* The dW reduction's buffers (`rows` partial rows unless atomic; an fp32 accumulator for an
 * atomic reduction into 16-bit dW) and the workspace's layout. */
void layout_ws(const nlk_norm *k, BwdPlan *p, int64_t rows)
{
  const bool dw = k->dw != NULL, atomic = k->reduce == NLK_REDUCE_ATOMIC;
  p->partial_rows = dw && !atomic ? rows : 0;
  p->accum_in_ws = dw && atomic && k->wdt != NLK_F32;
  p->rowc_at = (size_t)(p->partial_rows + (p->accum_in_ws ? 1 : 0)) * (size_t)k->N;
  p->ws_floats = p->rowc_at + (p->rows == Rows::SPLIT ? (size_t)k->M : 0);
}

template <typename T>
const void *kernel_of(const RowCfg &c, BwdKernel key)
{
  key.items = c.items;
  return with_vec<T>(c.vec, [&](auto V) { return bwd_kernel<T, decltype(V)::value>(key); });
}

/* The CTAs that would share each row: the fewest, a power of two, that bring a CTA's slice
 * to the setting's columns or fewer, at most rmsnorm.bwd.share_max; 1 (no sharing) for
 * narrower rows, for the fused reduction (its grid barrier sums one partial row per CTA) and
 * where N does not split evenly. Whether the GPU runs such clusters is the plan's to find. */
int row_share(const nlk_norm *k, Strategy s)
{
  const int64_t share_n = k->dt == NLK_F32 ? k->bwd.fp32_share_n : k->bwd.share_n;
  if ((s != Strategy::PARTIALS && s != Strategy::PERSISTENT) || share_n <= 0 || k->N <= share_n)
    return 1;
  if (s == Strategy::PERSISTENT && k->dw && k->reduce != NLK_REDUCE_ATOMIC && k->bwd.fused_reduce)
    return 1;
  const int most = k->bwd.share_max < 2 ? 2 : k->bwd.share_max > ROW_SHARE_MAX ? ROW_SHARE_MAX : k->bwd.share_max;
  int c = pow2ceil((k->N + share_n - 1) / share_n);
  c = c > most ? pow2ceil(most) : c;
  return k->N % c == 0 ? c : 1;
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
    while (share < ROW_SHARE_MAX && k->N % (2 * share) == 0)
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
  const bool dw_spills = k->N * (int64_t)sizeof(float) > smem_budget(k);
  if (!dw_spills && !(sizeof(T) == 2 && k->bwd.split_min_n > 0 && k->N >= k->bwd.split_min_n))
    return false;
  p->c = loop_cfg(k, k->N, sizeof(T));
  p->pre = kernel_of<T>(p->c, BwdKernel{Rows::SPLIT, 0, SOLO, true});
  p->kernel = kernel_of<T>(p->c, BwdKernel{Rows::SPLIT, 0, SOLO, false});
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

/* The candidate's layout, kernel, clusters and grid; false when it does not fit. Grids: row
 * and blockrow a CTA per row group; partials contiguous row chunks over the SMs; persistent
 * as many CTAs as the SMs hold at once (or the settings' count per SM: the looping kernel
 * re-reads each row in its second pass, from L2 while the rows in flight fit it, and writes
 * a partial row per CTA, so fewer CTAs than fit can be faster); clusters whole. */
template <typename T>
bool fit(const nlk_norm *k, Strategy s, Candidate cand, BwdPlan *p)
{
  const int elt = sizeof(T), streams = k->dres ? 3 : 2, share = cand.share;
  const bool dw = k->dw != NULL, atomic = k->reduce == NLK_REDUCE_ATOMIC;
  const int64_t ncols = k->N / share; /* the columns a CTA holds */
  const Want want{k->bwd.items, k->bwd.block, k->bwd.blockrow_block};
  *p = BwdPlan{};
  p->rows = cand.rows;
  p->cluster = 1;
  switch (cand.rows) {
  case Rows::STRIDE:
    p->stages = fit_stages(k, ncols, elt, bwd_limits(Rows::STRIDE), want, k->bwd.stages, streams, 1,
                           &p->c);
    /* a shared row: the slice in 16-byte packs as the whole row; each of the first `share`
     * lanes of a group sends the row's sum to one peer; ROW_SHARE_GROUPS rows a CTA */
    if (!p->stages || (share > 1 && (p->c.vec == 1 || pick_vec(k, k->N, elt) == 1 ||
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
  p->kernel = kernel_of<T>(p->c, BwdKernel{cand.rows, 0, share > 1 ? ROW_SHARE : SOLO, false});
  if (!p->kernel)
    return false;
  /* shared memory: STRIDE's staging, then (STRIDE, WARP) each group's row of dW; LOOP: the
   * CTA's dW row, where it fits */
  const int64_t per_cta = rows_per_cta(p->c);
  if (p->c.items != 0 && cand.rows != Rows::CTA) {
    const size_t staging =
        (size_t)p->stages * p->c.block * ((size_t)streams * p->c.items * p->c.vec * elt + 4);
    const size_t rows = (size_t)(per_cta * ncols) * sizeof(float);
    p->smem = staging > rows ? staging : rows;
  } else if (p->c.items == 0 && dw && k->N * (int64_t)sizeof(float) <= smem_budget(k)) {
    p->acc_smem = true;
    p->smem = (size_t)k->N * sizeof(float);
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
    const void *kc = kernel_of<T>(p->c, BwdKernel{Rows::STRIDE, 0, DW_SUM, false});
    if (kc && allow_smem(k, kc, p->smem) == cudaSuccess)
      cluster_cap = (int64_t)max_clusters(k, kc, k->bwd.cluster, p->c.block, p->smem) * k->bwd.cluster;
    if (cluster_cap >= k->bwd.cluster) {
      p->cluster = k->bwd.cluster;
      p->kernel = kc;
    }
  }
  /* row groups: each a CTA's rows, or a cluster's when it shares them */
  const int64_t groups = (k->M + per_cta - 1) / per_cta, per_group = p->share ? share : 1;
  int64_t grid = groups * per_group;
  const int64_t sms = k->bwd.grid_sms > 0 && k->bwd.grid_sms < k->sm_count ? k->bwd.grid_sms : k->sm_count;
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
  const bool dw = k->dw != NULL, atomic = k->reduce == NLK_REDUCE_ATOMIC;
  float *ws = (float *)k->ws;
  BwdArgs a{.x = k->x, .dy = k->dy, .dres = k->dres, .w = k->w, .dx = k->dx, .dw = k->dw,
            .rstd = k->rstd, .partials = p.partial_rows ? ws : NULL, .accum = NULL,
            .rowc = p.rows == Rows::SPLIT ? ws + p.rowc_at : NULL, .sync = (unsigned int *)k->sync,
            .sx = k->sx, .sdy = k->sdy, .sdres = k->sdres, .sdx = k->sdx, .M = k->M,
            .chunk = p.chunk, .N = (int)k->N, .group = p.c.group, .wf32 = k->wdt == NLK_F32,
            .cast = k->cast, .fused = p.fused, .dw_f32 = k->wdt == NLK_F32, .stages = p.stages,
            .pdl = k->pdl && !p.fused, .acc_smem = p.acc_smem, .cluster = p.cluster,
            .offset = k->offset};
  int rc;
  if (dw && atomic) {
    a.accum = p.accum_in_ws ? ws : (float *)k->dw;
    rc = cuda_result(k, cudaMemsetAsync(a.accum, 0, (size_t)k->N * sizeof(float), stream));
    if (rc != NLK_OK)
      return rc;
  }
  k->grid = (int32_t)(p.rows == Rows::SPLIT ? p.c.grid * p.col_blocks : p.c.grid);
  k->block = p.c.block;
  k->cluster_dim = p.cluster;
  k->kernel = p.kernel;
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
  if (p.partial_rows && !p.fused)
    return reduce_partials(k, ws, p.partial_rows, s != Strategy::ROW);
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
  {"row", NLK_BWD, nlk::launch_row, nlk::workspace_row, nlk::max_n_supports},
  {"blockrow", NLK_BWD, nlk::launch_blockrow, nlk::workspace_blockrow, nlk::warp_row_supports},
  {"partials", NLK_BWD, nlk::launch_partials, nlk::workspace_partials, nlk::max_n_supports},
  {"persistent", NLK_BWD, nlk::launch_persistent, nlk::workspace_persistent, nlk::max_n_supports},
  {NULL, 0, NULL, NULL, NULL},
};

#endif
