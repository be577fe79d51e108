/*
 * cuda.c: the CUDA runtime behind a small C interface for the rest of the core. Each device
 * gets one non-blocking stream per context (so launches can be captured into graphs), a
 * pair of timing events, and lazily an L2-flush buffer. Every call is checked; errors that
 * poison the device context are latched on the nl_ctx so later calls fail fast.
 * Without NL_HAVE_CUDA every entry point reports NL_ENODEV.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#ifdef NL_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cuda/nlk_cuda.h"

struct nl_cuda_state {
  cudaStream_t stream;
  cudaEvent_t start, stop;
  void *flush;
  size_t flush_bytes;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  unsigned int *sync;   /* grid-barrier words, zeroed once */
};

int nl__cuda_count(void)
{
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

/* Errors after which the CUDA context cannot be used again. */
static int is_sticky(cudaError_t e)
{
  switch (e) {
  case cudaErrorIllegalAddress:
  case cudaErrorLaunchFailure:
  case cudaErrorHardwareStackError:
  case cudaErrorIllegalInstruction:
  case cudaErrorMisalignedAddress:
  case cudaErrorInvalidAddressSpace:
  case cudaErrorInvalidPc:
  case cudaErrorAssert:
  case cudaErrorLaunchTimeout:
  case cudaErrorECCUncorrectable:
    return 1;
  default:
    return 0;
  }
}

nl_status nl__cuda_check(nl_ctx *ctx, int err, const char *what)
{
  cudaError_t e = (cudaError_t)err;
  if (e == cudaSuccess)
    return NL_OK;
  cudaGetLastError(); /* clear a non-sticky error so the next call starts clean */
  nl__err(ctx, NL_ECUDA, "%s: %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
  if (is_sticky(e)) {
    ctx->sticky = NL_ECUDA;
    {
      size_t len = strlen(ctx->err);
      snprintf(ctx->err + len, sizeof ctx->err - len,
               " (fatal: the CUDA context is unusable; restart the process)");
    }
  }
  return NL_ECUDA;
}

#define CK(call, what)                                                                   \
  do {                                                                                   \
    cudaError_t e_ = (call);                                                             \
    if (e_ != cudaSuccess)                                                               \
      return nl__cuda_check(ctx, (int)e_, what);                                         \
  } while (0)

static nl_status state(nl_ctx *ctx, int dev, struct nl_cuda_state **out)
{
  struct nl_cuda_state *s = ctx->cuda[dev];
  *out = NULL;
  CK(cudaSetDevice(dev), "cudaSetDevice");
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s)
      return nl__err(ctx, NL_ENOMEM, "out of host memory");
    ctx->cuda[dev] = s;
    CK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    CK(cudaEventCreate(&s->start), "cudaEventCreate");
    CK(cudaEventCreate(&s->stop), "cudaEventCreate");
  }
  *out = s;
  return NL_OK;
}

void *nl__cuda_stream(nl_ctx *ctx, int dev, nl_status *st)
{
  struct nl_cuda_state *s;
  *st = state(ctx, dev, &s);
  return *st == NL_OK ? (void *)s->stream : NULL;
}

void *nl__cuda_sync_words(nl_ctx *ctx, int dev, nl_status *st)
{
  struct nl_cuda_state *s;
  if ((*st = state(ctx, dev, &s)) != NL_OK)
    return NULL;
  if (!s->sync) {
    void *p = NULL;
    if ((*st = nl__cuda_alloc(ctx, dev, 256, &p)) != NL_OK)
      return NULL;
    s->sync = p;
    if ((*st = nl__cuda_check(ctx, (int)cudaMemsetAsync(p, 0, 256, s->stream), "cudaMemsetAsync")) != NL_OK)
      return NULL;
  }
  return s->sync;
}

void nl__cuda_release(nl_ctx *ctx)
{
  for (int d = 0; d < NL_MAX_CUDA; d++) {
    struct nl_cuda_state *s = ctx->cuda[d];
    if (!s)
      continue;
    /* Errors are ignored here: this runs from finalizers, possibly after a fatal error. */
    cudaSetDevice(d);
    if (s->exec)
      cudaGraphExecDestroy(s->exec);
    if (s->graph)
      cudaGraphDestroy(s->graph);
    if (s->flush)
      cudaFree(s->flush);
    if (s->sync)
      cudaFree(s->sync);
    if (s->start)
      cudaEventDestroy(s->start);
    if (s->stop)
      cudaEventDestroy(s->stop);
    if (s->stream)
      cudaStreamDestroy(s->stream);
    cudaGetLastError();
    free(s);
    ctx->cuda[d] = NULL;
  }
}

nl_status nl__cuda_query(nl_ctx *ctx, int dev, nl_device_info *info)
{
  struct cudaDeviceProp p;
  int v;
  CK(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties");
  snprintf(info->name, sizeof info->name, "%.127s", p.name);
  info->mem_bytes = (int64_t)p.totalGlobalMem;
#define ATTR(field, attr)                                                                \
  do {                                                                                   \
    CK(cudaDeviceGetAttribute(&v, attr, dev), "cudaDeviceGetAttribute(" #attr ")");      \
    info->field = v;                                                                     \
  } while (0)
  ATTR(sm_count, cudaDevAttrMultiProcessorCount);
  ATTR(cc_major, cudaDevAttrComputeCapabilityMajor);
  ATTR(cc_minor, cudaDevAttrComputeCapabilityMinor);
  ATTR(max_threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor);
  ATTR(l2_bytes, cudaDevAttrL2CacheSize);
  ATTR(smem_per_block, cudaDevAttrMaxSharedMemoryPerBlock);
  ATTR(smem_per_block_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin);
  ATTR(smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor);
  ATTR(mem_bus_bits, cudaDevAttrGlobalMemoryBusWidth);
  ATTR(mem_clock_khz, cudaDevAttrMemoryClockRate);
#undef ATTR
  CK(cudaDriverGetVersion(&v), "cudaDriverGetVersion");
  info->driver_version = v;
  CK(cudaRuntimeGetVersion(&v), "cudaRuntimeGetVersion");
  info->runtime_version = v;
  return NL_OK;
}

nl_status nl__cuda_alloc(nl_ctx *ctx, int dev, size_t bytes, void **out)
{
  cudaError_t e;
  CK(cudaSetDevice(dev), "cudaSetDevice");
  e = cudaMalloc(out, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    *out = NULL;
    return nl__err(ctx, NL_ENOMEM, "cuda:%d: cannot allocate %zu bytes of device memory", dev, bytes);
  }
  CK(e, "cudaMalloc");
  return NL_OK;
}

void nl__cuda_free(nl_ctx *ctx, int dev, void *p)
{
  if (!p)
    return;
  /* cudaFree synchronizes the device, so no launch can still be using p. */
  if (cudaSetDevice(dev) == cudaSuccess) {
    cudaError_t e = cudaFree(p);
    if (e != cudaSuccess && ctx)
      nl__cuda_check(ctx, (int)e, "cudaFree");
  }
}

nl_status nl__cuda_copy2d(nl_ctx *ctx, int dev, void *dst, size_t dpitch, const void *src,
                          size_t spitch, size_t width, size_t height)
{
  struct nl_cuda_state *s;
  nl_status st = state(ctx, dev, &s);
  if (st != NL_OK)
    return st;
  CK(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDefault, s->stream),
     "cudaMemcpy2DAsync");
  return NL_OK;
}

nl_status nl__cuda_fill(nl_ctx *ctx, int dev, void *p, int64_t rows, int64_t cols, int64_t stride,
                        int elt_size, uint64_t pattern)
{
  struct nl_cuda_state *s;
  nl_status st = state(ctx, dev, &s);
  if (st != NL_OK)
    return st;
  CK((cudaError_t)nlk_cuda_fill(p, rows, cols, stride, elt_size, pattern, s->stream), "fill kernel");
  return NL_OK;
}

nl_status nl__cuda_sync(nl_ctx *ctx, int dev)
{
  struct nl_cuda_state *s;
  nl_status st = state(ctx, dev, &s);
  if (st != NL_OK)
    return st;
  CK(cudaStreamSynchronize(s->stream), "cudaStreamSynchronize");
  return NL_OK;
}

nl_status nl__cuda_timer_start(nl_ctx *ctx, int dev)
{
  struct nl_cuda_state *s;
  nl_status st = state(ctx, dev, &s);
  if (st != NL_OK)
    return st;
  CK(cudaEventRecord(s->start, s->stream), "cudaEventRecord");
  return NL_OK;
}

nl_status nl__cuda_timer_stop(nl_ctx *ctx, int dev, double *ms)
{
  struct nl_cuda_state *s;
  float f = 0;
  nl_status st = state(ctx, dev, &s);
  if (st != NL_OK)
    return st;
  CK(cudaEventRecord(s->stop, s->stream), "cudaEventRecord");
  CK(cudaEventSynchronize(s->stop), "cudaEventSynchronize");
  CK(cudaEventElapsedTime(&f, s->start, s->stop), "cudaEventElapsedTime");
  *ms = f;
  return NL_OK;
}

/* Overwrites twice the L2 so the next launch starts with a cold cache. */
nl_status nl__cuda_flush_l2(nl_ctx *ctx, int dev)
{
  struct nl_cuda_state *s;
  nl_status st = state(ctx, dev, &s);
  if (st != NL_OK)
    return st;
  if (!s->flush) {
    int l2 = 0;
    CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev), "cudaDeviceGetAttribute");
    s->flush_bytes = 2 * (size_t)(l2 > 0 ? l2 : 64 << 20);
    if ((st = nl__cuda_alloc(ctx, dev, s->flush_bytes, &s->flush)) != NL_OK)
      return st;
  }
  CK(cudaMemsetAsync(s->flush, 0x5a, s->flush_bytes, s->stream), "cudaMemsetAsync");
  return NL_OK;
}

nl_status nl__cuda_graph_begin(nl_ctx *ctx, int dev)
{
  struct nl_cuda_state *s;
  nl_status st = state(ctx, dev, &s);
  if (st != NL_OK)
    return st;
  nl__cuda_graph_drop(ctx, dev);
  CK(cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  return NL_OK;
}

nl_status nl__cuda_graph_end(nl_ctx *ctx, int dev)
{
  struct nl_cuda_state *s;
  nl_status st = state(ctx, dev, &s);
  if (st != NL_OK)
    return st;
  CK(cudaStreamEndCapture(s->stream, &s->graph), "cudaStreamEndCapture");
  CK(cudaGraphInstantiate(&s->exec, s->graph, 0), "cudaGraphInstantiate");
  return NL_OK;
}

nl_status nl__cuda_graph_launch(nl_ctx *ctx, int dev)
{
  struct nl_cuda_state *s;
  nl_status st = state(ctx, dev, &s);
  if (st != NL_OK)
    return st;
  CK(cudaGraphLaunch(s->exec, s->stream), "cudaGraphLaunch");
  return NL_OK;
}

void nl__cuda_graph_drop(nl_ctx *ctx, int dev)
{
  struct nl_cuda_state *s = ctx->cuda[dev];
  enum cudaStreamCaptureStatus cs;
  if (!s)
    return;
  /* A capture left open by a failed launch must end before the stream is usable again. */
  if (cudaStreamIsCapturing(s->stream, &cs) == cudaSuccess && cs != cudaStreamCaptureStatusNone) {
    cudaGraph_t g = NULL;
    cudaStreamEndCapture(s->stream, &g);
    if (g)
      cudaGraphDestroy(g);
    cudaGetLastError();
  }
  if (s->exec)
    cudaGraphExecDestroy(s->exec);
  if (s->graph)
    cudaGraphDestroy(s->graph);
  s->exec = NULL;
  s->graph = NULL;
}

/* The roofline: a large device-to-device copy (bytes read + written) after a warm-up that
 * lets the clocks settle; median of 15 timed copies. */
nl_status nl__cuda_copy_bw(nl_ctx *ctx, int dev, double *gbps)
{
  struct nl_cuda_state *s;
  size_t bytes = (size_t)1 << 30;
  void *a = NULL, *b = NULL;
  double times[15], t0;
  nl_status st = state(ctx, dev, &s);
  if (st != NL_OK)
    return st;
  if ((st = nl__cuda_alloc(ctx, dev, bytes, &a)) != NL_OK ||
      (st = nl__cuda_alloc(ctx, dev, bytes, &b)) != NL_OK)
    goto done;
  if ((st = nl__cuda_check(ctx, (int)cudaMemsetAsync(a, 0x3c, bytes, s->stream), "cudaMemsetAsync")) != NL_OK)
    goto done;
  t0 = nl__now_ms();
  while (nl__now_ms() - t0 < 300.0) {
    if (ctx->interrupt) {
      st = nl__err(ctx, NL_EINTERRUPTED, "roofline: interrupted");
      goto done;
    }
    if ((st = nl__cuda_copy2d(ctx, dev, b, bytes, a, bytes, bytes, 1)) != NL_OK ||
        (st = nl__cuda_sync(ctx, dev)) != NL_OK)
      goto done;
  }
  for (int i = 0; i < 15; i++) {
    if ((st = nl__cuda_timer_start(ctx, dev)) != NL_OK ||
        (st = nl__cuda_copy2d(ctx, dev, b, bytes, a, bytes, bytes, 1)) != NL_OK ||
        (st = nl__cuda_timer_stop(ctx, dev, &times[i])) != NL_OK)
      goto done;
  }
  for (int i = 1; i < 15; i++)
    for (int j = i; j > 0 && times[j] < times[j - 1]; j--) {
      double t = times[j];
      times[j] = times[j - 1];
      times[j - 1] = t;
    }
  *gbps = 2.0 * (double)bytes / (times[7] * 1e-3) / 1e9;
done:
  nl__cuda_free(ctx, dev, a);
  nl__cuda_free(ctx, dev, b);
  return st;
}

void nl__cuda_kernel_name(const void *kernel, char *buf, size_t cap)
{
  nlk_cuda_kernel_name(kernel, buf, cap);
}

#else /* !NL_HAVE_CUDA */

static nl_status nodev(nl_ctx *ctx)
{
  return nl__err(ctx, NL_ENODEV, "normlab was built without the CUDA backend");
}

int nl__cuda_count(void) { return 0; }
nl_status nl__cuda_check(nl_ctx *ctx, int err, const char *what) { return err ? nodev(ctx) : NL_OK; }
nl_status nl__cuda_query(nl_ctx *ctx, int dev, nl_device_info *info) { return nodev(ctx); }
nl_status nl__cuda_alloc(nl_ctx *ctx, int dev, size_t bytes, void **out) { return nodev(ctx); }
void nl__cuda_free(nl_ctx *ctx, int dev, void *p) {}
nl_status nl__cuda_copy2d(nl_ctx *ctx, int dev, void *dst, size_t dpitch, const void *src,
                          size_t spitch, size_t width, size_t height) { return nodev(ctx); }
nl_status nl__cuda_fill(nl_ctx *ctx, int dev, void *p, int64_t rows, int64_t cols, int64_t stride,
                        int elt_size, uint64_t pattern) { return nodev(ctx); }
nl_status nl__cuda_sync(nl_ctx *ctx, int dev) { return nodev(ctx); }
void *nl__cuda_stream(nl_ctx *ctx, int dev, nl_status *st) { *st = nodev(ctx); return NULL; }
void *nl__cuda_sync_words(nl_ctx *ctx, int dev, nl_status *st) { *st = nodev(ctx); return NULL; }
void nl__cuda_release(nl_ctx *ctx) {}
nl_status nl__cuda_timer_start(nl_ctx *ctx, int dev) { return nodev(ctx); }
nl_status nl__cuda_timer_stop(nl_ctx *ctx, int dev, double *ms) { return nodev(ctx); }
nl_status nl__cuda_flush_l2(nl_ctx *ctx, int dev) { return nodev(ctx); }
nl_status nl__cuda_graph_begin(nl_ctx *ctx, int dev) { return nodev(ctx); }
nl_status nl__cuda_graph_end(nl_ctx *ctx, int dev) { return nodev(ctx); }
nl_status nl__cuda_graph_launch(nl_ctx *ctx, int dev) { return nodev(ctx); }
void nl__cuda_graph_drop(nl_ctx *ctx, int dev) {}
nl_status nl__cuda_copy_bw(nl_ctx *ctx, int dev, double *gbps) { return nodev(ctx); }
void nl__cuda_kernel_name(const void *kernel, char *buf, size_t cap) { if (cap) buf[0] = '\0'; }

#endif
