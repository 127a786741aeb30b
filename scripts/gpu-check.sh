#!/usr/bin/env bash
# gpu-check.sh - the checks of the CUDA support that need a GPU (make gpu-check),
# as ONE call of at most 540 s: what a lent GPU (one H100 or H200, ten
# minutes a call) can say in one go.
#
#   scripts/gpu-check.sh                    run (exit 77 without a GPU)
#   scripts/gpu-check.sh --dry-run [--gpus N]   (or GPU_CHECK_DRY=1)
#                                           print the plan and its caps for
#                                           N GPUs (default: those here,
#                                           else 1); runs nothing
#   scripts/gpu-check.sh --report [--gpus N]
#                                           the tables again, from the logs
#                                           of an earlier run; runs nothing
#
# Environment: GPU_CHECK_OUT (default $BUILD/gpu, BUILD default build): the
# logs (logs/STEP.log) and summary.md go there; the device command passes
# $OUT, the only folder that comes back from the device machine.
# GPU_CHECK_BUDGET (default 540): the whole call's seconds. RINGCC_TIMEOUT_MS
# (default 20000 here): the suites' deadline, read from the environment (a
# step's kernels time out with a message before the step's cap kills it).
#
# Each step runs under `timeout` with its own cap; the caps add up to at most
# the budget (printed at the start) and a step gets no more than what is left.
# Steps in order of value:
#   build        make CUDA=1 WERROR=0 gpu-tests for sm_90 only (a newer
#                toolkit's warning does not stop the call; nothing to do where
#                a build/ made here came along, e.g. the device tool's carry)
#   reduce-bw    the reduction kernels against cudaMemcpy D2D, alignment sweep
#   threads-1, threads-2, threads-4
#                the device-buffer suite with 1, 2 and 4 ranks as threads
#                (rank r on GPU r % G): every collective x datatype x op
#                against a host oracle; at 2 the faults and the streams too
#   procs-2      2 ranks as processes: on two GPUs, or on one GPU under MPS
#                (detected); else "skipped: why" (process ranks spinning on
#                one GPU without MPS time-slice: the library refuses them)
#   graph        an allreduce and an in-place alltoall captured into a CUDA
#                graph, replays ordered against eager calls
#   contexts     no context for host-only communicators
#   perf-ring    AllReduce busbw 8 B - 1 GiB, RINGCC_ALGO=ring, 2 ranks as
#                threads, and the cudaMemcpy D2D rate (the floor) in the
#                same process
#   perf-zc      the same on registered device memory (ringcc_mem_alloc,
#                ringcc_comm_register; --register) with RINGCC_ALGO=zerocopy:
#                the device zero-copy kernel, 8 B - 256 MiB
#   perf-nccl    the toolkit's NCCL: n = 1 on one GPU (NCCL refuses two ranks
#                on one GPU), G ranks on G GPUs
#   nccl-dropin  scripts/nccl-gpu-check.sh (nccl-tests and torch's
#                ProcessGroupNCCL on the drop-in libnccl.so.2) where present,
#                given what is left of its cap in NCCL_GPU_CHECK_BUDGET and
#                its folder in NCCL_GPU_CHECK_OUT; its contract: exit 0 pass,
#                77 skipped (its first line saying why becomes the note),
#                else failed; its last "nccl-gpu-check: ..." line is the
#                step's summary
# Then the tables (also in summary.md): each step, its result (PASS, FAIL,
# TIMEOUT, or "skipped: why", which is neither), time and cap; correctness
# counts; busbw by size for ring, zero-copy and NCCL next to the D2D floor,
# with the targets (docs/cuda.md): zero-copy at 256 MiB >= 75% of the floor,
# ring >= 50%, 8 B latency <= 10 us.
# Exit status: 0 no step failed, 1 otherwise, 77 without a GPU.
set -u
cd "$(dirname "$0")/.." || exit 1

BUILD=${BUILD:-build}
MAKE=${MAKE:-make}
BUDGET=${GPU_CHECK_BUDGET:-540}
OUTDIR=${GPU_CHECK_OUT:-$BUILD/gpu}
LOGDIR=$OUTDIR/logs
DRY=${GPU_CHECK_DRY:-0}
REPORT=0
GPUS=""
MAX_BUDGET=540

usage() {
  echo "usage: scripts/gpu-check.sh [--dry-run | --report] [--gpus N] [--budget SECONDS]"
  echo "  env: GPU_CHECK_OUT (logs, summary.md; default \$BUILD/gpu), GPU_CHECK_DRY=1,"
  echo "       GPU_CHECK_BUDGET (default 540, at most 540), RINGCC_TIMEOUT_MS"
}

while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) DRY=1 ;;
    --report) REPORT=1 ;;
    --gpus) GPUS=${2:-}; shift ;;
    --budget) BUDGET=${2:-}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
  shift
done
[ "$DRY" = 0 ] || DRY=1

count_gpus() {
  local n
  n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  if [ "${n:-0}" -eq 0 ]; then
    n=$(find /dev -maxdepth 1 -name 'nvidia[0-9]*' 2>/dev/null | wc -l)
  fi
  echo "${n:-0}"
}

if [ -z "$GPUS" ]; then
  GPUS=$(count_gpus)
  if [ "$DRY" = 1 ] && [ "$GPUS" -eq 0 ]; then
    GPUS=1
  fi
  if [ "$REPORT" = 1 ] && [ "$GPUS" -eq 0 ]; then
    GPUS=$(sed -n 's/^gpu-check: \([0-9]*\) GPU(s);.*/\1/p' \
           "$LOGDIR/gpu-check.log" 2>/dev/null | tail -1)
    GPUS=${GPUS:-1}
  fi
fi
case $GPUS in
  ''|*[!0-9]*) echo "gpu-check: --gpus wants a number, got '$GPUS'" >&2; exit 2 ;;
esac
case $BUDGET in
  ''|*[!0-9]*) echo "gpu-check: --budget wants seconds, got '$BUDGET'" >&2; exit 2 ;;
esac
if [ "$BUDGET" -gt "$MAX_BUDGET" ]; then
  echo "gpu-check: --budget / GPU_CHECK_BUDGET is $BUDGET; at most $MAX_BUDGET" \
       "(one device call has ten minutes, start and transfers included)" >&2
  exit 2
fi

if [ "$DRY" = 0 ] && [ "$REPORT" = 0 ] && [ "$GPUS" -eq 0 ]; then
  echo "gpu-check: no GPU on this machine (nvidia-smi lists none, no" \
       "/dev/nvidia*): skipped; see docs/cuda.md"
  exit 77
fi

G=$BUILD/gpu
RUN=$BUILD/bin/ringcc-run
export RINGCC_TIMEOUT_MS=${RINGCC_TIMEOUT_MS:-20000}

# MPS: its control daemon's pipe (nvidia-cuda-mps-control -d starts one).
MPS_PIPE=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps}
mps_running() { [ -p "$MPS_PIPE/control" ]; }

# ---- the plan --------------------------------------------------------------

names=() secs=() cmds=() skips=()
# add NAME SECONDS COMMAND...: one step (the command quoted for eval).
add() {
  local name=$1 s=$2
  shift 2
  names+=("$name")
  secs+=("$s")
  cmds+=("$(printf '%q ' "$@")")
  skips+=("")
}
# skip NAME WHY: a step that cannot run here, and why (no time: cap 0).
skip() {
  names+=("$1")
  secs+=(0)
  cmds+=("-")
  skips+=("$2")
}

PERF=(-b 8 -e 1G -f 8)
SM90="-gencode arch=compute_90,code=sm_90"

add build 190 "$MAKE" --no-print-directory CUDA=1 WERROR=0 BUILD="$BUILD" \
  CUDA_ARCHS="$SM90" -j"$(nproc)" gpu-tests
add reduce-bw 20 "$G/reduce_bw" 256
add threads-1 25 "$G/gpu_suite" --threads 1
add threads-2 60 "$G/gpu_suite" --threads 2 --spread --faults --streams
add threads-4 45 "$G/gpu_suite" --threads 4 --spread --quick
if [ "$GPUS" -ge 2 ]; then
  add procs-2 40 "$RUN" -np 2 "$G/gpu_suite" --spread --quick
elif mps_running; then
  add procs-2 40 "$RUN" -np 2 "$G/gpu_suite" --quick
else
  skip procs-2 "one GPU and no MPS control daemon ($MPS_PIPE/control): process ranks would time-slice the GPU while their kernels spin, so the library refuses them; run them under MPS (nvidia-cuda-mps-control -d), as threads, or staged through host buffers"
fi
add graph 20 "$G/gpu_suite" --threads 2 --spread --quick --no-matrix --graph
add contexts 15 "$G/gpu_suite" --contexts
add perf-ring 35 env RINGCC_ALGO=ring "$G/allreduce_perf" --backend ringcc \
  --threads 2 "${PERF[@]}" --copy-bw
# The device zero-copy kernel (lib/exec/exec_zc_cuda.cu) on registered device
# memory, up to 256 MiB (the size of its target); its floor is perf-ring's.
add perf-zc 25 env RINGCC_ALGO=zerocopy "$G/allreduce_perf" --backend ringcc \
  --threads 2 --register -b 8 -e 256M -f 8
if [ "$GPUS" -ge 2 ]; then
  NNCCL=$GPUS
  [ "$NNCCL" -gt 8 ] && NNCCL=8
  add perf-nccl 25 "$G/allreduce_perf" --backend nccl --threads "$NNCCL" \
    --spread "${PERF[@]}"
else
  add perf-nccl 25 "$G/allreduce_perf" --backend nccl --threads 1 "${PERF[@]}"
fi
if [ -x scripts/nccl-gpu-check.sh ]; then
  add nccl-dropin 40 env NCCL_GPU_CHECK_OUT="$OUTDIR/nccl" BUILD="$BUILD" \
    scripts/nccl-gpu-check.sh
else
  skip nccl-dropin "scripts/nccl-gpu-check.sh is not in this tree (the drop-in libnccl.so.2 under nccl-tests and torch)"
fi

total=0
for s in "${secs[@]}"; do total=$((total + s)); done

if [ "$DRY" = 1 ]; then
  echo "gpu-check --dry-run: $GPUS GPU(s), budget ${BUDGET}s; logs and" \
       "summary.md into $OUTDIR; RINGCC_TIMEOUT_MS=$RINGCC_TIMEOUT_MS;"
  echo "steps in order, each capped (and never past what is left):"
  for i in "${!names[@]}"; do
    if [ -n "${skips[$i]}" ]; then
      printf '  %-12s %4ss  skipped: %s\n' "${names[$i]}" "${secs[$i]}" "${skips[$i]}"
    else
      printf '  %-12s %4ss  %s\n' "${names[$i]}" "${secs[$i]}" "${cmds[$i]}"
    fi
  done
  echo "gpu-check --dry-run: ${#names[@]} steps, caps add up to ${total}s" \
       "(budget ${BUDGET}s); nothing was run"
  [ "$total" -le "$BUDGET" ] || { echo "gpu-check: the caps exceed the budget" >&2; exit 1; }
  exit 0
fi

# ---- running -----------------------------------------------------------------

START=$(date +%s)
results=() times=() notes=()
failed=0
mkdir -p "$LOGDIR"
if [ "$REPORT" = 0 ]; then
  {
    echo "gpu-check: $(date -u '+%Y-%m-%d %H:%M UTC'); caps add up to ${total}s of ${BUDGET}s"
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_mode \
      --format=csv,noheader 2>/dev/null || true
    nvidia-smi topo -m 2>/dev/null | head -20 || true
    "${NVCC:-nvcc}" --version 2>/dev/null | tail -2 || true
    echo "gpu-check: $GPUS GPU(s); MPS control daemon:" \
         "$(mps_running && echo "running ($MPS_PIPE)" || echo none)"
  } | tee "$LOGDIR/gpu-check.log"
fi

left() { echo $((BUDGET - ($(date +%s) - START))); }

# The summary line a program printed, if any.
summary_of() {
  grep -E '^(\[0\] )?(gpu_suite:|reduce_bw: [0-9]|reduce_bw: align|allreduce_perf:|nccl-gpu-check:)' \
    "$1" 2>/dev/null | grep -v 'timeout reported as' | tail -1 | sed 's/^\[0\] //'
}

run_step() {
  local i=$1 name=${names[$1]} s=${secs[$1]} l rc t0 t res note
  if [ -n "${skips[$i]}" ]; then
    results[i]=skipped times[i]=- notes[i]=${skips[$i]}
    echo "<== skipped $name: ${skips[$i]}"
    return
  fi
  l=$(left)
  if [ "$s" -gt $((l - 5)) ]; then s=$((l - 5)); fi
  if [ "$s" -lt 5 ]; then
    results[i]=skipped times[i]=- notes[i]="out of time (budget ${BUDGET}s)"
    return
  fi
  echo "==> $name (cap ${s}s): ${cmds[$i]}"
  t0=$(date +%s)
  eval "NCCL_GPU_CHECK_BUDGET=$((s - 5)) timeout -k 5 $s ${cmds[$i]}" \
    > "$LOGDIR/$name.log" 2>&1
  rc=$?
  tail -n 20 "$LOGDIR/$name.log"
  t=$(($(date +%s) - t0))
  res=PASS note=""
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then res=TIMEOUT note="after ${s}s"
  elif [ $rc -eq 77 ]; then
    res=skipped
    note="$(grep -m1 -iE 'skip|not here|no nccl|without' "$LOGDIR/$name.log" | cut -c1-160)"
    note=${note:-the program exited 77 (not here)}
  elif [ $rc -ne 0 ]; then res=FAIL note="exit $rc"; fi
  case $res in PASS|skipped) ;; *) failed=1 ;; esac
  results[i]=$res times[i]=${t}s
  notes[i]="${note:+$note; }$(summary_of "$LOGDIR/$name.log")"
  echo "<== $res $name (${t}s)"
}

for i in "${!names[@]}"; do
  [ "$REPORT" = 1 ] && break
  if [ "$i" -gt 0 ] && [ "${results[0]}" != PASS ]; then
    results[i]=skipped times[i]=- notes[i]="the build failed (logs/build.log)"
    continue
  fi
  run_step "$i"
done
if [ "$REPORT" = 1 ]; then # the summary lines of the logs there are
  for i in "${!names[@]}"; do
    if [ -f "$LOGDIR/${names[$i]}.log" ]; then
      results[i]=logged notes[i]=$(summary_of "$LOGDIR/${names[$i]}.log")
    elif [ -n "${skips[$i]}" ]; then
      results[i]=skipped notes[i]=${skips[$i]}
    fi
  done
fi

# ---- the tables (stdout and summary.md) -----------------------------------------

correctness() {
  cat "$LOGDIR"/*.log 2>/dev/null | sed 's/^\[[0-9]*\] //' |
    awk '/^gpu_suite: .*device collectives checked/ {
           for (i = 1; i <= NF; i++) {
             if ($(i+1) == "device") calls += $i
             if ($(i+1) == "wrong") wrong += $i
           }
           runs++
         }
         END { if (runs) printf "correctness: %d suite runs, %d device collectives checked against the host oracle, %d wrong elements\n", runs, calls, wrong }'
}

# AllReduce by size: ring, zero-copy and NCCL, next to the D2D floor (the
# logs there are; mawk stops at a file it cannot open).
perf_table() {
  local f logs=()
  for f in perf-ring perf-zc perf-nccl; do
    [ -f "$LOGDIR/$f.log" ] && logs+=("$LOGDIR/$f.log")
  done
  [ ${#logs[@]} -gt 0 ] || return 0
  perf_awk "${logs[@]}"
}

perf_awk() {
  awk '
    FILENAME ~ /perf-ring/ && $1 == "ARPERF" && $2 == "ringcc" { rb[$4] = $7; rt[$4] = $5; rn = $3; s[$4] = 1; any = 1 }
    FILENAME ~ /perf-zc/   && $1 == "ARPERF" && $2 == "ringcc" { zb[$4] = $7; zt[$4] = $5; s[$4] = 1; any = 1 }
    $1 == "ARPERF" && $2 == "nccl" { nb[$4] = $7; na[$4] = $6; nt[$4] = $5; nn = $3; s[$4] = 1; any = 1 }
    $1 == "ARPERF" && $2 == "copy" { floor = $6 }
    function v(a, k) { return (k in a) ? sprintf("%.2f", a[k]) : "-" }
    END {
      if (!any) exit
      printf "| bytes | ring busbw GB/s (n=%s) | ring us | zero-copy busbw GB/s | zero-copy us | NCCL n=%s algbw GB/s | NCCL busbw | NCCL us |\n", rn, nn
      printf "|---:|---:|---:|---:|---:|---:|---:|---:|\n"
      for (k in s) order[++m] = k + 0
      for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (order[j] < order[i]) { t = order[i]; order[i] = order[j]; order[j] = t }
      for (i = 1; i <= m; i++) { k = order[i]
        printf "| %d | %s | %s | %s | %s | %s | %s | %s |\n", k, v(rb, k), v(rt, k), v(zb, k), v(zt, k), v(na, k), v(nb, k), v(nt, k) }
      if (nn == 1) printf "\nNCCL runs one rank: it refuses two ranks on one GPU (busbw is 0 by definition at n = 1; its algbw and time are the comparison).\n"
      big = 268435456
      if (floor > 0) {
        printf "\nfloor: cudaMemcpy D2D %.2f GB/s (same run)\n", floor
        if (big in zb) printf "target zero-copy 256 MiB busbw >= 75%% of the floor: %.1f%% %s\n", 100 * zb[big] / floor, (zb[big] >= 0.75 * floor) ? "met" : "NOT MET"
        else printf "target zero-copy 256 MiB busbw >= 75%% of the floor: not measured\n"
        if (big in rb) printf "target ring 256 MiB busbw >= 50%% of the floor: %.1f%% %s\n", 100 * rb[big] / floor, (rb[big] >= 0.5 * floor) ? "met" : "NOT MET"
      }
      lat = -1
      if (8 in rt) lat = rt[8]
      if ((8 in zt) && (lat < 0 || zt[8] < lat)) lat = zt[8]
      if (lat >= 0) printf "target 8 B AllReduce latency <= 10 us: %.2f us %s\n", lat, (lat <= 10) ? "met" : "NOT MET"
    }' "$@"
}

report() {
  echo "gpu-check summary: $GPUS GPU(s), $(($(date +%s) - START))s of ${BUDGET}s (caps ${total}s); logs in $LOGDIR"
  echo
  echo "| step | result | time | cap | notes |"
  echo "|---|---|---:|---:|---|"
  for i in "${!names[@]}"; do
    printf '| %s | %s | %s | %ss | %s |\n' "${names[$i]}" "${results[$i]:-not run}" \
      "${times[$i]:--}" "${secs[$i]}" "$(echo "${notes[$i]:-}" | tr '|' '/')"
  done
  echo
  correctness
  if [ -f "$LOGDIR/reduce-bw.log" ]; then
    echo
    echo "reduction kernels (fraction of cudaMemcpy D2D):"
    echo
    grep -E '^  [a-z0-9]|^reduce_bw:' "$LOGDIR/reduce-bw.log" | sed 's/^/    /'
  fi
  echo
  perf_table
}

echo
report | tee "$OUTDIR/summary.md"
exit $failed
