#!/usr/bin/env bash
# trace-cost.sh - what the trace costs when it is off, and when it is on:
# an 8-byte AllReduce (ringcc-bench -b 8 -e 8) of another build (BASE, e.g.
# the tree before a change) against this build, interleaved, and the
# instructions per call under callgrind. docs/trace.md has the figures.
#
#   scripts/trace-cost.sh BASE_BIN [ROUNDS] [NP]
#
# BASE_BIN: the other build's bin directory (its ringcc-bench links its own
# libringcc.a). Make one from a commit with
#   mkdir -p build/base && git archive COMMIT | tar -x -C build/base &&
#   make -C build/base all
# and pass build/base/build/bin. ROUNDS (default 15) rounds of base / this
# build with the trace off / on, each a ringcc-bench of 5000 timed calls;
# NP ranks (default 2). Prints the median and minimum of each, then, for
# NP = 2, the instructions per call of both builds (needs valgrind): the
# difference between runs of 400 and 200 timed calls per group, with waits
# that sleep instead of polling (RINGCC_SPIN=0 RINGCC_YIELDS=0), so the
# count does not depend on how long a peer took. Results and the raw
# numbers go to build/trace-cost/.
set -euo pipefail
base=${1:?usage: scripts/trace-cost.sh BASE_BIN [ROUNDS] [NP]}
rounds=${2:-15}
np=${3:-2}
new=build/bin
out=build/trace-cost
mkdir -p "$out"
[ -x "$base/ringcc-bench" ] || { echo "trace-cost.sh: no $base/ringcc-bench" >&2; exit 2; }
[ -x "$new/ringcc-bench" ] || { echo "trace-cost.sh: build first (make)" >&2; exit 2; }
export RINGCC_TUNER_FILE=none RINGCC_CUDA_DEVICE=none
# No check of the results: -c 0 (nccl-tests' spelling), -C 0 in builds from
# before ringcc-bench took nccl-tests' flags.
nocheck() { # bin
  if "$1/ringcc-bench" --help 2>/dev/null | grep -q -- --min-time; then
    echo "-c 0"
  else
    echo "-C 0"
  fi
}

raw="$out/time-np$np.txt"
: > "$raw"
for r in $(seq 1 "$rounds"); do
  for v in base off on; do
    bin=$new
    extra=()
    [ "$v" = base ] && bin=$base
    [ "$v" = on ] && extra=(RINGCC_TRACE="$out/trace" RINGCC_TRACE_EVENTS=4096)
    t=$(env "${extra[@]}" timeout 300 "$new/ringcc-run" -np "$np" \
          "$bin/ringcc-bench" -b 8 -e 8 -n 5000 -w 500 $(nocheck "$bin") 2>/dev/null |
        awk '/^\[0\] +8 /{print $7}')
    echo "$r $v ${t:-NaN}" >> "$raw"
  done
done
echo "time per call, out of place, $np ranks, $rounds interleaved rounds:"
python3 - "$raw" <<'PY'
import statistics, sys
d = {}
for line in open(sys.argv[1]):
    r, v, t = line.split()
    if t != "NaN":
        d.setdefault(v, []).append(float(t))
names = {"base": "base", "off": "this build, trace off", "on": "this build, trace on"}
for v in ("base", "off", "on"):
    x = d.get(v, [])
    if x:
        print("  %-22s median %8.2f us  min %8.2f us  (%d runs)" %
              (names[v], statistics.median(x), min(x), len(x)))
PY

if [ "$np" = 2 ] && command -v valgrind >/dev/null; then
  echo "instructions per call (callgrind, 2 ranks):"
  for v in base off; do
    bin=$new
    [ "$v" = base ] && bin=$base
    for iters in 200 400; do
      rm -f "$out"/cg."$v"."$iters".*
      RINGCC_SPIN=0 RINGCC_YIELDS=0 timeout 900 "$new/ringcc-run" -np 2 \
        valgrind --tool=callgrind \
        --callgrind-out-file="$out/cg.$v.$iters.%q{RINGCC_RANK}" \
        "$bin/ringcc-bench" -b 8 -e 8 -n "$iters" -w 10 $(nocheck "$bin") >/dev/null 2>&1
    done
    for rank in 0 1; do
      a=$(awk '/^(summary|totals):/{print $2; exit}' "$out/cg.$v.400.$rank")
      b=$(awk '/^(summary|totals):/{print $2; exit}' "$out/cg.$v.200.$rank")
      echo "  $v rank $rank: $(( (a - b) / 400 ))"
    done
  done
fi
