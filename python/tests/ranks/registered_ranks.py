"""registered_ranks.py - one rank of the checks of ringcc.empty
(tests/test_registered.py):

    registered_ranks.py zero_copy   arrays from ringcc.empty: their kind,
                                    collectives on them right and run
                                    zero-copy (ringcc_comm_stats' rows),
                                    plain arrays not; the memory outliving
                                    the communicator, and dropped
    registered_ranks.py errors      bad shapes, a destroyed communicator
"""

import ctypes
import gc
import os
import sys

import numpy as np

import ringcc
from ringcc._lib import lib
from numpy_ranks import expect_equal, fail
import numpy_ranks


# ringcc_comm_stats_t (include/ringcc.h), to count the calls each algorithm
# ran.
class _Row(ctypes.Structure):
    _fields_ = [("collective", ctypes.c_char_p), ("algorithm", ctypes.c_char_p),
                ("calls", ctypes.c_uint64), ("bytes", ctypes.c_uint64),
                ("sent_bytes", ctypes.c_uint64), ("time_ns", ctypes.c_uint64),
                ("wait_ns", ctypes.c_uint64)]


class _Transport(ctypes.Structure):
    _fields_ = [("transport", ctypes.c_char_p), ("edges", ctypes.c_int),
                ("sent_bytes", ctypes.c_uint64),
                ("received_bytes", ctypes.c_uint64),
                ("wait_ns", ctypes.c_uint64)]


class _Stats(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint),
                ("edges", ctypes.c_void_p), ("edges_len", ctypes.c_int),
                ("rank", ctypes.c_int), ("nranks", ctypes.c_int),
                ("timed", ctypes.c_int), ("nedges", ctypes.c_int),
                ("calls", ctypes.c_uint64), ("bytes", ctypes.c_uint64),
                ("sent_bytes", ctypes.c_uint64),
                ("received_bytes", ctypes.c_uint64),
                ("time_ns", ctypes.c_uint64), ("wait_ns", ctypes.c_uint64),
                ("nrows", ctypes.c_int), ("rows", _Row * 32),
                ("ntransports", ctypes.c_int), ("transports", _Transport * 4)]


def zero_copy_calls(comm):
    st = _Stats(size=ctypes.sizeof(_Stats), magic=0x52435354)
    rc = lib.ringcc_comm_stats(ctypes.c_void_p(comm.handle), ctypes.byref(st))
    if rc != 0:
        fail(f"ringcc_comm_stats returned {rc}")
    return sum(st.rows[i].calls for i in range(st.nrows)
               if st.rows[i].algorithm == b"zero-copy")


def zero_copy(comm):
    n, r = comm.size, comm.rank
    a = ringcc.empty((3, 1000), np.float32, comm)
    numpy_ranks.checked += 1
    if not (isinstance(a, np.ndarray) and a.shape == (3, 1000)
            and a.dtype == np.float32 and a.flags.c_contiguous
            and a.flags.writeable and a.ctypes.data % 4096 == 0
            and not a.any()):
        fail(f"ringcc.empty: {a.shape} {a.dtype} {a.flags} at "
             f"{a.ctypes.data:#x}, zeroed {not a.any()}")
    b = ringcc.empty(3000, "int64", comm)
    c = ringcc.empty((n, 700), np.float64, comm)
    before = zero_copy_calls(comm)

    a[:] = np.arange(3000, dtype=np.float32).reshape(3, 1000) + r
    comm.allreduce(a)  # in place
    expect_equal(a, n * np.arange(3000, dtype=np.float32).reshape(3, 1000)
                 + n * (n - 1) / 2, "allreduce in place on ringcc.empty")
    b[:] = r + 1
    out = ringcc.empty(3000, np.int64, comm)
    comm.allreduce(b, out, op="max")
    expect_equal(out, np.full(3000, n, np.int64), "allreduce max, out of place")
    c[:] = np.arange(n * 700).reshape(n, 700) * (r + 1)
    got = comm.reduce_scatter(c, c[r])  # MPI's in-place form
    expect_equal(got, np.arange(r * 700, (r + 1) * 700) * n * (n + 1) / 2,
                 "reduce_scatter in place")
    c[r] = r
    comm.allgather(c[r], c)
    expect_equal(c, np.repeat(np.arange(n, dtype=np.float64), 700).reshape(
        n, 700), "allgather in place")
    after = zero_copy_calls(comm)
    numpy_ranks.checked += 1
    want = 4 if n > 1 else 0  # one rank copies, whatever its memory
    if after - before != want:
        fail(f"{after - before} calls on ringcc.empty ran zero-copy, not "
             f"{want}")

    plain = np.full(3000, r, np.int64)  # not registered: the usual path
    comm.allreduce(plain)
    expect_equal(plain, np.full(3000, n * (n - 1) // 2), "plain allreduce")
    numpy_ranks.checked += 1
    if zero_copy_calls(comm) != after:
        fail("an allreduce of a plain NumPy array ran zero-copy")

    # A view into registered memory is registered memory too.
    view = a.reshape(-1)[1000:2000]
    view[:] = 1
    comm.allreduce(view)
    expect_equal(view, np.full(1000, n, np.float32), "allreduce of a view")
    numpy_ranks.checked += 1
    if zero_copy_calls(comm) != after + (n > 1):
        fail("an allreduce of a view into ringcc.empty's memory did not run "
             "zero-copy")
    del b, out, view
    gc.collect()  # the memory freed, the registration kept until destroy
    d = ringcc.empty(64, np.int32, comm)
    d[:] = r
    comm.allreduce(d)
    expect_equal(d, np.full(64, n * (n - 1) // 2, np.int32),
                 "allreduce after arrays were dropped")
    return a  # outlives the communicator


def errors(comm):
    for shape, exc in [((-1, 3), ValueError), ("ab", TypeError),
                       ((2.5,), TypeError)]:
        numpy_ranks.checked += 1
        try:
            ringcc.empty(shape, np.float32, comm)
            fail(f"ringcc.empty({shape!r}) did not raise")
        except exc:
            pass
    z = ringcc.empty((0, 4), np.float32, comm)  # every rank registers it
    numpy_ranks.checked += 1
    if z.shape != (0, 4):
        fail(f"ringcc.empty((0, 4)) has shape {z.shape}")
    x = ringcc.empty(5, np.int64, comm)
    x[:] = 1
    comm.allreduce(x)
    expect_equal(x, np.full(5, comm.size), "allreduce after the errors")


def main():
    what = sys.argv[1]
    comm = ringcc.Comm.from_env(timeout=120, algo=ringcc.Algo.ZEROCOPY)
    kept = globals()[what](comm)
    comm.barrier()
    comm.destroy()
    if what == "zero_copy":  # still this rank's memory after destroy
        numpy_ranks.checked += 1
        if kept[1, 0] != comm.size:  # the view's allreduce
            fail(f"after destroy the array holds {kept[1, 0]}")
    if what == "errors":
        numpy_ranks.checked += 1
        try:
            ringcc.empty(4, np.float32, comm)
            fail("ringcc.empty on a destroyed communicator did not raise")
        except ValueError as e:
            if "destroyed" not in str(e):
                fail(f"ringcc.empty on a destroyed communicator: {e}")
    rank = os.environ.get("RINGCC_RANK")
    print(f"CHECKED {numpy_ranks.checked}")
    for f in numpy_ranks.failures[:40]:
        print(f"FAIL rank {rank}: {f}")
    sys.exit(1 if numpy_ranks.failures else 0)


if __name__ == "__main__":
    main()
