/*
 * reduce.cu: the backward's weight-gradient reductions: dW (and, with LayerNorm, dB) as the
 * column sums of the fp32 partial rows the strategies leave in their workspace, and the
 * conversion of an atomic reduction's fp32 accumulator into their dtypes. Deterministic: a
 * fixed summation order whatever the launch.
 */
#include "device.cuh"
#include "plan.cuh"
#include "reduce.cuh"

namespace nlk {

namespace {

/* Where k's summed columns go. */
GradOut grad_out(const nlk_norm *k)
{
  const GradCols g = grad_cols(k);
  return GradOut{k->dw, g.db ? k->db : NULL, k->wdt, k->bdt, (int)g.db_at};
}

/* Drops a 128-byte line from L2 without writing it back (sm_80 on; elsewhere a no-op). */
__device__ __forceinline__ void discard_line(const float *p)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("discard.global.L2 [%0], 128;" ::"l"(p) : "memory");
#endif
}

/* G[col] = sum over rows p of P[p][col] (N: the partial rows' width), stored by `out`, in row
 * order within each of 16 row lanes, then lane order: deterministic, and the same bits for
 * either V. A thread sums V adjacent columns (16-byte loads when V = 4) with 8 of its rows in
 * flight, and the rows left after the last 8 together too, not one round trip each (clusters
 * leave few partial rows); the partials were just written and mostly come from L2, so round
 * trips to L2, not DRAM, bound it. Whole batches stay unpredicated: behind predicates ptxas
 * puts the first add before the last load, a second round trip (measured slower, as were 16
 * rows in flight: docs/kernels.md). With `discard` (rows of whole 128-byte lines) each warp
 * then drops the lines it has read: the partials are scratch, and left dirty in L2 they would
 * be written back to DRAM during the next kernel. With `wait` (launched with programmatic
 * dependent launch) it first waits for the kernel that wrote P. */
template <int V>
__global__ void __launch_bounds__(512) dw_reduce(const float *P, int64_t rows, int N, bool discard,
                                                 GradOut out, bool wait)
{
  if (wait)
    pdl_wait();
  using F = std::conditional_t<V == 4, float4, float>;
  __shared__ __align__(16) float red[16][32 * V];
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const int col = (blockIdx.x * 32 + tx) * V;
  float acc[V] = {};
  auto add = [&](const F &f) {
    const float *e = reinterpret_cast<const float *>(&f);
#pragma unroll
    for (int j = 0; j < V; j++)
      acc[j] += e[j];
  };
  /* lanes past N load nothing but keep the warp together for __syncwarp; the lanes whose V
   * columns start a line drop it once the whole warp has read it */
  const bool in = col < N, drop = discard && in && tx % (32 / V) == 0;
  /* K of the lane's rows from p, the loads first: 8 whole, or the rest (at most 7) up to
   * `rows` */
  auto batch = [&](int64_t p, auto count) {
    constexpr int K = decltype(count)::value;
    auto has = [&](int k) { return K == 8 || p + 16 * k < rows; };
    F f[K];
    if (in) {
#pragma unroll
      for (int k = 0; k < K; k++)
        if (has(k))
          f[k] = __ldcs(reinterpret_cast<const F *>(P + (p + 16 * k) * N + col));
#pragma unroll
      for (int k = 0; k < K; k++)
        if (has(k))
          add(f[k]);
    }
    __syncwarp();
    if (drop)
#pragma unroll
      for (int k = 0; k < K; k++)
        if (has(k))
          discard_line(P + (p + 16 * k) * N + col);
  };
  int64_t p = ty;
  for (; p + 7 * 16 < rows; p += 8 * 16)
    batch(p, std::integral_constant<int, 8>{});
  if (p < rows)
    batch(p, std::integral_constant<int, 7>{});
#pragma unroll
  for (int j = 0; j < V; j++)
    red[ty][tx * V + j] = acc[j];
  __syncthreads();
  const int t = threadIdx.x, c = blockIdx.x * 32 * V + t;
  if (t < 32 * V && c < N) {
    float s = 0.f;
    for (int y = 0; y < 16; y++)
      s += red[y][t];
    out.store(c, s);
  }
}

/* The atomic reduction's fp32 accumulator into the gradients' dtypes (an fp32 dW alone is
 * accumulated in place). */
__global__ void dw_convert(const float *acc, int N, GradOut out)
{
  for (int col = blockIdx.x * blockDim.x + threadIdx.x; col < N; col += gridDim.x * blockDim.x)
    out.store(col, acc[col]);
}

} // namespace

/* Four columns per thread where N allows and the grid of N / 128 CTAs still covers half the
 * SMs (on fewer, the per-SM share of the partials takes longer than the latency it hides).
 * drop: the buffer's lines may be discarded once read, where rows are whole lines. */
int reduce_partials(nlk_norm *k, const float *P, int64_t rows, bool drop, bool pdl)
{
  /* not const: the launch takes their addresses, in dw_reduce's parameter order */
  int N = (int)grad_cols(k).pw;
  bool lines = drop && N % 32 == 0;
  GradOut out = grad_out(k);
  void *args[] = {&P, &rows, &N, &lines, &out, &pdl};
  const bool wide = N % 4 == 0 && (int64_t)N / 128 >= k->sm_count / 2;
  return launch_kernel(k, wide ? (const void *)dw_reduce<4> : (const void *)dw_reduce<1>,
                       wide ? (N + 127) / 128 : (N + 31) / 32, 512, 0, args, 1, 1, pdl);
}

int convert_accum(nlk_norm *k, const float *acc)
{
  const int N = (int)grad_cols(k).pw;
  dw_convert<<<(unsigned)((N + 255) / 256), 256, 0, (cudaStream_t)k->stream>>>(acc, N, grad_out(k));
  return cuda_result(k, cudaGetLastError());
}

} // namespace nlk
