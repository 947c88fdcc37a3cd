#!/usr/bin/env bash
# Start a two-node SLURM test cluster on this one machine, beside (never instead of)
# the one-node cluster of start-slurm.sh: its own config (SLURM_CONF below), ports,
# state, pid and log files. Each node is a slurmd in its own network and UTS namespace
# (own address and host name, tied to a bridge on the host); slurmctld stays on the
# host and listens on the bridge's address. Must run as root. Idempotent: what exists
# and daemons already running are left alone (run it again to restart a killed slurmd).
#
# Usage:  ./start-slurm-two-node.sh [--no-install]
# Then:   export SLURM_CONF=/etc/slurm-two-node/slurm.conf   (sinfo, sbatch, ... see it)
# Stop with ./stop-slurm-two-node.sh (daemons by their pid files, then the namespaces).
#
#   host:    bridge spagbr0 10.77.0.1/24, slurmctld (port 6827), munged (shared)
#   spag-n1: netns + UTS + mount ns, eth0 10.77.0.11, hostname spag-n1, slurmd (port 6828)
#   spag-n2: netns + UTS + mount ns, eth0 10.77.0.12, hostname spag-n2, slurmd (port 6828)
# In its mount namespace each node's /etc/hosts is /etc/netns/<node>/hosts (both nodes
# and the controller; the host's own file is untouched) and /etc/slurm this cluster's
# config folder. With two or more CPUs each node's slurmd (and so every job step on it)
# is pinned to its own half of the host's CPUs, and the node declares that many CPUs.
# No route leaves the namespaces: all traffic stays on the bridge.
set -euo pipefail

INSTALL=1
while [ $# -gt 0 ]; do
  case "$1" in
    --no-install) INSTALL=0 ;;
    *) echo "unknown arg $1" >&2; exit 2 ;;
  esac
  shift
done

NAME=slurm-two-node
CONF_DIR=/etc/$NAME
export SLURM_CONF=$CONF_DIR/slurm.conf
SPOOL=/var/spool/$NAME
RUN=/run/$NAME
LOGS=/var/log/$NAME
BRIDGE=spagbr0
NET=10.77.0
CTLD_ADDR=$NET.1
NODES="spag-n1 spag-n2"
CTLD_PORT=6827
SLURMD_PORT=6828
CTLD_HOST="$(hostname -s)"
t0=$(date +%s)
log() { echo "[start-slurm-two-node] $*"; }

[ "$(id -u)" = 0 ] || { echo "must run as root" >&2; exit 1; }

# ---------------------------------------------------------------- packages
PKGS="slurmctld slurmd slurm-client munge iproute2 util-linux"
if [ "$INSTALL" = 1 ] && ! dpkg -s $PKGS >/dev/null 2>&1; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $PKGS
fi

# a pid file's process runs (a killed one not yet reaped is a zombie: not alive)
alive() {
  local pid
  [ -s "$1" ] && pid=$(cat "$1") && kill -0 "$pid" 2>/dev/null &&
    ! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null
}
node_index() { case "$1" in spag-n1) echo 1 ;; spag-n2) echo 2 ;; esac; }

install -d -m 0755 "$CONF_DIR" "$RUN" /etc/slurm
install -d -o slurm -g slurm -m 0755 "$SPOOL" "$SPOOL/ctld" "$LOGS"

# ---------------------------------------------------------------- munge (shared)
# The one-node cluster's munged if it runs; else started here, and then stopped by
# stop-slurm-two-node.sh (the marker file says so).
[ -s /etc/munge/munge.key ] || runuser -u munge -- mungekey --create
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /var/log/munge /var/lib/munge
if ! alive /run/munge/munged.pid; then
  runuser -u munge -- /usr/sbin/munged
  touch "$RUN/munged.started"
fi
for _ in $(seq 1 20); do munge -n </dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.25; done
munge -n </dev/null | unmunge >/dev/null

# ---------------------------------------------------------------- network
# A bridge on the host; per node a network namespace with one end of a veth pair.
if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
  ip link add "$BRIDGE" type bridge
  ip addr add "$CTLD_ADDR/24" dev "$BRIDGE"
fi
ip link set "$BRIDGE" up
for node in $NODES; do
  i=$(node_index "$node")
  addr="$NET.1$i"
  # (no `cmd | grep -q` under pipefail: grep's early exit can fail the pipe)
  [ -e "/run/netns/$node" ] || ip netns add "$node"
  if ! ip link show "spagv$i" >/dev/null 2>&1; then
    ip link add "spagv$i" type veth peer name eth0 netns "$node"
  fi
  ip link set "spagv$i" master "$BRIDGE" up
  ip -n "$node" link set lo up
  case "$(ip -n "$node" -4 addr show dev eth0)" in
    *"inet $addr/"*) ;;
    *) ip -n "$node" addr add "$addr/24" dev eth0 ;;
  esac
  ip -n "$node" link set eth0 up
  # bind-mounted over /etc/hosts in the node's mount namespace (below)
  install -d -m 0755 "/etc/netns/$node"
  {
    echo "127.0.0.1 localhost"
    echo "$CTLD_ADDR $CTLD_HOST"
    for other in $NODES; do echo "$NET.1$(node_index "$other") $other"; done
  } >"/etc/netns/$node/hosts"
done
# ---------------------------------------------------------------- slurm.conf
# nproc answers OMP_NUM_THREADS where it is set (an HPC shell's habit): count the CPUs.
NCPU=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
PER_NODE=$(( NCPU >= 2 ? NCPU / 2 : 1 ))
MEM_TOTAL=$(free -m | awk '/^Mem:/{print $2}')
NODE_MEM=$(( MEM_TOTAL > 4096 ? (MEM_TOTAL - 2048) / 2 : MEM_TOTAL / 3 ))
[ "$NODE_MEM" -gt 16000 ] && NODE_MEM=16000
cpus_of() {  # the host CPUs node i is pinned to
  if [ "$NCPU" -ge 2 ]; then
    local first=$(( ($1 - 1) * PER_NODE ))
    echo "$first-$(( first + PER_NODE - 1 ))"
  else
    echo 0
  fi
}

# Task prolog: one line per task of every job step: where it ran and what it saw.
TASK_ENV_LOG=$LOGS/task-env.log
cat >"$CONF_DIR/task-prolog.sh" <<PROLOG
#!/bin/sh
echo "job=\$SLURM_JOB_ID step=\$SLURM_STEP_ID host=\$(hostname) nodeid=\${SLURM_NODEID-unset} procid=\${SLURM_PROCID-unset} cpus_per_task=\${SLURM_CPUS_PER_TASK-unset} affinity=\$(awk '/^Cpus_allowed_list/{print \$2}' /proc/self/status)" >> $TASK_ENV_LOG
PROLOG
chmod 0755 "$CONF_DIR/task-prolog.sh"
touch "$TASK_ENV_LOG" && chmod 0666 "$TASK_ENV_LOG"

NODE_LINES=""
for node in $NODES; do
  i=$(node_index "$node")
  NODE_LINES="${NODE_LINES}NodeName=$node NodeAddr=$NET.1$i NodeHostname=$node CPUs=$PER_NODE Boards=1 SocketsPerBoard=1 CoresPerSocket=$PER_NODE ThreadsPerCore=1 RealMemory=$NODE_MEM State=UNKNOWN
"
done

cat >"$SLURM_CONF.new" <<EOF
# Two-node test cluster (generated by start-slurm-two-node.sh); SLURM_CONF=$SLURM_CONF
ClusterName=spag2
SlurmctldHost=$CTLD_HOST($CTLD_ADDR)
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
# a node whose slurmd comes back (after a kill) returns to service by itself
ReturnToService=2
# the nodes declare their share of the host's CPUs, not what slurmd detects
SlurmdParameters=config_overrides
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
StateSaveLocation=$SPOOL/ctld
SlurmdSpoolDir=$SPOOL/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LOGS/jobcomp.log
SlurmctldTimeout=30
# a node whose slurmd is gone is set DOWN (and its jobs end NODE_FAIL) within ~10 s
SlurmdTimeout=10
# a job of a failed node is not requeued by SLURM: its submitter (Snakemake) retries
JobRequeue=0
InactiveLimit=0
MinJobAge=3600
KillWait=5
Waittime=0
TaskProlog=$CONF_DIR/task-prolog.sh
${NODE_LINES}PartitionName=two Nodes=ALL Default=YES MaxTime=INFINITE DefMemPerCPU=1024 State=UP
EOF
if cmp -s "$SLURM_CONF.new" "$SLURM_CONF"; then rm -f "$SLURM_CONF.new"; else mv "$SLURM_CONF.new" "$SLURM_CONF"; fi
for node in $NODES; do install -d -m 0755 "$SPOOL/$node"; done

# ---------------------------------------------------------------- daemons
alive "$RUN/slurmctld.pid" || /usr/sbin/slurmctld -f "$SLURM_CONF"
for node in $NODES; do
  i=$(node_index "$node")
  alive "$RUN/slurmd-$node.pid" && continue
  # Its own network namespace, UTS namespace (host name) and mount namespace, where
  # /etc/hosts is the node's and /etc/slurm this cluster's config folder (as on a real
  # node: a job's srun finds its cluster without SLURM_CONF); host mounts still
  # propagate in. Not `ip netns exec`: that remounts /sys, and slurmd then finds no
  # cgroup file system. slurmd daemonizes inside them and writes its pid file.
  nsenter --net="/run/netns/$node" unshare --uts --mount --propagation slave sh -c \
    "mount --bind /etc/netns/$node/hosts /etc/hosts && mount --bind $CONF_DIR /etc/slurm &&
     hostname $node && exec taskset -c $(cpus_of "$i") /usr/sbin/slurmd -f $SLURM_CONF -N $node"
done

ready=0
for _ in $(seq 1 120); do
  ready=0
  for node in $NODES; do
    state=$(sinfo -h -n "$node" -o %T 2>/dev/null || true)
    case "$state" in
      idle | mixed | allocated | completing) ready=$((ready + 1)) ;;
      # a node left drained or down by an earlier (bad or killed) registration
      *drain* | *down* | *inval*)
        alive "$RUN/slurmd-$node.pid" &&
          scontrol update nodename="$node" state=resume 2>/dev/null || true ;;
    esac
  done
  [ "$ready" = 2 ] && break
  sleep 0.5
done
sinfo -N -o "%N %T %c %m %o"
if [ "$ready" != 2 ]; then
  log "nodes not ready; see $LOGS/" >&2
  exit 1
fi
log "cluster up after $(( $(date +%s) - t0 ))s: SLURM_CONF=$SLURM_CONF"
