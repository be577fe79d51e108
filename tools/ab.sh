#!/usr/bin/env bash
# A/B of builds in one session: the working tree against one or more base revisions, one
# command run with each build in turn (A B A B ..., or A C B A C B ... with two bases), so that
# a kernel change is judged on the same GPU in the same call, the way docs/kernels.md
# ("Measuring") asks.
#
#   tools/ab.sh [--base REV|DIR]... [--rounds N] [--label A,B] -- COMMAND [ARGS...]
#
# A is REV (default HEAD) built in a worktree of its own, or the source tree in DIR, B the
# working tree as it is (its uncommitted changes included). --base given k times: k bases,
# each run in that order before B, and --label names all k + 1 (default a, a2, ..., b).
# COMMAND runs from the repository root with NORMLAB_BUILD set to the build and every
# "{build}" in its arguments replaced by the build's folder, e.g.
#   tools/ab.sh --base HEAD~1 --rounds 2 -- {build}/normlab experiments/fwd_sweep.lua \
#       --op layernorm --device cuda --graph --no-check --M 4096 --markdown '$OUT/{label}{round}.md'
# "{label}" and "{round}" are replaced too. Each run's output goes to $OUT/ab-<label><round>.log
# and to stdout under a header. Builds: $AB_DIR/a, $AB_DIR/a2, ... for the bases and
# $AB_DIR/b for the working tree (AB_DIR default /tmp/normlab-ab), Release, CUDA architectures
# from NL_CUDA_ARCHS (default 90) where nvcc is found, AB_CMAKE_ARGS added (e.g. -DNL_CUDA=OFF
# for a CPU-only A/B); a build left there by an earlier call of the same session is only
# brought up to date. A revision needs the repository's git history where it runs (it is
# checked out with `git worktree`); where there is none, as on a machine that gets a copy of
# the working tree, pass a directory that the copy carries, made beforehand with e.g.
#   mkdir -p ab-base && git archive HEAD~1 | tar -x -C ab-base   (untracked, so it travels)
set -euo pipefail
bases=() rounds=1 labels=
while [ $# -gt 0 ]; do
  case $1 in
    --base) bases+=("$2"); shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --label) labels=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "tools/ab.sh: unknown option '$1' (usage: tools/ab.sh [--base REV|DIR]... [--rounds N] [--label A,B] -- COMMAND ...)" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "tools/ab.sh: no command after --" >&2; exit 2; }
case $rounds in ''|*[!0-9]*|0) echo "tools/ab.sh: --rounds wants a positive integer, got '$rounds'" >&2; exit 2 ;; esac
[ ${#bases[@]} -gt 0 ] || bases=(HEAD)
nb=${#bases[@]}
# each side: its label and build folder, the bases first, then the working tree
dirs=(a) && for ((i = 2; i <= nb; i++)); do dirs+=("a$i"); done && dirs+=(b)
if [ -n "$labels" ]; then
  IFS=, read -r -a names <<< "$labels"
  [ ${#names[@]} -eq $((nb + 1)) ] && [ "${labels%,}" = "$labels" ] ||
    { echo "tools/ab.sh: --label wants $((nb + 1)) names (one per --base, then the working tree's), got '$labels'" >&2; exit 2; }
  for x in "${names[@]}"; do
    [ -n "$x" ] || { echo "tools/ab.sh: --label: an empty name in '$labels'" >&2; exit 2; }
  done
  [ "$(printf '%s\n' "${names[@]}" | sort -u | wc -l)" -eq ${#names[@]} ] ||
    { echo "tools/ab.sh: --label: the names must differ, got '$labels'" >&2; exit 2; }
else
  names=("${dirs[@]}")
fi

root=$(cd "$(dirname "$0")/.." && pwd)
AB_DIR=${AB_DIR:-/tmp/normlab-ab}
OUT=${OUT:-/tmp/normlab-out}
mkdir -p "$AB_DIR" "$OUT"
# the bases' sources: a tree given (as the caller named it), else REV's worktree
srcs=() revs=()
for ((i = 0; i < nb; i++)); do
  base=${bases[$i]}
  if [ -f "$base/CMakeLists.txt" ]; then
    srcs+=("$(cd "$base" && pwd)") revs+=("")
  else
    rev=$(git -C "$root" rev-parse --verify -q "$base^{commit}") ||
      { echo "tools/ab.sh: '$base' is neither a revision nor a source tree" >&2; exit 2; }
    srcs+=("$AB_DIR/src-${dirs[$i]}") revs+=("$rev")
  fi
done
cd "$root"

cuda_flags=()
if command -v nvcc > /dev/null; then
  cuda_flags=(-DCMAKE_CUDA_ARCHITECTURES="${NL_CUDA_ARCHS:-90}")
fi
generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
read -r -a extra <<< "${AB_CMAKE_ARGS:-}"

# build SRC DIR: configure once, then bring the build up to date
build() {
  local src=$1 dir=$2
  # a build configured from another source tree by an earlier call starts again
  if [ -f "$dir/CMakeCache.txt" ] && ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$src" "$dir/CMakeCache.txt"; then
    rm -rf "$dir"
  fi
  [ -f "$dir/CMakeCache.txt" ] ||
    cmake -S "$src" -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "${cuda_flags[@]}" "${extra[@]}" > "$dir.cmake.log" 2>&1 ||
    { echo "tools/ab.sh: cmake failed for $src (see $dir.cmake.log)" >&2; exit 1; }
  cmake --build "$dir" -j "$(nproc)" > "$dir.build.log" 2>&1 ||
    { tail -30 "$dir.build.log" >&2; echo "tools/ab.sh: the build of $src failed" >&2; exit 1; }
}

# the bases: the source tree given, or the base revision in its own worktree, moved to REV if
# an earlier call left another one
for ((i = 0; i < nb; i++)); do
  src=${srcs[$i]} rev=${revs[$i]}
  if [ -n "$rev" ]; then
    if [ -d "$src" ]; then
      git -C "$src" checkout -q --detach "$rev"
    else
      git worktree add -q --detach "$src" "$rev"
    fi
    echo "== ${names[$i]}: $(git log -1 --format='%h %s' "$rev")"
  else
    echo "== ${names[$i]}: the source tree in $src"
  fi
  build "$src" "$AB_DIR/${dirs[$i]}"
done
if git rev-parse --verify -q HEAD > /dev/null 2>&1; then
  echo "== ${names[$nb]}: the working tree ($(git log -1 --format='%h' HEAD)$(git diff --quiet HEAD || echo ' + uncommitted changes'))"
else
  echo "== ${names[$nb]}: the working tree in $root"
fi
build "$root" "$AB_DIR/b"

status=0
for ((r = 1; r <= rounds; r++)); do
  for ((i = 0; i <= nb; i++)); do
    label=${names[$i]}
    dir=$AB_DIR/${dirs[$i]}
    args=()
    for x in "$@"; do
      x=${x//\{build\}/$dir}
      x=${x//\{label\}/$label}
      x=${x//\{round\}/$r}
      args+=("${x//\$OUT/$OUT}")
    done
    log=$OUT/ab-$label$r.log
    echo "== $label, round $r: ${args[*]}"
    if NORMLAB_BUILD=$dir "${args[@]}" > "$log" 2>&1; then cat "$log"; else
      status=1; cat "$log"; echo "== $label, round $r failed"
    fi
  done
done
exit $status
