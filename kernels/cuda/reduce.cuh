/*
 * reduce.cuh: the backward's weight-gradient reductions (reduce.cu), which every backward
 * strategy that does not sum dW in its own kernel ends with.
 */
#ifndef NL_REDUCE_CUH
#define NL_REDUCE_CUH

#include "nlk.h"

namespace nlk {

/* dW (in k->wdt, at k->dw) = the column sums of `rows` x N fp32 partial rows at P, on k's
 * stream; drop: P is scratch, and its lines may be dropped from L2 once read. */
int reduce_partials(nlk_norm *k, const float *P, int64_t rows, bool drop);

/* dW (16-bit) from the N-float accumulator of an atomic reduction. */
int convert_accum(nlk_norm *k, const float *acc);

} // namespace nlk

#endif
