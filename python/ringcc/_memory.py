"""_memory.py - registered memory: `ringcc.empty(shape, dtype, comm)`.

The array `empty` returns lives in memory from ringcc_mem_alloc (host
memory the other ranks of this host can map) registered with `comm`
(ringcc_comm_register), so a collective of `comm` whose buffers are all
such arrays, on every rank, may run zero-copy: each rank reads its peers'
inputs and writes their outputs where they are, with no FIFO in between
(docs/algorithms.md, "Zero-copy"). Calls on other buffers run as they
always do.

`empty` is collective over `comm`, as registration is: every rank calls it,
in the same order (the shapes may differ). Dropping the array frees the
memory (ringcc_mem_free, not collective); the registration, and the peers'
mappings of it, last until the communicator is destroyed: deregistering is
collective, and garbage collection comes at different times on different
ranks. So allocate the buffers a loop reuses once, as with NCCL's
ncclMemAlloc.
"""

import ctypes
import operator

from ._lib import Result, lib
from .comm import _check

try:
    import numpy as _np
except ImportError:
    _np = None


class _Registered:
    """One block of ringcc_mem_alloc, registered with a communicator: the
    base of the array `empty` returns (read by NumPy as a byte array through
    __array_interface__), freed when the last view of it goes."""

    def __init__(self, comm, nbytes):
        handle = comm.handle  # ValueError if destroyed
        # At least one byte: a zero-size array is registered too, so that
        # every rank makes the same registrations.
        size = max(nbytes, 1)
        ptr = ctypes.c_void_p()
        _check(lib.ringcc_mem_alloc(None, size, ctypes.byref(ptr)),
               "ringcc_mem_alloc")
        self.address = ptr.value
        reg = ctypes.c_void_p()
        rc = lib.ringcc_comm_register(handle, ptr, size, ctypes.byref(reg))
        if rc != Result.SUCCESS:
            self.free()
            _check(rc, "ringcc_comm_register", handle)
        self.__array_interface__ = {
            "version": 3, "shape": (nbytes,), "typestr": "|u1",
            "data": (self.address, False)}

    def free(self):
        address, self.address = getattr(self, "address", None), None
        if address:
            lib.ringcc_mem_free(ctypes.c_void_p(address))

    def __del__(self):
        self.free()


def empty(shape, dtype, comm):
    """A C-contiguous NumPy array of `shape` and `dtype` in registered memory
    (zeroed, page-aligned) that collectives of `comm` can read and write in
    place. Collective over `comm`. See docs/python.md for when it pays."""
    if _np is None:
        raise ImportError("ringcc.empty needs NumPy")
    dtype = _np.dtype(dtype)
    if isinstance(shape, int) or hasattr(shape, "__index__"):
        shape = (shape,)
    shape = tuple(operator.index(extent) for extent in shape)
    if any(extent < 0 for extent in shape):
        raise ValueError(f"argument 'shape' is {shape}: negative extent")
    count = 1
    for extent in shape:
        count *= extent
    block = _Registered(comm, count * dtype.itemsize)
    return _np.asarray(block)[:count * dtype.itemsize].view(dtype).reshape(
        shape)
