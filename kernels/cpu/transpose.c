/*
 * transpose.c: the transpose op on the CPU. yt[j][i] = x[i][j], and the row-major copy y
 * when asked (cast_transpose writes both, as TransformerEngine's does). Out of the same
 * dtype without a scale, an element is copied bit for bit (NaN payloads included): that is
 * also how the external transposed copy of a norm's y is made. Into fp8, an element is
 * satfinite(rne(x * scale)) of the fp32 product (nlc_store_fp8), and amax is max |x|.
 * Current scaling takes two passes: amax over x, then the scale from it, then the copy.
 *
 * `ref` runs over yt's rows (threads split them), reading x down its columns; `tiled` deals
 * tiles of transpose.tile_m x tile_n elements to the threads, read along x's rows and written
 * along yt's while the tile is in cache. Both give the same bits.
 */
#include <stdio.h>

#include "cpu_kernels.h"
#include "cpu_rows.h"

/* Element (i, j) of x into yt[j][i] (and y[i][j] when given): copied when `copy`, else
 * converted to fp8 with `scale`; |x| into *amax when given. amax_only: nothing written. */
static inline void tr_elem(const nlk_norm *k, int copy, const nlc_out *o, int64_t i, int64_t j,
                           uint32_t *amax)
{
  const int32_t dt = k->dt, ydt = k->ydt;
  const void *src = nlc_at(k->x, i, k->sx, dt);
  void *dst = nlc_at_mut(k->yt, j, k->syt, ydt);
  if (amax != NULL) {
    const uint32_t a = nlc_abs_bits(nl_load(dt, src, j));
    if (a > *amax)
      *amax = a;
  }
  if (o->amax_only)
    return;
  if (copy) {
    const int sz = nlk_dtype_size(dt);
    memcpy((char *)dst + i * sz, (const char *)src + j * sz, (size_t)sz);
  } else {
    nlc_store_fp8(ydt, dst, i, nl_load(dt, src, j), o->scale);
  }
  if (k->y != NULL) {
    const int sz = nlk_dtype_size(ydt);
    memcpy((char *)nlc_at_mut(k->y, i, k->sy, ydt) + j * sz, (const char *)dst + i * sz,
           (size_t)sz);
  }
}

/* One pass over every element (nlc_pass_fn; arg: whether tiled). */
static int tr_pass(nlk_norm *k, const void *arg, const nlc_out *o, int want_amax,
                   uint32_t *amax_out)
{
  const int tiled = *(const int *)arg;
  /* the same dtype, unscaled: the bits themselves */
  const int copy = k->ydt == k->dt && (!nlk_is_fp8(k->ydt) ||
                                       (k->scale == NULL && k->scaling == NLK_SCALING_DELAYED));
  const int64_t tm = k->tr.tile_m, tn = k->tr.tile_n;
  const int64_t tiles_m = (k->M + tm - 1) / tm, tiles_n = (k->N + tn - 1) / tn;
  uint32_t amax = 0;
  int used = 1;
#pragma omp parallel num_threads(nlc_threads(k)) reduction(max : amax)
  {
    uint32_t *am = want_amax ? &amax : NULL;
    int64_t t, i, j;
#pragma omp single nowait
    used = omp_get_num_threads();
    if (tiled) {
#pragma omp for schedule(static)
      for (t = 0; t < tiles_m * tiles_n; t++) {
        const int64_t i0 = t / tiles_n * tm, j0 = t % tiles_n * tn;
        const int64_t i1 = i0 + tm < k->M ? i0 + tm : k->M, j1 = j0 + tn < k->N ? j0 + tn : k->N;
        for (i = i0; i < i1; i++)
          for (j = j0; j < j1; j++)
            tr_elem(k, copy, o, i, j, am);
      }
    } else {
#pragma omp for schedule(static)
      for (j = 0; j < k->N; j++)
        for (i = 0; i < k->M; i++)
          tr_elem(k, copy, o, i, j, am);
    }
  }
  k->grid = used;
  k->block = 0;
  *amax_out = amax;
  return NLK_OK;
}

static int tr_run(nlk_norm *k, int tiled)
{
  if (k->M <= 0 || k->N <= 0 || k->dt < NLK_F32 || k->dt > NLK_F64 ||
      (k->ydt != k->dt && !nlk_is_fp8(k->ydt)) || (tiled && (k->tr.tile_m < 1 || k->tr.tile_n < 1)))
    return NLK_ERR_UNSUPPORTED;
  return nlc_scaled_run(k, tr_pass, &tiled, k->M * k->N * nlk_dtype_size(k->dt));
}

static int ref_transpose(nlk_norm *k) { return tr_run(k, 0); }

static int tiled_transpose(nlk_norm *k) { return tr_run(k, 1); }

/* The tile must be powers of two, as on the GPU, so that one setting means the same tile on
 * both backends. */
static int tiled_supports(const nlk_norm *k, char *why, size_t cap)
{
  const int32_t tm = k->tr.tile_m, tn = k->tr.tile_n;
  if (tm > 0 && tn > 0 && (tm & (tm - 1)) == 0 && (tn & (tn - 1)) == 0)
    return NLK_OK;
  snprintf(why, cap, "the tile %d x %d (transpose.tile_m x transpose.tile_n) is not of powers of two",
           (int)tm, (int)tn);
  return NLK_ERR_UNSUPPORTED;
}

const nlk_strategy nlk_cpu_transpose[] = {
  {"ref", NLK_FWD, ref_transpose, NULL, NULL, NULL},
  {"tiled", NLK_FWD, tiled_transpose, NULL, tiled_supports, NULL},
  {NULL, 0, NULL, NULL, NULL, NULL},
};
