#!/usr/bin/env bash
# install-deps.sh - make sure what a libringcc command needs is here, and
# install (Debian/Ubuntu packages) only that.
#
#   scripts/install-deps.sh --build-only  what make, make bench and make
#                                    install need: a C compiler, make,
#                                    binutils, the verbs headers
#   scripts/install-deps.sh          what make test needs (the above, and
#                                    Criterion, Open MPI's mpirun, iproute2,
#                                    Python 3, gnuplot)
#   scripts/install-deps.sh --bench  also what make bench-compare needs (g++,
#                                    Gloo, mpicc)
#   scripts/install-deps.sh --sanitize  also what make fuzz, fuzz-run and
#                                    valgrind-check need (clang, libFuzzer,
#                                    valgrind, gdb; CI runs them)
#   scripts/install-deps.sh --python also what make test-python needs
#                                    (python3-venv)
#   scripts/install-deps.sh --ib     also what make ib-check needs (qemu,
#                                    busybox, the rxe provider, verbs tools)
#   scripts/install-deps.sh --launchers also what make launch-check needs
#                                    (MPICH's mpiexec.hydra beside Open MPI,
#                                    Slurm's slurmctld, slurmd and srun)
#   scripts/install-deps.sh --check  with any of the above: print each thing
#                                    needed, present or missing, and what
#                                    would be run; install nothing; exit 1
#                                    when something is missing
#
# RINGCC_SKIP_DEPS=1 skips the check and the install altogether (make bench,
# make test and the rest call this script first; set it where you provide
# the tools yourself, e.g. another distribution).
#
# Silent and fast (no apt) when everything is present. Otherwise it first
# prints what is missing, why each is needed, and how it will install them:
# as root with apt-get, else through sudo -n where that works without a
# password, else it prints the command for you to run and exits 1.
set -euo pipefail

if [ "${RINGCC_SKIP_DEPS:-0}" = 1 ]; then
  exit 0
fi

check_only=0 build_only=0 bench=0 sanitize=0 python=0 ib=0 launchers=0
for arg in "$@"; do
  case "$arg" in
    --check) check_only=1 ;;
    --build-only) build_only=1 ;;
    --bench) bench=1 ;;
    --sanitize) sanitize=1 ;;
    --python) python=1 ;;
    --ib) ib=1 ;;
    --launchers) launchers=1 ;;
    -h|--help) sed -n '2,36s/^# \{0,1\}//p' "$0"; exit 0 ;;
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

# The verbs headers (transports/net_ib/; the plugin loads libibverbs only
# at run time).
have_verbs_headers() {
  have "$CC_BIN" || return 1
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

have_slurm() { have slurmctld && have slurmd && have srun; }

# Open MPI's headers (bench/mpi_bench.c): openmpi-bin brings the mpicc
# wrapper without them, so its presence says nothing.
have_mpi_headers() {
  have mpicc || return 1
  printf '#include <mpi.h>\n' | mpicc -x c -fsyntax-only - >/dev/null 2>&1
}

have_venv() { have python3 && python3 -c 'import ensurepip, venv' >/dev/null 2>&1; }

# What the chosen commands need, one "PACKAGE|TEST|WHY" per line (TEST is a
# command that succeeds when it is present). --ib and --launchers packages
# are installed without their recommendations (the "ib" mark).
needs() {
  echo "gcc|have gcc|the C compiler (every build)"
  echo "make|have make|runs the build"
  echo "binutils|have ar|ar and nm: the static library, the layer check"
  echo "libibverbs-dev|have_verbs_headers|the verbs headers: the IB plugin is always built"
  [ "$build_only" = 1 ] && [ "$bench$sanitize$python$ib$launchers" = 00000 ] && return 0
  echo "libcriterion-dev|have_criterion|Criterion, the test framework (make test)"
  echo "openmpi-bin|have mpirun|mpirun: the tests launch ranks with it (test_launch)"
  echo "iproute2|have ip|ip and tc: network namespaces of the multi-host tests (as root)"
  echo "python3|have python3|scripts/check-layers.py (make test), ringcc-trace"
  echo "gnuplot-nox|have gnuplot|ringcc-trace --png (test_trace)"
  if [ "$bench" = 1 ]; then
    echo "g++|have g++|bench/gloo_bench.cc (make bench-compare)"
    echo "libopenmpi-dev|have_mpi_headers|mpi.h: bench/mpi_bench.c (make bench-compare)"
    echo "libgloo-dev|have_gloo|Gloo, the comparison of make bench-compare"
  fi
  if [ "$python" = 1 ]; then
    echo "python3-venv|have_venv|the venv of make test-python"
  fi
  if [ "$sanitize" = 1 ]; then
    echo "clang|have clang|make fuzz (clang's libFuzzer build)"
    echo "libclang-rt-dev|have_libfuzzer|libFuzzer's runtime (make fuzz)"
    echo "valgrind|have valgrind|make valgrind-check"
    echo "gdb|have gdb|a hung rank's stacks in the multi-host tests"
  fi
  if [ "$ib" = 1 ]; then
    echo "qemu-system-x86|have qemu-system-x86_64|ib|the guest of make ib-check"
    echo "busybox-static|have busybox|ib|the guest's userland"
    echo "cpio|have cpio|ib|the guest's initramfs"
    echo "iproute2|have rdma|ib|rdma link add (Soft-RoCE)"
    echo "ibverbs-providers|have_rxe_provider|ib|the rxe provider"
    echo "ibverbs-utils|have ibv_devinfo|ib|ibv_devinfo in the guest"
    echo "perftest|have ib_write_bw|ib|ib_write_bw, the verbs baseline"
    echo "dpkg|have dpkg-deb|ib|unpacks the guest's packages"
  fi
  if [ "$launchers" = 1 ]; then
    echo "mpich|have mpiexec.hydra|ib|MPICH's hydra launcher (make launch-check)"
    echo "slurm-wlm|have_slurm|ib|a one-node Slurm: slurmctld, slurmd, srun (make launch-check)"
  fi
}

# Sorts the needs into present and missing (plain and --no-install-recommends).
missing=() missing_ib=() report=()
while IFS='|' read -r pkg test a b; do
  ib_pkg=0 why=$a
  if [ "$a" = ib ]; then ib_pkg=1 why=$b; fi
  # shellcheck disable=SC2086 # TEST is a command and its argument
  if $test >/dev/null 2>&1; then
    report+=("  present  $(printf '%-18s' "$pkg") $why")
  else
    report+=("  MISSING  $(printf '%-18s' "$pkg") $why")
    if [ "$ib_pkg" = 1 ]; then missing_ib+=("$pkg"); else missing+=("$pkg"); fi
  fi
done < <(needs)
# one package may serve several needs
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sed '/^$/d' | sort -u)
mapfile -t missing_ib < <(printf '%s\n' "${missing_ib[@]}" | sed '/^$/d' | sort -u)

for_what="make test"
[ "$build_only" = 1 ] && for_what="the build and make bench"
extras=""
[ "$bench" = 1 ] && extras="$extras bench-compare"
[ "$python" = 1 ] && extras="$extras test-python"
[ "$sanitize" = 1 ] && extras="$extras fuzz/valgrind-check"
[ "$ib" = 1 ] && extras="$extras ib-check"
[ "$launchers" = 1 ] && extras="$extras launch-check"
[ -n "$extras" ] && for_what="$for_what (and${extras})"

apt_cmd="apt-get update"
[ "${#missing[@]}" -gt 0 ] &&
  apt_cmd="$apt_cmd && apt-get install -y ${missing[*]}"
[ "${#missing_ib[@]}" -gt 0 ] &&
  apt_cmd="$apt_cmd && apt-get install -y --no-install-recommends ${missing_ib[*]}"

if [ "$check_only" = 1 ]; then
  echo "install-deps.sh: needed for $for_what:"
  printf '%s\n' "${report[@]}"
  if [ "${#missing[@]}" -eq 0 ] && [ "${#missing_ib[@]}" -eq 0 ]; then
    echo "install-deps.sh: nothing to install"
    exit 0
  fi
  echo "install-deps.sh: would run (as root): $apt_cmd"
  exit 1
fi

[ "${#missing[@]}" -eq 0 ] && [ "${#missing_ib[@]}" -eq 0 ] && exit 0

echo "install-deps.sh: missing here, needed for $for_what:" >&2
printf '%s\n' "${report[@]}" | grep MISSING >&2
if ! have apt-get; then
  echo "install-deps.sh: no apt-get here: install the equivalents with this" \
       "system's package manager, then run again (or set RINGCC_SKIP_DEPS=1)" >&2
  exit 1
fi
if [ "$(id -u)" = 0 ]; then
  sudo_cmd=()
  how="as root"
elif have sudo && sudo -n true >/dev/null 2>&1; then
  sudo_cmd=(sudo -n)
  how="through sudo -n"
else
  echo "install-deps.sh: not root and no password-less sudo; run this, then" \
       "make again:" >&2
  echo "  sudo sh -c '$apt_cmd'" >&2
  exit 1
fi
echo "install-deps.sh: installing $how: $apt_cmd" >&2

"${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q </dev/null >&2
if [ "${#missing[@]}" -gt 0 ]; then
  "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
    "${missing[@]}" </dev/null >&2
fi
if [ "${#missing_ib[@]}" -gt 0 ]; then
  "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
    "${missing_ib[@]}" </dev/null >&2
fi

hash -r
still=()
while IFS='|' read -r pkg test _; do
  # shellcheck disable=SC2086
  $test >/dev/null 2>&1 || still+=("$pkg")
done < <(needs)
if [ "${#still[@]}" -gt 0 ]; then
  echo "install-deps.sh: still missing after apt-get install: ${still[*]}" >&2
  exit 1
fi
echo "install-deps.sh: done" >&2
