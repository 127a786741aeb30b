#!/usr/bin/env bash
# launch-check.sh - ringcc_comm_init_env under the real launchers, each
# starting test_launch's rank program with no hand-set rendezvous: torchrun
# (standalone and --rdzv-backend c10d, from the venv), Open MPI's mpirun,
# MPICH's mpiexec.hydra, and Slurm's srun (plain, --mpi=pmi2, and
# srun -n 1 torchrun). make launch-check runs it.
#
#   scripts/launch-check.sh TEST_BINARY [VENV]
#
# Slurm: a one-node cluster of this host only (slurmctld and slurmd, started
# here in a temporary folder, ports 26817-26818 unless RCC_SLURM_PORT sets the
# first, no munge: AuthType=auth/none), stopped and removed at exit. Needs
# root (slurmd runs jobs as their user) and Debian's slurm-wlm; without them
# the srun tests are skipped and say so. A Slurm already configured on this
# host is not touched (SLURM_CONF points at the temporary one).
#
# Nothing here waits unbounded: Slurm's start is given 20 s (each sinfo 5 s),
# the tests RCC_LAUNCH_CHECK_S (default 480 s) in all; past either, what
# Slurm logged and which launcher processes still run are printed, and the
# exit status is 124.
set -euo pipefail

test_bin=${1:?usage: launch-check.sh TEST_BINARY [VENV]}
venv=${2:-build/venv}
port=${RCC_SLURM_PORT:-26817}
work=$(mktemp -d /tmp/rcc-slurm-XXXXXX)
ctld_pid=
slurmd_pid=

cleanup() {
  [ -n "$slurmd_pid" ] && kill "$slurmd_pid" 2>/dev/null || true
  [ -n "$ctld_pid" ] && kill "$ctld_pid" 2>/dev/null || true
  sleep 0.5
  rm -rf "$work"
}
trap cleanup EXIT

start_slurm() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null &&
    command -v srun >/dev/null || { echo "launch-check: no slurm-wlm (scripts/install-deps.sh --launchers): srun tests skipped"; return 1; }
  [ "$(id -u)" = 0 ] || { echo "launch-check: slurmd needs root: srun tests skipped"; return 1; }
  local host cpus
  host=$(hostname -s)
  cpus=$(nproc)
  mkdir -p "$work/state" "$work/spool"
  cat >"$work/slurm.conf" <<CONF
ClusterName=rcctest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=$host NodeAddr=127.0.0.1 CPUs=$((cpus < 8 ? 8 : cpus)) State=UNKNOWN
PartitionName=rcc Nodes=$host Default=YES MaxTime=10 State=UP OverSubscribe=FORCE:8
CONF
  export SLURM_CONF=$work/slurm.conf
  if command -v ss >/dev/null &&
    ss -Hltn "( sport = :$port or sport = :$((port + 1)) )" | grep -q .; then
    echo "launch-check: port $port or $((port + 1)) is taken (a slurmctld or" \
      "slurmd of an earlier run?): set RCC_SLURM_PORT; holders:" >&2
    ss -Hltnp "( sport = :$port or sport = :$((port + 1)) )" >&2 || true
    exit 1
  fi
  slurmctld -D -i >"$work/slurmctld.out" 2>&1 &
  ctld_pid=$!
  slurmd -D >"$work/slurmd.out" 2>&1 &
  slurmd_pid=$!
  local end=$((SECONDS + 20))
  while [ "$SECONDS" -lt "$end" ]; do
    if timeout 5 sinfo -h -o %t 2>/dev/null | grep -q idle; then
      echo "launch-check: one-node Slurm up ($host, $SLURM_CONF)"
      return 0
    fi
    sleep 0.2
  done
  echo "launch-check: Slurm did not come up in 20 s; its logs:" >&2
  tail -n 20 "$work"/slurm*.log >&2 || true
  exit 1
}

if start_slurm; then
  export RCC_TEST_SLURM=1
fi
export PY_VENV=$venv
rc=0
limit=${RCC_LAUNCH_CHECK_S:-480}
timeout -k 10 "$limit" "$test_bin" --jobs=1 --filter='launch*/*' --verbose=0 \
  </dev/null || rc=$?
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
  echo "launch-check: the launcher tests ran past ${limit} s (RCC_LAUNCH_CHECK_S);" \
    "the last test started is the last [RUN ] above. Still running:" >&2
  ps -eo pid,ppid,etime,args | grep -E 'slurm|srun|torchrun|mpirun|mpiexec|hydra|test_launch' |
    grep -v grep >&2 || true
  [ -n "$ctld_pid" ] && tail -n 15 "$work"/slurm*.log >&2 || true
  rc=124
fi
exit $rc
