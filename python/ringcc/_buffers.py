"""_buffers.py - what a Python object passed as a buffer is, in C terms.

`describe(obj, name, writable)` turns an object into a `Buffer`: address,
element count, ringcc datatype, device, and a reference that keeps the
memory alive for the duration of a call. Three kinds of object are
understood, tried in this order:

- NumPy arrays (and subclasses), read through `__array_interface__`;
- objects with `__dlpack__` (torch tensors, CuPy, JAX, ...), whose DLPack
  capsule is read with ctypes: the versioned protocol first
  (`__dlpack__(max_version=(1, 1))`, a "dltensor_versioned" capsule with
  its read-only flag), else the unversioned one; `__dlpack_device__` is
  asked first where the object has it, so a device ringcc cannot use is
  refused before anything is exported. This is also how CUDA memory is
  seen;
- anything with the buffer protocol (bytearray, array.array, memoryview,
  mmap, ...), read through a memoryview.

Every check that can fail does so here, before any data is sent, with an
exception that names the argument: TypeError for something that is not a
buffer or has a datatype ringcc does not have, ValueError for memory that
is not C-contiguous or is read-only where the call writes.
"""

import ctypes
import sys

from ._lib import DATATYPE_SIZE, Datatype

try:
    import numpy as _np
except ImportError:  # the package works on plain buffers without NumPy
    _np = None


class Buffer:
    """A C view of a Python buffer, valid while the object is referenced."""

    __slots__ = ("obj", "address", "count", "dtype", "device", "device_id",
                 "shape", "keep")

    def __init__(self, obj, address, count, dtype, device, device_id, shape,
                 keep):
        self.obj = obj            # what the caller passed
        self.address = address    # int: first byte
        self.count = count        # elements
        self.dtype = dtype        # Datatype
        self.device = device      # "cpu" or "cuda"
        self.device_id = device_id
        self.shape = shape        # tuple, for messages
        self.keep = keep          # what must stay alive during the call

    @property
    def nbytes(self):
        return self.count * DATATYPE_SIZE[self.dtype]


# ---- datatypes -------------------------------------------------------------

_NUMPY_NAMES = {
    "int8": Datatype.INT8, "uint8": Datatype.UINT8,
    "int32": Datatype.INT32, "uint32": Datatype.UINT32,
    "int64": Datatype.INT64, "uint64": Datatype.UINT64,
    "float16": Datatype.FLOAT16, "bfloat16": Datatype.BFLOAT16,
    "float32": Datatype.FLOAT32, "float64": Datatype.FLOAT64,
    # ml_dtypes' (and torch's) names of the OCP formats. Not ml_dtypes'
    # float8_e4m3 (IEEE-like, with infinities): another encoding.
    "float8_e4m3fn": Datatype.FLOAT8_E4M3, "float8_e5m2": Datatype.FLOAT8_E5M2,
}
_DTYPE_LIST = ("int8, uint8, int32, uint32, int64, uint64, float16, "
               "bfloat16, float32, float64, float8_e4m3fn, float8_e5m2")

# DLPack type codes: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4.
_DLPACK_TYPES = {
    (0, 8): Datatype.INT8, (1, 8): Datatype.UINT8,
    (0, 32): Datatype.INT32, (1, 32): Datatype.UINT32,
    (0, 64): Datatype.INT64, (1, 64): Datatype.UINT64,
    (2, 16): Datatype.FLOAT16, (4, 16): Datatype.BFLOAT16,
    (2, 32): Datatype.FLOAT32, (2, 64): Datatype.FLOAT64,
    # DLPack 1.1: kDLFloat8_e4m3fn 10, kDLFloat8_e5m2 12
    (10, 8): Datatype.FLOAT8_E4M3, (12, 8): Datatype.FLOAT8_E5M2,
}
_DLPACK_CODE_NAMES = {0: "int", 1: "uint", 2: "float", 3: "opaque",
                      4: "bfloat", 5: "complex", 6: "bool",
                      7: "float8_e3m4", 8: "float8_e4m3",
                      9: "float8_e4m3b11fnuz", 10: "float8_e4m3fn",
                      11: "float8_e4m3fnuz", 12: "float8_e5m2",
                      13: "float8_e5m2fnuz", 14: "float8_e8m0fnu"}

# struct-module format characters (native sizes) of the buffer protocol.
_FORMATS = {"b": Datatype.INT8, "B": Datatype.UINT8, "e": Datatype.FLOAT16,
            "f": Datatype.FLOAT32, "d": Datatype.FLOAT64}
for _fmt in "hHiIlLqQ":
    _size = ctypes.sizeof({"h": ctypes.c_short, "H": ctypes.c_ushort,
                           "i": ctypes.c_int, "I": ctypes.c_uint,
                           "l": ctypes.c_long, "L": ctypes.c_ulong,
                           "q": ctypes.c_longlong,
                           "Q": ctypes.c_ulonglong}[_fmt])
    _t = {(4, False): Datatype.INT32, (4, True): Datatype.UINT32,
          (8, False): Datatype.INT64, (8, True): Datatype.UINT64}.get(
              (_size, _fmt.isupper()))
    if _t is not None:
        _FORMATS[_fmt] = _t

_NATIVE_ORDER = "<" if sys.byteorder == "little" else ">"


def datatype_of(spec):
    """A Datatype from a Datatype, its name ('float32'), a NumPy dtype or a
    torch dtype; TypeError when ringcc has no such datatype."""
    if isinstance(spec, Datatype):
        return spec
    name = spec if isinstance(spec, str) else getattr(spec, "name", None)
    if name is None and spec is not None:
        name = str(spec).replace("torch.", "")
    if isinstance(name, str):
        key = name.lower()
        if key in _NUMPY_NAMES:
            return _NUMPY_NAMES[key]
        # ringcc's own names ("float8_e4m3") only as strings: a NumPy dtype
        # named float8_e4m3 is ml_dtypes' other encoding
        if isinstance(spec, str) and key.upper() in Datatype.__members__:
            return Datatype[key.upper()]
    raise TypeError(f"ringcc has no datatype {spec!r}; it has "
                    + _DTYPE_LIST)


def _numpy_datatype(dtype, name):
    if dtype.byteorder not in ("=", "|", _NATIVE_ORDER):
        raise TypeError(f"argument '{name}' has a non-native byte order "
                        f"({dtype.str})")
    key = dtype.name
    if key in _NUMPY_NAMES:
        return _NUMPY_NAMES[key]
    raise TypeError(f"argument '{name}' has dtype {dtype}, which ringcc does "
                    f"not have ({_DTYPE_LIST}; the last three through "
                    "ml_dtypes)")


# ---- NumPy ----------------------------------------------------------------

def _from_numpy(arr, name, writable):
    dtype = _numpy_datatype(arr.dtype, name)
    if not arr.flags.c_contiguous:
        raise ValueError(f"argument '{name}' is not C-contiguous (shape "
                         f"{arr.shape}, strides {arr.strides}); pass "
                         "numpy.ascontiguousarray(...) or a copy")
    if writable and not arr.flags.writeable:
        raise ValueError(f"argument '{name}' is read-only, but the call "
                         "writes its result there")
    address = arr.__array_interface__["data"][0]
    return Buffer(arr, address, arr.size, dtype, "cpu", 0, arr.shape, arr)


# ---- DLPack ---------------------------------------------------------------

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice),
                ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", _DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64),
                ("dl_tensor", _DLTensor)]


_DLPACK_FLAG_READ_ONLY = 1
_DLPACK_MAX_VERSION = (1, 1)  # what this module reads

# DLManagedTensor starts with its DLTensor; that is all this module reads of
# it. A versioned capsule's tensor follows its version, context, deleter
# and flags. Either capsule stays unconsumed ("dltensor"/"dltensor_versioned")
# and referenced by the Buffer, so the exporter's deleter runs when the
# capsule is collected, after the call.
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype = ctypes.c_int
_capsule_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]

_KDL_CPU, _KDL_CUDA, _KDL_CUDA_HOST, _KDL_CUDA_MANAGED = 1, 2, 3, 13


def _readonly_flag(obj):
    """Whether the object says its memory is read-only (a `flags` attribute
    with `writeable`, as NumPy-like arrays have): DLPack 0.x capsules carry
    no such flag, and a 1.x exporter may not set it."""
    flags = getattr(obj, "flags", None)
    writeable = getattr(flags, "writeable", None)
    return writeable is False


def _dlpack_device(obj, name):
    """__dlpack_device__(), checked, where the object has it."""
    query = getattr(obj, "__dlpack_device__", None)
    if query is None:
        return None
    device_type = int(query()[0])
    if device_type not in (_KDL_CPU, _KDL_CUDA_HOST, _KDL_CUDA,
                           _KDL_CUDA_MANAGED):
        raise TypeError(f"argument '{name}' lives on DLPack device type "
                        f"{device_type}; ringcc takes host or CUDA memory")
    return device_type


def _export(obj, name):
    """(capsule, tensor, read_only) from obj.__dlpack__: the versioned
    protocol where the exporter has it, else the unversioned one."""
    _dlpack_device(obj, name)
    try:
        try:
            capsule = obj.__dlpack__(max_version=_DLPACK_MAX_VERSION)
        except TypeError:  # an exporter from before DLPack 1.0
            try:
                capsule = obj.__dlpack__()
            except TypeError:
                capsule = obj.__dlpack__(stream=None)
    except (RuntimeError, BufferError, ValueError) as e:
        raise TypeError(f"argument '{name}' cannot be exported through "
                        f"DLPack: {e}") from None
    if _capsule_valid(capsule, b"dltensor_versioned"):
        managed = _DLManagedTensorVersioned.from_address(
            _capsule_pointer(capsule, b"dltensor_versioned"))
        if managed.version.major != 1:
            raise TypeError(f"argument '{name}': DLPack {managed.version.major}"
                            f".{managed.version.minor}, ringcc reads 1.x")
        return (capsule, managed.dl_tensor,
                bool(managed.flags & _DLPACK_FLAG_READ_ONLY))
    if _capsule_valid(capsule, b"dltensor"):
        return (capsule,
                _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor")),
                False)
    raise TypeError(f"argument '{name}': __dlpack__() did not return an "
                    "unconsumed 'dltensor' or 'dltensor_versioned' capsule")


def _from_dlpack(obj, name, writable):
    capsule, tensor, read_only = _export(obj, name)
    code, bits, lanes = tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes
    dtype = _DLPACK_TYPES.get((code, bits)) if lanes == 1 else None
    if dtype is None:
        tname = str(getattr(obj, "dtype", "")) or \
            f"{_DLPACK_CODE_NAMES.get(code, code)}{bits}x{lanes}"
        raise TypeError(f"argument '{name}' has dtype {tname}, which ringcc "
                        f"does not have ({_DTYPE_LIST})")
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    count = 1
    for extent in shape:
        count *= extent
    if tensor.strides and count > 1:
        expected = 1
        for i in reversed(range(tensor.ndim)):
            if shape[i] != 1 and tensor.strides[i] != expected:
                strides = tuple(tensor.strides[i] for i in range(tensor.ndim))
                raise ValueError(
                    f"argument '{name}' is not C-contiguous (shape {shape}, "
                    f"strides {strides} in elements); pass a contiguous copy")
            expected *= shape[i]
    device_type = tensor.device.device_type
    if device_type in (_KDL_CPU, _KDL_CUDA_HOST):
        device = "cpu"
    elif device_type in (_KDL_CUDA, _KDL_CUDA_MANAGED):
        device = "cuda"
    else:
        raise TypeError(f"argument '{name}' lives on DLPack device type "
                        f"{device_type}; ringcc takes host or CUDA memory")
    if writable and (read_only or _readonly_flag(obj)):
        raise ValueError(f"argument '{name}' is read-only, but the call "
                         "writes its result there")
    address = (tensor.data or 0) + tensor.byte_offset
    # The capsule keeps the exporter's memory alive until it is collected.
    return Buffer(obj, address, count, dtype, device, tensor.device.device_id,
                  shape, (obj, capsule))


# ---- buffer protocol ------------------------------------------------------

def _from_buffer_protocol(obj, name, writable):
    try:
        view = memoryview(obj)
    except TypeError:
        raise TypeError(f"argument '{name}' is a {type(obj).__name__}, not a "
                        "buffer (pass a NumPy array, an object with "
                        "__dlpack__, or one with the buffer protocol)") from None
    fmt = view.format
    if fmt[:1] in "@=<>!":
        order, fmt = fmt[0], fmt[1:]
        if order in "<>!" and order.replace("!", ">") != _NATIVE_ORDER:
            raise TypeError(f"argument '{name}' has a non-native byte order "
                            f"(format {view.format!r})")
    dtype = _FORMATS.get(fmt)
    if dtype is None or view.itemsize != DATATYPE_SIZE[dtype]:
        raise TypeError(f"argument '{name}' has buffer format "
                        f"{view.format!r}, which ringcc has no datatype for")
    if not view.c_contiguous:
        raise ValueError(f"argument '{name}' is not C-contiguous (shape "
                         f"{view.shape}, strides {view.strides})")
    if writable and view.readonly:
        raise ValueError(f"argument '{name}' is read-only, but the call "
                         "writes its result there")
    count = view.nbytes // view.itemsize
    if count == 0:
        address = 0
    elif view.readonly:
        # ctypes.c_char.from_buffer() refuses read-only memory; the C-API
        # gives its address without a copy.
        address = _readonly_address(view)
    else:
        address = ctypes.addressof(ctypes.c_char.from_buffer(view))
    return Buffer(obj, address, count, dtype, "cpu", 0, view.shape, view)


_buffer_address = ctypes.pythonapi.PyObject_GetBuffer
_buffer_release = ctypes.pythonapi.PyBuffer_Release


class _Py_buffer(ctypes.Structure):
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p),
                ("len", ctypes.c_ssize_t), ("itemsize", ctypes.c_ssize_t),
                ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p),
                ("shape", ctypes.POINTER(ctypes.c_ssize_t)),
                ("strides", ctypes.POINTER(ctypes.c_ssize_t)),
                ("suboffsets", ctypes.POINTER(ctypes.c_ssize_t)),
                ("internal", ctypes.c_void_p)]


_buffer_address.argtypes = [ctypes.py_object, ctypes.POINTER(_Py_buffer),
                            ctypes.c_int]
_buffer_address.restype = ctypes.c_int
_buffer_release.argtypes = [ctypes.POINTER(_Py_buffer)]
_buffer_release.restype = None


def _readonly_address(view):
    """The address of a read-only buffer. The memoryview `view` holds the
    exporter's buffer for as long as it lives, so the address stays valid
    while the Buffer that keeps `view` does."""
    pybuf = _Py_buffer()
    if _buffer_address(view, ctypes.byref(pybuf), 0) != 0:  # PyBUF_SIMPLE
        raise TypeError("cannot read the buffer's address")
    try:
        return pybuf.buf or 0
    finally:
        _buffer_release(ctypes.byref(pybuf))


# ---- entry point ----------------------------------------------------------

def describe(obj, name, writable):
    """A Buffer for `obj`, checked; `name` is the argument's name in
    messages, `writable` whether the call writes into it."""
    if obj is None:
        raise TypeError(f"argument '{name}' is None; a buffer is needed")
    if _np is not None and isinstance(obj, _np.ndarray):
        return _from_numpy(obj, name, writable)
    if hasattr(obj, "__dlpack__") and not isinstance(obj, memoryview):
        return _from_dlpack(obj, name, writable)
    if isinstance(obj, (bytes, str)) and writable:
        raise ValueError(f"argument '{name}' is an immutable "
                         f"{type(obj).__name__}, but the call writes there")
    return _from_buffer_protocol(obj, name, writable)
