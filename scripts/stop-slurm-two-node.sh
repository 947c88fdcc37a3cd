#!/usr/bin/env bash
# Stop the two-node test cluster of start-slurm-two-node.sh and remove what it made:
# its jobs (scancel), the slurmd of each node and slurmctld by the PIDs in their pid
# files (no pkill/killall), what still runs in the nodes' network namespaces (their
# job steps: `ip netns pids`), the namespaces, the veth pairs, the bridge and the
# cluster's saved state (spool). munged is stopped only if start-slurm-two-node.sh
# started it. The one-node cluster is untouched.
set -u
NAME=slurm-two-node
export SLURM_CONF=/etc/$NAME/slurm.conf
RUN=/run/$NAME
NODES="spag-n1 spag-n2"
BRIDGE=spagbr0
log() { echo "[stop-slurm-two-node] $*"; }

stop_pid() {
  local name="$1" pid="$2"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    log "$name (pid $pid) stopped"
  else
    log "$name (pid $pid) not running"
  fi
}
stop_pidfile() {
  local name="$1" pidfile="$2"
  [ -s "$pidfile" ] || { log "$name: no pid file"; return 0; }
  stop_pid "$name" "$(cat "$pidfile")"
  rm -f "$pidfile"
}

# jobs first, while the daemons can still end them
if [ -s "$RUN/slurmctld.pid" ] && kill -0 "$(cat "$RUN/slurmctld.pid")" 2>/dev/null; then
  jobs=$(timeout 10 squeue -h -o %i 2>/dev/null | tr '\n' ' ')
  if [ -n "${jobs// /}" ]; then
    # shellcheck disable=SC2086
    timeout 10 scancel $jobs 2>/dev/null
    for _ in $(seq 1 20); do
      [ -z "$(timeout 10 squeue -h -t pending,running,completing -o %i 2>/dev/null)" ] && break
      sleep 0.5
    done
  fi
fi

for node in $NODES; do stop_pidfile "slurmd $node" "$RUN/slurmd-$node.pid"; done
stop_pidfile slurmctld "$RUN/slurmctld.pid"

for node in $NODES; do
  if [ -e "/run/netns/$node" ]; then
    # anything left in the node (job steps outliving a killed slurmd) runs in its netns
    for pid in $(ip netns pids "$node" 2>/dev/null); do stop_pid "leftover in $node" "$pid"; done
    ip netns del "$node" && log "netns $node removed"
  fi
  rm -rf "/etc/netns/$node"
done
# the veths went with their namespaces; the host ends may linger a moment
for i in 1 2; do ip link del "spagv$i" 2>/dev/null || true; done
ip link del "$BRIDGE" 2>/dev/null && log "bridge $BRIDGE removed"

# a fresh cluster next time: no saved jobs, node states or job-step sockets
rm -rf "/var/spool/$NAME"

if [ -e "$RUN/munged.started" ]; then
  stop_pidfile munged /run/munge/munged.pid
  rm -f "$RUN/munged.started"
fi
exit 0
