"""Triton datatypes, the Tensor value, BYTES wire form, numpy and DLPack interop.

A ``Tensor`` wraps one array and says what Triton datatype it carries. CPU tensors hold a
numpy array and never copy it: ``to_numpy()`` returns that array, ``__dlpack__`` exports it.
BYTES tensors hold numpy object arrays of ``bytes``; their wire form (each element a 4-byte
little-endian length followed by the bytes) is produced only at the edges
(``serialize_bytes_tensor`` / ``deserialize_bytes_tensor``). A ``RawInput`` is an input
a frontend received whose data does not fit what it declares (validation refuses it).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from .errors import InvalidArgumentError, UnsupportedError

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2

__all__ = [
    "DataType",
    "MemoryType",
    "RawInput",
    "Tensor",
    "deserialize_bytes_tensor",
    "serialize_bytes_tensor",
]


class DataType(str, enum.Enum):
    """Triton's tensor datatypes, valued by their wire names ("FP32", "BYTES", ...)."""

    BOOL = "BOOL"
    UINT8 = "UINT8"
    UINT16 = "UINT16"
    UINT32 = "UINT32"
    UINT64 = "UINT64"
    INT8 = "INT8"
    INT16 = "INT16"
    INT32 = "INT32"
    INT64 = "INT64"
    FP16 = "FP16"
    FP32 = "FP32"
    FP64 = "FP64"
    BF16 = "BF16"
    BYTES = "BYTES"

    def __str__(self) -> str:  # "FP32", not "DataType.FP32", in messages
        return self.value

    @property
    def numpy_dtype(self) -> np.dtype:
        return _TO_NUMPY[self]

    @property
    def byte_size(self) -> int:
        """Bytes per element; 0 for BYTES, whose elements vary in size."""
        return 0 if self is DataType.BYTES else _TO_NUMPY[self].itemsize

    @property
    def config_name(self) -> str:
        """The name in model_config.proto's DataType enum ("TYPE_FP32", "TYPE_STRING")."""
        return "TYPE_STRING" if self is DataType.BYTES else "TYPE_" + self.value

    @classmethod
    def from_config(cls, name: str) -> DataType:
        """DataType from a model config name ("TYPE_FP32" or "TYPE_STRING")."""
        try:
            return _FROM_CONFIG[name]
        except KeyError:
            raise InvalidArgumentError(f"unknown data type '{name}'") from None

    @classmethod
    def from_wire(cls, name: str) -> DataType:
        """DataType from a wire name ("FP32"), raising InvalidArgumentError if unknown."""
        try:
            return cls(name)
        except ValueError:
            raise InvalidArgumentError(f"invalid datatype '{name}'") from None

    @classmethod
    def from_numpy(cls, dtype: np.dtype) -> DataType:
        dtype = np.dtype(dtype)
        found = _FROM_NUMPY.get(dtype)
        if found is not None:
            return found
        if dtype.kind in ("S", "U", "O"):
            return DataType.BYTES
        raise InvalidArgumentError(f"numpy dtype '{dtype}' has no Triton datatype")


_TO_NUMPY: dict[DataType, np.dtype] = {
    DataType.BOOL: np.dtype(np.bool_),
    DataType.UINT8: np.dtype(np.uint8),
    DataType.UINT16: np.dtype(np.uint16),
    DataType.UINT32: np.dtype(np.uint32),
    DataType.UINT64: np.dtype(np.uint64),
    DataType.INT8: np.dtype(np.int8),
    DataType.INT16: np.dtype(np.int16),
    DataType.INT32: np.dtype(np.int32),
    DataType.INT64: np.dtype(np.int64),
    DataType.FP16: np.dtype(np.float16),
    DataType.FP32: np.dtype(np.float32),
    DataType.FP64: np.dtype(np.float64),
    DataType.BF16: np.dtype(ml_dtypes.bfloat16),
    DataType.BYTES: np.dtype(np.object_),
}
_FROM_NUMPY: dict[np.dtype, DataType] = {
    dtype: dt for dt, dtype in _TO_NUMPY.items() if dt is not DataType.BYTES
}
_FROM_NUMPY[np.dtype(np.object_)] = DataType.BYTES
_FROM_CONFIG: dict[str, DataType] = {dt.config_name: dt for dt in DataType}


class MemoryType(enum.IntEnum):
    """Where a tensor's bytes live (TRITONSERVER_MemoryType numbering)."""

    CPU = 0
    CPU_PINNED = 1
    GPU = 2


# DLPack device type codes (dlpack.h)
_DLPACK_CPU = 1
_DLPACK_CUDA = 2
_DLPACK_CUDA_HOST = 3


class Tensor:
    """One tensor: a datatype, a shape and the array holding its elements.

    Build it with ``Tensor.from_object`` (numpy arrays, lists, bytes/str sequences, DLPack
    producers) or ``Tensor.from_dlpack``. CPU data is kept as a numpy array, shared, never
    copied.
    """

    __slots__ = ("data_type", "_array", "memory_type", "memory_type_id")

    def __init__(
        self,
        data_type: DataType,
        array: Any,
        memory_type: MemoryType = MemoryType.CPU,
        memory_type_id: int = 0,
    ) -> None:
        self.data_type = data_type
        self._array = array
        self.memory_type = memory_type
        self.memory_type_id = memory_type_id

    # -- construction -------------------------------------------------------------------
    @classmethod
    def from_object(cls, value: Any, data_type: DataType | str | None = None) -> Tensor:
        """Make a tensor from a numpy array, list, scalar, bytes/str sequence or DLPack object.

        ``data_type`` forces the datatype; otherwise it follows the array's dtype.
        """
        if isinstance(value, Tensor):
            return value
        if data_type is not None and not isinstance(data_type, DataType):
            data_type = DataType.from_wire(str(data_type))
        if isinstance(value, np.ndarray):
            array = value
        elif hasattr(value, "__dlpack__") and not isinstance(value, (list, tuple)):
            return cls.from_dlpack(value, data_type)
        elif data_type is DataType.BYTES or _holds_text(value):
            # Fixed-width numpy strings would drop trailing NUL bytes: keep objects.
            array = _object_array(value)
        else:
            array = np.asarray(value)
        return cls.from_numpy(array, data_type)

    @classmethod
    def from_numpy(cls, array: np.ndarray, data_type: DataType | None = None) -> Tensor:
        if data_type is None:
            data_type = DataType.from_numpy(array.dtype)
        if data_type is DataType.BYTES:
            return cls(DataType.BYTES, _as_bytes_array(array))
        want = _TO_NUMPY[data_type]
        if array.dtype != want:
            raise InvalidArgumentError(
                f"numpy dtype '{array.dtype}' does not match datatype {data_type}"
                f" (expected '{want}')"
            )
        return cls(data_type, array)

    @classmethod
    def from_dlpack(cls, producer: Any, data_type: DataType | None = None) -> Tensor:
        """Make a tensor from any DLPack producer (torch, cupy, numpy, jax ...)."""
        device_type, device_id = producer.__dlpack_device__()
        if device_type in (_DLPACK_CPU, _DLPACK_CUDA_HOST):
            array = np.from_dlpack(producer)
            memory = MemoryType.CPU if device_type == _DLPACK_CPU else MemoryType.CPU_PINNED
            tensor = cls.from_numpy(array, data_type)
            tensor.memory_type = memory
            return tensor
        if device_type == _DLPACK_CUDA:
            if data_type is None:
                raise InvalidArgumentError(
                    "a GPU tensor needs an explicit datatype when built from DLPack"
                )
            return cls(data_type, producer, MemoryType.GPU, int(device_id))
        raise UnsupportedError(f"DLPack device type {device_type} is not supported")

    # -- properties ---------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._array.shape)

    @property
    def size(self) -> int:
        """Size in bytes of the data (the serialized size for BYTES)."""
        if self.data_type is DataType.BYTES:
            return sum(4 + len(item) for item in self._array.flat)
        return int(np.prod(self.shape, dtype=np.int64)) * self.data_type.byte_size

    @property
    def element_count(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    # -- conversions --------------------------------------------------------------------
    def to_numpy(self) -> np.ndarray:
        """The data as a numpy array (the same array, no copy, for CPU tensors)."""
        if self.memory_type is MemoryType.GPU:
            raise UnsupportedError(
                "tensor is in GPU memory; use DLPack (e.g. torch.from_dlpack) to read it"
            )
        return self._array

    def to_bytes_array(self) -> np.ndarray:
        """A BYTES tensor as a numpy object array of ``bytes``."""
        if self.data_type is not DataType.BYTES:
            raise InvalidArgumentError(
                f"to_bytes_array needs a BYTES tensor, this one is {self.data_type}"
            )
        return self._array

    def to_string_array(self) -> np.ndarray:
        """A BYTES tensor decoded as UTF-8 into a numpy array of ``str`` objects."""
        decoded = [item.decode("utf-8") for item in self.to_bytes_array().flat]
        return np.array(decoded, dtype=np.object_).reshape(self.shape)

    def reshape(self, shape: Sequence[int]) -> Tensor:
        return Tensor(self.data_type, self._array.reshape(shape), self.memory_type,
                      self.memory_type_id)

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        if self.data_type is DataType.BYTES:
            raise UnsupportedError("BYTES tensors cannot be exported through DLPack")
        return self._array.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        if self.memory_type is MemoryType.GPU:
            return (_DLPACK_CUDA, self.memory_type_id)
        return (_DLPACK_CPU, 0)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        array = self.to_numpy()
        if copy:
            return array.astype(dtype or array.dtype, copy=True)
        if dtype is None or np.dtype(dtype) == array.dtype:
            return array
        if copy is False:
            raise ValueError("a dtype conversion needs a copy, but copy=False was given")
        return array.astype(dtype)

    def __repr__(self) -> str:
        return (
            f"Tensor(data_type={self.data_type.value}, shape={list(self.shape)}, "
            f"memory_type={self.memory_type.name})"
        )


class RawInput(Tensor):
    """An input as a frontend received it, when its data does not fit the shape and
    datatype it declares: ``data_type`` None for a datatype Triton does not know,
    ``byte_size`` the data's size, ``data`` the bytes of a BYTES input. Validation always
    refuses it; it never reaches a backend."""

    __slots__ = ("declared_shape", "byte_size", "data")

    def __init__(self, data_type: DataType | None, shape: Sequence[int], byte_size: int,
                 data: bytes | memoryview | None = None) -> None:
        # data_type None (an unknown datatype) is a RawInput's alone: validation stops it
        super().__init__(data_type, np.empty(0, np.uint8))  # type: ignore[arg-type]
        self.declared_shape = tuple(int(d) for d in shape)
        self.byte_size = byte_size
        self.data = data

    @property
    def shape(self) -> tuple[int, ...]:
        return self.declared_shape


def _holds_text(value: Any) -> bool:
    """True for a (nested) list or tuple whose first leaf is bytes or str."""
    while isinstance(value, (list, tuple)) and value:
        value = value[0]
    return isinstance(value, (bytes, str))


def _object_array(value: Any) -> np.ndarray:
    """An object array of the (nested) sequence's leaves, keeping bytes/str intact."""
    shape = np.shape(np.asarray(value, dtype=np.object_))
    flat: list[Any] = []

    def collect(item: Any) -> None:
        if isinstance(item, (list, tuple)):
            for inner in item:
                collect(inner)
        else:
            flat.append(item)

    collect(value)
    out = np.empty(len(flat), dtype=np.object_)
    out[:] = flat
    return out.reshape(shape)


def _as_bytes_array(array: np.ndarray) -> np.ndarray:
    """Normalise str/bytes/object arrays to an object array whose elements are ``bytes``."""
    if array.dtype == np.object_:
        flat = array.reshape(-1)
        if all(type(item) is bytes for item in flat):
            return array
        converted = [_to_bytes(item) for item in flat]
    elif array.dtype.kind in ("S", "U"):
        converted = [_to_bytes(item) for item in array.reshape(-1).tolist()]
    else:
        # Numbers in a BYTES tensor become their decimal text, as tritonclient does.
        converted = [str(item).encode("utf-8") for item in array.reshape(-1).tolist()]
    out = np.empty(len(converted), dtype=np.object_)
    out[:] = converted
    return out.reshape(array.shape)


def _to_bytes(item: Any) -> bytes:
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode("utf-8")
    if isinstance(item, (bytearray, memoryview, np.bytes_)):
        return bytes(item)
    return str(item).encode("utf-8")


def serialize_bytes_tensor(array: np.ndarray | Iterable[Any]) -> bytes:
    """The wire form of a BYTES tensor: per element a uint32 LE length, then its bytes."""
    items = [_to_bytes(item) for item in np.asarray(array, dtype=np.object_).reshape(-1)]
    parts: list[bytes] = []
    pack = struct.Struct("<I").pack
    for item in items:
        parts.append(pack(len(item)))
        parts.append(item)
    return b"".join(parts)


def deserialize_bytes_tensor(
    buffer: bytes | bytearray | memoryview, count: int | None = None
) -> np.ndarray:
    """Parse the wire form of a BYTES tensor into a flat object array of ``bytes``.

    ``count`` is the element count the shape promises; a buffer that holds a different
    number of elements, or whose length prefixes run past its end, raises
    InvalidArgumentError. Reading stops past ``count`` elements: what a client's shape
    refuses costs no more than the shape allows.
    """
    view = memoryview(buffer).cast("B")
    total = len(view)
    items: list[bytes] = []
    offset = 0
    unpack = struct.Struct("<I").unpack_from
    limit = total if count is None else count  # an element takes 4 bytes at least
    while offset < total:
        if len(items) == limit:
            raise InvalidArgumentError(
                f"BYTES tensor data holds more than the {count} elements the shape needs")
        if offset + 4 > total:
            raise InvalidArgumentError(
                "BYTES tensor data is truncated: an element length prefix is incomplete"
            )
        (length,) = unpack(view, offset)
        offset += 4
        if offset + length > total:
            raise InvalidArgumentError(
                f"BYTES tensor element of {length} bytes runs past the end of the data"
            )
        items.append(bytes(view[offset : offset + length]))
        offset += length
    if count is not None and len(items) != count:
        raise InvalidArgumentError(
            f"BYTES tensor data holds {len(items)} elements, but the shape needs {count}"
        )
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out


def tensors_from_inputs(inputs: Mapping[str, Any], config: model_config_pb2.ModelConfig
                        ) -> dict[str, Tensor]:
    """An in-process caller's inputs as Tensors: a Tensor as it is, numpy and DLPack
    arrays without a copy, anything else (lists, scalars) converted to the datatype
    ``config`` declares for the input."""
    tensors: dict[str, Tensor] = {}
    for name, value in inputs.items():
        if isinstance(value, Tensor):
            tensors[name] = value
        elif isinstance(value, np.ndarray):
            tensors[name] = Tensor.from_numpy(value)
        elif hasattr(value, "__dlpack__") and not isinstance(value, (list, tuple)):
            tensors[name] = Tensor.from_dlpack(value, _configured_type(config, name))
        else:
            data_type = _configured_type(config, name)
            try:
                array = (np.asarray(value, dtype=data_type.numpy_dtype)
                         if data_type is not None and data_type is not DataType.BYTES
                         else np.asarray(value))
            except (TypeError, ValueError) as exc:
                raise InvalidArgumentError(
                    f"input '{name}' for model '{config.name}' cannot be converted to "
                    f"{data_type}: {exc}"
                ) from exc
            tensors[name] = Tensor.from_numpy(array, data_type)
    return tensors


def _configured_type(config: model_config_pb2.ModelConfig, name: str) -> DataType | None:
    # imported here: tensor.py is imported by backend worker processes, which never
    # convert in-process inputs and need not load tritonclient's gRPC package
    from tritonclient.grpc import model_config_pb2

    for inp in config.input:
        if inp.name == name:
            return DataType.from_config(model_config_pb2.DataType.Name(inp.data_type))
    return None
