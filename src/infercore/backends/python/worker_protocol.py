"""The messages between the server and a worker process, and how tensors cross.

Two stream sockets join the server and each worker; frames on them are a 4-byte length and a
``marshal``-encoded tuple whose first item is the frame's kind. Only metadata travels in
frames: tensor data lies in the worker's shared memory (worker_arena.py) and frames carry
``(name, datatype, shape, offset, nbytes)`` descriptors. (marshal is the fastest encoder of
plain tuples, and both ends run the same interpreter, so its format always matches.)

    data channel   server -> worker: INIT, EXECUTE, FINALIZE
                   worker -> server: READY or INIT_FAILED, then per EXECUTE the responses
                   (models that are not decoupled; written together with DONE in one
                   send) and DONE; FINALIZED
    event channel  worker -> server only: LOG records, and the responses of decoupled
                   models, read by the server's event thread as they come. The worker
                   holds the other direction open to learn of the server's death (EOF).

BYTES tensors cross in their wire form (4-byte lengths and bytes), serialised on one side
and parsed on the other; every other datatype is copied once into shared memory and read
there without a copy (inputs) or copied once out of it (outputs).

Threads: a ``FrameReader`` belongs to the one thread reading its socket; the codec functions
are pure, apart from the memory they write, which their callers own (see worker_arena.py).
"""

from __future__ import annotations

import marshal
import socket
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...errors import UnsupportedError
from ...tensor import DataType, MemoryType, deserialize_bytes_tensor, serialize_bytes_tensor
from ...tensor import Tensor as CoreTensor
from .worker_arena import ALIGN, BLOCK_HEADER, ArenaView, InputArena, OutputRing, round_up

__all__ = [
    "DONE",
    "EXECUTE",
    "FINALIZE",
    "FINALIZED",
    "FLAG_FINAL",
    "FLAG_RESPONSE",
    "INIT",
    "INIT_FAILED",
    "LOG",
    "READY",
    "RESPONSE",
    "FrameReader",
    "encode_frame",
    "read_inputs",
    "read_outputs",
    "stage_inputs",
    "write_outputs",
]

# frame kinds
INIT = 1  # (INIT, settings: dict)
EXECUTE = 2  # (EXECUTE, exec_id, log_levels, input_size, requests: tuple of records)
FINALIZE = 3  # (FINALIZE,)
READY = 4  # (READY, pid)
INIT_FAILED = 5  # (INIT_FAILED, error_code, message)
RESPONSE = 6  # (RESPONSE, slot, flags, parameters, error, tensors, ring_size, sequence)
DONE = 7  # (DONE, exec_id)
FINALIZED = 8  # (FINALIZED,)
LOG = 9  # (LOG, level, logger, message, path, line, function, exc_text, extra | None)

FLAG_FINAL = 1  # the request's last frame
FLAG_RESPONSE = 2  # carries a response (a bare final flag does not)

_LENGTH = struct.Struct("<I")
_READ_SIZE = 256 * 1024

# datatype <-> small integer, the same table on both sides
_DATATYPES: tuple[DataType, ...] = tuple(DataType)
_CODES: dict[DataType, int] = {dt: code for code, dt in enumerate(_DATATYPES)}
_BYTES_CODE = _CODES[DataType.BYTES]
_BF16_CODE = _CODES[DataType.BF16]

# (name, datatype code, shape, offset or -1, nbytes or the data itself when inline)
Descriptor = tuple[str, int, tuple[int, ...], int, Any]


def encode_frame(frame: tuple[Any, ...]) -> bytes:
    body = marshal.dumps(frame)
    return _LENGTH.pack(len(body)) + body


class FrameReader:
    """Reads whole frames from one socket, for the one thread that owns it.

    ``reset`` tells how the peer went away: a Unix socket closed with data still unread in
    its receive queue resets the connection instead of ending it (Linux), so a reset on
    the data channel means the worker died before it had read all we sent it.
    """

    __slots__ = ("_socket", "_buffer", "reset")

    def __init__(self, sock: socket.socket) -> None:
        self._socket = sock
        self._buffer = bytearray()
        self.reset = False

    def read(self) -> list[tuple[Any, ...]]:
        """Every complete frame received so far, waiting for one; [] when the peer is gone
        (or at the socket's timeout)."""
        buffer = self._buffer
        while True:
            frames = self._parse(buffer)
            if frames:
                return frames
            try:
                chunk = self._socket.recv(_READ_SIZE)
            except ConnectionResetError:
                self.reset = True
                return []
            except OSError:  # a timeout, or closed under us
                return []
            if not chunk:
                return []
            buffer += chunk

    @staticmethod
    def _parse(buffer: bytearray) -> list[tuple[Any, ...]]:
        frames: list[tuple[Any, ...]] = []
        position = 0
        available = len(buffer)
        view = memoryview(buffer)
        try:
            while available - position >= 4:
                (length,) = _LENGTH.unpack_from(view, position)
                end = position + 4 + length
                if end > available:
                    break
                frames.append(marshal.loads(view[position + 4 : end]))
                position = end
        finally:
            view.release()  # a bytearray with exports cannot be resized
        if position:
            del buffer[:position]
        return frames


# -- tensors into shared memory ----------------------------------------------------------
# (name, datatype code, shape, bytes-like data, nbytes, offset relative to the chunk)
_Prepared = tuple[str, int, tuple[int, ...], Any, int, int]


def _prepare(tensors: Mapping[str, CoreTensor], what: str, start: int
             ) -> tuple[list[_Prepared], int]:
    """Each tensor as bytes-like data at its aligned place from ``start``; the end."""
    prepared: list[_Prepared] = []
    size = start
    for name, tensor in tensors.items():
        if tensor.memory_type is MemoryType.GPU:
            raise UnsupportedError(
                f"{what} '{name}' is in GPU memory; process-isolated Python instances "
                "exchange CPU tensors only"
            )
        array = tensor.to_numpy()
        code = _CODES[tensor.data_type]
        data: Any
        if code == _BYTES_CODE:
            data = serialize_bytes_tensor(array)
            nbytes = len(data)
        else:
            if not array.flags.c_contiguous:
                array = np.ascontiguousarray(array)
            nbytes = array.nbytes
            # The buffer protocol cannot export ml_dtypes' bfloat16: its bits as uint16.
            data = (array.view(np.uint16) if code == _BF16_CODE else array).data
        prepared.append((name, code, array.shape, data, nbytes, size))
        size += round_up(nbytes, ALIGN)
    return prepared, size


def _copy_into(buffer: Any, base: int, prepared: list[_Prepared]) -> tuple[Descriptor, ...]:
    descriptors: list[Descriptor] = []
    for name, code, shape, data, nbytes, relative in prepared:
        offset = base + relative
        if nbytes:
            buffer[offset : offset + nbytes] = data  # one memcpy
        descriptors.append((name, code, shape, offset, nbytes))
    return tuple(descriptors)


# -- inputs: server -> worker -----------------------------------------------------------
def stage_inputs(
    arena: InputArena, inputs: Mapping[str, CoreTensor], cancelled: bool
) -> tuple[int, tuple[Descriptor, ...]]:
    """Copy a request's inputs into a new block of ``arena``: ``(block offset, descriptors)``.

    The block's first byte is the request's cancel flag.
    """
    prepared, size = _prepare(inputs, "input", BLOCK_HEADER)
    block = arena.allocate(size)
    arena.set_flag(block, 1 if cancelled else 0)
    return block, _copy_into(arena.buffer(), block, prepared)


def read_inputs(view: ArenaView, size: int, descriptors: tuple[Descriptor, ...]
                ) -> dict[str, CoreTensor]:
    """The worker's tensors over its input block: views, no copies (BYTES are parsed)."""
    buffer = view.buffer(size)
    inputs: dict[str, CoreTensor] = {}
    for name, code, shape, offset, nbytes in descriptors:
        inputs[name] = _tensor_at(buffer, code, shape, offset, nbytes, copy=False)
    return inputs


# -- outputs: worker -> server ----------------------------------------------------------
def write_outputs(
    ring: OutputRing, outputs: Mapping[str, CoreTensor]
) -> tuple[int, tuple[Descriptor, ...]]:
    """Copy a response's outputs into one ring chunk: ``(sequence, descriptors)``.

    Sequence 0 means no chunk was used. When the ring is full (responses were sent faster
    than the server copies them out) the data travels inline in the frame instead.
    """
    prepared, size = _prepare(outputs, "output", 0)
    if size == 0:
        return 0, tuple((name, code, shape, 0, 0) for name, code, shape, *_ in prepared)
    chunk = ring.allocate(size)
    if chunk is None:
        return 0, tuple((name, code, shape, -1, bytes(data))
                        for name, code, shape, data, _, _ in prepared)
    sequence, start = chunk
    return sequence, _copy_into(ring.buffer(), start, prepared)


def read_outputs(view: ArenaView, size: int, descriptors: tuple[Descriptor, ...]
                 ) -> dict[str, CoreTensor]:
    """The server's copies of a response's outputs (the ring chunk is reused after this)."""
    buffer = view.buffer(size)
    return {
        name: _tensor_at(buffer, code, shape, offset, data, copy=True)
        for name, code, shape, offset, data in descriptors
    }


def _tensor_at(buffer: Any, code: int, shape: tuple[int, ...], offset: int, data: Any,
               *, copy: bool) -> CoreTensor:
    datatype = _DATATYPES[code]
    if offset < 0:  # inline: data holds the bytes themselves
        raw: Any = data
        offset, nbytes = 0, len(data)
    else:
        raw, nbytes = buffer, data
    if code == _BYTES_CODE:
        count = int(np.prod(shape, dtype=np.int64))
        if nbytes == 0:
            flat = np.empty(0, dtype=np.object_)
        else:
            flat = deserialize_bytes_tensor(memoryview(raw)[offset : offset + nbytes], count)
        return CoreTensor(DataType.BYTES, flat.reshape(shape))
    dtype = datatype.numpy_dtype
    if nbytes == 0:
        return CoreTensor(datatype, np.empty(shape, dtype=dtype))
    array = np.frombuffer(raw, dtype, nbytes // dtype.itemsize, offset).reshape(shape)
    return CoreTensor(datatype, array.copy() if copy else array)
