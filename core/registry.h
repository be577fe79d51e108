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

enum { NL_OP_RMSNORM = NLK_RMSNORM, NL_OP_LAYERNORM = NLK_LAYERNORM, NL_OP_ADD_RMSNORM = NLK_ADD_RMSNORM };
enum { NL_FWD = NLK_FWD, NL_BWD = NLK_BWD };

#define NL_DT(d) (1u << (d))
#define NL_RED(r) (1u << (r))

struct nl_variant {
  const char *name;
  int32_t op, pass, backend;
  const char *strategy;
  const char *summary;
  const char *limits;
  uint32_t dtypes;            /* NL_DT bits of accepted activation dtypes */
  uint32_t reduces;           /* NL_RED bits; 0 for forward passes */
  int32_t default_reduce;
  /* `auto` entries only: the strategy to run, from the knobs of the launch and the shape.
   * nl__fits tells whether a strategy would take it. */
  const char *(*resolve)(const nl_knobs *kn, const nlk_norm *k);
};

/* The registry tables, and for each backend its kernel files' strategy tables (NULL-ended);
 * the CUDA ones are empty when normlab is built without CUDA. */
extern const nl_variant nl__cpu_variants[];
extern const int nl__cpu_variant_count;
extern const nlk_strategy *const nl__cpu_kernels[];
extern const nl_variant nl__cuda_variants[];
extern const int nl__cuda_variant_count;
extern const nlk_strategy *const nl__cuda_kernels[];

/* Whether `strategy` of k's pass on backend takes k (its kernels' supports()). */
int nl__fits(int backend, int pass, const char *strategy, const nlk_norm *k);

#endif
