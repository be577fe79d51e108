/*
 * bench.c: the one timing method of normlab, and the copy roofline every table divides by.
 *
 * A benchmark validates and resolves the variant once, clones the argument buffers into K
 * sets whose footprint covers rotate_factor x L2 (CPU: the last-level cache), at most
 * bench.max_sets of them (small cells stop short, and the result says by how much), warms up
 * until bench.warmup_ms has passed (clocks settle), picks the launches per batch from the
 * warm-up's per-call time, then times `batches` batches (CUDA events on the GPU, the
 * monotonic clock on the CPU) and reports the median time per call. A backward variant's
 * launcher includes its reduction kernel, so its time does too.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "registry.h"

enum { N_FIELDS = NL_ARG_COUNT, MAX_BATCHES = 1000 };

typedef struct bench_sets {
  int count;
  nl_norm_args *args;   /* [count]; args[0] is the caller's */
  nl_plan *plans;       /* [count] */
  nl_buf **owned;       /* clones to free */
  int n_owned;
} bench_sets;

static void sets_free(bench_sets *s)
{
  for (int i = 0; i < s->n_owned; i++)
    nl_buf_free(s->owned[i]);
  free(s->owned);
  free(s->args);
  free(s->plans);
  memset(s, 0, sizeof *s);
}

/* Clones the distinct buffers of proto into count - 1 more sets, keeping aliases (dx == dy,
 * residual_out == residual) as aliases, then plans every set. With share_outputs the output
 * buffers that alias no input are set 0's in every set. */
static nl_status sets_make(nl_ctx *ctx, const char *variant, const nl_norm_args *proto, int count,
                           int share_outputs, bench_sets *s)
{
  nl_status st = NL_OK;
  memset(s, 0, sizeof *s);
  s->args = calloc((size_t)count, sizeof *s->args);
  s->plans = calloc((size_t)count, sizeof *s->plans);
  s->owned = calloc((size_t)count * N_FIELDS, sizeof *s->owned);
  if (!s->args || !s->plans || !s->owned) {
    sets_free(s);
    return nl__err(ctx, NL_ENOMEM, "bench: out of host memory");
  }
  s->count = count;
  s->args[0] = *proto;
  for (int k = 1; k < count && st == NL_OK; k++) {
    nl_norm_args *a = &s->args[k];
    *a = *proto;
    for (int f = 0; f < N_FIELDS && st == NL_OK; f++) {
      nl_buf *orig = nl__arg(&s->args[0], f);
      int g;
      if (!orig)
        continue;
      for (g = 0; g < f; g++)
        if (nl__arg(&s->args[0], g) == orig)
          break;
      if (g < f) {
        *nl__arg_slot(a, f) = *nl__arg_slot(a, g);
        continue;
      }
      if (share_outputs && nl__arg_written(proto, f))
        continue; /* *a = *proto already holds set 0's buffer */
      st = nl__buf_clone(ctx, orig, nl__arg_slot(a, f));
      if (st == NL_OK)
        s->owned[s->n_owned++] = *nl__arg_slot(a, f);
    }
  }
  for (int k = 0; k < count && st == NL_OK; k++)
    st = nl__plan(ctx, variant, &s->args[k], &s->plans[k]);
  if (st == NL_OK)
    st = nl__plan_workspace(ctx, &s->plans[0]);
  for (int k = 1; k < count && st == NL_OK; k++)
    nl__plan_use_workspace(&s->plans[k], s->plans[0].k.ws);
  if (st != NL_OK)
    sets_free(s);
  return st;
}

/* The bytes of one set's distinct buffers (inputs_only: those a shared-outputs set clones). */
static int64_t set_bytes(const nl_norm_args *a, int inputs_only)
{
  int64_t total = 0;
  for (int f = 0; f < N_FIELDS; f++) {
    nl_buf *b = nl__arg(a, f);
    int g, dup = 0;
    if (!b || (inputs_only && nl__arg_written(a, f)))
      continue;
    for (g = 0; g < f; g++)
      dup |= nl__arg(a, g) == b;
    if (!dup)
      total += (int64_t)b->nbytes;
  }
  return total;
}

/* Host-side cache flush for the CPU: write twice the last-level cache. */
static void cpu_flush(unsigned char *buf, size_t bytes, int threads)
{
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < (int64_t)bytes; i += 4096)
    memset(buf + i, (int)(i >> 12) & 0xff, (size_t)i + 4096 <= bytes ? 4096 : bytes - (size_t)i);
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct timer {
  nl_ctx *ctx;
  nl_device dev;
  double t0;
} timer;

static nl_status timer_start(timer *t)
{
  if (t->dev.backend == NL_CUDA)
    return nl__cuda_timer_start(t->ctx, t->dev.index);
  t->t0 = nl__now_ms();
  return NL_OK;
}

static nl_status timer_stop(timer *t, double *ms)
{
  if (t->dev.backend == NL_CUDA)
    return nl__cuda_timer_stop(t->ctx, t->dev.index, ms);
  *ms = nl__now_ms() - t->t0;
  return NL_OK;
}

static nl_status sync_dev(nl_ctx *ctx, nl_device d)
{
  return d.backend == NL_CUDA ? nl__cuda_sync(ctx, d.index) : NL_OK;
}

static nl_status interrupted(nl_ctx *ctx)
{
  return nl__err(ctx, NL_EINTERRUPTED, "bench: interrupted");
}

nl_status nl_bench(nl_ctx *ctx, const char *variant, const nl_norm_args *proto,
                   const nl_bench_opts *opts, nl_bench_result *out)
{
  nl_bench_opts o = {0};
  nl_plan plan0;
  nl_device_info info;
  bench_sets sets = {0};
  timer tm = {ctx, {0, 0}, 0};
  double warmup_ms, batch_ms, per_call, times[MAX_BATCHES];
  unsigned char *flush = NULL;
  size_t flush_bytes = 0;
  int64_t sb, count;
  int reps, batches, graph_live = 0;
  long launches = 0;
  nl_status st;

  if (ctx)
    ctx->interrupt = 0; /* a Ctrl-C from here on stops this call */
  if ((st = nl__plan(ctx, variant, proto, &plan0)) != NL_OK)
    return st;
  if (!out)
    return nl__err(ctx, NL_EINVAL, "bench: result pointer is NULL");
  if (opts)
    o = *opts;
  if (o.mode < NL_BENCH_ROTATE || o.mode > NL_BENCH_HOT)
    return nl__err(ctx, NL_EINVAL, "bench: unknown mode %d (0 rotate, 1 flush, 2 hot)", (int)o.mode);
  if (o.batches < 0 || o.reps < 0 || o.warmup_ms < 0 || o.batch_ms < 0 || o.rotate_factor < 0 ||
      o.max_sets < 0)
    return nl__err(ctx, NL_EINVAL, "bench: options must not be negative");
  if (o.graph && plan0.device.backend != NL_CUDA)
    return nl__err(ctx, NL_EUNSUPPORTED, "bench: CUDA-graph capture needs a CUDA device");
  if (o.graph && o.mode == NL_BENCH_FLUSH)
    return nl__err(ctx, NL_EUNSUPPORTED, "bench: graph capture times whole batches; flush mode times each launch alone");
  batches = o.batches ? o.batches : plan0.kn.bench.batches;
  if (batches > MAX_BATCHES)
    return nl__err(ctx, NL_EINVAL, "bench: at most %d batches", MAX_BATCHES);
  warmup_ms = o.warmup_ms ? o.warmup_ms : plan0.kn.bench.warmup_ms;
  if (warmup_ms == 0)
    warmup_ms = plan0.device.backend == NL_CUDA ? 300.0 : 50.0;
  batch_ms = o.batch_ms ? o.batch_ms : plan0.kn.bench.batch_ms;
  if (batch_ms == 0)
    batch_ms = plan0.device.backend == NL_CUDA ? 20.0 : 30.0;
  if (o.rotate_factor == 0)
    o.rotate_factor = plan0.kn.bench.rotate_factor;
  if (o.max_sets == 0)
    o.max_sets = plan0.kn.bench.max_sets;

  if ((st = nl_device_query(ctx, plan0.device, &info)) != NL_OK)
    return st;
  sb = set_bytes(proto, o.share_outputs != 0);
  count = 1;
  if (o.mode == NL_BENCH_ROTATE)
    count = (int64_t)ceil(o.rotate_factor * (double)info.l2_bytes / (double)sb);
  if (count < 1)
    count = 1;
  if (count > o.max_sets)
    count = o.max_sets;
  if ((st = sets_make(ctx, plan0.v->name, proto, (int)count, o.share_outputs != 0, &sets)) != NL_OK)
    return st;
  if (o.mode == NL_BENCH_FLUSH && plan0.device.backend == NL_CPU) {
    flush_bytes = 2 * (size_t)info.l2_bytes;
    flush = malloc(flush_bytes);
    if (!flush) {
      st = nl__err(ctx, NL_ENOMEM, "bench: cannot allocate the cache-flush buffer");
      goto done;
    }
  }
  tm.dev = plan0.device;
  if (ctx->interrupt) {
    st = interrupted(ctx);
    goto done;
  }

  /* Warm-up: at least three launches and warmup_ms of work; the last stretch estimates the
   * time per call. */
  {
    double t0 = nl__now_ms(), t_mark = t0, now = t0;
    long mark = 0;
    do {
      if (ctx->interrupt) {
        st = interrupted(ctx);
        goto done;
      }
      if ((st = nl__launch(ctx, &sets.plans[launches % sets.count])) != NL_OK)
        goto done;
      launches++;
      if (launches % 8 == 0 || launches < 8) {
        if ((st = sync_dev(ctx, tm.dev)) != NL_OK)
          goto done;
        now = nl__now_ms();
        if (now - t0 < 0.5 * warmup_ms) {
          t_mark = now;
          mark = launches;
        }
      }
    } while (launches < 3 || now - t0 < warmup_ms);
    if ((st = sync_dev(ctx, tm.dev)) != NL_OK)
      goto done;
    now = nl__now_ms();
    per_call = (now - t_mark) / (double)(launches - mark);
  }
  reps = o.reps;
  if (reps == 0) {
    double r = ceil(batch_ms / fmax(per_call, 1e-4));
    reps = r > 100000 ? 100000 : r < 1 ? 1 : (int)r;
    if (reps >= sets.count)
      reps = (reps + sets.count - 1) / sets.count * sets.count;
  }

  if (o.graph) {
    if ((st = nl__cuda_graph_begin(ctx, tm.dev.index)) != NL_OK)
      goto done;
    graph_live = 1;
    for (int r = 0; r < reps && st == NL_OK; r++)
      st = nl__launch(ctx, &sets.plans[r % sets.count]);
    if (st == NL_OK)
      st = nl__cuda_graph_end(ctx, tm.dev.index);
    if (st != NL_OK)
      goto done;
    /* One untimed replay: graph upload happens on first launch. */
    if ((st = nl__cuda_graph_launch(ctx, tm.dev.index)) != NL_OK ||
        (st = sync_dev(ctx, tm.dev)) != NL_OK)
      goto done;
  }

  for (int b = 0; b < batches; b++) {
    double ms = 0, t;
    if (ctx->interrupt) {
      st = interrupted(ctx);
      goto done;
    }
    if (o.graph) {
      if ((st = timer_start(&tm)) != NL_OK || (st = nl__cuda_graph_launch(ctx, tm.dev.index)) != NL_OK ||
          (st = timer_stop(&tm, &ms)) != NL_OK)
        goto done;
    } else if (o.mode == NL_BENCH_FLUSH) {
      for (int r = 0; r < reps; r++) {
        if (flush)
          cpu_flush(flush, flush_bytes, nl__threads(ctx));
        else if ((st = nl__cuda_flush_l2(ctx, tm.dev.index)) != NL_OK)
          goto done;
        if ((st = timer_start(&tm)) != NL_OK || (st = nl__launch(ctx, &sets.plans[0])) != NL_OK ||
            (st = timer_stop(&tm, &t)) != NL_OK)
          goto done;
        ms += t;
      }
    } else {
      if ((st = timer_start(&tm)) != NL_OK)
        goto done;
      for (int r = 0; r < reps; r++)
        if ((st = nl__launch(ctx, &sets.plans[(launches + r) % sets.count])) != NL_OK)
          goto done;
      launches += reps;
      if ((st = timer_stop(&tm, &ms)) != NL_OK)
        goto done;
    }
    times[b] = ms / reps;
  }

  memset(out, 0, sizeof *out);
  nl__plan_info(&sets.plans[0], &out->run);
  {
    double sum = 0;
    for (int b = 0; b < batches; b++)
      sum += times[b];
    out->mean_ms = sum / batches;
  }
  qsort(times, (size_t)batches, sizeof times[0], cmp_double);
  out->median_ms = batches % 2 ? times[batches / 2] : 0.5 * (times[batches / 2 - 1] + times[batches / 2]);
  out->min_ms = times[0];
  out->max_ms = times[batches - 1];
  out->gbps = (double)out->run.bytes / (out->median_ms * 1e-3) / 1e9;
  out->extra_gbps = (double)out->run.extra_bytes / (out->median_ms * 1e-3) / 1e9;
  out->batches = batches;
  out->reps = reps;
  out->sets = sets.count;
  out->mode = o.mode;
  out->footprint_bytes = sb * sets.count + (set_bytes(proto, 0) - sb);
  if (o.mode == NL_BENCH_ROTATE)
    out->target_bytes = (int64_t)ceil(o.rotate_factor * (double)info.l2_bytes);

done:
  if (graph_live)
    nl__cuda_graph_drop(ctx, tm.dev.index);
  if (st != NL_OK && tm.dev.backend == NL_CUDA && ctx->sticky == NL_OK) {
    /* Let queued work finish before the clones go away; the first error is what is reported. */
    char keep[sizeof ctx->err];
    memcpy(keep, ctx->err, sizeof keep);
    sync_dev(ctx, tm.dev);
    memcpy(ctx->err, keep, sizeof keep);
  }
  free(flush);
  sets_free(&sets);
  return st;
}

/* CPU roofline: a multi-threaded memcpy of a buffer far larger than the last-level cache,
 * bytes read + written over the median time of 9 copies. */
static nl_status cpu_copy_bw(nl_ctx *ctx, double *gbps)
{
  nl_device cpu = {NL_CPU, 0};
  nl_device_info info;
  size_t bytes;
  unsigned char *a, *b;
  double times[9];
  int threads = nl__threads(ctx);
  nl_status st = nl_device_query(ctx, cpu, &info);
  if (st != NL_OK)
    return st;
  /* Far above the cache, but bounded: some VMs report caches of hundreds of MB. */
  bytes = (size_t)info.l2_bytes * 8;
  if (bytes < ((size_t)256 << 20))
    bytes = (size_t)256 << 20;
  if (bytes > ((size_t)1 << 30))
    bytes = (size_t)1 << 30;
  a = malloc(bytes);
  b = malloc(bytes);
  if (!a || !b) {
    free(a);
    free(b);
    return nl__err(ctx, NL_ENOMEM, "roofline: cannot allocate 2 x %zu bytes", bytes);
  }
  for (int i = -2; i < 9; i++) {
    double t0 = nl__now_ms();
    if (ctx->interrupt) {
      st = nl__err(ctx, NL_EINTERRUPTED, "roofline: interrupted");
      break;
    }
#pragma omp parallel num_threads(threads)
    {
      int t = omp_get_thread_num(), n = omp_get_num_threads();
      size_t lo = bytes / (size_t)n * (size_t)t, hi = t == n - 1 ? bytes : bytes / (size_t)n * (size_t)(t + 1);
      if (i < 0)
        memset(a + lo, t + i, hi - lo); /* first touch, then warm copies */
      memcpy(b + lo, a + lo, hi - lo);
    }
    if (i >= 0)
      times[i] = nl__now_ms() - t0;
  }
  if (st == NL_OK) {
    qsort(times, 9, sizeof times[0], cmp_double);
    *gbps = 2.0 * (double)bytes / (times[4] * 1e-3) / 1e9;
  }
  free(a);
  free(b);
  return st;
}

nl_status nl_roofline(nl_ctx *ctx, nl_device device, double *copy_gbps)
{
  nl_status st = nl__enter(ctx);
  double *cache;
  if (st != NL_OK)
    return st;
  if (!copy_gbps)
    return nl__err(ctx, NL_EINVAL, "roofline: result pointer is NULL");
  if ((st = nl__check_device(ctx, device)) != NL_OK)
    return st;
  cache = device.backend == NL_CUDA ? &ctx->roofline_cuda[device.index] : &ctx->roofline_cpu;
  if (*cache == 0) {
    double v = 0;
    ctx->interrupt = 0;
    st = device.backend == NL_CUDA ? nl__cuda_copy_bw(ctx, device.index, &v) : cpu_copy_bw(ctx, &v);
    if (st != NL_OK)
      return st;
    *cache = v;
  }
  *copy_gbps = *cache;
  return NL_OK;
}
