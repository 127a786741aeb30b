#!/usr/bin/env bash
# measure-failures.sh - the failure-detection figures of docs/reliability.md
# ("Hosts that vanish"): runs the "measure" suite of build/test/test_multihost
# (virtual hosts in network namespaces; needs root) and prints a summary.
#
#   scripts/measure-failures.sh [TRIALS] [IMPAIRED_CALLS] [LOAD_CALLS]
#
#   TRIALS          trials per fault kind (default 100): 3 hosts x 2 ranks in
#                   a stream of allreduces, the last host's link cut (switch
#                   port down; or every packet dropped); the time from the cut
#                   to the last survivor's error, median and max. Also the
#                   runs of the link flap (test_multihost
#                   link_flap_of_2s_continues_exactly: 3 hosts x 1 rank, 40
#                   allreduces, host 1's link down for 2 s): every rank must
#                   finish exactly; the longest allreduce of each run, median
#                   and max
#   IMPAIRED_CALLS  random collectives at 1 % loss, 50 +- 20 ms delay
#                   (default 2000: a few minutes), against the same calls on
#                   a clean network
#   LOAD_CALLS      random collectives with idle gaps while 8 CPU-bound
#                   processes run (default 400: several minutes); no failure
#                   allowed
#
# MEASURE_KINDS (default "link_down dropped flap impaired load") picks the
# parts. Not part of make test (it takes about 50 minutes); make test runs one trial
# of each (test_multihost vanished_host_*, link_flap_of_2s_continues_exactly,
# impaired_network_exact_results, no_false_failure_under_load). Output: build/measure/failures-DATE.log.
set -u
cd "$(dirname "$0")/.."
trials=${1:-100}
impaired=${2:-2000}
load=${3:-400}
bin=build/test/test_multihost
[ -x "$bin" ] || { echo "measure-failures: build $bin first (make tests)" >&2; exit 1; }
mkdir -p build/measure
log=build/measure/failures-$(date -u +%Y%m%dT%H%M%SZ).log
{
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -sr), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# MEASURE_KINDS=\"${MEASURE_KINDS:-}\" scripts/measure-failures.sh $trials $impaired $load (git $(git rev-parse --short HEAD 2>/dev/null))"
} | tee "$log"
run() {
  RINGCC_CUDA_DEVICE=none "$@" "$bin" --jobs=1 --filter="$filter" 2>&1 | tee -a "$log" |
    grep -E '^(MEASURE [a-z ]+:|impaired network:|under load)|FAIL|Synthesis'
}
# The link flap, TRIALS runs of its test, each rank's longest call logged.
flap() {
  local ok=0
  for i in $(seq 1 "$trials"); do
    echo "# flap trial $i, load $(cut -d' ' -f1 /proc/loadavg)" >> "$log"
    RINGCC_CUDA_DEVICE=none "$bin" --jobs=1 \
      --filter='multihost/link_flap_of_2s_continues_exactly' >> "$log" 2>&1 &&
      ok=$((ok + 1))
  done
  awk -v ok="$ok" '
    /^# flap trial / { if (n++) v[n - 1] = m; m = 0 }
    /longest allreduce took/ { for (i = 1; i <= NF; i++) if ($i == "took" && $(i + 1) + 0 > m) m = $(i + 1) + 0 }
    END { if (n) v[n] = m
          for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
          med = n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
          printf "MEASURE link flap: %d runs (3 hosts x 1 rank, host 1 down 2 s), %d with every rank exact; longest allreduce of a run: median %.2f s, min %.2f s, max %.2f s\n", n, ok, med, v[1], v[n] }' \
    <(sed -n '/^# flap trial 1,/,$p' "$log") | tee -a "$log"
}
kinds=" ${MEASURE_KINDS:-link_down dropped flap impaired load} "
case $kinds in *" link_down "*)
  filter='measure/link_down_detection' run env RCC_MEASURE_TRIALS="$trials";; esac
case $kinds in *" dropped "*)
  filter='measure/packets_dropped_detection' run env RCC_MEASURE_TRIALS="$trials";; esac
case $kinds in *" flap "*) flap;; esac
case $kinds in *" impaired "*)
  filter='measure/impaired_network_long' run env RCC_MEASURE_IMPAIRED_CALLS="$impaired";; esac
case $kinds in *" load "*)
  filter='measure/under_load_long' run env RCC_MEASURE_LOAD_CALLS="$load";; esac
echo "measure-failures: full output in $log"
