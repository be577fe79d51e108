/*
 * CPU kernels: the fp64 reference ("ref", the oracle) and the CPU forms of the strategies
 * that the experiments compare, as strategy tables (nlk.h) that the registry's CPU lines
 * name. Each launcher takes the flattened view of nlk.h, which the core has already
 * validated (shapes, dtypes, aliasing), and returns NLK_OK or an NLK_ERR_* code. The op
 * (rmsnorm, layernorm, add_rmsnorm) is k->op.
 */
#ifndef NL_CPU_KERNELS_H
#define NL_CPU_KERNELS_H

#include "nlk.h"

/* ref.c: fp64 accumulation; any activation dtype including fp64; every option of the
 * contract. Forward and backward. */
extern const nlk_strategy nlk_cpu_ref[];

/* fast_fwd.c: `row` gives each worker a contiguous block of rows; `persistent` has workers
 * take rows round-robin with the weight converted to fp32 once per worker. */
extern const nlk_strategy nlk_cpu_fwd[];

/* fast_bwd.c. `row`: each row writes its dW (and dB) contribution into an M x N fp32 temp in
 * k->ws, then a column reduction (the old design). `persistent`: each worker accumulates dW
 * over a strided set of rows in its own fp32 partial row in k->ws, then one reduction. */
extern const nlk_strategy nlk_cpu_bwd[];

/* transpose.c: the transpose op (yt = x transposed, cast to fp8 with a scale, and the cast
 * copy y). `ref`: element by element; `tiled`: tiles of transpose.tile_m x tile_n. */
extern const nlk_strategy nlk_cpu_transpose[];

#endif
