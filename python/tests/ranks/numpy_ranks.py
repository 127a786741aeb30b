"""numpy_ranks.py - one rank of a NumPy-layer test job (tests/test_numpy.py).

    numpy_ranks.py COLLECTIVE     every dtype x op x in-place form x count of
                                  COLLECTIVE against a NumPy oracle
    numpy_ranks.py CHECK          one of the other checks (bad_args, ...)

Every rank can compute every rank's input (inputs are a function of the
rank and the case), so each rank computes the exact expected result with
NumPy and compares every element. Values are small integers (products of
+-1 and +-2, sums of averages that divide exactly), so every datatype and
op has one right answer. A rank collects every mismatch, prints them and
exits 1; the launcher shows the output.
"""

import os
import sys
import time

import numpy as np

import ringcc

try:
    import ml_dtypes
    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # bfloat16 arrays need ml_dtypes
    BF16 = None

DTYPES = [np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64,
          np.float16, np.float32, np.float64]
DTYPES = [np.dtype(d) for d in DTYPES] + ([BF16] if BF16 is not None else [])
OPS = ["sum", "prod", "min", "max", "avg"]
COUNTS = [1, 7, 1031]
BIG = 262147  # float32: crosses many 64 KiB slots

failures = []
checked = 0


def fail(msg):
    failures.append(msg)


def expect_equal(got, want, what):
    global checked
    checked += 1
    got = np.asarray(got)
    want = np.asarray(want, dtype=got.dtype)
    if got.shape != want.shape:
        fail(f"{what}: shape {got.shape}, expected {want.shape}")
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    bad = np.nonzero(g != w)[0] if g.ndim else ([] if g == w else [0])
    if len(bad):
        i = bad[0]
        fail(f"{what}: {len(bad)} of {got.size} elements differ; first at "
             f"{i}: got {g.flat[i]}, expected {w.flat[i]}")


def is_signed(dtype):
    return dtype.kind in "if" or dtype == BF16


def data(dtype, op, rank, n, count, salt=0):
    """Rank `rank`'s input: small integers chosen so the op is exact."""
    idx = np.arange(count, dtype=np.int64) + 31 * salt
    if op == "prod":
        vals = np.array([1, 2, -1, -2] if is_signed(dtype) else [1, 2, 1, 2])
        x = vals[(idx * 7 + rank * 3) % 4]
    elif op == "avg" and dtype.kind != "i" and dtype.kind != "u":
        # Ranks' offsets sum to zero: the average is exactly the base.
        offsets = {1: [0], 2: [1, -1], 3: [1, -1, 0], 4: [1, -1, 2, -2]}[n]
        x = (idx * 5) % 9 - 4 + offsets[rank]
    elif is_signed(dtype):
        x = (idx * 5 + rank * 11) % 9 - 4
    else:
        x = (idx * 5 + rank * 11) % 9
    return x.astype(np.float64).astype(dtype)


def oracle(op, inputs, dtype, n):
    stack = np.stack([x.astype(np.float64) for x in inputs])
    if op == "sum":
        r = stack.sum(0)
    elif op == "prod":
        r = stack.prod(0)
    elif op == "min":
        r = stack.min(0)
    elif op == "max":
        r = stack.max(0)
    else:
        s = stack.sum(0)
        r = np.trunc(s / n) if dtype.kind in "iu" else s / n
    return r.astype(dtype)


def case_name(coll, dtype, op, form, count, extra=""):
    return f"{coll} dtype={dtype.name} op={op} form={form} count={count}{extra}"


# ---- the collectives -------------------------------------------------------

FORMS = ["out_of_place", "recvbuf_none", "IN_PLACE"]


def check_allreduce(comm, dtype, op, count):
    n, r = comm.size, comm.rank
    want = oracle(op, [data(dtype, op, q, n, count) for q in range(n)],
                  dtype, n)
    for form in FORMS:
        x = data(dtype, op, r, n, count)
        keep = x.copy()
        if form == "out_of_place":
            out = np.full(count, 99, dtype)
            ret = comm.allreduce(x, out, op)
            expect_equal(x, keep, case_name("allreduce", dtype, op, form,
                                            count, " (input unchanged)"))
        elif form == "recvbuf_none":
            out = ret = comm.allreduce(x, op=op)
            out = x
        else:
            out = x
            ret = comm.allreduce(ringcc.IN_PLACE, x, op)
        if ret is not out:
            fail(case_name("allreduce", dtype, op, form, count,
                           ": did not return the output buffer"))
        expect_equal(out, want, case_name("allreduce", dtype, op, form, count))


def check_reduce_scatter(comm, dtype, op, count):
    n, r = comm.size, comm.rank
    inputs = [data(dtype, op, q, n, count * n) for q in range(n)]
    want = oracle(op, inputs, dtype, n)[r * count:(r + 1) * count]
    for form in FORMS:
        x = inputs[r].copy()
        if form == "out_of_place":
            out = np.full(count, 99, dtype)
            comm.reduce_scatter(x, out, op)
            expect_equal(x, inputs[r], case_name("reduce_scatter", dtype, op,
                                                 form, count, " (input)"))
            got = out
        elif form == "recvbuf_none":
            comm.reduce_scatter(x, op=op)
            got = x[:count]
        else:
            comm.reduce_scatter(ringcc.IN_PLACE, x, op)
            got = x[:count]
        expect_equal(got, want, case_name("reduce_scatter", dtype, op, form,
                                          count))


def check_allgather(comm, dtype, count):
    n, r = comm.size, comm.rank
    blocks = [data(dtype, "sum", q, n, count, salt=1) for q in range(n)]
    want = np.concatenate(blocks)
    for form in FORMS:
        if form == "out_of_place":
            out = np.full(count * n, 99, dtype)
            comm.allgather(blocks[r].copy(), out)
        else:
            out = np.full(count * n, 99, dtype)
            out[r * count:(r + 1) * count] = blocks[r]
            if form == "recvbuf_none":
                comm.allgather(out)
            else:
                comm.allgather(ringcc.IN_PLACE, out)
        expect_equal(out, want, case_name("allgather", dtype, "-", form,
                                          count))


def check_bcast(comm, dtype, count):
    n, r = comm.size, comm.rank
    for root in range(n):
        want = data(dtype, "sum", root, n, count, salt=2)
        buf = want.copy() if r == root else np.full(count, 99, dtype)
        comm.bcast(buf, root)
        expect_equal(buf, want, case_name("bcast", dtype, "-", "in_place",
                                          count, f" root={root}"))


def check_reduce(comm, dtype, op, count):
    n, r = comm.size, comm.rank
    inputs = [data(dtype, op, q, n, count) for q in range(n)]
    want = oracle(op, inputs, dtype, n)
    for root in range(n):
        for form in FORMS:
            x = inputs[r].copy()
            what = case_name("reduce", dtype, op, form, count, f" root={root}")
            if r != root:
                comm.reduce(x, None, op, root)
                expect_equal(x, inputs[r], what + " (non-root input)")
                continue
            if form == "out_of_place":
                out = np.full(count, 99, dtype)
                comm.reduce(x, out, op, root)
            elif form == "recvbuf_none":
                out = comm.reduce(x, op=op, root=root)
            else:
                out = comm.reduce(ringcc.IN_PLACE, x, op, root)
            expect_equal(out, want, what)


def check_alltoall(comm, dtype, count):
    n, r = comm.size, comm.rank
    # Rank q's block j is data(q, salt=j).
    mine = np.concatenate([data(dtype, "sum", r, n, count, salt=3 + j)
                           for j in range(n)])
    want = np.concatenate([data(dtype, "sum", q, n, count, salt=3 + r)
                           for q in range(n)])
    for form in FORMS:
        x = mine.copy()
        if form == "out_of_place":
            out = np.full(count * n, 99, dtype)
            comm.alltoall(x, out)
            expect_equal(x, mine, case_name("alltoall", dtype, "-", form,
                                            count, " (input)"))
        elif form == "recvbuf_none":
            out = comm.alltoall(x)
        else:
            out = comm.alltoall(ringcc.IN_PLACE, x)
        expect_equal(out, want, case_name("alltoall", dtype, "-", form, count))


def check_send_recv(comm, dtype, count):
    """Every ordered pair (a, b) in turn: a sends, b receives."""
    n, r = comm.size, comm.rank
    for a in range(n):
        for b in range(n):
            if a == b:
                continue
            payload = data(dtype, "sum", a, n, count, salt=5 + b)
            if r == a:
                comm.send(payload, b)
            elif r == b:
                buf = np.full(count, 99, dtype)
                ret = comm.recv(buf, a)
                expect_equal(ret, payload, case_name("send/recv", dtype, "-",
                                                     "-", count,
                                                     f" {a}->{b}"))
    # Any source: every other rank sends rank 0 a message of its own length
    # (recv_from into one buffer of count: source and count reported), then
    # one of count (recv with peer None: the data tells whose it is).
    # A barrier closes each step: no sender's second message meets the first
    # step's receives.
    for step in ("recv_from", "recv"):
        if r != 0:
            size = max(count - r, 0) if step == "recv_from" else count
            comm.send(data(dtype, "sum", r, n, size, salt=11), 0)
        else:
            any_source_step(comm, dtype, count, step)
        comm.barrier()
    if n == 1:
        try:
            comm.send(np.zeros(1, dtype), 0)
            fail("send to oneself did not raise")
        except ValueError as e:
            if "peer" not in str(e):
                fail(f"send to oneself: message does not name 'peer': {e}")


def any_source_step(comm, dtype, count, step):
    """Rank 0: n-1 messages from any source, each sender's once."""
    n = comm.size
    seen = set()
    for _ in range(n - 1):
        buf = np.full(count, 99, dtype)
        if step == "recv_from":
            src, got = comm.recv_from(buf)
            size = max(count - src, 0)
            if src in seen or not 0 < src < n or got != size:
                fail(f"recv_from(ANY_SOURCE): source {src}, count {got}; "
                     f"expected a new rank of 1..{n - 1}, count {size}")
            expect_equal(buf[:got], data(dtype, "sum", src, n, size,
                                         salt=11),
                         case_name("recv_from any", dtype, "-", "-",
                                   count, f" {src}->0"))
            if (buf[got:] != 99).any():
                fail(f"recv_from wrote past the {got} elements it got")
        else:
            comm.recv(buf, None)
            src = next((s for s in range(1, n) if s not in seen and
                        np.array_equal(buf, data(dtype, "sum", s, n,
                                                 count, salt=11))), None)
            if src is None:
                fail("recv(None): the data is no sender's message")
        seen.add(src)


def check_barrier(comm):
    """Rank 0 enters 0.4 s late; no other rank may leave before it entered.
    Told by the clock every process of the host shares (CLOCK_MONOTONIC):
    rank 0's time of entering, sent after the barrier, against each rank's
    time of leaving, so a rank the scheduler delays cannot fail the check."""
    global checked
    comm.barrier()
    entered = np.zeros(1, dtype=np.float64)
    if comm.rank == 0:
        time.sleep(0.4)
        entered[0] = time.monotonic()
        comm.barrier()
    else:
        comm.barrier()
        left = time.monotonic()
    comm.bcast(entered, root=0)
    if comm.rank == 0:
        return
    checked += 1
    if left < entered[0]:
        fail(f"barrier returned on rank {comm.rank} {entered[0] - left:.3f} s "
             "before rank 0 entered it (0.4 s late)")


def uneven(count, a, b, n):
    """A count for block (a, b): 0 for some, up to 2*count."""
    return (count * (2 * ((a + 2 * b) % n)) // max(n - 1, 1)) if n > 1 else count


def check_gather(comm, dtype, count):
    n, r = comm.size, comm.rank
    blocks = [data(dtype, "sum", q, n, count, salt=2) for q in range(n)]
    for root in sorted({0, n - 1}):
        for form in ("out_of_place", "in_place"):
            out = np.full(count * n, 99, dtype) if r == root else None
            send = blocks[r].copy()
            if r == root and form == "in_place":
                out[root * count:(root + 1) * count] = blocks[r]
                send = ringcc.IN_PLACE
            comm.gather(send, out, root=root)
            if r != root:  # the input is read, never written
                expect_equal(send, blocks[r], case_name(
                    "gather", dtype, "-", "input kept", count))
            if r == root:
                expect_equal(out, np.concatenate(blocks),
                             case_name("gather", dtype, "-", form, count,
                                       f" root {root}"))


def check_scatter(comm, dtype, count):
    n, r = comm.size, comm.rank
    for root in sorted({0, n - 1}):
        src = data(dtype, "sum", root, n, count * n, salt=3)
        want = src[r * count:(r + 1) * count]
        for form in ("out_of_place", "in_place"):
            out = np.full(count, 99, dtype)
            if r == root and form == "in_place":
                comm.scatter(src.copy(), ringcc.IN_PLACE, root=root)
                continue
            comm.scatter(src.copy() if r == root else None, out, root=root)
            expect_equal(out, want, case_name("scatter", dtype, "-", form,
                                              count, f" root {root}"))


def check_allgatherv(comm, dtype, count):
    n, r = comm.size, comm.rank
    counts = [uneven(count, q, 0, n) for q in range(n)]
    blocks = [data(dtype, "sum", q, n, counts[q], salt=4) for q in range(n)]
    # blocks in reverse rank order with a gap of one element before each
    displs, at = [0] * n, 0
    for q in reversed(range(n)):
        displs[q] = at + 1
        at = displs[q] + counts[q]
    want = np.full(at, 99, dtype)
    for q in range(n):
        want[displs[q]:displs[q] + counts[q]] = blocks[q]
    for form in ("out_of_place", "in_place"):
        out = np.full(at, 99, dtype)
        send = blocks[r].copy()
        if form == "in_place":
            out[displs[r]:displs[r] + counts[r]] = blocks[r]
            send = ringcc.IN_PLACE
        comm.allgatherv(send, out, counts, displs)
        expect_equal(out, want, case_name("allgatherv", dtype, "-", form,
                                          count))


def check_alltoallv(comm, dtype, count):
    n, r = comm.size, comm.rank
    sendcounts = [uneven(count, r, j, n) for j in range(n)]
    recvcounts = [uneven(count, i, r, n) for i in range(n)]

    def block(i, j):
        return data(dtype, "sum", i * n + j, n * n, uneven(count, i, j, n),
                    salt=5)
    send = np.concatenate([block(r, j) for j in range(n)])
    want = np.concatenate([block(i, r) for i in range(n)])
    out = np.full(want.size, 99, dtype)
    comm.alltoallv(send, out, sendcounts, recvcounts)
    expect_equal(out, want, case_name("alltoallv", dtype, "-",
                                      "out_of_place", count))
    # in place needs a symmetric matrix of counts: count to everyone
    same = [count] * n
    inplace = np.concatenate([data(dtype, "sum", r * n + j, n * n, count, 6)
                              for j in range(n)])
    comm.alltoallv(ringcc.IN_PLACE, inplace, same, same)
    expect_equal(inplace, np.concatenate(
        [data(dtype, "sum", i * n + r, n * n, count, 6) for i in range(n)]),
        case_name("alltoallv", dtype, "-", "in_place", count))


def run_collective(comm, coll):
    for dtype in DTYPES:
        for count in COUNTS:
            if coll in ("allreduce", "reduce_scatter", "reduce"):
                for op in OPS:
                    globals()[f"check_{coll}"](comm, dtype, op, count)
            elif coll == "send_recv":
                check_send_recv(comm, dtype, count)
            else:
                globals()[f"check_{coll}"](comm, dtype, count)
    f32 = np.dtype(np.float32)
    if coll in ("allreduce", "reduce_scatter", "reduce"):
        globals()[f"check_{coll}"](comm, f32, "sum", BIG)
    elif coll == "send_recv":
        check_send_recv(comm, f32, BIG)
    else:
        globals()[f"check_{coll}"](comm, f32, BIG)


def main():
    what = sys.argv[1]
    with ringcc.Comm.from_env() as comm:
        if what == "barrier":
            for _ in range(3):
                check_barrier(comm)
        else:
            run_collective(comm, what)
        comm.barrier()
    report()


def report():
    rank = os.environ.get("RINGCC_RANK")
    print(f"CHECKED {checked}")
    for f in failures[:40]:
        print(f"FAIL rank {rank}: {f}")
    if len(failures) > 40:
        print(f"FAIL rank {rank}: ... and {len(failures) - 40} more")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
