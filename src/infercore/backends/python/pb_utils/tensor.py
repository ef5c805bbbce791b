"""``pb_utils.Tensor``, Triton's datatype codes, and the zero-copy bridge to infercore tensors.

A ``Tensor`` holds a C-contiguous numpy array (CPU) or a DLPack producer (GPU). Inputs wrap
the engine's arrays without copying (``_from_core``); outputs hand their arrays to the engine
without copying (``_to_core``). Only a non-contiguous array is copied, as Triton does.

BF16 arrays are ``ml_dtypes.bfloat16``. numpy cannot exchange that dtype through DLPack, so
BF16 capsules are rewritten in place (uint16 <-> bfloat16, same bits) through ctypes: that is
how a model hands BF16 data to and from torch, as Triton's docs ask.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable
from typing import Any

import ml_dtypes
import numpy as np

from ....errors import TritonError as CoreTritonError
from ....tensor import DataType, MemoryType
from ....tensor import Tensor as CoreTensor
from ....tensor import deserialize_bytes_tensor as _core_deserialize
from ....tensor import serialize_bytes_tensor as _core_serialize
from .args import as_array, as_str
from .error import TritonModelException

__all__ = [
    "TRITON_STRING_TO_NUMPY",
    "Tensor",
    "deserialize_bytes_tensor",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
]

# TRITONSERVER_DataType numbering (what Tensor.triton_dtype() returns)
_CODE_BY_DATATYPE: dict[DataType, int] = {
    DataType.BOOL: 1,
    DataType.UINT8: 2,
    DataType.UINT16: 3,
    DataType.UINT32: 4,
    DataType.UINT64: 5,
    DataType.INT8: 6,
    DataType.INT16: 7,
    DataType.INT32: 8,
    DataType.INT64: 9,
    DataType.FP16: 10,
    DataType.FP32: 11,
    DataType.FP64: 12,
    DataType.BYTES: 13,
    DataType.BF16: 14,
}
_DATATYPE_BY_CODE: dict[int, DataType] = {code: dt for dt, code in _CODE_BY_DATATYPE.items()}
_BYTES_CODE = 13
_BF16 = np.dtype(ml_dtypes.bfloat16)
# The codes of the native-order numpy dtypes, looked up first (a Tensor is made per output).
_CODE_BY_DTYPE: dict[np.dtype, int] = {
    dt.numpy_dtype: code for dt, code in _CODE_BY_DATATYPE.items() if dt is not DataType.BYTES
}

TRITON_STRING_TO_NUMPY: dict[str, Any] = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
    "TYPE_BF16": ml_dtypes.bfloat16,
}


def triton_string_to_numpy(triton_type_string: str) -> Any:
    """The numpy type of a config datatype name ("TYPE_FP32" -> np.float32)."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type: int) -> Any:
    """The numpy type of a TRITONSERVER_DataType code; None for an unknown code."""
    try:
        dt = _DATATYPE_BY_CODE[int(data_type)]
    except (KeyError, TypeError, ValueError):
        return None
    if dt is DataType.BYTES:
        return np.object_
    return dt.numpy_dtype.type


def numpy_to_triton_type(data_type: Any) -> int | None:
    """The TRITONSERVER_DataType code of a numpy dtype or type; None when it has none."""
    try:
        dtype = np.dtype(data_type)
    except TypeError:
        return None
    return _code_of(dtype)


def _code_of(dtype: np.dtype) -> int | None:
    code = _CODE_BY_DTYPE.get(dtype)
    if code is not None:
        return code
    if dtype.kind in ("O", "S"):
        return _BYTES_CODE
    try:
        return _CODE_BY_DATATYPE[DataType.from_numpy(dtype)]
    except CoreTritonError:
        return None


def serialize_byte_tensor(input_tensor: np.ndarray) -> bytes | None:
    """The wire form of a BYTES array (each element: uint32 LE length, then the bytes).

    Non-bytes elements of an object array are written as their UTF-8 ``str()``; arrays
    that are neither object nor bytes arrays give None, as in Triton.
    """
    if input_tensor.size == 0:
        return b""
    if input_tensor.dtype.kind not in ("O", "S"):
        return None
    return _core_serialize(input_tensor)


def deserialize_bytes_tensor(encoded_tensor: bytes | bytearray | memoryview) -> np.ndarray:
    """Parse the wire form of a BYTES tensor into a flat object array of ``bytes``."""
    return _core_deserialize(encoded_tensor)


class Tensor:
    """A named tensor for pb_utils requests and responses: ``Tensor("OUT", array)``.

    ``array`` is a numpy array (object, bytes or str arrays make BYTES tensors; anything
    else, a list or a scalar, is a TypeError as in Triton); it is kept as is, or as a
    C-contiguous copy when it is not contiguous.
    """

    __slots__ = ("_name", "_array", "_code", "_producer", "_device_id", "_core")

    def __init__(self, name: str, numpy_array: Any) -> None:
        if type(name) is not str:  # bytes names are taken, as Triton's binding takes them
            name = as_str(name, "Tensor.__init__", "name")
        # A numpy array only, converted before the name is checked (as in Triton)
        array = as_array(numpy_array, "Tensor.__init__", "numpy_array")
        if not name:
            _check_name(name)
        dtype = array.dtype
        code = _CODE_BY_DTYPE.get(dtype)  # the usual case: one lookup, no call
        if code is None:
            # str arrays carry text: BYTES, encoded on output
            code = _BYTES_CODE if dtype.kind == "U" else _code_of(dtype)
        if code is None:
            raise TritonModelException("NumPy dtype is not supported.")
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        self._name = name
        self._array: np.ndarray | None = array
        self._code = code
        self._producer: Any = None  # a GPU DLPack producer, when the data is on a GPU
        self._device_id = 0
        self._core: CoreTensor | None = None  # the engine tensor this one wraps, if any

    # -- Triton's methods --------------------------------------------------------------
    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        """The data as a numpy array: the same array, never a copy."""
        if self._array is None:
            raise TritonModelException("Tensor is stored in GPU and cannot be converted to NumPy.")
        return self._array

    def triton_dtype(self) -> int:
        """The TRITONSERVER_DataType code (TYPE_FP32 is 11, BYTES is 13, BF16 is 14)."""
        return self._code

    def shape(self) -> list[int]:
        if self._array is not None:
            return list(self._array.shape)
        return [int(d) for d in self._producer.shape]

    def is_cpu(self) -> bool:
        return self._array is not None

    def to_dlpack(self) -> Any:
        """A DLPack capsule over the same memory (no copy)."""
        return self.__dlpack__()

    @staticmethod
    def from_dlpack(name: str, tensor: Any) -> Tensor:
        """A Tensor over a DLPack capsule or producer (``__dlpack__``), without copying."""
        _check_name(name)
        if _is_capsule(tensor):
            return _from_capsule(name, tensor)
        if not (hasattr(tensor, "__dlpack__") and hasattr(tensor, "__dlpack_device__")):
            # Triton's text keeps the indentation of a continued line in its source
            raise TritonModelException(
                "Provided tensor is not supported. Tensor must be a DLPack capsule         "
                "or have `__dlpack__` and `__dlpack_device__` attributes"
            )
        device_type, device_id = tensor.__dlpack_device__()
        if int(device_type) == _DL_CUDA:
            return _gpu_tensor(name, tensor, int(device_id))
        if int(device_type) not in (_DL_CPU, _DL_CUDA_HOST):
            raise TritonModelException(
                f"DLDevice type {int(device_type)} is not support by Python backend."
            )
        return _from_capsule(name, tensor.__dlpack__())

    def __dlpack__(self, *, stream: Any = None, **kwargs: Any) -> Any:
        if self._code == _BYTES_CODE:
            raise TritonModelException("DLPack does not have support for string tensors.")
        if self._array is None:
            return self._producer.__dlpack__(stream=stream)
        array = self._array
        if not array.flags.writeable:
            # DLPack cannot mark memory read-only, so numpy refuses to export it. Inputs
            # that are views of a received message are read-only: a consumer gets a copy.
            array = array.copy()
        if array.dtype == _BF16:
            capsule = array.view(np.uint16).__dlpack__()
            _set_capsule_dtype(capsule, _DL_BFLOAT, 16)
            return capsule
        return array.__dlpack__()

    def __dlpack_device__(self) -> tuple[int, int]:
        if self._array is None:
            return (_DL_CUDA, self._device_id)
        return (_DL_CPU, 0)

    def __repr__(self) -> str:
        dt = _DATATYPE_BY_CODE[self._code]
        return f"Tensor(name={self._name!r}, datatype={dt.value}, shape={self.shape()})"


def _check_name(name: Any) -> None:
    if not isinstance(name, str):
        raise TypeError(f"Tensor name must be a str, not {type(name).__name__}")
    if name == "":
        raise TritonModelException("Tensor name cannot be an empty string.")


def _new(name: str, array: np.ndarray | None, code: int) -> Tensor:
    tensor = Tensor.__new__(Tensor)
    tensor._name = name
    tensor._array = array
    tensor._code = code
    tensor._producer = None
    tensor._device_id = 0
    tensor._core = None
    return tensor


def _gpu_tensor(name: str, producer: Any, device_id: int, code: int | None = None) -> Tensor:
    """A Tensor over GPU memory: the producer is kept and re-exported on demand."""
    if code is None:
        code = _code_of_capsule(producer.__dlpack__())
    tensor = _new(name, None, code)
    tensor._producer = producer
    tensor._device_id = device_id
    return tensor


def _from_core(name: str, core: CoreTensor) -> Tensor:
    """Wrap an engine tensor (a request input, a BLS output) without copying."""
    code = _CODE_BY_DATATYPE[core.data_type]
    if core.memory_type is MemoryType.GPU:
        # The engine tensor is itself a DLPack producer of its GPU data.
        tensor = _gpu_tensor(name, core, core.memory_type_id, code)
    else:
        tensor = _new(name, core.to_numpy(), code)
    tensor._core = core
    return tensor


def _to_core(tensor: Tensor) -> CoreTensor:
    """The engine tensor for a model's output, sharing its memory."""
    core = tensor._core
    if core is not None:
        return core  # an input handed back unchanged: reuse the engine's tensor
    dt = _DATATYPE_BY_CODE[tensor._code]
    if tensor._array is None:
        return CoreTensor(dt, tensor._producer, MemoryType.GPU, tensor._device_id)
    if dt is DataType.BYTES:
        return CoreTensor.from_numpy(tensor._array, DataType.BYTES)
    return CoreTensor(dt, tensor._array)


def _tensors_by_name(tensors: Iterable[Tensor]) -> dict[str, CoreTensor]:
    return {tensor._name: _to_core(tensor) for tensor in tensors}


# -- DLPack capsules ----------------------------------------------------------------------
# dlpack.h: device types and dtype codes
_DL_CPU = 1
_DL_CUDA = 2
_DL_CUDA_HOST = 3
_DL_INT = 0
_DL_UINT = 1
_DL_FLOAT = 2
_DL_BFLOAT = 4
_DL_BOOL = 6

_CAPSULE_NAME = b"dltensor"


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    # The head of DLManagedTensor, which a "dltensor" capsule points to.
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
    ]


_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype = ctypes.c_int
_capsule_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

_CODE_BY_DLPACK: dict[tuple[int, int], int] = {
    (_DL_BOOL, 8): 1,
    (_DL_INT, 1): 1,
    (_DL_UINT, 8): 2,
    (_DL_UINT, 16): 3,
    (_DL_UINT, 32): 4,
    (_DL_UINT, 64): 5,
    (_DL_INT, 8): 6,
    (_DL_INT, 16): 7,
    (_DL_INT, 32): 8,
    (_DL_INT, 64): 9,
    (_DL_FLOAT, 16): 10,
    (_DL_FLOAT, 32): 11,
    (_DL_FLOAT, 64): 12,
    (_DL_BFLOAT, 16): 14,
}


def _is_capsule(obj: Any) -> bool:
    return type(obj).__name__ == "PyCapsule"


def _dl_tensor(capsule: Any) -> _DLTensor:
    if not _capsule_is_valid(capsule, _CAPSULE_NAME):
        raise TritonModelException(
            "DLPack capsule is not valid: it was already consumed, or it is not a 'dltensor'"
        )
    return _DLTensor.from_address(_capsule_pointer(capsule, _CAPSULE_NAME))


def _code_of_capsule(capsule: Any) -> int:
    dtype = _dl_tensor(capsule).dtype
    code = _CODE_BY_DLPACK.get((dtype.code, dtype.bits)) if dtype.lanes == 1 else None
    if code is None:
        raise TritonModelException(
            f"DLPack dtype (code {dtype.code}, {dtype.bits} bits, {dtype.lanes} lanes) "
            "is not supported."
        )
    return code


def _set_capsule_dtype(capsule: Any, code: int, bits: int) -> None:
    dtype = _dl_tensor(capsule).dtype
    dtype.code = code
    dtype.bits = bits


class _CapsuleProducer:
    """Hands numpy's ``from_dlpack`` a capsule we already hold (it wants a producer)."""

    __slots__ = ("_capsule", "_device")

    def __init__(self, capsule: Any, device: tuple[int, int]) -> None:
        self._capsule = capsule
        self._device = device

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._device


def _from_capsule(name: str, capsule: Any) -> Tensor:
    head = _dl_tensor(capsule)
    device_type = head.device.device_type
    if device_type == _DL_CUDA:
        return _gpu_tensor(name, _gpu_producer(capsule), head.device.device_id)
    if device_type not in (_DL_CPU, _DL_CUDA_HOST):
        raise TritonModelException(f"DLDevice type {device_type} is not support by Python backend.")
    code = _code_of_capsule(capsule)
    if code == 14:
        _set_capsule_dtype(capsule, _DL_UINT, 16)  # numpy reads the bits as uint16
    try:
        array = np.from_dlpack(_CapsuleProducer(capsule, (device_type, 0)))
    except (BufferError, TypeError, ValueError) as exc:
        raise TritonModelException(f"failed to read the DLPack tensor: {exc}") from exc
    if code == 14:
        array = array.view(_BF16)
    if not array.flags.c_contiguous:
        raise TritonModelException(
            "DLPack tensor is not contiguous. Only contiguous DLPack tensors that are stored "
            "in C-Order are supported."
        )
    return _new(name, array, code)


def _gpu_producer(capsule: Any) -> Any:
    """A re-exportable producer for a GPU capsule, which itself can be consumed only once.

    A capsule cannot be kept and exported again, so a GPU framework adopts it: torch if it
    is installed, else cupy. Neither is imported unless a model passes a GPU capsule.
    """
    try:
        import torch  # type: ignore[import-not-found]

        return torch.utils.dlpack.from_dlpack(capsule)
    except ImportError:
        pass
    try:
        import cupy  # type: ignore[import-not-found]

        device = (_DL_CUDA, _dl_tensor(capsule).device.device_id)
        return cupy.from_dlpack(_CapsuleProducer(capsule, device))
    except ImportError:
        pass
    raise TritonModelException(
        "a GPU DLPack capsule needs torch or cupy to be kept; pass the GPU tensor object "
        "itself to Tensor.from_dlpack instead of a capsule"
    )
