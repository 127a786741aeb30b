#!/usr/bin/env bash
# nccl-switch.sh - make a Python venv's CUDA torch load libringcc's
# libnccl.so.2 instead of the nvidia-nccl wheel's, and undo it.
#
# usage: scripts/nccl-switch.sh install VENV [LIB]
#        scripts/nccl-switch.sh undo VENV
#        scripts/nccl-switch.sh status VENV
#
# torch does not follow LD_PRELOAD for NCCL: torch/__init__.py preloads the
# first nvidia/nccl/lib/libnccl.so.* it finds on sys.path, by path. So the
# switch is a file in that place: install moves the wheel's libnccl.so.2
# aside (libnccl.so.2.nvidia, a rename: the file itself is never written)
# and copies LIB (default build/lib/libnccl.so.2) there; in a venv without
# nvidia/nccl/lib it creates the folder, which torch then finds first when
# the venv's own site-packages comes first on sys.path. undo puts back what
# was there (and removes what install created). Exit status 0 on success.
set -euo pipefail

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 2 ] || usage
action=$1 venv=$2
here=$(cd "$(dirname "$0")/.." && pwd)
lib=${3:-$here/build/lib/libnccl.so.2}
py=$venv/bin/python
[ -x "$py" ] || { echo "nccl-switch: $venv is not a venv (no bin/python)" >&2; exit 2; }
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
dir=$site/nvidia/nccl/lib
target=$dir/libnccl.so.2
saved=$target.nvidia
made=$dir/.made-by-ringcc   # install created the folder

case $action in
install)
  [ -f "$lib" ] || { echo "nccl-switch: $lib not found (run make)" >&2; exit 1; }
  [ "$(nm -D --defined-only "$lib" | grep -c ' ncclCommInitRank$')" = 1 ] ||
    { echo "nccl-switch: $lib does not export ncclCommInitRank" >&2; exit 1; }
  if [ -e "$saved" ] || [ -e "$made" ]; then
    echo "nccl-switch: already installed in $venv (undo first)" >&2; exit 1
  fi
  if [ -d "$dir" ]; then
    [ -e "$target" ] && mv "$target" "$saved"
  else
    mkdir -p "$dir"
    : > "$made"
  fi
  cp "$lib" "$target.tmp.$$"
  mv "$target.tmp.$$" "$target"
  echo "nccl-switch: $target is libringcc's ($(basename "$lib"))"
  ;;
undo)
  if [ -e "$saved" ]; then
    rm -f "$target"
    mv "$saved" "$target"
    echo "nccl-switch: $target is the wheel's again"
  elif [ -e "$made" ]; then
    rm -f "$target" "$made"
    rmdir "$dir" "$site/nvidia/nccl" "$site/nvidia" 2>/dev/null || true
    echo "nccl-switch: removed $dir"
  else
    echo "nccl-switch: nothing installed in $venv" >&2; exit 1
  fi
  ;;
status)
  if [ -e "$saved" ] || [ -e "$made" ]; then echo "ringcc"; else echo "nvidia"; fi
  ;;
*) usage ;;
esac
