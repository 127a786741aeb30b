#!/usr/bin/env bash
# measure-scale.sh - init time and what a communicator adds to each rank
# (descriptors, sockets, threads, RSS after one allreduce of 256 KiB), over
# n, for shared memory and TCP (RINGCC_SHM_DISABLE), one run per point,
# nice'd. Prints one "measure:" line per point (test/test_scale.c
# measure/init_and_resources) and the load average with it; the whole log
# goes to build/measure/scale-<time>.log. docs/reliability.md has the
# figures.
#
#   scripts/measure-scale.sh [SHM_NS [TCP_NS]]
#     defaults: "8 16 32 64 128 256" and "8 16 32 64 128"; "" runs none
#     (scripts/measure-scale.sh "" "8 16": TCP only)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
shm_ns=${1-"8 16 32 64 128 256"}
tcp_ns=${2-"8 16 32 64 128"}
make --no-print-directory build/test/test_scale >/dev/null
mkdir -p build/measure
log=build/measure/scale-$(date -u +%Y%m%dT%H%M%SZ).log
echo "measure-scale: git $(git rev-parse --short HEAD), $(date -u), $(nproc) cpus" | tee "$log"
for tcp in 0 1; do
  ns=$shm_ns
  [ "$tcp" = 1 ] && ns=$tcp_ns
  for n in $ns; do
    RINGCC_MEASURE_N=$n RINGCC_MEASURE_TCP=$tcp nice build/test/test_scale \
      --filter='measure/*' -j1 >>"$log" 2>&1 || echo "n=$n tcp=$tcp FAILED" | tee -a "$log"
    grep "^measure: n=$n $([ "$tcp" = 1 ] && echo tcp || echo shm) " "$log" | tail -1 || true
  done
done
