#!/usr/bin/env bash
# nccl-check.sh - libnccl.so.2 against the NCCL that torch ships (make nccl-check).
#
# usage: scripts/nccl-check.sh [--build DIR] [VENV]
#
# VENV (default build/venv) holds the CUDA torch wheel and nvidia-nccl; it is
# only read. Where it has no nvidia/nccl/include, the wheel is fetched with
# pip download into DIR/nccl-wheel. Four checks, each printing a summary:
#  1. symbols: every host function of the toolkit's nccl.h ($CUDA_HOME) and
#     of the wheel's, and every nccl* name libtorch_cuda.so imports, resolve
#     in DIR/lib/libnccl.so.2 with their pnccl* aliases; nothing else is
#     exported (scripts/nccl_symbols.py);
#  2. test/test_nccl.c compiled against the wheel's nccl.h, linked to
#     libnccl.so.2, run (make test runs it against the toolkit's);
#  3. the switch: a venv made here (DIR/nccl-venv) that sees VENV's packages
#     through a .pth file, scripts/nccl-switch.sh install into it, then in
#     its python: import torch works, /proc/self/maps has ringcc's
#     libnccl.so.2 and no other, torch.cuda.nccl.version() (the version
#     torch was built against) is this library's ncclGetVersion, and
#     torch.cuda.nccl.unique_id() (a call into the library) is ringcc's
#     128-byte id (magic "RCCI");
#  4. undo: the same python maps the wheel's libnccl.so.2 again.
# No GPU is needed. Exit status 0 when all pass.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build
if [ "${1:-}" = "--build" ]; then build=$(cd "$2" && pwd); shift 2; fi
case "${1:-}" in -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
venv=$(cd "${1:-$here/build/venv}" && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
lib=$build/lib/libnccl.so.2
fails=0
note() { echo "nccl-check: $*"; }
bad() { echo "nccl-check: FAIL: $*"; fails=$((fails + 1)); }

[ -f "$lib" ] || { note "$lib missing (make lib)"; exit 1; }
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
wheel_inc=$site/nvidia/nccl/include
if [ ! -f "$wheel_inc/nccl.h" ]; then
  note "no nccl.h in $venv: pip download nvidia-nccl-cu13 into $build/nccl-wheel"
  mkdir -p "$build/nccl-wheel"
  "$venv/bin/python" -m pip download -q --no-deps -d "$build/nccl-wheel" nvidia-nccl-cu13
  (cd "$build/nccl-wheel" && python3 -m zipfile -e nvidia_nccl_cu13-*.whl .)
  wheel_inc=$build/nccl-wheel/nvidia/nccl/include
fi
torch_cuda=$site/torch/lib/libtorch_cuda.so

# 1. symbols
imports=()
[ -f "$torch_cuda" ] && imports=(--imports-of "$torch_cuda")
python3 "$here/scripts/nccl_symbols.py" "$lib" "$cuda/include/nccl.h" \
  "$wheel_inc/nccl.h" "${imports[@]}" || bad "symbols"

# 2. test_nccl against the wheel's header
out=$build/test/test_nccl_wheel
mkdir -p "$(dirname "$out")"
${CC:-gcc} -std=c11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -isystem "$wheel_inc" \
  -isystem "$cuda/include" -DRCC_NCCL_SO_PATH="\"$lib\"" \
  -o "$out" "$here/test/test_nccl.c" "$lib" -Wl,-rpath,"$build/lib" \
  -lcriterion -ldl -lm -lpthread || bad "test_nccl does not build against $wheel_inc/nccl.h"
if [ -x "$out" ]; then
  ver=$(awk '/#define NCCL_(MAJOR|MINOR|PATCH) /{printf "%s%s", sep, $3; sep="."}' "$wheel_inc/nccl.h")
  note "test_nccl against the wheel's nccl.h (NCCL $ver)"
  RINGCC_CUDA_DEVICE=none "$out" -j1 || bad "test_nccl (wheel header)"
fi

# 3. and 4. the switch, in a venv of our own that sees VENV's packages
if [ ! -f "$site/torch/__init__.py" ]; then
  note "no torch in $venv: the switch is not checked"
else
  ovl=$build/nccl-venv
  rm -rf "$ovl"
  "$venv/bin/python" -m venv --without-pip "$ovl"
  osite=$("$ovl/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$site" > "$osite/ringcc-nccl-check.pth"
  probe='
import ctypes, os, sys
import torch
want = os.path.realpath(sys.argv[1])
maps = {l.split()[-1] for l in open("/proc/self/maps") if "libnccl" in l}
print("mapped:", " ".join(sorted(maps)))
if sys.argv[2] == "ringcc":
    assert maps == {want}, f"libnccl mapped: {maps}, want only {want}"
    v = ctypes.c_int()
    assert ctypes.CDLL(want).ncclGetVersion(ctypes.byref(v)) == 0
    code = v.value
    mine = (code // 10000, code // 100 % 100, code % 100)
    got = torch.cuda.nccl.version()
    assert tuple(got[:3]) == mine, f"torch.cuda.nccl.version() {got}, library {mine}"
    uid = torch.cuda.nccl.unique_id()
    assert len(uid) == 128 and uid[:4] == b"RCCI", f"unique_id {uid[:8]!r}..."
    print("torch", torch.__version__, "nccl.version()", got, "= ncclGetVersion", code,
          "unique_id: 128 bytes, magic", uid[:4])
else:
    assert maps and want not in maps, f"after undo: {maps}"
'
  "$here/scripts/nccl-switch.sh" install "$ovl" "$lib" || bad "install"
  RINGCC_CUDA_DEVICE=none "$ovl/bin/python" -c "$probe" "$osite/nvidia/nccl/lib/libnccl.so.2" ringcc ||
    bad "torch with ringcc's libnccl.so.2"
  "$here/scripts/nccl-switch.sh" undo "$ovl" || bad "undo"
  "$ovl/bin/python" -c "$probe" "$lib" nvidia || bad "torch after undo"
  rm -rf "$ovl"
fi

if [ "$fails" -eq 0 ]; then note "all checks passed"; else note "$fails failed"; fi
[ "$fails" -eq 0 ]
