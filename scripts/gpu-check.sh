#!/usr/bin/env bash
# gpu-check.sh - the checks of the CUDA support that need a GPU (make gpu-check).
#
#   scripts/gpu-check.sh                    run (exit 77 without a GPU)
#   scripts/gpu-check.sh --dry-run [--gpus N]
#                                           print the plan for N GPUs (default:
#                                           those here, else 8); runs nothing
#   scripts/gpu-check.sh --report [--gpus N]
#                                           the tables again, from the logs of
#                                           an earlier run; runs nothing
#
# One call of at most GPU_CHECK_BUDGET seconds (default 570: under ten
# minutes), on however many GPUs the machine has (G). Steps run in order of
# importance, each under `timeout`, capped by what is left of the budget (a
# step with under 10 s left is SKIPped and counts as a failure):
#   build        make CUDA=1 gpu-tests (nothing to do when already built)
#   reduce-bw    the reduction kernels against cudaMemcpy D2D (target >= 90%)
#                and their alignment sweep (every offset and tail, exact)
#   threads-2    2 ranks as threads over the GPUs (rank r on GPU r % G: two
#                GPUs, or two ranks sharing one): every collective x datatype
#                x op against a host oracle, 256 MiB cases, several streams
#                with no synchronisation, graph capture, timeout and abort
#   perf-*       AllReduce busbw by size, 8 B to 256 MiB, libringcc and NCCL
#                (the toolkit's) with the same ranks and GPUs (G >= 2: G
#                ranks, one per GPU; G = 1: libringcc with 2 and 4 ranks
#                sharing the GPU, against its cudaMemcpy D2D rate)
#   kill         4 ranks as processes, the last SIGKILLed under waiting
#                kernels: RINGCC_ERR_PEER_FAILED naming it, destroy < 5 s
#   contexts     no context for host-only communicators, none on GPU 0 for a
#                rank of another GPU, the thread's context kept
#   threads-4, threads-8, threads-3, threads-1
#                the matrix (quick beyond 4 ranks) as threads over the GPUs
#   channels-1   RINGCC_NCHANNELS=1 (the others run the default channels)
#   procs-2, procs-4, procs-8 (G >= 4)
#                ranks as processes over the GPUs (CUDA IPC)
#   staged-shm, staged-net
#                RINGCC_P2P_DISABLE=1, RINGCC_SHM_DISABLE=1
#   net-ib-gdr, net-ib-staged, net-ib-procs (only where an RDMA port is ACTIVE)
#                the suite over NET/IB (RINGCC_SHM_DISABLE=1 RINGCC_NET=IB):
#                GPUDirect RDMA where the plugin registers GPU memory (the
#                notes say which path each device edge took), then
#                RINGCC_NET_GDR_DISABLE=1 (staged), then 2 processes
# Then a table: each step; correctness counts; the reduction kernels'
# bandwidth; AllReduce busbw by size next to NCCL's as a ratio (targets with
# several NVLink GPUs: >= 80% of NCCL at 256 MiB, <= 1.5x its time at 8 B).
# Logs in $BUILD/gpu/logs/. Exit status: 0 every step passed, 1 otherwise,
# 77 without a GPU.
set -u
cd "$(dirname "$0")/.." || exit 1

BUILD=${BUILD:-build}
MAKE=${MAKE:-make}
BUDGET=${GPU_CHECK_BUDGET:-570}
LOGDIR=$BUILD/gpu/logs
DRY=0
REPORT=0
GPUS=""

usage() {
  echo "usage: scripts/gpu-check.sh [--dry-run | --report] [--gpus N] [--budget SECONDS]"
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
    GPUS=8
  fi
  if [ "$REPORT" = 1 ] && [ "$GPUS" -eq 0 ]; then
    GPUS=$(sed -n 's/^gpu-check: \([0-9]*\) GPU(s);.*/\1/p' \
           "$BUILD/gpu/logs/gpu-check.log" 2>/dev/null | tail -1)
    GPUS=${GPUS:-1}
  fi
fi
case $GPUS in
  ''|*[!0-9]*) echo "gpu-check: --gpus wants a number, got '$GPUS'" >&2; exit 2 ;;
esac
case $BUDGET in
  ''|*[!0-9]*) echo "gpu-check: --budget wants seconds, got '$BUDGET'" >&2; exit 2 ;;
esac

if [ "$DRY" = 0 ] && [ "$REPORT" = 0 ] && [ "$GPUS" -eq 0 ]; then
  echo "gpu-check: no GPU on this machine (nvidia-smi lists none, no" \
       "/dev/nvidia*): skipped; see docs/cuda.md"
  exit 77
fi

G=$BUILD/gpu
RUN=$BUILD/bin/ringcc-run
export RINGCC_TIMEOUT_MS=${RINGCC_TIMEOUT_MS:-60000}

# ---- the plan --------------------------------------------------------------

names=() secs=() cmds=()
# add NAME SECONDS COMMAND...: one step (the command quoted for eval).
add() {
  local name=$1 s=$2
  shift 2
  names+=("$name")
  secs+=("$s")
  cmds+=("$(printf '%q ' "$@")")
}

# The ranks' shared-memory FIFOs must fit /dev/shm (a container's default is
# 64 MiB): the slot size of the process runs follows what is free.
shm_kb=$(df -k --output=avail /dev/shm 2>/dev/null | tail -1 | tr -d ' ')
shm_kb=${shm_kb:-65536}
chunk=1048576
# 8 ranks x 8 ranks x 2 host kinds x 8 slots: 1024 chunks, within half of /dev/shm
while [ "$chunk" -gt 65536 ] && [ $((1024 * chunk / 1024)) -gt $((shm_kb / 2)) ]; do
  chunk=$((chunk / 2))
done

NPERF=$GPUS
[ "$NPERF" -gt 8 ] && NPERF=8
PERF_ARGS=(-b 8 -e 256M -f 8)

add build 240 "$MAKE" --no-print-directory CUDA=1 BUILD="$BUILD" \
  -j"$(nproc)" gpu-tests
add reduce-bw 40 "$G/reduce_bw" 256
add threads-2 100 "$G/gpu_suite" --threads 2 --spread --big --faults \
  --streams --graph
if [ "$GPUS" -ge 2 ]; then
  add perf-ringcc 60 "$G/allreduce_perf" --backend ringcc --threads "$NPERF" \
    --spread "${PERF_ARGS[@]}"
  add perf-nccl 60 "$G/allreduce_perf" --backend nccl --threads "$NPERF" \
    --spread "${PERF_ARGS[@]}"
else
  add perf-ringcc-2 50 "$G/allreduce_perf" --backend ringcc --threads 2 \
    "${PERF_ARGS[@]}" --copy-bw
  add perf-ringcc-4 50 "$G/allreduce_perf" --backend ringcc --threads 4 \
    "${PERF_ARGS[@]}" --copy-bw
fi
add kill 60 "$G/gpu_suite" --kill 4
add contexts 30 "$G/gpu_suite" --contexts
add threads-4 90 "$G/gpu_suite" --threads 4 --spread --faults
add threads-8 90 "$G/gpu_suite" --threads 8 --spread --quick --streams
add channels-1 45 env RINGCC_NCHANNELS=1 "$G/gpu_suite" --threads 2 --spread \
  --quick --graph
add procs-2 60 env RINGCC_CHUNK_BYTES="$chunk" "$RUN" -np 2 "$G/gpu_suite" \
  --spread --quick
add procs-4 60 env RINGCC_CHUNK_BYTES="$chunk" "$RUN" -np 4 "$G/gpu_suite" \
  --spread --quick
if [ "$GPUS" -ge 4 ]; then
  add procs-8 90 env RINGCC_CHUNK_BYTES="$chunk" "$RUN" -np 8 \
    "$G/gpu_suite" --spread --quick
fi
add threads-3 45 "$G/gpu_suite" --threads 3 --spread --quick
add threads-1 30 "$G/gpu_suite" --threads 1
add staged-shm 45 env RINGCC_P2P_DISABLE=1 "$G/gpu_suite" --threads 2 \
  --spread --quick
add staged-net 45 env RINGCC_SHM_DISABLE=1 "$G/gpu_suite" --threads 2 \
  --spread --quick
# The verbs plugin where an RDMA port is up (GPUDirect RDMA, then staged).
IB_NOTE=""
if grep -qs ACTIVE /sys/class/infiniband/*/ports/*/state; then
  add net-ib-gdr 40 env RINGCC_SHM_DISABLE=1 RINGCC_NET=IB RINGCC_DEBUG=INFO \
    "$G/gpu_suite" --threads 2 --spread --quick
  add net-ib-staged 40 env RINGCC_SHM_DISABLE=1 RINGCC_NET=IB \
    RINGCC_NET_GDR_DISABLE=1 "$G/gpu_suite" --threads 2 --spread --quick
  add net-ib-procs 40 env RINGCC_SHM_DISABLE=1 RINGCC_NET=IB \
    RINGCC_CHUNK_BYTES="$chunk" "$RUN" -np 2 "$G/gpu_suite" --spread --quick
else
  IB_NOTE="no ACTIVE RDMA port (/sys/class/infiniband): the NET/IB steps (GPUDirect RDMA) are left out"
fi

if [ "$DRY" = 1 ]; then
  total=0
  echo "gpu-check --dry-run: $GPUS GPU(s), budget ${BUDGET}s; steps in order,"
  echo "each capped by what is left (RINGCC_CHUNK_BYTES=$chunk for processes):"
  for i in "${!names[@]}"; do
    printf '  %-14s %4ss  %s\n' "${names[$i]}" "${secs[$i]}" "${cmds[$i]}"
    total=$((total + secs[i]))
  done
  echo "gpu-check --dry-run: ${#names[@]} steps, timeouts add up to ${total}s" \
       "(a cap each, not an estimate); nothing was run"
  [ -n "$IB_NOTE" ] && echo "gpu-check --dry-run: $IB_NOTE"
  exit 0
fi

# ---- running -----------------------------------------------------------------

START=$(date +%s)
results=() times=() notes=()
failed=0
mkdir -p "$LOGDIR"
if [ "$REPORT" = 0 ]; then
  {
    nvidia-smi -L 2>/dev/null || true
    nvidia-smi topo -m 2>/dev/null | head -20 || true
    echo "gpu-check: $GPUS GPU(s); /dev/shm has ${shm_kb} KiB free;" \
         "RINGCC_CHUNK_BYTES=$chunk for the process runs"
  } | tee "$LOGDIR/gpu-check.log"
fi

left() { echo $((BUDGET - ($(date +%s) - START))); }

# The summary line a program printed, if any.
summary_of() {
  grep -E '^(\[0\] )?(gpu_suite:|reduce_bw: [0-9]|reduce_bw: align|allreduce_perf:)' \
    "$1" 2>/dev/null | grep -v 'timeout reported as' | tail -1 | sed 's/^\[0\] //'
}

run_step() {
  local i=$1 name=${names[$1]} s=${secs[$1]} l rc t0 t res note
  l=$(left)
  if [ "$s" -gt $((l - 5)) ]; then s=$((l - 5)); fi
  if [ "$s" -lt 10 ]; then
    results[i]=SKIP times[i]=- notes[i]="out of time (budget ${BUDGET}s)"
    failed=1
    return
  fi
  echo "==> $name (timeout ${s}s): ${cmds[$i]}"
  t0=$(date +%s)
  eval "timeout -k 10 $s ${cmds[$i]}" > "$LOGDIR/$name.log" 2>&1
  rc=$?
  tail -n 30 "$LOGDIR/$name.log"
  t=$(($(date +%s) - t0))
  res=PASS note=""
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then res=TIMEOUT note="after ${s}s"
  elif [ $rc -eq 77 ]; then res=SKIP note="not here (exit 77)"
  elif [ $rc -ne 0 ]; then res=FAIL note="exit $rc"; fi
  [ "$res" = PASS ] || failed=1
  results[i]=$res times[i]=${t}s
  notes[i]="${note:+$note; }$(summary_of "$LOGDIR/$name.log")"
  if [ "$name" = net-ib-gdr ]; then # which path each device edge took
    local paths
    paths=$(grep -o 'device edge [0-9]* -> [0-9]* via NET/IB/[^ ]*' \
            "$LOGDIR/$name.log" | sed 's/.* via //' | sort -u | tr '\n' ' ')
    notes[i]="${notes[i]}; edges: ${paths:-none logged}"
  fi
  echo "<== $res $name (${t}s)"
}

for i in "${!names[@]}"; do
  [ "$REPORT" = 1 ] && break
  run_step "$i"
  if [ "$i" -eq 0 ] && [ "${results[0]}" != PASS ]; then
    echo "gpu-check: the build failed; nothing else can run"
    break
  fi
done
if [ "$REPORT" = 1 ]; then # the summary lines of the logs there are
  for i in "${!names[@]}"; do
    if [ -f "$LOGDIR/${names[$i]}.log" ]; then
      results[i]=logged notes[i]=$(summary_of "$LOGDIR/${names[$i]}.log")
    fi
  done
fi

# ---- the table -------------------------------------------------------------------

echo
echo "gpu-check summary: $GPUS GPU(s), $(($(date +%s) - START))s of ${BUDGET}s; logs in $LOGDIR"
printf '  %-14s %-8s %6s  %s\n' step result time notes
for i in "${!names[@]}"; do
  printf '  %-14s %-8s %6s  %s\n' "${names[$i]}" "${results[$i]:-not run}" \
    "${times[$i]:--}" "${notes[$i]:-}"
done
[ -z "$IB_NOTE" ] || echo "  ($IB_NOTE)"

# Correctness: every gpu_suite line "N device collectives checked, W wrong".
cat "$LOGDIR"/*.log 2>/dev/null | sed 's/^\[[0-9]*\] //' |
  awk '/^gpu_suite: .*device collectives checked/ {
         for (i = 1; i <= NF; i++) {
           if ($(i+1) == "device") calls += $i
           if ($(i+1) == "wrong") wrong += $i
         }
         runs++
       }
       END { if (runs) printf "\ncorrectness: %d suite runs, %d device collectives checked against the host oracle, %d wrong elements\n", runs, calls, wrong }'

# The reduction kernels.
if [ -f "$LOGDIR/reduce-bw.log" ]; then
  echo
  echo "reduction kernels (fraction of cudaMemcpy D2D; target >= 90% co-aligned):"
  grep -E '^  [a-z0-9]|^reduce_bw:' "$LOGDIR/reduce-bw.log" | sed 's/^/  /'
fi

# AllReduce busbw by size.
perf_table() {
  awk -v G="$GPUS" '
    $1 == "ARPERF" && $2 == "ringcc" { r[$3 " " $4] = $7; rt[$3 " " $4] = $5; n = $3; sizes[$4] = 1 }
    $1 == "ARPERF" && $2 == "nccl"   { c[$3 " " $4] = $7; ct[$3 " " $4] = $5 }
    $1 == "ARPERF" && $2 == "copy"   { copy = $6 }
    END {
      if (n == "") exit
      if (G >= 2) {
        printf "\nAllReduce busbw by size, %d ranks on %d GPUs (GB/s; ratio = libringcc / NCCL; time ratio = libringcc / NCCL):\n", n, G
        printf "  %12s %12s %12s %8s %10s\n", "bytes", "libringcc", "NCCL", "ratio", "time ratio"
        for (s in sizes) order[++m] = s + 0
        for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (order[j] < order[i]) { t = order[i]; order[i] = order[j]; order[j] = t }
        for (i = 1; i <= m; i++) {
          k = n " " order[i]
          ratio = (c[k] > 0) ? sprintf("%.2f", r[k] / c[k]) : "-"
          tratio = (ct[k] > 0) ? sprintf("%.2f", rt[k] / ct[k]) : "-"
          printf "  %12d %12.2f %12s %8s %10s\n", order[i], r[k], (k in c) ? sprintf("%.2f", c[k]) : "-", ratio, tratio
        }
        big = n " " 268435456; small = n " " 8
        if (c[big] > 0) printf "  target at 256 MiB: >= 0.80 of NCCL: %.2f %s\n", r[big] / c[big], (r[big] / c[big] >= 0.8) ? "met" : "NOT MET"
        if (ct[small] > 0) printf "  target at 8 B: <= 1.5x NCCL time: %.2fx %s\n", rt[small] / ct[small], (rt[small] / ct[small] <= 1.5) ? "met" : "NOT MET"
        printf "  (the targets are for several GPUs on NVLink; nvidia-smi topo -m above says what links these have)\n"
      }
    }' "$@"
}

if [ "$GPUS" -ge 2 ]; then
  cat "$LOGDIR/perf-ringcc.log" "$LOGDIR/perf-nccl.log" 2>/dev/null |
    perf_table /dev/stdin
else
  for n in 2 4; do
    [ -f "$LOGDIR/perf-ringcc-$n.log" ] || continue
    echo
    echo "AllReduce busbw of $n ranks sharing the GPU, against its cudaMemcpy D2D rate:"
    awk '$1 == "ARPERF" && $2 == "copy" { copy = $6 }
         $1 == "ARPERF" && $2 == "ringcc" { b[$4] = $7; s[++m] = $4 }
         END { for (i = 1; i <= m; i++)
                 printf "  %12d B  busbw %9.2f GB/s  %5.1f%% of D2D (%.2f GB/s)\n", s[i], b[s[i]],
                        copy > 0 ? 100 * b[s[i]] / copy : 0, copy }' \
      "$LOGDIR/perf-ringcc-$n.log"
  done
fi
exit $failed
