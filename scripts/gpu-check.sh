#!/usr/bin/env bash
# gpu-check.sh - the checks of the CUDA support that need a GPU (make gpu-check).
#
# On a machine without a GPU it says so and exits 77 (skipped). Otherwise, in
# at most GPU_CHECK_BUDGET seconds (default 480), every step under `timeout`:
#   1. build: make CUDA=1 gpu-tests (library, tools, test/gpu programs)
#   2. the device-buffer suite (test/gpu/gpu_suite.c): every collective,
#      datatype and op, several counts up to 256 MiB, in and out of place,
#      checked element by element on the host:
#        1, 2 and 4 ranks as threads sharing the GPU (P2P FIFOs in GPU memory)
#        2 ranks with RINGCC_P2P_DISABLE=1 (staged through pinned shared memory)
#        2 ranks with RINGCC_SHM_DISABLE=1 (staged through the network proxy)
#        2 and 4 ranks as processes (CUDA IPC; the GPU time-slices between
#        the processes' kernels, so these use the quick matrix)
#      plus timeouts and abort under a waiting kernel (--faults)
#   3. the reduction kernels' throughput against cudaMemcpy D2D (target 90%)
#   4. ringcc-bench -G (device buffers), allreduce 8 B to 1 GiB, 2 and 4 ranks
#      (processes: time-sliced on one GPU; the numbers show the protocol's
#      cost there, not NVLink bandwidth)
#   5. where an RDMA port is ACTIVE too: the suite over NET/IB
#      (RINGCC_SHM_DISABLE=1 RINGCC_NET=IB) with GPUDirect RDMA where the
#      plugin can register GPU memory (the log says which path each device
#      edge took), then with RINGCC_NET_GDR_DISABLE=1 (staged); skipped
#      without one
# and prints a table of the steps last. Exit status: 0 when every step
# passed, 1 otherwise, 77 without a GPU.
set -u
cd "$(dirname "$0")/.." || exit 1

BUILD=${BUILD:-build}
MAKE=${MAKE:-make}
BUDGET=${GPU_CHECK_BUDGET:-480}
LOGDIR=$BUILD/gpu/logs
START=$(date +%s)

if ! { nvidia-smi -L 2>/dev/null | grep -q '^GPU'; } &&
   ! ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
  echo "gpu-check: no GPU on this machine (nvidia-smi lists none, no" \
       "/dev/nvidia*): skipped; see docs/cuda.md"
  exit 77
fi

names=() results=() times=() notes=()
failed=0

left() { echo $(( BUDGET - ($(date +%s) - START) )); }

# step NAME SECONDS COMMAND...: runs COMMAND under timeout (capped
# by what is left of the budget), output to the terminal and LOGDIR/NAME.log.
step() {
  local name=$1 secs=$2 l rc t0 t
  shift 2
  l=$(left)
  (( secs > l - 5 )) && secs=$(( l - 5 ))
  if (( secs < 10 )); then
    names+=("$name") results+=("SKIP") times+=("-") notes+=("out of time")
    failed=1
    return
  fi
  echo "==> $name (timeout ${secs}s): $*"
  t0=$(date +%s)
  timeout -k 10 "$secs" "$@" 2>&1 | tee "$LOGDIR/$name.log"
  rc=${PIPESTATUS[0]}
  t=$(( $(date +%s) - t0 ))
  local res=PASS note=""
  if (( rc == 124 || rc == 137 )); then res=TIMEOUT; note="after ${secs}s"
  elif (( rc == 77 )); then res=SKIP; note="no GPU"
  elif (( rc != 0 )); then res=FAIL; note="exit $rc"; fi
  [[ $res == PASS ]] || failed=1
  # the summary line the program printed, if any
  local summary
  summary=$(grep -E '^(\[0\] )?(gpu_suite:|reduce_bw: [0-9]|# Avg bus)' \
            "$LOGDIR/$name.log" | tail -1 | sed 's/^\[0\] //')
  names+=("$name") results+=("$res") times+=("${t}s")
  notes+=("${note:+$note; }${summary}")
  echo "<== $res $name (${t}s)"
}

mkdir -p "$LOGDIR"
nvidia-smi -L 2>/dev/null || true

# The ranks' shared-memory FIFOs must fit /dev/shm (a container's default is
# 64 MiB): pick the slot size for the process runs from what is free.
shm_kb=$(df -k --output=avail /dev/shm 2>/dev/null | tail -1 | tr -d ' ')
shm_kb=${shm_kb:-65536}
chunk=1048576
# 4 ranks x 4 ranks x 4 kinds x 8 slots: 128 chunks, within half of /dev/shm
while (( chunk > 65536 && 128 * chunk / 1024 > shm_kb / 2 )); do
  chunk=$(( chunk / 2 ))
done
echo "gpu-check: /dev/shm has ${shm_kb} KiB free; RINGCC_CHUNK_BYTES=$chunk for the process runs"

step build 120 "$MAKE" --no-print-directory CUDA=1 BUILD="$BUILD" \
  -j"$(nproc)" gpu-tests
if [[ ${results[0]} != PASS ]]; then
  echo "gpu-check: the build failed; nothing else can run"
else
  G=$BUILD/gpu
  RUN=$BUILD/bin/ringcc-run
  export RINGCC_TIMEOUT_MS=${RINGCC_TIMEOUT_MS:-60000}
  step suite-threads-1 30 "$G/gpu_suite" --threads 1
  step suite-threads-2 45 "$G/gpu_suite" --threads 2 --big --faults
  step suite-threads-4 60 "$G/gpu_suite" --threads 4 --big --faults
  step suite-shm-staged-2 25 env RINGCC_P2P_DISABLE=1 \
    "$G/gpu_suite" --threads 2 --quick
  step suite-net-staged-2 25 env RINGCC_SHM_DISABLE=1 \
    "$G/gpu_suite" --threads 2 --quick
  step suite-procs-2 30 env RINGCC_CHUNK_BYTES="$chunk" \
    "$RUN" -np 2 "$G/gpu_suite" --quick
  step suite-procs-4 30 env RINGCC_CHUNK_BYTES="$chunk" \
    "$RUN" -np 4 "$G/gpu_suite" --quick
  step reduce-bw 25 "$G/reduce_bw" 256
  # -C 0: the suite checks results; here only the time counts
  step bench-G-2 45 env RINGCC_CHUNK_BYTES="$chunk" \
    "$RUN" -np 2 "$BUILD/bin/ringcc-bench" -G -b 8 -e 1G -f 8 -n 3 -w 1 -C 0
  step bench-G-4 45 env RINGCC_CHUNK_BYTES="$chunk" \
    "$RUN" -np 4 "$BUILD/bin/ringcc-bench" -G -b 8 -e 1G -f 8 -n 3 -w 1 -C 0
  if grep -qs ACTIVE /sys/class/infiniband/*/ports/*/state; then
    step suite-net-ib-gdr-2 40 env RINGCC_SHM_DISABLE=1 RINGCC_NET=IB \
      RINGCC_DEBUG=INFO "$G/gpu_suite" --threads 2 --quick
    paths=$(grep -o 'device edge [0-9]* -> [0-9]* via NET/IB/[^ ]*' \
            "$LOGDIR/suite-net-ib-gdr-2.log" | sed 's/.* via //' | sort -u |
            tr '\n' ' ')
    notes[${#notes[@]}-1]="${notes[${#notes[@]}-1]}; edges: ${paths:-none logged}"
    step suite-net-ib-staged-2 40 env RINGCC_SHM_DISABLE=1 RINGCC_NET=IB \
      RINGCC_NET_GDR_DISABLE=1 "$G/gpu_suite" --threads 2 --quick
    step suite-net-ib-procs-2 40 env RINGCC_SHM_DISABLE=1 RINGCC_NET=IB \
      RINGCC_CHUNK_BYTES="$chunk" "$RUN" -np 2 "$G/gpu_suite" --quick
  else
    names+=(suite-net-ib) results+=(SKIP) times+=(-)
    notes+=("no ACTIVE RDMA port (/sys/class/infiniband): GPUDirect RDMA not run")
  fi
fi

echo
echo "gpu-check summary ($(( $(date +%s) - START ))s of ${BUDGET}s; logs in $LOGDIR):"
printf '  %-20s %-8s %6s  %s\n' step result time notes
for i in "${!names[@]}"; do
  printf '  %-20s %-8s %6s  %s\n' "${names[$i]}" "${results[$i]}" \
    "${times[$i]}" "${notes[$i]}"
done
exit $failed
