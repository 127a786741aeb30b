#!/usr/bin/env bash
# install-deps.sh - make sure what libringcc's build and tests need is here.
#
#   scripts/install-deps.sh          check; install what is missing (Debian)
#   scripts/install-deps.sh --check  check only: list what is missing, exit 1
#   scripts/install-deps.sh --bench  also what make bench-compare needs
#   scripts/install-deps.sh --sanitize  also what make fuzz, fuzz-run and
#                                    valgrind-check need (CI runs them)
#   scripts/install-deps.sh --python also what make test-python needs
#   scripts/install-deps.sh --ib     also what make ib-check needs (qemu,
#                                    busybox, the rxe provider, verbs tools)
#   scripts/install-deps.sh --launchers also what make launch-check needs
#                                    (MPICH's mpiexec.hydra, Slurm)
#
# Needs: gcc, make, ar and nm (binutils), pkg-config, Criterion (header +
# library), Open MPI (mpirun, mpicc), iproute2 (ip), python3 (the layer
# check, ringcc-trace), gnuplot (gnuplot-nox: ringcc-trace --png), the verbs
# headers (libibverbs-dev: the IB plugin is built always and loads
# libibverbs at run time); with --bench also g++ and Gloo (libgloo-dev);
# with --sanitize also clang with libFuzzer (clang, libclang-rt-dev),
# valgrind and gdb (the multi-host tests print a hung rank's stacks with
# it); with --python, python3 with venv and ensurepip (python3-venv);
# with --ib also qemu-system-x86, busybox-static, cpio, ibverbs-providers
# (rxe), ibverbs-utils and perftest; with --launchers mpich (mpiexec.hydra;
# Open MPI stays the mpirun alternative) and slurm-wlm (slurmctld, slurmd,
# srun) (both groups installed without their recommendations). Silent and fast (no apt)
# when all of it is present, so make test and make bench call it every time.
# Installing: as root apt-get directly; otherwise through sudo -n when that
# works without a password; otherwise it prints the command and exits 1.
set -euo pipefail

check_only=0
bench=0
sanitize=0
python=0
ib=0
launchers=0
for arg in "$@"; do
  case "$arg" in
    --check) check_only=1 ;;
    --bench) bench=1 ;;
    --sanitize) sanitize=1 ;;
    --python) python=1 ;;
    --ib) ib=1 ;;
    --launchers) launchers=1 ;;
    -h|--help) sed -n '2,30s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "install-deps.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

CC_BIN=${CC:-gcc}
command -v "$CC_BIN" >/dev/null 2>&1 || CC_BIN=gcc

have() { command -v "$1" >/dev/null 2>&1; }

# Criterion: the header compiles and the linker finds libcriterion.
have_criterion() {
  have "$CC_BIN" || return 1
  printf '#include <criterion/criterion.h>\n' |
    "$CC_BIN" -x c -fsyntax-only - >/dev/null 2>&1 || return 1
  local lib
  lib=$("$CC_BIN" -print-file-name=libcriterion.so 2>/dev/null) || return 1
  [ "$lib" != "libcriterion.so" ] && [ -e "$lib" ]
}

# Gloo (for bench/gloo_bench.cc): the header compiles and libgloo links.
have_gloo() {
  have g++ || return 1
  printf '#include <gloo/allreduce.h>\nint main() { return 0; }\n' |
    g++ -std=c++17 -x c++ - -o /dev/null -lgloo -pthread >/dev/null 2>&1
}

# The verbs headers (transports/net_ib.c).
have_verbs_headers() {
  printf '#include <infiniband/verbs.h>\n' |
    "$CC_BIN" -x c -fsyntax-only - >/dev/null 2>&1
}

# The rxe provider of libibverbs (Soft-RoCE in make ib-check's guest).
have_rxe_provider() {
  ls /usr/lib/*/libibverbs/librxe-rdmav*.so >/dev/null 2>&1
}

# libFuzzer (for test/fuzz/): clang links a fuzz target with -fsanitize=fuzzer.
have_libfuzzer() {
  have clang || return 1
  printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return d[0] + (int)n; }\n' |
    clang -fsanitize=fuzzer -x c - -o /dev/null >/dev/null 2>&1
}

# Prints the Debian packages that are missing, one per line.
missing_packages() {
  have gcc || echo gcc
  have make || echo make
  have ar || echo binutils
  have pkg-config || echo pkg-config
  have_criterion || echo libcriterion-dev
  have mpirun || echo openmpi-bin
  have mpicc || echo libopenmpi-dev
  have ip || echo iproute2
  have nm || echo binutils
  have python3 || echo python3
  have gnuplot || echo gnuplot-nox
  have_verbs_headers || echo libibverbs-dev
  if [ "$bench" = 1 ]; then
    have g++ || echo g++
    have_gloo || echo libgloo-dev
    have gnuplot || echo gnuplot-nox
    have python3 || echo python3
  fi
  if [ "$python" = 1 ]; then
    have python3 || echo python3
    python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || echo python3-venv
  fi
  if [ "$sanitize" = 1 ]; then
    have clang || echo clang
    have_libfuzzer || echo libclang-rt-dev
    have valgrind || echo valgrind
    have gdb || echo gdb
  fi
}

# Prints the packages make ib-check (--ib) and make launch-check
# (--launchers) need that are missing: installed without recommendations.
missing_ib_packages() {
  if [ "$launchers" = 1 ]; then
    have mpiexec.hydra || echo mpich
    { have slurmctld && have slurmd && have srun; } || echo slurm-wlm
  fi
  [ "$ib" = 1 ] || return 0
  have qemu-system-x86_64 || echo qemu-system-x86
  have busybox || echo busybox-static
  have cpio || echo cpio
  have rdma || echo iproute2
  have_rxe_provider || echo ibverbs-providers
  have ibv_devinfo || echo ibverbs-utils
  have ib_write_bw || echo perftest
  have dpkg-deb || echo dpkg
}

missing=$(missing_packages | sort -u | tr '\n' ' ')
missing=${missing% }
missing_ib=$(missing_ib_packages | sort -u | tr '\n' ' ')
missing_ib=${missing_ib% }
[ -z "$missing" ] && [ -z "$missing_ib" ] && exit 0

apt_cmd="apt-get update"
[ -n "$missing" ] &&
  apt_cmd="$apt_cmd && DEBIAN_FRONTEND=noninteractive apt-get install -y $missing"
[ -n "$missing_ib" ] &&
  apt_cmd="$apt_cmd && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing_ib"
if [ "$check_only" = 1 ]; then
  echo "install-deps.sh: missing packages: $missing $missing_ib" >&2
  echo "install with: $apt_cmd" >&2
  exit 1
fi

if ! have apt-get; then
  echo "install-deps.sh: missing: $missing $missing_ib (no apt-get here: install the equivalents" \
       "with this system's package manager)" >&2
  exit 1
fi

if [ "$(id -u)" = 0 ]; then
  sudo_cmd=()
elif have sudo && sudo -n true >/dev/null 2>&1; then
  sudo_cmd=(sudo -n)
else
  echo "install-deps.sh: missing packages: $missing $missing_ib" >&2
  echo "install them as root: sudo sh -c '$apt_cmd'" >&2
  exit 1
fi

echo "install-deps.sh: installing $missing $missing_ib" >&2
# shellcheck disable=SC2086 # one word per package
"${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q </dev/null >&2
if [ -n "$missing" ]; then
  # shellcheck disable=SC2086
  "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
    $missing </dev/null >&2
fi
if [ -n "$missing_ib" ]; then
  # shellcheck disable=SC2086
  "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
    $missing_ib </dev/null >&2
fi

hash -r
still=$( (missing_packages; missing_ib_packages) | sort -u | tr '\n' ' ')
still=${still% }
if [ -n "$still" ]; then
  echo "install-deps.sh: still missing after apt-get install: $still" >&2
  exit 1
fi
echo "install-deps.sh: done" >&2
