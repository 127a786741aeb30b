#!/usr/bin/env bash
# bench-ab.sh - two builds of libringcc side by side: ringcc-bench of build A
# and of build B, interleaved (A, B, A, B, ...), over shared memory and over
# TCP, at a few sizes; prints the medians of each and B/A.
#
#   scripts/bench-ab.sh [options] BUILD_A BUILD_B
#     BUILD_A, BUILD_B  build trees with bin/ringcc-run and bin/ringcc-bench
#                       (e.g. a worktree of the commit before a change, and
#                       build/ of the change)
#   --np N             ranks (default 4)
#   --sizes LIST       comma-separated sizes, ringcc-bench's syntax
#                      (default 8,64K,64M)
#   --reps R           repetitions of each (variant, transport, size)
#                      (default 7)
#   --coll C           collective (default allreduce)
#   --transports LIST  shm, shm-reg (shared memory, buffers registered with
#                      --register: zero-copy), tcp; comma-separated
#                      (default shm,tcp)
#   --out DIR          logs and the table (default build/bench-ab/DATE)
#
# Each repetition is a separate ringcc-run of ringcc-bench -b S -e S (one
# size), so A and B alternate at every size and a burst of load from
# elsewhere hits both alike. The time is ringcc-bench's out-of-place
# time(us) at -n 20 -w 5 (--min-time 0.2 below 1 MiB, so short calls are
# averaged over 0.2 s). A build from before ringcc-bench took nccl-tests'
# flags gets its old spelling (-c COLL, -m SECONDS). The table goes to stdout and DIR/table.md.
set -euo pipefail

np=4 sizes=8,64K,64M reps=7 coll=allreduce transports=shm,tcp out=
usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
  case $1 in
    --np) np=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --coll) coll=$2; shift 2 ;;
    --transports) transports=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    -*) echo "bench-ab.sh: unknown option $1" >&2; usage 2 >&2 ;;
    *) break ;;
  esac
done
[ $# -eq 2 ] || { echo "bench-ab.sh: give two build trees" >&2; usage 2 >&2; }
a=$1 b=$2
for d in "$a" "$b"; do
  for t in ringcc-run ringcc-bench; do
    [ -x "$d/bin/$t" ] || { echo "bench-ab.sh: no $d/bin/$t (build it first)" >&2; exit 2; }
  done
done
out=${out:-build/bench-ab/$(date -u +%Y-%m-%d-%H%M)}
mkdir -p "$out"
raw=$out/times.tsv
: > "$raw"

# One run: prints the out-of-place time(us) of the one size, or "fail".
run() { # build transport size failure-log
  local shm=0 log
  [ "$2" = tcp ] && shm=1
  local reg=()
  [ "$2" = shm-reg ] && reg=(--register)
  local extra=(-n 20 -w 5) coll_flag=--coll min_time=--min-time
  local help # read whole: grep -q in a pipe may close it early, and under
  # pipefail the bench's SIGPIPE would read as the old spelling
  help=$("$1/bin/ringcc-bench" --help 2>/dev/null || true)
  if ! grep -q -- --min-time <<< "$help"; then
    coll_flag=-c min_time=-m # the spelling of older builds
  fi
  case $3 in *M|*G) ;; *) extra+=("$min_time" 0.2) ;; esac
  log=$(RINGCC_SHM_DISABLE=$shm timeout 300 "$1/bin/ringcc-run" -np "$np" \
        "$1/bin/ringcc-bench" "$coll_flag" "$coll" -b "$3" -e "$3" "${extra[@]}" "${reg[@]}" 2>&1) ||
    { printf '%s\n' "$log" > "$4"; echo fail; return; }
  printf '%s\n' "$log" | awk '/^\[0\] +[0-9]/ { print $7; exit }'
}

IFS=, read -r -a size_list <<< "$sizes"
IFS=, read -r -a tr_list <<< "$transports"
echo "bench-ab: A=$a B=$b np=$np $coll, $reps reps, load $(cut -d' ' -f1-3 /proc/loadavg)" |
  tee "$out/header.txt"
for r in $(seq 1 "$reps"); do
  for t in "${tr_list[@]}"; do
    for s in "${size_list[@]}"; do
      for v in A B; do
        d=$a; [ $v = B ] && d=$b
        printf '%s\t%s\t%s\t%s\t%s\n' "$v" "$t" "$s" "$r" "$(run "$d" "$t" "$s" "$out/fail-$v-$t-$s-$r.log")" >> "$raw"
      done
    done
  done
  echo "bench-ab: repetition $r of $reps done" >&2
done
echo "bench-ab: load at the end $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/header.txt"

python3 - "$raw" "$out/table.md" <<'PY'
import statistics, sys
rows = [l.rstrip('\n').split('\t') for l in open(sys.argv[1]) if l.strip()]
t = {}
fails = 0
for v, tr, s, r, us in rows:
    if us in ('fail', ''):
        fails += 1
        continue
    t.setdefault((tr, s), {}).setdefault(v, []).append(float(us))
lines = ['| transport | size | A median (us) | B median (us) | B/A | A range | B range |',
         '|---|---|---:|---:|---:|---|---|']
for (tr, s), d in t.items():
    ma, mb = statistics.median(d['A']), statistics.median(d['B'])
    lines.append(f'| {tr} | {s} | {ma:.2f} | {mb:.2f} | {mb / ma:.3f} | '
                 f'{min(d["A"]):.2f}-{max(d["A"]):.2f} | '
                 f'{min(d["B"]):.2f}-{max(d["B"]):.2f} |')
if fails:
    lines.append(f'\n{fails} run(s) failed: see fail-*.log beside the table')
open(sys.argv[2], 'w').write('\n'.join(lines) + '\n')
print('\n'.join(lines))
PY
