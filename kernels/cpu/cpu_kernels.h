/*
 * CPU kernels: the fp64 reference ("ref", the oracle) and the CPU forms of the strategies
 * that the experiments compare. Each takes the flattened view of nlk.h, which the core has
 * already validated (shapes, dtypes, aliasing), and returns NLK_OK or an NLK_ERR_* code.
 * The op (rmsnorm, layernorm, add_rmsnorm) is k->op.
 */
#ifndef NL_CPU_KERNELS_H
#define NL_CPU_KERNELS_H

#include "nlk.h"

/* fp64 accumulation; any activation dtype including fp64; every option of the contract. */
int nlk_cpu_ref_fwd(nlk_norm *k);
int nlk_cpu_ref_bwd(nlk_norm *k);

/* Forward: `row` gives each worker a contiguous block of rows; `persistent` has workers
 * take rows round-robin with the weight converted to fp32 once per worker. */
int nlk_cpu_row_fwd(nlk_norm *k);
int nlk_cpu_persistent_fwd(nlk_norm *k);

/* Backward. `row`: each row writes its dW (and dB) contribution into an M x N fp32 temp in
 * k->ws, then a column reduction (the old design). `persistent`: each worker accumulates dW
 * over a strided set of rows in its own fp32 partial row in k->ws, then one reduction. */
int nlk_cpu_row_bwd(nlk_norm *k);
int nlk_cpu_persistent_bwd(nlk_norm *k);
size_t nlk_cpu_row_bwd_ws(const nlk_norm *k);
size_t nlk_cpu_persistent_bwd_ws(const nlk_norm *k);

#endif
