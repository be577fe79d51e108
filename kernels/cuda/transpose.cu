/*
 * transpose.cu: the transpose op (transpose.fwd.*): yt = x transposed ([N, M]), in x's dtype
 * or cast to fp8 with a scale, with amax (max |x|) and, for cast_transpose, the row-major
 * cast copy y written from the same loads. The core also runs `tiled` after a norm kernel for
 * the external transposed copy of the norm's y (fp8 or not: a copy of its bits).
 *
 * Strategies (nlk_cuda_transpose, at the end):
 *   naive  one element per thread: a warp reads 32 consecutive elements of an x row
 *          (coalesced) and writes them 32 yt rows apart (a sector per element): the baseline.
 *   tiled  a CTA moves a transpose.tile_m x transpose.tile_n tile through shared memory:
 *          16-byte cp.async copies along x's rows (the whole tile in flight, no registers
 *          held), 16-byte stores along yt's rows, the tile XOR-swizzled so that neither side
 *          has bank conflicts (from 128 bytes of a tile row); unaligned launches go element
 *          by element through registers.
 * Elements: out of the same dtype without a scale, the bits are copied (COPY); into fp8 each
 * is satfinite(rne(x * scale)) of the fp32 product (device.cuh's to_fp8: the CPU's bits).
 * Current scaling: an amax pass over x first, then the cast pass computes the scale from it
 * (every CTA the same bits) and writes it out; run info says "current: two passes".
 * Accesses are 16 bytes when every base pointer and row stride allows (16-byte aligned), and
 * element by element otherwise, as the norm kernels choose their pack width.
 */
#include "nlk_cuda.h"
#include "plan.cuh"
#include "tile.cuh"

namespace nlk {

namespace {

/* TR_THREADS per CTA; LOAD_BATCH: a tiled thread's 16-byte loads in flight before it converts
 * and stores them (the casting path; a plain copy of the bits goes by cp.async). Loads in
 * flight per SM is what a transpose's speed comes from: each CTA waits for its whole tile
 * before it stores any of it. Capping the casting path at 64 registers (a fourth CTA per SM)
 * spills from 36 bytes (bf16) to 450 (fp8 in) on sm_90. */
enum { TR_THREADS = 256, NAIVE_ROWS = TR_THREADS / 32, LOAD_BATCH = 4 };

/* The kernels' one argument. */
struct TrArgs {
  const void *x;
  void *y, *yt;         /* y: the row-major cast copy, optional */
  int64_t sx, sy, syt;
  int M, N;
  const float *scale;   /* delayed: read (NULL: 1) */
  float *amax;          /* delayed: reduced into when given; current: read for the scale */
  float *scale_out;     /* current: the scale computed goes here (NULL: nowhere) */
  int tile_m, tile_n;
  bool current;         /* the scale from *amax, which the amax pass wrote */
  bool vec;             /* 16-byte accesses (pointers and strides allow them) */
  bool track;           /* reduce |x| into *amax */
  bool last_read;       /* x (a norm's y, kept in L2) is read for the last time: evict_first */
};

template <typename TI, Cast C> __device__ __forceinline__ OutT<TI, C> cast(TI v, float scale)
{
  if constexpr (C == Cast::COPY)
    return v;
  else
    return to_fp8<OutT<TI, C>>(to_f(v), scale);
}

/* A pack cast (to_fp8_pack: four conversions per word), |x| into am; a copy as it is. */
template <typename TI, Cast C, int VI>
__device__ __forceinline__ Pack<OutT<TI, C>, VI> cast_pack(const Pack<TI, VI> &in, float scale, float &am)
{
  if constexpr (C == Cast::COPY) {
    return in;
  } else {
    float f[VI];
    unpack(in, f);
    return to_fp8_pack<OutT<TI, C>>(f, scale, am);
  }
}

/* The scale of a cast pass: current scaling's from amax (CTA 0 writes it out), delayed's as
 * given. */
template <Cast C> __device__ __forceinline__ float pass_scale(const TrArgs &a)
{
  if (C == Cast::COPY)
    return 1.f;
  if (!a.current)
    return a.scale ? *a.scale : 1.f;
  const float s = scale_from_amax(*a.amax, fp8_max<C == Cast::E4M3 ? NLK_F8E4M3 : NLK_F8E5M2>());
  if (a.scale_out && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0)
    *a.scale_out = s;
  return s;
}

/* naive: thread t of a CTA takes element (row0 + t / 32, col0 + t % 32); the grid covers 32
 * columns per CTA along x and NAIVE_ROWS rows along y, striding over rows past 65535 CTAs.
 * Hazard: none (each element is its own). */
template <typename TI, Cast C>
__global__ void __launch_bounds__(TR_THREADS) tr_naive(TrArgs a)
{
  using TO = OutT<TI, C>;
  __shared__ unsigned red[32];
  const float scale = pass_scale<C>(a);
  const int j = blockIdx.x * 32 + (threadIdx.x & 31);
  float am = 0.f;
  for (int64_t i = (int64_t)blockIdx.y * NAIVE_ROWS + (threadIdx.x >> 5); i < a.M;
       i += (int64_t)gridDim.y * NAIVE_ROWS) {
    if (j >= a.N)
      continue;
    const TI v = static_cast<const TI *>(a.x)[i * a.sx + j];
    if (a.track)
      am = max_abs_nan(am, to_f(v));
    const TO o = cast<TI, C>(v, scale);
    static_cast<TO *>(a.yt)[(int64_t)j * a.syt + i] = o;
    if (a.y)
      static_cast<TO *>(a.y)[i * a.sy + j] = o;
  }
  if (a.track)
    amax_commit(a.amax, am, red);
}

/* ---- tiled ---- */

/* tiled: one CTA per tile_m x tile_n tile (tiles of rows past 65535 CTAs in y: a stride),
 * the last rows' tiles first: a norm's external yt transposes y right after the norm wrote
 * it, and its last rows are then the ones still in L2, all of them where the norm stored y
 * for L2 to keep (last_read: read evict_first, which lifts that; docs/kernels.md). Load, STAGE
 * (16-byte aligned pointers and strides): every 16-byte chunk of the thread's
 * share of the tile goes global -> shared by cp.async, all in flight at once and holding no
 * registers; the tile keeps x's elements, and the thread then reads its own chunks back for
 * amax and the row-major cast copy y. Otherwise (element by element) the thread loads
 * LOAD_BATCH chunks into registers, converts them and stores the tile in TO. Then the tile's
 * transposing read (tile.cuh), which casts the staged elements or copies the converted ones.
 * (Converting once, into an fp8 tile that the read permutes, lost: docs/kernels.md.) Rows
 * past M and columns past N are neither loaded nor stored (their tile slots hold stale data
 * no store reads). Limits: tile_m >= V and tile_n x sizeof(TI) >= 16 (supports). Hazards: a
 * barrier between the two phases and one before the next tile's loads (the tile is reused);
 * the read-back reads only the thread's own cp.async copies. */
template <typename TI, Cast C, bool STAGE>
__global__ void __launch_bounds__(TR_THREADS) tr_tiled(TrArgs a)
{
  using TO = OutT<TI, C>;
  using TS = std::conditional_t<STAGE, TI, TO>; /* the tile's elements */
  constexpr int VI = 16 / sizeof(TI), LVI = VI == 16 ? 4 : VI == 8 ? 3 : 2;
  extern __shared__ __align__(16) unsigned char tile[];
  __shared__ unsigned red[32];
  const float scale = pass_scale<C>(a);
  const Tile<TS, 16 / sizeof(TO)> t(tile, a.tile_m, a.tile_n);
  const int ltm = __ffs(a.tile_m) - 1, ltn = __ffs(a.tile_n) - 1;
  const int lcpr = ltn - LVI; /* 16-byte chunks of x per tile row */
  const int loads = a.tile_m << lcpr;
  const int tiles_m = (a.M + a.tile_m - 1) >> ltm;
  const int j0 = blockIdx.x << ltn;
  float am = 0.f;
  /* chunk c of a tile at row i0: its tile row and column, its place in x, whether it is in */
  struct Chunk { int r, col, j; int64_t i; bool in; };
  auto chunk = [&](int c, int i0) {
    Chunk k;
    k.r = c >> lcpr;
    k.col = (c & ((1 << lcpr) - 1)) << LVI;
    k.i = (int64_t)i0 + k.r;
    k.j = j0 + k.col;
    k.in = c < loads && k.i < a.M && k.j < a.N;
    return k;
  };
  /* y's copy of a chunk; a chunk loaded element by element has zeros past N, no part of amax */
  auto store_y = [&](const Chunk &k, const Pack<TO, VI> &out, bool whole) {
    if (whole) {
      store<TO, VI, true>(a.y, k.i, a.sy, k.j / VI, out);
      return;
    }
#pragma unroll
    for (int e = 0; e < VI; e++)
      if (k.j + e < a.N)
        static_cast<TO *>(a.y)[k.i * a.sy + k.j + e] = out.v[e];
  };

  for (int tr = blockIdx.y; tr < tiles_m; tr += gridDim.y) {
    const int i0 = (tiles_m - 1 - tr) << ltm;
    if constexpr (STAGE) {
      t.stage(a.x, a.sx, i0, j0, a.M, a.N, a.tile_m, a.tile_n, true, a.last_read);
      copy_wait(0);
      if (a.track || a.y) {
        for (int c = threadIdx.x; c < loads; c += TR_THREADS) {
          const Chunk k = chunk(c, i0);
          if (!k.in)
            continue;
          const Pack<TO, VI> out = cast_pack<TI, C>(*t.template at<Pack<TI, VI>>(k.r, k.col), scale, am);
          if (a.y)
            store_y(k, out, k.j + VI <= a.N);
        }
      }
    } else {
      for (int c0 = threadIdx.x; c0 < loads; c0 += TR_THREADS * LOAD_BATCH) {
        Pack<TI, VI> in[LOAD_BATCH];
#pragma unroll
        for (int b = 0; b < LOAD_BATCH; b++) {
          const Chunk k = chunk(c0 + b * TR_THREADS, i0);
          if (k.in)
            in[b] = pack_elems<TI, VI>(a.x, k.i, a.sx, k.j, a.N);
        }
#pragma unroll
        for (int b = 0; b < LOAD_BATCH; b++) {
          const Chunk k = chunk(c0 + b * TR_THREADS, i0);
          if (!k.in)
            continue;
          const Pack<TO, VI> out = cast_pack<TI, C>(in[b], scale, am);
          if (a.y)
            store_y(k, out, false);
          *t.template at<Pack<TO, VI>>(k.r, k.col) = out;
        }
      }
    }
    __syncthreads();
    t.template put_transposed<STAGE ? C : Cast::COPY>(i0, j0, a.M, a.N, a.yt, a.syt, STAGE, scale);
    __syncthreads();
  }
  if (a.track)
    amax_commit(a.amax, am, red);
}

/* Current scaling's first pass: max |x| into *amax (cleared before), 16-byte chunks when
 * a.vec, a grid stride over every row's chunks. */
template <typename TI>
__global__ void __launch_bounds__(TR_THREADS) tr_amax(TrArgs a)
{
  constexpr int VI = 16 / sizeof(TI);
  __shared__ unsigned red[32];
  const int per = a.vec ? VI : 1;
  const int64_t nch = (a.N + per - 1) / per, total = (int64_t)a.M * nch;
  float am = 0.f;
  for (int64_t c = (int64_t)blockIdx.x * TR_THREADS + threadIdx.x; c < total;
       c += (int64_t)gridDim.x * TR_THREADS) {
    const int64_t i = c / nch;
    const int j = (int)(c % nch) * per;
    if (a.vec && j + VI <= a.N) {
      const Pack<TI, VI> p = load<TI, VI>(a.x, i, a.sx, j / VI);
#pragma unroll
      for (int e = 0; e < VI; e++)
        am = max_abs_nan(am, to_f(p.v[e]));
    } else {
      for (int e = 0; e < per && j + e < a.N; e++)
        am = max_abs_nan(am, to_f(static_cast<const TI *>(a.x)[i * a.sx + j + e]));
    }
  }
  amax_commit(a.amax, am, red);
}

/* ---- host side ---- */

/* Calls f(T{}) for x's dtype: every dtype the CUDA transpose takes. */
template <typename F> int with_tr_dtype(int dt, F &&f)
{
  switch (dt) {
  case NLK_F32: return f(float{});
  case NLK_F16: return f(__half{});
  case NLK_BF16: return f(__nv_bfloat16{});
  case NLK_F8E4M3: return f(__nv_fp8_e4m3{});
  case NLK_F8E5M2: return f(__nv_fp8_e5m2{});
  default: return NLK_ERR_UNSUPPORTED;
  }
}

/* The same bits out (yt of x's dtype, unscaled), or fp8 with a scale. */
Cast cast_of(const nlk_norm *k)
{
  if (k->ydt == k->dt && (!nlk_is_fp8(k->ydt) || (!k->scale && k->scaling == NLK_SCALING_DELAYED)))
    return Cast::COPY;
  return k->ydt == NLK_F8E4M3 ? Cast::E4M3 : Cast::E5M2;
}

template <typename F> int with_cast(Cast c, F &&f)
{
  switch (c) {
  case Cast::COPY: return f(std::integral_constant<Cast, Cast::COPY>{});
  case Cast::E4M3: return f(std::integral_constant<Cast, Cast::E4M3>{});
  default: return f(std::integral_constant<Cast, Cast::E5M2>{});
  }
}

TrArgs tr_args(const nlk_norm *k)
{
  const bool current = nlk_is_fp8(k->ydt) && k->scaling == NLK_SCALING_CURRENT;
  const int ei = nlk_dtype_size(k->dt), eo = nlk_dtype_size(k->ydt);
  TrArgs a{};
  a.x = k->x;
  a.y = k->y;
  a.yt = k->yt;
  a.sx = k->sx;
  a.sy = k->sy;
  a.syt = k->syt;
  a.M = (int)k->M;
  a.N = (int)k->N;
  a.scale = current ? NULL : k->scale;
  a.amax = k->amax;
  a.scale_out = current ? k->scale : NULL;
  a.tile_m = k->tr.tile_m;
  a.tile_n = k->tr.tile_n;
  a.current = current;
  a.vec = aligned16(k->x, k->sx, ei) && aligned16(k->y, k->sy, eo) && aligned16(k->yt, k->syt, eo);
  a.track = k->amax && !current && nlk_is_fp8(k->ydt);
  a.last_read = k->keep_y != 0;
  return a;
}

/* Clears amax and, under current scaling, runs the amax pass: the cast pass then reads it. */
template <typename TI> int amax_pass(nlk_norm *k, TrArgs &a)
{
  cudaStream_t s = (cudaStream_t)k->stream;
  if (!k->amax || !nlk_is_fp8(k->ydt))
    return NLK_OK;
  cudaError_t e = clear_amax(k);
  if (e != cudaSuccess || !a.current)
    return cuda_result(k, e);
  const int64_t per = a.vec ? 16 / (int)sizeof(TI) : 1;
  const int64_t chunks = k->M * ((k->N + per - 1) / per);
  const int64_t want = (chunks + TR_THREADS - 1) / TR_THREADS, cap = (int64_t)k->sm_count * 8;
  tr_amax<TI><<<(unsigned)(want < cap ? want : cap), TR_THREADS, 0, s>>>(a);
  k->current_passes = 2;
  k->extra_bytes = k->M * k->N * (int64_t)sizeof(TI); /* x read twice */
  return cuda_result(k, cudaGetLastError());
}

/* Calls f(a, TI{}, Cast constant) for x's dtype and the cast, after clearing amax and, under
 * current scaling, its pass: what both launchers share. */
template <typename F> int with_pass(nlk_norm *k, F &&f)
{
  TrArgs a = tr_args(k);
  return with_tr_dtype(k->dt, [&](auto ti) {
    const int rc = amax_pass<decltype(ti)>(k, a);
    if (rc != NLK_OK)
      return rc;
    return with_cast(cast_of(k), [&](auto c) { return f(a, ti, c); });
  });
}

/* Launches a transpose kernel of TR_THREADS threads and records it in run info. */
int launch_tr(nlk_norm *k, const void *kern, dim3 grid, size_t smem, TrArgs &a)
{
  void *args[] = {&a};
  k->grid = (int32_t)(grid.x * grid.y);
  k->block = TR_THREADS;
  k->kernel = kern;
  k->resident = occupancy(k, kern, TR_THREADS, smem);
  return cuda_result(k, cudaLaunchKernel(kern, grid, TR_THREADS, args, smem, (cudaStream_t)k->stream));
}

int launch_naive(nlk_norm *k)
{
  return with_pass(k, [&](TrArgs &a, auto ti, auto c) {
    const int64_t rows = (k->M + NAIVE_ROWS - 1) / NAIVE_ROWS;
    const dim3 grid((unsigned)((k->N + 31) / 32), (unsigned)(rows < 65535 ? rows : 65535));
    return launch_tr(k, (const void *)tr_naive<decltype(ti), decltype(c)::value>, grid, 0, a);
  });
}

/* The tiled kernel's shared memory: the tile of x's elements (staged through cp.async), or of
 * the output's (element by element). */
size_t tile_bytes(const nlk_norm *k, bool stage)
{
  const int ei = nlk_dtype_size(k->dt), eo = nlk_dtype_size(k->ydt);
  return (size_t)k->tr.tile_m * k->tr.tile_n * (stage ? ei : eo);
}

int launch_tiled(nlk_norm *k)
{
  return with_pass(k, [&](TrArgs &a, auto ti, auto c) {
    using TI = decltype(ti);
    constexpr Cast C = decltype(c)::value;
    const void *kern = a.vec ? (const void *)tr_tiled<TI, C, true> : (const void *)tr_tiled<TI, C, false>;
    const size_t smem = tile_bytes(k, a.vec);
    /* the largest carveout: the tiles, not the L1, bound the CTAs per SM */
    const cudaError_t e = allow_smem(k, kern, smem, true);
    if (e != cudaSuccess)
      return cuda_result(k, e);
    const int64_t tiles_m = (k->M + a.tile_m - 1) / a.tile_m;
    const dim3 grid((unsigned)((k->N + a.tile_n - 1) / a.tile_n),
                    (unsigned)(tiles_m < 65535 ? tiles_m : 65535));
    return launch_tr(k, kern, grid, smem, a);
  });
}

/* Both: M and N within int (grid x covers N / 32 or N / tile_n CTAs). */
int shape_supports(const nlk_norm *k, char *why, size_t cap)
{
  const int64_t lim = ((int64_t)1 << 31) - 1;
  if (k->M <= lim && k->N <= lim)
    return NLK_OK;
  snprintf(why, cap, "M = %lld, N = %lld: the CUDA transposes take M, N < 2^31", (long long)k->M,
           (long long)k->N);
  return NLK_ERR_UNSUPPORTED;
}

/* tiled: a tile of powers of two, at least one 16-byte chunk of x per tile row and one yt
 * chunk (16 bytes of output) per tile column, within a CTA's shared memory. */
int tiled_supports(const nlk_norm *k, char *why, size_t cap)
{
  const int tm = k->tr.tile_m, tn = k->tr.tile_n;
  const int ei = nlk_dtype_size(k->dt), eo = nlk_dtype_size(k->ydt);
  if (shape_supports(k, why, cap) != NLK_OK)
    return NLK_ERR_UNSUPPORTED;
  if (tm < 1 || tn < 1 || (tm & (tm - 1)) || (tn & (tn - 1))) {
    snprintf(why, cap, "the tile %d x %d (transpose.tile_m x transpose.tile_n) is not of powers of two",
             tm, tn);
    return NLK_ERR_UNSUPPORTED;
  }
  if (tn * ei < 16 || tm * eo < 16 || tn * eo < 16) {
    snprintf(why, cap, "the tile %d x %d is too small for %s to %s: tile_n >= %d and tile_m >= %d",
             tm, tn, nlk_dtype_name(k->dt), nlk_dtype_name(k->ydt), 16 / (ei < eo ? ei : eo),
             16 / eo);
    return NLK_ERR_UNSUPPORTED;
  }
  const size_t bytes = tile_bytes(k, true); /* the larger of the two layouts */
  if ((int64_t)bytes > k->smem_optin - 1024) {
    snprintf(why, cap, "the tile %d x %d for %s to %s (%zu bytes) does not fit a CTA's shared "
             "memory (%lld bytes)", tm, tn, nlk_dtype_name(k->dt), nlk_dtype_name(k->ydt), bytes,
             (long long)(k->smem_optin - 1024));
    return NLK_ERR_UNSUPPORTED;
  }
  return NLK_OK;
}

} // namespace

} // namespace nlk

extern "C" const nlk_strategy nlk_cuda_transpose[] = {
  {"naive", NLK_FWD, nlk::launch_naive, NULL, nlk::shape_supports, NULL},
  {"tiled", NLK_FWD, nlk::launch_tiled, NULL, nlk::tiled_supports, NULL},
  {NULL, 0, NULL, NULL, NULL, NULL},
};
