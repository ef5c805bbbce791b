"""Output allocation: outputs copied once into buffers the caller supplies.

Triton asks a response allocator for each output's memory (``ResponseAllocator`` in the C
API, ``MemoryAllocator`` in its Python API, ``Allocator`` in tritonserver-rs). Here a
backend's outputs are numpy arrays already; an ``OutputPlacement`` copies each one into the
caller's buffer (a preallocated one named by output, or one returned by the caller's
allocator) and the response's tensor then wraps that buffer. Runs on the thread that
produced the response; nothing here is shared between threads.

Buffers: a numpy array, a ``bytearray``, a writable ``memoryview`` or any DLPack producer
(torch, cupy). A host buffer is reported as the memory type the allocator was asked for
(CPU, or CPU_PINNED: the caller vouches that it pinned it); a DLPack buffer reports its own
device. BYTES outputs are written in their wire form (4-byte length + bytes per element);
their tensor stays the array of ``bytes`` objects, which no raw buffer can hold.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .errors import InternalError, InvalidArgumentError, TritonError, UnsupportedError
from .response import InferResponse
from .tensor import DataType, MemoryType, Tensor, serialize_bytes_tensor

__all__ = ["OutputAllocator", "OutputPlacement", "check_memory_type"]

# allocator(name, datatype, byte_size, memory_type, memory_type_id) -> buffer
OutputAllocator = Callable[[str, DataType, int, MemoryType, int], Any]

_DLPACK_CPU = 1
_DLPACK_CUDA = 2
_DLPACK_CUDA_HOST = 3


def gpu_available() -> bool:
    """Whether a CUDA device can be used (through torch or cupy, imported only here)."""
    try:
        import torch

        if torch.cuda.is_available():
            return True
    except ImportError:
        pass
    try:
        import cupy  # type: ignore[import-not-found]

        return bool(cupy.cuda.runtime.getDeviceCount() > 0)
    except Exception:  # no cupy, or no driver
        return False


def check_memory_type(memory_type: MemoryType | int | str) -> MemoryType:
    """A MemoryType from its enum, number or name; GPU only where a device exists."""
    try:
        if isinstance(memory_type, str):
            found = MemoryType[memory_type.upper()]
        else:
            found = MemoryType(memory_type)
    except (KeyError, ValueError):
        raise InvalidArgumentError(
            f"unknown memory type {memory_type!r}: expected CPU, CPU_PINNED or GPU") from None
    if found is MemoryType.GPU and not gpu_available():
        raise UnsupportedError("GPU output memory was requested, but this host has no CUDA "
                               "device (through torch or cupy)")
    return found


class OutputPlacement:
    """Where a request's outputs go: preallocated buffers, an allocator, a memory type."""

    __slots__ = ("buffers", "allocator", "memory_type", "memory_type_id")

    def __init__(self, buffers: Mapping[str, Any], allocator: OutputAllocator | None,
                 memory_type: MemoryType, memory_type_id: int) -> None:
        self.buffers = dict(buffers)
        self.allocator = allocator
        self.memory_type = memory_type
        self.memory_type_id = memory_type_id

    def place(self, response: InferResponse) -> InferResponse:
        """The response with every output in the caller's memory, or an error response."""
        placed: dict[str, Tensor] = {}
        try:
            for name, tensor in response.outputs.items():
                placed[name] = self._place_one(response.model, name, tensor)
        except TritonError as exc:
            return _failed(response, exc)
        except Exception as exc:  # the caller's allocator or buffer misbehaved
            return _failed(response, InternalError(
                f"output allocation for model '{response.model}' failed: "
                f"{type(exc).__name__}: {exc}"))
        response.outputs = placed
        return response

    def _place_one(self, model: str, name: str, tensor: Tensor) -> Tensor:
        buffer = self.buffers.get(name)
        if buffer is None and self.allocator is None:
            if self.memory_type is MemoryType.GPU:
                return _to_gpu(tensor, self.memory_type_id)
            return tensor  # the default allocator: the backend's own array
        source = tensor.to_numpy()
        wire = (np.frombuffer(serialize_bytes_tensor(source), np.uint8)
                if tensor.data_type is DataType.BYTES else None)
        byte_size = wire.size if wire is not None else source.nbytes
        if buffer is None:
            buffer = self.allocator(name, tensor.data_type, byte_size,  # type: ignore[misc]
                                    self.memory_type, self.memory_type_id)
            if buffer is None:
                raise InternalError(f"the output allocator returned no buffer for output "
                                    f"'{name}' of model '{model}'")
        device_type, device_id = _device_of(buffer)
        if device_type == _DLPACK_CUDA:
            return _copy_to_device(buffer, tensor, wire, byte_size, name, model, device_id)
        target = _host_bytes(buffer, name, model)
        if target.size < byte_size:
            raise InvalidArgumentError(
                f"the buffer for output '{name}' of model '{model}' holds {target.size} "
                f"bytes, but the output needs {byte_size}")
        if wire is not None:
            target[:byte_size] = wire
            result = Tensor(DataType.BYTES, source)
        elif (isinstance(buffer, np.ndarray) and buffer.dtype == source.dtype
              and buffer.shape == source.shape):
            np.copyto(buffer, source)
            result = Tensor(tensor.data_type, buffer)  # the caller's array itself
        else:
            view = target[:byte_size].view(source.dtype).reshape(source.shape)
            np.copyto(view, source)
            result = Tensor(tensor.data_type, view)
        if device_type == _DLPACK_CUDA_HOST:
            result.memory_type = MemoryType.CPU_PINNED
        elif device_type == 0:  # a plain host buffer: the type the allocator was asked for
            result.memory_type = (self.memory_type if self.memory_type is not MemoryType.GPU
                                  else MemoryType.CPU)
        return result


def _failed(response: InferResponse, error: TritonError) -> InferResponse:
    return InferResponse(response.model, response.model_version, response.request_id,
                         parameters=response.parameters, error=error, final=response.final)


def _device_of(buffer: Any) -> tuple[int, int]:
    """(DLPack device type, id) of a DLPack buffer; (0, 0) for numpy and Python buffers."""
    if isinstance(buffer, (np.ndarray, bytearray, memoryview)):
        return 0, 0
    device = getattr(buffer, "__dlpack_device__", None)
    if device is None:
        return 0, 0
    device_type, device_id = device()
    return int(device_type), int(device_id)


def _host_bytes(buffer: Any, name: str, model: str) -> np.ndarray:
    """A writable flat uint8 view of a host buffer (never a copy)."""
    try:
        if isinstance(buffer, np.ndarray):
            array = buffer
        elif isinstance(buffer, (bytearray, memoryview)):
            array = np.frombuffer(memoryview(buffer).cast("B"), np.uint8)
        elif hasattr(buffer, "__dlpack__"):
            array = np.from_dlpack(buffer)
        else:
            array = np.frombuffer(memoryview(buffer).cast("B"), np.uint8)
    except (TypeError, ValueError, BufferError) as exc:
        raise InvalidArgumentError(
            f"the buffer for output '{name}' of model '{model}' is not a contiguous "
            f"buffer ({type(buffer).__name__}): {exc}") from exc
    if not array.flags.c_contiguous or not array.flags.writeable:
        raise InvalidArgumentError(
            f"the buffer for output '{name}' of model '{model}' must be writable and "
            "C-contiguous")
    return array.reshape(-1).view(np.uint8)


def _copy_to_device(buffer: Any, tensor: Tensor, wire: np.ndarray | None, byte_size: int,
                    name: str, model: str, device_id: int) -> Tensor:
    """Copy an output into a caller's GPU buffer (through torch, which reads DLPack)."""
    import torch

    target = torch.from_dlpack(buffer).reshape(-1).view(torch.uint8)
    if target.numel() < byte_size:
        raise InvalidArgumentError(
            f"the buffer for output '{name}' of model '{model}' holds {target.numel()} "
            f"bytes, but the output needs {byte_size}")
    source = wire if wire is not None else tensor.to_numpy().reshape(-1).view(np.uint8)
    source = np.ascontiguousarray(source)
    if not source.flags.writeable:  # torch wraps only writable arrays without a warning
        source = source.copy()
    target[:byte_size].copy_(torch.from_numpy(source))
    if wire is not None:
        return Tensor(DataType.BYTES, tensor.to_numpy())
    typed = target[:byte_size].view(_torch_dtype(tensor)).reshape(tensor.shape)
    return Tensor(tensor.data_type, typed, MemoryType.GPU, device_id)


def _to_gpu(tensor: Tensor, device_id: int) -> Tensor:
    """The default allocator for GPU outputs: a new device tensor holding a copy."""
    if tensor.data_type is DataType.BYTES:
        return tensor  # BYTES outputs stay in host memory, as in Triton
    import torch

    array = np.ascontiguousarray(tensor.to_numpy())
    if not array.flags.writeable:
        array = array.copy()
    moved = torch.from_numpy(array).to(f"cuda:{device_id}")
    return Tensor(tensor.data_type, moved, MemoryType.GPU, device_id)


def _torch_dtype(tensor: Tensor) -> Any:
    import torch

    return torch.from_numpy(np.empty(0, tensor.to_numpy().dtype)).dtype
