/*
 * rmsnorm_fwd.cu: RMSNorm forward (and add_rmsnorm, whose residual add is fused in front).
 *
 * Four mappings of rows to the grid:
 *   row        one CTA per row (grid = M); the CTA reduces the row's sum of squares;
 *   blockrow   CTAs of rmsnorm.fwd.blockrow_block threads (256), a warp or less per row,
 *              shuffles only;
 *   persistent grid = SMs x resident CTAs of rmsnorm.fwd.block threads striding over rows;
 *              the weight is read into registers once per CTA, and each thread keeps its
 *              packs of the next rmsnorm.fwd.stages - 1 rows in flight through cp.async into
 *              shared memory, so DRAM stays busy across every row's reduction;
 *   staged     one CTA per row, the whole row copied to shared memory through cp.async.
 * In row, blockrow and persistent a thread holds its `items` packs of the row in registers
 * between the reduction and the normalisation, so x is read once. For rows up to
 * rmsnorm.fwd.early_weight_max_n the one-row kernels load the weight with x (such grids are
 * about one wave, so every CTA would otherwise wait on the weight at once, after its
 * reduction); wider rows stay lean, stream x past L1 and read the weight there after the
 * reduction. From rmsnorm.fwd.reload_min_n columns they hold nothing: x is read twice, the
 * second time from L1, which buys a fourth CTA per SM. Outputs go out through streaming
 * stores (1-3% on an H200 at M = 4096, whether outputs rotate or are shared across
 * benchmark sets; -2% only at N = 1024 shared), except the reload kernel's. With llama
 * casting and 16-bit weights of x's dtype, y is one packed multiply per two elements. Rows
 * wider than the block limits allow (or any row, with rmsnorm.fwd.items = 0) go to a looping
 * kernel that reads x twice (the second time mostly from L1 or L2). Packs are 16 bytes when
 * N, strides and pointers allow, single elements otherwise.
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
  int N, group, wf32, cast, stages, pdl;
  int pair; /* llama casting, weights of x's dtype, no offset: y by packed multiplies */
  float offset, eps, inv_n; /* inv_n: 1 / N, from the host */
};

/* The largest block per packs per thread (items 1, 2, 4, 8) and the CTAs of that size that
 * must fit an SM: at most 512 threads share a row from 2 packs up (wider rows take more packs
 * per thread: 2 resident rows of 512 threads move more than one of 1024), within 64
 * registers up to 4 packs. From ptxas's counts for bf16 (the hungriest dtype) so that
 * nothing spills. */
constexpr BlockLimits FWD_LIMITS{{1024, 512, 512, 256}, {1, 2, 2, 2}, 0};
/* The early-weight kernels at 2 packs within 42 registers (three CTAs of 512, six of 256):
 * 48 registers and five CTAs of 256 left N = 4096 at 84% of the roofline, 40 reach 88%. */
constexpr BlockLimits FWD_EARLY_LIMITS{{1024, 512, 512, 256}, {1, 3, 2, 2}, 0};
constexpr BlockLimits FWD_PIPE_LIMITS{{1024, 1024, 512, 256}, {1, 1, 1, 1}, 512};
/* reload: nothing held across the reduction, so 32 registers and a full SM of threads up
 * to 2 packs; the first read's packs need 42 at 4 (three CTAs of 512) and 64 at 8. */
constexpr BlockLimits FWD_RELOAD_LIMITS{{1024, 512, 512, 256}, {2, 4, 3, 4}, 0};
/* staged: any block up to 1024 threads within 32 registers, a full SM of threads. */
enum { STAGED_MAX_BLOCK = 1024, STAGED_MIN_CTAS = 2 };

/* y for one element from its input x, 1/rms r and weight W (W already rounded to T in
 * cast mode none). */
template <typename T>
__device__ __forceinline__ float rms_out(float x, float r, float W, int cast)
{
  return cast == NLK_CAST_GEMMA ? x * r * W : round_to<T>(x * r) * W;
}

template <typename T, int VEC, int ITEMS, bool RES, bool STREAM>
__device__ __forceinline__ void load_in(const FwdArgs &a, int64_t row, int lane, int G, int nvec,
                                        Pack<T, VEC> (&xv)[ITEMS], Pack<T, VEC> (&rv)[ITEMS])
{
  load_row<T, VEC, ITEMS, STREAM>(a.x, row, a.sx, lane, G, nvec, xv);
  if (RES)
    load_row<T, VEC, ITEMS, STREAM>(a.res, row, a.sres, lane, G, nvec, rv);
}

/* Adds a pack's squares to ss. RES (add_rmsnorm): first h = round(x + res) into x's pack
 * and out to res_out, which may be res itself (the caller has read the pack). */
template <typename T, int VEC, bool RES>
__device__ __forceinline__ void add_square(const FwdArgs &a, int64_t row, int v, Pack<T, VEC> &x,
                                           const Pack<T, VEC> &res, float &ss)
{
  float f[VEC];
  if (RES) {
    float rf[VEC];
    unpack(x, f);
    unpack(res, rf);
#pragma unroll
    for (int j = 0; j < VEC; j++)
      x.v[j] = from_f<T>(f[j] + rf[j]);
    store<T, VEC, true>(a.res_out, row, a.sres_out, v, x);
  }
  unpack(x, f);
#pragma unroll
  for (int j = 0; j < VEC; j++)
    ss += f[j] * f[j];
}

/* y for pack v of a row (y: its first pack) from its x (h for add_rmsnorm) pack p, the row's
 * 1/rms r and the weight of item i in wt, out through a streaming store (STREAM) or a plain
 * one. With llama casting and 16-bit weights of x's dtype and no offset (a.pair, decided on
 * the host), one packed multiply per two elements. The host's flag and the row's address
 * computed once took the one-row kernels' epilogue from 53 instructions a pack (the four
 * conditions reloaded and the address rebuilt for every pack) to about 40 (ncu, 4096 x 1024:
 * 393 -> 342 warp instructions a row), at the same register allocation. */
template <bool STREAM, typename T, int VEC, int ITEMS>
__device__ __forceinline__ void store_y(const FwdArgs &a, Pack<T, VEC> *y, int v, const Pack<T, VEC> &p,
                                        float r, const Weights<T, VEC, ITEMS> &wt, int i)
{
  Pack<T, VEC> o;
  float f[VEC];
  unpack(p, f);
  if constexpr (Pair<T>::ok && VEC % 2 == 0) {
    if (a.pair) {
      const Pack<T, VEC> wp = wt.pack(i, v);
#pragma unroll
      for (int j = 0; j < VEC; j += 2)
        mul_rounded(o.v + j, f[j] * r, f[j + 1] * r, wp.v + j);
      store_pack<STREAM>(y + v, o);
      return;
    }
  }
  float W[VEC];
  wt.get(i, v, W);
#pragma unroll
  for (int j = 0; j < VEC; j++)
    o.v[j] = from_f<T>(rms_out<T>(f[j], r, a.cast == NLK_CAST_NONE ? round_to<T>(W[j]) : W[j], a.cast));
  store_pack<STREAM>(y + v, o);
}

/* One row: residual add (add_rmsnorm: h = round(x + res) to res_out, which may be res
 * itself: this thread read the element before overwriting it), sum of squares, the group's
 * reduction (every thread of the CTA calls this the same number of times), y and rstd. */
template <typename T, int VEC, int ITEMS, bool RES>
__device__ __forceinline__ void process(const FwdArgs &a, int64_t row, bool active, int lane,
                                        int G, int nvec, Pack<T, VEC> (&xv)[ITEMS],
                                        const Pack<T, VEC> (&rv)[ITEMS],
                                        Weights<T, VEC, ITEMS> &wt, float (*red)[32],
                                        int &parity)
{
  float ss = 0.f;
  if (active) {
#pragma unroll
    for (int i = 0; i < ITEMS; i++) {
      const int v = lane + i * G;
      if (v < nvec)
        add_square<T, VEC, RES>(a, row, v, xv[i], rv[i], ss);
    }
  }
  ss = group_reduce(ss, G, red, parity);
  const float r = rsqrtf(ss * a.inv_n + a.eps);
  if (!active)
    return;
#pragma unroll
  for (int i = 0; i < ITEMS; i++)
    opaque(xv[i]);
  wt.refresh();
  if (lane == 0 && a.rstd)
    a.rstd[row] = r;
  Pack<T, VEC> *y = row_packs<T, VEC>(a.y, row, a.sy);
#pragma unroll
  for (int i = 0; i < ITEMS; i++) {
    const int v = lane + i * G;
    if (v < nvec)
      store_y<true>(a, y, v, xv[i], r, wt, i);
  }
}

/* row and blockrow: each group handles exactly one row. The weight is read after the
 * reduction, from L1 (the CTAs of an SM share it; x streams past it), or with EARLY
 * (rmsnorm.fwd.early_weight_max_n, rmsnorm only: add_rmsnorm's residual packs leave no
 * registers for it) together with x, its latency hidden behind x's, and held in registers
 * across the reduction; x then loads with the default policy, 2-3% faster on an H200. */
template <typename T, int VEC, int ITEMS, bool RES, bool EARLY>
__global__ void __launch_bounds__(FWD_LIMITS(ITEMS), (EARLY ? FWD_EARLY_LIMITS : FWD_LIMITS).ctas(ITEMS))
    rms_fwd_one(FwdArgs a)
{
  pdl_begin(a.pdl);
  const Group g(a.group);
  const int G = g.G, lane = g.lane, nvec = a.N / VEC;
  const int64_t row = g.one_row();
  const bool active = row < a.M;
  __shared__ float red[2][32];
  int parity = 0;
  Pack<T, VEC> xv[ITEMS], rv[ITEMS];
  if (active)
    load_in<T, VEC, ITEMS, RES, !EARLY>(a, row, lane, G, nvec, xv, rv);
  Weights<T, VEC, ITEMS> wt(a.w, a.wf32, a.offset, lane, G, nvec, EARLY && active);
  process<T, VEC, ITEMS, RES>(a, row, active, lane, G, nvec, xv, rv, wt, red, parity);
}

/* row and blockrow for rows from rmsnorm.fwd.reload_min_n (rmsnorm only): x is read twice
 * instead of held across the reduction, the second time from L1 (the first read asks L1 and
 * L2 to keep the lines, the second to drop them), so a thread holds no packs there: 32
 * registers and four CTAs of 512 threads per SM where the register-held row fits three. The
 * weight is read from L1 after the reduction. y goes out through plain stores: streaming
 * ones cost this kernel 3% at N = 8192 on an H200 (they help the others). */
template <typename T, int VEC, int ITEMS>
__global__ void __launch_bounds__(FWD_RELOAD_LIMITS(ITEMS), FWD_RELOAD_LIMITS.ctas(ITEMS))
    rms_fwd_reload(FwdArgs a)
{
  pdl_begin(a.pdl);
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
  if (lane == 0 && a.rstd)
    a.rstd[row] = r;
  const Weights<T, VEC, ITEMS> wt(a.w, a.wf32, a.offset, lane, G, nvec, false);
  Pack<T, VEC> *y = row_packs<T, VEC>(a.y, row, a.sy);
#pragma unroll
  for (int i = 0; i < ITEMS; i++) {
    const int v = lane + i * G;
    if (v < nvec)
      store_y<false>(a, y, v, load_l1<T, VEC, false>(pack_at<T, VEC>(a.x, row, a.sx, v)), r, wt,
                     i);
  }
}

/* persistent: CTAs stride over rows with a trip count uniform across the CTA (rows past M
 * idle but still join the barriers). Stage s of a thread's staging holds its x (and
 * residual) packs of the row s iterations ahead; each iteration tops the pipeline up, waits
 * for the oldest stage and works on it from registers. */
template <typename T, int VEC, int ITEMS, bool RES>
__global__ void __launch_bounds__(FWD_PIPE_LIMITS(ITEMS), FWD_PIPE_LIMITS.ctas(ITEMS)) rms_fwd_pipe(FwdArgs a)
{
  pdl_begin(a.pdl);
  using P = Pack<T, VEC>;
  const Group g(a.group);
  const int G = g.G, grp = g.idx, lane = g.lane, nvec = a.N / VEC, S = a.stages;
  const int64_t step = (int64_t)gridDim.x * g.per_cta;
  extern __shared__ __align__(16) float dyn[];
  __shared__ float red[2][32];
  int parity = 0;
  const Staging<P, ITEMS> st(dyn, S, RES ? 2 : 1);
  Weights<T, VEC, ITEMS> wt(a.w, a.wf32, a.offset, lane, G, nvec, true);

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
          xv[i] = *st.at(stage, 0, i);
          if (RES)
            rv[i] = *st.at(stage, 1, i);
        }
    process<T, VEC, ITEMS, RES>(a, row, active, lane, G, nvec, xv, rv, wt, red, parity);
    stage = stage + 1 == S ? 0 : stage + 1;
  }
  copy_wait(0);
}

/* staged: one CTA per row, copied whole into shared memory through cp.async, so a thread
 * holds no packs across the reduction (32 registers): an SM keeps as many rows in flight as
 * its threads and shared memory allow (eight 256-thread CTAs of 16 KB at N = 8192 bf16,
 * against three register-held rows of 512 threads). Each thread reads back only the slots
 * it copied, so the reduction is the only barrier; the weight comes from L1 after it.
 * Limits: the row (and residual) must fit one CTA's shared memory. */
template <typename T, int VEC, bool RES>
__global__ void __launch_bounds__(STAGED_MAX_BLOCK, STAGED_MIN_CTAS) rms_fwd_staged(FwdArgs a)
{
  pdl_begin(a.pdl);
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
  float ss = 0.f;
  for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
    P x = xs[v];
    add_square<T, VEC, RES>(a, row, v, x, RES ? rs[v] : x, ss);
    if (RES)
      xs[v] = x;
  }
  ss = group_reduce(ss, blockDim.x, red, parity);
  const float r = rsqrtf(ss * a.inv_n + a.eps);
  if (threadIdx.x == 0 && a.rstd)
    a.rstd[row] = r;
  const Weights<T, VEC, 1> wt(a.w, a.wf32, a.offset, 0, 0, nvec, false);
  P *y = row_packs<T, VEC>(a.y, row, a.sy);
#pragma unroll 2
  for (int v = threadIdx.x; v < nvec; v += blockDim.x)
    store_y<true>(a, y, v, xs[v], r, wt, 0);
}

/* Rows wider than registers hold: the CTA loops over the row twice, the second time
 * re-reading x (or h from res_out) and the weight. */
template <typename T, int VEC>
__global__ void __launch_bounds__(LOOP_BLOCK) rms_fwd_loop(FwdArgs a)
{
  pdl_begin(a.pdl);
  const int nvec = a.N / VEC;
  const Weights<T, VEC, 1> wt(a.w, a.wf32, a.offset, 0, 0, nvec, false);
  __shared__ float red[2][32];
  int parity = 0;
  for (int64_t row = blockIdx.x; row < a.M; row += gridDim.x) {
    const void *src = a.res ? a.res_out : a.x;
    const int64_t src_stride = a.res ? a.sres_out : a.sx;
    float ss = 0.f;
    for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
      Pack<T, VEC> xv = load<T, VEC, false>(a.x, row, a.sx, v);
      if (a.res)
        add_square<T, VEC, true>(a, row, v, xv, load<T, VEC>(a.res, row, a.sres, v), ss);
      else
        add_square<T, VEC, false>(a, row, v, xv, xv, ss);
    }
    ss = group_reduce(ss, blockDim.x, red, parity);
    const float r = rsqrtf(ss * a.inv_n + a.eps);
    if (threadIdx.x == 0 && a.rstd)
      a.rstd[row] = r;
    Pack<T, VEC> *y = row_packs<T, VEC>(a.y, row, a.sy);
    for (int v = threadIdx.x; v < nvec; v += blockDim.x)
      store_y<true>(a, y, v, load<T, VEC>(src, row, src_stride, v), r, wt, 0);
  }
}

enum Mapping { ROW, BLOCKROW, PERSISTENT, STAGED };

FwdArgs fwd_args(const nlk_norm *k, int group, int stages)
{
  return FwdArgs{k->x, k->res, k->w, k->y, k->res_out, k->rstd, k->sx, k->sres, k->sy,
                 k->sres_out, k->M, (int)k->N, group, k->wdt == NLK_F32, k->cast, stages, k->pdl,
                 k->cast == NLK_CAST_LLAMA && k->w && k->wdt == k->dt && k->offset == 0.f,
                 k->offset, k->eps, 1.f / (float)k->N};
}

/* The one-row kernels: x held in registers across the reduction with the weight read after
 * it (LEAN) or loaded with x (EARLY), or x read twice (RELOAD). */
enum OneRow { LEAN, EARLY, RELOAD };

/* Everything a launch decides before it starts. */
struct Plan {
  RowCfg c;
  bool pipe;     /* the persistent kernel (else one-row or looping) */
  OneRow one;    /* which one-row kernel (row, blockrow) */
  int stages;
  size_t smem;
  const void *kernel;
};

template <typename T, int VEC, bool RES>
const void *kernel_for(const RowCfg &c, bool pipe, OneRow one)
{
  if (c.items == 0)
    return (const void *)rms_fwd_loop<T, VEC>;
  const void *kp = NULL;
  with_items(c.items, [&](auto I) {
    constexpr int IT = decltype(I)::value;
    if (pipe)
      kp = (const void *)rms_fwd_pipe<T, VEC, IT, RES>;
    else if constexpr (!RES)
      kp = one == RELOAD ? (const void *)rms_fwd_reload<T, VEC, IT>
           : one == EARLY ? (const void *)rms_fwd_one<T, VEC, IT, false, true>
                          : (const void *)rms_fwd_one<T, VEC, IT, false, false>;
    else
      kp = (const void *)rms_fwd_one<T, VEC, IT, true, false>;
    return 0;
  });
  return kp;
}

/* persistent stages rmsnorm.fwd.stages rows, fewer when one group's staging would not fit
 * the shared memory; a row too wide for even two stages runs the one-row kernels. */
template <typename T>
Plan make_plan(const nlk_norm *k, Mapping m)
{
  Plan p;
  const int streams = k->res ? 2 : 1;
  const RowMode mode = m == ROW ? CTA_ROWS : m == BLOCKROW ? WARP_ROWS : MANY_ROWS;
  p.pipe = false;
  p.one = k->res ? LEAN : k->reload ? RELOAD : k->early_weight ? EARLY : LEAN;
  p.stages = 0;
  p.smem = 0;
  if (m == PERSISTENT) {
    const int pack = pick_vec(k, sizeof(T)) * (int)sizeof(T);
    p.stages = fit_stages(k, sizeof(T), mode, FWD_PIPE_LIMITS, streams, 0, &p.c);
    p.pipe = p.stages != 0;
    if (p.pipe)
      p.smem = (size_t)p.stages * streams * p.c.items * p.c.block * pack;
  }
  if (!p.pipe)
    p.c = row_cfg(k, sizeof(T), mode, FWD_LIMITS, k->block_pref, SmemCost{0, 0, 0});
  return p;
}

template <typename T, int VEC>
int launch_vec(nlk_norm *k, Plan &p)
{
  FwdArgs a = fwd_args(k, p.c.group, p.stages);
  p.kernel = k->res ? kernel_for<T, VEC, true>(p.c, p.pipe, p.one)
                    : kernel_for<T, VEC, false>(p.c, p.pipe, p.one);
  if (allow_smem(p.kernel, p.smem) != cudaSuccess)
    return NLK_ERR_UNSUPPORTED;
  const int64_t per_cta = rows_per_cta(p.c), groups = (k->M + per_cta - 1) / per_cta;
  int64_t grid = groups;
  if (p.pipe || p.c.items == 0) {
    /* the looping kernel re-reads each row in its second pass, from L2 while the rows in
     * flight fit it: fewer CTAs than fit can be faster (rmsnorm.fwd.loop_ctas_per_sm) */
    const int want = p.pipe ? k->ctas_per_sm : k->loop_ctas;
    const int per_sm = want > 0 ? want : occupancy(p.kernel, p.c.block, p.smem);
    grid = (int64_t)k->sm_count * per_sm;
    if (grid > groups)
      grid = groups;
  }
  k->grid = (int32_t)grid;
  k->block = p.c.block;
  void *args[] = {&a};
  return launch_norm(k, p.kernel, grid, p.c.block, p.smem, args);
}

/* staged: block = the threads that give each about k->items packs of the row (32 to 1024),
 * dynamic shared memory = the row and, for add_rmsnorm, its residual. */
template <typename T, int VEC>
int launch_staged(nlk_norm *k)
{
  FwdArgs a = fwd_args(k, 0, 0);
  const int items = k->items < 1 ? 1 : k->items;
  const int64_t nvec = k->N / VEC;
  int block = pow2ceil((nvec + items - 1) / items);
  block = block < 32 ? 32 : block > STAGED_MAX_BLOCK ? STAGED_MAX_BLOCK : block;
  const size_t smem = (size_t)(k->res ? 2 : 1) * k->N * sizeof(T);
  const void *kernel = k->res ? (const void *)rms_fwd_staged<T, VEC, true>
                              : (const void *)rms_fwd_staged<T, VEC, false>;
  if ((int64_t)smem > smem_budget() || allow_smem(kernel, smem) != cudaSuccess)
    return NLK_ERR_UNSUPPORTED;
  k->grid = (int32_t)k->M;
  k->block = block;
  void *args[] = {&a};
  return launch_norm(k, kernel, k->M, block, smem, args);
}

int launch(nlk_norm *k, Mapping m)
{
  return with_dtype(k->dt, [&](auto t) {
    using T = decltype(t);
    if (m == STAGED)
      return pick_vec(k, sizeof(T)) == 1 ? launch_staged<T, 1>(k) : launch_staged<T, 16 / sizeof(T)>(k);
    Plan p = make_plan<T>(k, m);
    if (m == BLOCKROW && p.c.items == 0)
      return (int)NLK_ERR_UNSUPPORTED;
    return p.c.vec == 1 ? launch_vec<T, 1>(k, p) : launch_vec<T, 16 / sizeof(T)>(k, p);
  });
}

} // namespace
} // namespace nlk

extern "C" {
int nlk_cuda_rms_fwd_row(nlk_norm *k) { return nlk::launch(k, nlk::ROW); }
int nlk_cuda_rms_fwd_blockrow(nlk_norm *k) { return nlk::launch(k, nlk::BLOCKROW); }
int nlk_cuda_rms_fwd_persistent(nlk_norm *k) { return nlk::launch(k, nlk::PERSISTENT); }
int nlk_cuda_rms_fwd_staged(nlk_norm *k) { return nlk::launch(k, nlk::STAGED); }

int64_t nlk_cuda_staged_max_n(const nlk_norm *k)
{
  return nlk::smem_budget() / ((k->res ? 2 : 1) * nlk_dtype_size(k->dt));
}
}
