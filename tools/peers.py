#!/usr/bin/env python3
"""The field's normalization kernels, timed on normlab's shapes with normlab's method.

    python3 tools/peers.py [--ops LIST] [--passes LIST] [--M LIST] [--N LIST] [--dtypes LIST]
                           [--weight x|fp32] [--peers LIST] [--outputs rotate|shared]
                           [--bytes counted|normlab] [--roofline GBPS] [--compile-budget S]
                           [--max-sets K] [--seed N] [--json FILE] [--markdown FILE]

Run it on the GPU machine from the repository root. For each op, pass, dtype and shape, every
peer is first checked against a float64 reference and then timed. A markdown table per op and
pass goes to stdout as soon as it is complete (and to --markdown); --json gets one record per
cell; progress lines go to stderr.

Peers (the columns)
  torch         eager PyTorch as Hugging Face models write it: RMSNorm in fp32 (LlamaRMSNorm),
                cast back to x's dtype, then times the weight; add+RMSNorm adds the residual
                first; LayerNorm spelled out the same way, in fp32 with one cast at the end.
                A result is cast to x's dtype, which matters only under --weight fp32.
  torch_native  torch.nn.functional.rms_norm and layer_norm (torch has no add+RMSNorm).
  compile       torch.compile of the torch column's functions: default mode, static shapes, a
                recompile limit above any sweep's shape count, so every shape gets its own
                kernels. Compiling counts against --compile-budget; once it is spent, the
                compile cells still to come are skipped (a cell under way finishes).
  liger         Liger-Kernel's LigerRMSNormFunction, LigerFusedAddRMSNormFunction and
                LigerLayerNormFunction with their defaults (RMSNorm's backward writes dx over
                dy), when importable; .gpu/liger/src is searched first.
  quack         QuACK's CuTe-DSL functions in quack.rmsnorm (rmsnorm_fwd/_bwd for RMSNorm and
                add+RMSNorm, layernorm_fwd/_bwd), when importable. Its LayerNorm takes fp32
                weight and bias only, so those cells use fp32 whatever --weight says.
  A peer that cannot be imported is listed once as "not available" and its column shows "-";
  a cell a peer cannot run shows "skip: <reason>", an exception "error: <message>", a result
  out of bounds "wrong: <output and error>". Every other cell still runs.

Timing (normlab's method, core/bench.c)
  A cell allocates K buffer sets of seeded random data: the fewest whose bytes (inputs and
  outputs, in normlab's byte model) cover 4x the GPU's L2 (as the device reports it, 50 MiB
  if it reports none), at most --max-sets (64, as normlab's bench.max_sets; where that stops
  short of 4x L2, part of the data stays in L2 across calls). Call i uses set i mod K. After a
  warm-up on a side stream, the calls are captured into one CUDA graph making as many passes
  over the K sets as fill about 20 ms; the graph is replayed for about 300 ms so that the
  clocks settle, then 7 replays are timed with CUDA events. Time per call = median replay /
  calls per replay.
  --outputs rotate (the default, as normlab's): each set keeps its latest outputs alive until
  its next call, so the calls write K sets of outputs in turn and the writes reach DRAM.
  --outputs shared: each call's outputs are dropped at once, so the caching allocator hands the
  next call the same block, which stays in L2 (as normlab's --outputs shared).
  Forward: under torch.no_grad(), as in inference (what each peer writes there is in the byte
  model below). Backward: the forward runs once per set before capture and the graph holds the
  backward alone, dW and dB reductions included: QuACK's backward functions, called directly,
  or torch.autograd.grad on the retained autograd graph, whose only nodes for Liger are
  Liger's own (its internal backward helpers change signature between releases).

Byte model (normlab's: every input read once and every output written once, at logical size)
  rmsnorm      fwd  x w -> y rstd                    bwd  dy x w rstd -> dx dw
  add_rmsnorm  fwd  x residual w -> y residual_out rstd
               bwd  dy dresidual_out x w rstd -> dx dw   (x is the forward's residual_out;
                                                          dx is also the residual's gradient)
  layernorm    fwd  x w b -> y mean rstd              bwd  dy x w mean rstd -> dx dw db
  x, residual, y, residual_out, dy, dx: M x N in x's dtype; w, b, dw, db: N in the weight's
  dtype; mean, rstd: M floats. normlab's forward writes the per-row statistics, its backward
  reads them. Each peer is charged exactly the tensors it reads and writes: the statistics
  only where its interface writes them in the forward or takes them in the backward
  (torch_native, liger, quack; at the dtype it stores them in), never for torch and compile,
  which return no statistics and whose backward works from saved activations. Activations a
  peer saves, temporaries and dW partials are scratch and never counted; a gradient a peer
  returns as a separate tensor (a second residual gradient) counts as written.
  Each table lists what every peer was charged and normlab's bytes for the row ("normlab
  MB"). GB/s use each peer's own bytes; --bytes normlab uses normlab's for every peer, so that
  a GB/s ratio against normlab's tables is a ratio of times.

Check
  Once per cell, on the first set, before timing: y, residual_out, dx (and a separate residual
  gradient) on the first 64 rows, dw and db on the first 64 columns summed over all rows, against
  float64. An error above a loose bound for the activations' dtype (max(1, largest
  |reference|) times 1/16 in bf16, 1/128 in fp16, 1/4096 in fp32) marks the cell "wrong",
  which is then not timed.

Roofline
  torch's device-to-device copy_ of 1 GiB, timed as a cell (bytes read + written). normlab's
  tables divide by its own copy kernel (nl_roofline), which typically reads a little higher
  than torch's copy_: pass normlab's figure from the same machine with --roofline so that the
  % columns match normlab's.

Exit status: 0 once the sweep has run, peers missing and cells failing included; 2 for a bad
argument; 1 without a CUDA device.
"""
import argparse
import datetime
import importlib
import importlib.metadata
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

OPS = ("rmsnorm", "add_rmsnorm", "layernorm")
PASSES = ("fwd", "bwd")
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
ITEMSIZE = {"bf16": 2, "fp16": 2, "fp32": 4}
PEERS = ("torch", "torch_native", "compile", "liger", "quack")
RMS_EPS = 1e-6
LN_EPS = 1e-5
EPS = {"rmsnorm": RMS_EPS, "add_rmsnorm": RMS_EPS, "layernorm": LN_EPS}

# normlab's timing constants (core/bench.c)
L2_FACTOR = 4
L2_FALLBACK = 50 * 2**20
MAX_SETS = 64  # bench.max_sets' default
WARMUP_MS = 300.0
REPLAY_MS = 20.0
TIMED_REPLAYS = 7
# Bounds the capture of the smallest cells (a few microseconds a call)
MAX_CALLS_PER_REPLAY = 8192
COPY_BYTES = 2**30
DEVICE = "cuda"  # where the cells' tensors live

CHECK_ROWS = 64
CHECK_COLS = 64
REFERENCE_CHUNK_BYTES = 256 * 2**20
LOOSE_BOUND = {"bf16": 1 / 16, "fp16": 1 / 128, "fp32": 1 / 4096}


# The byte model ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Roles:
    """The tensors of one op and pass in normlab's model: those read, those written, and the
    per-row statistics (written by a forward pass, read by a backward one)."""
    reads: tuple
    writes: tuple
    stats: tuple

    def placed(self, pass_):
        """(read, written) role names, the statistics on the side the pass puts them."""
        if pass_ == "fwd":
            return self.reads, self.writes + self.stats
        return self.reads + self.stats, self.writes


ROLES = {
    ("rmsnorm", "fwd"): Roles(("x", "w"), ("y",), ("rstd",)),
    ("add_rmsnorm", "fwd"): Roles(("x", "residual", "w"), ("y", "residual_out"), ("rstd",)),
    ("layernorm", "fwd"): Roles(("x", "w", "b"), ("y",), ("mean", "rstd")),
    ("rmsnorm", "bwd"): Roles(("dy", "x", "w"), ("dx", "dw"), ("rstd",)),
    ("add_rmsnorm", "bwd"): Roles(("dy", "dresidual_out", "x", "w"), ("dx", "dw"), ("rstd",)),
    ("layernorm", "bwd"): Roles(("dy", "x", "w"), ("dx", "dw", "db"), ("mean", "rstd")),
}
WEIGHT_ROLES = ("w", "b", "dw", "db")
STAT_ROLES = ("mean", "rstd")


def logical_bytes(role, M, N, x_size, w_size):
    """Size of one tensor of the model: M x N activations, N weights, M fp32 statistics."""
    if role in WEIGHT_ROLES:
        return N * w_size
    if role in STAT_ROLES:
        return M * 4
    return M * N * x_size


def normlab_bytes(op, pass_, M, N, x_size, w_size, inputs_only=False):
    """Bytes one call moves in normlab's model; inputs_only: the bytes it reads.

    >>> normlab_bytes("rmsnorm", "fwd", 4096, 1024, 2, 2)  # x, y: 8 MiB each; w; rstd
    16795648
    >>> normlab_bytes("layernorm", "bwd", 4096, 1024, 2, 4, inputs_only=True)  # dy x w mean rstd
    16814080
    """
    read, written = ROLES[op, pass_].placed(pass_)
    roles = read if inputs_only else read + written
    return sum(logical_bytes(role, M, N, x_size, w_size) for role in roles)


def set_count(op, pass_, M, N, x_size, w_size, l2_bytes, shared_outputs, max_sets=MAX_SETS):
    """Buffer sets a cell rotates over: the fewest covering L2_FACTOR x L2, at most max_sets.
    With shared outputs only the inputs rotate, so only they count.

    >>> set_count("rmsnorm", "fwd", 4096, 1024, 2, 2, 50 * 2**20, False)
    13
    >>> set_count("rmsnorm", "bwd", 32768, 16384, 2, 2, 50 * 2**20, False)
    1
    >>> set_count("rmsnorm", "fwd", 4096, 64, 2, 2, 50 * 2**20, False)
    64
    >>> set_count("rmsnorm", "fwd", 4096, 64, 2, 2, 50 * 2**20, False, max_sets=256)
    197
    """
    per_set = normlab_bytes(op, pass_, M, N, x_size, w_size, inputs_only=shared_outputs)
    return sets_for(per_set, l2_bytes, max_sets)


def sets_for(per_set, l2_bytes, max_sets=MAX_SETS):
    """The fewest sets of per_set bytes covering L2_FACTOR x L2, at most max_sets (and 1).

    >>> sets_for(2**20, 50 * 2**20, 16)
    16
    """
    return max(1, min(max_sets, math.ceil(L2_FACTOR * l2_bytes / per_set)))


def describe_roles(read, written):
    """Role names as the tables list them.

    >>> describe_roles(("x", "w"), ("y", "rstd"))
    'x w -> y rstd'
    """
    return " ".join(read) + " -> " + " ".join(written)


# Arguments --------------------------------------------------------------------------------

def int_list(text):
    """Comma list of positive integers; lo..hi doubles from lo while <= hi (normlab's rule).

    >>> int_list("1024..16384")
    [1024, 2048, 4096, 8192, 16384]
    >>> int_list("7, 1024..4096")
    [7, 1024, 2048, 4096]
    >>> int_list("3..20")
    [3, 6, 12]
    """
    values = []
    for item in text.split(","):
        lo, dots, hi = item.strip().partition("..")
        first = positive_int(lo)
        last = positive_int(hi) if dots else first
        if last < first:
            raise argparse.ArgumentTypeError(f"range {item.strip()} is empty")
        while first <= last:
            values.append(first)
            first *= 2
    return values


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not positive")
    return value


def positive_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not positive")
    return value


def name_list(allowed):
    """A converter of comma lists whose names must be among allowed.

    >>> name_list(PASSES)("bwd,fwd")
    ['bwd', 'fwd']
    """
    def convert(text):
        names = [name.strip() for name in text.split(",")]
        for name in names:
            if name not in allowed:
                raise argparse.ArgumentTypeError(
                    f"unknown '{name}' (expected: {', '.join(allowed)})")
        return names
    return convert


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="peers.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    # argparse converts string defaults with `type`, as it converts the command line
    p.add_argument("--ops", type=name_list(OPS), default=",".join(OPS),
                   help="ops, comma list (default: %(default)s)")
    p.add_argument("--passes", type=name_list(PASSES), default=",".join(PASSES),
                   help="passes, comma list (default: %(default)s)")
    p.add_argument("--M", type=int_list, default="4096,32768",
                   help="rows: comma list, lo..hi doubles from lo to hi (default: %(default)s)")
    p.add_argument("--N", type=int_list, default="1024..16384",
                   help="columns, the normalized size, as --M (default: %(default)s)")
    p.add_argument("--dtypes", type=name_list(tuple(DTYPES)), default="bf16",
                   help="activation dtypes: bf16, fp16, fp32 (default: %(default)s)")
    p.add_argument("--weight", choices=("x", "fp32"), default="x",
                   help="weight (and bias) dtype: x, the activations' dtype, or fp32 "
                        "(default: x; QuACK's LayerNorm is always fp32)")
    p.add_argument("--peers", type=name_list(PEERS), default=",".join(PEERS),
                   help="peers, comma list (default: %(default)s)")
    p.add_argument("--outputs", choices=("rotate", "shared"), default="rotate",
                   help="rotate: every set keeps its outputs, writes reach DRAM; shared: each "
                        "call's outputs are dropped and the next call reuses them in L2 "
                        "(default: rotate)")
    p.add_argument("--bytes", choices=("counted", "normlab"), default="counted",
                   help="GB/s from each peer's own bytes or from normlab's (default: counted)")
    p.add_argument("--roofline", type=positive_float, metavar="GBPS",
                   help="copy bandwidth for the %% columns, normlab's figure from the same "
                        "machine (default: torch's copy_, measured here)")
    p.add_argument("--compile-budget", type=positive_float, default=300.0, metavar="S",
                   help="seconds of torch.compile work after which compile cells are skipped "
                        "(default: %(default)g)")
    p.add_argument("--max-sets", type=positive_int, default=MAX_SETS, metavar="K",
                   help="at most K buffer sets a cell (normlab's bench.max_sets; default: "
                        "%(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random data (default: 0)")
    p.add_argument("--json", metavar="FILE", help="also write every cell's record here")
    p.add_argument("--markdown", metavar="FILE", help="also write the tables here")
    return p.parse_args(argv)


@dataclass(frozen=True)
class Case:
    """One cell's op, pass, shape and dtypes (weight: 'x' or 'fp32', as asked)."""
    op: str
    pass_: str
    M: int
    N: int
    dtype: str
    weight: str

    @property
    def eps(self):
        return EPS[self.op]

    def label(self):
        return f"{self.op} {self.pass_} {self.M}x{self.N} {self.dtype}"


def cases(args, op, pass_):
    return [Case(op, pass_, M, N, dtype, args.weight)
            for dtype in args.dtypes for M in args.M for N in args.N]


# torch, imported by main() once the arguments parse, so that --help runs anywhere -----------

torch = None


def import_torch():
    """Binds the module's torch; returns why there is no CUDA device to use, or None."""
    global torch
    try:
        import torch as module
    except ImportError as e:
        return f"torch is not importable: {e}"
    torch = module
    return None if torch.cuda.is_available() else "torch sees no GPU"


def torch_dtype(name):
    return getattr(torch, DTYPES[name])


def describe(error):
    """An exception as one short line."""
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0] if lines else ''}"
    return text if len(text) <= 160 else text[:157] + "..."


# The peers' functions ----------------------------------------------------------------------

# The inputs each op takes, in order, and the names of what it returns
ARGS = {"rmsnorm": ("x", "w"), "add_rmsnorm": ("x", "residual", "w"), "layernorm": ("x", "w", "b")}
FWD_OUTPUTS = {"rmsnorm": ("y",), "add_rmsnorm": ("y", "residual_out"), "layernorm": ("y",)}
GRADIENTS = {"rmsnorm": ("dx", "dw"), "add_rmsnorm": ("dx", "dresidual", "dw"),
             "layernorm": ("dx", "dw", "db")}


def rmsnorm_eager(x, w):
    """LlamaRMSNorm: normalize in fp32, cast back to x's dtype, times the weight."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + RMS_EPS)
    return (w * h.to(x.dtype)).to(x.dtype)


def add_rmsnorm_eager(x, residual, w):
    """The residual add of a decoder layer, then its RMSNorm; returns (y, residual_out)."""
    h = x + residual
    return rmsnorm_eager(h, w), h


def layernorm_eager(x, w, b):
    """LayerNorm in fp32, one cast to x's dtype at the end (HF models call nn.LayerNorm, the
    torch_native column; this is the same math spelled out)."""
    h = x.float()
    centered = h - h.mean(-1, keepdim=True)
    rstd = torch.rsqrt(centered.pow(2).mean(-1, keepdim=True) + LN_EPS)
    return (centered * rstd * w + b).to(x.dtype)


EAGER = {"rmsnorm": rmsnorm_eager, "add_rmsnorm": add_rmsnorm_eager, "layernorm": layernorm_eager}


def as_tuple(value):
    return value if isinstance(value, tuple) else (value,)


def named(names, values):
    """Outputs by name, without the ones a peer returned as None."""
    return {name: v for name, v in zip(names, as_tuple(values)) if v is not None}


def package_version(*distributions):
    for name in distributions:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "version unknown"


class Peer:
    """A column of the tables: how the peer runs a cell, and the per-row statistics it writes
    (forward) or reads (backward). `missing` says why it cannot run at all, or is None."""
    name = ""

    def __init__(self):
        self.version = ""
        self.missing = self.load()

    def load(self):
        """Imports what the peer needs; returns why it cannot, or None."""
        return None

    def skip(self, case):
        """Why the peer cannot run this cell, or None."""
        return None

    def forced_weight(self, case):
        """The weight dtype the peer requires for the case, whatever --weight says, or None."""
        return None

    def stats(self, case):
        """The per-row statistics the peer writes (forward) or reads (backward): name -> bytes
        per row."""
        return {}

    def make_call(self, case, tensors):
        """A function running one call on one buffer set and returning its outputs by name
        (statistics included, so that they stay alive). For a backward pass, the forward runs
        here, once."""
        raise NotImplementedError


class AutogradPeer(Peer):
    """A peer made of differentiable functions, one per op (`functions`): the forward runs
    under no_grad, the backward through torch.autograd.grad on a retained graph."""
    functions = {}

    def skip(self, case):
        return None if case.op in self.functions else f"no {case.op} in {self.name}"

    def make_call(self, case, tensors):
        fn = self.functions[case.op]
        args = [tensors[name] for name in ARGS[case.op]]
        if case.pass_ == "fwd":
            def forward():
                with torch.no_grad():
                    return named(FWD_OUTPUTS[case.op], fn(*args))
            return forward
        leaves = [a.detach().requires_grad_() for a in args]
        outputs = as_tuple(fn(*leaves))
        incoming = (tensors["dy"], tensors.get("dresidual_out"))[:len(outputs)]

        def backward():
            grads = torch.autograd.grad(outputs, leaves, incoming, retain_graph=True)
            return named(GRADIENTS[case.op], grads)
        return backward


class TorchPeer(AutogradPeer):
    name = "torch"

    def load(self):
        self.functions = EAGER
        self.version = torch.__version__


class NativePeer(AutogradPeer):
    """torch's own ops. ATen's kernels write their statistics even without autograd, and the
    backward reads the ones the forward saved."""
    name = "torch_native"

    def load(self):
        F = torch.nn.functional
        self.functions = {
            "rmsnorm": lambda x, w: F.rms_norm(x, (x.shape[-1],), w, RMS_EPS),
            "layernorm": lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, LN_EPS),
        }
        self.version = torch.__version__

    def stats(self, case):
        return {"mean": 4, "rstd": 4} if case.op == "layernorm" else {"rstd": 4}


def raise_recompile_limits():
    """torch.compile with dynamic=False keeps every shape static; these limits let each shape
    compile its own kernels instead of running eagerly, without a word, once a function has
    recompiled eight times (the default)."""
    config = torch._dynamo.config
    for names in (("recompile_limit", "cache_size_limit"),
                  ("accumulated_recompile_limit", "accumulated_cache_size_limit")):
        name = next((n for n in names if hasattr(config, n)), None)
        if name:
            setattr(config, name, 4096)


class CompilePeer(AutogradPeer):
    """torch.compile of the eager functions. make_call runs each new call once, so that its
    compilation happens there and is charged to the budget."""
    name = "compile"

    def __init__(self, budget_s):
        self.budget_s = budget_s
        self.spent_s = 0.0
        super().__init__()

    def load(self):
        raise_recompile_limits()
        self.functions = {op: torch.compile(fn, dynamic=False) for op, fn in EAGER.items()}
        self.version = torch.__version__

    def skip(self, case):
        if self.spent_s >= self.budget_s:
            return f"compile budget of {self.budget_s:g} s spent"
        return super().skip(case)

    def make_call(self, case, tensors):
        start = time.perf_counter()
        call = super().make_call(case, tensors)
        call()
        self.spent_s += time.perf_counter() - start
        return call


class LigerPeer(AutogradPeer):
    """Liger-Kernel's autograd functions, with their defaults. Their backward runs through
    autograd, as Liger's internal backward helpers change signature between releases. RMSNorm's
    backward writes dx over dy (in_place=True), so a set's dy changes from call to call; the
    traffic does not."""
    name = "liger"

    def load(self):
        # The GPU machine's set-up may unpack Liger-Kernel's source here instead of installing it
        source = REPO / ".gpu" / "liger" / "src"
        if source.is_dir():
            sys.path.insert(0, str(source))
        try:
            from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
            from liger_kernel.ops.layer_norm import LigerLayerNormFunction
            from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        except Exception as e:  # any import failure only takes this column away
            return describe(e)
        self.functions = {
            "rmsnorm": lambda x, w: LigerRMSNormFunction.apply(x, w, RMS_EPS),
            "add_rmsnorm": lambda x, r, w: LigerFusedAddRMSNormFunction.apply(x, r, w, RMS_EPS),
            "layernorm": lambda x, w, b: LigerLayerNormFunction.apply(x, w, b, LN_EPS),
        }
        self.version = package_version("liger-kernel", "liger_kernel")
        return None

    def stats(self, case):
        # RMSNorm keeps rstd in fp32; LayerNorm keeps mean and rstd in x's dtype
        if case.op == "layernorm":
            return {"mean": ITEMSIZE[case.dtype], "rstd": ITEMSIZE[case.dtype]}
        return {"rstd": 4}


class QuackPeer(Peer):
    """QuACK's forward and backward functions, called directly. The forward stores the
    statistics, as QuACK's own autograd forward does when gradients are wanted."""
    name = "quack"

    def load(self):
        try:
            # quack/__init__.py rebinds quack.rmsnorm to a function; the module is in sys.modules
            self.q = importlib.import_module("quack.rmsnorm")
        except Exception as e:  # any import failure only takes this column away
            return describe(e)
        self.version = package_version("quack-kernels", "quack")
        return None

    def skip(self, case):
        if case.op == "layernorm" and not hasattr(self.q, "layernorm_fwd"):
            return "this QuACK has no layernorm_fwd"
        return None

    def forced_weight(self, case):
        return "fp32" if case.op == "layernorm" else None

    def stats(self, case):
        return {"mean": 4, "rstd": 4} if case.op == "layernorm" else {"rstd": 4}

    def make_call(self, case, tensors):
        if case.op == "layernorm":
            return self.layernorm_call(case, tensors)
        return self.rmsnorm_call(case, tensors)

    def layernorm_call(self, case, t):
        q = self.q

        def forward():
            y, rstd, mean = q.layernorm_fwd(t["x"], t["w"], t["b"], case.eps,
                                            return_rstd=True, return_mean=True)
            return {"y": y, "mean": mean, "rstd": rstd}
        if case.pass_ == "fwd":
            return forward
        saved = forward()

        def backward():
            grads = q.layernorm_bwd(t["x"], t["w"], t["dy"], saved["rstd"], saved["mean"],
                                    has_bias=True)
            return named(GRADIENTS["layernorm"], grads)
        return backward

    def rmsnorm_call(self, case, t):
        q = self.q
        residual = t.get("residual")

        def forward():
            y, residual_out, rstd = q.rmsnorm_fwd(t["x"], t["w"], residual=residual,
                                                  eps=case.eps, store_rstd=True)
            outputs = {"y": y, "rstd": rstd}
            if residual is not None:
                outputs["residual_out"] = residual_out
            return outputs
        if case.pass_ == "fwd":
            return forward
        saved = forward()
        h = saved.get("residual_out", t["x"])

        def backward():
            dx, dw, _, dresidual = q.rmsnorm_bwd(h, t["w"], t["dy"], saved["rstd"],
                                                 dresidual_out=t.get("dresidual_out"),
                                                 has_residual=residual is not None)
            return named(("dx", "dw", "dresidual"), (dx, dw, dresidual))
        return backward


def make_peers(args):
    made = {"torch": TorchPeer, "torch_native": NativePeer, "liger": LigerPeer,
            "quack": QuackPeer, "compile": lambda: CompilePeer(args.compile_budget)}
    return [made[name]() for name in args.peers]


# Data, reference, bytes --------------------------------------------------------------------

def make_tensors(case, weight_dtype, seed):
    """One buffer set: seeded standard-normal activations (and incoming gradients for a
    backward pass), weights near 1 and biases near 0, drawn in fp32 so that every weight
    dtype holds the same values."""
    gen = torch.Generator(device=DEVICE).manual_seed(seed)

    def rows():
        return torch.randn(case.M, case.N, generator=gen, device=DEVICE,
                           dtype=torch_dtype(case.dtype))

    def vector(mean):
        values = mean + 0.1 * torch.randn(case.N, generator=gen, device=DEVICE)
        return values.to(weight_dtype)

    t = {"x": rows(), "w": vector(1.0)}
    if case.op == "add_rmsnorm":
        t["residual"] = rows()
    if case.op == "layernorm":
        t["b"] = vector(0.0)
    if case.pass_ == "bwd":
        t["dy"] = rows()
        if case.op == "add_rmsnorm":
            t["dresidual_out"] = rows()
    return t


def normalized_rows(case, t, rows):
    """The rows the op normalizes, in float64: x, or x + residual rounded to x's dtype as
    every peer's residual_out is."""
    h = t["x"][rows]
    if case.op == "add_rmsnorm":
        h = h + t["residual"][rows]
    return h.double()


def row_stats(case, h):
    """Mean (0 for RMSNorm) and rstd of float64 rows."""
    if case.op == "layernorm":
        mean = h.mean(-1, keepdim=True)
    else:
        mean = torch.zeros_like(h[:, :1])
    return mean, torch.rsqrt((h - mean).pow(2).mean(-1, keepdim=True) + case.eps)


def reference(case, t):
    """float64 outputs of the cell: row outputs on the first CHECK_ROWS rows, dw and db on the
    first CHECK_COLS columns."""
    rows = slice(0, CHECK_ROWS)
    h = normalized_rows(case, t, rows)
    mean, rstd = row_stats(case, h)
    xhat = (h - mean) * rstd
    w = t["w"].double()
    if case.pass_ == "fwd":
        ref = {"y": xhat * w + (t["b"].double() if "b" in t else 0)}
        if case.op == "add_rmsnorm":
            ref["residual_out"] = h
        return ref
    g = t["dy"][rows].double() * w
    dx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
    if case.op == "layernorm":
        dx = dx - rstd * g.mean(-1, keepdim=True)
    ref = {"dx": dx, **column_gradients(case, t)}
    if case.op == "add_rmsnorm":
        ref["dx"] = ref["dresidual"] = dx + t["dresidual_out"][rows].double()
    return ref


def column_gradients(case, t):
    """dw (and db) on the first CHECK_COLS columns, summed over every row, a chunk at a time."""
    cols = slice(0, CHECK_COLS)
    step = max(1, REFERENCE_CHUNK_BYTES // (8 * case.N))
    dw = db = 0
    for start in range(0, case.M, step):
        rows = slice(start, start + step)
        h = normalized_rows(case, t, rows)
        mean, rstd = row_stats(case, h)
        dy = t["dy"][rows, cols].double()
        dw = dw + (dy * (h[:, cols] - mean) * rstd).sum(0)
        db = db + dy.sum(0)
    return {"dw": dw, "db": db} if case.op == "layernorm" else {"dw": dw}


def check(case, outputs, expected):
    """The largest absolute error over the outputs the reference has, and a description of
    the first one out of its bound (None if all are within). The bound follows the
    activations' dtype, the coarsest of the cell (weights are in it or in fp32)."""
    worst, wrong = 0.0, None
    for name, ref in expected.items():
        got = outputs.get(name)
        if got is None:
            continue
        err = (got[:len(ref)].double() - ref).abs().max().item()
        bound = LOOSE_BOUND[case.dtype] * max(1.0, ref.abs().max().item())
        worst = err if math.isnan(err) or err > worst else worst
        if not err <= bound and wrong is None:
            wrong = f"{name}: max abs error {err:.3g} > {bound:.3g}"
    return worst, wrong


def counted_bytes(case, peer, tensors, outputs):
    """The bytes the peer moves per call, and which tensors they are: the op's inputs, each
    distinct output tensor it returns, and the statistics it writes or reads."""
    roles = ROLES[case.op, case.pass_]
    written, seen = [], set()
    for name, tensor in outputs.items():
        if name not in STAT_ROLES and tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            written.append((name, tensor.nbytes))
    stats = peer.stats(case)
    total = (sum(tensors[role].nbytes for role in roles.reads) + sum(n for _, n in written)
             + case.M * sum(stats.values()))
    charged = Roles(roles.reads, tuple(name for name, _ in written), tuple(stats))
    return total, describe_roles(*charged.placed(case.pass_))


# Timing ------------------------------------------------------------------------------------

def l2_bytes():
    size = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()),
                   "L2_cache_size", 0)
    return size or L2_FALLBACK


def rotating(calls, keep_outputs):
    """The calls, wrapped so that each set keeps its latest outputs (keep_outputs) or drops
    them at once. A set drops its previous outputs just before its call, so the allocator can
    hand it the same block again: one output buffer per set, as in normlab's bench."""
    held = [None] * len(calls)

    def wrap(i, call):
        def run():
            held[i] = None
            outputs = call()
            if keep_outputs:
                held[i] = outputs
        return run
    return [wrap(i, call) for i, call in enumerate(calls)]


def capture(calls, passes, stream):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(passes):
            for call in calls:
                call()
    return graph


def replay(graph, count):
    """Replays the graph count times back to back; the GPU milliseconds of each replay."""
    marks = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
             for _ in range(count)]
    for start, end in marks:
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in marks]


def time_per_call(calls, stream):
    """GPU milliseconds per call and calls per replay, by normlab's method (module docstring).
    Runs on `stream`, a side stream, which must be the current one."""
    for _ in range(2):  # warm-up before capture: compiles, autotuning, lazy allocations
        for call in calls:
            call()
    torch.cuda.synchronize()
    probe = capture(calls, 1, stream)
    one_pass = max(statistics.median(replay(probe, 3)), 1e-3)
    del probe
    passes = max(1, min(MAX_CALLS_PER_REPLAY // len(calls), math.ceil(REPLAY_MS / one_pass)))
    graph = capture(calls, passes, stream)
    replay(graph, max(3, math.ceil(WARMUP_MS / (one_pass * passes))))
    per_replay = statistics.median(replay(graph, TIMED_REPLAYS))
    return per_replay / (passes * len(calls)), passes * len(calls)


def copy_roofline(stream):
    """GB/s of torch's copy_ of COPY_BYTES (read + written), timed as the cells are."""
    with torch.cuda.stream(stream):
        src = torch.randn(COPY_BYTES // 4, device=DEVICE)
        dst = torch.empty_like(src)
        ms, _ = time_per_call([lambda: dst.copy_(src)], stream)
    return 2 * COPY_BYTES / (ms * 1e6)


# Cells -------------------------------------------------------------------------------------

@dataclass
class Bench:
    """What every cell shares."""
    stream: object
    l2_bytes: int
    outputs: str
    seed: int
    max_sets: int = MAX_SETS


def run_cell(peer, case, bench):
    """One available peer on one case: a record with status ok, wrong, skip or error."""
    record = {"op": case.op, "pass": case.pass_, "M": case.M, "N": case.N, "dtype": case.dtype,
              "weight": peer.forced_weight(case) or case.weight, "peer": peer.name}
    reason = peer.skip(case)
    if reason:
        return {**record, "status": "skip", "reason": reason}
    try:
        with torch.cuda.stream(bench.stream):
            record.update(measure(peer, case, bench))
    except Exception as e:  # one cell's failure must not lose the others
        record.update(status="error", reason=describe(e))
    finally:
        release_memory()
    return record


def measure(peer, case, bench):
    """Checks the peer on the cell, then times it; the record's measured fields."""
    forced = peer.forced_weight(case)
    weight_dtype = torch_dtype(forced or (case.dtype if case.weight == "x" else "fp32"))
    x_size, w_size = ITEMSIZE[case.dtype], weight_dtype.itemsize
    count = set_count(case.op, case.pass_, case.M, case.N, x_size, w_size, bench.l2_bytes,
                      bench.outputs == "shared", bench.max_sets)
    sets = [make_tensors(case, weight_dtype, bench.seed * bench.max_sets + i) for i in range(count)]
    expected = reference(case, sets[0])  # before any call: a call may write over its inputs
    calls = [peer.make_call(case, t) for t in sets]
    outputs = calls[0]()
    max_err, wrong = check(case, outputs, expected)
    moved, counted = counted_bytes(case, peer, sets[0], outputs)
    del outputs
    result = {"bytes": moved, "counted": counted,
              "normlab_bytes": normlab_bytes(case.op, case.pass_, case.M, case.N, x_size, w_size),
              "max_err": max_err if math.isfinite(max_err) else str(max_err), "sets": count}
    if wrong:
        return {**result, "status": "wrong", "reason": wrong}
    ms, calls_per_replay = time_per_call(rotating(calls, bench.outputs == "rotate"), bench.stream)
    return {**result, "status": "ok", "ms": ms, "calls_per_replay": calls_per_replay,
            "gbps": moved / (ms * 1e6), "normlab_gbps": result["normlab_bytes"] / (ms * 1e6)}


def release_memory():
    try:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    except RuntimeError:
        pass  # a cell that broke the CUDA context fails the later cells on its own


# Report ------------------------------------------------------------------------------------

def header(bench, peers, copy_gbps, args):
    roof = (f"{args.roofline:g} GB/s (--roofline)" if args.roofline
            else f"{copy_gbps:.0f} GB/s (torch copy_; pass normlab's with --roofline)")
    lines = [
        f"# Peers on {torch.cuda.get_device_name()}",
        "",
        f"- torch {torch.__version__}; L2 {bench.l2_bytes / 2**20:.0f} MiB; buffer sets covering "
        f">= {L2_FACTOR}x L2 (at most {bench.max_sets}); outputs {args.outputs}; seed {args.seed}",
        f"- CUDA-graph replays of ~{REPLAY_MS:g} ms over the sets, {WARMUP_MS:g} ms of warm-up "
        f"replays, median of {TIMED_REPLAYS}; backward timed alone, dW/dB reductions included",
        f"- copy roofline: torch copy_ of {COPY_BYTES >> 30} GiB {copy_gbps:.0f} GB/s, timed as "
        "the cells. normlab's tables divide by its own copy kernel (nl_roofline), which "
        "typically reads a little higher: take ratios against normlab's figure from the same "
        "machine (--roofline)",
        f"- % columns: of {roof}",
        "- bytes (normlab's model): every input read once and every output written once, at "
        "logical size; each peer is charged the tensors it reads and writes, the per-row "
        "statistics only where it writes them (forward) or reads them (backward); scratch is "
        "not counted. 'normlab MB': normlab's bytes for the row. GB/s from "
        + ("normlab's bytes for every peer" if args.bytes == "normlab" else "each peer's own bytes"),
        "- peers: " + "; ".join(
            f"{p.name} not available: {p.missing}" if p.missing else f"{p.name} {p.version}"
            for p in peers),
    ]
    if any(p.name == "compile" and not p.missing for p in peers):
        lines.append(f"- torch.compile budget: {args.compile_budget:g} s")
    return lines


def cell_text(record, roof, basis):
    if record["status"] == "ok":
        gbps = record["normlab_gbps" if basis == "normlab" else "gbps"]
        return f"{gbps:.0f} ({100 * gbps / roof:.0f}%)"
    reason = record["reason"].replace("|", "/")
    return f"{record['status']}: {reason[:80]}"


def table(op, pass_, records, peers, roof, args):
    """The markdown table of one op and pass, and its legend."""
    names = [p.name for p in peers]
    lines = [f"## {op} {pass_}", "",
             "| M | N | dtype | normlab MB | " + " | ".join(names) + " | best |",
             "|---:|---:|:---|---:|" + "---:|" * len(names) + ":---|"]
    rows = {}
    for r in records:
        rows.setdefault((r["dtype"], r["M"], r["N"]), {})[r["peer"]] = r
    for (dtype, M, N), by_peer in rows.items():
        w_size = ITEMSIZE[dtype] if args.weight == "x" else 4
        mb = normlab_bytes(op, pass_, M, N, ITEMSIZE[dtype], w_size) / 1e6
        cells = [cell_text(by_peer[n], roof, args.bytes) if n in by_peer else "-" for n in names]
        timed = [r for r in by_peer.values() if r["status"] == "ok"]
        best = min(timed, key=lambda r: r["ms"], default=None)
        best_text = f"{best['peer']} {cell_text(best, roof, args.bytes)}" if best else "-"
        lines.append(f"| {M} | {N} | {dtype} | {mb:.1f} | " + " | ".join(cells)
                     + f" | {best_text} |")
    return lines + [""] + legend(op, pass_, records, names, args.weight) + [""]


def legend(op, pass_, records, names, weight):
    charged = {}
    for r in records:
        if "counted" in r:
            charged.setdefault(r["peer"], r["counted"])
    shown = [f"{n} `{charged[n]}`" for n in names if n in charged]
    shown.append(f"normlab `{describe_roles(*ROLES[op, pass_].placed(pass_))}`")
    lines = ["Bytes per call, read -> written: " + "; ".join(shown) + ".",
             "best: the fastest peer of the row."]
    forced = sorted({(r["peer"], r["weight"]) for r in records if r["weight"] != weight})
    for peer, dtype in forced:
        lines.append(f"{peer}: weight and bias in {dtype}, the only dtype it takes for {op}.")
    return lines


def write_files(args, meta, records, text):
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "records": records}, indent=1) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(text)


def main(argv=None):
    args = parse_args(argv)
    problem = import_torch()
    if problem:
        print(f"peers.py: no CUDA device ({problem})", file=sys.stderr)
        return 1
    peers = make_peers(args)
    bench = Bench(torch.cuda.Stream(), l2_bytes(), args.outputs, args.seed, args.max_sets)
    copy_gbps = copy_roofline(bench.stream)
    roof = args.roofline or copy_gbps
    lines = header(bench, peers, copy_gbps, args) + [""]
    print("\n".join(lines), flush=True)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "l2_bytes": bench.l2_bytes, "copy_gbps": copy_gbps, "roofline_gbps": roof,
            "outputs": args.outputs, "bytes": args.bytes, "seed": args.seed,
            "max_sets": args.max_sets,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "peers": {p.name: f"not available: {p.missing}" if p.missing else p.version
                      for p in peers}}
    available = [p for p in peers if not p.missing]
    groups = [(op, pass_) for op in args.ops for pass_ in args.passes]
    total = len(groups) * len(cases(args, *groups[0])) * len(available)
    records = []
    for op, pass_ in groups:
        group = []
        for case in cases(args, op, pass_):
            for peer in available:
                group.append(run_cell(peer, case, bench))
                status = cell_text(group[-1], roof, args.bytes)
                print(f"[{len(records) + len(group)}/{total}] {case.label()} {peer.name}: "
                      f"{status}", file=sys.stderr, flush=True)
        records += group
        block = table(op, pass_, group, peers, roof, args)
        print("\n".join(block), flush=True)
        lines += block
        write_files(args, meta, records, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
