"""api_ranks.py - one rank of the NumPy-layer checks other than the
collective matrix (tests/test_numpy.py):

    api_ranks.py bad_args     every bad argument raises, naming it, before
                              anything is sent; the communicator keeps working
    api_ranks.py errors       library failures raise RingccError with the
                              code and ringcc_comm_last_error's message
    api_ranks.py gil          another thread computes while one waits in a
                              collective
    api_ranks.py comms        split, split_type, unique-id init, context
                              manager, destroy
    api_ranks.py buffers      bytearray, array.array, memoryview, read-only
                              inputs, DLPack (torch) tensors
"""

import array
import os
import sys
import threading
import time

import numpy as np

import ringcc
from numpy_ranks import checked, expect_equal, fail, failures  # noqa: F401
import numpy_ranks


def expect_raises(exc_type, words, fn, what):
    numpy_ranks.checked += 1
    try:
        fn()
    except exc_type as e:
        for w in words:
            if w not in str(e):
                fail(f"{what}: message does not say {w!r}: {e}")
        return e
    except Exception as e:  # noqa: BLE001 - the wrong exception is a failure
        fail(f"{what}: raised {type(e).__name__} ({e}), expected "
             f"{exc_type.__name__}")
        return None
    fail(f"{what}: did not raise")
    return None


def sum_works(comm, what):
    """A good allreduce right after: nothing was left half-sent."""
    x = np.full(5, comm.rank + 1, np.int64)
    comm.allreduce(x)
    expect_equal(x, np.full(5, comm.size * (comm.size + 1) // 2),
                 f"allreduce after {what}")


def bad_args(comm):
    n, r = comm.size, comm.rank
    f4, f8 = np.zeros(4, np.float32), np.zeros(8, np.float32)
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    strided = np.zeros((4, 2), np.float32)[:, 0]
    cases = [
        (TypeError, ["'sendbuf'", "complex64"],
         lambda: comm.allreduce(np.zeros(4, np.complex64)), "complex dtype"),
        (TypeError, ["'sendbuf'", "bool"],
         lambda: comm.allreduce(np.zeros(4, bool)), "bool dtype"),
        (TypeError, ["'recvbuf'", "float64", "float32"],
         lambda: comm.allreduce(f4, np.zeros(4)), "dtype mismatch"),
        (ValueError, ["'recvbuf'", "8", "4"],
         lambda: comm.allreduce(f4, np.zeros(8, np.float32)), "wrong shape"),
        (ValueError, ["'sendbuf'", "C-contiguous"],
         lambda: comm.allreduce(strided, f4), "non-contiguous input"),
        (ValueError, ["'recvbuf'", "read-only"],
         lambda: comm.allreduce(f4, ro), "read-only output"),
        (ValueError, ["'sendbuf'", "read-only"],
         lambda: comm.allreduce(ro), "read-only in-place buffer"),
        (ValueError, ["'op'"],
         lambda: comm.allreduce(f4, op="xor"), "unknown op name"),
        (ValueError, ["'op'"], lambda: comm.allreduce(f4, op=17), "bad op"),
        (TypeError, ["'sendbuf'", "not a buffer"],
         lambda: comm.allreduce([1.0, 2.0]), "a list"),
        (TypeError, ["'recvbuf'", "IN_PLACE"],
         lambda: comm.allreduce(ringcc.IN_PLACE), "IN_PLACE alone"),
        (ValueError, ["'sendbuf'", str(n)],
         lambda: comm.reduce_scatter(np.zeros(4 * n + 1, np.float32), f4),
         "reduce_scatter sizes"),
        (ValueError, ["'recvbuf'"],
         lambda: comm.allgather(f4, np.zeros(4 * n + 1, np.float32)),
         "allgather sizes"),
        (ValueError, ["'root'", str(n)],
         lambda: comm.bcast(f4, root=n), "root out of range"),
        (ValueError, ["'root'"], lambda: comm.reduce(f4, f4, root=-1),
         "negative root"),
        (ValueError, ["'peer'"], lambda: comm.send(f4, n), "peer range"),
        (ValueError, ["'peer'", "this rank"], lambda: comm.recv(f4, r),
         "peer is self"),
        (TypeError, ["'root'", "integer"], lambda: comm.bcast(f4, root=1.5),
         "float root"),
        (ValueError, ["'sendbuf'", "immutable"],
         lambda: comm.allreduce(b"12345678"), "bytes in place"),
    ]
    if n > 1:
        cases.append((ValueError, ["'buf'", "read-only"],
                      lambda: comm.recv(ro, (r + 1) % n), "recv into read-only"))
        cases.append((ValueError, ["'recvbuf'", str(n)],
                      lambda: comm.alltoall(f4, np.zeros(4 * n + 1, np.float32))
                      if 4 % n else comm.alltoall(np.zeros(n + 1, np.float32)),
                      "alltoall sizes"))
        root = (r + 1) % n
        cases.append((ValueError, ["IN_PLACE", "root"],
                      lambda: comm.reduce(ringcc.IN_PLACE, f4, root=root),
                      "IN_PLACE reduce off the root"))
    for exc, words, fn, what in cases:
        expect_raises(exc, words, fn, what)
    sum_works(comm, "bad arguments on every rank")
    # One rank alone makes each bad call: had it sent anything, the good
    # allreduce that follows would not add up.
    for i, (exc, words, fn, what) in enumerate(cases):
        if i % n == r:
            expect_raises(exc, words, fn, what + " (one rank)")
    sum_works(comm, "bad arguments on one rank at a time")
    x = np.arange(4, dtype=np.float32)
    expect_equal(comm.allreduce(x, op=ringcc.MAX), np.arange(4),
                 "op by constant")
    expect_equal(comm.allreduce(x, op="MIN"), np.arange(4), "op by name")


def errors(comm):
    n, r = comm.size, comm.rank
    e = expect_raises(ringcc.RingccError, ["malformed"],
                      lambda: ringcc.Comm(2, bytes(128), 0), "garbage id")
    if e is not None and e.code != ringcc.Result.ERR_INVALID_ARGUMENT:
        fail(f"garbage id: code {e.code!r}")
    if e is not None and "malformed" not in e.message:
        fail(f"garbage id: .message is {e.message!r}")
    expect_raises(TypeError, ["uid"], lambda: ringcc.Comm(2, "id", 0),
                  "uid of the wrong type")
    if n < 2:
        return
    # A timeout: rank 0 waits in an allreduce nobody else joins.
    sub = comm.split(0, 0)
    sub2 = ringcc.Comm(n, ringcc.UniqueId(_shared_uid(comm)), r, timeout=1.0)
    if r == 0:
        start = time.monotonic()
        e = expect_raises(ringcc.RingccError, ["allreduce"],
                          lambda: sub2.allreduce(np.zeros(4, np.float32)),
                          "allreduce nobody joins")
        took = time.monotonic() - start
        if e is not None:
            if e.code != ringcc.Result.ERR_TIMEOUT:
                fail(f"timeout: code {e.code!r}, expected ERR_TIMEOUT: {e}")
            if not e.message or e.message not in str(e):
                fail(f"timeout: the exception does not carry the library's "
                     f"message: {e}")
        if not 0.8 < took < 10:
            fail(f"timeout after {took:.2f} s with a 1 s deadline")
        # The communicator says so on the next call too.
        expect_raises(ringcc.RingccError, [],
                      lambda: sub2.allreduce(np.zeros(4, np.float32)),
                      "call after a failure")
    sub2.abort()
    sub.barrier()  # the others wait here until rank 0 timed out
    sum_works(sub, "a timeout on another communicator")
    sub.destroy()


def _shared_uid(comm):
    """Rank 0 makes a unique id and broadcasts its bytes."""
    buf = np.zeros(128, np.uint8)
    if comm.rank == 0:
        buf[:] = np.frombuffer(bytes(ringcc.get_unique_id()), np.uint8)
    comm.bcast(buf, 0)
    return buf.tobytes()


def gil(comm):
    """Rank 1 joins 1 s late; meanwhile rank 0's main thread must run."""
    n, r = comm.size, comm.rank
    if n < 2:
        return
    x = np.ones(1024, np.float32)
    if r != 0:
        time.sleep(1.0)
        comm.allreduce(x)
        return
    done = threading.Event()

    def collective():
        comm.allreduce(x)
        done.set()
    t = threading.Thread(target=collective)
    start = time.monotonic()
    t.start()
    spins = 0
    while not done.is_set():
        spins += 1  # pure Python: needs the GIL
    t.join()
    took = time.monotonic() - start
    numpy_ranks.checked += 1
    if took < 0.8:
        fail(f"the allreduce returned after {took:.2f} s, before rank 1 "
             "joined")
    if spins < 100000:
        fail(f"the main thread ran {spins} loop iterations in {took:.2f} s "
             "while another thread waited in a collective: the GIL was held")
    expect_equal(x, np.full(1024, n), "allreduce from a thread")
    print(f"GIL: {spins} iterations in {took:.2f} s beside the collective")


def comms(comm):
    n, r = comm.size, comm.rank
    # split: even and odd ranks, ordered by descending rank.
    sub = comm.split(r % 2, key=-r)
    members = [q for q in range(n) if q % 2 == r % 2]
    if sub.size != len(members):
        fail(f"split: size {sub.size}, expected {len(members)}")
    want_rank = sorted(members, reverse=True).index(r)
    if sub.rank != want_rank:
        fail(f"split: rank {sub.rank}, expected {want_rank}")
    x = np.array([r], np.int64)
    sub.allreduce(x)
    expect_equal(x, [sum(members)], "allreduce on a split communicator")
    sub.destroy()
    sub.destroy()  # idempotent
    expect_raises(ValueError, ["destroyed"], lambda: sub.allreduce(x),
                  "use after destroy")
    none = comm.split(None if r == 0 else 1)
    if r == 0 and none is not None:
        fail("split with color None did not return None")
    if none is not None:
        none.destroy()
    with comm.split_type(ringcc.HOST) as host:
        if host.size != n or host.rank != r:
            fail(f"split_type(HOST): rank {host.rank} of {host.size}, "
                 f"expected {r} of {n} (one host)")
        y = np.ones(3, np.float32)
        host.allreduce(y)
        expect_equal(y, np.full(3, n), "allreduce on split_type(HOST)")
    # get_unique_id + Comm(nranks, uid, rank), the uid passed as bytes.
    uid = _shared_uid(comm)
    # algo by a spelling the library also reads ("one-shot" is "oneshot")
    with ringcc.Comm(n, ringcc.UniqueId(uid), r, timeout=60,
                     algo="one-shot") as c2:
        if (c2.rank, c2.size) != (r, n):
            fail(f"Comm(n, uid, rank): rank {c2.rank} of {c2.size}")
        z = np.full(2, r, np.float64)
        c2.allreduce(z, op="max")
        expect_equal(z, np.full(2, n - 1), "allreduce on Comm(n, uid, rank)")
    for m in ringcc.Algo:
        if ringcc.Algo.parse(m.name.lower()) is not m:
            fail(f"Algo.parse({m.name.lower()!r}) is not {m!r}")
    for spelling, want in [("Zero_Copy", ringcc.Algo.ZEROCOPY),
                           ("ONE-SHOT", ringcc.Algo.ONESHOT)]:
        if ringcc.Algo.parse(spelling) is not want:
            fail(f"Algo.parse({spelling!r}) is not {want!r}")
    expect_raises(ValueError, ["'halving'", "oneshot"],
                  lambda: ringcc.Algo.parse("halving"), "Algo.parse of none")
    if repr(comm) != f"<ringcc.Comm rank {r} of {n}>":
        fail(f"repr: {comm!r}")
    if not isinstance(comm.report(), str):
        fail("report() did not return text")
    # revoke: later calls fail, the communicator still splits and destroys
    rv = comm.split(0, key=r)
    if rv.cuda_device < -1:
        fail(f"cuda_device is {rv.cuda_device}")
    rv.revoke()
    e = expect_raises(ringcc.RingccError, ["revoked"],
                      lambda: rv.allreduce(x), "allreduce after revoke")
    if e is not None and e.code != ringcc.Result.ERR_ABORTED:
        fail(f"allreduce after revoke: {e.code!r}, expected ERR_ABORTED")
    expect_raises(ringcc.RingccError, ["revoked already"], rv.revoke,
                  "a second revoke")
    with rv.split(0, key=-r) as again:
        y = np.full(4, r + 1, np.int64)
        again.allreduce(y)
        expect_equal(y, np.full(4, n * (n + 1) // 2),
                     "allreduce on a split of a revoked communicator")
    rv.destroy()


def buffers(comm):
    n, r = comm.size, comm.rank
    total = n * (n - 1) // 2
    b = bytearray([r] * 8)
    comm.allreduce(b)
    expect_equal(np.frombuffer(b, np.uint8), np.full(8, total), "bytearray")
    a = array.array("i", [r, 2 * r])
    comm.allreduce(a)
    expect_equal(np.array(a), [total, 2 * total], "array.array('i')")
    a = array.array("d", [r] * 3)
    out = array.array("d", [0] * 3)
    comm.allreduce(memoryview(a), out)
    expect_equal(np.array(out), np.full(3, total), "memoryview input")
    ro = np.full(4, r, np.int32)
    ro.flags.writeable = False
    out = np.zeros(4, np.int32)
    comm.allreduce(ro, out)  # a read-only input is fine
    expect_equal(out, np.full(4, total), "read-only input")
    comm.allreduce(bytes([r] * 4), out.view(np.uint8)[:4])
    expect_equal(out.view(np.uint8)[:4], np.full(4, total), "bytes input")
    two_d = np.full((3, 4), r, np.float32)
    comm.allreduce(two_d)
    expect_equal(two_d.ravel(), np.full(12, total), "2-D array")
    g = np.zeros((n, 3), np.int64)
    comm.allgather(np.full(3, r, np.int64), g)
    expect_equal(g.ravel(), np.repeat(np.arange(n), 3), "2-D recvbuf")
    try:
        import torch
    except ImportError:
        print("SKIP torch tensors (no torch)")
        return
    t = torch.full((5,), float(r), dtype=torch.float32)
    comm.allreduce(t)
    expect_equal(t.numpy(), np.full(5, total), "torch tensor (DLPack)")
    t16 = torch.full((4,), float(r), dtype=torch.bfloat16)
    comm.allreduce(t16)
    expect_equal(t16.float().numpy(), np.full(4, total), "torch bfloat16")
    col = torch.zeros(4, 2)[:, 1]
    expect_raises(ValueError, ["'sendbuf'", "contiguous"],
                  lambda: comm.allreduce(col), "strided torch tensor")
    expect_raises(TypeError, ["'sendbuf'", "complex"],
                  lambda: comm.allreduce(torch.zeros(2, dtype=torch.complex64)),
                  "complex torch tensor")
    sum_works(comm, "buffer checks")


def main(checks=None):
    """Runs the check named by argv[1] (a function of checks, a module's
    globals(); this module's by default) on a communicator from the
    environment."""
    what = sys.argv[1]
    with ringcc.Comm.from_env(timeout=120) as comm:
        (checks or globals())[what](comm)
        comm.barrier()
    rank = os.environ.get("RINGCC_RANK")
    print(f"CHECKED {numpy_ranks.checked}")
    for f in numpy_ranks.failures[:40]:
        print(f"FAIL rank {rank}: {f}")
    sys.exit(1 if numpy_ranks.failures else 0)


if __name__ == "__main__":
    main()
