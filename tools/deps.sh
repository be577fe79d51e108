#!/usr/bin/env bash
# Checks what `make run` and `make test` need; as root on Debian, installs what is missing,
# otherwise prints the exact apt line. Lua may also come from a private prefix on PATH (as on
# a machine without a package registry): the check is by command, not by package.
# slurm-wlm and munge are optional: the #slurm spec's one-node cluster needs them (and root);
# without them that spec is pending and says why, so failing to install them fails nothing.
set -u
opt="slurm-wlm munge"
opt_missing=0
for c in munged slurmctld slurmd sbatch; do command -v "$c" >/dev/null 2>&1 || opt_missing=1; done
if [ $opt_missing = 1 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "normlab: installing $opt (for the #slurm spec)" >&2
    export DEBIAN_FRONTEND=noninteractive
    { apt-get install -y -q --no-install-recommends $opt >/dev/null 2>&1 ||
      { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends $opt >/dev/null 2>&1; }; } ||
      echo "normlab: apt-get failed; the #slurm spec will be pending. Run: apt-get install $opt" >&2
  else
    echo "normlab: the #slurm spec needs a local Slurm (as root): apt-get install $opt" >&2
  fi
fi
pkgs="lua5.4 liblua5.4-dev luajit libluajit-5.1-dev lua-busted lua-argparse lua-cjson libreadline-dev cmake"
need=0
for c in lua5.4 luajit busted cmake; do command -v "$c" >/dev/null 2>&1 || need=1; done
if [ $need = 0 ]; then
  lua5.4 -e 'require "argparse"; require "cjson"' >/dev/null 2>&1 || need=1
  luajit -e 'require "argparse"; require "cjson"' >/dev/null 2>&1 || need=1
fi
if [ $need = 0 ] && command -v dpkg-query >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  # Headers are not visible to `command -v`; on a Debian system ask dpkg for the -dev ones.
  for p in liblua5.4-dev libluajit-5.1-dev libreadline-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need=1
  done
  [ -d /tmp/luaroot ] && need=0   # a private Lua prefix (GPU machine) carries its own headers
fi
[ $need = 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "normlab: installing $pkgs" >&2
  export DEBIAN_FRONTEND=noninteractive
  { apt-get install -y -q --no-install-recommends $pkgs >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends $pkgs >/dev/null; }; } ||
    { echo "normlab: apt-get failed; run: apt-get install $pkgs" >&2; exit 1; }
  exit 0
fi
echo "normlab: missing dependencies. Run as root:" >&2
echo "  apt-get install $pkgs" >&2
exit 1
