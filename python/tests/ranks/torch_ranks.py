"""torch_ranks.py - one rank of a backend test job (tests/test_torch_backend.py).

    torch_ranks.py ops        every operation on the "ringcc" default group
                              against the same call on a "gloo" group of the
                              same ranks, with integer-valued data (exact)
    torch_ranks.py p2p        send/recv with tags, out of order, both ways
                              at once, batch_isend_irecv, vs gloo
    torch_ranks.py anysource  recv without src from several senders: every
                              element, each sender's order, source_rank,
                              tags
    torch_ranks.py subgroups  new_group subgroups vs gloo subgroups
    torch_ranks.py async      async_op=True returns at once and overlaps;
                              futures complete with the outputs
    torch_ranks.py errors     unsupported ops and dtypes, bad tensors

Each check prints nothing when it passes; failures are collected, printed
as FAIL lines and make the rank exit 1. "CHECKED k" says how many
comparisons ran.
"""

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

import ringcc.torch  # noqa: F401 - registers "ringcc"

R = dist.ReduceOp
failures = []
checked = 0
RANK = int(os.environ["RANK"])


def fail(msg):
    failures.append(msg)


def same(a, b, what):
    """Bitwise equality of tensors (or nested lists of them)."""
    global checked
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            fail(f"{what}: {len(a)} tensors vs {len(b)}")
            return
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{what}[{i}]")
        return
    checked += 1
    if a.dtype != b.dtype or a.shape != b.shape:
        fail(f"{what}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}")
    elif not torch.equal(a.view(-1).view(torch.uint8),
                         b.view(-1).view(torch.uint8)):
        diff = (a != b).nonzero()
        i = diff[0].tolist() if len(diff) else "?"
        fail(f"{what}: {len(diff)} of {a.numel()} elements differ (ringcc vs "
             f"gloo); first at {i}: {a[tuple(i)] if len(diff) else ''} vs "
             f"{b[tuple(i)] if len(diff) else ''}")


DTYPES = [torch.int8, torch.uint8, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64]
SIZES = [1, 1000]
BIG = 300001


def data(dtype, rank, count, salt=0, op=None):
    """Small integers: sums, products (of +-1, +-2), min and max are exact
    in every dtype; unsigned types get non-negative values."""
    idx = torch.arange(count, dtype=torch.int64) + 17 * salt
    if op == R.PRODUCT:
        vals = torch.tensor([1, 2, 1, 2] if dtype == torch.uint8
                            else [1, 2, -1, -2])
        x = vals[(idx * 7 + rank * 3) % 4]
    elif dtype == torch.uint8:
        x = (idx * 5 + rank * 11) % 9
    else:
        x = (idx * 5 + rank * 11) % 9 - 4
    return x.to(dtype)


def both(groups, fn):
    """fn(group) on the ringcc group and on the gloo group."""
    return fn(groups["ringcc"]), fn(groups["gloo"])


def gloo_supports(dtype, op):
    return not (dtype in (torch.float16, torch.bfloat16) and op == R.PRODUCT)


# ---- ops -----------------------------------------------------------------------

def check_allreduce(groups, n, r):
    for dtype in DTYPES:
        for count in SIZES:
            for op in (R.SUM, R.PRODUCT, R.MIN, R.MAX):
                def run(g, dtype=dtype, count=count, op=op):
                    t = data(dtype, r, count, op=op)
                    dist.all_reduce(t, op=op, group=g)
                    return t
                got = run(groups["ringcc"])
                if gloo_supports(dtype, op):
                    same(got, run(groups["gloo"]),
                         f"all_reduce {dtype} {op} count={count}")
                else:  # oracle: every rank's input is known
                    want = data(dtype, 0, count, op=op).double()
                    for q in range(1, n):
                        want *= data(dtype, q, count, op=op).double()
                    same(got, want.to(dtype),
                         f"all_reduce {dtype} {op} count={count} (oracle)")
            # AVG: gloo has none; against gloo's SUM divided by n (integers:
            # truncated toward zero, as libringcc defines it).
            t = data(dtype, r, count)
            dist.all_reduce(t, op=R.AVG, group=groups["ringcc"])
            s = data(dtype, r, count)
            dist.all_reduce(s, op=R.SUM, group=groups["gloo"])
            want = (s.double() / n)
            want = want.trunc() if not dtype.is_floating_point else want
            same(t, want.to(dtype), f"all_reduce {dtype} AVG count={count}")
    t = data(torch.float32, r, BIG)
    g = t.clone()
    dist.all_reduce(t, group=groups["ringcc"])
    dist.all_reduce(g, group=groups["gloo"])
    same(t, g, f"all_reduce float32 SUM count={BIG}")
    # Types gloo lacks: against the oracle.
    for name in ("uint32", "uint64"):
        dtype = getattr(torch, name, None)
        if dtype is None:
            continue
        t = (torch.arange(10) + r).to(dtype)
        dist.all_reduce(t, group=groups["ringcc"])
        want = sum(torch.arange(10) + q for q in range(n))
        same(t.to(torch.int64), want, f"all_reduce {name} SUM (oracle)")
    c = torch.complex(data(torch.float32, r, 8), data(torch.float32, r, 8, 1))
    want = sum(torch.complex(data(torch.float32, q, 8),
                             data(torch.float32, q, 8, 1)) for q in range(n))
    dist.all_reduce(c, group=groups["ringcc"])
    same(c, want, "all_reduce complex64 SUM (oracle)")


def check_allreduce_coalesced(groups, n, r):
    for op in (R.SUM, R.MAX):
        def run(g, op=op):
            ts = [data(torch.float32, r, c, salt=c) for c in (3, 1000, 17)]
            opts = dist.AllreduceCoalescedOptions()
            opts.reduceOp = op
            g.allreduce_coalesced(ts, opts).wait()
            return ts
        same(*both(groups, run), f"allreduce_coalesced {op}")


def check_broadcast(groups, n, r):
    for dtype in DTYPES:
        for root in range(n):
            def run(g, dtype=dtype, root=root):
                t = data(dtype, r, 999, salt=root)
                dist.broadcast(t, root, group=g)
                return t
            same(*both(groups, run), f"broadcast {dtype} root={root}")


def check_reduce(groups, n, r):
    for dtype in (torch.int32, torch.float32, torch.float64, torch.int8):
        for op in (R.SUM, R.MIN, R.MAX, R.PRODUCT):
            for root in range(n):
                def run(g, dtype=dtype, op=op, root=root):
                    t = data(dtype, r, 777, op=op)
                    dist.reduce(t, root, op=op, group=g)
                    return t
                got, want = both(groups, run)
                if r == root:  # elsewhere the tensor's content is undefined
                    same(got, want, f"reduce {dtype} {op} root={root}")


def check_allgather(groups, n, r):
    for dtype in DTYPES:
        for count in SIZES:
            def run(g, dtype=dtype, count=count):
                out = [torch.full((count,), 99).to(dtype) for _ in range(n)]
                dist.all_gather(out, data(dtype, r, count), group=g)
                return out
            same(*both(groups, run), f"all_gather {dtype} count={count}")

            def run_single(g, dtype=dtype, count=count):
                out = torch.full((n * count,), 99).to(dtype)
                dist.all_gather_into_tensor(out, data(dtype, r, count),
                                            group=g)
                return out
            same(*both(groups, run_single),
                 f"all_gather_into_tensor {dtype} count={count}")

    # Uneven all_gather (one ringcc_allgatherv; gloo takes equal sizes
    # only): rank q contributes 7 * q + (q % 2) * 3 elements, rank 0 none.
    def sizes(q):
        return 7 * q + (q % 2) * 3
    for dtype in (torch.float32, torch.int8, torch.bfloat16):
        out = [torch.full((sizes(q),), 99).to(dtype) for q in range(n)]
        dist.all_gather(out, data(dtype, r, sizes(r)), group=groups["ringcc"])
        same(out, [data(dtype, q, sizes(q)) for q in range(n)],
             f"all_gather uneven {dtype}")

    def run_2d(g):
        out = torch.empty(n * 5, 3)
        dist.all_gather_into_tensor(out, data(torch.float32, r, 15).view(5, 3),
                                    group=g)
        return out
    same(*both(groups, run_2d), "all_gather_into_tensor 2-D")

    def run_big(g):
        out = torch.empty(n * BIG)
        dist.all_gather_into_tensor(out, data(torch.float32, r, BIG), group=g)
        return out
    same(*both(groups, run_big), f"all_gather_into_tensor count={BIG}")

    def run_coalesced(g, device=None):
        outs = [torch.empty(n * c) for c in (4, 100)]
        with dist._coalescing_manager(group=g, device=device):
            for o, c in zip(outs, (4, 100)):
                dist.all_gather_into_tensor(o, data(torch.float32, r, c, c),
                                            group=g)
        return outs
    same(*both(groups, run_coalesced), "all_gather_into_tensor coalesced")
    # With a device, torch also calls start/end_coalescing (gloo has none).
    same(run_coalesced(groups["ringcc"], torch.device("cpu")),
         run_coalesced(groups["gloo"]), "coalescing manager with a device")


def check_reduce_scatter(groups, n, r):
    for dtype in DTYPES:
        for op in (R.SUM, R.MIN, R.MAX):
            def run(g, dtype=dtype, op=op):
                out = torch.full((1000,), 99).to(dtype)
                ins = [data(dtype, r, 1000, salt=j) for j in range(n)]
                dist.reduce_scatter(out, ins, op=op, group=g)
                return out

            def run_single(g, dtype=dtype, op=op):
                out = torch.full((1000,), 99).to(dtype)
                dist.reduce_scatter_tensor(out, data(dtype, r, 1000 * n),
                                           op=op, group=g)
                return out
            for fn, name in ((run, "reduce_scatter"),
                             (run_single, "reduce_scatter_tensor")):
                try:
                    want = fn(groups["gloo"])
                except (RuntimeError, ValueError) as e:  # gloo lacks it
                    if "not supported" not in str(e).lower() and \
                            "unsupported" not in str(e).lower():
                        raise
                    continue
                same(fn(groups["ringcc"]), want, f"{name} {dtype} {op}")

    def run_big(g):
        out = torch.empty(BIG)
        dist.reduce_scatter_tensor(out, data(torch.float32, r, n * BIG),
                                   group=g)
        return out
    same(*both(groups, run_big), f"reduce_scatter_tensor count={BIG}")
    # AVG (FSDP's gradient reduction): against gloo's SUM / n.
    out = torch.empty(64)
    dist.reduce_scatter_tensor(out, data(torch.float32, r, 64 * n).mul_(n),
                               op=R.AVG, group=groups["ringcc"])
    s = torch.empty(64)
    dist.reduce_scatter_tensor(s, data(torch.float32, r, 64 * n).mul_(n),
                               op=R.SUM, group=groups["gloo"])
    same(out, s / n, "reduce_scatter_tensor AVG")


def check_alltoall(groups, n, r):
    for dtype in (torch.float32, torch.int64, torch.bfloat16, torch.uint8):
        def run(g, dtype=dtype):
            out = torch.full((n * 37,), 99).to(dtype)
            dist.all_to_all_single(out, data(dtype, r, n * 37), group=g)
            return out
        same(*both(groups, run), f"all_to_all_single equal {dtype}")

    # Unequal splits: rank r sends (r + j) % 3 + 1 rows of 4 to rank j (and
    # none to rank (r + 1) % n when n > 2).
    def rows(src, dst):
        return 0 if n > 2 and dst == (src + 1) % n else (src + dst) % 3 + 1
    in_splits = [rows(r, j) for j in range(n)]
    out_splits = [rows(i, r) for i in range(n)]

    def run_unequal(g):
        inp = data(torch.float32, r, sum(in_splits) * 4).view(-1, 4)
        out = torch.full((sum(out_splits), 4), 99.0)
        dist.all_to_all_single(out, inp, out_splits, in_splits, group=g)
        return out
    same(*both(groups, run_unequal), "all_to_all_single unequal splits")

    def run_big(g):
        split = [BIG // n + (5000 if j == r else 0) for j in range(n)]
        recv = [BIG // n + (5000 if i == j else 0) for i, j in
                ((i, r) for i in range(n))]
        inp = data(torch.float32, r, sum(split))
        out = torch.empty(sum(recv))
        dist.all_to_all_single(out, inp, recv, split, group=g)
        return out
    same(*both(groups, run_big), "all_to_all_single unequal, large")

    def run_list(g):
        ins = [data(torch.int32, r, 11, salt=j) for j in range(n)]
        outs = [torch.full((11,), 99, dtype=torch.int32) for _ in range(n)]
        dist.all_to_all(outs, ins, group=g)
        return outs
    same(*both(groups, run_list), "all_to_all lists equal")

    def run_list_unequal(g):
        ins = [data(torch.int64, r, rows(r, j) * 3, salt=j) for j in range(n)]
        outs = [torch.full((rows(i, r) * 3,), 99, dtype=torch.int64)
                for i in range(n)]
        dist.all_to_all(outs, ins, group=g)
        return outs
    # Gloo's all_to_all takes equal sizes only: the reference is its
    # all_to_all_single with the same blocks as splits.
    ins = [data(torch.int64, r, rows(r, j) * 3, salt=j) for j in range(n)]
    ref = torch.empty(sum(rows(i, r) * 3 for i in range(n)), dtype=torch.int64)
    dist.all_to_all_single(ref, torch.cat(ins),
                           [rows(i, r) * 3 for i in range(n)],
                           [rows(r, j) * 3 for j in range(n)],
                           group=groups["gloo"])
    same(run_list_unequal(groups["ringcc"]),
         list(torch.split(ref, [rows(i, r) * 3 for i in range(n)])),
         "all_to_all lists unequal (vs gloo's all_to_all_single)")


def check_gather_scatter(groups, n, r):
    for root in range(n):
        def run_gather(g, root=root):
            out = [torch.full((50,), 99.0) for _ in range(n)] if r == root \
                else None
            dist.gather(data(torch.float32, r, 50), out, dst=root, group=g)
            return out or []
        same(*both(groups, run_gather), f"gather root={root}")

        def run_scatter(g, root=root):
            ins = [data(torch.int64, j, 60, salt=root) for j in range(n)] \
                if r == root else None
            out = torch.full((60,), 99, dtype=torch.int64)
            dist.scatter(out, ins, src=root, group=g)
            return out
        same(*both(groups, run_scatter), f"scatter root={root}")


def check_barrier(groups, n, r):
    for name in ("ringcc", "gloo"):
        dist.barrier(group=groups[name])
    if n == 1:
        return
    # Rank 0 enters late; no other rank leaves before it entered.
    if r == 0:
        time.sleep(0.4)
    start = time.monotonic()
    dist.barrier(group=groups["ringcc"])
    waited = time.monotonic() - start
    global checked
    checked += 1
    if r != 0 and waited < 0.3:
        fail(f"barrier left after {waited:.3f} s, before rank 0 entered")


def check_premul_fp8(groups, n, r):
    """ReduceOp.PREMUL_SUM (dist._make_nccl_premul_sum, FSDP2's divide
    factor; gloo has none: against the exact answer) and float8 tensors
    (gloo has none either)."""
    g = groups["ringcc"]
    count = 1000
    for dtype in (torch.float16, torch.bfloat16, torch.float32,
                  torch.float64):
        for factor in (0.5, torch.tensor([0.25], dtype=torch.float64)):
            f = float(factor)
            want = sum(data(torch.float64, q, count) for q in range(n)) * f
            t = data(dtype, r, count)
            dist.all_reduce(t, op=dist._make_nccl_premul_sum(factor), group=g)
            same(t, want.to(dtype), f"all_reduce PREMUL_SUM({f}) {dtype}")
            out = torch.empty(count, dtype=dtype)
            full = torch.cat([data(dtype, r, count)] * n)
            dist.reduce_scatter_tensor(
                out, full, op=dist._make_nccl_premul_sum(factor), group=g)
            same(out, want.to(dtype),
                 f"reduce_scatter_tensor PREMUL_SUM({f}) {dtype}")
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        for op in (R.SUM, R.MIN, R.MAX, R.AVG):
            # -2..2: every partial sum of <= 4 ranks is exact in e5m2 too
            xs = [torch.div(data(torch.float32, q, count), 2,
                            rounding_mode="floor") for q in range(n)]
            t = xs[r].to(dtype)
            dist.all_reduce(t, op=op, group=g)
            stack = torch.stack(xs)
            want = {R.SUM: stack.sum(0), R.MIN: stack.min(0).values,
                    R.MAX: stack.max(0).values,
                    R.AVG: stack.sum(0) / n}[op]
            same(t, want.to(dtype), f"all_reduce {op} {dtype}")


def ops(groups, n, r):
    for fn in (check_allreduce, check_allreduce_coalesced, check_broadcast,
               check_reduce, check_allgather, check_reduce_scatter,
               check_alltoall, check_gather_scatter, check_barrier,
               check_premul_fp8):
        fn(groups, n, r)


# ---- point to point ---------------------------------------------------------------

def p2p(groups, n, r):
    if n == 1:
        return
    # Every ordered pair, in turn, with a tag per pair.
    for name in ("ringcc", "gloo"):
        g = groups[name]
        got = {}
        for a in range(n):
            for b in range(n):
                if a == b:
                    continue
                if r == a:
                    dist.send(data(torch.float32, a, 33, salt=b), b, group=g,
                              tag=10 * a + b)
                elif r == b:
                    t = torch.empty(33)
                    dist.recv(t, a, group=g, tag=10 * a + b)
                    got[a] = t
        if name == "ringcc":
            ringcc_got = got
        else:
            for a in got:
                same(ringcc_got[a], got[a], f"send/recv {a}->{r}")
    g = groups["ringcc"]
    nxt, prv = (r + 1) % n, (r - 1) % n
    # Tags out of order: three messages sent tag 1, 2, 3; received 3, 1, 2.
    reqs = [dist.isend(torch.full((5,), float(10 * r + k)), nxt, group=g,
                       tag=k) for k in (1, 2, 3)]
    bufs = {k: torch.empty(5) for k in (3, 1, 2)}
    recvs = [dist.irecv(bufs[k], prv, group=g, tag=k) for k in (3, 1, 2)]
    for w in reqs + recvs:
        w.wait()
    for k in (1, 2, 3):
        same(bufs[k], torch.full((5,), float(10 * prv + k)),
             f"tag {k} received out of order")
    # Same tag twice: matched in the order sent.
    a = dist.isend(torch.full((3,), 1.0), nxt, group=g, tag=7)
    b = dist.isend(torch.full((3,), 2.0), nxt, group=g, tag=7)
    x, y = torch.empty(3), torch.empty(3)
    dist.irecv(x, prv, group=g, tag=7).wait()
    dist.irecv(y, prv, group=g, tag=7).wait()
    a.wait()
    b.wait()
    same(x, torch.full((3,), 1.0), "same tag, first")
    same(y, torch.full((3,), 2.0), "same tag, second")
    # Large messages both ways at once (each rank isends before it irecvs):
    # the pattern that deadlocks where a send waits for its receiver.
    for name in ("ringcc", "gloo"):
        big = data(torch.float32, r, 2_000_003)
        out_next, out_prev = torch.empty_like(big), torch.empty_like(big)
        ws = [dist.isend(big, nxt, group=groups[name]),
              dist.isend(big, prv, group=groups[name]),
              dist.irecv(out_prev, prv, group=groups[name]),
              dist.irecv(out_next, nxt, group=groups[name])]
        for w in ws:
            w.wait()
        if name == "ringcc":
            mine = (out_prev, out_next)
        else:
            same(list(mine), [out_prev, out_next], "isend/irecv 8 MB ring "
                 "both ways")
    # batch_isend_irecv.
    for name in ("ringcc", "gloo"):
        s = data(torch.int64, r, 100)
        t = torch.empty(100, dtype=torch.int64)
        ops_ = [dist.P2POp(dist.isend, s, nxt, groups[name]),
                dist.P2POp(dist.irecv, t, prv, groups[name])]
        for w in dist.batch_isend_irecv(ops_):
            w.wait()
        if name == "ringcc":
            mine = t
        else:
            same(mine, t, "batch_isend_irecv")
    # batch_isend_irecv of 8 MB to both neighbours, sends first (one ringcc
    # group).
    for name in ("ringcc", "gloo"):
        big = data(torch.float32, r, 2_000_003, salt=3)
        out_next, out_prev = torch.empty_like(big), torch.empty_like(big)
        ops_ = [dist.P2POp(dist.isend, big, nxt, groups[name]),
                dist.P2POp(dist.isend, big, prv, groups[name]),
                dist.P2POp(dist.irecv, out_prev, prv, groups[name]),
                dist.P2POp(dist.irecv, out_next, nxt, groups[name])]
        for w in dist.batch_isend_irecv(ops_):
            w.wait()
        if name == "ringcc":
            mine = (out_prev, out_next)
        else:
            same(list(mine), [out_prev, out_next], "batch_isend_irecv 8 MB "
                 "both ways")
    # A size mismatch fails that receive with both sizes named.
    if n == 2:
        if r == 0:
            dist.send(torch.zeros(4), 1, group=g, tag=99)
        else:
            try:
                dist.recv(torch.zeros(5), 0, group=g, tag=99)
                fail("recv of 5 floats from a 4-float message did not raise")
            except RuntimeError as e:
                if "16 bytes" not in str(e) or "20" not in str(e):
                    fail(f"size mismatch message: {e}")


def any_source(groups, n, r):
    """Each rank in turn receives from any source: three tag-5 messages of
    every other rank (every element names sender and sequence number, so
    a message from the wrong sender or out of its sender's order shows),
    half with dist.recv(src=None), half with irecv and _source_rank(); the
    first receive is posted before any rank sent to it (its channels open
    on the way). A tag-6 message each sender sent first must wait for a
    tag-6 receive, and an any-source receive of tag 7 takes a message from
    a rank that also has a receive from it by name posted earlier with
    another tag."""
    if n == 1:
        return
    g = groups["ringcc"]

    def msg(src, k, count=1000):
        return torch.arange(count, dtype=torch.int64) * 1000 + 100 * src + k

    for rcv in range(n):
        peers = [p for p in range(n) if p != rcv]
        if r == rcv:
            t = torch.empty(1000, dtype=torch.int64)
            first = dist.irecv(t, group=g, tag=5)  # before anything is sent
            dist.barrier(group=groups["gloo"])
            seen = dict.fromkeys(peers, 0)
            for i in range(3 * len(peers)):
                if i == 0:
                    first.wait()
                    src = first._source_rank()
                elif i % 2:
                    t = torch.empty(1000, dtype=torch.int64)
                    src = dist.recv(t, group=g, tag=5)
                else:
                    t = torch.empty(1000, dtype=torch.int64)
                    w = dist.irecv(t, group=g, tag=5)
                    w.wait()
                    src = w._source_rank()
                if src not in seen:
                    fail(f"any source: message {i} names sender {src}")
                    continue
                same(t, msg(src, seen[src]), f"any source: message {i} "
                     f"(number {seen[src]} of rank {src})")
                seen[src] += 1
            same(torch.tensor(list(seen.values())),
                 torch.full((len(peers),), 3), "any source: messages per "
                 "sender")
            for p in peers:  # the tag-6 messages waited
                t = torch.empty(7, dtype=torch.int64)
                dist.recv(t, p, group=g, tag=6)
                same(t, msg(p, 60, 7), f"tag 6 from {p} after any source")
            # By name, tag 8, from the first peer (posted first), then any
            # source, tag 7: the first peer's tag-7 message goes to the
            # any-source receive even though a receive from it waits.
            t8 = torch.empty(5, dtype=torch.int64)
            w8 = dist.irecv(t8, peers[0], group=g, tag=8)
            t7 = torch.empty(5, dtype=torch.int64)
            w7 = dist.irecv(t7, group=g, tag=7)
            dist.barrier(group=groups["gloo"])
            w7.wait()
            if w7._source_rank() != peers[0]:
                fail(f"any source tag 7: sender {w7._source_rank()}")
            same(t7, msg(peers[0], 70, 5), "any source tag 7")
            w8.wait()
            same(t8, msg(peers[0], 80, 5), "tag 8 by name")
        else:
            ws = [dist.isend(msg(r, 60, 7), rcv, group=g, tag=6)]
            dist.barrier(group=groups["gloo"])
            ws += [dist.isend(msg(r, k), rcv, group=g, tag=5)
                   for k in range(3)]
            dist.barrier(group=groups["gloo"])
            if r == peers[0]:
                ws.append(dist.isend(msg(r, 70, 5), rcv, group=g, tag=7))
                ws.append(dist.isend(msg(r, 80, 5), rcv, group=g, tag=8))
            for w in ws:
                w.wait()
        dist.barrier(group=groups["gloo"])
    # source_rank() belongs to receives.
    try:
        dist.all_reduce(torch.ones(1), group=g, async_op=True)._source_rank()
        fail("source_rank() of an all_reduce did not raise")
    except RuntimeError as e:
        if "recv" not in str(e):
            fail(f"source_rank() of an all_reduce: {e}")


# ---- subgroups ------------------------------------------------------------------------

def subgroups(groups, n, r):
    evens = list(range(0, n, 2))
    odds = list(range(1, n, 2))
    subs = {}
    for name in ("ringcc", "gloo"):
        # Every rank calls new_group for every group, as torch requires.
        subs[name] = [dist.new_group(evens, backend=name),
                      dist.new_group(odds, backend=name) if odds else None]
    mine = 0 if r % 2 == 0 else 1
    members = evens if mine == 0 else odds

    def run(g):
        t = data(torch.float32, r, 100)
        dist.all_reduce(t, group=g)
        out = [torch.empty(7) for _ in members]
        dist.all_gather(out, data(torch.float32, r, 7), group=g)
        b = data(torch.int32, r, 9)
        dist.broadcast(b, members[-1], group=g)
        return [t] + out + [b]
    same(run(subs["ringcc"][mine]), run(subs["gloo"][mine]),
         f"subgroup {members}")
    if dist.get_process_group_ranks(subs["ringcc"][mine]) != members:
        fail("get_process_group_ranks of the subgroup")
    # A subgroup of one rank and the world group still agree afterwards.
    solo = [dist.new_group([q], backend="ringcc") for q in range(n)]
    t = torch.full((4,), float(r))
    dist.all_reduce(t, group=solo[r])
    same(t, torch.full((4,), float(r)), "one-rank subgroup")
    t = torch.ones(4)
    dist.all_reduce(t)
    same(t, torch.full((4,), float(n)), "world group after subgroups")


# ---- asynchrony -----------------------------------------------------------------------

def async_ops(groups, n, r):
    g = groups["ringcc"]
    # Returns at once: rank 0 joins 0.5 s late.
    if n > 1:
        if r == 0:
            time.sleep(0.5)
        t = torch.ones(1000)
        start = time.monotonic()
        w = dist.all_reduce(t, group=g, async_op=True)
        issued = time.monotonic() - start
        global checked
        checked += 1
        if r != 0 and issued > 0.2:
            fail(f"all_reduce(async_op=True) took {issued:.3f} s to return "
                 "while rank 0 had not joined")
        if r != 0 and w.is_completed():
            fail("is_completed() before rank 0 joined")
        x = torch.randn(200, 200)
        for _ in range(5):
            x = x @ x.T / 200  # overlapped compute
        w.wait()
        checked += 1
        if not w.is_completed():
            fail("is_completed() is False after wait()")
        same(t, torch.full((1000,), float(n)), "async all_reduce result")
        fut_val = w.get_future().value()
        if not (isinstance(fut_val, list) and fut_val[0] is not None
                and torch.equal(fut_val[0], t)):
            fail(f"get_future().value() is {fut_val!r}, not [output]")
    # Many operations in flight at once, waited in reverse order; then on
    # two groups at once.
    works, outs = [], []
    for k in range(20):
        t = torch.full((100 + k,), float(r + k))
        works.append(dist.all_reduce(t, group=g, async_op=True))
        outs.append(t)
    o = torch.empty(n * 10)
    works.append(dist.all_gather_into_tensor(o, torch.full((10,), float(r)),
                                             group=g, async_op=True))
    for w in reversed(works):
        w.wait()
    for k, t in enumerate(outs):
        same(t, torch.full((100 + k,), float(n * (n - 1) / 2 + n * k)),
             f"in-flight all_reduce {k}")
    same(o, torch.arange(n).float().repeat_interleave(10),
         "in-flight all_gather")
    # A blocking call (run in the caller's thread where nothing is queued)
    # issued behind operations still in flight runs after them, in order.
    works, outs = [], []
    for k in range(6):
        t = torch.full((3000 + k,), float(r))
        works.append(dist.all_reduce(t, group=g, async_op=True))
        outs.append(t)
    u = torch.full((5,), float(r + 1))
    dist.all_reduce(u, group=g)
    checked += 1
    if not all(w.is_completed() for w in works):
        fail("a blocking all_reduce returned before the async ones issued "
             "before it completed")
    same(u, torch.full((5,), float(n * (n + 1) / 2)), "blocking after async")
    for k, (w, t) in enumerate(zip(works, outs)):
        w.wait()
        same(t, torch.full((3000 + k,), float(n * (n - 1) / 2)),
             f"async {k} before a blocking call")
    other = dist.new_group(list(range(n)), backend="ringcc")
    a, b = torch.ones(50000), torch.full((70000,), 2.0)
    wa = dist.all_reduce(a, group=g, async_op=True)
    wb = dist.all_reduce(b, group=other, async_op=True)
    wb.wait()
    wa.wait()
    same(a, torch.full((50000,), float(n)), "overlapping groups, first")
    same(b, torch.full((70000,), 2.0 * n), "overlapping groups, second")
    # then() callbacks see the outputs.
    t = torch.ones(8)
    fut = dist.all_reduce(t, group=g, async_op=True).get_future()
    doubled = fut.then(lambda f: f.value()[0] * 2).wait()
    same(doubled, torch.full((8,), 2.0 * n), "future.then")


# ---- errors --------------------------------------------------------------------------------

def errors(groups, n, r):
    g = groups["ringcc"]
    cases = [
        (lambda: dist.all_reduce(torch.ones(4), op=R.BAND, group=g),
         ValueError, "BAND"),
        (lambda: dist.all_reduce(torch.ones(4, dtype=torch.int16), group=g),
         TypeError, "int16"),
        (lambda: dist.all_reduce(torch.ones(4, 2)[:, 0], group=g),
         (ValueError, RuntimeError), "contiguous"),
        (lambda: dist.all_gather_into_tensor(torch.empty(n * 4 + 1),
                                             torch.ones(4), group=g),
         (ValueError, RuntimeError), "output"),
        (lambda: dist.all_reduce(torch.ones(2, dtype=torch.bool), group=g),
         ValueError, "bool"),
    ]
    global checked
    for fn, exc, word in cases:
        checked += 1
        try:
            fn()
            fail(f"{word}: no exception")
        except exc as e:
            if word not in str(e):
                fail(f"{word}: the message does not name it: {e}")
        except Exception as e:  # noqa: BLE001
            fail(f"{word}: {type(e).__name__}: {e}")
    t = torch.ones(4)
    dist.all_reduce(t, group=g)  # nothing was sent by the failed calls
    same(t, torch.full((4,), float(n)), "all_reduce after bad arguments")
    t = torch.ones(3, dtype=torch.bool) if r else torch.zeros(3,
                                                              dtype=torch.bool)
    dist.all_reduce(t, op=R.MAX, group=g)
    same(t, torch.full((3,), n > 1), "bool MAX")
    if dist.get_backend(g) != "ringcc":
        fail(f"get_backend is {dist.get_backend(g)!r}")


def main():
    what = sys.argv[1]
    dist.init_process_group("ringcc", timeout=datetime.timedelta(seconds=120))
    n, r = dist.get_world_size(), dist.get_rank()
    groups = {"ringcc": dist.group.WORLD,
              "gloo": dist.new_group(list(range(n)), backend="gloo")}
    {"ops": ops, "p2p": p2p, "anysource": any_source,
     "subgroups": subgroups, "async": async_ops,
     "errors": errors}[what](groups, n, r)
    dist.barrier()
    dist.destroy_process_group()
    print(f"CHECKED {checked}")
    for f in failures[:40]:
        print(f"FAIL rank {r}: {f}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
