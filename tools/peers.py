#!/usr/bin/env python3
"""peers.py: the field's norm kernels, timed the way normlab times its own, on the same shapes.

Peers (those importable): torch (eager PyTorch as HF models write it: fp32 upcast, rsqrt,
cast, weight multiply), torch_native (torch.nn.functional.rms_norm / layer_norm), compile
(torch.compile of the eager function), liger (Liger-Kernel's Triton kernels), quack (QuACK's
CuTe-DSL kernels; its LayerNorm takes fp32 weight and bias only).

Method (normlab's, core/bench.c): K buffer sets whose inputs and outputs together cover at
least --rotate-factor x the GPU's L2, each call on the next set; the calls captured in a CUDA
graph, one replay several passes over the K sets and about 20 ms long; replays for 300 ms so
that clocks settle, then the median of --batches timed replays (CUDA events), per call.
Outputs rotate by default: each set keeps its latest outputs alive, so every write reaches
DRAM, as normlab's do. --outputs shared drops each call's outputs, so that inside the graph
the allocator hands the next call the block the previous one freed and the outputs stay in
L2 (how a harness that discards its results measures). The backward is timed alone: the
forward runs once per set before capture, and each call computes the gradients of its
set's outputs (for autograd peers, torch.autograd.grad with the graph retained).

Byte model: normlab's, for every column alike: each input read once and each output written
once, as normlab's op reads and writes them (rmsnorm.fwd: x, w, y, rstd; rmsnorm.bwd: dy, x,
w, rstd, dx, dw; add_rmsnorm adds residual and residual_out, resp. dres; layernorm adds b
and mean, resp. db and mean). So GB/s in one row are comparable as inverse times, and to
normlab's tables from the same machine. % is of the copy roofline measured here (torch's
copy_ under the same method), or of --roofline GBPS: normlab's own copy figure, which reads
a little higher and is the ceiling normlab's tables use (every table prints it; or
`build/normlab -e 'print(require("normlab").device("cuda"):roofline())'`).

Before it is timed, every cell is checked against a float64 reference on its first set; a
peer whose error exceeds a loose bound for the dtype shows "wrong" and is not timed.

    python3 tools/peers.py --ops rmsnorm --passes fwd,bwd --M 4096 --N 1024..16384 \\
        --dtypes bf16 --json peers.json --markdown peers.md
"""
import argparse
import importlib
import json
import math
import os
import statistics
import sys
import time

OPS = ("rmsnorm", "add_rmsnorm", "layernorm")
PASSES = ("fwd", "bwd")
PEERS = ("torch", "torch_native", "compile", "liger", "quack")
EPS = {"rmsnorm": 1e-6, "add_rmsnorm": 1e-6, "layernorm": 1e-5}
# max |peer - ref| / max |ref| above which a peer's result is "wrong", not a rounding effect
TOLERANCE = {"bf16": 0.05, "fp16": 0.01, "fp32": 1e-3}


def sizes(text):
    """'4096,32768' or '1024..16384' (powers of two from the first to the last), mixed."""
    out = []
    for part in text.split(","):
        lo, sep, hi = part.partition("..")
        if sep:
            a, b = int(lo), int(hi)
            if a < 1 or b < a:
                raise argparse.ArgumentTypeError(f"bad range {part!r}")
            while a <= b:
                out.append(a)
                a *= 2
        else:
            n = int(part)
            if n < 1:
                raise argparse.ArgumentTypeError(f"bad size {part!r}")
            out.append(n)
    return out


def names(allowed):
    def parse(text):
        got = [t for t in text.split(",") if t]
        bad = [t for t in got if t not in allowed]
        if bad or not got:
            raise argparse.ArgumentTypeError(f"expected a comma list of {', '.join(allowed)}")
        return got
    return parse


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", type=names(OPS), default=["rmsnorm"],
                   help="comma list of " + ", ".join(OPS))
    p.add_argument("--passes", type=names(PASSES), default=list(PASSES), help="fwd, bwd or both")
    p.add_argument("--peers", type=names(PEERS), default=list(PEERS),
                   help="comma list of " + ", ".join(PEERS) + " (default: all)")
    p.add_argument("--M", type=sizes, default=[4096], help="rows: comma list, lo..hi doubles")
    p.add_argument("--N", type=sizes, default=sizes("1024..16384"), help="columns (1024..16384)")
    p.add_argument("--dtypes", type=names(("bf16", "fp16", "fp32")), default=["bf16"],
                   help="activation dtypes: bf16, fp16, fp32")
    p.add_argument("--weight", choices=("x", "fp32"), default="x",
                   help="weight (and bias) dtype: x's, or fp32 (QuACK's LayerNorm: always fp32)")
    p.add_argument("--outputs", choices=("rotate", "shared"), default="rotate",
                   help="rotate: outputs kept per set (DRAM); shared: dropped (they stay in L2)")
    p.add_argument("--rotate-factor", type=float, default=4.0, help="sets cover this x L2")
    p.add_argument("--batches", type=int, default=7, help="timed replays; the median is kept")
    p.add_argument("--compile-budget-s", type=float, default=600.0,
                   help="after this long, compile cells are skipped (torch.compile is slow)")
    p.add_argument("--roofline", type=float, help="GB/s to take %% of (normlab's copy figure)")
    p.add_argument("--json", help="write one record per cell here")
    p.add_argument("--markdown", help="write the tables here too")
    return p.parse_args(argv)


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


class Peers:
    """The peers this machine has: each op's forward functions, and why a peer is missing."""

    def __init__(self, torch, wanted):
        self.torch, self.F = torch, torch.nn.functional
        self.missing, self.liger, self.quack = {}, None, None
        if "liger" in wanted:
            liger_src = os.path.join(".gpu", "liger", "src")  # where a GPU set-up may unpack it
            if os.path.isdir(liger_src):
                sys.path.insert(0, os.path.abspath(liger_src))
            try:
                ops = "liger_kernel.ops."
                self.liger = {
                    "rmsnorm": importlib.import_module(ops + "rms_norm").LigerRMSNormFunction,
                    "layernorm": importlib.import_module(ops + "layer_norm").LigerLayerNormFunction,
                    "add_rmsnorm": importlib.import_module(
                        ops + "fused_add_rms_norm").LigerFusedAddRMSNormFunction,
                }
            except Exception as e:  # any import failure means: not available
                self.missing["liger"] = repr(e)[:160]
        if "quack" in wanted:
            try:
                self.quack = importlib.import_module("quack.rmsnorm")
            except Exception as e:
                self.missing["quack"] = repr(e)[:160]
        if "compile" in wanted:
            dyn = torch._dynamo.config
            for key in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                        "accumulated_recompile_limit"):
                if hasattr(dyn, key):
                    setattr(dyn, key, 1024)
            dyn.automatic_dynamic_shapes = False
        self.compiled = {}

    def eager(self, op):
        torch = self.torch

        def rms(x, w, eps=EPS["rmsnorm"]):
            xf = x.float()
            y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
            return (y * w).to(x.dtype)

        def add_rms(x, r, w):
            h = x + r
            return rms(h, w), h

        def ln(x, w, b):
            xf = x.float()
            mu = xf.mean(-1, keepdim=True)
            var = (xf - mu).pow(2).mean(-1, keepdim=True)
            y = ((xf - mu) * torch.rsqrt(var + EPS["layernorm"])).to(x.dtype)
            return (y * w + b).to(x.dtype)

        return {"rmsnorm": rms, "add_rmsnorm": add_rms, "layernorm": ln}[op]

    def function(self, peer, op):
        """The peer's forward for op (taking the op's inputs), or a str: why it has none."""
        if peer in self.missing:
            return "not available"
        F, eps = self.F, EPS[op]
        if peer == "torch":
            return self.eager(op)
        if peer == "compile":
            if op not in self.compiled:
                self.compiled[op] = self.torch.compile(self.eager(op), dynamic=False)
            return self.compiled[op]
        if peer == "torch_native":
            if op == "rmsnorm":
                return lambda x, w: F.rms_norm(x, (x.shape[-1],), w, eps)
            if op == "layernorm":
                return lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, eps)
            return "torch has no fused add+RMSNorm"
        if peer == "liger":
            fn = self.liger[op]
            if op == "rmsnorm":
                return lambda x, w: fn.apply(x, w, eps, 0.0, "llama", False)
            if op == "add_rmsnorm":
                return lambda x, r, w: fn.apply(x, r, w, eps, 0.0, "llama", False)
            return lambda x, w, b: fn.apply(x, w, b, eps)
        if peer == "quack":
            q = self.quack
            if op == "rmsnorm":
                return lambda x, w: q.rmsnorm(x, w, eps=eps)
            if op == "add_rmsnorm":
                return lambda x, r, w: q.rmsnorm(x, w, residual=r, eps=eps, prenorm=True)
            return QuackLayerNorm(q)
        raise ValueError(peer)


class QuackLayerNorm:
    """QuACK's LayerNorm has no autograd wrapper here: its forward and backward entry points."""

    def __init__(self, q):
        self.q = q

    def __call__(self, x, w, b):
        return self.q.layernorm_fwd(x, w, b, EPS["layernorm"])

    def forward_with_stats(self, x, w, b):
        y, rstd, mean = self.q.layernorm_fwd(x, w, b, EPS["layernorm"], return_rstd=True,
                                             return_mean=True)
        return y, rstd, mean

    def backward(self, x, w, dy, rstd, mean):
        return self.q.layernorm_bwd(x, w, dy, rstd, mean, has_bias=True)


def as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


class Cell:
    """One op, pass, shape and dtype, for one peer: K sets of inputs, and the call on set k."""

    def __init__(self, torch, op, pas, M, N, dtype, wdtype, fn, k_sets, rotate):
        self.torch, self.op, self.pas, self.fn, self.rotate = torch, op, pas, fn, rotate
        self.sets, self.held = [], [None] * k_sets
        gen = torch.Generator(device="cuda").manual_seed(1000 * M + N)
        quack_ln = isinstance(fn, QuackLayerNorm)
        wdt = torch.float32 if quack_ln else wdtype
        grad = pas == "bwd" and not quack_ln
        for _ in range(k_sets):
            def randn(*shape, dt=dtype, mean=0.0, std=1.0):
                t = torch.randn(*shape, device="cuda", generator=gen) * std + mean
                return t.to(dt).requires_grad_(grad)
            ins = [randn(M, N)]
            if op == "add_rmsnorm":
                ins.append(randn(M, N))
            ins.append(randn(N, dt=wdt, mean=1.0, std=0.1))
            if op == "layernorm":
                ins.append(randn(N, dt=wdt, std=0.1))
            s = {"inputs": ins}
            if pas == "bwd":
                self.prepare_backward(s, quack_ln, gen, dtype)
            self.sets.append(s)

    def prepare_backward(self, s, quack_ln, gen, dtype):
        torch, ins = self.torch, s["inputs"]
        if quack_ln:
            x, w, b = ins
            y, rstd, mean = self.fn.forward_with_stats(x, w, b)
            s["dy"] = torch.randn(y.shape, device="cuda", generator=gen).to(y.dtype)
            s["stats"] = (rstd, mean)
            return
        outs = as_tuple(self.fn(*ins))
        s["outs"] = outs
        s["grads"] = [torch.randn(o.shape, device="cuda", generator=gen).to(o.dtype) for o in outs]

    def call(self, k):
        s, torch = self.sets[k], self.torch
        if self.pas == "fwd":
            with torch.no_grad():
                out = self.fn(*s["inputs"])
        elif isinstance(self.fn, QuackLayerNorm):
            x, w, _ = s["inputs"]
            out = self.fn.backward(x, w, s["dy"], *s["stats"])
        else:
            out = torch.autograd.grad(s["outs"], s["inputs"], s["grads"], retain_graph=True)
        if self.rotate:
            self.held[k] = out
        return out

    def calls(self):
        return [lambda k=k: self.call(k) for k in range(len(self.sets))]


def reference(torch, op, pas, s):
    """float64 results on set s: the forward's outputs, or the gradients of its inputs."""
    ins = [t.detach().double().requires_grad_(pas == "bwd") for t in s["inputs"]]
    x = ins[0]
    eps = EPS[op]
    if op == "layernorm":
        w, b = ins[1], ins[2]
        mu = x.mean(-1, keepdim=True)
        var = (x - mu).pow(2).mean(-1, keepdim=True)
        outs = ((x - mu) / torch.sqrt(var + eps) * w + b,)
    else:
        h = x + ins[1] if op == "add_rmsnorm" else x
        w = ins[-1]
        y = h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + eps) * w
        outs = (y, h) if op == "add_rmsnorm" else (y,)
    if pas == "fwd":
        return outs
    if "dy" in s:  # QuACK's LayerNorm: the gradient of y only
        return torch.autograd.grad(outs[0], ins, s["dy"].double())
    return torch.autograd.grad(outs, ins, [g.double() for g in s["grads"]])


def max_error(got, want):
    """max |got - want| / max |want| over the results both have (a peer may return fewer)."""
    worst = 0.0
    for g, w in zip(got, want):
        if g is None or w is None or not hasattr(g, "shape") or tuple(g.shape) != tuple(w.shape):
            continue
        scale = float(w.abs().max()) or 1.0
        worst = max(worst, float((g.double() - w).abs().max()) / scale)
    return worst


def normlab_bytes(op, pas, M, N, act, wbytes):
    """normlab's byte model for the op and pass (core/registry.c: every buffer once)."""
    stats = 8 if op == "layernorm" else 4
    vectors = 2 if op == "layernorm" else 1  # w (and b)
    if pas == "fwd":
        acts = 4 if op == "add_rmsnorm" else 2
        return acts * M * N * act + vectors * N * wbytes + stats * M
    acts = 4 if op == "add_rmsnorm" else 3
    return acts * M * N * act + 2 * vectors * N * wbytes + stats * M


class Timer:
    def __init__(self, torch, batches):
        self.torch, self.batches = torch, batches
        self.stream = torch.cuda.Stream()

    def events(self, fn):
        torch = self.torch
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        return a.elapsed_time(b)

    def per_call(self, calls):
        """ms per call: the calls in rotation, captured in a CUDA graph of about 20 ms."""
        torch = self.torch
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):  # warm-up off the capture, as capture requires
            for c in calls:
                c()
        torch.cuda.synchronize()
        pass_ms = self.events(lambda: [c() for c in calls])
        reps = max(1, min(1000, round(20.0 / max(pass_ms, 1e-3))))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(reps):
                for c in calls:
                    c()
        start = time.time()
        while time.time() - start < 0.3:
            graph.replay()
            torch.cuda.synchronize()
        times = [self.events(graph.replay) for _ in range(self.batches)]
        del graph
        return statistics.median(times) / (reps * len(calls))


def copy_roofline(torch, timer):
    a = torch.empty(1 << 28, device="cuda", dtype=torch.float32).normal_()  # 1 GiB
    b = torch.empty_like(a)
    ms = timer.per_call([lambda: b.copy_(a)])
    return 2 * a.numel() * 4 / (ms * 1e-3) / 1e9


def run_cell(torch, peers, timer, args, op, pas, M, N, dtn, peer, deadline):
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtn]
    wdtype = torch.float32 if args.weight == "fp32" else dtype
    rec = {"op": op, "pass": pas, "M": M, "N": N, "dtype": dtn, "weight": args.weight,
           "peer": peer, "outputs": args.outputs}
    fn = peers.function(peer, op)
    if isinstance(fn, str):
        return dict(rec, status="skip: " + fn)
    if peer == "compile" and time.time() > deadline:
        return dict(rec, status="skip: past --compile-budget-s")
    act = torch.finfo(dtype).bits // 8
    wbytes = 4 if isinstance(fn, QuackLayerNorm) or args.weight == "fp32" else act
    nbytes = normlab_bytes(op, pas, M, N, act, wbytes)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size or 50 << 20
    sets = max(1, min(64, math.ceil(args.rotate_factor * l2 / nbytes)))
    cell = None
    try:
        cell = Cell(torch, op, pas, M, N, dtype, wdtype, fn, sets, args.outputs == "rotate")
        err = max_error(as_tuple(cell.call(0)), reference(torch, op, pas, cell.sets[0]))
        rec["max_err"] = err
        if not err <= TOLERANCE[dtn]:
            return dict(rec, status=f"wrong: error {err:.3g} of the reference's scale")
        ms = timer.per_call(cell.calls())
    except Exception as e:  # one cell failing must not lose the others
        return dict(rec, status="error: " + repr(e)[:200])
    finally:
        del cell
        torch.cuda.empty_cache()
    return dict(rec, status="ok", sets=sets, ms=ms, bytes=nbytes, gbps=nbytes / (ms * 1e-3) / 1e9)


def tables(records, peers, roofline):
    out = []
    for op in OPS:
        for pas in PASSES:
            rows = [r for r in records if r["op"] == op and r["pass"] == pas]
            if not rows:
                continue
            out += [f"\n{op}.{pas}: GB/s by normlab's byte model (% of {roofline:.0f} GB/s)\n",
                    "| M | N | dtype | " + " | ".join(peers) + " | best |",
                    "|---|---|---|" + "---|" * (len(peers) + 1)]
            keys = sorted({(r["M"], r["N"], r["dtype"]) for r in rows})
            for M, N, dt in keys:
                cells, best = [], None
                for peer in peers:
                    r = next((r for r in rows if (r["M"], r["N"], r["dtype"], r["peer"]) ==
                              (M, N, dt, peer)), None)
                    if r is None:
                        cells.append("-")
                    elif r["status"] == "ok":
                        cells.append(f"{r['gbps']:.0f} ({100 * r['gbps'] / roofline:.0f}%)")
                        if best is None or r["gbps"] > best[1]:
                            best = (peer, r["gbps"])
                    else:
                        cells.append(r["status"].split(":")[0])
                best_cell = f"{best[1]:.0f} {best[0]}" if best else "-"
                out.append(f"| {M} | {N} | {dt} | " + " | ".join(cells) + f" | {best_cell} |")
    return "\n".join(out) + "\n"


def main(argv=None):
    args = parse_args(argv)
    import torch  # after parsing, so that --help works without torch
    if not torch.cuda.is_available():
        print("peers.py: no CUDA device", file=sys.stderr)
        return 2
    peers = Peers(torch, args.peers)
    timer = Timer(torch, args.batches)
    header = [f"# peers on {torch.cuda.get_device_name()} (torch {torch.__version__}), outputs "
              f"{args.outputs}, K sets >= {args.rotate_factor:g} x L2, CUDA graph, median of "
              f"{args.batches}"]
    for peer, why in peers.missing.items():
        header.append(f"# {peer}: not available: {why}")
    copy = copy_roofline(torch, timer)
    roofline = args.roofline or copy
    header.append(f"# copy roofline here (torch copy_): {copy:.0f} GB/s; % below of "
                  f"{roofline:.0f} GB/s" + (" (--roofline)" if args.roofline else ""))
    print("\n".join(header), flush=True)
    deadline = time.time() + args.compile_budget_s
    records = []
    for op in args.ops:
        for pas in args.passes:
            for dtn in args.dtypes:
                for M in args.M:
                    for N in args.N:
                        for peer in args.peers:
                            r = run_cell(torch, peers, timer, args, op, pas, M, N, dtn, peer,
                                         deadline)
                            log(json.dumps(r))
                            records.append(r)
    text = tables(records, args.peers, roofline)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(header) + "\n" + text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "copy_gbps": copy,
                       "roofline_gbps": roofline, "records": records}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
