#!/usr/bin/env bash
# ib-check.sh - the verbs plugin (transports/net_ib/) on real verbs: Soft-RoCE
# (rdma_rxe) in a qemu VM. `make ib-check` runs it; .ci/run too.
#
# From a fresh machine: installs what it needs (scripts/install-deps.sh --ib),
# downloads the one kernel package linux-image-amd64 depends on (once: kept in
# $IBVM/deb), builds the library, tools and tests without CUDA in
# $IBVM/host, packs a busybox initramfs with the kernel modules RoCE needs,
# the programs under test and their libraries, boots it under qemu (software
# emulation; IB_CHECK_ACCEL=kvm to try KVM) and, in the guest, brings up a
# dummy interface with an address and rxe0 on it, then runs:
#   1. ibv_devinfo, and ibv_rc_pingpong between two processes (verbs work)
#   2. with RINGCC_SHM_DISABLE=1 RINGCC_NET=IB: build/test/test_net_ib (the
#      unit tests, the fake-verbs error paths, and on rxe0 the plugin's data
#      path and every collective x datatype x op at n = 2, 3, 4, zero copy,
#      the registration cache, a rank killed mid-collective), and the TCP
#      variants of test_faults and test_collectives' transport/no_shm_big_n3,
#      and test_sharedlinks' healthy_n3, healthy_n4 and killed_1_of_3 (a
#      shrunk communicator takes over the verbs links, after a rank killed
#      mid-collective too: resynced), which then run over NET/IB
#   3. a 3-rank allreduce at RINGCC_DEBUG=INFO: the IB edges and the GID
#   4. with IB_CHECK_BENCH=1: ib_write_bw and ringcc-bench AllReduce at 1 MiB
#      and 64 MiB on rxe0 (busbw next to the link's, as a ratio)
# and prints "ib-check: N passed, N failed" (Criterion's test cases plus the
# steps above); exit status 0 only when nothing failed. The guest's console
# is kept in $IBVM/guest.log.
#
# Variables: IBVM (default build/ibvm), IB_CHECK_TIMEOUT (seconds for the
# guest, default 1500), IB_CHECK_BENCH=1, IB_CHECK_FILTER (step 2 runs only
# test_net_ib with this Criterion --filter), IB_CHECK_ACCEL (tcg; or kvm, kvm:tcg), IB_CHECK_CPUS
# (2), IB_CHECK_ONLY (a shell command run in the guest instead of the steps).
set -u
cd "$(dirname "$0")/.." || exit 1

IBVM=${IBVM:-build/ibvm}
HOST=$IBVM/host
TIMEOUT=${IB_CHECK_TIMEOUT:-1500}
CPUS=${IB_CHECK_CPUS:-2}
MAKE=${MAKE:-make}
START=$(date +%s)
MODULES="crc32_generic udp_tunnel ip6_udp_tunnel ib_core ib_uverbs rdma_rxe dummy"

say() { echo "ib-check: $*"; }
die() { echo "ib-check: $*" >&2; echo "ib-check: 0 passed, 1 failed"; exit 1; }

scripts/install-deps.sh --ib </dev/null || die "dependencies missing"
mkdir -p "$IBVM/deb"

# ---- the kernel: the one package linux-image-amd64 depends on ---------------
kernel_pkg() {
  apt-cache depends linux-image-amd64 2>/dev/null |
    awk '/Depends: linux-image-[0-9]/ { print $2; exit }'
}
pkg=$(kernel_pkg)
if [ -z "$pkg" ]; then
  apt-get update -q >/dev/null 2>&1 || true
  pkg=$(kernel_pkg)
fi
[ -n "$pkg" ] || die "apt-cache knows no linux-image-amd64 (is this Debian?)"
deb=$(ls "$IBVM/deb/${pkg}"_*.deb 2>/dev/null | head -n 1)
if [ -z "$deb" ]; then
  say "downloading $pkg (once; kept in $IBVM/deb)"
  (cd "$IBVM/deb" && apt-get download "$pkg" </dev/null >/dev/null 2>&1) ||
    die "apt-get download $pkg failed"
  deb=$(ls "$IBVM/deb/${pkg}"_*.deb | head -n 1)
fi
KDIR=$IBVM/kernel/$pkg
if [ ! -e "$KDIR/.done" ]; then
  rm -rf "$KDIR" && mkdir -p "$KDIR"
  dpkg-deb -x "$deb" "$KDIR" || die "cannot unpack $deb"
  touch "$KDIR/.done"
fi
VMLINUZ=$(ls "$KDIR"/boot/vmlinuz-* | head -n 1)
[ -f "$VMLINUZ" ] || die "no vmlinuz in $deb"

# ---- what runs in the guest: a build without CUDA ----------------------------
say "building the library, tools and tests without CUDA in $HOST"
$MAKE --no-print-directory CUDA=0 BUILD="$HOST" all "$HOST/test/test_net_ib" \
  "$HOST/test/test_faults" "$HOST/test/test_collectives" \
  "$HOST/test/test_sharedlinks" \
  >"$IBVM/build.log" 2>&1 || { tail -n 30 "$IBVM/build.log"; die "build failed"; }

# ---- the initramfs ------------------------------------------------------------
ROOT=$IBVM/root
rm -rf "$ROOT"
mkdir -p "$ROOT"/{bin,sbin,etc,proc,sys,dev,tmp,run,lib/modules,ringcc} \
  || die "cannot make $ROOT"

# add PATH [DEST]: a program or library and every library it needs.
add() {
  local src=$1 dst=${2:-$1}
  mkdir -p "$ROOT$(dirname "$dst")"
  [ "$src" -ef "$ROOT$dst" ] || cp -L "$src" "$ROOT$dst" || die "cannot copy $src"
  ldd "$src" 2>/dev/null | awk '/=> \// { print $3 } /^\t\// { print $1 }' |
    while read -r lib; do
      [ -e "$ROOT$lib" ] && continue
      mkdir -p "$ROOT$(dirname "$lib")"
      cp -L "$lib" "$ROOT$lib"
    done
}

add "$(command -v busybox)" /bin/busybox
for prog in rdma ip ibv_devinfo ibv_devices ibv_rc_pingpong ib_write_bw; do
  path=$(command -v "$prog") || die "no $prog"
  add "$path" "/bin/$prog"
done
for applet in $(busybox --list); do
  [ -e "$ROOT/bin/$applet" ] || ln -s busybox "$ROOT/bin/$applet"
done
provider=$(ls /usr/lib/*/libibverbs/librxe-rdmav*.so | head -n 1)
[ -n "$provider" ] || die "no rxe provider (rdma-core / ibverbs-providers)"
add "$provider"
mkdir -p "$ROOT/etc/libibverbs.d"
cp /etc/libibverbs.d/rxe.driver "$ROOT/etc/libibverbs.d/"
for m in $MODULES; do
  ko=$(find "$KDIR/lib/modules" -name "$m.ko" | head -n 1)
  [ -n "$ko" ] || die "module $m not in $pkg"
  cp "$ko" "$ROOT/lib/modules/"
done
for d in bin lib test examples; do
  [ -d "$HOST/$d" ] && cp -a "$HOST/$d" "$ROOT/ringcc/"
done
rm -f "$ROOT"/ringcc/lib/*.a
strip --strip-debug "$ROOT"/ringcc/*/* 2>/dev/null
for f in "$ROOT"/ringcc/bin/* "$ROOT"/ringcc/test/test_* "$ROOT"/ringcc/examples/*; do
  [ -x "$f" ] && add "$f" "${f#$ROOT}"
done
add "$(ls "$ROOT"/ringcc/lib/libringcc.so.*.*.* | head -n 1)" \
  "$(ls "$ROOT"/ringcc/lib/libringcc.so.*.*.* | head -n 1 | sed "s|^$ROOT||")"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$ROOT/etc/passwd"
printf 'root:x:0:\n' >"$ROOT/etc/group"
cp -r /etc/ld.so.conf /etc/ld.so.conf.d "$ROOT/etc/" 2>/dev/null
ldconfig -r "$ROOT" 2>/dev/null
cp scripts/ib-guest.sh "$ROOT/init"
chmod +x "$ROOT/init"
{
  echo "IB_CHECK_BENCH=${IB_CHECK_BENCH:-0}"
  echo "IB_CHECK_FILTER='${IB_CHECK_FILTER:-}'"
  echo "IB_CHECK_ONLY='${IB_CHECK_ONLY:-}'"
  echo "MODULES='$MODULES'"
} >"$ROOT/etc/ib-check.conf"
INITRD=$IBVM/initrd.cpio.gz
(cd "$ROOT" && find . | cpio -o -H newc --quiet | gzip -1) >"$INITRD" ||
  die "cannot pack the initramfs"
say "guest image: $VMLINUZ + $INITRD ($(du -h "$INITRD" | cut -f1)), prepared in $(( $(date +%s) - START ))s"

# ---- boot ---------------------------------------------------------------------
# Software emulation by default: it boots in seconds, and nested KVM (where a
# /dev/kvm is there at all) was seen to stall the guest at boot.
accel=${IB_CHECK_ACCEL:-tcg}
accel_args=()
IFS=: read -ra accels <<<"$accel"
for a in "${accels[@]}"; do accel_args+=(-accel "$a"); done
LOG=$IBVM/guest.log
say "booting ($accel, $CPUS CPUs, at most ${TIMEOUT}s); console in $LOG"
t0=$(date +%s)
timeout -k 10 "$TIMEOUT" nice -n 5 qemu-system-x86_64 "${accel_args[@]}" \
  -m 2G -smp "$CPUS" -kernel "$VMLINUZ" -initrd "$INITRD" \
  -nographic -no-reboot -nic none \
  -append "console=ttyS0 quiet loglevel=3 panic=-1" </dev/null >"$LOG" 2>&1
rc=$?
secs=$(( $(date +%s) - t0 ))
tr -d '\r' <"$LOG" | grep -v '^IBCHECK ' | sed -n '/^=== /,$p' | tail -n 400
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
  say "the guest ran out of time after ${secs}s (IB_CHECK_TIMEOUT=$TIMEOUT)"
fi
passed=$(tr -d '\r' <"$LOG" | awk '/^IBCHECK PASS / { n++ } END { print n + 0 }')
failed=$(tr -d '\r' <"$LOG" | awk '/^IBCHECK FAIL / { n++ } END { print n + 0 }')
cases=$(tr -d '\r' <"$LOG" | sed -n 's/^IBCHECK CASES passed=\([0-9]*\) failed=\([0-9]*\).*/\1 \2/p' | tail -n 1)
done_line=$(tr -d '\r' <"$LOG" | grep -c '^IBCHECK DONE')
if [ -n "$cases" ]; then
  passed=$((passed + ${cases% *}))
  failed=$((failed + ${cases#* }))
fi
if [ "$done_line" = 0 ]; then
  say "the guest did not finish its run (qemu exit $rc): see $LOG"
  failed=$((failed + 1))
fi
tr -d '\r' <"$LOG" | sed -n 's/^IBCHECK \(PASS\|FAIL\|SUITE\) /  \1 /p'
say "total $(( $(date +%s) - START ))s, guest ${secs}s"
say "$passed passed, $failed failed"
[ "$failed" = 0 ]
