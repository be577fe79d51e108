# The anchors (torch native, eager, torch.compile, Liger) on the shapes of the RMSNorm
# performance targets only, bf16: M=4096 x N 1024..16384 and M=32768 x N 4096, 8192, forward
# and backward. Same method as ../shared/gpu/anchors.py (CUDA-graph replays over rotating
# buffer sets), which it imports from .gpu/ (../shared/gpu/prepare.sh copies it there).
# Run on the GPU machine from the repository root: python3 tools/anchors_key.py
# (BUDGET_S bounds the time spent compiling with torch.compile; OUT: where anchors.jsonl goes;
# PASSES=fwd or bwd: one pass only; SETS_L2X=16: buffer sets until the footprint is 16x, not
# 4x, the 60 MB L2 that anchors.py assumes.)
#
# OUTPUTS=rotate: anchors.py discards each call's outputs, so inside the captured graph the
# caching allocator hands every call the block the previous call freed: y (dx and dW in the
# backward) is written to the same addresses call after call and stays in L2, while the inputs
# rotate through 4x L2. normlab rotates its outputs with its inputs. With OUTPUTS=rotate each
# buffer set keeps its latest outputs alive, so the outputs rotate over the sets too and both
# sides pay for their writes in DRAM. The default (reuse) is the shared method unchanged.
import os
import sys
import time

sys.path.insert(0, os.path.join(os.getcwd(), ".gpu"))
import torch  # noqa: E402
import anchors as A  # noqa: E402

A.CAP = torch.cuda.Stream()
ROTATE = os.environ.get("OUTPUTS", "reuse") == "rotate"
PASSES = os.environ.get("PASSES", "fwd,bwd").split(",")
base_make_call = A.make_call


def make_call_rotating(op, fn, M, N, dt, mode):
    held = []
    if mode == "fwd":
        def keep(*args):
            held[:] = [fn(*args)]
        return base_make_call(op, keep, M, N, dt, mode)
    call = base_make_call(op, fn, M, N, dt, mode)

    def keep_grads():
        held[:] = [call()]
    return keep_grads


if ROTATE:
    A.make_call = make_call_rotating
A.L2_BYTES = int(os.environ.get("SETS_L2X", "4")) * 60 * 2**20
print("outputs:", "rotate" if ROTATE else "reuse (anchors.py)", "footprint:", A.L2_BYTES >> 20, "MB",
      flush=True)
print(torch.__version__, torch.cuda.get_device_name(), flush=True)
A.copy_bw()
cfgs = [("rms", 4096, N, "bf16", mode) for N in (1024, 2048, 4096, 8192, 16384) for mode in PASSES]
cfgs += [("rms", 32768, N, "bf16", mode) for N in (4096, 8192) for mode in PASSES]
rows = {}
for (op, M, N, dtn, mode) in cfgs:
    for name, fn in A.impls(op).items():
        if fn == "compile" and time.time() > A.DEADLINE:
            continue
        try:
            r = A.measure(op, name, fn, M, N, dtn, mode)
            rows.setdefault((mode, M, N), {})[name] = r["gbs"]
        except Exception as e:  # one anchor failing must not lose the others
            print("error", op, name, mode, M, N, repr(e)[:100], flush=True)
        torch.cuda.empty_cache()
names = ["torch_native", "torch_eager", "torch_compile", "liger"]
print("| pass | M | N | " + " | ".join(names) + " | best |")
print("|---|---|---|" + "---|" * (len(names) + 1))
for (mode, M, N), v in rows.items():
    best = max(v.values()) if v else 0
    cells = " | ".join(f"{v[n]:.0f}" if n in v else "-" for n in names)
    print(f"| {mode} | {M} | {N} | {cells} | {best:.0f} |", flush=True)
