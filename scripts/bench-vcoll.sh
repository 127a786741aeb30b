#!/usr/bin/env bash
# bench-vcoll.sh - libringcc's AllToAllv, Gather and Scatter next to Open
# MPI's (MPI_Alltoallv, MPI_Gather, MPI_Scatter), over shared memory (ringcc
# shm, Open MPI vader) and TCP on loopback (ringcc with RINGCC_SHM_DISABLE=1,
# Open MPI btl tcp), measured interleaved in one sitting.
#
#   scripts/bench-vcoll.sh [--n "4 8"] [--reps 3] [--colls "alltoallv gather
#                          scatter"] [--min 1K] [--max "4:64M 8:16M"]
#                          [--configs "..."] [--factor 4] [--warmup 20]
#                          [--out DIR]
#
# Configurations (--configs, default all but ringcc-nothp, ringcc-cma and
# ringcc-fifo): ringcc-shm (the tuner's choice: Gather and Scatter by
# cross-memory attach from 64 KiB a block, AllToAllv's blocks over 8 KiB
# read in place; buffers read in place collapsed into huge pages once
# reused), ringcc-nothp (the same with RINGCC_THP=0),
# ringcc-reg (the same on buffers registered once, ringcc-bench --register:
# AllToAllv's large blocks read by memcpy from the peer's memory as mapped
# by registration, not by the kernel; Gather and Scatter as ringcc-shm),
# ringcc-cma (the same with RINGCC_ALGO=cma: AllToAllv, Gather and Scatter
# by cross-memory attach at every size), ringcc-fifo (RINGCC_ALGO=direct:
# Gather and Scatter by the FIFOs' direct schedule, AllToAllv by the
# pairwise exchange, at every size; with ringcc-cma, the tuner's
# threshold), ringcc-tcp (RINGCC_SHM_DISABLE=1), mpi-vader (btl
# self,vader), mpi-tcp (btl self,tcp on lo), tcp-raw (bench/tcp_bench.c:
# the same exchange written directly on one loopback socket per pair, no
# library: what the exchange itself costs over TCP here).
#
# Sizes: per-rank blocks of --min (default 1 KiB; a power of two) to the
# --max of each n (default 64 MiB at
# n = 4, 16 MiB at n = 8: the buffers of 8 ranks at 64 MiB a block are 8 GiB,
# more than a machine shared with other jobs should give one run), by x4
# (1, 4, 16, 64, 256 KiB ...; --factor F: by xF); ringcc-bench and
# mpi-bench's size is n blocks
# (-b MIN*n -e MAX*n -f F),
# float32, out of place, -n 3 -w WARMUP --min-time 0.2 (small sizes get
# more iterations; --warmup, default 20 calls a size before the timing, as
# OSU's benchmarks warm up: what a first call costs once, ringcc's huge
# pages for a reused buffer at its 2nd and 16th call, Open MPI's
# registration cache, the first touch of each buffer, stays out of a
# per-call time; the sittings before 2026-12-07 19:14 UTC ran -w 1), -c 1
# (every element checked once per size). AllToAllv's blocks are uneven by
# ringcc-bench's rule (--help: rank i sends rank j
# floor(2*b*((i+j) mod n)/(n-1)) elements). Each repetition goes round every
# (n, collective, configuration) starting at a different configuration, so
# slow phases of a loaded machine hit all alike; the load average is
# recorded before every run. ringcc's runs get RINGCC_TIMEOUT_MS=120000
# (unless set): a call that hangs ends with the library's report of where
# each rank stands, in the run's log, long before the 600 s a run may
# take. Output in DIR (default
# build/bench-results/vcoll-DATE): logs/, runs.tsv (load, status, wall
# time), table.md (median time per size of every configuration and Open
# MPI's time over ringcc's).
set -uo pipefail
export RINGCC_TIMEOUT_MS=${RINGCC_TIMEOUT_MS:-120000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
configs="ringcc-shm ringcc-reg mpi-vader ringcc-tcp mpi-tcp tcp-raw" ns="4 8" reps=3 colls="alltoallv gather scatter" maxes="4:64M 8:16M" factor=4 min=1K warmup=20
out=build/bench-results/vcoll-$(date -u +%Y%m%d-%H%M)
while [ $# -gt 0 ]; do
  case "$1" in
    --n) ns=$2; shift ;;
    --reps) reps=$2; shift ;;
    --colls) colls=$2; shift ;;
    --max) maxes=$2; shift ;;
    --min) min=$2; shift ;;
    --warmup) warmup=$2; shift ;;
    --out) out=$2; shift ;;
    --configs) configs=$2; shift ;;
    --factor) factor=$2; shift ;;
    -h|--help) sed -n '2,/^set -uo/{/^set -uo/d;s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    *) echo "bench-vcoll.sh: unknown option '$1' (--help)" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$out/logs" build/bench
make --no-print-directory all > "$out/build.log" 2>&1 || { echo "make all failed: $out/build.log" >&2; exit 1; }
gcc -std=c11 -O2 -g -Wall -Wextra -Werror -c bench/bench_common.c -o build/bench/bench_common.o &&
  mpicc -std=c11 -O2 -g -Wall -Wextra -Werror bench/mpi_bench.c build/bench/bench_common.o \
    -o build/bench/mpi-bench -lm &&
  gcc -std=c11 -O2 -g -Wall -Wextra -Werror bench/tcp_bench.c build/bench/bench_common.o \
    -o build/bench/tcp-bench -lm || exit 1
BIN=$ROOT/build/bin BB=$ROOT/build/bench
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --mca pml ob1)
read -r -a CONFIGS <<< "$configs"
NC=${#CONFIGS[@]}
bytes() { numfmt --from=iec "$1"; }
printf 'rep\tcoll\tconfig\tn\tload1\trc\twall_s\n' > "$out/runs.tsv"
{ echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"; echo "commit: $(git rev-parse --short HEAD)"
  echo "command: scripts/bench-vcoll.sh --n \"$ns\" --reps $reps --colls \"$colls\" --min $min --max \"$maxes\" --configs \"$configs\" --factor $factor --warmup $warmup"
  echo "mpirun: $(mpirun --version 2>&1 | head -1)"; nproc; } > "$out/versions.txt"
for rep in $(seq 1 "$reps"); do
  for n in $ns; do
    max=$(for m in $maxes; do [ "${m%%:*}" = "$n" ] && echo "${m#*:}"; done)
    max=${max:-16M}
    args=(-b $(($(bytes "$min") * n)) -e $(($(bytes "$max") * n)) -f "$factor" -n 3 -w "$warmup" --min-time 0.2 -c 1 -d float32)
    for coll in $colls; do
      for k in $(seq 0 $((NC - 1))); do
        cfg=${CONFIGS[$(((k + rep) % NC))]}
        log="$out/logs/r${rep}_${coll}_${cfg}_n${n}.log"
        case $cfg in
          ringcc-shm) cmd=(env -u RINGCC_SHM_DISABLE "$BIN/ringcc-run" -np "$n" --no-prefix "$BIN/ringcc-bench" --coll "$coll" "${args[@]}") ;;
          ringcc-nothp) cmd=(env -u RINGCC_SHM_DISABLE RINGCC_THP=0 "$BIN/ringcc-run" -np "$n" --no-prefix "$BIN/ringcc-bench" --coll "$coll" "${args[@]}") ;;
          ringcc-reg) cmd=(env -u RINGCC_SHM_DISABLE "$BIN/ringcc-run" -np "$n" --no-prefix "$BIN/ringcc-bench" --coll "$coll" --register "${args[@]}") ;;
          ringcc-cma) cmd=(env -u RINGCC_SHM_DISABLE RINGCC_ALGO=cma "$BIN/ringcc-run" -np "$n" --no-prefix "$BIN/ringcc-bench" --coll "$coll" "${args[@]}") ;;
          ringcc-fifo) cmd=(env -u RINGCC_SHM_DISABLE RINGCC_ALGO=direct "$BIN/ringcc-run" -np "$n" --no-prefix "$BIN/ringcc-bench" --coll "$coll" "${args[@]}") ;;
          ringcc-tcp) cmd=(env RINGCC_SHM_DISABLE=1 RINGCC_SOCKET_IFNAME==lo "$BIN/ringcc-run" -np "$n" --no-prefix "$BIN/ringcc-bench" --coll "$coll" "${args[@]}") ;;
          mpi-vader) cmd=("${MPIRUN[@]}" --mca btl self,vader -np "$n" "$BB/mpi-bench" --coll "$coll" "${args[@]}" --in-place 0) ;;
          tcp-raw) cmd=("$BB/tcp-bench" --nranks "$n" --coll "$coll" "${args[@]}") ;;
          mpi-tcp) cmd=("${MPIRUN[@]}" --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -np "$n" "$BB/mpi-bench" --coll "$coll" "${args[@]}" --in-place 0) ;;
        esac
        load=$(cut -d' ' -f1 /proc/loadavg)
        t0=$(date +%s.%N)
        { echo "# command: ${cmd[*]}"; echo "# load: $load"; timeout -k 10 600 "${cmd[@]}" < /dev/null; } > "$log" 2>&1
        rc=$?
        wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rep" "$coll" "$cfg" "$n" "$load" "$rc" "$wall" >> "$out/runs.tsv"
        echo "rep $rep n=$n $coll $cfg: rc $rc, ${wall}s, load $load" >&2
      done
    done
  done
done
python3 - "$out" <<'EOF'
import glob, os, re, statistics, sys
out = sys.argv[1]
rows = {}  # (coll, n, size) -> cfg -> [time_us]
wrong = 0
for path in glob.glob(os.path.join(out, "logs", "*.log")):
    m = re.match(r"r\d+_(\w+)_([\w-]+)_n(\d+)\.log", os.path.basename(path))
    coll, cfg, n = m.group(1), m.group(2), int(m.group(3))
    for line in open(path):
        f = line.split()
        if len(f) >= 9 and f[0].isdigit() and f[2] == "float32":
            rows.setdefault((coll, n, int(f[0]) // n), {}).setdefault(cfg, []).append(float(f[5]))
            wrong += int(f[8]) if f[8].isdigit() else 0
order = ["ringcc-shm", "ringcc-nothp", "ringcc-reg", "ringcc-cma", "ringcc-fifo", "mpi-vader", "ringcc-tcp", "mpi-tcp", "tcp-raw"]
present = [c for c in order if any(c in v for v in rows.values())]
ratios = [(m, r) for m, r in (("mpi-vader", "ringcc-shm"), ("mpi-vader", "ringcc-nothp"),
                               ("mpi-vader", "ringcc-reg"),
                               ("mpi-vader", "ringcc-cma"),
                               ("mpi-tcp", "ringcc-tcp"), ("tcp-raw", "ringcc-tcp"),
                               ("tcp-raw", "mpi-tcp"), ("ringcc-fifo", "ringcc-cma"))
          if m in present and r in present]
def size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"
with open(os.path.join(out, "table.md"), "w") as t:
    t.write(f"median time per call (us) over the repetitions; block = bytes per rank; "
            f"ratio = Open MPI / ringcc (> 1: ringcc faster; ringcc-fifo/ringcc-cma > 1: "
            f"cross-memory attach faster; tcp-raw/X > 1: X faster than the raw sockets); "
            f"wrong elements: {wrong}\n\n")
    t.write("| coll | n | block | " + " | ".join(present) + " | "
            + " | ".join(f"{m}/{r}" for m, r in ratios) + " |\n")
    t.write("|---" * (3 + len(present) + len(ratios)) + "|\n")
    for key in sorted(rows):
        med = {c: statistics.median(v) for c, v in rows[key].items()}
        cells = [f"{med[c]:.1f}" if c in med else "-" for c in present]
        rat = [f"{med[m] / med[r]:.2f}" if m in med and r in med and med[r] > 0 else "-"
               for m, r in ratios]
        t.write(f"| {key[0]} | {key[1]} | {size(key[2])} | " + " | ".join(cells + rat) + " |\n")
print(open(os.path.join(out, "table.md")).read())
EOF
