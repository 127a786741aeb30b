#!/bin/sh
# soak.sh - a long run of random collectives that watches for leaks.
#
#   scripts/soak.sh [--tcp] [--np N] [--calls N] [--every N] [--seed S]
#                   [--max-count N] [--mixed]
#
# Builds the library and tools (make), builds test/soak/soak.c against
# build/lib/libringcc.so into build/soak/soak, and runs it under ringcc-run:
# N ranks (default 4) make --calls random collectives (default 10000; kind,
# size, datatype, op and root drawn alike on every rank from --seed), every
# result checked element by element. Every --every calls (default 1000) each
# rank samples its VmRSS (/proc/PID/status), open fds (/proc/PID/fd) and
# threads; rank 0 prints a table and a verdict: PASS when every result was
# exact, fds and threads did not grow after the first sample (the warm-up)
# and RSS grew by at most 2 MiB over the second half of the run (memory
# first touched late, such as network FIFO slots that a message first passes
# through, levels off; a leak does not), with the mappings of
# /proc/self/smaps that grew most over that half at the rank that grew most
# (the heap and malloc's arenas, or the FIFOs). Over shared memory unless --tcp
# (RINGCC_SHM_DISABLE=1: TCP between the local ranks). --mixed draws also
# AllToAllv, AllGatherv, Gather, Scatter, groups of send/recv and requests
# (test/soak/random_coll.h), one stream mixing every executor.
#
# Not part of `make test`: it takes minutes. Exit status: 0 on PASS, else
# non-zero.
set -eu

cd "$(dirname "$0")/.."
np=4 calls=10000 every=1000 seed=1 max_count=65536 tcp=0 mixed=0
while [ $# -gt 0 ]; do
  case "$1" in
    --tcp) tcp=1; shift ;;
    --np) np=$2; shift 2 ;;
    --calls) calls=$2; shift 2 ;;
    --every) every=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --max-count) max_count=$2; shift 2 ;;
    --mixed) mixed=1; shift ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "soak.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

make --no-print-directory -s all >/dev/null
mkdir -p build/soak
cc=${CC:-gcc}
src="test/soak/soak.c test/harness.c"
# Against the shared library, which carries its own dependencies (the CUDA
# runtime where the build found one); the static one would need them listed.
if [ ! -x build/soak/soak ] || [ -n "$(find $src test/soak/random_coll.h \
     test/harness.h build/lib/libringcc.so -newer build/soak/soak)" ]; then
  $cc -std=c11 -O2 -g -Wall -Wextra -Werror -D_GNU_SOURCE -pthread \
    -Iinclude -iquote test -iquote test/soak -o build/soak/soak $src \
    -Lbuild/lib -lringcc -Wl,-rpath,"$(pwd)/build/lib" -lm
fi

echo "soak: $(if [ $tcp = 1 ]; then echo TCP; else echo shared memory; fi)," \
     "$(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
RINGCC_SHM_DISABLE=$tcp exec build/bin/ringcc-run -np "$np" --no-prefix build/soak/soak \
  -n "$calls" -e "$every" -s "$seed" -m "$max_count" -x "$mixed"
