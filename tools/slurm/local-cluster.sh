#!/usr/bin/env bash
# A one-node Slurm cluster on localhost, to run tools/slurm/*.sbatch (and the #slurm spec)
# against a real slurmctld and slurmd where there is no cluster. Debian's slurm-wlm and munge.
#
#   tools/slurm/local-cluster.sh start [DIR]   # prints: export SLURM_CONF=DIR/slurm.conf
#   tools/slurm/local-cluster.sh stop [DIR]
#
# start writes DIR (default /tmp/normlab-slurm; munged wants it searchable by all):
# slurm.conf, a fresh munge key, and the daemons' state, spool, logs, pid files and munge
# socket, so nothing of a system Slurm or munge is used or touched; starts munged, slurmctld
# and slurmd on two free ports, as root (slurmd runs each job as its user), and waits until
# the node is idle. No cgroups (proctrack/linuxproc): they need a delegated cgroup tree that
# containers seldom give; task/affinity binds each job to its CPUs (sched_setaffinity), as a
# real cluster does, so that jobs sharing the node do not share cores. The node has this
# machine's CPUs; a job gets one unless it asks for more (sbatch --cpus-per-task).
# Status: 0 up; 2 cannot run here (not root, or slurm-wlm or munge missing), the reason on
# stderr; 1 a daemon failed to start, the tail of its log on stderr (the others are stopped).
# stop cancels the cluster's jobs, stops the daemons that start started (their pid files) and
# removes DIR.
set -u

usage() {
  echo "usage: $0 start|stop [DIR]" >&2
  exit 2
}

[ $# -ge 1 ] && [ $# -le 2 ] || usage
cmd=$1
dir=${2:-/tmp/normlab-slurm}
MARK=.normlab-local-slurm
export SLURM_CONF="$dir/slurm.conf"

# The pid in file $1 when that process is alive.
alive() {
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

# Waits up to $2 tenths of a second for the process of pid file $1 to end.
wait_gone() {
  local i=0
  while alive "$1" >/dev/null && [ $i -lt "$2" ]; do
    sleep 0.1
    i=$((i + 1))
  done
  ! alive "$1" >/dev/null
}

stop() {
  [ -f "$dir/$MARK" ] || { echo "local-cluster: $dir is not a local cluster's directory" >&2; return 1; }
  if alive "$dir/slurmctld.pid" >/dev/null; then
    local jobs i=0
    jobs=$(squeue -h -o %A 2>/dev/null)
    if [ -n "$jobs" ]; then
      # shellcheck disable=SC2086 # one job id per word
      scancel $jobs 2>/dev/null
      while [ -n "$(squeue -h -o %A 2>/dev/null)" ] && [ $i -lt 100 ]; do
        sleep 0.1
        i=$((i + 1))
      done
    fi
    scontrol shutdown >/dev/null 2>&1
  fi
  local p pid
  for p in slurmd slurmctld munged; do
    # scontrol shutdown ends the Slurm daemons; munged, or a daemon it missed, gets TERM
    if [ $p != munged ] && wait_gone "$dir/$p.pid" 100; then continue; fi
    pid=$(alive "$dir/$p.pid") && kill -TERM "$pid" 2>/dev/null
    wait_gone "$dir/$p.pid" 50 || { pid=$(alive "$dir/$p.pid") && kill -KILL "$pid" 2>/dev/null; }
  done
  rm -rf "$dir"
}

# Why this machine cannot run the cluster, or nothing.
cannot() {
  local c
  [ "$(id -u)" = 0 ] || { echo "not root (slurmd must run as root)"; return; }
  for c in munged slurmctld slurmd sbatch scontrol; do
    command -v "$c" >/dev/null 2>&1 || {
      echo "$c not found: apt-get install slurm-wlm munge"
      return
    }
  done
}

# A port nothing listens on, from $1 upwards.
free_port() {
  local p=$1
  while (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; do p=$((p + 1)); done
  echo "$p"
}

# Fails start: the tail of log $1 (and $2, a message) on stderr, the daemons stopped.
failed() {
  echo "local-cluster: $2" >&2
  [ -f "$1" ] && tail -n 15 "$1" >&2
  stop
  exit 1
}

start() {
  local why
  why=$(cannot)
  [ -z "$why" ] || { echo "local-cluster: cannot start a local Slurm cluster: $why" >&2; exit 2; }
  if [ -f "$dir/$MARK" ] && alive "$dir/slurmctld.pid" >/dev/null; then
    echo "local-cluster: a cluster runs in $dir already ($0 stop $dir first)" >&2
    exit 1
  fi
  [ -e "$dir" ] && [ ! -f "$dir/$MARK" ] && [ -n "$(ls -A "$dir" 2>/dev/null)" ] && {
    echo "local-cluster: $dir exists and is not a local cluster's directory" >&2
    exit 1
  }
  rm -rf "$dir"
  mkdir -p "$dir/state" "$dir/spool" && chmod 755 "$dir" && touch "$dir/$MARK" || exit 1
  dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none && chmod 600 "$dir/munge.key"
  local ctld_port d_port
  ctld_port=$(free_port $((20000 + RANDOM % 20000)))
  d_port=$(free_port $((ctld_port + 1)))
  cat >"$SLURM_CONF" <<EOF
# written by tools/slurm/local-cluster.sh: a one-node cluster on localhost, no cgroups
ClusterName=normlab
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
NodeName=normlab NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=normlab Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  munged --key-file="$dir/munge.key" --socket="$dir/munge.socket" --pid-file="$dir/munged.pid" \
    --log-file="$dir/munged.log" --seed-file="$dir/munged.seed" ||
    failed "$dir/munged.log" "munged did not start"
  slurmctld -f "$SLURM_CONF" || failed "$dir/slurmctld.log" "slurmctld did not start"
  slurmd -f "$SLURM_CONF" -N normlab || failed "$dir/slurmd.log" "slurmd did not start"
  local i state=
  for i in $(seq 1 300); do
    state=$(sinfo -h -n normlab -o %t 2>/dev/null)
    [ "$state" = idle ] && break
    alive "$dir/slurmctld.pid" >/dev/null || failed "$dir/slurmctld.log" "slurmctld stopped"
    alive "$dir/slurmd.pid" >/dev/null || failed "$dir/slurmd.log" "slurmd stopped"
    sleep 0.1
  done
  [ "$state" = idle ] ||
    failed "$dir/slurmd.log" "the node is '${state:-unknown}', not idle, after 30 s"
  echo "export SLURM_CONF=$SLURM_CONF"
}

case $cmd in
  start) start ;;
  stop) stop ;;
  *) usage ;;
esac
