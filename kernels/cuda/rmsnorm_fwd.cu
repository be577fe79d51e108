/*
 * rmsnorm_fwd.cu: RMSNorm forward (and add_rmsnorm, whose residual add is fused in front).
 *
 * One kernel body, three mappings of rows to the grid:
 *   row        one CTA per row (grid = M), the whole CTA reduces the row's sum of squares;
 *   blockrow   256-thread CTAs holding 256/group rows, a warp or less per row, shuffles only;
 *   persistent grid = SMs x resident CTAs, CTAs stride over rows; the weight is read into
 *              registers once per CTA instead of once per row.
 * A thread keeps its `items` 16-byte packs of the row in registers between the reduction
 * and the normalisation, so x is read once. Rows too wide for registers (more than
 * the block limits allow) go to a looping kernel that reads x twice (the second time mostly
 * from L2). Packs are 16 bytes when N, strides and pointers allow; else single elements.
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

/* y for one element given its input x, 1/rms r and weight W (already rounded to T in
 * cast mode none). */
template <typename T>
__device__ __forceinline__ float rms_out(float x, float r, float W, int cast)
{
  return cast == NLK_CAST_GEMMA ? x * r * W : round_to<T>(x * r) * W;
}

/* The residual add of add_rmsnorm: h = round(x + res), written to res_out (which may be
 * res itself: each element is read before it is overwritten, by the same thread). */
template <typename T, int VEC>
__device__ __forceinline__ void add_residual(const FwdArgs &a, int64_t row, int v, Pack<T, VEC> &xv)
{
  Pack<T, VEC> r = load<T, VEC>(a.res, row, a.sres, v);
#pragma unroll
  for (int j = 0; j < VEC; j++)
    xv.v[j] = from_f<T>(to_f(xv.v[j]) + to_f(r.v[j]));
  store<T, VEC>(a.res_out, row, a.sres_out, v, xv);
}

/* Forward holds x (one pack) and the weight (VEC floats) per item. */
constexpr BlockLimits FWD_LIMITS{{1024, 1024, 512, 256}};

template <typename T, int VEC, int ITEMS, bool WARP_ROWS>
__global__ void __launch_bounds__(WARP_ROWS ? WARP_ROWS_BLOCK : FWD_LIMITS(ITEMS)) rms_fwd(FwdArgs a)
{
  const int G = WARP_ROWS ? a.group : blockDim.x;
  const int R = blockDim.x / G, grp = threadIdx.x / G, lane = threadIdx.x % G;
  const int nvec = a.N / VEC;
  const float inv_n = 1.f / (float)a.N;
  __shared__ float red[2][32];
  int parity = 0;
  float wr[ITEMS][VEC];

#pragma unroll
  for (int i = 0; i < ITEMS; i++) {
    const int v = lane + i * G;
#pragma unroll
    for (int j = 0; j < VEC; j++) {
      float W = v < nvec ? weight_at<T>(a.w, a.wf32, a.offset, v * VEC + j) : 0.f;
      wr[i][j] = a.cast == NLK_CAST_NONE ? round_to<T>(W) : W;
    }
  }

  /* The trip count is uniform across the CTA (rows past M are idle but still join the
   * shuffles and barriers). */
  for (int64_t base = (int64_t)blockIdx.x * R; base < a.M; base += (int64_t)gridDim.x * R) {
    const int64_t row = base + grp;
    const bool active = row < a.M;
    Pack<T, VEC> xv[ITEMS];
    float ss = 0.f;
    if (active) {
#pragma unroll
      for (int i = 0; i < ITEMS; i++) {
        const int v = lane + i * G;
        if (v < nvec) {
          xv[i] = load<T, VEC>(a.x, row, a.sx, v);
          if (a.res)
            add_residual<T, VEC>(a, row, v, xv[i]);
#pragma unroll
          for (int j = 0; j < VEC; j++) {
            const float f = to_f(xv[i].v[j]);
            ss += f * f;
          }
        }
      }
    }
    ss = WARP_ROWS ? group_sum(ss, G) : block_sum(ss, red, parity);
    const float r = rsqrtf(ss * inv_n + a.eps);
    if (active) {
      if (lane == 0 && a.rstd)
        a.rstd[row] = r;
#pragma unroll
      for (int i = 0; i < ITEMS; i++) {
        const int v = lane + i * G;
        if (v < nvec) {
          Pack<T, VEC> o;
#pragma unroll
          for (int j = 0; j < VEC; j++)
            o.v[j] = from_f<T>(rms_out<T>(to_f(xv[i].v[j]), r, wr[i][j], a.cast));
          store<T, VEC>(a.y, row, a.sy, v, o);
        }
      }
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
    const int64_t ss_stride = a.res ? a.sres_out : a.sx;
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
    ss = block_sum(ss, red, parity);
    const float r = rsqrtf(ss * inv_n + a.eps);
    if (threadIdx.x == 0 && a.rstd)
      a.rstd[row] = r;
    for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
      Pack<T, VEC> xv = load<T, VEC>(src, row, ss_stride, v), o;
#pragma unroll
      for (int j = 0; j < VEC; j++) {
        float W = weight_at<T>(a.w, a.wf32, a.offset, v * VEC + j);
        if (a.cast == NLK_CAST_NONE)
          W = round_to<T>(W);
        o.v[j] = from_f<T>(rms_out<T>(to_f(xv.v[j]), r, W, a.cast));
      }
      store<T, VEC>(a.y, row, a.sy, v, o);
    }
  }
}

enum Mapping { ROW, BLOCKROW, PERSISTENT };

template <typename T, int VEC>
int launch_vec(nlk_norm *k, RowCfg c, Mapping m)
{
  FwdArgs a = {k->x, k->res, k->w, k->y, k->res_out, k->rstd, k->sx, k->sres, k->sy, k->sres_out,
               k->M, (int)k->N, c.group, k->wdt == NLK_F32, k->cast, k->offset, k->eps};
  cudaStream_t s = (cudaStream_t)k->stream;
  const int64_t groups = (k->M + rows_per_cta(c) - 1) / rows_per_cta(c);
  if (c.items == 0) {
    auto kern = rms_fwd_loop<T, VEC>;
    int64_t grid = m == PERSISTENT ? (int64_t)k->sm_count * occupancy((const void *)kern, c.block, 0) : k->M;
    if (m == PERSISTENT && k->ctas_per_sm > 0)
      grid = (int64_t)k->sm_count * k->ctas_per_sm;
    k->grid = (int32_t)(grid < k->M ? grid : k->M);
    k->block = c.block;
    kern<<<(unsigned)k->grid, c.block, 0, s>>>(a);
    return cuda_result(k, cudaGetLastError());
  }
  return with_items(c.items, [&](auto I) {
    auto kern = c.warp_rows ? rms_fwd<T, VEC, decltype(I)::value, true>
                            : rms_fwd<T, VEC, decltype(I)::value, false>;
    int64_t grid = groups;
    if (m == PERSISTENT) {
      int per_sm = k->ctas_per_sm > 0 ? k->ctas_per_sm : occupancy((const void *)kern, c.block, 0);
      grid = (int64_t)k->sm_count * per_sm;
      if (grid > groups)
        grid = groups;
    }
    k->grid = (int32_t)grid;
    k->block = c.block;
    kern<<<(unsigned)grid, c.block, 0, s>>>(a);
    return cuda_result(k, cudaGetLastError());
  });
}

int launch(nlk_norm *k, Mapping m)
{
  return with_dtype(k->dt, [&](auto t) {
    using T = decltype(t);
    RowCfg c = row_cfg(k, sizeof(T), m == ROW ? CTA_ROWS : m == BLOCKROW ? WARP_ROWS : ANY_ROWS, FWD_LIMITS);
    if (m == BLOCKROW && !c.warp_rows)
      return (int)NLK_ERR_UNSUPPORTED;
    return c.vec == 1 ? launch_vec<T, 1>(k, c, m) : launch_vec<T, 16 / sizeof(T)>(k, c, m);
  });
}

} // namespace
} // namespace nlk

extern "C" {
int nlk_cuda_rms_fwd_row(nlk_norm *k) { return nlk::launch(k, nlk::ROW); }
int nlk_cuda_rms_fwd_blockrow(nlk_norm *k) { return nlk::launch(k, nlk::BLOCKROW); }
int nlk_cuda_rms_fwd_persistent(nlk_norm *k) { return nlk::launch(k, nlk::PERSISTENT); }
}
