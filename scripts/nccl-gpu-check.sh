#!/usr/bin/env bash
# nccl-gpu-check.sh - libnccl.so.2 under NCCL's own clients, for a GPU day.
#
# usage: scripts/nccl-gpu-check.sh fetch [SOURCE]
#        scripts/nccl-gpu-check.sh build
#        scripts/nccl-gpu-check.sh run [--venv VENV] [--sizes "-b 8 -e 64M -f 4"]
#        scripts/nccl-gpu-check.sh            (as scripts/gpu-check.sh calls it)
#
# fetch  clones nccl-tests (SOURCE: a git URL or a local clone; default
#        https://github.com/NVIDIA/nccl-tests) into build/nccl-tests, an
#        ignored folder (never committed). Run it where the network is (GPU
#        machines may have none); the folder travels with the tree.
# build  builds nccl-tests there against this library: NCCL_HOME is
#        build/nccl-home, the toolkit's nccl.h ($CUDA_HOME/include) and
#        build/lib/libnccl.so (make lib first). Needs nvcc, no GPU.
# run    needs GPUs. For each library, ringcc's (build/lib) and the real
#        NCCL ($NCCL_REAL_LIB: the toolkit's lib64, else VENV's wheel):
#        all_reduce_perf, reduce_scatter_perf, all_gather_perf,
#        broadcast_perf, reduce_perf, alltoall_perf and sendrecv_perf on all
#        GPUs (-g N, one process) with -c 1 (nccl-tests checks every
#        result: "# Out of bounds values : 0 OK"), checking that the
#        process loaded the library meant (NCCL_DEBUG=VERSION's banner for
#        the real one, ringcc's INFO line for ours); then, with --venv, a
#        torch ProcessGroupNCCL all_reduce and a DDP step on every GPU in a
#        venv made here that sees VENV's packages, switched to this library
#        (scripts/nccl-switch.sh) and not, results checked. Prints a table
#        of busbw (GB/s) at the largest size, ringcc next to NCCL, and
#        writes the logs under build/nccl-gpu/. Exit 0 when every check
#        passed.
# With no arguments (scripts/gpu-check.sh's step nccl-dropin): run with
# sizes 8 B to 8 MiB, each program's time capped at a sixteenth of
# NCCL_GPU_CHECK_BUDGET seconds (default 40), the library of $BUILD/lib,
# logs in $NCCL_GPU_CHECK_OUT, the torch part where NCCL_GPU_CHECK_VENV
# names a venv with CUDA torch; exit 77, its first line saying why, where
# there is no GPU or nccl-tests was not built beforehand (fetch and build
# need the network and minutes: run them before the GPU's turn, the folder
# travels with the tree). The last line is always "nccl-gpu-check: ...".
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
tests=$here/build/nccl-tests
out=${NCCL_GPU_CHECK_OUT:-$here/build/nccl-gpu}
build=${BUILD:-build}
case $build in /*) ;; *) build=$here/$build ;; esac
libdir=$build/lib
per=600
usage() { sed -n '2,38p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
if [ $# -eq 0 ]; then   # scripts/gpu-check.sh's call
  if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    echo "nccl-gpu-check: skipped: no GPU here (nvidia-smi -L)"; exit 77
  fi
  if [ ! -x "$tests/build/all_reduce_perf" ]; then
    echo "nccl-gpu-check: skipped: nccl-tests not built (scripts/nccl-gpu-check.sh fetch; build, before the GPU's turn)"
    exit 77
  fi
  per=$(( ${NCCL_GPU_CHECK_BUDGET:-40} / 16 ))
  [ "$per" -ge 2 ] || per=2
  set -- run --sizes "-b 8 -e 8M -f 8" ${NCCL_GPU_CHECK_VENV:+--venv "$NCCL_GPU_CHECK_VENV"}
fi

cmd=$1; shift
case $cmd in
fetch)
  src=${1:-https://github.com/NVIDIA/nccl-tests}
  rm -rf "$tests"
  git clone -q --depth 1 "$src" "$tests" 2>/dev/null || git clone -q "$src" "$tests"
  echo "nccl-gpu-check: nccl-tests $(git -C "$tests" log -1 --format=%h) in $tests"
  ;;
build)
  [ -d "$tests/src" ] || { echo "nccl-gpu-check: no $tests (fetch first)" >&2; exit 1; }
  [ -f "$libdir/libnccl.so.2" ] || { echo "nccl-gpu-check: make lib first" >&2; exit 1; }
  home=$here/build/nccl-home
  rm -rf "$home"; mkdir -p "$home/include" "$home/lib"
  ln -s "$cuda/include/nccl.h" "$home/include/nccl.h"
  ln -s "$libdir/libnccl.so.2" "$home/lib/libnccl.so"
  ln -s "$libdir/libnccl.so.2" "$home/lib/libnccl.so.2"
  make -C "$tests" -j"${JOBS:-$(nproc)}" MPI=0 CUDA_HOME="$cuda" NCCL_HOME="$home" \
    NVCC_GENCODE="${NVCC_GENCODE:--gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90}" \
    >"$here/build/nccl-tests-build.log" 2>&1 ||
    { tail -20 "$here/build/nccl-tests-build.log"; exit 1; }
  ls "$tests/build/"*_perf | sed 's/^/nccl-gpu-check: built /'
  ;;
run)
  venv=""; sizes="-b 8 -e 64M -f 4"
  while [ $# -gt 0 ]; do
    case $1 in
    --venv) venv=$(cd "$2" && pwd); shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    *) usage ;;
    esac
  done
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  [ "$ngpu" -ge 1 ] || { echo "nccl-gpu-check: no GPU (nvidia-smi -L)" >&2; exit 1; }
  [ -x "$tests/build/all_reduce_perf" ] || "$0" build
  mkdir -p "$out"
  real=${NCCL_REAL_LIB:-}
  if [ -z "$real" ] && [ -f "$cuda/lib64/libnccl.so.2" ]; then real=$cuda/lib64; fi
  if [ -z "$real" ] && [ -n "$venv" ]; then
    real=$(ls -d "$venv"/lib/python3*/site-packages/nvidia/nccl/lib 2>/dev/null | head -1)
  fi
  fails=0
  printf '%-22s %14s %14s\n' "busbw GB/s (largest)" "ringcc" "NCCL" > "$out/table.txt"
  for t in all_reduce reduce_scatter all_gather broadcast reduce alltoall sendrecv; do
    row=$(printf '%-22s' "$t")
    for which in ringcc nccl; do
      if [ "$which" = ringcc ]; then dir=$libdir; want="RINGCC INFO"
      else dir=$real; want="NCCL version"; fi
      if [ -z "$dir" ]; then row="$row $(printf '%14s' n/a)"; continue; fi
      log=$out/${t}_${which}.log
      env LD_LIBRARY_PATH="$dir:${LD_LIBRARY_PATH:-}" NCCL_DEBUG=VERSION RINGCC_DEBUG=INFO \
        timeout "$per" "$tests/build/${t}_perf" $sizes -g "$ngpu" -c 1 >"$log" 2>&1 || true
      if ! grep -q "Out of bounds values : 0 OK" "$log" || ! grep -q "$want" "$log"; then
        echo "nccl-gpu-check: FAIL: ${t}_perf with $which ($log)"; fails=$((fails + 1))
      fi
      bw=$(awk '/^ +[0-9]+ +[0-9]+ /{v=$(NF-3)} END{print v}' "$log")
      row="$row $(printf '%14s' "${bw:-?}")"
    done
    echo "$row" >> "$out/table.txt"
  done
  if [ -n "$venv" ]; then
    ovl=$here/build/nccl-gpu-venv
    rm -rf "$ovl"
    "$venv/bin/python" -m venv --without-pip "$ovl"
    osite=$("$ovl/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    "$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$osite/ringcc-gpu-check.pth"
    cat > "$out/pg_nccl.py" <<'PY'
import os, sys
import torch, torch.distributed as dist, torch.multiprocessing as mp

def rank_main(rank, n, want, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=n)
    x = torch.full((1 << 20,), float(rank + 1), device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    assert torch.all(x == n * (n + 1) / 2).item(), x[:4]
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Linear(64, 64).cuda(), device_ids=[rank])
    torch.manual_seed(rank)
    model(torch.randn(32, 64, device="cuda")).sum().backward()
    g = model.module.weight.grad.clone()
    gs = [torch.empty_like(g) for _ in range(n)]
    dist.all_gather(gs, g)
    assert all(torch.equal(gs[0], h) for h in gs), "DDP gradients differ"
    maps = {l.split()[-1] for l in open("/proc/self/maps") if "libnccl" in l}
    assert any(want in m for m in maps), f"libnccl mapped: {maps}"
    if rank == 0:
        print("ProcessGroupNCCL all_reduce + DDP step OK on", n, "GPUs with", maps)
    dist.destroy_process_group()

if __name__ == "__main__":
    n = torch.cuda.device_count()
    mp.spawn(rank_main, args=(n, sys.argv[1], 29000 + os.getpid() % 1000), nprocs=n)
PY
    "$here/scripts/nccl-switch.sh" install "$ovl" "$libdir/libnccl.so.2"
    if RINGCC_DEBUG=WARN "$ovl/bin/python" "$out/pg_nccl.py" "$osite/nvidia/nccl/lib" >"$out/torch_ringcc.log" 2>&1; then
      tail -1 "$out/torch_ringcc.log"
    else echo "nccl-gpu-check: FAIL: torch with ringcc ($out/torch_ringcc.log)"; fails=$((fails + 1)); fi
    "$here/scripts/nccl-switch.sh" undo "$ovl"
    if "$ovl/bin/python" "$out/pg_nccl.py" "nvidia/nccl/lib" >"$out/torch_nccl.log" 2>&1; then
      tail -1 "$out/torch_nccl.log"
    else echo "nccl-gpu-check: FAIL: torch with NCCL ($out/torch_nccl.log)"; fails=$((fails + 1)); fi
    rm -rf "$ovl"
  fi
  cat "$out/table.txt"
  if [ "$fails" -eq 0 ]; then echo "nccl-gpu-check: all checks passed"; else echo "nccl-gpu-check: $fails failed"; fi
  [ "$fails" -eq 0 ]
  ;;
*) usage ;;
esac
