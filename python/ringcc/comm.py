"""comm.py - communicators and their collectives, over the C API.

A `Comm` owns one ringcc_comm_t. Each collective checks its arguments
(buffers through _buffers.describe, counts, datatypes, root, peer) and
raises before the library is called, so a bad argument on one rank sends
nothing and leaves the communicator working; then it makes one C call, with
the GIL released (ctypes.CDLL), and turns a non-zero result into a
`RingccError` carrying the code and ringcc_comm_last_error()'s message.

In place, both ways: pass the one buffer alone (`recvbuf=None`), or
`IN_PLACE` as `sendbuf` and the buffer as `recvbuf`; the input is where
MPI_IN_PLACE puts it (all of the buffer for allreduce, reduce at the root,
reduce_scatter and alltoall; the rank's own block for allgather).
Collectives return the object that holds the result.

As in the C API, a communicator is used by one thread at a time; different
communicators may be used from different threads at once.
"""

import ctypes
import operator

from . import _lib
from ._buffers import datatype_of, describe
from ._lib import Datatype, Op, Result, lib
from ._requests import async_capable, in_group

HOST = _lib.SPLIT_HOST
ANY_TAG = -1  # Recv's tag: ringcc has no tags (mpi4py's MPI.ANY_TAG)
ANY_SOURCE = _lib.ANY_SOURCE  # recv's peer: whichever rank's message is first


class _InPlace:
    """The IN_PLACE marker (MPI_IN_PLACE, RINGCC_IN_PLACE)."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self):
        return "ringcc.IN_PLACE"

    def __reduce__(self):
        return (_InPlace, ())


IN_PLACE = _InPlace()


class RingccError(RuntimeError):
    """A libringcc call failed. `code` is the ringcc_result_t (a `Result`),
    `message` the library's detailed message (ringcc_comm_last_error)."""

    def __init__(self, code, message, call=None):
        self.code = Result(code) if code in Result._value2member_map_ else code
        self.message = message
        self.call = call
        name = lib.ringcc_strerror(int(code)).decode(errors="replace")
        text = f"{call}: {name}" if call else name
        super().__init__(f"{text}: {message}" if message else text)


def _check(rc, call, handle=None):
    if rc != Result.SUCCESS:
        msg = lib.ringcc_comm_last_error(handle)
        raise RingccError(rc, msg.decode(errors="replace") if msg else "",
                          call)


_OP_NAMES = {"sum": Op.SUM, "prod": Op.PROD, "product": Op.PROD,
             "min": Op.MIN, "max": Op.MAX, "avg": Op.AVG}


def op_of(op):
    """An Op from an Op, its value, or its name ('sum', 'prod', 'min', 'max',
    'avg'), or the value of a PremulSum (Comm.premul_sum); ValueError
    otherwise."""
    if isinstance(op, PremulSum):
        return op.value
    if isinstance(op, str):
        if op.lower() in _OP_NAMES:
            return _OP_NAMES[op.lower()]
    elif isinstance(op, int) and op in Op._value2member_map_:
        return Op(op)
    raise ValueError(f"argument 'op' is {op!r}; ringcc's ops are sum, prod, "
                     "min, max and avg (names or ringcc.SUM, ...)")


def _scalar_bytes(scalar, dtype):
    """scalar as one value of dtype (NumPy's conversion, ml_dtypes' for
    bfloat16 and float8: round to nearest even)."""
    import numpy as np
    name = {Datatype.BFLOAT16: "bfloat16",
            Datatype.FLOAT8_E4M3: "float8_e4m3fn",
            Datatype.FLOAT8_E5M2: "float8_e5m2"}.get(dtype)
    if name is None:
        np_dtype = np.dtype(dtype.name.lower())
    else:
        import ml_dtypes
        np_dtype = np.dtype(getattr(ml_dtypes, name))
    return np.array([scalar]).astype(np_dtype).tobytes()


class PremulSum:
    """A premul-sum op of one communicator (ringcc_op_create_premul_sum):
    each rank's input is multiplied by the scalar, then summed. Pass it as
    `op` to allreduce, reduce and reduce_scatter on buffers of its dtype;
    destroy() (or a with block) frees it, and the communicator's destroy
    does too."""

    def __init__(self, comm, scalar, dtype):
        self._comm, self.dtype = comm, datatype_of(dtype)
        raw = _scalar_bytes(scalar, self.dtype)
        value = ctypes.c_int()
        _check(lib.ringcc_op_create_premul_sum(ctypes.byref(value), raw,
                                               self.dtype, comm._live()),
               "ringcc_op_create_premul_sum", comm._handle)
        self.value, self.scalar, self._alive = value.value, scalar, True

    def destroy(self):
        """Frees the op; its value stays, and a call given it after this
        fails (RingccError naming 'op'). A second destroy does nothing."""
        if self._alive and self._comm._handle:
            _check(lib.ringcc_op_destroy(self.value, self._comm._handle),
                   "ringcc_op_destroy", self._comm._handle)
        self._alive = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def __repr__(self):
        return (f"PremulSum({self.scalar!r}, {self.dtype.name.lower()}, "
                f"op {self.value})")


def _int_arg(value, name):
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"argument '{name}' is {value!r}, not an integer") \
            from None


def _stream_address(stream):
    """A cudaStream_t (int) from None, an int, or an object with
    `cuda_stream` (torch.cuda.Stream) or `ptr` (CuPy)."""
    if stream is None:
        return None
    for attr in ("cuda_stream", "ptr"):
        if hasattr(stream, attr):
            return int(getattr(stream, attr)) or None
    return _int_arg(stream, "stream") or None


def _same_kind(a, b, a_name, b_name):
    if a.dtype != b.dtype:
        raise TypeError(f"argument '{b_name}' has dtype {b.dtype.name.lower()}"
                        f" but '{a_name}' has {a.dtype.name.lower()}; they "
                        "must match")
    if a.device != b.device:
        raise ValueError(f"argument '{b_name}' is {b.device} memory but "
                         f"'{a_name}' is {a.device} memory")


def _uid_struct(uid):
    if isinstance(uid, UniqueId):
        return uid._struct
    if isinstance(uid, (bytes, bytearray)) and len(uid) == 128:
        return UniqueId(bytes(uid))._struct
    raise TypeError(f"argument 'uid' is {type(uid).__name__}; pass what "
                    "ringcc.get_unique_id() returned (or its 128 bytes)")


class UniqueId:
    """A rendezvous id (ringcc_unique_id_t): give the same one to every rank.
    `bytes(uid)` and `UniqueId(data)` carry it between processes; it pickles."""

    __slots__ = ("_struct",)

    def __init__(self, data=None):
        self._struct = _lib.UniqueIdStruct()
        if data is not None:
            data = bytes(data)
            if len(data) != 128:
                raise ValueError(f"a ringcc unique id is 128 bytes, got "
                                 f"{len(data)}")
            ctypes.memmove(ctypes.addressof(self._struct), data, 128)

    def __bytes__(self):
        return ctypes.string_at(ctypes.addressof(self._struct), 128)

    def __reduce__(self):
        return (UniqueId, (bytes(self),))

    def __eq__(self, other):
        return isinstance(other, UniqueId) and bytes(self) == bytes(other)

    def __hash__(self):
        return hash(bytes(self))

    def __repr__(self):
        return "ringcc.UniqueId(<128 bytes>)"


def get_unique_id():
    """A new UniqueId. This process then serves the rendezvous from a
    background thread until every rank arrived (or the timeout passed)."""
    uid = UniqueId()
    _check(lib.ringcc_get_unique_id(ctypes.byref(uid._struct)),
           "ringcc_get_unique_id")
    return uid


def _config(timeout, config):
    fields = dict(config)
    if timeout is not None:
        if "timeout_ms" in fields:
            raise TypeError("pass either 'timeout' (seconds) or 'timeout_ms'")
        fields["timeout_ms"] = int(round(float(timeout) * 1000))
    if isinstance(fields.get("algo"), str):
        fields["algo"] = _lib.Algo.parse(fields["algo"])
    known = {name for name, _ in _lib.ConfigStruct._fields_} - {
        "size", "magic", "version", "reserved"}
    unknown = set(fields) - known
    if unknown:
        raise TypeError(f"unknown config field(s) {sorted(unknown)}; known: "
                        f"timeout (seconds), {', '.join(sorted(known))}")
    return _lib.config_struct(**fields)


class Comm:
    """A communicator.

    Comm(nranks, uid, rank, timeout=None, **config): join the ranks that got
    the same `uid` (ringcc_comm_init). Comm.from_env(): the launcher's
    variables (ringcc_comm_init_env). `timeout` is in seconds (every
    blocking wait, init included); the other keywords are ringcc_config_t's
    fields (algo, debug_level, chunk_bytes, nslots, shm_disable, check,
    socket_ifname, net_chunk_bytes, cuda_device, checksum, timeout_ms).
    """

    def __init__(self, nranks, uid, rank, timeout=None, **config):
        nranks = _int_arg(nranks, "nranks")
        rank = _int_arg(rank, "rank")
        cfg = _config(timeout, config)
        handle = ctypes.c_void_p()
        _check(lib.ringcc_comm_init(ctypes.byref(handle), nranks,
                                    ctypes.byref(_uid_struct(uid)), rank,
                                    ctypes.byref(cfg)),
               "ringcc_comm_init")
        self._adopt(handle)

    @classmethod
    def from_env(cls, timeout=None, **config):
        """A communicator from RINGCC_RANK/NRANKS/ROOT (ringcc-run), mpirun,
        srun or torchrun's variables (see docs/environment.md)."""
        cfg = _config(timeout, config)
        handle = ctypes.c_void_p()
        _check(lib.ringcc_comm_init_env(ctypes.byref(handle),
                                        ctypes.byref(cfg)),
               "ringcc_comm_init_env")
        comm = cls.__new__(cls)
        comm._adopt(handle)
        return comm

    def _adopt(self, handle):
        self._handle = handle.value
        value = ctypes.c_int()
        _check(lib.ringcc_comm_rank(self._handle, ctypes.byref(value)),
               "ringcc_comm_rank", self._handle)
        self._rank = value.value
        _check(lib.ringcc_comm_size(self._handle, ctypes.byref(value)),
               "ringcc_comm_size", self._handle)
        self._size = value.value

    # ---- lifecycle --------------------------------------------------------

    @property
    def rank(self):
        return self._rank

    @property
    def size(self):
        return self._size

    @property
    def handle(self):
        """The ringcc_comm_t as an int (for other ctypes or C code)."""
        return self._live()

    def _live(self):
        if self._handle is None:
            raise ValueError("this communicator was destroyed")
        return self._handle

    def destroy(self):
        """Frees the communicator (local; no communication). Idempotent."""
        handle, self._handle = getattr(self, "_handle", None), None
        if handle is not None:
            _check(lib.ringcc_comm_destroy(handle), "ringcc_comm_destroy")

    def abort(self):
        """ringcc_comm_abort: a call blocked in another thread returns
        RINGCC_ERR_ABORTED; the communicator is freed."""
        handle, self._handle = getattr(self, "_handle", None), None
        if handle is not None:
            _check(lib.ringcc_comm_abort(handle), "ringcc_comm_abort")

    def revoke(self):
        """ringcc_comm_revoke (NCCL's ncclCommRevoke): what is in flight on
        this rank (a call blocked in another thread, requests) ends with
        RINGCC_ERR_ABORTED and so do later calls; returns once nothing runs.
        Local (peers are not told). The communicator stays for shrink(),
        split() and destroy()."""
        _check(lib.ringcc_comm_revoke(self._live()), "ringcc_comm_revoke",
               self._handle)

    @property
    def cuda_device(self):
        """The CUDA device this rank uses for device buffers, or -1 (host
        buffers only)."""
        value = ctypes.c_int(-1)
        _check(lib.ringcc_comm_cuda_device(self._live(), ctypes.byref(value)),
               "ringcc_comm_cuda_device", self._handle)
        return value.value

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def __del__(self):
        try:
            self.destroy()
        except Exception:  # interpreter shutdown: nothing to report to
            pass

    def __repr__(self):
        state = "destroyed" if self._handle is None else \
            f"rank {self._rank} of {self._size}"
        return f"<ringcc.Comm {state}>"

    @property
    def last_error(self):
        """ringcc_comm_last_error(): "" when nothing failed."""
        return lib.ringcc_comm_last_error(self._live()).decode(
            errors="replace")

    def report(self):
        """ringcc_comm_report(): where this rank stands (safe from another
        thread while a collective runs)."""
        buf = ctypes.create_string_buffer(4096)
        _check(lib.ringcc_comm_report(self._live(), buf, len(buf)),
               "ringcc_comm_report", self._handle)
        return buf.value.decode(errors="replace")

    def async_error(self):
        """ringcc_comm_get_async_error(): a Result (SUCCESS when none)."""
        r = ctypes.c_int()
        _check(lib.ringcc_comm_get_async_error(self._live(), ctypes.byref(r)),
               "ringcc_comm_get_async_error", self._handle)
        return Result(r.value)

    def split(self, color, key=0):
        """MPI_Comm_split: a Comm of the ranks with the same color, ordered
        by (key, rank); None for color None or a negative color. Collective."""
        color = _lib.SPLIT_NOCOLOR if color is None else _int_arg(color, "color")
        if color < 0:
            color = _lib.SPLIT_NOCOLOR
        return self._split("ringcc_comm_split", color, _int_arg(key, "key"))

    def split_type(self, split_type=HOST, key=0):
        """MPI_Comm_split_type: ringcc.HOST gives one Comm per host."""
        return self._split("ringcc_comm_split_type",
                           _int_arg(split_type, "split_type"),
                           _int_arg(key, "key"))

    def premul_sum(self, scalar, dtype):
        """A PremulSum op of this communicator: scalar (read now) times each
        rank's input, then the sum, for buffers of dtype."""
        return PremulSum(self, scalar, dtype)

    def shrink(self, exclude=None):
        """ULFM's MPI_Comm_shrink, NCCL's ncclCommShrink: a Comm of the ranks
        not in exclude (a sequence of ranks), renumbered in order. Called
        by those ranks only, on a healthy Comm or one that lost ranks (after
        a ringcc.Error with code PEER_FAILED). exclude None: the ranks known
        to have failed, agreed among the survivors (every survivor gets the
        same Comm, or an error). This Comm stays as it was: destroy it."""
        if exclude is None:
            arr, n = None, 0
        else:
            ranks = [_int_arg(r, "exclude") for r in exclude]
            n = len(ranks)
            arr = (ctypes.c_int * max(n, 1))(*ranks)
        out = ctypes.c_void_p()
        _check(lib.ringcc_comm_shrink(self._live(), arr, n, ctypes.byref(out)),
               "ringcc_comm_shrink", self._handle)
        comm = Comm.__new__(Comm)
        comm._adopt(out)
        return comm

    def _split(self, fn, a, key):
        out = ctypes.c_void_p()
        _check(getattr(lib, fn)(self._live(), a, key, ctypes.byref(out)), fn,
               self._handle)
        if not out.value:
            return None
        comm = Comm.__new__(Comm)
        comm._adopt(out)
        return comm

    # ---- argument checks ---------------------------------------------------

    def _root(self, root, name="root"):
        root = _int_arg(root, name)
        if not 0 <= root < self._size:
            raise ValueError(f"argument '{name}' is {root}; it must be in "
                             f"[0, {self._size - 1}]")
        return root

    def _peer(self, peer):
        peer = self._root(peer, "peer")
        if peer == self._rank and not in_group():
            raise ValueError(f"argument 'peer' is this rank ({peer}); a "
                             "blocking send to oneself cannot complete")
        return peer

    def _pair(self, sendbuf, recvbuf):
        """(input Buffer or IN_PLACE_ADDRESS, output Buffer, in_place)."""
        if sendbuf is IN_PLACE:
            if recvbuf is None:
                raise TypeError("argument 'recvbuf' is None; with IN_PLACE "
                                "as 'sendbuf' the buffer goes in 'recvbuf'")
            return None, describe(recvbuf, "recvbuf", True), True
        if recvbuf is None:
            return None, describe(sendbuf, "sendbuf", True), True
        inp = describe(sendbuf, "sendbuf", False)
        out = describe(recvbuf, "recvbuf", True)
        _same_kind(inp, out, "sendbuf", "recvbuf")
        return inp, out, False

    def _blocks(self, buf, name, what):
        if buf.count % self._size:
            raise ValueError(f"argument '{name}' has {buf.count} elements "
                             f"(shape {buf.shape}), not a multiple of the "
                             f"{self._size} ranks ({what})")
        return buf.count // self._size

    def _run(self, fn, *args):
        _check(getattr(lib, fn)(*args), fn, self._handle)

    @staticmethod
    def _address(inp):
        return _lib.IN_PLACE_ADDRESS if inp is None else inp.address or None

    # ---- collectives -------------------------------------------------------

    @async_capable
    def allreduce(self, sendbuf, recvbuf=None, op=Op.SUM, *, stream=None):
        """Every rank gets the reduction of every rank's sendbuf."""
        handle, op = self._live(), op_of(op)
        inp, out, in_place = self._pair(sendbuf, recvbuf)
        if not in_place and inp.count != out.count:
            raise ValueError(f"argument 'recvbuf' has {out.count} elements "
                             f"(shape {out.shape}) but 'sendbuf' has "
                             f"{inp.count} (shape {inp.shape})")
        self._run("ringcc_allreduce", self._address(inp), out.address or None,
                  out.count, out.dtype, op, handle, _stream_address(stream))
        return out.obj

    @async_capable
    def reduce_scatter(self, sendbuf, recvbuf=None, op=Op.SUM, *, stream=None):
        """sendbuf holds size blocks; rank r gets block r reduced over the
        ranks. In place, the result is the first block of the buffer."""
        handle, op = self._live(), op_of(op)
        inp, out, in_place = self._pair(sendbuf, recvbuf)
        if in_place:
            count = self._blocks(out, "recvbuf" if recvbuf is not None
                                 else "sendbuf", "in place it holds a block "
                                 "per rank")
        else:
            count = out.count
            if inp.count != count * self._size:
                raise ValueError(
                    f"argument 'sendbuf' has {inp.count} elements (shape "
                    f"{inp.shape}); reduce_scatter needs {self._size} ranks x "
                    f"{count} (the size of 'recvbuf') = {count * self._size}")
        self._run("ringcc_reduce_scatter", self._address(inp),
                  out.address or None, count, out.dtype, op, handle,
                  _stream_address(stream))
        return out.obj

    @async_capable
    def allgather(self, sendbuf, recvbuf=None, *, stream=None):
        """Rank r's sendbuf lands at block r of every rank's recvbuf. In
        place, the rank's own block is read from its place in the buffer."""
        handle = self._live()
        inp, out, in_place = self._pair(sendbuf, recvbuf)
        if in_place:
            count = self._blocks(out, "recvbuf" if recvbuf is not None
                                 else "sendbuf", "in place it holds a block "
                                 "per rank")
        else:
            count = inp.count
            if out.count != count * self._size:
                raise ValueError(
                    f"argument 'recvbuf' has {out.count} elements (shape "
                    f"{out.shape}); allgather needs {self._size} ranks x "
                    f"{count} (the size of 'sendbuf') = {count * self._size}")
        self._run("ringcc_allgather", self._address(inp), out.address or None,
                  count, out.dtype, handle, _stream_address(stream))
        return out.obj

    @async_capable
    def bcast(self, buf, root=0, *, stream=None):
        """The root's buf is copied into every rank's buf."""
        handle, root = self._live(), self._root(root)
        b = describe(buf, "buf", root != self._rank)
        self._run("ringcc_bcast", b.address or None, b.count, b.dtype, root,
                  handle, _stream_address(stream))
        return b.obj

    @async_capable
    def reduce(self, sendbuf, recvbuf=None, op=Op.SUM, root=0, *,
               stream=None):
        """The root gets the reduction; recvbuf is ignored elsewhere."""
        handle, op, root = self._live(), op_of(op), self._root(root)
        if root != self._rank:
            if sendbuf is IN_PLACE:
                raise ValueError(f"argument 'sendbuf' is IN_PLACE on rank "
                                 f"{self._rank}, but IN_PLACE is only valid "
                                 f"at the root (rank {root})")
            inp = describe(sendbuf, "sendbuf", False)
            self._run("ringcc_reduce", inp.address or None, None, inp.count,
                      inp.dtype, op, root, handle, _stream_address(stream))
            return recvbuf
        inp, out, in_place = self._pair(sendbuf, recvbuf)
        if not in_place and inp.count != out.count:
            raise ValueError(f"argument 'recvbuf' has {out.count} elements "
                             f"(shape {out.shape}) but 'sendbuf' has "
                             f"{inp.count} (shape {inp.shape})")
        self._run("ringcc_reduce", self._address(inp), out.address or None,
                  out.count, out.dtype, op, root, handle,
                  _stream_address(stream))
        return out.obj

    @async_capable
    def alltoall(self, sendbuf, recvbuf=None, *, stream=None):
        """Block j of sendbuf goes to rank j; block i of recvbuf comes from
        rank i."""
        handle = self._live()
        inp, out, in_place = self._pair(sendbuf, recvbuf)
        name = "sendbuf" if in_place and recvbuf is None else "recvbuf"
        count = self._blocks(out, name, "alltoall sends a block per rank")
        if not in_place and inp.count != out.count:
            raise ValueError(f"argument 'recvbuf' has {out.count} elements "
                             f"(shape {out.shape}) but 'sendbuf' has "
                             f"{inp.count} (shape {inp.shape})")
        self._run("ringcc_alltoall", self._address(inp), out.address or None,
                  count, out.dtype, handle, _stream_address(stream))
        return out.obj

    # ---- gather, scatter, uneven collectives ---------------------------------

    def _sizes(self, values, name):
        """A ctypes array of size counts or displacements (elements)."""
        values = [_int_arg(v, f"{name}[{i}]") for i, v in enumerate(values)]
        if len(values) != self._size:
            raise ValueError(f"argument '{name}' has {len(values)} entries; "
                             f"it needs one per rank ({self._size})")
        if any(v < 0 for v in values):
            raise ValueError(f"argument '{name}' has a negative entry")
        return (ctypes.c_size_t * self._size)(*values)

    @staticmethod
    def _running(counts):
        out, at = [], 0
        for c in counts:
            out.append(at)
            at += int(c)
        return out

    def _root_blocks(self, many, many_name, one, one_name):
        """At the root of a gather or scatter: the block count of `many`
        (size blocks), and `one` described (None for IN_PLACE), one block."""
        count = self._blocks(many, many_name, "it holds a block per rank")
        if one is IN_PLACE:
            return count, None
        arg = describe(one, one_name, one_name == "recvbuf")
        _same_kind(arg, many, one_name, many_name)
        if arg.count != count:
            raise ValueError(f"argument '{one_name}' has {arg.count} "
                             f"elements; the root's '{many_name}' holds "
                             f"{self._size} blocks of {count}")
        return count, arg

    @async_capable
    def gather(self, sendbuf, recvbuf=None, root=0, *, stream=None):
        """Rank r's sendbuf lands at block r of the root's recvbuf (ignored
        elsewhere). In place at the root: sendbuf IN_PLACE, its block
        already at block root of recvbuf."""
        handle, root = self._live(), self._root(root)
        here = root == self._rank
        if sendbuf is IN_PLACE and not here:
            raise ValueError(f"argument 'sendbuf' is IN_PLACE on rank "
                             f"{self._rank}, but IN_PLACE is only valid at "
                             f"the root (rank {root})")
        if not here:
            inp = describe(sendbuf, "sendbuf", False)
            self._run("ringcc_gather", inp.address or None, None, inp.count,
                      inp.dtype, root, handle, _stream_address(stream))
            return recvbuf
        if recvbuf is None:
            raise TypeError("argument 'recvbuf' is None at the root")
        out = describe(recvbuf, "recvbuf", True)
        count, inp = self._root_blocks(out, "recvbuf", sendbuf, "sendbuf")
        self._run("ringcc_gather", self._address(inp), out.address or None,
                  count, out.dtype, root, handle, _stream_address(stream))
        return out.obj

    @async_capable
    def scatter(self, sendbuf, recvbuf, root=0, *, stream=None):
        """Block r of the root's sendbuf (ignored elsewhere) lands in rank
        r's recvbuf. In place at the root: recvbuf IN_PLACE (its block stays
        in sendbuf)."""
        handle, root = self._live(), self._root(root)
        here = root == self._rank
        if recvbuf is IN_PLACE and not here:
            raise ValueError(f"argument 'recvbuf' is IN_PLACE on rank "
                             f"{self._rank}, but IN_PLACE is only valid at "
                             f"the root (rank {root})")
        if not here:
            out = describe(recvbuf, "recvbuf", True)
            self._run("ringcc_scatter", None, out.address or None, out.count,
                      out.dtype, root, handle, _stream_address(stream))
            return out.obj
        inp = describe(sendbuf, "sendbuf", False)
        count, out = self._root_blocks(inp, "sendbuf", recvbuf, "recvbuf")
        self._run("ringcc_scatter", inp.address or None,
                  self._address(out), count, inp.dtype, root, handle,
                  _stream_address(stream))
        return sendbuf if out is None else out.obj

    @async_capable
    def allgatherv(self, sendbuf, recvbuf, counts, displs=None, *,
                   stream=None):
        """Rank r's sendbuf (counts[r] elements) lands at element displs[r]
        of every rank's recvbuf (default displs: the running sums of
        counts). sendbuf IN_PLACE: the rank's block is already there."""
        handle = self._live()
        counts = list(counts)
        c_counts = self._sizes(counts, "counts")
        c_displs = self._sizes(self._running(counts) if displs is None
                               else displs, "displs")
        out = describe(recvbuf, "recvbuf", True)
        extent = max([d + c for d, c in zip(c_displs, c_counts) if c] or [0])
        if out.count < extent:
            raise ValueError(f"argument 'recvbuf' has {out.count} elements; "
                             f"the blocks reach element {extent}")
        inp, count = None, c_counts[self._rank]
        if sendbuf is not IN_PLACE:
            inp = describe(sendbuf, "sendbuf", False)
            _same_kind(inp, out, "sendbuf", "recvbuf")
            count = inp.count
        self._run("ringcc_allgatherv", self._address(inp), count,
                  out.address or None, c_counts, c_displs, out.dtype, handle,
                  _stream_address(stream))
        return out.obj

    @async_capable
    def alltoallv(self, sendbuf, recvbuf, sendcounts, recvcounts,
                  sdispls=None, rdispls=None, *, stream=None):
        """sendcounts[j] elements from sdispls[j] go to rank j, which
        receives them at its rdispls[i] (default displacements: the running
        sums of the counts). sendbuf IN_PLACE: each block is sent from and
        replaced in recvbuf (recvcounts, rdispls; sendcounts ignored)."""
        handle = self._live()
        recvcounts = list(recvcounts)
        rc = self._sizes(recvcounts, "recvcounts")
        rd = self._sizes(self._running(recvcounts) if rdispls is None
                         else rdispls, "rdispls")
        out = describe(recvbuf, "recvbuf", True)
        if out.count < max([d + c for d, c in zip(rd, rc) if c] or [0]):
            raise ValueError(f"argument 'recvbuf' has {out.count} elements, "
                             "fewer than its blocks need")
        inp, sc, sd = None, None, None
        if sendbuf is not IN_PLACE:
            sendcounts = list(sendcounts)
            sc = self._sizes(sendcounts, "sendcounts")
            sd = self._sizes(self._running(sendcounts) if sdispls is None
                             else sdispls, "sdispls")
            inp = describe(sendbuf, "sendbuf", False)
            _same_kind(inp, out, "sendbuf", "recvbuf")
            if inp.count < max([d + c for d, c in zip(sd, sc) if c] or [0]):
                raise ValueError(f"argument 'sendbuf' has {inp.count} "
                                 "elements, fewer than its blocks need")
        self._run("ringcc_alltoallv", self._address(inp), sc, sd,
                  out.address or None, rc, rd, out.dtype, handle,
                  _stream_address(stream))
        return out.obj

    @async_capable
    def send(self, buf, peer, *, stream=None):
        """Sends buf to rank peer (matched in order with peer's recv)."""
        handle, peer = self._live(), self._peer(peer)
        b = describe(buf, "buf", False)
        self._run("ringcc_send", b.address or None, b.count, b.dtype, peer,
                  handle, _stream_address(stream))

    @async_capable
    def recv(self, buf, peer=ANY_SOURCE, *, stream=None):
        """Receives into buf from rank peer, or (ANY_SOURCE or None) from
        whichever rank's message comes first (host buffers); the sizes must
        match. recv_from also says who sent it."""
        handle, peer = self._live(), self._source(peer)
        b = describe(buf, "buf", True)
        self._run("ringcc_recv", b.address or None, b.count, b.dtype, peer,
                  handle, _stream_address(stream))
        return b.obj

    def recv_from(self, buf, peer=ANY_SOURCE):
        """Receives a message of at most buf's size from rank peer or (the
        default, ANY_SOURCE or None) from whichever rank's comes first
        (ringcc_recv_from; host buffers). Returns (source, count): the
        sender's rank and the elements received, at the start of buf."""
        handle, peer = self._live(), self._source(peer)
        b = describe(buf, "buf", True)
        st = _lib.RecvStatusStruct(-1, 0)
        self._run("ringcc_recv_from", b.address or None, b.count, b.dtype,
                  peer, handle, None, ctypes.byref(st))
        return st.source, st.count

    def _source(self, peer):
        return ANY_SOURCE if peer is None or peer == ANY_SOURCE \
            else self._peer(peer)

    @async_capable
    def barrier(self, *, stream=None):
        """Returns when every rank has entered the barrier."""
        self._run("ringcc_barrier", self._live(), _stream_address(stream))

    # ---- mpi4py's spelling ---------------------------------------------------
    # The buffer methods of mpi4py's Comm, on the calls above: the same
    # arguments in the same order, IN_PLACE as MPI.IN_PLACE, a buffer or
    # mpi4py's buffer specification [buf, datatype] / [buf, count, datatype]
    # (the datatype a ringcc Datatype, its name or a NumPy dtype; it and the
    # count must be the buffer's own: ringcc does not convert), None
    # returned. What MPI has and ringcc does not (tags, a status object,
    # uneven Reduce_scatter counts) raises ValueError before anything is
    # sent; Recv's source may be ringcc.ANY_SOURCE.

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return self.size

    def Allreduce(self, sendbuf, recvbuf, op=Op.SUM):
        self.allreduce(_spec(sendbuf, "sendbuf"), _spec(recvbuf, "recvbuf"),
                       op)

    def Bcast(self, buf, root=0):
        self.bcast(_spec(buf, "buf"), root)

    def Reduce(self, sendbuf, recvbuf, op=Op.SUM, root=0):
        self.reduce(_spec(sendbuf, "sendbuf"), _spec(recvbuf, "recvbuf"), op,
                    root)

    def Allgather(self, sendbuf, recvbuf):
        self.allgather(_spec(sendbuf, "sendbuf"), _spec(recvbuf, "recvbuf"))

    def Reduce_scatter_block(self, sendbuf, recvbuf, op=Op.SUM):
        self.reduce_scatter(_spec(sendbuf, "sendbuf"),
                            _spec(recvbuf, "recvbuf"), op)

    def Reduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=Op.SUM):
        recv = _spec(recvbuf, "recvbuf")
        if recvcounts is not None:
            counts = [operator.index(c) for c in recvcounts]
            mine = describe(recv, "recvbuf", True).count
            if len(counts) != self.size or any(c != mine for c in counts):
                raise ValueError(f"argument 'recvcounts' is {counts}; ringcc "
                                 f"reduces equal blocks ({mine} elements on "
                                 f"each of the {self.size} ranks)")
        self.reduce_scatter(_spec(sendbuf, "sendbuf"), recv, op)

    def Alltoall(self, sendbuf, recvbuf):
        self.alltoall(_spec(sendbuf, "sendbuf"), _spec(recvbuf, "recvbuf"))

    def Send(self, buf, dest, tag=0):
        _no_tag(tag, (0,))
        self.send(_spec(buf, "buf"), dest)

    def Recv(self, buf, source, tag=ANY_TAG, status=None):
        _no_tag(tag, (0, ANY_TAG))
        if status is not None:
            raise ValueError("argument 'status': ringcc's Recv has no status")
        self.recv(_spec(buf, "buf"), source)

    def Barrier(self):
        self.barrier()


def _no_tag(tag, allowed):
    if operator.index(tag) not in allowed:
        raise ValueError(f"argument 'tag' is {tag}; ringcc has no tags "
                         "(messages between two ranks match in order)")


def _spec(arg, name):
    """The buffer of an mpi4py buffer specification, checked against it."""
    if arg is IN_PLACE or arg is None or not isinstance(arg, (list, tuple)):
        return arg
    if not 1 <= len(arg) <= 3:
        raise TypeError(f"argument '{name}' is a {len(arg)}-item "
                        "specification; give buf, [buf, datatype] or "
                        "[buf, count, datatype]")
    buf = arg[0]
    b = describe(buf, name, False)
    if len(arg) == 3 and operator.index(arg[1]) != b.count:
        raise ValueError(f"argument '{name}': count {arg[1]}, but the buffer "
                         f"has {b.count} elements (shape {b.shape})")
    if len(arg) >= 2 and datatype_of(arg[-1]) != b.dtype:
        raise ValueError(f"argument '{name}': datatype {arg[-1]!r}, but the "
                         f"buffer holds {b.dtype.name.lower()}")
    return buf


__all__ = ["Comm", "UniqueId", "get_unique_id", "RingccError", "IN_PLACE",
           "HOST", "ANY_TAG", "op_of", "Datatype", "Op", "Result"]
