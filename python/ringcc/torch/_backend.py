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
through one flat buffer; alltoall with unequal sizes, gather and scatter
use the communicator's send/recv (pairwise rounds of a round-robin
tournament for alltoall, so no round can deadlock); send/recv with tags go
through _p2p's channels.

CPU tensors are what this backend is tested with. CUDA tensors are handed
to the library's device path, enqueued on torch's current stream of the
tensor's device (see docs/python.md for what was run).
"""

import datetime
import threading

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

import ringcc
from ringcc._lib import Datatype, Op

from . import _p2p
from ._engine import Worker, completed_work, work_for

# ---- datatypes and ops -----------------------------------------------------

_DTYPES = {
    torch.int8: Datatype.INT8, torch.uint8: Datatype.UINT8,
    torch.int32: Datatype.INT32, torch.int64: Datatype.INT64,
    torch.float16: Datatype.FLOAT16, torch.bfloat16: Datatype.BFLOAT16,
    torch.float32: Datatype.FLOAT32, torch.float64: Datatype.FLOAT64,
}
for _name, _dt in (("uint32", Datatype.UINT32), ("uint64", Datatype.UINT64)):
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


def ringcc_op(reduce_op):
    """The ringcc Op for a torch ReduceOp; ValueError for the others."""
    for torch_op, op in _OPS:
        if reduce_op == torch_op:
            return op
    raise ValueError(f"ringcc: ReduceOp.{_op_name(reduce_op)} is not "
                     "supported by the ringcc backend (it has SUM, PRODUCT, "
                     "MIN, MAX and AVG)")


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

    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
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
        self._comm = ringcc.Comm(size, uid, rank, timeout_ms=timeout_ms)
        self._worker = Worker(f"ringcc-pg-rank{rank}")
        self._channels = {}
        self._channels_lock = threading.Lock()
        self._shut = False
        self._tls = threading.local()

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
    # This group is its own backend for every device.
    supports_coalescing = False

    def _get_backend(self, device=None):
        return self

    def supports_tensor_alloc(self, device=None):
        return False

    def __repr__(self):
        return f"<ProcessGroupRingcc rank {self.rank()} of {self.size()}>"

    # ---- plumbing ----------------------------------------------------------------

    def _submit(self, run, outputs, args=()):
        if any(a.cuda for a in args):
            return self._submit_cuda(run, outputs, args)
        future, task = self._worker.submit(run, outputs)
        return self._work(future, self._worker, task)

    def _work(self, future, worker=None, task=None):
        if self._coalesced is not None:
            self._coalesced.append(future)
        return work_for(future, worker, task)

    # ---- coalescing (torch's _coalescing_manager) ---------------------------
    # Operations issued between start and end run as they are issued (in
    # order, on the worker); end_coalescing's Work completes when all have.

    _coalesced = None

    def start_coalescing(self, device=None):
        if self._coalesced is not None:
            raise RuntimeError("ringcc: start_coalescing while coalescing")
        self._coalesced = []

    def end_coalescing(self, device=None):
        if self._coalesced is None:
            raise RuntimeError("ringcc: end_coalescing without "
                               "start_coalescing")
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
        the stream is torch's current one for device tensors, else NULL."""
        self._comm._run(fn, *args, self._comm.handle,
                        getattr(self._tls, "stream", None))

    def _reduce_op(self, opts):
        return ringcc_op(opts.reduceOp)

    # ---- allreduce -------------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        op = self._reduce_op(opts or dist.AllreduceOptions())
        args = [_Arg(t, f"tensors[{i}]", op) for i, t in enumerate(tensors)]

        def run():
            for a in args:
                self._call("ringcc_allreduce", a.address, a.address, a.count,
                           a.dtype, op)
        return self._submit(run, list(tensors), args)

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
        return self._submit(run, list(tensors), args)

    # ---- broadcast and reduce ------------------------------------------------

    def broadcast(self, tensors, opts=None):
        opts = opts or dist.BroadcastOptions()
        root = self._root(opts.rootRank, "rootRank")
        args = [_Arg(t, f"tensors[{i}]") for i, t in enumerate(tensors)]

        def run():
            for a in args:
                self._call("ringcc_bcast", a.address, a.count, a.dtype, root)
        return self._submit(run, list(tensors), args)

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
        return self._submit(run, list(tensors), args)

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
        return self._submit(run, [output], [out, inp])

    _allgather_base = all_gather_single

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        pairs = self._pairs(outputs, inputs, self.size(), 1, "allgather")

        def run():
            for out, inp in pairs:
                self._call("ringcc_allgather", inp.address, out.address,
                           inp.count, inp.dtype)
        return self._submit(run, list(outputs),
                            [a for p in pairs for a in p])

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
        return self._submit(run, [list(outputs)], outs + [inp])

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
        return self._submit(run, [output], [out, inp])

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
        return self._submit(run, list(outputs),
                            [a for p in pairs for a in p])

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
        return self._submit(run, [output], ins + [out])

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
            return self._submit(run, [output], [out, inp])
        send = self._splits(input, input_split_sizes, "input")
        recv = self._splits(output, output_split_sizes, "output")

        def run():
            self._exchange(send, recv)
        return self._submit(run, [output], [out, inp])

    alltoall_base = all_to_all_single

    def _splits(self, tensor, sizes, name):
        """The blocks of `tensor` (views of rows) for each rank."""
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
        return list(torch.split(tensor, list(sizes), dim=0)) if tensor.dim() \
            else [tensor]

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
        return self._submit(run, list(output_tensors), outs + ins)

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

        def run():
            if me != root:
                if inp.count:
                    self._call("ringcc_send", inp.address, inp.count,
                               inp.dtype, root)
                return
            for i, o in enumerate(outs):
                if i == me:
                    o.tensor.copy_(inp.tensor.view_as(o.tensor))
                elif o.count:
                    self._call("ringcc_recv", o.address, o.count, o.dtype, i)
        return self._submit(run, [list(outputs)] if me == root else [],
                            outs + [inp])

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

        def run():
            if me != root:
                if out.count:
                    self._call("ringcc_recv", out.address, out.count,
                               out.dtype, root)
                return
            for i, a in enumerate(ins):
                if i == me:
                    out.tensor.copy_(a.tensor.view_as(out.tensor))
                elif a.count:
                    self._call("ringcc_send", a.address, a.count, a.dtype, i)
        return self._submit(run, [out.tensor], ins + [out])

    # ---- barrier ------------------------------------------------------------------------

    def barrier(self, opts=None):
        def run():
            self._call("ringcc_barrier")
        return self._submit(run, [])

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
                src, dst = (self.rank(), peer) if kind == "send" else \
                    (peer, self.rank())
                cls = _p2p.SendChannel if kind == "send" else _p2p.RecvChannel
                ch = cls(self._store, f"ringcc/p2p/{src}->{dst}", peer,
                         self._timeout_ms)
                self._channels[key] = ch
            return ch

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
        return self._work(self._channel("send", dstRank).send(t, tag))

    def recv(self, tensors, srcRank, tag=0):
        t = self._p2p_tensor(tensors, "tensors")
        return self._work(self._channel("recv", srcRank).recv(t, tag))

    def recv_anysource(self, tensors, tag=0):
        raise RuntimeError("ringcc: recv from any source is not supported "
                           "(libringcc has no probe); pass src=")

    recvAnysource = recv_anysource

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
        self._stop(channels)

    def abort(self):
        """Makes blocked calls return (RINGCC_ERR_ABORTED) and frees the
        communicators without waiting for queued operations."""
        with self._channels_lock:
            self._shut = True
            channels = list(self._channels.values())
        self._worker.close(join=False)
        self._comm.abort()
        self._stop(channels)

    def _stop(self, channels):
        """Stops the channels' and CUDA threads (a receive that waits is
        aborted), joins every thread, frees the communicators."""
        for ch in channels:
            ch.close()
            if ch._comm is not None:
                ch._comm.abort()
        if self._cuda_done is not None:
            self._cuda_done.close(join=False)
        for ch in channels:
            ch.join(timeout=5.0)
        if self._cuda_done is not None:
            self._cuda_done.join(timeout=5.0)
        self._worker.join(timeout=5.0)
        self._comm.destroy()


def create(store, rank, size, timeout):
    """The creator registered with torch.distributed.Backend."""
    return ProcessGroupRingcc(store, rank, size, timeout)

