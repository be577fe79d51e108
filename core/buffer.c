/*
 * buffer.c: device buffers (1-D or 2-D with a row stride), their contents and dtypes.
 *
 * Random fills are counter-based: element i (in logical row-major order, whatever the
 * stride) is a pure function of (seed, i), computed on the host in fp64 and rounded once to
 * the dtype, so the same seed gives the same values on every device and thread count.
 * CUDA buffers are filled through a dense host staging copy.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "internal.h"

static const char *const dtype_names[] = {"fp32", "fp16", "bf16", "fp8e4m3", "fp8e5m2", "fp64"};

int32_t nl_dtype_size(int32_t dtype)
{
  return dtype >= NL_F32 && dtype <= NL_F64 ? nlk_dtype_size(dtype) : 0;
}

const char *nl_dtype_name(int32_t dtype)
{
  return dtype >= NL_F32 && dtype <= NL_F64 ? dtype_names[dtype] : "?";
}

int32_t nl_dtype_parse(const char *name)
{
  static const struct { const char *alias; int32_t dt; } aliases[] = {
    {"float32", NL_F32}, {"f32", NL_F32}, {"float", NL_F32}, {"float16", NL_F16},
    {"f16", NL_F16}, {"half", NL_F16}, {"bfloat16", NL_BF16}, {"e4m3", NL_F8E4M3},
    {"e5m2", NL_F8E5M2}, {"float64", NL_F64}, {"f64", NL_F64}, {"double", NL_F64},
  };
  if (!name)
    return -1;
  for (int i = 0; i <= NL_F64; i++)
    if (strcmp(name, dtype_names[i]) == 0)
      return i;
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
    if (strcmp(name, aliases[i].alias) == 0)
      return aliases[i].dt;
  return -1;
}

size_t nl__buf_row_bytes(const nl_buf *b) { return (size_t)b->cols * nlk_dtype_size(b->dtype); }

static int64_t numel(const nl_buf *b) { return b->rows * b->cols; }

nl_status nl_buf_new(nl_ctx *ctx, nl_device device, int32_t dtype, int32_t ndim,
                     const int64_t *shape, int64_t stride, nl_buf **out)
{
  nl_status st = nl__enter(ctx);
  int64_t rows, cols;
  size_t es, nbytes;
  nl_buf *b;
  char dn[32];
  if (st != NL_OK)
    return st;
  if (!out || !shape)
    return nl__err(ctx, NL_EINVAL, "nl_buf_new: shape and out must not be NULL");
  *out = NULL;
  if ((st = nl__check_device(ctx, device)) != NL_OK)
    return st;
  if (dtype < NL_F32 || dtype > NL_F64)
    return nl__err(ctx, NL_EINVAL, "unknown dtype %d", (int)dtype);
  if (dtype == NL_F64 && device.backend != NL_CPU)
    return nl__err(ctx, NL_EUNSUPPORTED, "fp64 buffers live on the CPU only (asked for %s)",
                   nl__device_name(device, dn, sizeof dn));
  if (ndim != 1 && ndim != 2)
    return nl__err(ctx, NL_EINVAL, "buffers have 1 or 2 dimensions, got %d", (int)ndim);
  rows = ndim == 2 ? shape[0] : 1;
  cols = ndim == 2 ? shape[1] : shape[0];
  if (rows <= 0 || cols <= 0)
    return ndim == 2 ? nl__err(ctx, NL_EINVAL, "buffer sizes must be positive, got [%lld, %lld]",
                               (long long)rows, (long long)cols)
                     : nl__err(ctx, NL_EINVAL, "buffer sizes must be positive, got [%lld]",
                               (long long)cols);
  if (stride == 0)
    stride = cols;
  if (stride < cols)
    return nl__err(ctx, NL_EINVAL, "row stride %lld is smaller than the row length %lld",
                   (long long)stride, (long long)cols);
  es = (size_t)nlk_dtype_size(dtype);
  if ((uint64_t)rows > (UINT64_C(1) << 40) / (uint64_t)stride / es)
    return nl__err(ctx, NL_EINVAL, "buffer of %lld x %lld elements is too large",
                   (long long)rows, (long long)stride);
  nbytes = (size_t)rows * (size_t)stride * es;
  b = calloc(1, sizeof *b);
  if (!b)
    return nl__err(ctx, NL_ENOMEM, "out of host memory");
  if (device.backend == NL_CUDA) {
    if ((st = nl__cuda_alloc(ctx, device.index, nbytes, &b->data)) != NL_OK) {
      free(b);
      return st;
    }
  } else {
    b->data = aligned_alloc(64, (nbytes + 63) & ~(size_t)63);
    if (!b->data) {
      free(b);
      return nl__err(ctx, NL_ENOMEM, "cannot allocate %zu bytes on the CPU", nbytes);
    }
  }
  b->ctx = ctx;
  ctx->refs++;
  b->device = device;
  b->dtype = dtype;
  b->ndim = ndim;
  b->rows = rows;
  b->cols = cols;
  b->stride = stride;
  b->nbytes = nbytes;
  *out = b;
  return NL_OK;
}

void nl_buf_free(nl_buf *b)
{
  if (!b)
    return;
  if (b->device.backend == NL_CUDA)
    nl__cuda_free(b->ctx, b->device.index, b->data);
  else
    free(b->data);
  nl__ctx_release(b->ctx);
  free(b);
}

nl_status nl_buf_describe(const nl_buf *b, nl_buf_desc *out)
{
  if (!b || !out)
    return NL_EINVAL;
  out->device = b->device;
  out->dtype = b->dtype;
  out->ndim = b->ndim;
  out->rows = b->rows;
  out->cols = b->cols;
  out->stride = b->stride;
  out->numel = numel(b);
  out->nbytes = (int64_t)b->nbytes;
  return NL_OK;
}

static nl_status check_buf(nl_ctx *ctx, const nl_buf *b, const char *what)
{
  nl_status st = nl__enter(ctx);
  if (st != NL_OK)
    return st;
  if (!b)
    return nl__err(ctx, NL_EINVAL, "%s: buffer is NULL", what);
  if (b->ctx != ctx)
    return nl__err(ctx, NL_EINVAL, "%s: buffer belongs to another context", what);
  return NL_OK;
}

/* ---- host staging for CUDA buffers: dense row-major copies in the buffer's dtype ---- */

/* Rows [r0, r0 + n) of b from or to a dense host image of those rows. */
static nl_status rows_down(nl_ctx *ctx, const nl_buf *b, int64_t r0, int64_t n, void *host)
{
  size_t rb = nl__buf_row_bytes(b), pitch = (size_t)b->stride * (size_t)nlk_dtype_size(b->dtype);
  const char *dev = (const char *)b->data + (size_t)r0 * pitch;
  if (b->device.backend == NL_CUDA) {
    nl_status st = nl__cuda_copy2d(ctx, b->device.index, host, rb, dev, pitch, rb, (size_t)n);
    return st != NL_OK ? st : nl__cuda_sync(ctx, b->device.index);
  }
  for (int64_t r = 0; r < n; r++)
    memcpy((char *)host + r * rb, dev + (size_t)r * pitch, rb);
  return NL_OK;
}

static nl_status rows_up(nl_ctx *ctx, nl_buf *b, int64_t r0, int64_t n, const void *host)
{
  size_t rb = nl__buf_row_bytes(b), pitch = (size_t)b->stride * (size_t)nlk_dtype_size(b->dtype);
  char *dev = (char *)b->data + (size_t)r0 * pitch;
  if (b->device.backend == NL_CUDA) {
    nl_status st = nl__cuda_copy2d(ctx, b->device.index, dev, pitch, host, rb, rb, (size_t)n);
    return st != NL_OK ? st : nl__cuda_sync(ctx, b->device.index);
  }
  for (int64_t r = 0; r < n; r++)
    memcpy(dev + (size_t)r * pitch, (const char *)host + r * rb, rb);
  return NL_OK;
}

static nl_status stage_down(nl_ctx *ctx, const nl_buf *b, void *host)
{
  return rows_down(ctx, b, 0, b->rows, host);
}

static nl_status stage_up(nl_ctx *ctx, nl_buf *b, const void *host)
{
  return rows_up(ctx, b, 0, b->rows, host);
}

/* Pointer to row r of a dense host image or of a CPU buffer. */
static void *row_ptr(const nl_buf *b, void *base, int64_t stride, int64_t r)
{
  return (char *)base + (size_t)r * (size_t)stride * (size_t)nlk_dtype_size(b->dtype);
}

/* Runs `gen` over every row of b: directly in place on the CPU, through a staging image for
 * CUDA buffers. gen(row, r, cols, state) writes one row of dtype elements. */
typedef void (*row_gen)(const nl_buf *b, void *row, int64_t r, const void *state);

static nl_status generate(nl_ctx *ctx, nl_buf *b, row_gen gen, const void *state)
{
  int threads = nl__threads(ctx);
  if (b->device.backend == NL_CPU) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < b->rows; r++)
      gen(b, row_ptr(b, b->data, b->stride, r), r, state);
    return NL_OK;
  } else {
    size_t bytes = (size_t)numel(b) * (size_t)nlk_dtype_size(b->dtype);
    void *host = malloc(bytes);
    nl_status st;
    if (!host)
      return nl__err(ctx, NL_ENOMEM, "cannot allocate %zu bytes of host staging", bytes);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < b->rows; r++)
      gen(b, row_ptr(b, host, b->cols, r), r, state);
    st = stage_up(ctx, b, host);
    free(host);
    return st;
  }
}

/* ---- fill ---- */

nl_status nl_buf_fill(nl_ctx *ctx, nl_buf *b, double value)
{
  nl_status st = check_buf(ctx, b, "fill");
  unsigned char pat[8] = {0};
  uint64_t pattern = 0;
  int es;
  if (st != NL_OK)
    return st;
  es = nlk_dtype_size(b->dtype);
  nl_store(b->dtype, pat, 0, value);
  memcpy(&pattern, pat, (size_t)es);
  if (b->device.backend == NL_CUDA)
    return nl__cuda_fill(ctx, b->device.index, b->data, b->rows, b->cols, b->stride, es, pattern);
  for (int64_t r = 0; r < b->rows; r++) {
    unsigned char *row = row_ptr(b, b->data, b->stride, r);
    for (int64_t c = 0; c < b->cols; c++)
      memcpy(row + c * es, pat, (size_t)es);
  }
  return NL_OK;
}

/* ---- counter-based random numbers ---- */

static inline uint64_t mix64(uint64_t z)
{
  z ^= z >> 30;
  z *= UINT64_C(0xbf58476d1ce4e5b9);
  z ^= z >> 27;
  z *= UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

static inline uint64_t hash2(uint64_t seed, uint64_t i)
{
  return mix64(mix64(seed + UINT64_C(0x9e3779b97f4a7c15)) ^ (i * UINT64_C(0xd1b54a32d192ed03)));
}

typedef struct rand_state {
  uint64_t seed;
  double a, b;  /* randn: mean, std; uniform: lo, hi */
} rand_state;

/* Box-Muller on the pair (2p, 2p+1): both members come from one hash, so any element is
 * computable alone. u1 is in (0, 1], never 0. */
static void gen_randn(const nl_buf *b, void *row, int64_t r, const void *state)
{
  const rand_state *s = state;
  const double two_pi = 6.283185307179586476925286766559;
  for (int64_t c = 0; c < b->cols; c++) {
    uint64_t i = (uint64_t)(r * b->cols + c), h = hash2(s->seed, i >> 1);
    double u1 = ((double)(h >> 32) + 1.0) * 0x1p-32;
    double u2 = (double)(h & 0xffffffffu) * 0x1p-32;
    double rad = sqrt(-2.0 * log(u1));
    double z = (i & 1) ? rad * sin(two_pi * u2) : rad * cos(two_pi * u2);
    nl_store(b->dtype, row, c, s->a + s->b * z);
  }
}

static void gen_uniform(const nl_buf *b, void *row, int64_t r, const void *state)
{
  const rand_state *s = state;
  for (int64_t c = 0; c < b->cols; c++) {
    uint64_t h = hash2(s->seed ^ UINT64_C(0x756e69666f726d), (uint64_t)(r * b->cols + c));
    nl_store(b->dtype, row, c, s->a + (s->b - s->a) * ((double)(h >> 11) * 0x1p-53));
  }
}

nl_status nl_buf_randn(nl_ctx *ctx, nl_buf *b, uint64_t seed, double mean, double std)
{
  nl_status st = check_buf(ctx, b, "randn");
  rand_state s = {seed, mean, std};
  if (st != NL_OK)
    return st;
  if (!isfinite(mean) || !isfinite(std) || std < 0)
    return nl__err(ctx, NL_EINVAL, "randn: mean must be finite and std finite and >= 0");
  return generate(ctx, b, gen_randn, &s);
}

nl_status nl_buf_uniform(nl_ctx *ctx, nl_buf *b, uint64_t seed, double lo, double hi)
{
  nl_status st = check_buf(ctx, b, "uniform");
  rand_state s = {seed, lo, hi};
  if (st != NL_OK)
    return st;
  if (!isfinite(lo) || !isfinite(hi) || hi < lo)
    return nl__err(ctx, NL_EINVAL, "uniform: need finite lo <= hi");
  return generate(ctx, b, gen_uniform, &s);
}

/* ---- conversion and element access ---- */

/* One NaN for every NaN handed to callers: LuaJIT reads doubles whose bits look like its own
 * tagged values (negative NaNs with payload) as objects, and crashes on them later. */
static double canonical(double v) { return isnan(v) ? NAN : v; }

nl_status nl_convert(int32_t src_dtype, const void *src, int32_t dst_dtype, void *dst, int64_t n)
{
  if (nl_dtype_size(src_dtype) == 0 || nl_dtype_size(dst_dtype) == 0 || n < 0 ||
      (n > 0 && (!src || !dst)))
    return NL_EINVAL;
  if (src_dtype == dst_dtype) {
    memmove(dst, src, (size_t)n * (size_t)nlk_dtype_size(src_dtype));
    return NL_OK;
  }
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; i++)
    nl_store(dst_dtype, dst, i, nl_load(src_dtype, src, i));
  if (dst_dtype == NL_F64)
    for (int64_t i = 0; i < n; i++)
      ((double *)dst)[i] = canonical(((double *)dst)[i]);
  return NL_OK;
}

static nl_status check_range(nl_ctx *ctx, const nl_buf *b, int64_t offset, int64_t count,
                             const void *p, const char *what)
{
  if (offset < 0 || count < 0 || offset > numel(b) || count > numel(b) - offset)
    return nl__err(ctx, NL_EINVAL, "%s: range [%lld, %lld) is outside the buffer's %lld elements",
                   what, (long long)offset, (long long)(offset + count), (long long)numel(b));
  if (count > 0 && !p)
    return nl__err(ctx, NL_EINVAL, "%s: NULL host pointer", what);
  return NL_OK;
}

nl_status nl_buf_write_f64(nl_ctx *ctx, nl_buf *dst, int64_t offset, int64_t count,
                           const double *src)
{
  nl_status st = check_buf(ctx, dst, "write");
  void *host;
  if (st != NL_OK || (st = check_range(ctx, dst, offset, count, src, "write")) != NL_OK)
    return st;
  if (count == 0)
    return NL_OK;
  if (dst->device.backend == NL_CPU) {
    for (int64_t i = 0; i < count; i++) {
      int64_t e = offset + i, r = e / dst->cols, c = e % dst->cols;
      nl_store(dst->dtype, row_ptr(dst, dst->data, dst->stride, r), c, src[i]);
    }
    return NL_OK;
  }
  /* CUDA: read-modify-write of the rows the range touches keeps the other elements. */
  {
    int64_t r0 = offset / dst->cols, n = (offset + count - 1) / dst->cols - r0 + 1;
    host = malloc((size_t)(n * dst->cols) * (size_t)nlk_dtype_size(dst->dtype));
    if (!host)
      return nl__err(ctx, NL_ENOMEM, "write: cannot allocate host staging");
    if ((st = rows_down(ctx, dst, r0, n, host)) == NL_OK) {
      for (int64_t i = 0; i < count; i++)
        nl_store(dst->dtype, host, offset - r0 * dst->cols + i, src[i]);
      st = rows_up(ctx, dst, r0, n, host);
    }
  }
  free(host);
  return st;
}

nl_status nl_buf_read_f64(nl_ctx *ctx, const nl_buf *src, int64_t offset, int64_t count,
                          double *dst)
{
  nl_status st = check_buf(ctx, src, "read");
  void *host;
  if (st != NL_OK || (st = check_range(ctx, src, offset, count, dst, "read")) != NL_OK)
    return st;
  if (count == 0)
    return NL_OK;
  if (src->device.backend == NL_CPU) {
    for (int64_t i = 0; i < count; i++) {
      int64_t e = offset + i, r = e / src->cols, c = e % src->cols;
      dst[i] = canonical(nl_load(src->dtype, row_ptr(src, src->data, src->stride, r), c));
    }
    return NL_OK;
  }
  /* CUDA: only the rows the range touches travel. */
  {
    int64_t r0 = offset / src->cols, n = (offset + count - 1) / src->cols - r0 + 1;
    host = malloc((size_t)(n * src->cols) * (size_t)nlk_dtype_size(src->dtype));
    if (!host)
      return nl__err(ctx, NL_ENOMEM, "read: cannot allocate host staging");
    if ((st = rows_down(ctx, src, r0, n, host)) == NL_OK)
      for (int64_t i = 0; i < count; i++)
        dst[i] = canonical(nl_load(src->dtype, host, offset - r0 * src->cols + i));
  }
  free(host);
  return st;
}

static nl_status check_dense_bytes(nl_ctx *ctx, const nl_buf *b, int64_t nbytes, const void *p,
                                   const char *what)
{
  int64_t want = numel(b) * nlk_dtype_size(b->dtype);
  if (nbytes != want)
    return nl__err(ctx, NL_EINVAL, "%s: %lld bytes given, the buffer holds %lld (dense %s)", what,
                   (long long)nbytes, (long long)want, nl_dtype_name(b->dtype));
  if (!p)
    return nl__err(ctx, NL_EINVAL, "%s: NULL host pointer", what);
  return NL_OK;
}

nl_status nl_buf_upload(nl_ctx *ctx, nl_buf *dst, const void *src, int64_t nbytes)
{
  nl_status st = check_buf(ctx, dst, "upload");
  if (st != NL_OK || (st = check_dense_bytes(ctx, dst, nbytes, src, "upload")) != NL_OK)
    return st;
  return stage_up(ctx, dst, src);
}

nl_status nl_buf_download(nl_ctx *ctx, const nl_buf *src, void *dst, int64_t nbytes)
{
  nl_status st = check_buf(ctx, src, "download");
  if (st != NL_OK || (st = check_dense_bytes(ctx, src, nbytes, dst, "download")) != NL_OK)
    return st;
  return stage_down(ctx, src, dst);
}

/* ---- copies ---- */

nl_status nl_buf_copy(nl_ctx *ctx, const nl_buf *src, nl_buf *dst)
{
  nl_status st = check_buf(ctx, src, "copy (source)");
  size_t rb;
  void *host, *conv = NULL;
  if (st != NL_OK || (st = check_buf(ctx, dst, "copy (destination)")) != NL_OK)
    return st;
  if (src->rows != dst->rows || src->cols != dst->cols)
    return nl__err(ctx, NL_EINVAL, "copy: shapes differ ([%lld, %lld] into [%lld, %lld])",
                   (long long)src->rows, (long long)src->cols, (long long)dst->rows,
                   (long long)dst->cols);
  if (src == dst)
    return NL_OK;
  rb = nl__buf_row_bytes(src);
  if (src->dtype == dst->dtype) {
    int es = nlk_dtype_size(src->dtype);
    if (src->device.backend == NL_CPU && dst->device.backend == NL_CPU) {
      for (int64_t r = 0; r < src->rows; r++)
        memcpy(row_ptr(dst, dst->data, dst->stride, r), row_ptr(src, src->data, src->stride, r), rb);
      return NL_OK;
    }
    if (src->device.backend == NL_CUDA && dst->device.backend == NL_CUDA &&
        src->device.index == dst->device.index)
      return nl__cuda_copy2d(ctx, src->device.index, dst->data, (size_t)dst->stride * es, src->data,
                             (size_t)src->stride * es, rb, (size_t)src->rows);
    if (src->device.backend == NL_CPU && dst->device.backend == NL_CUDA) {
      st = nl__cuda_copy2d(ctx, dst->device.index, dst->data, (size_t)dst->stride * es, src->data,
                           (size_t)src->stride * es, rb, (size_t)src->rows);
      return st != NL_OK ? st : nl__cuda_sync(ctx, dst->device.index);
    }
    if (src->device.backend == NL_CUDA && dst->device.backend == NL_CPU) {
      st = nl__cuda_copy2d(ctx, src->device.index, dst->data, (size_t)dst->stride * es, src->data,
                           (size_t)src->stride * es, rb, (size_t)src->rows);
      return st != NL_OK ? st : nl__cuda_sync(ctx, src->device.index);
    }
  }
  /* Different dtypes or different GPUs: through the host, converting with one rounding. */
  host = malloc((size_t)numel(src) * (size_t)nlk_dtype_size(src->dtype));
  if (!host)
    return nl__err(ctx, NL_ENOMEM, "copy: cannot allocate host staging");
  if ((st = stage_down(ctx, src, host)) == NL_OK && src->dtype != dst->dtype) {
    conv = malloc((size_t)numel(dst) * (size_t)nlk_dtype_size(dst->dtype));
    if (!conv)
      st = nl__err(ctx, NL_ENOMEM, "copy: cannot allocate host staging");
    else
      nl_convert(src->dtype, host, dst->dtype, conv, numel(src));
  }
  if (st == NL_OK)
    st = stage_up(ctx, dst, conv ? conv : host);
  free(conv);
  free(host);
  return st;
}

nl_status nl__buf_clone(nl_ctx *ctx, const nl_buf *src, nl_buf **out)
{
  int64_t shape[2] = {src->rows, src->cols};
  nl_status st;
  if (src->ndim == 1)
    shape[0] = src->cols;
  st = nl_buf_new(ctx, src->device, src->dtype, src->ndim, shape, src->stride, out);
  if (st != NL_OK)
    return st;
  if ((st = nl_buf_copy(ctx, src, *out)) != NL_OK) {
    nl_buf_free(*out);
    *out = NULL;
  }
  return st;
}
