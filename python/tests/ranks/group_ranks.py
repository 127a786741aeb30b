"""group_ranks.py - one rank of the groups and requests checks
(tests/test_numpy.py::test_groups):

    group_ranks.py exchange   8 MiB to and from every other rank and a
                              message to itself, each send posted first, in
                              `with ringcc.group()`; nested groups
    group_ranks.py requests   allreduces with async_op=True (three in flight,
                              waited in reverse, test() polled), a group
                              ended with async_op=True, bad arguments
"""

import time

import numpy as np

import ringcc
import numpy_ranks
from numpy_ranks import expect_equal, fail


def exchange(comm):
    n, r = comm.size, comm.rank
    count = 8 << 20 >> 2
    send = [np.arange(count, dtype=np.int32) * (n + 1) + r * n + q
            for q in range(n)]
    recv = [np.zeros(count, np.int32) for _ in range(n)]
    with ringcc.group():
        for q in range(n):
            comm.send(send[q], q)
        with ringcc.group():  # nested: the outer end runs it
            for q in range(n):
                comm.recv(recv[q], q)
    for q in range(n):
        numpy_ranks.checked += 1
        expect_equal(recv[q], np.arange(count, dtype=np.int32) * (n + 1)
                     + q * n + r, f"8 MiB from rank {q} in a group")


def requests(comm):
    n, r = comm.size, comm.rank
    xs = [np.full(300000, r + k, np.float64) for k in range(3)]
    reqs = [comm.allreduce(x, async_op=True) for x in xs]
    for k in (2, 1, 0):
        out = reqs[k].wait()
        numpy_ranks.checked += 1
        if out is not xs[k]:
            fail("wait() did not return the buffer")
        expect_equal(xs[k], np.full(300000, n * (n - 1) / 2 + n * k),
                     f"async allreduce {k}")
    y = np.full(1 << 20, r + 1, np.int64)
    req = comm.allreduce(y, async_op=True)
    polls = 0
    while not req.test():
        polls += 1
        time.sleep(0.0005)
    numpy_ranks.checked += 1
    expect_equal(y, np.full(1 << 20, n * (n + 1) // 2), "polled allreduce")
    # A whole group, non-blocking: a ring exchange and a bcast.
    a = np.full(1000, r, np.int32)
    b = np.zeros(1000, np.int32)
    c = np.full(7, r, np.int32)
    with ringcc.group(async_op=True) as g:
        comm.send(a, (r + 1) % n)
        comm.recv(b, (r - 1) % n)
        comm.bcast(c, root=0)
    g.request.wait()
    numpy_ranks.checked += 1
    expect_equal(b, np.full(1000, (r - 1) % n), "recv of an async group")
    expect_equal(c, np.zeros(7, np.int32), "bcast of an async group")
    # A bad argument inside a group raises there; the group goes on.
    with ringcc.group():
        try:
            comm.send(a, n)
            fail("send to rank n in a group did not raise")
        except ValueError:
            numpy_ranks.checked += 1
        comm.send(a, r)
        comm.recv(b, r)
    expect_equal(b, a, "send to oneself in a group")
    rc = ringcc._lib.lib.ringcc_group_end()
    if rc != ringcc.Result.ERR_INVALID_USAGE:
        fail(f"ringcc_group_end without start returned {rc}")


if __name__ == "__main__":
    import api_ranks
    api_ranks.main(globals())
