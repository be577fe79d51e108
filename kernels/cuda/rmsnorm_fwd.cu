/*
 * rmsnorm_fwd.cu: RMSNorm forward (and add_rmsnorm, whose residual add is fused in front).
 *
 * Three mappings of rows to the grid:
 *   row        one CTA per row (grid = M); the CTA reduces the row's sum of squares;
 *   blockrow   256-thread CTAs holding 256/group rows, a warp or less per row, shuffles only;
 *   persistent grid = SMs x resident CTAs of rmsnorm.fwd.block threads striding over rows;
 *              the weight is read into registers once per CTA, and each group issues the
 *              loads of its next row before working on the current one (two register sets
 *              used in turn, so no copy waits on the loads).
 * A thread keeps its `items` packs of the row in registers between the reduction and the
 * normalisation, so x is read once. The one-row kernels are kept lean (occupancy is what
 * hides their latency); rows wider than the block limits allow go to a looping kernel that
 * reads x twice (the second time mostly from L2). Packs are 16 bytes when N, strides and
 * pointers allow, single elements otherwise.
 */
#include "common.cuh"

namespace nlk {
namespace {

struct FwdArgs {
  const void *x, *res, *w;
  void *y, *res_out;
  float *rstd;
  int64_t sx, sres, sy, sres_out;
  int64_t M;
  int N, group, wf32, cast;
  float offset, eps;
};

/* Registers per thread, per item: the x pack (and the residual pack); the persistent kernel
 * holds two of each and the weight (VEC floats). From ptxas's counts for bf16 (the hungriest
 * dtype) so that nothing spills; 0: no kernel with that many packs. */
constexpr BlockLimits FWD_LIMITS{{1024, 1024, 512, 256}};
constexpr BlockLimits FWD_LIMITS_PERSIST{{1024, 512, 256, 0}};

/* y for one element from its input x, 1/rms r and weight W (W already rounded to T in
 * cast mode none). */
template <typename T>
__device__ __forceinline__ float rms_out(float x, float r, float W, int cast)
{
  return cast == NLK_CAST_GEMMA ? x * r * W : round_to<T>(x * r) * W;
}

template <typename T, int VEC, int ITEMS, bool RES>
__device__ __forceinline__ void load_in(const FwdArgs &a, int64_t row, int lane, int G, int nvec,
                                        Pack<T, VEC> (&xv)[ITEMS], Pack<T, VEC> (&rv)[ITEMS])
{
  load_row<T, VEC, ITEMS>(a.x, row, a.sx, lane, G, nvec, xv);
  if (RES)
    load_row<T, VEC, ITEMS>(a.res, row, a.sres, lane, G, nvec, rv);
}

/* One row: residual add (add_rmsnorm: h = round(x + res) to res_out, which may be res
 * itself: this thread read the element before overwriting it), sum of squares, the group's
 * reduction (every thread of the CTA calls this the same number of times), y and rstd. */
template <typename T, int VEC, int ITEMS, bool RES, bool CACHED_W>
__device__ __forceinline__ void process(const FwdArgs &a, int64_t row, bool active, int lane,
                                        int G, int nvec, Pack<T, VEC> (&xv)[ITEMS],
                                        const Pack<T, VEC> (&rv)[ITEMS],
                                        const float (&wr)[ITEMS][VEC], float (*red)[32],
                                        int &parity)
{
  float ss = 0.f;
  if (active) {
#pragma unroll
    for (int i = 0; i < ITEMS; i++) {
      const int v = lane + i * G;
      if (v < nvec) {
        if (RES) {
#pragma unroll
          for (int j = 0; j < VEC; j++)
            xv[i].v[j] = from_f<T>(to_f(xv[i].v[j]) + to_f(rv[i].v[j]));
          store<T, VEC>(a.res_out, row, a.sres_out, v, xv[i]);
        }
#pragma unroll
        for (int j = 0; j < VEC; j++) {
          const float f = to_f(xv[i].v[j]);
          ss += f * f;
        }
      }
    }
  }
  ss = group_reduce(ss, G, red, parity);
  const float r = rsqrtf(ss * (1.f / (float)a.N) + a.eps);
  if (!active)
    return;
  if (lane == 0 && a.rstd)
    a.rstd[row] = r;
#pragma unroll
  for (int i = 0; i < ITEMS; i++) {
    const int v = lane + i * G;
    if (v < nvec) {
      float W[VEC];
      if (CACHED_W) {
#pragma unroll
        for (int j = 0; j < VEC; j++)
          W[j] = wr[i][j];
      } else {
        load_w<T, VEC>(a.w, a.wf32, a.offset, v, W);
        if (a.cast == NLK_CAST_NONE)
#pragma unroll
          for (int j = 0; j < VEC; j++)
            W[j] = round_to<T>(W[j]);
      }
      Pack<T, VEC> o;
#pragma unroll
      for (int j = 0; j < VEC; j++)
        o.v[j] = from_f<T>(rms_out<T>(to_f(xv[i].v[j]), r, W[j], a.cast));
      store<T, VEC>(a.y, row, a.sy, v, o);
    }
  }
}

/* row and blockrow: each group handles exactly one row. */
template <typename T, int VEC, int ITEMS, bool RES>
__global__ void __launch_bounds__(FWD_LIMITS(ITEMS)) rms_fwd_one(FwdArgs a)
{
  const int G = a.group, R = blockDim.x / G;
  const int lane = threadIdx.x % G, nvec = a.N / VEC;
  const int64_t row = (int64_t)blockIdx.x * R + threadIdx.x / G;
  const bool active = row < a.M;
  __shared__ float red[2][32];
  int parity = 0;
  Pack<T, VEC> xv[ITEMS], rv[ITEMS];
  float unused[ITEMS][VEC];
  if (active)
    load_in<T, VEC, ITEMS, RES>(a, row, lane, G, nvec, xv, rv);
  process<T, VEC, ITEMS, RES, false>(a, row, active, lane, G, nvec, xv, rv, unused, red, parity);
}

/* persistent: CTAs stride over rows; register sets A and B take turns holding the current
 * row while the other receives the next. The trip count is uniform across the CTA (rows
 * past M idle but still join the barriers). */
template <typename T, int VEC, int ITEMS, bool RES>
__global__ void __launch_bounds__(FWD_LIMITS_PERSIST(ITEMS)) rms_fwd_persist(FwdArgs a)
{
  const int G = a.group, R = blockDim.x / G, grp = threadIdx.x / G;
  const int lane = threadIdx.x % G, nvec = a.N / VEC;
  const int64_t step = (int64_t)gridDim.x * R;
  __shared__ float red[2][32];
  int parity = 0;
  float wr[ITEMS][VEC];
  Pack<T, VEC> xa[ITEMS], ra[ITEMS], xb[ITEMS], rb[ITEMS];
  int64_t base = (int64_t)blockIdx.x * R;

  if (base + grp < a.M)
    load_in<T, VEC, ITEMS, RES>(a, base + grp, lane, G, nvec, xa, ra);
#pragma unroll
  for (int i = 0; i < ITEMS; i++) {
    const int v = lane + i * G;
    if (v < nvec) {
      load_w<T, VEC>(a.w, a.wf32, a.offset, v, wr[i]);
      if (a.cast == NLK_CAST_NONE)
#pragma unroll
        for (int j = 0; j < VEC; j++)
          wr[i][j] = round_to<T>(wr[i][j]);
    }
  }
  while (base < a.M) {
    if (base + step + grp < a.M)
      load_in<T, VEC, ITEMS, RES>(a, base + step + grp, lane, G, nvec, xb, rb);
    process<T, VEC, ITEMS, RES, true>(a, base + grp, base + grp < a.M, lane, G, nvec, xa, ra, wr,
                                      red, parity);
    base += step;
    if (base >= a.M)
      break;
    if (base + step + grp < a.M)
      load_in<T, VEC, ITEMS, RES>(a, base + step + grp, lane, G, nvec, xa, ra);
    process<T, VEC, ITEMS, RES, true>(a, base + grp, base + grp < a.M, lane, G, nvec, xb, rb, wr,
                                      red, parity);
    base += step;
  }
}

/* Rows wider than registers hold: the CTA loops over the row twice, the second time
 * re-reading x (or h from res_out) and the weight. */
template <typename T, int VEC>
__global__ void __launch_bounds__(LOOP_BLOCK) rms_fwd_loop(FwdArgs a)
{
  const int nvec = a.N / VEC;
  const float inv_n = 1.f / (float)a.N;
  __shared__ float red[2][32];
  int parity = 0;
  for (int64_t row = blockIdx.x; row < a.M; row += gridDim.x) {
    const void *src = a.res ? a.res_out : a.x;
    const int64_t src_stride = a.res ? a.sres_out : a.sx;
    float ss = 0.f;
    for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
      Pack<T, VEC> xv = load<T, VEC>(a.x, row, a.sx, v);
      if (a.res) {
        Pack<T, VEC> rv = load<T, VEC>(a.res, row, a.sres, v);
#pragma unroll
        for (int j = 0; j < VEC; j++)
          xv.v[j] = from_f<T>(to_f(xv.v[j]) + to_f(rv.v[j]));
        store<T, VEC>(a.res_out, row, a.sres_out, v, xv);
      }
#pragma unroll
      for (int j = 0; j < VEC; j++) {
        const float f = to_f(xv.v[j]);
        ss += f * f;
      }
    }
    ss = group_reduce(ss, blockDim.x, red, parity);
    const float r = rsqrtf(ss * inv_n + a.eps);
    if (threadIdx.x == 0 && a.rstd)
      a.rstd[row] = r;
    for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
      Pack<T, VEC> xv = load<T, VEC>(src, row, src_stride, v), o;
      float W[VEC];
      load_w<T, VEC>(a.w, a.wf32, a.offset, v, W);
#pragma unroll
      for (int j = 0; j < VEC; j++)
        o.v[j] = from_f<T>(rms_out<T>(to_f(xv.v[j]), r,
                                      a.cast == NLK_CAST_NONE ? round_to<T>(W[j]) : W[j], a.cast));
      store<T, VEC>(a.y, row, a.sy, v, o);
    }
  }
}

enum Mapping { ROW, BLOCKROW, PERSISTENT };

template <typename T, int VEC, bool RES>
const void *kernel_for(const RowCfg &c, bool persist)
{
  if (c.items == 0)
    return (const void *)rms_fwd_loop<T, VEC>;
  const void *kp = NULL;
  with_items(c.items, [&](auto I) {
    constexpr int IT = decltype(I)::value;
    if constexpr (FWD_LIMITS_PERSIST(IT) > 0)
      kp = persist ? (const void *)rms_fwd_persist<T, VEC, IT, RES> : (const void *)rms_fwd_one<T, VEC, IT, RES>;
    else
      kp = (const void *)rms_fwd_one<T, VEC, IT, RES>;
    return 0;
  });
  return kp;
}

template <typename T, int VEC>
int launch_vec(nlk_norm *k, const RowCfg &c, bool persist)
{
  FwdArgs a = {k->x, k->res, k->w, k->y, k->res_out, k->rstd, k->sx, k->sres, k->sy, k->sres_out,
               k->M, (int)k->N, c.group, k->wdt == NLK_F32, k->cast, k->offset, k->eps};
  const void *kern = k->res ? kernel_for<T, VEC, true>(c, persist) : kernel_for<T, VEC, false>(c, persist);
  const int64_t per_cta = rows_per_cta(c), groups = (k->M + per_cta - 1) / per_cta;
  int64_t grid = groups;
  if (persist || c.items == 0) {
    const int per_sm = k->ctas_per_sm > 0 ? k->ctas_per_sm : occupancy(kern, c.block, 0);
    grid = (int64_t)k->sm_count * per_sm;
    if (grid > groups)
      grid = groups;
  }
  k->grid = (int32_t)grid;
  k->block = c.block;
  void *args[] = {&a};
  return cuda_result(k, cudaLaunchKernel(kern, dim3((unsigned)grid), dim3(c.block), args, 0,
                                         (cudaStream_t)k->stream));
}

int launch(nlk_norm *k, Mapping m)
{
  return with_dtype(k->dt, [&](auto t) {
    using T = decltype(t);
    /* persistent runs its striding kernel when the row fits that layout, else the one-row
     * kernel over every group */
    bool persist = m == PERSISTENT;
    const RowMode mode = m == ROW ? CTA_ROWS : m == BLOCKROW ? WARP_ROWS : MANY_ROWS;
    RowCfg c = row_cfg(k, sizeof(T), mode, persist ? FWD_LIMITS_PERSIST : FWD_LIMITS,
                       k->block_pref, INT64_MAX);
    if (persist && c.items == 0) {
      persist = false;
      c = row_cfg(k, sizeof(T), mode, FWD_LIMITS, k->block_pref, INT64_MAX);
    }
    if (m == BLOCKROW && c.items == 0)
      return (int)NLK_ERR_UNSUPPORTED;
    return c.vec == 1 ? launch_vec<T, 1>(k, c, persist) : launch_vec<T, 16 / sizeof(T)>(k, c, persist);
  });
}

} // namespace
} // namespace nlk

extern "C" {
int nlk_cuda_rms_fwd_row(nlk_norm *k) { return nlk::launch(k, nlk::ROW); }
int nlk_cuda_rms_fwd_blockrow(nlk_norm *k) { return nlk::launch(k, nlk::BLOCKROW); }
int nlk_cuda_rms_fwd_persistent(nlk_norm *k) { return nlk::launch(k, nlk::PERSISTENT); }
}
