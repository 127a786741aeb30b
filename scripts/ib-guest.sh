#!/bin/sh
# ib-guest.sh - /init of the ib-check guest (scripts/ib-check.sh packs it with
# busybox, the RoCE modules, the programs under test and their libraries).
# Brings up Soft-RoCE (rxe0 on a dummy interface), runs the steps, prints
# one "IBCHECK PASS|FAIL <step>" line per step, "IBCHECK CASES ..." for the
# Criterion cases, "IBCHECK DONE", and powers off.
export PATH=/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/shm /dev/pts
mount -t tmpfs tmp /tmp
mount -t tmpfs shm /dev/shm
mount -t tmpfs run /run
. /etc/ib-check.conf
hostname ibguest
echo "=== ib-check guest: Linux $(uname -r), $(nproc) CPUs, $(awk '/MemTotal/ {print $2 / 1024 " MiB"}' /proc/meminfo)"

pass() { echo "IBCHECK PASS $*"; }
fail() { echo "IBCHECK FAIL $*"; }
finish() {
  echo "IBCHECK DONE"
  sync
  poweroff -f
  sleep 5
}

# ---- Soft-RoCE ----------------------------------------------------------------
for m in $MODULES; do
  insmod "/lib/modules/$m.ko" || { fail "insmod $m"; finish; }
done
ip link set lo up
ip link add d0 type dummy
ip addr add 10.9.0.1/24 dev d0
ip link set d0 up
if ! rdma link add rxe0 type rxe netdev d0; then
  fail "rdma link add rxe0 type rxe netdev d0"
  finish
fi
i=0
while [ $i -lt 50 ] && ! ibv_devinfo -d rxe0 2>/dev/null | grep -q PORT_ACTIVE; do
  sleep 0.1
  i=$((i + 1))
done
ulimit -l unlimited
export RINGCC_BIN_DIR=/ringcc/bin

# step NAME SECONDS CMD...: runs CMD (a program or a function of this
# script) with a time limit, output on the console.
step() {
  name=$1 secs=$2
  shift 2
  echo "=== $name"
  t0=$(date +%s)
  ( "$@" ) &
  pid=$!
  ( sleep "$secs"; kill -9 $pid 2>/dev/null ) &
  watchdog=$!
  wait $pid
  rc=$?
  kill $watchdog 2>/dev/null
  wait $watchdog 2>/dev/null
  t=$(( $(date +%s) - t0 ))
  if [ $rc = 0 ]; then pass "$name (${t}s)"; else fail "$name (exit $rc, ${t}s)"; fi
  return $rc
}

# The GID rxe0 gives 10.9.0.1 under RoCE v2 (for the perftest tools).
gid_v2() {
  for t in /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/*; do
    i=${t##*/}
    if grep -q "v2" "$t" 2>/dev/null &&
       grep -q "ffff:0a09:0001" /sys/class/infiniband/rxe0/ports/1/gids/$i; then
      echo "$i"
      return
    fi
  done
  echo 1
}

if [ -n "$IB_CHECK_ONLY" ]; then
  echo "=== IB_CHECK_ONLY: $IB_CHECK_ONLY"
  sh -c "$IB_CHECK_ONLY"
  finish
fi

# ---- 1. verbs work ------------------------------------------------------------
GID=$(gid_v2)
step "ibv_devinfo rxe0" 20 sh -c 'ibv_devinfo -d rxe0 | grep -E "hca_id|state|active_mtu|link_layer"'
pingpong() {
  ibv_rc_pingpong -d rxe0 -g "$GID" -n 100 >/tmp/pp_server.log 2>&1 &
  sleep 0.5
  ibv_rc_pingpong -d rxe0 -g "$GID" -n 100 127.0.0.1
  r=$?
  wait
  return $r
}
step "ibv_rc_pingpong -g $GID" 30 pingpong

# ---- 2. the test suites on rxe0 ----------------------------------------------
# suite BINARY [FILTER]: a Criterion binary with RINGCC_SHM_DISABLE=1
# RINGCC_NET=IB; its cases count towards the totals.
CASES_PASSED=0
CASES_FAILED=0
suite() {
  bin=$1 filter=$2
  echo "=== $bin ${filter:+--filter=$filter} (RINGCC_SHM_DISABLE=1 RINGCC_NET=IB)"
  t0=$(date +%s)
  cd /ringcc/test
  if [ -n "$filter" ]; then
    RINGCC_SHM_DISABLE=1 RINGCC_NET=IB "./$bin" --jobs=1 --filter="$filter" >/tmp/t.log 2>&1
  else
    RINGCC_SHM_DISABLE=1 RINGCC_NET=IB "./$bin" --jobs=1 >/tmp/t.log 2>&1
  fi
  rc=$?
  cd /
  cat /tmp/t.log
  syn=$(grep 'Synthesis:' /tmp/t.log | tail -n 1)
  tested=$(echo "$syn" | sed -n 's/.*Tested: \([0-9]*\).*/\1/p')
  passing=$(echo "$syn" | sed -n 's/.*Passing: \([0-9]*\).*/\1/p')
  if [ -z "$tested" ]; then
    fail "$bin printed no synthesis (exit $rc)"
    return
  fi
  echo "IBCHECK SUITE $bin: $passing of $tested passed, $(grep -c '^\[SKIP\]' /tmp/t.log) skipped ($(( $(date +%s) - t0 ))s)"
  CASES_PASSED=$((CASES_PASSED + passing))
  CASES_FAILED=$((CASES_FAILED + tested - passing))
}
if [ -n "$IB_CHECK_FILTER" ]; then
  suite test_net_ib "$IB_CHECK_FILTER"
else
  suite test_net_ib
  # The TCP variants of the fault tests, and the big-piece no-shm
  # collectives (every in-place form, receives landing in the user's
  # buffers), run over NET/IB here (RINGCC_NET=IB). (The other no-shm suites
  # cover less than test_net_ib's matrix and outlast their 200 s deadline
  # under software emulation on a busy host.)
  suite test_faults '*tcp*'
  suite test_collectives 'transport/no_shm_big_n3'
  # ringcc_comm_shrink of a healthy communicator: the child takes over the
  # parent's verbs links (both destroy orders); and after a rank killed
  # mid-collective, the survivors' links resynced (RESYNC messages)
  suite test_sharedlinks 'sharedlinks/healthy_n3'
  suite test_sharedlinks 'sharedlinks/healthy_n4'
  suite test_sharedlinks 'sharedlinks/killed_1_of_3'
fi
echo "IBCHECK CASES passed=$CASES_PASSED failed=$CASES_FAILED"

# ---- 3. what RINGCC_DEBUG=INFO says about the IB edges -----------------------
info() {
  RINGCC_DEBUG=INFO RINGCC_SHM_DISABLE=1 RINGCC_NET=IB \
    /ringcc/bin/ringcc-run -np 3 --timeout 120 /ringcc/examples/allreduce \
    >/tmp/info.log 2>&1
  r=$?
  grep -E 'NET/IB|via NET|net: ' /tmp/info.log
  [ $r = 0 ] && grep -q 'via NET/IB/rxe0:1' /tmp/info.log
}
step "3-rank allreduce, RINGCC_DEBUG=INFO" 150 info

# ---- 4. bandwidth next to the link's -------------------------------------------
if [ "$IB_CHECK_BENCH" = 1 ]; then
  for size in 1048576 67108864; do
    wbw() {
      ib_write_bw -d rxe0 -x "$GID" -s "$1" -n "$2" -F >/tmp/wbw_server.log 2>&1 &
      sleep 1
      ib_write_bw -d rxe0 -x "$GID" -s "$1" -n "$2" -F 127.0.0.1
      r=$?
      wait
      return $r
    }
    n=200
    [ $size -gt 1048576 ] && n=5
    step "ib_write_bw -s $size" 240 wbw $size $n
  done
  for np in 2 3; do
    step "ringcc-bench allreduce n=$np over rxe0" 600 env RINGCC_SHM_DISABLE=1 \
      RINGCC_NET=IB /ringcc/bin/ringcc-run -np $np --timeout 580 \
      /ringcc/bin/ringcc-bench -b 1M -e 64M -f 64 -n 3 -w 1 -c 0
  done
  # The same over TCP on the same interface, for scale.
  step "ringcc-bench allreduce n=2 over TCP (d0)" 600 env RINGCC_SHM_DISABLE=1 \
    RINGCC_NET=Socket RINGCC_SOCKET_IFNAME=d0 /ringcc/bin/ringcc-run -np 2 \
    --timeout 580 /ringcc/bin/ringcc-bench -b 1M -e 64M -f 64 -n 3 -w 1 -c 0
fi
finish
