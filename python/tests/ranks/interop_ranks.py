"""interop_ranks.py - one rank of an interoperability job
(tests/test_interop.py).

    interop_ranks.py ml_dtypes   bfloat16, float8_e4m3fn and float8_e5m2
                                 NumPy arrays (ml_dtypes) through every
                                 collective and op
    interop_ranks.py dlpack      DLPack 1.x (versioned) and 0.x exchange
                                 with NumPy and torch, both ways
    interop_ranks.py mpi4py      mpi4py's spelling (Allreduce, Bcast, ...)
    interop_ranks.py premul      premul-sum ops on every float type, int32

Every rank computes every rank's input, so each checks every element of
its result against the exact answer; values are small integers (sums of
at most 4 values of magnitude <= 2, exact in every format). A rank prints
CHECKED N and exits 1 with the mismatches listed when any.
"""

import sys

import numpy as np

import ringcc

failures = []
checked = 0


def expect(got, want, what):
    global checked
    checked += 1
    g = np.asarray(got).astype(np.float64).ravel()
    w = np.asarray(want).astype(np.float64).ravel()
    if g.shape != w.shape:
        failures.append(f"{what}: {g.size} elements, expected {w.size}")
    elif not np.array_equal(g, w):
        i = int(np.nonzero(g != w)[0][0])
        failures.append(f"{what}: element {i} is {g[i]}, expected {w[i]} "
                        f"({int((g != w).sum())} of {g.size} differ)")


def expect_raises(exc, fn, words, what):
    global checked
    checked += 1
    try:
        fn()
    except exc as e:
        if words not in str(e):
            failures.append(f"{what}: {exc.__name__} without '{words}': {e}")
        return
    failures.append(f"{what}: no {exc.__name__}")


def inputs(rank, count, dtype, kind):
    """Rank's input: small integers (min/max: distinct per rank)."""
    i = np.arange(count)
    if kind == "minmax":
        v = (i * 3 + rank * 5) % 9 - 4  # -4 .. 4
    else:
        v = (i + 2 * rank) % 5 - 2      # -2 .. 2
    return v.astype(np.float32).astype(dtype)


def reduced(n, count, dtype, op):
    kind = "minmax" if op in ("min", "max") else "sum"
    xs = np.stack([inputs(q, count, dtype, kind).astype(np.float32)
                   for q in range(n)])
    if op == "avg":  # the exact sum divided in float32, rounded once
        return (xs.sum(0) / np.float32(n)).astype(dtype)
    return {"sum": np.sum, "min": np.min, "max": np.max}[op](xs, 0).astype(
        dtype)


def check_ml_dtypes(comm):
    import ml_dtypes
    n, r = comm.size, comm.rank
    for dtype in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn,
                  ml_dtypes.float8_e5m2):
        dtype = np.dtype(dtype)
        for count in (1, 7, 4099):
            for op in ("sum", "min", "max", "avg"):
                kind = "minmax" if op in ("min", "max") else "sum"
                x = inputs(r, count, dtype, kind)
                out = np.empty(count, dtype)
                comm.allreduce(x, out, op)
                expect(out, reduced(n, count, dtype, op),
                       f"allreduce {dtype.name} {op} count={count}")
                y = x.copy()
                comm.allreduce(y, op=op)  # in place
                expect(y, reduced(n, count, dtype, op),
                       f"allreduce in place {dtype.name} {op}")
                if r == 0:
                    rout = np.empty(count, dtype)
                    comm.reduce(x, rout, op, root=0)
                    expect(rout, reduced(n, count, dtype, op),
                           f"reduce {dtype.name} {op}")
                else:
                    comm.reduce(x, None, op, root=0)
            blk = count
            full = np.concatenate([inputs(r, blk, dtype, "sum")] * n)
            mine = np.empty(blk, dtype)
            comm.reduce_scatter(full, mine, "sum")
            expect(mine, reduced(n, blk, dtype, "sum"),
                   f"reduce_scatter {dtype.name} count={blk}")
            gathered = np.empty(blk * n, dtype)
            comm.allgather(inputs(r, blk, dtype, "sum"), gathered)
            expect(gathered, np.concatenate(
                [inputs(q, blk, dtype, "sum") for q in range(n)]),
                f"allgather {dtype.name}")
            b = inputs(r, blk, dtype, "minmax")
            comm.bcast(b, root=n - 1)
            expect(b, inputs(n - 1, blk, dtype, "minmax"),
                   f"bcast {dtype.name}")
            send = np.concatenate([inputs(r * n + j, blk, dtype, "minmax")
                                   for j in range(n)])
            recv = np.empty(blk * n, dtype)
            comm.alltoall(send, recv)
            expect(recv, np.concatenate(
                [inputs(q * n + r, blk, dtype, "minmax") for q in range(n)]),
                f"alltoall {dtype.name}")
    # ml_dtypes' float8_e4m3 (with infinities) is another encoding: refused
    other = np.zeros(4, ml_dtypes.float8_e4m3)
    expect_raises(TypeError, lambda: comm.allreduce(other), "float8_e4m3",
                  "ml_dtypes.float8_e4m3 refused")


class Legacy:
    """A DLPack 0.x exporter: __dlpack__ takes no max_version."""

    def __init__(self, arr):
        self.arr = arr

    def __dlpack__(self, stream=None):
        return self.arr.__dlpack__()

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


class Versioned:
    """A DLPack 1.x exporter of a NumPy array (which has no flags of its own
    here, so a read-only array is seen only through the capsule's flag)."""

    def __init__(self, arr):
        self.arr = arr
        self.asked = None

    def __dlpack__(self, stream=None, max_version=None, dl_device=None,
                   copy=None):
        self.asked = max_version
        return self.arr.__dlpack__(max_version=max_version)

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


class Elsewhere:
    """An object on a DLPack device ringcc cannot use (kDLVulkan, 7)."""

    def __dlpack__(self, stream=None, max_version=None):
        raise AssertionError("exported after __dlpack_device__ said no")

    def __dlpack_device__(self):
        return (7, 0)


def check_dlpack(comm):
    import torch
    n, r = comm.size, comm.rank
    total = n * (n - 1) / 2
    count = 1031
    # ringcc reads torch tensors through the versioned protocol
    for tdtype in (torch.float32, torch.bfloat16, torch.float8_e4m3fn,
                   torch.float8_e5m2, torch.int64):
        if tdtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            t = torch.full((count,), float(r % 2), dtype=torch.float32).to(
                tdtype)
            want = np.full(count, float(sum(q % 2 for q in range(n))))
        else:
            t = torch.full((count,), r, dtype=tdtype)
            want = np.full(count, total)
        comm.allreduce(t)
        expect(t.to(torch.float64).numpy(), want, f"torch {tdtype} allreduce")
    # NumPy through DLPack, versioned and not
    x = np.full(count, r, np.float32)
    v = Versioned(x)
    comm.allreduce(v)
    expect(x, np.full(count, total), "NumPy through DLPack 1.x")
    if v.asked is None or tuple(v.asked)[0] != 1:
        failures.append(f"__dlpack__ asked with max_version={v.asked}")
    x = np.full(count, r, np.int32)
    comm.allreduce(Legacy(x))
    expect(x, np.full(count, total), "NumPy through DLPack 0.x")
    ro = np.full(count, r, np.float32)
    ro.flags.writeable = False
    expect_raises(ValueError, lambda: comm.allreduce(Versioned(ro)),
                  "read-only", "a read-only DLPack 1.x capsule as output")
    out = np.empty(count, np.float32)
    comm.allreduce(Versioned(ro), out)  # read-only input is fine
    expect(out, np.full(count, total), "read-only DLPack input")
    expect_raises(TypeError, lambda: comm.allreduce(Elsewhere()),
                  "DLPack device type 7", "a device ringcc cannot use")
    # what ringcc returns and makes goes on to NumPy and torch
    got = comm.allreduce(np.full(count, r, np.float64))
    expect(np.from_dlpack(got), np.full(count, total), "np.from_dlpack")
    t = torch.from_dlpack(got)
    got[0] = -1.0  # the same memory, not a copy
    expect(t[:1].numpy(), [-1.0], "torch.from_dlpack shares memory")
    reg = ringcc.empty(count, np.float32, comm)
    reg[:] = r
    comm.allreduce(reg)
    expect(torch.from_dlpack(reg).numpy(), np.full(count, total),
           "torch.from_dlpack(ringcc.empty(...))")
    expect(np.from_dlpack(reg), np.full(count, total),
           "np.from_dlpack(ringcc.empty(...))")
    tt = torch.from_dlpack(comm.allreduce(torch.full((8,), r)))
    expect(tt.numpy(), np.full(8, total), "torch round trip")


def check_mpi4py(comm):
    n, r = comm.Get_size(), comm.Get_rank()
    total = n * (n - 1) / 2
    x = np.full(10, r, np.float64)
    out = np.empty(10)
    comm.Allreduce(x, out, ringcc.SUM)
    expect(out, np.full(10, total), "Allreduce")
    comm.Allreduce([x, ringcc.FLOAT64], [out, 10, "float64"], op="max")
    expect(out, np.full(10, n - 1), "Allreduce with buffer specifications")
    y = x.copy()
    comm.Allreduce(ringcc.IN_PLACE, y)
    expect(y, np.full(10, total), "Allreduce IN_PLACE")
    b = np.full(5, r, np.int32)
    comm.Bcast(b, root=n - 1)
    expect(b, np.full(5, n - 1), "Bcast")
    red = np.empty(10) if r == 0 else None
    comm.Reduce(x, red, ringcc.SUM, root=0)
    if r == 0:
        expect(red, np.full(10, total), "Reduce")
    g = np.empty(3 * n, np.int64)
    comm.Allgather(np.full(3, r, np.int64), g)
    expect(g, np.repeat(np.arange(n), 3), "Allgather")
    rs = np.empty(2)
    comm.Reduce_scatter_block(np.arange(2 * n, dtype=np.float64), rs)
    expect(rs, n * np.arange(2 * r, 2 * r + 2), "Reduce_scatter_block")
    comm.Reduce_scatter(np.arange(2 * n, dtype=np.float64), rs, [2] * n)
    expect(rs, n * np.arange(2 * r, 2 * r + 2), "Reduce_scatter")
    a2a = np.empty(n)
    comm.Alltoall(np.arange(n, dtype=np.float64) + 10 * r, a2a)
    expect(a2a, 10 * np.arange(n) + r, "Alltoall")
    if n > 1:
        buf = np.empty(4)
        if r % 2 == 0 and r + 1 < n:
            comm.Send(np.full(4, r + 0.5), r + 1)
        elif r % 2 == 1:
            comm.Recv(buf, r - 1)
            expect(buf, np.full(4, r - 0.5), "Send/Recv")
        expect_raises(ValueError, lambda: comm.Send(buf, (r + 1) % n, tag=7),
                      "no tags", "Send with a tag")
    comm.Barrier()
    expect_raises(ValueError,
                  lambda: comm.Allreduce([x, ringcc.FLOAT32], out),
                  "datatype", "a specification's datatype against the buffer")
    expect_raises(ValueError,
                  lambda: comm.Reduce_scatter(np.zeros(2 * n), rs,
                                              [1] + [2] * (n - 1)),
                  "recvcounts", "uneven Reduce_scatter counts")


def check_premul(comm):
    """Premul-sum ops (Comm.premul_sum) on every float type and int32:
    the scalar times each rank's input, summed (exact values)."""
    import ml_dtypes
    n, r = comm.size, comm.rank
    for dtype in (np.float16, ml_dtypes.bfloat16, np.float32, np.float64,
                  ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, np.int32):
        dtype = np.dtype(dtype)
        # partial sums stay exact: e5m2 has steps of 0.5 up to 4 only
        scalar = 3 if dtype.kind == "i" else 0.5 if dtype.itemsize == 1 \
            and "e5m2" in dtype.name else 0.75
        count = 1031
        want = sum(inputs(q, count, np.float64, "sum") for q in range(n)) \
            * scalar
        with comm.premul_sum(scalar, dtype) as op:
            x = inputs(r, count, dtype, "sum")
            out = np.empty(count, dtype)
            comm.allreduce(x, out, op)
            expect(out, want, f"premul allreduce {dtype.name}")
            full = np.concatenate([inputs(r, count, dtype, "sum")] * n)
            mine = np.empty(count, dtype)
            comm.reduce_scatter(full, mine, op)
            expect(mine, want, f"premul reduce_scatter {dtype.name}")
            rout = np.empty(count, dtype) if r == 0 else None
            comm.reduce(x, rout, op, root=0)
            if r == 0:
                expect(rout, want, f"premul reduce {dtype.name}")
            other = np.zeros(4, np.float64 if dtype != np.float64
                             else np.float32)
            expect_raises(ringcc.RingccError,
                          lambda: comm.allreduce(other, op=op), "'op'",
                          f"premul op of {dtype.name} on another datatype")
        expect_raises(ringcc.RingccError, lambda: comm.allreduce(x, op=op),
                      "'op'", f"a destroyed premul op ({dtype.name})")


def main():
    check = sys.argv[1]
    with ringcc.Comm.from_env() as comm:
        {"ml_dtypes": check_ml_dtypes, "dlpack": check_dlpack,
         "mpi4py": check_mpi4py, "premul": check_premul}[check](comm)
        comm.barrier()
    print(f"CHECKED {checked}", flush=True)
    for f in failures:
        print("FAIL:", f, flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
