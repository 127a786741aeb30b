"""ringcc - Python binding of libringcc, a collective-communication library.

    import numpy as np, ringcc
    with ringcc.Comm.from_env() as comm:          # ringcc-run, mpirun, srun, torchrun
        x = np.full(4, comm.rank, dtype=np.float32)
        comm.allreduce(x)                           # in place, op "sum"
        assert (x == comm.size * (comm.size - 1) / 2).all()

Buffers: NumPy arrays, objects with __dlpack__ (DLPack 1.x versioned or
0.x: torch tensors, NumPy, CuPy, JAX, ...) and objects with the buffer
protocol, C-contiguous, of the twelve datatypes (bfloat16 and float8
NumPy arrays through ml_dtypes; the buffer protocol has no format for
them). mpi4py's spelling works too: comm.Allreduce(sendbuf, recvbuf, op),
Bcast, Reduce, Allgather, Reduce_scatter(_block), Alltoall, Send, Recv,
Barrier. `import ringcc.torch` registers
the torch.distributed backend "ringcc". `ringcc.empty(shape, dtype, comm)`
gives an array in registered memory, on which collectives among the ranks
of one host run zero-copy. docs/python.md has the whole API.
"""

from . import _lib
from ._buffers import datatype_of
from ._lib import Algo, Datatype, Op, Result
from ._memory import empty
from ._requests import Request, group
from .comm import (ANY_SOURCE, ANY_TAG, HOST, IN_PLACE, Comm, PremulSum,
                   RingccError, UniqueId, get_unique_id, op_of)

SUM, PROD, MIN, MAX, AVG = Op.SUM, Op.PROD, Op.MIN, Op.MAX, Op.AVG
INT8, UINT8, INT32, UINT32, INT64, UINT64 = (
    Datatype.INT8, Datatype.UINT8, Datatype.INT32, Datatype.UINT32,
    Datatype.INT64, Datatype.UINT64)
FLOAT16, BFLOAT16, FLOAT32, FLOAT64 = (
    Datatype.FLOAT16, Datatype.BFLOAT16, Datatype.FLOAT32, Datatype.FLOAT64)
FLOAT8_E4M3, FLOAT8_E5M2 = Datatype.FLOAT8_E4M3, Datatype.FLOAT8_E5M2

__version__ = "%d.%d.%d" % _lib.version()
library_path = _lib.path  # the libringcc.so this process loaded


def version():
    """libringcc's version as (major, minor, patch)."""
    return _lib.version()


__all__ = [
    "Comm", "UniqueId", "get_unique_id", "RingccError", "IN_PLACE", "HOST",
    "empty", "group", "Request", "PremulSum",
    "Op", "Datatype", "Result", "Algo", "op_of", "datatype_of", "version",
    "library_path", "SUM", "PROD", "MIN", "MAX", "AVG", "INT8", "UINT8",
    "INT32", "UINT32", "INT64", "UINT64", "FLOAT16", "BFLOAT16", "FLOAT32",
    "FLOAT64", "FLOAT8_E4M3", "FLOAT8_E5M2", "ANY_TAG", "ANY_SOURCE",
]
