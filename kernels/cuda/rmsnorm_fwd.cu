/*
 * rmsnorm_fwd.cu: RMSNorm forward (and add_rmsnorm, whose residual add is fused in front).
 *
 * One kernel body, three mappings of rows to the grid:
 *   row        one CTA per row (grid = M); the CTA reduces the row's sum of squares;
 *   blockrow   256-thread CTAs holding 256/group rows, a warp or less per row, shuffles only;
 *   persistent grid = SMs x resident CTAs of rmsnorm.fwd.block threads striding over rows;
 *              the weight is read into registers once per CTA instead of once per row, and
 *              the next row's loads are issued before the current row is worked on.
 * A thread keeps its `items` packs of the row in registers between the reduction and the
 * normalisation, so x is read once. Rows wider than the block limits allow go to a looping
 * kernel that reads x twice (the second time mostly from L2). Packs are 16 bytes when N,
 * strides and pointers allow, single elements otherwise.
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

/* Registers per thread, per item: the x pack (and residual pack), twice with the prefetch,
 * which also keeps the weight (VEC floats) in registers. */
constexpr BlockLimits FWD_LIMITS{{1024, 1024, 512, 256}};
constexpr BlockLimits FWD_LIMITS_PREFETCH{{1024, 512, 256, 0}}; /* 8 packs would spill */

/* y for one element from its input x, 1/rms r and weight W (W already rounded to T in
 * cast mode none). */
template <typename T>
__device__ __forceinline__ float rms_out(float x, float r, float W, int cast)
{
  return cast == NLK_CAST_GEMMA ? x * r * W : round_to<T>(x * r) * W;
}

/* The residual add of add_rmsnorm in the looping kernel: h = round(x + res), written to
 * res_out (which may be res itself: each element is read before it is overwritten, by the
 * same thread). */
template <typename T, int VEC>
__device__ __forceinline__ void add_residual(const FwdArgs &a, int64_t row, int v, Pack<T, VEC> &xv)
{
  Pack<T, VEC> r = load<T, VEC>(a.res, row, a.sres, v);
#pragma unroll
  for (int j = 0; j < VEC; j++)
    xv.v[j] = from_f<T>(to_f(xv.v[j]) + to_f(r.v[j]));
  store<T, VEC>(a.res_out, row, a.sres_out, v, xv);
}

/* PREFETCH (the persistent strategy): the weight is read into registers once per CTA, and
 * each iteration first issues the loads of the group's next row, so they are in flight
 * during this row's reduction, barrier and stores. Without it (row, blockrow: one row per
 * group), the weight is read after the reduction, from L2, and registers hold only x. */
template <typename T, int VEC, int ITEMS, bool PREFETCH>
__global__ void __launch_bounds__(PREFETCH ? FWD_LIMITS_PREFETCH(ITEMS) : FWD_LIMITS(ITEMS))
rms_fwd(FwdArgs a)
{
  const int G = a.group, R = blockDim.x / G, grp = threadIdx.x / G, lane = threadIdx.x % G;
  const int nvec = a.N / VEC;
  const int64_t step = (int64_t)gridDim.x * R;
  const float inv_n = 1.f / (float)a.N;
  __shared__ float red[2][32];
  int parity = 0;
  float wr[ITEMS][VEC];
  Pack<T, VEC> xv[ITEMS], rv[ITEMS];

  /* The first row's loads go out before the weight's, so their latencies overlap. */
  int64_t base = (int64_t)blockIdx.x * R;
  if (base + grp < a.M) {
    load_row<T, VEC, ITEMS>(a.x, base + grp, a.sx, lane, G, nvec, xv);
    if (a.res)
      load_row<T, VEC, ITEMS>(a.res, base + grp, a.sres, lane, G, nvec, rv);
  }
  if (PREFETCH)
#pragma unroll
    for (int i = 0; i < ITEMS; i++) {
      const int v = lane + i * G;
      if (v < nvec) {
        float W[VEC];
        load_w<T, VEC>(a.w, a.wf32, a.offset, v, W);
#pragma unroll
        for (int j = 0; j < VEC; j++)
          wr[i][j] = a.cast == NLK_CAST_NONE ? round_to<T>(W[j]) : W[j];
      }
    }

  /* The trip count is uniform across the CTA (rows past M idle but still join the
   * shuffles and barriers). */
  for (; base < a.M; base += step) {
    const int64_t row = base + grp, next = row + step;
    const bool active = row < a.M;
    Pack<T, VEC> nx[ITEMS], nr[ITEMS];
    if (PREFETCH && next < a.M) {
      load_row<T, VEC, ITEMS>(a.x, next, a.sx, lane, G, nvec, nx);
      if (a.res)
        load_row<T, VEC, ITEMS>(a.res, next, a.sres, lane, G, nvec, nr);
    }
    float ss = 0.f;
    if (active) {
#pragma unroll
      for (int i = 0; i < ITEMS; i++) {
        const int v = lane + i * G;
        if (v < nvec) {
          if (a.res) {
            /* add_rmsnorm: h = round(x + res) goes to res_out (which may be res itself:
             * this thread read the element before overwriting it). */
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
    const float r = rsqrtf(ss * inv_n + a.eps);
    if (active) {
      if (lane == 0 && a.rstd)
        a.rstd[row] = r;
#pragma unroll
      for (int i = 0; i < ITEMS; i++) {
        const int v = lane + i * G;
        if (v < nvec) {
          Pack<T, VEC> o;
          float W[VEC];
          if (PREFETCH) {
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
#pragma unroll
          for (int j = 0; j < VEC; j++)
            o.v[j] = from_f<T>(rms_out<T>(to_f(xv[i].v[j]), r, W[j], a.cast));
          store<T, VEC>(a.y, row, a.sy, v, o);
        }
      }
    }
    if (PREFETCH) {
#pragma unroll
      for (int i = 0; i < ITEMS; i++) {
        xv[i] = nx[i];
        rv[i] = nr[i];
      }
    } else if (next < a.M) {
      load_row<T, VEC, ITEMS>(a.x, next, a.sx, lane, G, nvec, xv);
      if (a.res)
        load_row<T, VEC, ITEMS>(a.res, next, a.sres, lane, G, nvec, rv);
    }
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
      if (a.res)
        add_residual<T, VEC>(a, row, v, xv);
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

template <typename T, int VEC>
int launch_vec(nlk_norm *k, const RowCfg &c, bool prefetch, Mapping m)
{
  FwdArgs a = {k->x, k->res, k->w, k->y, k->res_out, k->rstd, k->sx, k->sres, k->sy, k->sres_out,
               k->M, (int)k->N, c.group, k->wdt == NLK_F32, k->cast, k->offset, k->eps};
  const void *kern = NULL;
  if (c.items == 0)
    kern = (const void *)rms_fwd_loop<T, VEC>;
  else
    with_items(c.items, [&](auto I) {
      constexpr int IT = decltype(I)::value;
      if constexpr (FWD_LIMITS_PREFETCH(IT) > 0)
        kern = prefetch ? (const void *)rms_fwd<T, VEC, IT, true> : (const void *)rms_fwd<T, VEC, IT, false>;
      else
        kern = (const void *)rms_fwd<T, VEC, IT, false>;
      return 0;
    });
  const int64_t groups = (k->M + rows_per_cta(c) - 1) / rows_per_cta(c);
  int64_t grid = groups;
  if (m == PERSISTENT) {
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
    const RowMode mode = m == ROW ? CTA_ROWS : m == BLOCKROW ? WARP_ROWS : MANY_ROWS;
    /* persistent prefetches when the row fits the prefetching layout, else runs plain */
    bool prefetch = m == PERSISTENT && k->flavor != 0;
    RowCfg c = row_cfg(k, sizeof(T), mode, FWD_LIMITS_PREFETCH, k->block_pref, INT64_MAX);
    if (!prefetch || c.items == 0) {
      prefetch = false;
      c = row_cfg(k, sizeof(T), mode, FWD_LIMITS, k->block_pref, INT64_MAX);
    }
    if (m == BLOCKROW && c.items == 0)
      return (int)NLK_ERR_UNSUPPORTED;
    return c.vec == 1 ? launch_vec<T, 1>(k, c, prefetch, m)
                      : launch_vec<T, 16 / sizeof(T)>(k, c, prefetch, m);
  });
}

} // namespace
} // namespace nlk

extern "C" {
int nlk_cuda_rms_fwd_row(nlk_norm *k) { return nlk::launch(k, nlk::ROW); }
int nlk_cuda_rms_fwd_blockrow(nlk_norm *k) { return nlk::launch(k, nlk::BLOCKROW); }
int nlk_cuda_rms_fwd_persistent(nlk_norm *k) { return nlk::launch(k, nlk::PERSISTENT); }
}
