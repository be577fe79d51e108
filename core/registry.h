/*
 * registry.h: a variant is one strategy of one op and pass on one backend, named
 * "<op>.<pass>.<strategy>" (stable forever). The tables live in variants_cpu.c and
 * variants_cuda.c, a line per variant; the kernels of a strategy come from its kernel file's
 * strategy table (nlk_strategy), found by backend, pass and strategy name. registry.c
 * validates arguments, resolves `auto` and runs entries.
 */
#ifndef NL_REGISTRY_H
#define NL_REGISTRY_H

#include "internal.h"

enum { NL_OP_RMSNORM = NLK_RMSNORM, NL_OP_LAYERNORM = NLK_LAYERNORM, NL_OP_ADD_RMSNORM = NLK_ADD_RMSNORM,
       NL_OP_TRANSPOSE = NLK_TRANSPOSE };
enum { NL_FWD = NLK_FWD, NL_BWD = NLK_BWD };

#define NL_DT(d) (1u << (d))
#define NL_RED(r) (1u << (r))
#define NL_SC(s) (1u << (s))
#define NL_TR(t) (1u << (t))
/* fp8 y under both scalings; the external transposed copy, which the core composes for any
 * forward (the norm, then transpose.fwd.tiled) */
#define NL_FP8_ALL (NL_SC(NL_SCALING_DELAYED) | NL_SC(NL_SCALING_CURRENT))
#define NL_TR_EXTERNAL NL_TR(NL_TRANSPOSE_EXTERNAL)

struct nl_variant {
  const char *name;
  int32_t op, pass, backend;
  const char *strategy;
  const char *summary;
  const char *limits;
  uint32_t dtypes;            /* NL_DT bits of accepted activation dtypes */
  uint32_t reduces;           /* NL_RED bits; 0 for forward passes */
  int32_t default_reduce;
  uint32_t fp8;               /* NL_SC bits: the scalings it offers with an fp8 y (0: none) */
  uint32_t transposes;        /* NL_TR bits: the ways it writes yt (forward passes) */
  /* `auto` entries only: the strategy to run, from the knobs of the launch and the shape.
   * nl__fits tells whether a strategy would take it. */
  const char *(*resolve)(const nl_knobs *kn, const nlk_norm *k);
};

/* The registry tables, and for each backend its kernel files' strategy tables (NULL-ended),
 * the norms' and the transpose op's; the CUDA ones are empty when normlab is built without
 * CUDA. */
extern const nl_variant nl__cpu_variants[];
extern const int nl__cpu_variant_count;
extern const nlk_strategy *const nl__cpu_kernels[];
extern const nlk_strategy *const nl__cpu_transpose_kernels[];
extern const nl_variant nl__cuda_variants[];
extern const int nl__cuda_variant_count;
extern const nlk_strategy *const nl__cuda_kernels[];
extern const nlk_strategy *const nl__cuda_transpose_kernels[];

/* Whether `strategy` of k's op and a pass on backend takes k (what it offers for an fp8 y and
 * yt, and its kernels' supports()). */
int nl__fits(int backend, int pass, const char *strategy, const nlk_norm *k);

/* The waves of resident CTAs `strategy` would launch for k (its kernels' waves(), as run
 * info's), 0 where it counts none or plans none. */
double nl__waves(int backend, int pass, const char *strategy, const nlk_norm *k);

#endif
