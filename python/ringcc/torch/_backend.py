"""_backend.py - ProcessGroupRingcc, the torch.distributed backend "ringcc".

A Python subclass of torch.distributed.ProcessGroup (the c10d trampoline
dispatches every collective of the group to it). At creation the group's
rank 0 makes a ringcc unique id and puts it in the group's store; every
rank reads it and joins one communicator, with the group's timeout as the
library's deadline (ringcc_config_t.timeout_ms).

Each operation checks its tensors in the caller's thread (a bad argument
raises there, before anything is queued), then queues a task on the
group's worker thread (_engine.Worker) and returns a Work at once. The
task makes the library calls; the Work's future completes with the output
tensors. Operations the library has no single call for are built from its
calls: allgather/reduce_scatter/alltoall with lists of tensors stage
through one flat buffer (all_gather into tensors of different sizes: one
ringcc_allgatherv; gather and scatter: one ringcc_gather/ringcc_scatter
into or out of the root's staging buffer); all_to_all_single with split
sizes is one ringcc_alltoallv (host tensors; CUDA tensors, and alltoall of
tensor lists of unequal sizes, use the communicator's send/recv in the
pairwise rounds of a round-robin tournament, so no round can deadlock);
send/recv with tags go through _p2p's channels.

CPU tensors are what this backend is tested with. CUDA tensors are handed
to the library's device path, enqueued on torch's current stream of the
tensor's device (see docs/python.md for what was run).
"""

import ctypes
import datetime
import threading
import time

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

import ringcc
from ringcc._lib import Datatype, Op

from . import _p2p
from ._engine import (Completion, RingccWork, Worker, completed_work,
                      work_for)

# c10d's profiling: each operation is a record function named
# "<backend>:<collective>" (gloo:all_reduce, ...) with its input tensors,
# begun in the caller's thread and ended where the operation completes, so
# the profiler shows it as asynchronous, as ProcessGroupGloo's works do.
_record_enter = torch.autograd._record_function_with_args_enter
_record_exit = torch.autograd._record_function_with_args_exit

# ---- datatypes and ops -----------------------------------------------------

_DTYPES = {
    torch.int8: Datatype.INT8, torch.uint8: Datatype.UINT8,
    torch.int32: Datatype.INT32, torch.int64: Datatype.INT64,
    torch.float16: Datatype.FLOAT16, torch.bfloat16: Datatype.BFLOAT16,
    torch.float32: Datatype.FLOAT32, torch.float64: Datatype.FLOAT64,
}
for _name, _dt in (("uint32", Datatype.UINT32), ("uint64", Datatype.UINT64),
                   # OCP FP8 (torch >= 2.1): FSDP2's float8 all-gather
                   ("float8_e4m3fn", Datatype.FLOAT8_E4M3),
                   ("float8_e5m2", Datatype.FLOAT8_E5M2)):
    if hasattr(torch, _name):  # torch >= 2.3
        _DTYPES[getattr(torch, _name)] = _dt
# Carried as another datatype: bool as uint8 (no sum or product), complex as
# pairs of reals (sum and average only).
_VIEWED = {torch.bool: (torch.uint8, (Op.MIN, Op.MAX)),
           torch.complex64: (torch.float32, (Op.SUM, Op.AVG)),
           torch.complex128: (torch.float64, (Op.SUM, Op.AVG))}

_OPS = [(ReduceOp.SUM, Op.SUM), (ReduceOp.PRODUCT, Op.PROD),
        (ReduceOp.MIN, Op.MIN), (ReduceOp.MAX, Op.MAX),
        (ReduceOp.AVG, Op.AVG)]


def _op_name(reduce_op):
    op = getattr(reduce_op, "op", reduce_op)
    return str(getattr(op, "name", op)).replace("RedOpType.", "")


class _PremulOp:
    """ReduceOp.PREMUL_SUM (dist._make_nccl_premul_sum: FSDP2's divide
    factor) until the call: _call makes the communicator's premul-sum op
    for the tensor's datatype, runs the call and destroys the op."""
    name = "PREMUL_SUM"

    def __init__(self, factor):
        if isinstance(factor, torch.Tensor):
            if factor.numel() != 1:
                raise ValueError("ringcc: the PREMUL_SUM factor is a tensor "
                                 f"of {factor.numel()} elements, not one")
            factor = factor.item()
        self.factor = float(factor)


def ringcc_op(reduce_op):
    """The ringcc Op for a torch ReduceOp (a _PremulOp for PREMUL_SUM);
    ValueError for the others."""
    for torch_op, op in _OPS:
        if reduce_op == torch_op:
            return op
    if getattr(reduce_op, "op", None) == ReduceOp.PREMUL_SUM:
        return _PremulOp(reduce_op.factor)
    raise ValueError(f"ringcc: ReduceOp.{_op_name(reduce_op)} is not "
                     "supported by the ringcc backend (it has SUM, PRODUCT, "
                     "MIN, MAX, AVG and PREMUL_SUM)")


def _flat(t):
    """The tensor as the 1-D tensor the library sees (bool as uint8,
    complex as real pairs)."""
    if t.dtype in _VIEWED:
        t = torch.view_as_real(t) if t.is_complex() else t.view(torch.uint8)
    return t.view(-1)


class _Arg:
    """A checked tensor: address, element count and ringcc datatype of its
    flat view, and its device."""

    __slots__ = ("tensor", "address", "count", "dtype", "cuda")

    def __init__(self, tensor, name, op=None):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"ringcc: argument '{name}' is a "
                            f"{type(tensor).__name__}, not a tensor")
        if tensor.layout != torch.strided:
            raise ValueError(f"ringcc: argument '{name}' is a {tensor.layout} "
                             "tensor; only dense tensors are supported")
        if not tensor.is_contiguous():
            raise ValueError(f"ringcc: argument '{name}' is not contiguous "
                             "(call .contiguous() first)")
        if tensor.device.type not in ("cpu", "cuda"):
            raise ValueError(f"ringcc: argument '{name}' is on device "
                             f"{tensor.device}; the backend takes cpu and "
                             "cuda tensors")
        if tensor.dtype in _VIEWED:
            allowed = _VIEWED[tensor.dtype][1]
            if op is not None and op not in allowed:
                raise ValueError(
                    f"ringcc: argument '{name}' has dtype {tensor.dtype}, "
                    f"which the backend reduces with "
                    f"{' and '.join(o.name for o in allowed)} only, not "
                    f"{op.name}")
        elif tensor.dtype not in _DTYPES:
            raise TypeError(f"ringcc: argument '{name}' has dtype "
                            f"{tensor.dtype}, which libringcc does not have")
        flat = _flat(tensor)
        self.tensor = tensor
        self.address = flat.data_ptr() if flat.numel() else None
        self.count = flat.numel()
        self.dtype = _DTYPES[flat.dtype]
        self.cuda = tensor.device.type == "cuda"


def _same(args, what):
    first = args[0]
    for i, a in enumerate(args[1:], 1):
        if a.tensor.dtype != first.tensor.dtype:
            raise TypeError(f"ringcc: {what}: tensor {i} has dtype "
                            f"{a.tensor.dtype} but tensor 0 has "
                            f"{first.tensor.dtype}")
        if a.tensor.device != first.tensor.device:
            raise ValueError(f"ringcc: {what}: tensor {i} is on "
                             f"{a.tensor.device} but tensor 0 is on "
                             f"{first.tensor.device}")


def _check_size(arg, expected, name, why):
    if arg.tensor.numel() != expected:
        raise ValueError(f"ringcc: argument '{name}' has {arg.tensor.numel()} "
                         f"elements (shape {tuple(arg.tensor.shape)}); {why} "
                         f"needs {expected}")


def _one_list(lists, name):
    if len(lists) != 1:
        raise ValueError(f"ringcc: argument '{name}' must hold one list of "
                         f"tensors (one device per process), got {len(lists)}")
    return lists[0]


def _tensors(value):
    """The tensors in a future's value (a tensor or nested lists)."""
    if isinstance(value, torch.Tensor):
        return [value]
    return [t for v in (value or []) for t in _tensors(v)]


def _tournament(n, rank):
    """The peers of `rank` round by round in a round-robin tournament of n
    players (one idle round for each player when n is odd): every round
    pairs ranks, so a round of send/recv between pairs cannot deadlock."""
    players = n + (n % 2)
    peers = []
    for rnd in range(players - 1):
        if rank == players - 1:
            peer = rnd
        elif rank == rnd:
            peer = players - 1
        else:
            peer = (2 * rnd - rank) % (players - 1)
        if peer < n:
            peers.append(peer)
    return peers


# ---- the process group -------------------------------------------------------

class ProcessGroupRingcc(dist.ProcessGroup):
    """torch.distributed process group over one ringcc communicator."""

    def __init__(self, store, rank, size, timeout, name="ringcc"):
        super().__init__(rank, size)
        self._name = name  # the backend's name in profiler events
        if isinstance(timeout, datetime.timedelta):
            timeout_ms = int(timeout.total_seconds() * 1000)
        else:
            timeout_ms = int(float(timeout) * 1000)
        self._store = store
        self._timeout_ms = timeout_ms
        if rank == 0:
            uid = ringcc.get_unique_id()
            store.set("ringcc/unique_id", bytes(uid))
        else:
            uid = ringcc.UniqueId(store.get("ringcc/unique_id"))
        config = {"timeout_ms": timeout_ms}
        # The library sets up device buffers where the process uses CUDA;
        # torch may not have made its context current in this thread yet.
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            config["cuda_device"] = torch.cuda.current_device()
        self._comm = ringcc.Comm(size, uid, rank, **config)
        self._worker = Worker(f"ringcc-pg-rank{rank}")
        self._channels = {}
        self._channels_lock = threading.Lock()
        self._shut = False
        self._tls = threading.local()

    def shrink(self, exclude=None):
        """A new group of the ranks of this one that are not in exclude,
        renumbered in order (ringcc.Comm.shrink: None excludes the ranks
        known to have failed, agreed among the survivors). For a training
        loop that goes on after a rank died (torchft-style): catch the
        failed collective's error, call shrink() on every survivor, and use
        the group it returns from then on (pass it as group=, or wrap it in
        a new DDP); this group is left as it was and should be shut down.
        Called by the survivors only."""
        comm = self._comm.shrink(exclude)
        pg = ProcessGroupRingcc.__new__(ProcessGroupRingcc)
        dist.ProcessGroup.__init__(pg, comm.rank, comm.size)
        pg._name = self._name
        pg._store = self._store
        pg._timeout_ms = self._timeout_ms
        pg._comm = comm
        pg._worker = Worker(f"ringcc-pg-rank{comm.rank}")
        pg._channels = {}
        pg._channels_lock = threading.Lock()
        pg._shut = False
        pg._tls = threading.local()
        return pg

    # ---- identity ------------------------------------------------------------

    def getBackendName(self):
        return "ringcc"

    def getRank(self):
        return self._comm.rank

    def getSize(self):
        return self._comm.size

    # Name and description: torch sets them after creation; a Python group
    # without per-device backends keeps them itself (DeviceMesh reads them).
    _group_name = ""
    _group_desc = ""

    def getGroupName(self):
        return self._group_name

    def setGroupName(self, name):
        self._group_name = name

    def getGroupDesc(self):
        return self._group_desc

    def setGroupDesc(self, desc):
        self._group_desc = desc

    # torch's Python code asks a group for its per-device backend
    # (batch_isend_irecv: supports_coalescing; FSDP: supports_tensor_alloc).
    # This group is its own backend for every device. With coalescing,
    # batch_isend_irecv's sends and receives become one ringcc group.
    supports_coalescing = True

    def _get_backend(self, device=None):
        return self

    def supports_tensor_alloc(self, device=None):
        return False

    def __repr__(self):
        return f"<ProcessGroupRingcc rank {self.rank()} of {self.size()}>"

    # ---- plumbing ----------------------------------------------------------------

    def _submit(self, title, inputs, run, outputs, args=(), opts=None):
        """Queues run() on the worker; a Work for its outputs. title names
        the operation (c10d's collective name) in profiler events and
        errors. A blocking call (opts.asyncOp False: c10d waits for its Work
        at once) on host tensors runs in the calling thread right away where
        nothing is queued before it: no hand-over to the worker, whose
        wake-up costs more than the call itself for small messages."""
        run = self._titled(title, run)
        record = self._record(title, inputs)
        if record is not None:
            inner = run

            def run():
                try:
                    inner()
                finally:
                    _record_exit(record)
        if any(a.cuda for a in args):
            return self._submit_cuda(run, outputs, args)
        if record is None and self._coalesced is None and \
                getattr(opts, "asyncOp", True) is False:
            future = self._worker.run_now(run, outputs)
            if future is not None:
                return work_for(future)
        future, task = self._worker.submit(run, outputs)
        # Profiled: the operation ends on the worker, never inline in
        # wait() (the event must begin and end on different threads).
        return self._work(future, self._worker,
                          task if record is None else None)

    def _record(self, title, inputs):
        if not torch.autograd._profiler_enabled():
            return None
        return _record_enter(f"{self._name}:{title}",
                             *[t for t in inputs
                               if isinstance(t, torch.Tensor)])

    def _titled(self, title, run):
        """run() whose library timeout says "Timed out", the operation and
        the time it waited (what c10d's callers match)."""
        def timed():
            start = time.monotonic()
            try:
                run()
            except ringcc.RingccError as e:
                if getattr(e, "code", None) != ringcc.Result.ERR_TIMEOUT:
                    raise
                ms = int((time.monotonic() - start) * 1000)
                raise RuntimeError(
                    f"ringcc: {title}: Timed out after {ms} ms (the group's "
                    f"timeout is {self._timeout_ms} ms): {e}") from e
        return timed

    def _work(self, future, worker=None, task=None, source=None):
        if self._coalesced is not None:
            self._coalesced.append(future)
        return work_for(future, worker, task, source)

    # ---- coalescing (torch's _coalescing_manager) ---------------------------
    # Operations issued between start and end run as they are issued (in
    # order, on the worker); end_coalescing's Work completes when all have.

    _coalesced = None
    _batch = None  # the sends and receives of a batch_isend_irecv

    def start_coalescing(self, device=None):
        if self._coalesced is not None:
            raise RuntimeError("ringcc: start_coalescing while coalescing")
        self._coalesced = []
        self._batch = []

    def end_coalescing(self, device=None):
        if self._coalesced is None:
            raise RuntimeError("ringcc: end_coalescing without "
                               "start_coalescing")
        batch, self._batch = self._batch, None
        if batch:
            self._submit_batch(batch)
        futures, self._coalesced = self._coalesced, None
        return work_for(torch.futures.collect_all(futures).then(
            lambda all_done: [t for f in all_done.value()
                              for t in _tensors(f.value())]))

    def _submit_cuda(self, run, outputs, args):
        """Device tensors: the worker enqueues the library calls (and any
        staging copies) on the caller's current stream, ringcc's device
        path; the caller waits until they are enqueued, as with NCCL, and
        the future completes when the stream has run them."""
        device = next(a.tensor.device for a in args if a.cuda)
        stream = torch.cuda.current_stream(device)

        def enqueue():
            self._tls.stream = stream.cuda_stream
            try:
                with torch.cuda.stream(stream):
                    run()
            finally:
                self._tls.stream = None
        self._worker.submit(enqueue, outputs)[0].wait()
        event = torch.cuda.Event()
        event.record(stream)
        if self._cuda_done is None:
            self._cuda_done = Worker(f"ringcc-cuda-rank{self.rank()}")
        return self._work(self._cuda_done.submit(event.synchronize,
                                                 outputs)[0])

    _cuda_done = None

    def _call(self, fn, *args):
        """One library call on the group's communicator (worker thread);
        the stream is torch's current one for device tensors, else NULL.
        A _PremulOp (after the datatype) becomes the communicator's
        premul-sum op for the call's datatype, made and destroyed here."""
        premul = [i for i, a in enumerate(args) if isinstance(a, _PremulOp)]
        if not premul:
            self._comm._run(fn, *args, self._comm.handle,
                            getattr(self._tls, "stream", None))
            return
        i = premul[0]
        with self._comm.premul_sum(args[i].factor, args[i - 1]) as op:
            self._call(fn, *args[:i], op.value, *args[i + 1:])

    def _reduce_op(self, opts):
        return ringcc_op(opts.reduceOp)

    # ---- allreduce -------------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        op = self._reduce_op(opts or dist.AllreduceOptions())
        if tensors and all(isinstance(t, torch.Tensor) and t.is_sparse
                           for t in tensors):
            return self._allreduce_sparse(tensors, op)
        args = [_Arg(t, f"tensors[{i}]", op) for i, t in enumerate(tensors)]

        def run():
            for a in args:
                self._call("ringcc_allreduce", a.address, a.address, a.count,
                           a.dtype, op)
        return self._submit("all_reduce", tensors, run, list(tensors), args,
                            opts=opts)

    def _allreduce_sparse(self, tensors, op):
        """Sparse COO all-reduce as Gloo does it: every rank's indices and
        values are gathered (padded to the largest count), summed as sparse
        tensors and coalesced; each tensor then holds the sum."""
        if op != Op.SUM:
            raise ValueError(f"ringcc: all_reduce of a sparse tensor takes "
                             f"ReduceOp.SUM only, not {op.name}")
        for i, t in enumerate(tensors):
            if t.device.type != "cpu":
                raise ValueError(f"ringcc: argument 'tensors[{i}]' is a "
                                 f"sparse tensor on {t.device}; sparse "
                                 "all_reduce takes CPU tensors")
            if t.dtype not in _DTYPES:
                raise TypeError(f"ringcc: argument 'tensors[{i}]' has dtype "
                                f"{t.dtype}, which libringcc does not have")
        n = self.size()

        def gather(t):
            out = torch.empty((n,) + tuple(t.shape), dtype=t.dtype)
            a, o = _Arg(t.contiguous(), "t"), _Arg(out, "out")
            self._call("ringcc_allgather", a.address, o.address, a.count,
                       a.dtype)
            return out

        def run():
            for t in tensors:
                c = t.coalesce()
                idx, vals = c.indices(), c.values()
                nnz = gather(torch.tensor([idx.shape[1]], dtype=torch.int64))
                top = int(nnz.max())
                pad_i = torch.zeros((idx.shape[0], top), dtype=torch.int64)
                pad_i[:, :idx.shape[1]] = idx
                pad_v = torch.zeros((top,) + tuple(vals.shape[1:]),
                                    dtype=vals.dtype)
                pad_v[:vals.shape[0]] = vals
                all_i, all_v = gather(pad_i), gather(pad_v)
                k = [int(x) for x in nnz.view(-1)]
                total = torch.sparse_coo_tensor(
                    torch.cat([all_i[r][:, :k[r]] for r in range(n)], 1),
                    torch.cat([all_v[r][:k[r]] for r in range(n)], 0),
                    t.shape).coalesce()
                t.copy_(total)
        return self._submit("all_reduce", [], run, list(tensors))

    def allreduce_coalesced(self, tensors, opts=None):
        op = self._reduce_op(opts or dist.AllreduceCoalescedOptions())
        args = [_Arg(t, f"tensors[{i}]", op) for i, t in enumerate(tensors)]
        if not args:
            return completed_work([])
        _same(args, "allreduce_coalesced")

        def run():
            flat = torch.cat([_flat(t) for t in tensors])
            f = _Arg(flat, "flat", op)
            self._call("ringcc_allreduce", f.address, f.address, f.count,
                       f.dtype, op)
            offset = 0
            for t in tensors:
                n = _flat(t).numel()
                _flat(t).copy_(flat[offset:offset + n])
                offset += n
        return self._submit("all_reduce_coalesced", tensors, run, list(tensors), args,
                            opts=opts)

    # ---- broadcast and reduce ------------------------------------------------

    def broadcast(self, tensors, opts=None):
        opts = opts or dist.BroadcastOptions()
        root = self._root(opts.rootRank, "rootRank")
        args = [_Arg(t, f"tensors[{i}]") for i, t in enumerate(tensors)]

        def run():
            for a in args:
                self._call("ringcc_bcast", a.address, a.count, a.dtype, root)
        return self._submit("broadcast", tensors, run, list(tensors), args,
                            opts=opts)

    def reduce(self, tensors, opts=None):
        opts = opts or dist.ReduceOptions()
        op = self._reduce_op(opts)
        root = self._root(opts.rootRank, "rootRank")
        args = [_Arg(t, f"tensors[{i}]", op) for i, t in enumerate(tensors)]
        at_root = root == self.rank()

        def run():
            for a in args:
                self._call("ringcc_reduce", a.address,
                           a.address if at_root else None, a.count, a.dtype,
                           op, root)
        return self._submit("reduce", tensors, run, list(tensors), args,
                            opts=opts)

    def _root(self, root, name):
        if not 0 <= root < self.size():
            raise ValueError(f"ringcc: {name} is {root}; it must be in "
                             f"[0, {self.size() - 1}]")
        return root

    # ---- allgather ---------------------------------------------------------------

    def all_gather_single(self, output, input, opts=None):
        """_allgather_base / all_gather_into_tensor: output holds size
        blocks of input's size."""
        out, inp = _Arg(output, "output"), _Arg(input, "input")
        _same([inp, out], "all_gather_single")
        _check_size(out, inp.tensor.numel() * self.size(), "output",
                    f"allgather of {inp.tensor.numel()} elements from "
                    f"{self.size()} ranks")

        def run():
            self._call("ringcc_allgather", inp.address, out.address,
                       inp.count, inp.dtype)
        return self._submit("all_gather_into_tensor", [input], run, [output], [out, inp],
                            opts=opts)

    _allgather_base = all_gather_single

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        pairs = self._pairs(outputs, inputs, self.size(), 1, "allgather")

        def run():
            for out, inp in pairs:
                self._call("ringcc_allgather", inp.address, out.address,
                           inp.count, inp.dtype)
        return self._submit("all_gather_into_tensor_coalesced", inputs, run, list(outputs),
                            [a for p in pairs for a in p], opts=opts)

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def _pairs(self, outputs, inputs, out_scale, in_scale, what):
        if len(outputs) != len(inputs):
            raise ValueError(f"ringcc: {what}: {len(outputs)} outputs but "
                             f"{len(inputs)} inputs")
        pairs = []
        for i, (o, t) in enumerate(zip(outputs, inputs)):
            out, inp = _Arg(o, f"outputs[{i}]"), _Arg(t, f"inputs[{i}]")
            _same([inp, out], what)
            if o.numel() * in_scale != t.numel() * out_scale:
                raise ValueError(
                    f"ringcc: {what}: outputs[{i}] has {o.numel()} elements "
                    f"and inputs[{i}] {t.numel()}; with {self.size()} ranks "
                    f"the output needs {t.numel() * out_scale // in_scale}")
            pairs.append((out, inp))
        return pairs

    def allgather(self, output_tensors, input_tensors, opts=None):
        outputs = _one_list(output_tensors, "output_tensors")
        inp = _Arg(_one_list(input_tensors, "input_tensors"),
                   "input_tensors[0]")
        if len(outputs) == self.size() and not inp.cuda and \
                len({t.numel() for t in outputs}) > 1:
            return self._allgather_uneven(outputs, inp)
        outs = self._block_list(outputs, inp, "output_tensors[0]")

        def run():
            staging = torch.empty(self.size() * inp.tensor.numel(),
                                  dtype=inp.tensor.dtype,
                                  device=inp.tensor.device)
            s = _Arg(staging, "staging")
            self._call("ringcc_allgather", inp.address, s.address, inp.count,
                       inp.dtype)
            for i, o in enumerate(outputs):
                o.view(-1).copy_(staging.view(self.size(), -1)[i])
        return self._submit("all_gather", [inp.tensor], run, [list(outputs)], outs + [inp],
                            opts=opts)

    def _allgather_uneven(self, outputs, inp):
        """all_gather into tensors of different sizes: one
        ringcc_allgatherv into a staging buffer laid end to end."""
        outs = [_Arg(t, f"output_tensors[{i}]") for i, t in enumerate(outputs)]
        _same([inp] + outs, "all_gather")
        me = self.rank()
        _check_size(outs[me], inp.tensor.numel(), f"output_tensors[{me}]",
                    "this rank's block, the size of its input")
        counts, displs = self._counts([o.count for o in outs])

        def run():
            staging = torch.empty(sum(counts), dtype=_flat(inp.tensor).dtype)
            s = _Arg(staging, "staging")
            self._call("ringcc_allgatherv", inp.address, inp.count, s.address,
                       counts, displs, inp.dtype)
            for i, o in enumerate(outputs):
                _flat(o).copy_(staging[displs[i]:displs[i] + counts[i]])
        return self._submit("all_gather", [inp.tensor], run, [list(outputs)],
                            outs + [inp])

    def _block_list(self, tensors, like, name):
        if len(tensors) != self.size():
            raise ValueError(f"ringcc: argument '{name}' holds "
                             f"{len(tensors)} tensors; the group has "
                             f"{self.size()} ranks")
        args = [_Arg(t, f"{name}[{i}]") for i, t in enumerate(tensors)]
        for i, a in enumerate(args):
            _same([like, a], name)
            _check_size(a, like.tensor.numel(), f"{name}[{i}]",
                        "a block of the same size as the input")
        return args

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        """all_gather_coalesced: output_lists[r][i] receives rank r's
        input_list[i]; one allgather of the inputs laid end to end."""
        n = self.size()
        if len(output_lists) != n:
            raise ValueError(f"ringcc: all_gather_coalesced: argument "
                             f"'output_tensor_lists' holds {len(output_lists)}"
                             f" lists; the group has {n} ranks")
        ins = [_Arg(t, f"input_list[{i}]") for i, t in enumerate(input_list)]
        if not ins:
            return completed_work([])
        _same(ins, "all_gather_coalesced")
        outs = []
        for r, outputs in enumerate(output_lists):
            if len(outputs) != len(ins):
                raise ValueError(f"ringcc: all_gather_coalesced: "
                                 f"output_tensor_lists[{r}] holds "
                                 f"{len(outputs)} tensors, not one per input "
                                 f"({len(ins)})")
            for i, (o, inp) in enumerate(zip(outputs, ins)):
                a = _Arg(o, f"output_tensor_lists[{r}][{i}]")
                _same([inp, a], "all_gather_coalesced")
                _check_size(a, inp.tensor.numel(),
                            f"output_tensor_lists[{r}][{i}]",
                            f"input_list[{i}]'s block")
                outs.append(a)

        def run():
            flat = torch.cat([_flat(t) for t in input_list])
            gathered = torch.empty(n * flat.numel(), dtype=flat.dtype,
                                   device=flat.device)
            f, g = _Arg(flat, "flat"), _Arg(gathered, "gathered")
            self._call("ringcc_allgather", f.address, g.address, f.count,
                       f.dtype)
            rows = gathered.view(n, -1)
            for r, outputs in enumerate(output_lists):
                offset = 0
                for o in outputs:
                    k = _flat(o).numel()
                    _flat(o).copy_(rows[r, offset:offset + k])
                    offset += k
        return self._submit("all_gather_coalesced", list(input_list), run,
                            [list(o) for o in output_lists], outs + ins,
                            opts=opts)

    # ---- reduce-scatter ------------------------------------------------------------

    def reduce_scatter_single(self, output, input, opts=None):
        """_reduce_scatter_base / reduce_scatter_tensor."""
        op = self._reduce_op(opts or dist.ReduceScatterOptions())
        out, inp = _Arg(output, "output", op), _Arg(input, "input", op)
        _same([inp, out], "reduce_scatter_single")
        _check_size(inp, out.tensor.numel() * self.size(), "input",
                    f"reduce_scatter of {out.tensor.numel()} elements to "
                    f"{self.size()} ranks")

        def run():
            self._call("ringcc_reduce_scatter", inp.address, out.address,
                       out.count, out.dtype, op)
        return self._submit("reduce_scatter_tensor", [input], run, [output], [out, inp],
                            opts=opts)

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        op = self._reduce_op(opts or dist.ReduceScatterOptions())
        pairs = self._pairs(outputs, inputs, 1, self.size(), "reduce_scatter")
        for out, inp in pairs:
            _Arg(out.tensor, "outputs", op)

        def run():
            for out, inp in pairs:
                self._call("ringcc_reduce_scatter", inp.address, out.address,
                           out.count, out.dtype, op)
        return self._submit("reduce_scatter_tensor_coalesced", inputs, run, list(outputs),
                            [a for p in pairs for a in p], opts=opts)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        op = self._reduce_op(opts or dist.ReduceScatterOptions())
        if len(output_tensors) != 1:
            raise ValueError("ringcc: reduce_scatter takes one output tensor "
                             f"per process, got {len(output_tensors)}")
        out = _Arg(output_tensors[0], "output_tensors[0]", op)
        inputs = _one_list(input_tensors, "input_tensors")
        ins = self._block_list(inputs, out, "input_tensors[0]")
        output = output_tensors[0]

        def run():
            staging = torch.cat([_flat(t) for t in inputs])
            s = _Arg(staging, "staging", op)
            self._call("ringcc_reduce_scatter", s.address, out.address,
                       out.count, out.dtype, op)
        return self._submit("reduce_scatter", inputs, run, [output], ins + [out],
                            opts=opts)

    # ---- alltoall --------------------------------------------------------------------

    def all_to_all_single(self, output, input, output_split_sizes,
                          input_split_sizes, opts=None):
        """alltoall_base: equal blocks, or blocks of rows given by the split
        sizes."""
        out, inp = _Arg(output, "output"), _Arg(input, "input")
        _same([inp, out], "alltoall_base")
        n = self.size()
        if not output_split_sizes and not input_split_sizes:
            if inp.tensor.numel() % n:
                raise ValueError(f"ringcc: argument 'input' has "
                                 f"{inp.tensor.numel()} elements, not a "
                                 f"multiple of the {n} ranks")
            _check_size(out, inp.tensor.numel(), "output", "alltoall")

            def run():
                self._call("ringcc_alltoall", inp.address, out.address,
                           inp.count // n, inp.dtype)
            return self._submit("all_to_all", [input], run, [output], [out, inp],
                                opts=opts)
        if out.cuda:  # ringcc_alltoallv runs host buffers only
            send = self._splits(input, input_split_sizes, "input")
            recv = self._splits(output, output_split_sizes, "output")

            def run():
                self._exchange(send, recv)
            return self._submit("all_to_all", [input], run, [output], [out, inp],
                                opts=opts)
        # one ringcc_alltoallv: the blocks' elements (of the flat view) and
        # where they start, from the split sizes (no views made)
        sc, sd = self._counts(self._split_counts(inp, input_split_sizes,
                                                 "input"))
        rc, rd = self._counts(self._split_counts(out, output_split_sizes,
                                                 "output"))

        def run():
            self._call("ringcc_alltoallv", inp.address, sc, sd, out.address,
                       rc, rd, inp.dtype)
        return self._submit("all_to_all", [input], run, [output], [out, inp],
                            opts=opts)

    @staticmethod
    def _counts(counts):
        """ctypes arrays of counts and their running sums (displacements)."""
        arr = ctypes.c_size_t * len(counts)
        displs, at = [], 0
        for c in counts:
            displs.append(at)
            at += c
        return arr(*counts), arr(*displs)

    alltoall_base = all_to_all_single

    def _split_sizes(self, tensor, sizes, name):
        """The rows of `tensor` for each rank (split sizes checked); and the
        rows it has."""
        n = self.size()
        rows = tensor.shape[0] if tensor.dim() else 1
        if not sizes:
            if rows % n:
                raise ValueError(f"ringcc: argument '{name}' has {rows} rows, "
                                 f"not a multiple of the {n} ranks")
            sizes = [rows // n] * n
        if len(sizes) != n:
            raise ValueError(f"ringcc: argument '{name}_split_sizes' has "
                             f"{len(sizes)} entries; the group has {n} ranks")
        if any(s < 0 for s in sizes) or sum(sizes) != rows:
            raise ValueError(f"ringcc: argument '{name}_split_sizes' "
                             f"{list(sizes)} does not add up to the {rows} "
                             f"rows of '{name}'")
        return list(sizes), rows

    def _splits(self, tensor, sizes, name):
        """The blocks of `tensor` (views of rows) for each rank."""
        sizes, _ = self._split_sizes(tensor, sizes, name)
        return list(torch.split(tensor, sizes, dim=0)) if tensor.dim() \
            else [tensor]

    def _split_counts(self, arg, sizes, name):
        """The elements of each rank's block in arg's flat view (an _Arg),
        from the split sizes in rows."""
        sizes, rows = self._split_sizes(arg.tensor, sizes, name)
        per = arg.count // rows if rows else 0
        return [s * per for s in sizes]

    def _exchange(self, send, recv):
        """Block send[j] to rank j, block recv[i] from rank i, in the pairs
        of a round-robin tournament (the lower rank sends first)."""
        me = self.rank()
        recv[me].copy_(send[me])
        for peer in _tournament(self.size(), me):
            s, r = _Arg(send[peer], "block"), _Arg(recv[peer], "block")
            order = ("send", "recv") if me < peer else ("recv", "send")
            for what in order:
                a = s if what == "send" else r
                if a.count:
                    self._call(f"ringcc_{what}", a.address, a.count, a.dtype,
                               peer)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        n = self.size()
        for name, ts in (("output_tensors", output_tensors),
                         ("input_tensors", input_tensors)):
            if len(ts) != n:
                raise ValueError(f"ringcc: argument '{name}' holds {len(ts)} "
                                 f"tensors; the group has {n} ranks")
        outs = [_Arg(t, f"output_tensors[{i}]")
                for i, t in enumerate(output_tensors)]
        ins = [_Arg(t, f"input_tensors[{i}]")
               for i, t in enumerate(input_tensors)]
        _same(outs + ins, "alltoall")
        equal = len({t.numel() for t in list(output_tensors)
                     + list(input_tensors)}) == 1

        def run():
            if equal:
                staging_in = torch.cat([_flat(t) for t in input_tensors])
                staging_out = torch.empty_like(staging_in)
                si, so = _Arg(staging_in, "s"), _Arg(staging_out, "s")
                self._call("ringcc_alltoall", si.address, so.address,
                           si.count // n, si.dtype)
                for i, t in enumerate(output_tensors):
                    _flat(t).copy_(staging_out.view(n, -1)[i])
            else:
                self._exchange([t.view(-1) for t in input_tensors],
                               [t.view(-1) for t in output_tensors])
        return self._submit("all_to_all", input_tensors, run, list(output_tensors), outs + ins,
                            opts=opts)

    # ---- gather and scatter --------------------------------------------------------

    def gather(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.GatherOptions()
        root = self._root(opts.rootRank, "rootRank")
        inp = _Arg(_one_list(input_tensors, "input_tensors"),
                   "input_tensors[0]")
        me = self.rank()
        if me == root:
            outputs = _one_list(output_tensors, "output_tensors")
            outs = self._block_list(outputs, inp, "output_tensors[0]")
        elif output_tensors and any(output_tensors):
            raise ValueError("ringcc: gather: argument 'output_tensors' must "
                             "be empty on a rank other than the root")
        else:
            outputs, outs = [], []

        def run():  # one ringcc_gather, into staging at the root
            staging = torch.empty(self.size() * inp.count,
                                  dtype=_flat(inp.tensor).dtype,
                                  device=inp.tensor.device) if me == root \
                else None
            s = _Arg(staging, "staging") if staging is not None else None
            self._call("ringcc_gather", inp.address, s and s.address,
                       inp.count, inp.dtype, root)
            for i, o in enumerate(outs):
                _flat(o.tensor).copy_(staging.view(self.size(), -1)[i])
        return self._submit("gather", [inp.tensor], run, [list(outputs)] if me == root else [],
                            outs + [inp], opts=opts)

    def scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.ScatterOptions()
        root = self._root(opts.rootRank, "rootRank")
        out = _Arg(_one_list(output_tensors, "output_tensors"),
                   "output_tensors[0]")
        me = self.rank()
        if me == root:
            inputs = _one_list(input_tensors, "input_tensors")
            ins = self._block_list(inputs, out, "input_tensors[0]")
        elif input_tensors and any(input_tensors):
            raise ValueError("ringcc: scatter: argument 'input_tensors' must "
                             "be empty on a rank other than the root")
        else:
            ins = []

        def run():  # one ringcc_scatter, from staging at the root
            s = None
            if me == root:
                s = _Arg(torch.cat([_flat(a.tensor) for a in ins]),
                         "staging")
            self._call("ringcc_scatter", s and s.address, out.address,
                       out.count, out.dtype, root)
        return self._submit("scatter", [out.tensor], run, [out.tensor], ins + [out],
                            opts=opts)

    # ---- barrier ------------------------------------------------------------------------

    def barrier(self, opts=None):
        def run():
            self._call("ringcc_barrier")
        work = self._submit("barrier", [], run, [])
        timeout = getattr(opts, "timeout", None)
        ms = int(timeout.total_seconds() * 1000) if timeout else 0
        if 0 < ms < self._timeout_ms:
            return _BoundedWork(self, work.get_future(), "barrier", ms)
        return work

    # torch reads a group's _device_types two ways: "cpu in it" (can the
    # group serve CPU tensors: monitored_barrier requires it) and "is it
    # empty" (has the group C++ per-device backends: only then does
    # init_process_group attach its flight recorder, which cannot record a
    # Python group). This group serves cpu and cuda and has no C++ backend.
    @property
    def _device_types(self):
        return _SERVED_DEVICES

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        """Gloo's monitored barrier, through the group's store: every other
        rank reports to rank 0, which waits for each in rank order within
        timeout and then releases them all, or names the ranks that did
        not arrive; the others then fail naming rank 0."""
        ms = int(timeout.total_seconds() * 1000) if timeout is not None \
            else self._timeout_ms
        self._monitored = getattr(self, "_monitored", 0) + 1
        key = f"ringcc/monitored_barrier/{self._monitored}"
        me, n = self.rank(), self.size()
        if me != 0:
            self._store.set(f"{key}/arrived/{me}", b"1")
            try:
                self._store.wait([f"{key}/release"],
                                 datetime.timedelta(milliseconds=ms))
                ok = self._store.get(f"{key}/release") == b"ok"
            except Exception:  # noqa: BLE001 - timed out or store gone
                ok = False
            if not ok:
                raise RuntimeError(
                    f"Rank {me} successfully reached monitoredBarrier, but "
                    f"received errors while waiting for send/recv from rank "
                    f"0. Please check rank 0 logs for faulty rank.")
            return
        deadline = time.monotonic() + ms / 1000
        failed = []
        for r in range(1, n):
            left = deadline - time.monotonic()
            if left <= 0 and not failed and r == 1:
                self._store.set(f"{key}/release", b"failed")
                raise RuntimeError(f"Rank 0 timed out in monitoredBarrier "
                                   f"after {ms} ms.")
            try:
                self._store.wait([f"{key}/arrived/{r}"], datetime.timedelta(
                    milliseconds=max(1, int(left * 1000))))
            except Exception:  # noqa: BLE001 - this rank did not arrive
                failed.append(r)
                if not wait_all_ranks:
                    break
        if failed:
            self._store.set(f"{key}/release", b"failed")
            if len(failed) == 1 and not wait_all_ranks:
                raise RuntimeError(f"Rank {failed[0]} failed to pass "
                                   f"monitoredBarrier in {ms} ms")
            raise RuntimeError(
                f"Ranks {', '.join(str(r) for r in failed)} failed to pass "
                f"monitoredBarrier in {ms} ms")
        self._store.set(f"{key}/release", b"ok")

    # ---- point to point ----------------------------------------------------------------

    def _channel(self, kind, peer):
        if not 0 <= peer < self.size() or peer == self.rank():
            raise ValueError(f"ringcc: {'dst' if kind == 'send' else 'src'} "
                             f"rank {peer} is not another rank of this group "
                             f"(size {self.size()}, this rank {self.rank()})")
        with self._channels_lock:
            if self._shut:
                raise RuntimeError("ringcc: this process group was shut down")
            key = (kind, peer)
            ch = self._channels.get(key)
            if ch is None:
                if kind == "send":
                    ch = _p2p.SendChannel(
                        self._store, f"ringcc/p2p/{self.rank()}->{peer}",
                        peer, self._timeout_ms)
                else:
                    ch = _p2p.RecvChannel(
                        self._inbox(), self._store,
                        f"ringcc/p2p/{peer}->{self.rank()}", peer,
                        self._timeout_ms)
                self._channels[key] = ch
            return ch

    _p2p_inbox = None

    def _inbox(self):
        """The group's _p2p.Inbox (made at its first receive; called with
        _channels_lock held)."""
        if self._p2p_inbox is None:
            me = self.rank()
            self._p2p_inbox = _p2p.Inbox(
                lambda peer: self._channel("recv", peer),
                [p for p in range(self.size()) if p != me])
        return self._p2p_inbox

    def _p2p_tensor(self, tensors, name):
        t = _one_list([tensors] if isinstance(tensors, torch.Tensor)
                      else tensors, name)
        a = _Arg(t, f"{name}[0]")
        if a.cuda:
            raise ValueError("ringcc: send/recv of CUDA tensors is not "
                             "supported yet; copy to the CPU first")
        return t

    def send(self, tensors, dstRank, tag=0):
        t = self._p2p_tensor(tensors, "tensors")
        if self._batch is not None:
            return self._batched("send", t, dstRank)
        ch = self._channel("send", dstRank)
        record = self._record("send", [t])
        return self._work(self._recorded(ch.send(t, tag), record))

    def recv(self, tensors, srcRank, tag=0):
        t = self._p2p_tensor(tensors, "tensors")
        if self._batch is not None:
            return self._batched("recv", t, srcRank)
        return self._received(t, srcRank, tag, "recv")

    def recv_anysource(self, tensors, tag=0):
        """recv from whichever rank's message with `tag` comes first
        (dist.recv/irecv without src); the Work's source_rank() says who
        sent it."""
        t = self._p2p_tensor(tensors, "tensors")
        if self._batch is not None:
            raise ValueError("ringcc: a receive from any source cannot be "
                             "part of batch_isend_irecv (name its src)")
        if self.size() == 1:
            raise ValueError("ringcc: recv from any source in a group of "
                             "one rank: there is no other rank to send")
        return self._received(t, None, tag, "recvAnySource")

    recvAnysource = recv_anysource

    def _received(self, t, src, tag, title):
        inbox = self._p2p_inbox
        if inbox is None:
            with self._channels_lock:
                inbox = self._inbox()
        record = self._record(title, [t])
        try:
            req = inbox.recv(t, tag, src)  # a bad src raises here
        except BaseException:
            if record is not None:
                _record_exit(record)
            raise
        return self._work(self._recorded(req.done.future, record),
                          source=lambda: req.source)

    # batch_isend_irecv (between start_ and end_coalescing): its sends and
    # receives are kept, then run as one ringcc group on the group's
    # communicator (one task on the worker): no threads or communicators
    # per peer, and no order of them deadlocks. Tags are not matched: the
    # messages of a batch match the peer's batch in order per pair.
    def _batched(self, kind, t, peer):
        if not 0 <= peer < self.size():
            raise ValueError(f"ringcc: {'dst' if kind == 'send' else 'src'} "
                             f"rank {peer} is not a rank of this group (size "
                             f"{self.size()})")
        done = Completion()
        self._batch.append((kind, _Arg(t, "tensor"), peer, done))
        return self._work(done.future)

    def _submit_batch(self, batch):
        def run():
            lib = ringcc._lib.lib
            error = None
            ringcc.comm._check(lib.ringcc_group_start(), "ringcc_group_start")
            try:
                for kind, a, peer, _ in batch:
                    self._call("ringcc_" + kind, a.address, a.count,
                               a.dtype, peer)
            except Exception as e:  # noqa: BLE001 - ends the group first
                error = e
            rc = lib.ringcc_group_end()
            try:
                if error is not None:
                    raise error
                ringcc.comm._check(rc, "ringcc_group_end",
                                   self._comm.handle)
            except Exception as e:  # noqa: BLE001 - every Work fails
                for _, _, _, done in batch:
                    done.set_exception(e)
                raise
            for _, a, _, done in batch:
                done.set_result([a.tensor])
        run = self._titled("batch_isend_irecv", run)
        self._worker.submit(run, [a.tensor for _, a, _, _ in batch])

    @staticmethod
    def _recorded(future, record):
        """Ends the profiler record when future completes, on the channel's
        thread that completes it; a receive that a kept message completed
        at once, in the calling thread, ends it on a thread of its own, so
        that the profiler lists every send and recv as asynchronous, as it
        lists Gloo's."""
        if record is not None:
            caller = threading.get_ident()

            def end(_):
                if threading.get_ident() != caller:
                    _record_exit(record)
                    return
                t = threading.Thread(target=_record_exit, args=(record,))
                t.start()
                t.join()
            future.add_done_callback(end)
        return future

    # ---- teardown -------------------------------------------------------------------------

    def shutdown(self):
        """Lets the queued operations finish, stops the threads and frees
        the communicators. Called by destroy_process_group."""
        with self._channels_lock:
            if self._shut:
                return
            self._shut = True
            channels = list(self._channels.values())
        self._worker.close()
        self._stop(channels, clean=True)

    def abort(self):
        """Makes blocked calls return (RINGCC_ERR_ABORTED) and frees the
        communicators without waiting for queued operations."""
        with self._channels_lock:
            self._shut = True
            channels = list(self._channels.values())
        self._worker.close(join=False)
        self._comm.abort()
        self._stop(channels)

    def _stop(self, channels, clean=False):
        """Stops the channels' and CUDA threads, joins every thread, frees
        the communicators. clean (shutdown): a channel whose thread has
        nothing left to do is destroyed (its peer reads a goodbye, not the
        failure an abort shows it, which it would log as a warning); one
        still inside a call within a second (a send its receiver never
        takes, a receive nothing comes for) is aborted, as every channel is
        by abort()."""
        for ch in channels:
            ch.close()
        if clean:
            until = time.monotonic() + 1.0
            for ch in channels:
                ch.join(timeout=max(0.0, until - time.monotonic()))
        leaving = []
        for ch in channels:
            comm = ch._comm
            if comm is None:
                continue
            if clean and not ch.alive():
                leaving.append(comm)
            else:
                comm.abort()
        # In parallel: each destroy waits (3 s at most) for its peer's
        # goodbye, and the peers destroy their ends in their own order.
        destroys = [threading.Thread(target=_quiet_destroy, args=(c,),
                                     name="ringcc-p2p-destroy")
                    for c in leaving]
        for t in destroys:
            t.start()
        if self._cuda_done is not None:
            self._cuda_done.close(join=False)
        for ch in channels:
            ch.join(timeout=5.0)
        if self._cuda_done is not None:
            self._cuda_done.join(timeout=5.0)
        self._worker.join(timeout=5.0)
        for t in destroys:
            t.join()
        self._comm.destroy()


def _quiet_destroy(comm):
    """A channel's ringcc_comm_destroy at shutdown; a failure there (its
    peer failed meanwhile) concerns no operation any more."""
    try:
        comm.destroy()
    except Exception:  # noqa: BLE001 - nothing waits for it
        pass


class _ServedDevices(tuple):
    """The devices a ProcessGroupRingcc serves, for `in`; empty otherwise
    (no C++ backend is registered on the group)."""

    def __contains__(self, device):
        return torch.device(device).type in ("cpu", "cuda")


_SERVED_DEVICES = _ServedDevices()


class _BoundedWork(RingccWork):
    """A Work whose wait() gives up after a per-call timeout (barrier's
    timeout=): then the group's communicator is aborted, since the library
    call still waits for ranks that did not come, and wait() raises
    "Timed out waiting <ms>ms"."""

    def __init__(self, pg, future, title, ms):
        super().__init__(future)
        self._pg, self._title, self._ms = pg, title, ms

    def wait(self, timeout=None):
        fut = self._future
        end = time.monotonic() + self._ms / 1000
        while not fut.done() and time.monotonic() < end:
            time.sleep(0.001)
        if not fut.done():
            self._pg._comm.abort()
            raise RuntimeError(
                f"ringcc: {self._title}: Timed out waiting {self._ms}ms for "
                "the other ranks (the communicator is aborted)")
        return super().wait()


def create(store, rank, size, timeout, name="ringcc"):
    """The creator registered with torch.distributed.Backend; name is what
    profiler events are named after ("ringcc:all_reduce", ...): another
    backend's name where ringcc stands in for it."""
    return ProcessGroupRingcc(store, rank, size, timeout, name)

