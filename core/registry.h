/*
 * registry.h: a variant is one strategy of one op and pass on one backend. The tables live
 * in variants_cpu.c and variants_cuda.c; registry.c validates arguments, resolves `auto`
 * and runs entries. Names are "<op>.<pass>.<strategy>" and stable forever.
 */
#ifndef NL_REGISTRY_H
#define NL_REGISTRY_H

#include "internal.h"

enum { NL_OP_RMSNORM = NLK_RMSNORM, NL_OP_LAYERNORM = NLK_LAYERNORM, NL_OP_ADD_RMSNORM = NLK_ADD_RMSNORM };
enum { NL_FWD = 0, NL_BWD = 1 };

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
  /* Shape and layout checks beyond dtypes; NULL when everything validated is accepted.
   * Writes a reason and returns NL_EUNSUPPORTED when it cannot run k. */
  nl_status (*supports)(const nl_ctx *ctx, const nlk_norm *k, char *why, size_t cap);
  size_t (*workspace)(const nlk_norm *k);            /* NULL: none */
  int (*launch)(nlk_norm *k);                        /* NULL for `auto` entries */
  const char *(*resolve)(const nl_ctx *ctx, const nlk_norm *k); /* `auto` entries only */
  /* Copies tuning settings into k before supports/workspace/launch; NULL: none. */
  void (*tune)(const nl_ctx *ctx, nlk_norm *k);
};

/* The tables; the CUDA one is empty when normlab is built without CUDA. */
extern const nl_variant nl__cpu_variants[];
extern const int nl__cpu_variant_count;
extern const nl_variant nl__cuda_variants[];
extern const int nl__cuda_variant_count;

#endif
