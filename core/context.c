/*
 * context.c: the context (default device, error state, seed counter, scratch), devices and
 * the library-level queries. A context is reference counted: every buffer holds a reference,
 * so buffers may be freed after their context in any order (garbage collectors do that).
 */
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#ifndef NL_VERSION
#define NL_VERSION "0.0.0"
#endif

const char *nl_version(void) { return NL_VERSION; }

int32_t nl_cuda_compiled(void)
{
#ifdef NL_HAVE_CUDA
  return 1;
#else
  return 0;
#endif
}

const char *nl_status_name(nl_status st)
{
  switch (st) {
  case NL_OK: return "ok";
  case NL_EINVAL: return "invalid argument";
  case NL_ENOMEM: return "out of memory";
  case NL_EUNSUPPORTED: return "unsupported";
  case NL_ECUDA: return "CUDA error";
  case NL_ENODEV: return "no such device";
  case NL_EINTERRUPTED: return "interrupted";
  case NL_EINTERNAL: return "internal error";
  }
  return "unknown status";
}

nl_status nl__err(nl_ctx *ctx, nl_status st, const char *fmt, ...)
{
  if (ctx && st != NL_OK) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
    va_end(ap);
  }
  return st;
}

nl_status nl__enter(nl_ctx *ctx)
{
  if (!ctx)
    return NL_EINVAL;
  return ctx->sticky;
}

double nl__now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

nl_status nl_ctx_new(nl_device device, nl_ctx **out)
{
  nl_ctx *ctx;
  nl_status st;
  if (!out)
    return NL_EINVAL;
  *out = NULL;
  ctx = calloc(1, sizeof *ctx);
  if (!ctx)
    return NL_ENOMEM;
  ctx->refs = 1;
  ctx->seed = 0x6e6c6162u;  /* "nlab" */
  ctx->device_gpu = "";
  st = nl__check_device(ctx, device);
  if (st != NL_OK) {
    /* The context is still handed out so the caller can read the message; it falls back
     * to the CPU. */
    ctx->device.backend = NL_CPU;
    ctx->device.index = 0;
    *out = ctx;
    return st;
  }
  ctx->device = device;
  *out = ctx;
  return nl__gpu_name(ctx, ctx->device, &ctx->device_gpu);
}

void nl__ctx_release(nl_ctx *ctx)
{
  if (!ctx || --ctx->refs > 0)
    return;
  free(ctx->ws_cpu.p);
  for (int i = 0; i < NL_MAX_CUDA; i++)
    if (ctx->ws_cuda[i].p)
      nl__cuda_free(ctx, i, ctx->ws_cuda[i].p);
  nl__cuda_release(ctx);
  free(ctx);
}

void nl_ctx_free(nl_ctx *ctx) { nl__ctx_release(ctx); }

const char *nl_ctx_last_error(const nl_ctx *ctx) { return ctx ? ctx->err : "no context"; }
nl_status nl_ctx_sticky(const nl_ctx *ctx) { return ctx ? ctx->sticky : NL_EINVAL; }
void nl_ctx_interrupt(nl_ctx *ctx) { if (ctx) ctx->interrupt = 1; }
nl_device nl_ctx_device(const nl_ctx *ctx) { return ctx->device; }
uint64_t nl_ctx_next_seed(nl_ctx *ctx) { return ctx->seed++; }
void nl_ctx_set_seed(nl_ctx *ctx, uint64_t seed) { ctx->seed = seed; }

void nl_ctx_clear_error(nl_ctx *ctx)
{
  /* A latched CUDA error is not cleared: the device context is unusable. */
  if (ctx && ctx->sticky == NL_OK)
    ctx->err[0] = '\0';
}

nl_status nl_ctx_set_device(nl_ctx *ctx, nl_device device)
{
  nl_status st = nl__check_device(ctx, device);
  if (st != NL_OK)
    return st;
  ctx->device = device;
  return nl__gpu_name(ctx, ctx->device, &ctx->device_gpu);
}

nl_status nl_ctx_sync(nl_ctx *ctx, nl_device device)
{
  nl_status st = nl__enter(ctx);
  if (st != NL_OK)
    return st;
  if ((st = nl__check_device(ctx, device)) != NL_OK)
    return st;
  return device.backend == NL_CUDA ? nl__cuda_sync(ctx, device.index) : NL_OK;
}

int nl__threads(const nl_ctx *ctx)
{
  nl_knobs kn;
  nl__knobs(ctx, ctx->device_gpu, &kn);
  return kn.cpu.threads > 0 ? kn.cpu.threads : omp_get_num_procs();
}

const char *nl__device_name(nl_device d, char *buf, size_t cap)
{
  if (d.backend == NL_CPU)
    snprintf(buf, cap, "cpu");
  else if (d.backend == NL_CUDA)
    snprintf(buf, cap, "cuda:%d", (int)d.index);
  else
    snprintf(buf, cap, "backend%d:%d", (int)d.backend, (int)d.index);
  return buf;
}

int nl__same_device(nl_device a, nl_device b)
{
  return a.backend == b.backend && (a.backend == NL_CPU || a.index == b.index);
}

nl_status nl__check_device(nl_ctx *ctx, nl_device d)
{
  if (d.backend == NL_CPU)
    return NL_OK;
  if (d.backend != NL_CUDA)
    return nl__err(ctx, NL_EINVAL, "unknown backend %d (0 = cpu, 1 = cuda)", (int)d.backend);
  if (!nl_cuda_compiled())
    return nl__err(ctx, NL_ENODEV, "cuda:%d: normlab was built without the CUDA backend",
                   (int)d.index);
  {
    int n = nl__cuda_count();
    if (d.index < 0 || d.index >= n || d.index >= NL_MAX_CUDA)
      return nl__err(ctx, NL_ENODEV, "cuda:%d: no such device (%d CUDA device%s visible)",
                     (int)d.index, n, n == 1 ? "" : "s");
  }
  return NL_OK;
}

int32_t nl_device_count(int32_t backend)
{
  if (backend == NL_CPU)
    return 1;
  if (backend == NL_CUDA)
    return nl__cuda_count();
  return 0;
}

/* Last-level cache of the CPU: sysconf where glibc knows it, else sysfs, else 32 MiB. */
static int64_t cpu_llc_bytes(void)
{
  long v = 0;
#ifdef _SC_LEVEL3_CACHE_SIZE
  v = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (v <= 0)
    v = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
  if (v <= 0) {
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
    if (f) {
      char unit = 0;
      if (fscanf(f, "%ld%c", &v, &unit) >= 1 && (unit == 'K' || unit == 'k'))
        v *= 1024;
      else if (unit == 'M')
        v *= 1024 * 1024;
      fclose(f);
    }
  }
  return v > 0 ? (int64_t)v : (int64_t)32 << 20;
}

static void cpu_model_name(char *buf, size_t cap)
{
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[512];
  snprintf(buf, cap, "cpu");
  if (!f)
    return;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) == 0) {
      char *p = strchr(line, ':');
      if (p) {
        p++;
        while (*p == ' ')
          p++;
        p[strcspn(p, "\n")] = '\0';
        snprintf(buf, cap, "%s", p);
      }
      break;
    }
  }
  fclose(f);
}

nl_status nl_device_query(nl_ctx *ctx, nl_device device, nl_device_info *info)
{
  nl_status st = nl__enter(ctx);
  if (st != NL_OK)
    return st;
  if (!info)
    return nl__err(ctx, NL_EINVAL, "nl_device_query: info is NULL");
  if ((st = nl__check_device(ctx, device)) != NL_OK)
    return st;
  memset(info, 0, sizeof *info);
  info->device = device;
  if (device.backend == NL_CUDA) {
    /* A GPU's properties do not change while the process runs, and every CUDA plan (each
     * launch) reads them: cudaGetDeviceProperties runs once per device. */
    const int i = device.index;
    if (!ctx->cuda_info_ok[i]) {
      if ((st = nl__cuda_query(ctx, i, info)) != NL_OK)
        return st;
      info->device = device;
      ctx->cuda_info[i] = *info;
      ctx->cuda_info_ok[i] = 1;
    }
    *info = ctx->cuda_info[i];
    return NL_OK;
  }
  cpu_model_name(info->name, sizeof info->name);
  info->sm_count = nl__threads(ctx);
  info->l2_bytes = cpu_llc_bytes();
  info->mem_bytes = (int64_t)sysconf(_SC_PHYS_PAGES) * (int64_t)sysconf(_SC_PAGESIZE);
  return NL_OK;
}

/* Scratch for variants: one block per device, grown (never shrunk) so repeated runs and
 * benchmark loops allocate nothing. */
void *nl__ws(nl_ctx *ctx, nl_device d, size_t bytes, nl_status *st)
{
  nl_ws *ws = d.backend == NL_CUDA ? &ctx->ws_cuda[d.index] : &ctx->ws_cpu;
  *st = NL_OK;
  if (bytes == 0)
    return ws->p;
  if (ws->bytes >= bytes)
    return ws->p;
  bytes = (bytes + 4095) & ~(size_t)4095;
  if (d.backend == NL_CUDA) {
    void *p = NULL;
    if (ws->p)
      nl__cuda_free(ctx, d.index, ws->p);
    ws->p = NULL;
    ws->bytes = 0;
    if ((*st = nl__cuda_alloc(ctx, d.index, bytes, &p)) != NL_OK)
      return NULL;
    ws->p = p;
  } else {
    free(ws->p);
    ws->bytes = 0;
    ws->p = aligned_alloc(64, bytes);
    if (!ws->p) {
      *st = nl__err(ctx, NL_ENOMEM, "cannot allocate %zu bytes of CPU scratch", bytes);
      return NULL;
    }
  }
  ws->bytes = bytes;
  return ws->p;
}
