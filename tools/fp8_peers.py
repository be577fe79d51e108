#!/usr/bin/env python3
"""PyTorch's fp8 norm output, transposed copy and cast-transpose, timed on normlab's shapes
with normlab's method: the anchors of experiments/fp8_sweep.lua.

    python3 tools/fp8_peers.py [--M LIST] [--N LIST] [--fp8 e4m3|e5m2] [--columns LIST]
                               [--outputs rotate|shared] [--roofline GBPS]
                               [--compile-budget S] [--max-sets K] [--seed N] [--json FILE]
                               [--markdown FILE]

Run it on the GPU machine from the repository root. bf16 x and weight, RMSNorm as Hugging Face
writes it (tools/peers.py's torch column), a per-tensor scale (delayed scaling: a one-element
fp32 tensor, 1) and the amax of y, as TransformerEngine's recipe asks of a norm with an fp8
output. Columns, each normlab's fp8_sweep column it stands beside:
  norm_fp8        eager: y = rmsnorm(x, w), amax = max |y|, y8 = (y * scale).to(fp8)    <v>:fp8
  norm_fp8_c      torch.compile of norm_fp8's function                                  <v>:fp8
  norm_fp8_t      norm_fp8, then yt = y8.t().contiguous()                               <v>:fp8+yt:<way>
  norm_fp8_t_c    torch.compile of norm + amax + scale + cast + transpose               <v>:fp8+yt:<way>
  transpose       x.t().contiguous(), bf16                                              transpose:<s>
  cast_t          x8 = (x * scale).to(fp8), xt = x8.t().contiguous(), amax = max |x|     cast_transpose:<s>
  cast_t_c        torch.compile of cast_t's function                                    cast_transpose:<s>
Every column is charged normlab's bytes for its fp8_sweep column (fp8 elements one byte): norm
to fp8: x, w, y and rstd (which the peers do not write), plus yt with the transposed copy;
transpose: x and yt; cast_transpose: x, y and yt; amax 4 bytes. The GB/s are therefore
ratios of times against normlab's table of the same shape.

Check: once per cell, before timing: the fp8 outputs of the first 64 rows (and their
transposed copies, element for element) against float64, within two fp8 ulps relative
(2^-2 for e4m3, 2^-1 for e5m2) or 2^-9 absolute; amax within 1%. A cell out of bounds says
"wrong" and is not timed. Timing, --outputs, --roofline and --compile-budget as in
tools/peers.py (its functions time the calls here).

Exit status: 0 once the sweep has run; 2 for a bad argument; 1 without a CUDA device.
"""
import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402  (tools/peers.py: timing, arguments, the eager RMSNorm)

COLUMNS = ("norm_fp8", "norm_fp8_c", "norm_fp8_t", "norm_fp8_t_c", "transpose", "cast_t",
           "cast_t_c")
FP8 = {"e4m3": ("float8_e4m3fn", 2 ** -2), "e5m2": ("float8_e5m2", 2 ** -1)}
CHECK_ROWS = 64
torch = None


def fp8_bytes(column, M, N):
    """normlab's bytes for the fp8_sweep column a peer column stands beside.

    >>> fp8_bytes("norm_fp8", 4096, 1024)  # x 8 MiB, w, y 4 MiB, rstd, amax
    12601348
    >>> fp8_bytes("norm_fp8_t", 4096, 1024) - fp8_bytes("norm_fp8", 4096, 1024)  # yt
    4194304
    >>> fp8_bytes("transpose", 4096, 1024), fp8_bytes("cast_t", 4096, 1024)
    (16777216, 16777220)
    """
    base = column.removesuffix("_c")
    if base == "transpose":
        return 2 * M * N * 2
    if base == "cast_t":
        return M * N * 2 + 2 * M * N + 4
    norm = M * N * 2 + N * 2 + M * N + M * 4 + 4
    return norm + (M * N if base == "norm_fp8_t" else 0)


# The functions -----------------------------------------------------------------------------

def norm_fp8(x, w, scale, fp8):
    y = peers.rmsnorm_eager(x, w)
    amax = y.abs().amax().float()
    return (y.float() * scale).to(fp8), amax


def norm_fp8_t(x, w, scale, fp8):
    y8, amax = norm_fp8(x, w, scale, fp8)
    return y8, y8.t().contiguous(), amax


def transpose(x):
    return x.t().contiguous()


def cast_t(x, scale, fp8):
    x8 = (x.float() * scale).to(fp8)
    return x8, x8.t().contiguous(), x.abs().amax().float()


class Columns:
    """The column functions, compiled ones made on first use and charged to the budget."""

    def __init__(self, budget_s):
        self.budget_s, self.spent_s, self.compiled = budget_s, 0.0, {}
        peers.raise_recompile_limits()

    def function(self, column):
        base = {"norm_fp8": norm_fp8, "norm_fp8_t": norm_fp8_t, "transpose": transpose,
                "cast_t": cast_t}
        name = column.removesuffix("_c")
        if name == column:
            return base[name]
        if column not in self.compiled:
            self.compiled[column] = torch.compile(base[name], dynamic=False)
        return self.compiled[column]

    def skip(self, column):
        if column.endswith("_c") and self.spent_s >= self.budget_s:
            return f"compile budget of {self.budget_s:g} s spent"
        return None


def make_set(M, N, seed):
    g = torch.Generator(device=peers.DEVICE).manual_seed(seed)
    x = torch.randn(M, N, generator=g, device=peers.DEVICE).to(torch.bfloat16)
    w = (1 + 0.1 * torch.randn(N, generator=g, device=peers.DEVICE)).to(torch.bfloat16)
    return x, w


def make_call(column, fn, x, w, scale, fp8):
    base = column.removesuffix("_c")
    if base == "transpose":
        return lambda: fn(x)
    if base == "cast_t":
        return lambda: fn(x, scale, fp8)
    return lambda: fn(x, w, scale, fp8)


# The check ---------------------------------------------------------------------------------

def reference(column, x, w, scale):
    """float64: (y * scale for the first rows, amax) of what the column converts."""
    base = column.removesuffix("_c")
    h = x[:CHECK_ROWS].double()
    if base == "cast_t":
        return h * scale, x.double().abs().amax().item()
    if base == "transpose":
        return h, None
    full = x.double()
    y = full * torch.rsqrt(full.pow(2).mean(-1, keepdim=True) + peers.RMS_EPS) * w.double()
    return y[:CHECK_ROWS] * scale, y.abs().amax().item()


def check(column, out, expected, rtol):
    """None when within bounds, else what is not."""
    rows, amax = expected
    out = out if isinstance(out, tuple) else (out,)
    got = out[0][:CHECK_ROWS].double()
    if column.removesuffix("_c") == "transpose":
        return None if torch.equal(out[0][:, :CHECK_ROWS].t(), rows.to(out[0].dtype)) else "yt differs"
    err = ((got - rows).abs() - rtol * rows.abs()).max().item()
    if not err <= 2 ** -9:
        return f"y off by {err:.3g} beyond {rtol:g} relative"
    if len(out) == 3 and not torch.equal(out[1][:, :CHECK_ROWS].t().view(torch.uint8),
                                         out[0][:CHECK_ROWS].view(torch.uint8)):
        return "yt is not y transposed"
    got_amax = out[-1].item()
    if amax is not None and not abs(got_amax - amax) <= 0.01 * amax:
        return f"amax {got_amax:g}, reference {amax:g}"
    return None


# Cells -------------------------------------------------------------------------------------

def run_cell(column, M, N, args, cols, stream, l2, fp8, rtol):
    record = {"column": column, "M": M, "N": N, "fp8": args.fp8,
              "normlab_bytes": fp8_bytes(column, M, N)}
    reason = cols.skip(column)
    if reason:
        return {**record, "status": "skip", "reason": reason}
    try:
        with torch.cuda.stream(stream):
            per_set = record["normlab_bytes"]
            count = peers.sets_for(per_set, l2, args.max_sets)
            sets = [make_set(M, N, args.seed * args.max_sets + i) for i in range(count)]
            scale = torch.ones(1, device=peers.DEVICE)
            start = time.perf_counter()
            fn = cols.function(column)
            calls = [make_call(column, fn, x, w, scale, fp8) for x, w in sets]
            with torch.no_grad():
                out = calls[0]()
                if column.endswith("_c"):
                    cols.spent_s += time.perf_counter() - start
                wrong = check(column, out, reference(column, *sets[0], 1.0), rtol)
                del out
                if wrong:
                    return {**record, "status": "wrong", "reason": wrong, "sets": count}
                ms, per_replay = peers.time_per_call(
                    peers.rotating(calls, args.outputs == "rotate"), stream)
        return {**record, "status": "ok", "sets": count, "ms": ms, "calls_per_replay": per_replay,
                "gbps": record["normlab_bytes"] / (ms * 1e6)}
    except Exception as e:  # one cell's failure must not lose the others
        return {**record, "status": "error", "reason": peers.describe(e)}
    finally:
        peers.release_memory()


def table(records, columns, roof):
    lines = ["| M | N | " + " | ".join(columns) + " |",
             "|---:|---:|" + "---:|" * len(columns)]
    shapes = sorted({(r["M"], r["N"]) for r in records})
    for M, N in shapes:
        cells = []
        for c in columns:
            r = next((r for r in records if (r["M"], r["N"], r["column"]) == (M, N, c)), None)
            if r is None:
                cells.append("-")
            elif r["status"] == "ok":
                cells.append(f"{r['gbps']:.0f} ({100 * r['gbps'] / roof:.0f}%)" if roof
                             else f"{r['gbps']:.0f}")
            else:
                cells.append(f"{r['status']}: {r.get('reason', '')}"[:60])
        lines.append(f"| {M} | {N} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--M", type=peers.int_list, default="4096,32768")
    p.add_argument("--N", type=peers.int_list, default="1024,2048,4096,8192,16384")
    p.add_argument("--fp8", choices=sorted(FP8), default="e4m3")
    p.add_argument("--columns", type=peers.name_list(COLUMNS), default=",".join(COLUMNS))
    p.add_argument("--outputs", choices=("rotate", "shared"), default="rotate")
    p.add_argument("--roofline", type=peers.positive_float, default=None,
                   help="GB/s for the %% columns (normlab's copy roofline from the same machine); "
                   "default: torch's copy_, timed here")
    p.add_argument("--compile-budget", type=peers.positive_float, default=300.0)
    p.add_argument("--max-sets", type=peers.positive_int, default=peers.MAX_SETS,
                   help="at most this many buffer sets a cell (normlab's bench.max_sets)")
    p.add_argument("--seed", type=peers.positive_int, default=1)
    p.add_argument("--json")
    p.add_argument("--markdown")
    return p.parse_args(argv)


def main(argv=None):
    global torch
    args = parse_args(argv)
    why = peers.import_torch()
    if why:
        print(f"fp8_peers: {why}", file=sys.stderr)
        return 1
    torch = peers.torch
    fp8, rtol = getattr(torch, FP8[args.fp8][0]), FP8[args.fp8][1]
    stream = torch.cuda.Stream()
    roof = args.roofline or peers.copy_roofline(stream)
    l2 = peers.l2_bytes()
    cols = Columns(args.compile_budget)
    records = []
    for M in args.M:
        for N in args.N:
            for column in args.columns:
                print(f"fp8_peers: {column} {M} x {N}", file=sys.stderr)
                records.append(run_cell(column, M, N, args, cols, stream, l2, fp8, rtol))
    text = (f"fp8 anchors on {torch.cuda.get_device_name()} (torch {torch.__version__}), bf16 x, "
            f"fp8 {args.fp8}, outputs {args.outputs}, roofline {roof:.0f} GB/s; GB/s by normlab's "
            f"bytes of the matching fp8_sweep column\n\n" + table(records, args.columns, roof))
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps({"roofline_gbps": roof, "records": records}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
