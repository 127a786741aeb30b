#!/usr/bin/env bash
# bench-compare.sh - libringcc next to Open MPI and Gloo, measured the same
# way in one sitting on this machine (make bench-compare).
#
#   scripts/bench-compare.sh [options]
#
#   --quick          fewer sizes (8 B to 64 MiB by x16 instead of 8 B to
#                    256 MiB by x4), ReduceScatter/AllGather only at n = 4
#                    (or the first --n); same repetitions
#   --n LIST         rank counts, e.g. 4 or 2,8 (default 2,4,8)
#   --sizes LIST     explicit AllReduce sizes, e.g. 8,64M (K/M/G suffixes)
#   --reps R         repetitions of every run; medians are reported (default 3)
#   --configs LIST   subset of ringcc-shm,ringcc-reg,ringcc-tcp,mpi-vader,
#                    mpi-tcp,gloo-tcp
#   --no-extra       skip ReduceScatter/AllGather at 64 MiB (ringcc vs Open MPI;
#                    at every n, except with --quick)
#   --no-calibrate   use the tuner file there is (RINGCC_TUNER_FILE, else the
#                    user's cache, else the built-in values) instead of
#                    calibrating this machine first
#   --timeout SEC    limit of every single run (default 300)
#   --out DIR        results folder (default build/bench-results/DATE[-quick],
#                    which git ignores and make clean removes)
#   --build DIR      libringcc build tree (default build; as make's BUILD)
#   --dry-run        print the plan (invocations, iterations, run count), exit
#   -h, --help       this text
#
# Steps: check/install the packages (scripts/install-deps.sh --bench), build
# libringcc (make all) and bench/*.c into BUILD/bench, measure the ceilings
# once (bench/membw: 2 threads, 256 MiB; bench/tcpring: the ring-pattern
# loopback TCP rate at each n), calibrate ringcc's tuner (ringcc-bench
# --calibrate at n = 4, into the results folder; skipped with --no-calibrate
# or when RINGCC_TUNER_FILE is set), then run every configuration at every n,
# interleaved: each repetition goes round all configurations (starting at a
# different one each time) before the next begins, so slow phases of this
# noisy machine hit all of them. Every run is wrapped in `timeout`.
# Configurations (allreduce, float32 sum; out of place is compared):
#   ringcc-shm  ringcc-run -np N ringcc-bench               (shared memory)
#   ringcc-reg  the same with --register (registered buffers: zero-copy)
#   ringcc-tcp  the same with RINGCC_SHM_DISABLE=1 RINGCC_SOCKET_IFNAME==lo
#   mpi-vader   mpirun ... --mca pml ob1 --mca btl self,vader  mpi-bench
#   mpi-tcp     mpirun ... --mca btl self,tcp, btl/oob_tcp_if_include lo
#   gloo-tcp    gloo-bench --nranks N (ring, TCP on 127.0.0.1, FileStore)
# Output in the results folder: table.md (medians, ratios, ceilings),
# busbw.png, medians.csv, runs.tsv (every run: status, wall time), logs/
# (every run's output and JSON), ceilings/, versions.txt. The tree keeps one
# current summary, docs/performance/summary.md and summary.png: a run that
# replaces it copies its table.md and busbw.png there (docs/performance.md).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1

ALL_CONFIGS=(ringcc-shm ringcc-reg ringcc-tcp mpi-vader mpi-tcp gloo-tcp)
EXTRA_CONFIGS=(ringcc-shm ringcc-reg ringcc-tcp mpi-vader mpi-tcp)
EXTRA_COLLS=(reduce_scatter allgather)
EXTRA_SIZE=64M

dry_run=0 quick=0 n_list=2,4,8 sizes='' reps=3 configs='' extra=1 calibrate=1 run_timeout=300 out='' build=build

usage() { sed -n '2,/^set -uo/{/^set -uo/d;s/^# \{0,1\}//p}' "$0"; }
die() { echo "bench-compare: $*" >&2; exit 1; }
log() { echo "[$(date +%H:%M:%S)] $*"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --n) n_list=${2:?--n needs a value}; shift ;;
    --sizes) sizes=${2:?--sizes needs a value}; shift ;;
    --reps) reps=${2:?--reps needs a value}; shift ;;
    --configs) configs=${2:?--configs needs a value}; shift ;;
    --no-extra) extra=0 ;;
    --no-calibrate) calibrate=0 ;;
    --dry-run) dry_run=1 ;;
    --timeout) run_timeout=${2:?--timeout needs a value}; shift ;;
    --out) out=${2:?--out needs a value}; shift ;;
    --build) build=${2:?--build needs a value}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench-compare: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

# ---- arguments -----------------------------------------------------------------
to_bytes() { # 64M -> 67108864
  local v=$1 num suf
  num=${v%[KkMmGg]}; suf=${v#"$num"}
  [[ $num =~ ^[0-9]+$ ]] || return 1
  case "$suf" in
    "") echo $((10#$num)) ;; [Kk]) echo $((10#$num << 10)) ;;
    [Mm]) echo $((10#$num << 20)) ;; [Gg]) echo $((10#$num << 30)) ;;
  esac
}

IFS=, read -r -a NS <<< "$n_list"
for n in "${NS[@]}"; do
  if ! [[ $n =~ ^[0-9]+$ ]] || [ "$n" -lt 2 ]; then die "--n: '$n' is not a rank count >= 2"; fi
done
[[ $reps =~ ^[1-9][0-9]*$ ]] || die "--reps: '$reps' is not a positive number"
[[ $run_timeout =~ ^[1-9][0-9]*$ ]] || die "--timeout: '$run_timeout' is not a positive number"
if [ -n "$configs" ]; then
  IFS=, read -r -a CONFIGS <<< "$configs"
  for c in "${CONFIGS[@]}"; do
    [[ " ${ALL_CONFIGS[*]} " == *" $c "* ]] || die "--configs: unknown '$c' (known: ${ALL_CONFIGS[*]})"
  done
else
  CONFIGS=("${ALL_CONFIGS[@]}")
fi

# Iterations per size band, the same for every configuration: many for the
# latency-bound sizes (and at least 0.25 s of them), few where one call takes
# up to seconds.
band_of() { # bytes -> small|medium|large
  if [ "$1" -le 65536 ]; then echo small
  elif [ "$1" -le $((16 << 20)) ]; then echo medium
  else echo large; fi
}
# -a 3: the slowest rank's time, as the tables of docs/performance.md were
# measured (nccl-tests' default is the mean).
band_iters() {
  case "$1" in small) echo "-a 3 -w 10 -n 50 --min-time 0.25" ;; medium) echo "-a 3 -w 3 -n 10 --min-time 0.25" ;; *) echo "-a 3 -w 1 -n 3" ;; esac
}

# Rank counts of the ReduceScatter/AllGather runs.
EXTRA_NS=("${NS[@]}")
if [ "$quick" = 1 ]; then
  EXTRA_NS=("${NS[0]}")
  for n in "${NS[@]}"; do [ "$n" = 4 ] && EXTRA_NS=(4); done
fi

# JOBS: one line per benchmark invocation of AllReduce: "band -b X -e Y -f F".
JOBS=()
if [ -n "$sizes" ]; then
  IFS=, read -r -a SZ <<< "$sizes"
  for s in "${SZ[@]}"; do
    if ! b=$(to_bytes "$s") || [ "$b" -lt 1 ]; then die "--sizes: bad size '$s'"; fi
    JOBS+=("$(band_of "$b") -b $b -e $b -f 2")
  done
else
  if [ "$quick" = 1 ]; then min=8 max=$((64 << 20)) factor=16
  else min=8 max=$((256 << 20)) factor=4; fi
  # The sizes: from max down by factor, plus min. Each band's part of the
  # geometric grid is one invocation (-b LO -e HI -f factor: nccl-tests' sizes
  # go up from -b); min, where it is off the grid, is one more.
  grid=() s=$max
  while [ "$s" -ge "$min" ]; do grid+=("$s"); s=$((s / factor)); done
  [ "${grid[-1]}" = "$min" ] || JOBS+=("$(band_of "$min") -b $min -e $min -f 2")
  for band in small medium large; do
    lo='' hi=
    for s in "${grid[@]}"; do
      [ "$(band_of "$s")" = "$band" ] || continue
      [ -z "$hi" ] || [ "$s" -gt "$hi" ] && hi=$s
      [ -z "$lo" ] || [ "$s" -lt "$lo" ] && lo=$s
    done
    [ -n "$hi" ] && JOBS+=("$band -b $lo -e $hi -f $factor")
  done
fi

if [ "$dry_run" = 1 ]; then
  echo "AllReduce invocations per configuration, n and repetition (same for all):"
  for jobline in "${JOBS[@]}"; do
    read -r band args <<< "$jobline"
    echo "  $band: $args $(band_iters "$band")"
  done
  nextra=0
  [ "$extra" = 1 ] && nextra=$(( ${#EXTRA_COLLS[@]} * ${#EXTRA_NS[@]} * ${#EXTRA_CONFIGS[@]} ))
  [ "$extra" = 1 ] && echo "  extra: ${EXTRA_COLLS[*]} at $EXTRA_SIZE, n = ${EXTRA_NS[*]}: -b $EXTRA_SIZE -e $EXTRA_SIZE $(band_iters large)"
  echo "configurations: ${CONFIGS[*]}; n: ${NS[*]}; repetitions: $reps"
  echo "runs: $(( reps * (${#JOBS[@]} * ${#NS[@]} * ${#CONFIGS[@]} + nextra) ))"
  exit 0
fi

if [ -z "$out" ]; then
  out=build/bench-results/$(date +%Y-%m-%d-%H%M)$([ "$quick" = 1 ] && echo -quick)
fi
mkdir -p "$out/logs" "$out/ceilings" || die "cannot create $out"
out=$(cd "$out" && pwd)

# ---- packages and build ------------------------------------------------------------
scripts/install-deps.sh --bench || die "missing packages (see above)"

log "building libringcc ($build) and bench/ ($build/bench)"
make --no-print-directory all BUILD="$build" > "$out/build.log" 2>&1 ||
  { tail -20 "$out/build.log" >&2; die "make all failed (see $out/build.log)"; }
case "$build" in /*) build_dir=$build ;; *) build_dir=$ROOT/$build ;; esac
BIN=$build_dir/bin BB=$build_dir/bench
mkdir -p "$BB"
(
  set -e
  gcc -std=c11 -O2 -g -Wall -Wextra -Werror -c bench/bench_common.c -o "$BB/bench_common.o"
  mpicc -std=c11 -O2 -g -Wall -Wextra -Werror bench/mpi_bench.c "$BB/bench_common.o" -o "$BB/mpi-bench" -lm
  g++ -std=c++17 -O2 -g -Wall -Wextra bench/gloo_bench.cc "$BB/bench_common.o" -o "$BB/gloo-bench" -lgloo -pthread -lm
  gcc -std=c11 -O3 -march=native -Wall -Wextra -Werror -pthread bench/membw.c -o "$BB/membw"
  gcc -std=c11 -O2 -Wall -Wextra -Werror -pthread bench/tcpring.c -o "$BB/tcpring"
) >> "$out/build.log" 2>&1 || { tail -20 "$out/build.log" >&2; die "building bench/ failed (see $out/build.log)"; }

# ---- what ran where ------------------------------------------------------------------
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "command: scripts/bench-compare.sh$([ "$quick" = 1 ] && echo " --quick") --n $n_list --reps $reps${sizes:+ --sizes $sizes}${configs:+ --configs $configs}$([ "$extra" = 0 ] && echo " --no-extra") --timeout $run_timeout"
  # read-only git: the commit, and the files of the working tree that differ
  changed=$(git diff-index --name-only HEAD -- 2>/dev/null | tr '\n' ' ')
  echo "libringcc: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)${changed:+ + uncommitted changes in: $changed}"
  # shellcheck disable=SC1091
  echo "os: $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-unknown}"), kernel $(uname -r)"
  echo "cpu: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p'), $(nproc) cpus"
  echo "memory: $(awk '/MemTotal/{printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
  echo "gcc: $(gcc --version | head -1)"
  echo "mpirun: $(mpirun --version 2>&1 | head -1)"
  dpkg-query -W -f='package: ${Package} ${Version}\n' openmpi-bin libopenmpi3 libgloo-dev gnuplot-nox 2>/dev/null
  echo "RINGCC_* in the environment: $(env | grep '^RINGCC_' | tr '\n' ' ')"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out/versions.txt"

# ---- runs ------------------------------------------------------------------------
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --mca pml ob1)
printf 'rep\tcollective\tconfig\tn\tjob\trc\twall_s\tlog\n' > "$out/runs.tsv"

# command_for CONFIG N JSON ARGS... -> prints nothing; sets CMD (an array)
command_for() {
  local cfg=$1 n=$2 json=$3; shift 3
  case "$cfg" in
    ringcc-shm) CMD=(env -u RINGCC_SHM_DISABLE "$BIN/ringcc-run" -np "$n" --no-prefix
                     "$BIN/ringcc-bench" "$@" --json "$json") ;;
    ringcc-reg) CMD=(env -u RINGCC_SHM_DISABLE "$BIN/ringcc-run" -np "$n" --no-prefix
                     "$BIN/ringcc-bench" --register "$@" --json "$json") ;;
    ringcc-tcp) CMD=(env RINGCC_SHM_DISABLE=1 RINGCC_SOCKET_IFNAME==lo "$BIN/ringcc-run"
                     -np "$n" --no-prefix "$BIN/ringcc-bench" "$@" --json "$json") ;;
    mpi-vader) CMD=("${MPIRUN[@]}" --mca btl "self,vader" -np "$n" "$BB/mpi-bench" "$@"
                    --in-place 0 --json "$json") ;;
    mpi-tcp) CMD=("${MPIRUN[@]}" --mca btl "self,tcp" --mca btl_tcp_if_include lo
                  --mca oob_tcp_if_include lo -np "$n" "$BB/mpi-bench" "$@" --in-place 0 --json "$json") ;;
    gloo-tcp) # its own watchdog stops the ranks and removes the store first
              CMD=("$BB/gloo-bench" --nranks "$n" -T $((run_timeout > 10 ? run_timeout - 5 : run_timeout))
                   "$@" --in-place 0 --json "$json") ;;
  esac
}

failures=0
# run REP COLL CONFIG N JOBNAME ARGS...
run() {
  local rep=$1 coll=$2 cfg=$3 n=$4 job=$5; shift 5
  local name="r${rep}_${coll}_${cfg}_n${n}_${job}"
  local logf="$out/logs/$name.log" json="$out/logs/$name.json" t0 t1 rc
  command_for "$cfg" "$n" "$json" --coll "$coll" "$@"
  t0=$(date +%s.%N)
  { echo "# command: ${CMD[*]}"; timeout -k 10 "$run_timeout" "${CMD[@]}" < /dev/null; } > "$logf" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  local wall; wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rep" "$coll" "$cfg" "$n" "$job" "$rc" "$wall" \
    "logs/$name.log" >> "$out/runs.tsv"
  if [ "$rc" != 0 ]; then
    failures=$((failures + 1))
    log "  FAILED (exit $rc$([ "$rc" = 124 ] && echo ": timeout ${run_timeout}s")): $name, see $logf"
  fi
}

start=$(date +%s)
log "results in $out"
log "ceilings: bench/membw (2 threads, 256 MiB), bench/tcpring (n = ${NS[*]})"
timeout -k 10 120 "$BB/membw" -s 256M -t 2 -r 10 > "$out/ceilings/membw.log" 2>&1 ||
  log "  membw failed (see $out/ceilings/membw.log)"
for n in "${NS[@]}"; do
  timeout -k 10 60 "$BB/tcpring" -N "$n" -t 3 > "$out/ceilings/tcpring_n$n.log" 2>&1 ||
    log "  tcpring -N $n failed (see $out/ceilings/tcpring_n$n.log)"
done

# The tuner's model of this machine, as a user would make it once: at n = 4
# (or the first n), before any run, into the results folder.
if [ "$calibrate" = 1 ] && [ -z "${RINGCC_TUNER_FILE:-}" ]; then
  cal_n=${NS[0]}
  for n in "${NS[@]}"; do [ "$n" = 4 ] && cal_n=4; done
  log "calibrating the tuner: ringcc-run -np $cal_n ringcc-bench --calibrate"
  if RINGCC_TUNER_FILE="$out/tuner.conf" timeout -k 10 300 "$BIN/ringcc-run" \
       -np "$cal_n" --no-prefix "$BIN/ringcc-bench" --calibrate \
       > "$out/calibration.log" 2>&1; then
    export RINGCC_TUNER_FILE="$out/tuner.conf"
    echo "ringcc tuner file: $RINGCC_TUNER_FILE (calibrated by this run at n = $cal_n; calibration.log)" >> "$out/versions.txt"
  else
    log "  calibration failed (see $out/calibration.log): built-in values"
    echo "ringcc tuner file: none (calibration failed; built-in values)" >> "$out/versions.txt"
  fi
else
  tuner_file=${RINGCC_TUNER_FILE:-${XDG_CACHE_HOME:-$HOME/.cache}/ringcc/tuner.conf}
  echo "ringcc tuner file: $tuner_file ($([ -e "$tuner_file" ] && echo present || echo absent); not calibrated by this run)" >> "$out/versions.txt"
fi

nconf=${#CONFIGS[@]}
for rep in $(seq 1 "$reps"); do
  log "repetition $rep of $reps"
  # Start each repetition at a different configuration.
  order=()
  for k in $(seq 0 $((nconf - 1))); do order+=("${CONFIGS[$(((k + rep - 1) % nconf))]}"); done
  for jobline in "${JOBS[@]}"; do
    read -r band args <<< "$jobline"
    # shellcheck disable=SC2086 # args are words
    set -- $args
    job=$band; [ -n "$sizes" ] && job="$band-$(to_bytes "$2")"
    for n in "${NS[@]}"; do
      log "  allreduce $job ($args) n=$n: ${order[*]}"
      for cfg in "${order[@]}"; do
        # shellcheck disable=SC2046
        run "$rep" allreduce "$cfg" "$n" "$job" "$@" $(band_iters "$band")
      done
    done
  done
  if [ "$extra" = 1 ]; then
    eb=$(to_bytes $EXTRA_SIZE)
    for coll in "${EXTRA_COLLS[@]}"; do
      for n in "${EXTRA_NS[@]}"; do
        log "  $coll $EXTRA_SIZE n=$n"
        for cfg in "${order[@]}"; do
          [[ " ${EXTRA_CONFIGS[*]} " == *" $cfg "* ]] || continue
          # shellcheck disable=SC2046
          run "$rep" "$coll" "$cfg" "$n" large -b "$eb" -e "$eb" -f 2 $(band_iters large)
        done
      done
    done
  fi
done
end=$(date +%s)
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/versions.txt"
echo "wall time: $((end - start)) s (ceilings and runs; build excluded)" >> "$out/versions.txt"

# ---- tables and plot ------------------------------------------------------------------
log "summarizing"
python3 bench/summarize.py "$out" || die "bench/summarize.py failed"
if (cd "$out" && gnuplot busbw.gp) 2> "$out/gnuplot.log"; then
  log "plot: $out/busbw.png"
  [ -s "$out/gnuplot.log" ] || rm -f "$out/gnuplot.log"
else
  log "gnuplot failed (see $out/gnuplot.log)"
fi
log "table: $out/table.md ($((end - start)) s; $failures failed runs)"
[ "$failures" = 0 ]
