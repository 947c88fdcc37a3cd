#!/usr/bin/env bash
# Stop the daemons started by scripts/start-slurm.sh, by the PIDs in their pid files
# (no pkill/killall). Order: slurmd, slurmctld, slurmdbd, mariadbd, munged.
set -u
stop_pidfile() {
  local name="$1" pidfile="$2" pid
  [ -s "$pidfile" ] || { echo "[stop-slurm] $name: no pid file"; return 0; }
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
    echo "[stop-slurm] $name (pid $pid) stopped"
  else
    echo "[stop-slurm] $name (pid $pid) not running"
  fi
  rm -f "$pidfile"
}
stop_pidfile slurmd    /run/slurm/slurmd.pid
stop_pidfile slurmctld /run/slurm/slurmctld.pid
stop_pidfile slurmdbd  /run/slurm/slurmdbd.pid
stop_pidfile mariadbd  /run/mysqld/mysqld.pid
stop_pidfile munged    /run/munge/munged.pid
