#!/usr/bin/env bash
# One call on the GPU machine: build, CUDA specs, sanitizers, benchmarks; logs under $OUT.
#   tools/gpu.sh [steps...]     steps: build spec spec-ffi sanitize fuzz bench tune grid peers
#                               (default: build spec bench)
# Run from the repository root on a machine with the CUDA toolkit, CMake, Ninja, and Lua 5.4,
# LuaJIT and busted on PATH (for `peers`: PyTorch, and Liger / QuACK where installed). Each
# step writes $OUT/<step>.log; the benchmark tables also go to $OUT/*.md and *.json.
set -uo pipefail
OUT=${OUT:-/tmp/normlab-out}
mkdir -p "$OUT"
BUILD=${NORMLAB_BUILD:-build-gpu}
export NORMLAB_BUILD=$BUILD
steps=${*:-build spec bench}
status=0
# Each step is bounded (STEP_TIMEOUT seconds) so that a hung kernel cannot eat the lease.
run() {
  local name=$1; shift
  echo "== $name: $*"
  timeout "${STEP_TIMEOUT:-300}" "$@" 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || { echo "== $name failed ($rc)"; status=1; }
  return "$rc"
}
for step in $steps; do
  case $step in
    build)
      nvidia-smi -L
      run cmake cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CUDA_ARCHITECTURES="${NL_CUDA_ARCHS:-90}" >/dev/null &&
      run build cmake --build "$BUILD" -j "$(nproc)" ;;
    spec)
      run spec busted -o utfTerminal ${SPECS:-spec} ;;
    spec-ffi)
      run spec-ffi busted --lua=luajit -o utfTerminal spec ;;
    sanitize)
      # memcheck over a representative subset of the CUDA kernels, then racecheck over it a part
      # at a time, each its own log (on an H100 the norms' first two passes take 1.5-3 minutes
      # each, the rest under a minute)
      STEP_TIMEOUT=${SANITIZE_TIMEOUT:-600} run memcheck compute-sanitizer --tool memcheck \
        --error-exitcode 9 "$BUILD/normlab" tools/sanitize_subset.lua
      # the parts from the script itself; without its list racecheck fails as a step does
      if parts=$("$BUILD/normlab" tools/sanitize_subset.lua --list); then
        for part in $parts; do
          STEP_TIMEOUT=${SANITIZE_TIMEOUT:-600} run "racecheck_$part" compute-sanitizer --tool racecheck \
            --error-exitcode 9 "$BUILD/normlab" tools/sanitize_subset.lua "$part"
        done
      else
        echo "== racecheck failed (no parts list)"; status=1
      fi ;;
    fuzz)
      # random cases against the reference (FUZZ_SEED, about 4 minutes): plain, then with
      # runtime settings and fp8 outputs, then small ones under memcheck
      seed=${FUZZ_SEED:-$RANDOM}
      run fuzz "$BUILD/normlab" tools/fuzz.lua --device cuda --cases 100000 --seed "$seed" --time-s 90
      run fuzz_settings "$BUILD/normlab" tools/fuzz.lua --device cuda --cases 100000 --seed "$seed" \
        --settings --fp8 --time-s 90
      run fuzz_memcheck compute-sanitizer --tool memcheck --error-exitcode 9 "$BUILD/normlab" \
        tools/fuzz.lua --device cuda --cases 100000 --seed "$seed" --max-elems 3e4 --settings --fp8 \
        --time-s 60 ;;
    bench)
      run bwd "$BUILD/normlab" experiments/bwd_sweep.lua --device cuda --graph --markdown "$OUT/bwd.md" --json "$OUT/bwd.json"
      run bwd_large "$BUILD/normlab" experiments/bwd_sweep.lua --device cuda --graph --M 32768 --N 4096,8192 --dtypes bf16 --markdown "$OUT/bwd_large.md"
      run fwd "$BUILD/normlab" experiments/fwd_sweep.lua --device cuda --graph --markdown "$OUT/fwd.md" --json "$OUT/fwd.json"
      run ln_bwd "$BUILD/normlab" experiments/bwd_sweep.lua --op layernorm --device cuda --graph --dtypes bf16 \
        --M 4096,32768 --N 1024..16384 --markdown "$OUT/ln_bwd.md" --json "$OUT/ln_bwd.json"
      run ln_fwd "$BUILD/normlab" experiments/fwd_sweep.lua --op layernorm --device cuda --graph \
        --markdown "$OUT/ln_fwd.md" --json "$OUT/ln_fwd.json"
      # outputs written to the same buffers by every set (compare with peers.py --outputs shared)
      run fwd_shared "$BUILD/normlab" experiments/fwd_sweep.lua --device cuda --graph --outputs shared \
        --M 4096 --variants auto --markdown "$OUT/fwd_shared.md"
      # fp8 output, transposed copies and the transpose kernels alone (issue 17)
      run fp8 "$BUILD/normlab" experiments/fp8_sweep.lua --device cuda --graph \
        --markdown "$OUT/fp8.md" --json "$OUT/fp8.json" ;;
    tune)
      # the settings sweeps behind the defaults in core/settings.c, the built-in ones and a GPU
      # model's table (bf16, weights in x's dtype)
      tune=("$BUILD/normlab" experiments/dispatch_sweep.lua --device cuda --graph --no-check
            --weight x --dtypes bf16)
      run tune_bwd "${tune[@]}" --op rmsnorm.bwd --variants persistent --M 4096,32768 --N 1024,4096,16384 \
        --set rmsnorm.bwd.items=2,4 --set rmsnorm.bwd.block=256,512 --set rmsnorm.bwd.stages=2,3 \
        --markdown "$OUT/tune_bwd.md"
      run tune_bwd_fused "${tune[@]}" --op rmsnorm.bwd --variants persistent --M 4096,32768 --N 4096,16384 \
        --set rmsnorm.bwd.fused_reduce=0,1 --markdown "$OUT/tune_bwd_fused.md"
      # the reduce kernel under programmatic dependent launch (on by default), both ops
      for op in rmsnorm layernorm; do
        run tune_bwd_pdl_$op "${tune[@]}" --op $op.bwd --variants auto --M 4096,32768 --N 1024..16384 \
          --set rmsnorm.bwd.reduce_pdl=0,1 --markdown "$OUT/tune_bwd_pdl_$op.md"
      done
      # the persistent grid: SMs it spans, and clusters summing dW in distributed shared memory
      run tune_bwd_grid "${tune[@]}" --op rmsnorm.bwd --variants auto --M 4096,16384,32768 --N 1024..16384 \
        --set rmsnorm.bwd.grid_sms=0,128,124,120,112 --markdown "$OUT/tune_bwd_grid.md"
      run tune_bwd_cluster "${tune[@]}" --op rmsnorm.bwd --variants auto --M 4096,32768 --N 1024..16384 \
        --set rmsnorm.bwd.cluster=1,2,4,8 --markdown "$OUT/tune_bwd_cluster.md"
      run tune_fwd "${tune[@]}" --op rmsnorm.fwd --variants row,blockrow --M 4096,32768 --N 1024..16384 \
        --set rmsnorm.fwd.items=1,2,4 --set rmsnorm.fwd.early_weight_max_n=0,16384 --markdown "$OUT/tune_fwd.md"
      run tune_fwd_blockrow "${tune[@]}" --op rmsnorm.fwd --variants blockrow --M 4096 --N 1024,2048 \
        --set rmsnorm.fwd.early_weight_max_n=0,4096 --set rmsnorm.fwd.blockrow_block=64,128,256,512 \
        --markdown "$OUT/tune_fwd_blockrow.md"
      # the early weight at small N, since its kernel streams x (session 44; the H100's 0 was
      # measured when it loaded x at the default policy)
      run tune_fwd_early_small "${tune[@]}" --op rmsnorm.fwd --variants blockrow,auto --M 4096,16384,32768,65536 \
        --N 64,128,256,512,768 --set rmsnorm.fwd.early_weight_max_n=0,4096 --markdown "$OUT/tune_fwd_early_small.md"
      run tune_pdl "${tune[@]}" --op rmsnorm.fwd --variants auto --M 4096 --N 1024..16384 \
        --set cuda.pdl=0,1 --markdown "$OUT/tune_pdl.md"
      run tune_fwd_reload "${tune[@]}" --op rmsnorm.fwd --variants row --M 4096,32768 --N 2048..16384 \
        --set rmsnorm.fwd.reload_min_n=0,1 --set rmsnorm.fwd.items=1,2,4 --markdown "$OUT/tune_fwd_reload.md"
      run tune_fwd_staged "${tune[@]}" --op rmsnorm.fwd --variants staged --M 4096,32768 --N 1024..16384 \
        --set rmsnorm.fwd.staged_items=1,2,4,8 --markdown "$OUT/tune_fwd_staged.md"
      run tune_fwd_pipe "${tune[@]}" --op rmsnorm.fwd --variants persistent --M 4096,32768 --N 1024,4096,16384 \
        --set rmsnorm.fwd.items=2,4 --set rmsnorm.fwd.stages=2,3 --markdown "$OUT/tune_fwd_pipe.md"
      # LayerNorm's own packs from 2048 rows (the H200 took 4 in session 52, the H100 keeps 2)
      run tune_fwd_ln_items "${tune[@]}" --op layernorm.fwd --variants auto,row --M 2048,4096,8192,32768 \
        --N 2048..16384 --set layernorm.fwd.items=2,4 --markdown "$OUT/tune_fwd_ln_items.md"
      # blockrow's CTA size by op from 16384 rows (the H200 took 64 in session 42)
      for op in rmsnorm layernorm add_rmsnorm; do
        run tune_fwd_blockrow_block_$op "${tune[@]}" --op $op.fwd --variants blockrow --M 4096,16384,32768,65536 \
          --N 256,512,1024 --set rmsnorm.fwd.blockrow_block=32,64,128,256 --markdown "$OUT/tune_fwd_blockrow_block_$op.md"
      done
      # blockrow's one-wave doubling by op (the H200 took 1 in session 45; the H100 keeps 0
      # until this runs there)
      for op in rmsnorm layernorm add_rmsnorm; do
        run tune_fwd_blockrow_wave_$op "${tune[@]}" --op $op.fwd --variants blockrow --M 4096,16384,32768,65536 \
          --N 64,128,256,512,768,1024 --set rmsnorm.fwd.blockrow_wave_doublings=0,1,2 \
          --markdown "$OUT/tune_fwd_blockrow_wave_$op.md"
      done
      # LayerNorm's compiled-lanes rows (held as fp32 up to 2 packs: process_ln_held) against
      # the general kernel, and its packs per thread below blockrow_group_min_m rows
      # (layernorm.fwd.blockrow_items: the same figures twice from 16384 rows; sessions 43 and 46
      # measured both on the H200 only)
      run tune_fwd_ln_lanes "${tune[@]}" --op layernorm.fwd --variants blockrow --M 2048,4096,8192,32768,65536 \
        --N 64,128,256,512 --set rmsnorm.fwd.fixed_lanes_max=0,32 --set layernorm.fwd.blockrow_items=1,2 \
        --markdown "$OUT/tune_fwd_ln_lanes.md"
      # an fp8 y: packs per thread on wide rows (each op's own key), bf16 and fp32 x; the
      # transposes' tile under the external yt
      fp8=("$BUILD/normlab" experiments/dispatch_sweep.lua --device cuda --graph --no-check
           --weight x --fp8 fp8e4m3 --variants auto)
      for op in rmsnorm layernorm add_rmsnorm; do
        key=rmsnorm; [ $op = add_rmsnorm ] && key=add_rmsnorm
        run tune_fwd_fp8_$op "${fp8[@]}" --op $op.fwd --dtypes bf16,fp32 --M 4096,32768 --N 4096,8192,16384 \
          --set $key.fwd.fp8_max_threads=0,128 --markdown "$OUT/tune_fwd_fp8_$op.md"
      done
      # and the cap from fp8_many_min_m rows (rmsnorm.fwd.fp8_many_max_threads: the H100 keeps
      # 128, measured on the H200 only), rows of 256 to 512 packs
      for op in rmsnorm layernorm; do
        run tune_fwd_fp8_many_$op "${fp8[@]}" --op $op.fwd --dtypes bf16 --M 4096,16384,32768 --N 2048,3072,4096 \
          --set rmsnorm.fwd.fp8_many_max_threads=128,64 --markdown "$OUT/tune_fwd_fp8_many_$op.md"
      done
      run tune_tile "${tune[@]}" --op rmsnorm.fwd --variants auto --fp8 fp8e4m3 --transpose external \
        --M 4096,32768 --N 1024..16384 --set transpose.tile_m=64,128 --markdown "$OUT/tune_tile.md"
      # the looping kernels (rows wider than any register layout), fp32 as well
      loop=("$BUILD/normlab" experiments/dispatch_sweep.lua --device cuda --graph --no-check
            --weight x --dtypes bf16,fp32 --M 4096)
      run tune_loop_fwd "${loop[@]}" --op rmsnorm.fwd --variants row --N 32768,65536 \
        --set rmsnorm.fwd.loop_ctas_per_sm=0,1,2,3,4 --markdown "$OUT/tune_loop_fwd.md"
      run tune_loop_bwd "${loop[@]}" --op rmsnorm.bwd --variants persistent --N 16384,32768 \
        --set rmsnorm.bwd.loop_ctas_per_sm=0,1,2,3 --markdown "$OUT/tune_loop_bwd.md" ;;
    grid)
      # auto's acceptance grids (experiments/crossover.lua, bf16, every variant, the short
      # batches of docs/kernels.md "The acceptance grid"; about 3 minutes each on an H100,
      # add_rmsnorm's forward over 5, its last cells of 65536 rows the slowest to set up, hence
      # GRID_TIMEOUT): GRID_OPS picks them (default all six); the backward's stop at 32768
      # rows, where row's M x N temp still fits
      for op in ${GRID_OPS:-rmsnorm.fwd rmsnorm.bwd layernorm.fwd layernorm.bwd add_rmsnorm.fwd add_rmsnorm.bwd}; do
        rows=()
        case $op in *.bwd) rows=(--M 1,16,128,1024,4096,16384,32768) ;; esac
        STEP_TIMEOUT=${GRID_TIMEOUT:-540} run "grid_$op" "$BUILD/normlab" experiments/crossover.lua --device cuda --graph --no-check \
          --set bench.warmup_ms=40 --set bench.batch_ms=4 --batches 5 --op "$op" "${rows[@]}" \
          --json "$OUT/grid_$op.json" --markdown "$OUT/grid_$op.md" --svg "$OUT/grid_$op.svg"
      done ;;
    peers)
      # torch, torch.compile, Liger and QuACK on the shapes of the performance targets, timed as
      # normlab times (outputs rotating), GB/s by normlab's bytes and % of normlab's copy roofline,
      # so that ratios against the bench tables of this call are ratios of times
      roof=$("$BUILD/normlab" -e 'print(require("normlab").device("cuda"):roofline())' 2>/dev/null)
      peers=(python3 tools/peers.py --ops rmsnorm,add_rmsnorm,layernorm --bytes normlab ${roof:+--roofline "$roof"})
      STEP_TIMEOUT=${PEERS_TIMEOUT:-1200} run peers "${peers[@]}" --M 4096 --N 1024..16384 \
        --json "$OUT/peers.json" --markdown "$OUT/peers.md"
      STEP_TIMEOUT=${PEERS_TIMEOUT:-1200} run peers_large "${peers[@]}" --M 32768 --N 4096,8192 \
        --json "$OUT/peers_large.json" --markdown "$OUT/peers_large.md"
      # fp8_sweep's anchors: torch's norm -> fp8, transposed copies and cast-transpose
      STEP_TIMEOUT=${PEERS_TIMEOUT:-1200} run fp8_peers python3 tools/fp8_peers.py ${roof:+--roofline "$roof"} \
        --M 4096,32768 --N 1024..16384 --json "$OUT/fp8_peers.json" --markdown "$OUT/fp8_peers.md" ;;
    *) echo "unknown step $step"; status=1 ;;
  esac
done
exit $status
