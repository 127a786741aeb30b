"""_lib.py - loads libringcc.so with ctypes and declares the C API.

The library is found, in order: the path in RINGCC_LIBRARY (a file, or a
folder holding libringcc.so), the copy shipped inside this package
(ringcc/_lib/libringcc.so, put there by `pip install ./python`), the build
tree of a source checkout (../../build/lib/libringcc.so relative to this
file, for running the tests from a checkout), and last the system's loader
path (an installed libringcc.so.0).

ctypes.CDLL releases the GIL for the duration of every foreign call, so a
thread blocked in a collective leaves the interpreter to the others.

Everything here mirrors include/ringcc.h: the enums, ringcc_config_t and
the prototypes. Nothing outside the package should need this module.
"""

import ctypes
import ctypes.util
import enum
import os

_HERE = os.path.dirname(os.path.abspath(__file__))


class Result(enum.IntEnum):
    """ringcc_result_t."""

    SUCCESS = 0
    ERR_INVALID_ARGUMENT = 1
    ERR_INVALID_USAGE = 2
    ERR_SYSTEM = 3
    ERR_CUDA = 4
    ERR_NETWORK = 5
    ERR_TIMEOUT = 6
    ERR_PEER_FAILED = 7
    ERR_ABORTED = 8
    ERR_UNSUPPORTED = 9
    ERR_OUT_OF_MEMORY = 10
    ERR_INTERNAL = 11


class Datatype(enum.IntEnum):
    """ringcc_datatype_t."""

    INT8 = 0
    UINT8 = 1
    INT32 = 2
    UINT32 = 3
    INT64 = 4
    UINT64 = 5
    FLOAT16 = 6
    BFLOAT16 = 7
    FLOAT32 = 8
    FLOAT64 = 9
    FLOAT8_E4M3 = 10  # OCP e4m3 (ml_dtypes/torch float8_e4m3fn)
    FLOAT8_E5M2 = 11  # OCP e5m2 (ml_dtypes/torch float8_e5m2)


DATATYPE_SIZE = {
    Datatype.INT8: 1, Datatype.UINT8: 1, Datatype.INT32: 4,
    Datatype.UINT32: 4, Datatype.INT64: 8, Datatype.UINT64: 8,
    Datatype.FLOAT16: 2, Datatype.BFLOAT16: 2, Datatype.FLOAT32: 4,
    Datatype.FLOAT64: 8, Datatype.FLOAT8_E4M3: 1, Datatype.FLOAT8_E5M2: 1,
}


class Op(enum.IntEnum):
    """ringcc_op_t."""

    SUM = 0
    PROD = 1
    MIN = 2
    MAX = 3
    AVG = 4


class Algo(enum.IntEnum):
    """ringcc_algo_t (ringcc_config_t.algo, RINGCC_ALGO): each member's
    lower-case name is its one RINGCC_ALGO spelling ("oneshot"); DIRECT is
    the deprecated name for ONESHOT-or-CMA, kept for its value."""

    AUTO = 0
    RING = 1
    TREE = 2
    DIRECT = 3
    RECDOUBLING = 4
    RABENSEIFNER = 5
    ONESHOT = 6
    CMA = 7
    ZEROCOPY = 8

    @classmethod
    def parse(cls, name):
        """The member a RINGCC_ALGO spelling names, as the library reads
        it: case, '-' and '_' ignored ("one-shot" is ONESHOT)."""
        key = str(name).upper().replace("-", "").replace("_", "")
        if key not in cls.__members__:
            raise ValueError(
                f"algo {name!r} is not one of "
                f"{', '.join(m.lower() for m in cls.__members__)}")
        return cls[key]


IN_PLACE_ADDRESS = 1          # RINGCC_IN_PLACE is ((const void *)1)
SPLIT_NOCOLOR = -1            # RINGCC_SPLIT_NOCOLOR
SPLIT_HOST = 1                # RINGCC_SPLIT_HOST
CUDA_DEVICE_NONE = -2         # RINGCC_CUDA_DEVICE_NONE
CONFIG_MAGIC = 0x52434346     # RINGCC_CONFIG_MAGIC


ANY_SOURCE = -2  # RINGCC_ANY_SOURCE


class RecvStatusStruct(ctypes.Structure):
    """ringcc_recv_status_t."""
    _fields_ = [("source", ctypes.c_int), ("count", ctypes.c_size_t)]


class UniqueIdStruct(ctypes.Structure):
    """ringcc_unique_id_t: 128 opaque bytes."""

    _fields_ = [("internal", ctypes.c_char * 128)]


class ConfigStruct(ctypes.Structure):
    """ringcc_config_t, field for field."""

    _fields_ = [
        ("size", ctypes.c_size_t),
        ("magic", ctypes.c_uint),
        ("version", ctypes.c_uint),
        ("timeout_ms", ctypes.c_int64),
        ("algo", ctypes.c_int),
        ("debug_level", ctypes.c_int),
        ("chunk_bytes", ctypes.c_int64),
        ("nslots", ctypes.c_int),
        ("shm_disable", ctypes.c_int),
        ("check", ctypes.c_int),
        ("socket_ifname", ctypes.c_char_p),
        ("net_chunk_bytes", ctypes.c_int64),
        ("cuda_device", ctypes.c_int),
        ("checksum", ctypes.c_int),
        ("reserved", ctypes.c_int * 14),
    ]


def _candidates():
    env = os.environ.get("RINGCC_LIBRARY")
    if env:
        # An explicit choice is the only one tried: a typo must not fall
        # back silently to another copy.
        yield os.path.join(env, "libringcc.so") if os.path.isdir(env) else env
        return
    yield os.path.join(_HERE, "_lib", "libringcc.so")
    yield os.path.normpath(os.path.join(_HERE, "..", "..", "build", "lib",
                                        "libringcc.so"))
    yield "libringcc.so.0"


def _load():
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(f"{path} (no such file)")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append(f"{path} ({e})")
    raise ImportError("ringcc: cannot load libringcc.so; tried: "
                      + "; ".join(tried)
                      + ". Install with `pip install ./python` from a "
                        "checkout, or set RINGCC_LIBRARY to the library.")


lib, path = _load()

_R = ctypes.c_int          # ringcc_result_t
_P = ctypes.c_void_p
_Z = ctypes.c_size_t
_I = ctypes.c_int
_COMMP = ctypes.POINTER(ctypes.c_void_p)

_PROTOTYPES = {
    "ringcc_get_version": (_R, [ctypes.POINTER(_I)]),
    "ringcc_strerror": (ctypes.c_char_p, [_I]),
    "ringcc_comm_last_error": (ctypes.c_char_p, [_P]),
    "ringcc_get_unique_id": (_R, [ctypes.POINTER(UniqueIdStruct)]),
    "ringcc_comm_init": (_R, [_COMMP, _I, ctypes.POINTER(UniqueIdStruct), _I,
                              ctypes.POINTER(ConfigStruct)]),
    "ringcc_comm_init_env": (_R, [_COMMP, ctypes.POINTER(ConfigStruct)]),
    "ringcc_comm_split": (_R, [_P, _I, _I, _COMMP]),
    "ringcc_comm_split_type": (_R, [_P, _I, _I, _COMMP]),
    "ringcc_comm_shrink": (_R, [_P, ctypes.POINTER(_I), _I, _COMMP]),
    "ringcc_comm_rank": (_R, [_P, ctypes.POINTER(_I)]),
    "ringcc_comm_size": (_R, [_P, ctypes.POINTER(_I)]),
    "ringcc_comm_destroy": (_R, [_P]),
    "ringcc_comm_abort": (_R, [_P]),
    "ringcc_comm_revoke": (_R, [_P]),
    "ringcc_comm_cuda_device": (_R, [_P, ctypes.POINTER(_I)]),
    "ringcc_comm_get_async_error": (_R, [_P, ctypes.POINTER(_I)]),
    "ringcc_comm_report": (_R, [_P, ctypes.c_char_p, _Z]),
    "ringcc_allreduce": (_R, [_P, _P, _Z, _I, _I, _P, _P]),
    "ringcc_reduce_scatter": (_R, [_P, _P, _Z, _I, _I, _P, _P]),
    "ringcc_allgather": (_R, [_P, _P, _Z, _I, _P, _P]),
    "ringcc_bcast": (_R, [_P, _Z, _I, _I, _P, _P]),
    "ringcc_reduce": (_R, [_P, _P, _Z, _I, _I, _I, _P, _P]),
    "ringcc_alltoall": (_R, [_P, _P, _Z, _I, _P, _P]),
    "ringcc_send": (_R, [_P, _Z, _I, _I, _P, _P]),
    "ringcc_recv": (_R, [_P, _Z, _I, _I, _P, _P]),
    "ringcc_recv_from": (_R, [_P, _Z, _I, _I, _P, _P,
                              ctypes.POINTER(RecvStatusStruct)]),
    "ringcc_barrier": (_R, [_P, _P]),
    "ringcc_op_create_premul_sum": (_R, [ctypes.POINTER(_I), _P, _I, _P]),
    "ringcc_op_destroy": (_R, [_I, _P]),
    "ringcc_group_start": (_R, []),
    "ringcc_group_end": (_R, []),
    "ringcc_group_end_async": (_R, [ctypes.POINTER(_P)]),
    "ringcc_test": (_R, [_P, ctypes.POINTER(_I)]),
    "ringcc_wait": (_R, [_P]),
    "ringcc_gather": (_R, [_P, _P, _Z, _I, _I, _P, _P]),
    "ringcc_scatter": (_R, [_P, _P, _Z, _I, _I, _P, _P]),
    "ringcc_allgatherv": (_R, [_P, _Z, _P, _P, _P, _I, _P, _P]),
    "ringcc_alltoallv": (_R, [_P, _P, _P, _P, _P, _P, _I, _P, _P]),
    "ringcc_mem_alloc": (_R, [_P, _Z, ctypes.POINTER(_P)]),
    "ringcc_mem_free": (_R, [_P]),
    "ringcc_comm_register": (_R, [_P, _P, _Z, ctypes.POINTER(_P)]),
    "ringcc_comm_deregister": (_R, [_P, _P]),
}

for _name, (_restype, _argtypes) in _PROTOTYPES.items():
    _fn = getattr(lib, _name)
    _fn.restype = _restype
    _fn.argtypes = _argtypes


def version():
    """The library's version as (major, minor, patch)."""
    v = _I()
    lib.ringcc_get_version(ctypes.byref(v))
    return v.value // 10000, v.value // 100 % 100, v.value % 100


def config_struct(**fields):
    """A ringcc_config_t as RINGCC_CONFIG_INIT makes it, then `fields` set.

    A field given as None stays unset (the environment variable or the
    default applies)."""
    major, minor, patch = version()
    cfg = ConfigStruct()
    cfg.size = ctypes.sizeof(ConfigStruct)
    cfg.magic = CONFIG_MAGIC
    cfg.version = major * 10000 + minor * 100 + patch
    for name in ("timeout_ms", "algo", "debug_level", "chunk_bytes", "nslots",
                 "shm_disable", "check", "net_chunk_bytes", "cuda_device",
                 "checksum"):
        setattr(cfg, name, -1)
    cfg.socket_ifname = None
    for name, value in fields.items():
        if value is None:
            continue
        if name == "socket_ifname":
            value = value.encode()
        setattr(cfg, name, value)
    return cfg
