#!/usr/bin/env bash
# torch-suite.sh - PyTorch's own distributed tests (distributed_test.py of the
# installed wheel) with gloo and with ringcc standing in for gloo, per world
# size, and a table: the tests gloo passes, and how many of those ringcc
# passes (scripts/torch_suite.py runs one backend at one world size).
#
#   scripts/torch-suite.sh [--venv DIR] [--ws "2 3"] [--quick] [--tests a,b]
#                          [--all]
#
#   --venv DIR   the venv with torch (default build/venv); it needs
#                expecttest, which torch's test helpers import (make
#                python-venv installs it; this script installs nothing)
#   --ws LIST    world sizes (default "2 3")
#   --quick      a bounded subset (CI, make torch-suite-quick): a few tests
#                of each feature the backend adds, ringcc only, world size 2
#   --tests LIST comma-separated test names instead of all
#   --all        ringcc runs every test, not only those gloo passed (the
#                default halves the time: ringcc's table is against gloo's)
#
# Results go to build/torch-suite/<backend>-ws<N>.json and .log. Exit
# status 1 when ringcc fails a test that gloo passes (or, with --quick, any
# test of the subset). The whole suite takes long (each test spawns its
# ranks, which import torch): run it at the end, not in a loop.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

venv=build/venv
ws_list="2 3"
quick=0
tests=""
all=0
while [ $# -gt 0 ]; do
  case "$1" in
    --venv) venv=$2; shift 2 ;;
    --ws) ws_list=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --tests) tests=$2; shift 2 ;;
    --all) all=1; shift ;;
    -h|--help) sed -n '2,25s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "torch-suite.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done

QUICK_TESTS=test_all_reduce_sum,test_all_reduce_sum_async,test_broadcast,\
test_all_gather,test_all_gather_coalesced_simple,test_all_to_all_single_equal_split,\
test_reduce_sum,test_send_recv,test_isend,test_send_recv_any_source,\
test_monitored_barrier_gloo,test_barrier_timeout_arg,test_all_reduce_coalesced_sum,\
test_sparse_all_reduce_sum

py=$venv/bin/python
[ -x "$py" ] || { echo "torch-suite.sh: no python in $venv (make python-venv)" >&2; exit 2; }
"$py" -c 'import expecttest' 2>/dev/null || {
  echo "torch-suite.sh: $venv lacks expecttest, which torch's test helpers" \
    "import: $venv/bin/python -m pip install expecttest" >&2; exit 2; }
out=build/torch-suite
mkdir -p "$out"
# The ringcc package and library of this checkout.
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
export RINGCC_LIBRARY=${RINGCC_LIBRARY:-$PWD/build/lib/libringcc.so}

run() { # backend ws tests
  local log=$out/$1-ws$2.log
  echo "== $1 at world size $2 ($(date -u +%H:%M:%S) UTC; log $log)"
  timeout -k 30 7200 "$py" scripts/torch_suite.py --backend "$1" \
    --world-size "$2" ${3:+--tests "$3"} --json "$out/$1-ws$2.json" \
    >"$log" 2>&1 || true
  grep '^torch_suite ' "$log" || { tail -n 20 "$log"; echo "($1 ws=$2 did not finish)"; }
}

if [ "$quick" = 1 ]; then
  run ringcc 2 "$QUICK_TESTS"
  exec "$py" - "$out/ringcc-ws2.json" "$QUICK_TESTS" <<'PY'
import json, sys
got = json.load(open(sys.argv[1]))
bad = [t for t in sys.argv[2].split(",") if got.get(t) == "FAIL" or t not in got]
print(f"torch-suite quick: {sum(v == 'PASS' for v in got.values())} passed, "
      f"{sum(v == 'SKIP' for v in got.values())} skipped, {len(bad)} failed"
      + (": " + ", ".join(bad) if bad else ""))
sys.exit(1 if bad else 0)
PY
fi

gloo_passed() { # ws: the tests gloo passed, comma-separated
  "$py" -c 'import json, sys
print(",".join(sorted(t for t, v in json.load(open(sys.argv[1])).items()
                      if v == "PASS")))' "$out/gloo-ws$1.json"
}

for ws in $ws_list; do
  run gloo "$ws" "$tests"
  rtests=$tests
  if [ "$all" = 0 ] && [ -f "$out/gloo-ws$ws.json" ]; then
    rtests=$(gloo_passed "$ws")
    [ -n "$rtests" ] || { echo "(gloo passed nothing at world size $ws)"; continue; }
  fi
  run ringcc "$ws" "$rtests"
done
"$py" - "$out" $ws_list <<'PY'
import json, os, sys
out, sizes = sys.argv[1], sys.argv[2:]
failed = 0
print("| world size | tests | gloo passes | ringcc passes | ringcc passes of gloo's | ringcc fails where gloo passes |")
print("|---|---|---|---|---|---|")
for ws in sizes:
    try:
        g = json.load(open(os.path.join(out, f"gloo-ws{ws}.json")))
        r = json.load(open(os.path.join(out, f"ringcc-ws{ws}.json")))
    except OSError as e:
        print(f"| {ws} | (missing: {e}) |"); failed = 1; continue
    gp = {t for t, v in g.items() if v == "PASS"}
    rp = {t for t, v in r.items() if v == "PASS"}
    lost = sorted(gp - rp)
    failed |= bool(lost)
    print(f"| {ws} | {len(g)} | {len(gp)} | {len(rp)} | {len(gp & rp)} | "
          f"{', '.join(lost) or '-'} |")
sys.exit(1 if failed else 0)
PY
