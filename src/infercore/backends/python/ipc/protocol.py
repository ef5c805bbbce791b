"""The messages between the server and a worker process, and how tensors cross.

Two channels of Unix stream sockets join the server and each worker; frames on them are a
4-byte length and a ``marshal``-encoded tuple whose first item is the frame's kind. Only
metadata travels in frames: tensor data lies in the worker's shared memory (ipc/arena.py)
and frames carry ``(name, datatype, shape, offset, nbytes)`` descriptors. (marshal is the
fastest encoder of plain tuples, and both ends run the same interpreter, so its format
always matches.)

    data channel   (one socket each way)
                   server -> worker: INIT, EXECUTE, FINALIZE
                   worker -> server: READY or INIT_FAILED, then per EXECUTE its DONE,
                   which carries the responses sent during that execute (models that are
                   not decoupled: one frame, one send); RESPONSE frames for any sent
                   later, from a model's thread; FINALIZED
    event channel  worker -> server: LOG records, the responses of decoupled models,
                   BLS_REQUEST and BLS_CANCEL (calls to other models), CONTROL (loads,
                   unloads and readiness of other models), METRIC operations; read by the
                   server's event thread as they come, in order.
                   server -> worker: BLS_RESPONSE, CONTROL_REPLY and METRIC_REPLY, read by
                   the worker's reader thread, which also learns of the server's death
                   there (EOF); READY_CHECK, a readiness request for the model's
                   is_ready(), answered by a READY_ANSWER on the same channel.

BYTES tensors cross in their wire form (4-byte lengths and bytes), serialised on one side
and parsed on the other; every other datatype is copied once into shared memory and read
there without a copy (inputs) or copied once out of it (outputs). BLS tensors (requests'
inputs one way, responses' outputs the other) are copied once into a leased block and
read there without a copy, for as long as the reader keeps them (ipc/arena.py).

Threads: a ``FrameReader`` belongs to the one thread reading its socket; the codec functions
are pure, apart from the memory they write, which their callers own (see ipc/arena.py).
"""

from __future__ import annotations

import marshal
import socket
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from ....errors import UnsupportedError
from ....tensor import DataType, MemoryType, deserialize_bytes_tensor, serialize_bytes_tensor
from ....tensor import Tensor as CoreTensor
from .arena import (
    ALIGN,
    BLOCK_HEADER,
    RELEASED,
    ArenaView,
    InputArena,
    OutputRing,
    lease,
)

__all__ = [
    "BLS_CANCEL",
    "BLS_REQUEST",
    "BLS_RESPONSE",
    "CONTROL",
    "CONTROL_IS_READY",
    "CONTROL_LOAD",
    "CONTROL_REPLY",
    "CONTROL_UNLOAD",
    "DONE",
    "EXECUTE",
    "FINALIZE",
    "FINALIZED",
    "FLAG_FAILED",
    "FLAG_FINAL",
    "FLAG_RESPONSE",
    "INIT",
    "INIT_FAILED",
    "LOG",
    "METRIC",
    "METRIC_REPLY",
    "OP_DROP",
    "OP_FAMILY",
    "OP_INCREMENT",
    "OP_METRIC",
    "OP_OBSERVE",
    "OP_SET",
    "OP_VALUE",
    "READY",
    "READY_ANSWER",
    "READY_CHECK",
    "RESPONSE",
    "FrameReader",
    "encode_frame",
    "read_inputs",
    "read_leased",
    "inline_outputs",
    "read_outputs",
    "release_block",
    "stage_inputs",
    "stage_leased",
    "write_outputs",
]

# frame kinds
INIT = 1  # (INIT, settings: dict)
EXECUTE = 2  # (EXECUTE, exec_id, log_levels, input_size, requests: tuple of records)
FINALIZE = 3  # (FINALIZE,)
READY = 4  # (READY, pid, checks_readiness): the model object has is_ready()
INIT_FAILED = 5  # (INIT_FAILED, error_code, message)
# (RESPONSE, slot, flags, parameters, error, tensors, ring_size, sequence, events): events
# is how many event frames the worker had sent before this response; the server delivers a
# response from the data channel only once it has handled that many, so a client that has
# its response also sees the metric updates and log lines that preceded it.
RESPONSE = 6
# (DONE, exec_id, responses, late): the RESPONSE frames (as tuples) sent during the execute,
# in order, empty for decoupled models, whose responses travel on the event channel; and
# the slots of the requests a model that is not decoupled answers after the execute (their
# RESPONSE frames come on the event channel, outputs inline)
DONE = 7
FINALIZED = 8  # (FINALIZED,)
LOG = 9  # (LOG, level, logger, message, path, line, function, exc_text, extra | None)
# (BLS_REQUEST, call, model, version, request_id, correlation_id, sequence_start,
#  sequence_end, timeout_us, parameters, requested_outputs | None, single_response,
#  arena_size, block, block_size, tensors): the tensors lie in a leased block of the BLS
#  arena; single_response: exec() without decoupled=True (a decoupled model refuses it)
BLS_REQUEST = 10
# (BLS_RESPONSE, call, flags, parameters | None, error | None, input_size, block | -1,
#  block_size, tensors): the tensors lie in a leased block of the worker's input arena
BLS_RESPONSE = 11
BLS_CANCEL = 12  # (BLS_CANCEL, call)
METRIC = 13  # (METRIC, call | 0 for no reply, operation, handle, *arguments)
METRIC_REPLY = 14  # (METRIC_REPLY, call, error | None, value)
# (CONTROL, call, operation, model, arguments): pb_utils.load_model (arguments: config,
#  files as a dict), unload_model (unload_dependents), is_model_ready (version)
CONTROL = 15
CONTROL_REPLY = 16  # (CONTROL_REPLY, call, error | None, value)
READY_CHECK = 17  # (READY_CHECK, call): server -> worker, ask the model's is_ready()
READY_ANSWER = 18  # (READY_ANSWER, call, ready: bool): worker -> server

# CONTROL operations
CONTROL_LOAD = 1
CONTROL_UNLOAD = 2
CONTROL_IS_READY = 3

# METRIC operations; handles name the worker's family and metric objects
OP_FAMILY = 1  # (handle, name, description, kind value)
OP_METRIC = 2  # (handle, family handle, labels as sorted pairs, buckets | None)
OP_INCREMENT = 3  # (handle, value)
OP_SET = 4  # (handle, value)
OP_OBSERVE = 5  # (handle, value)
OP_VALUE = 6  # (handle,): the reply carries the value
OP_DROP = 7  # (handle,): the worker's object is gone

FLAG_FINAL = 1  # the request's last frame
FLAG_RESPONSE = 2  # carries a response (a bare final flag does not)
FLAG_FAILED = 4  # its error fails the request (not the model's own error answer)

_LENGTH = struct.Struct("<I")
_ALIGN_LESS_ONE = ALIGN - 1  # ALIGN is a power of two
_READ_SIZE = 256 * 1024

# datatype <-> small integer, the same table on both sides
_DATATYPES: tuple[DataType, ...] = tuple(DataType)
_CODES: dict[DataType, int] = {dt: code for code, dt in enumerate(_DATATYPES)}
_BYTES_CODE = _CODES[DataType.BYTES]
_BF16_CODE = _CODES[DataType.BF16]
_NUMPY_DTYPES: tuple[np.dtype, ...] = tuple(dt.numpy_dtype for dt in _DATATYPES)
_GPU = MemoryType.GPU

# (name, datatype code, shape, offset or -1, nbytes or the data itself when inline)
Descriptor = tuple[str, int, tuple[int, ...], int, Any]


def encode_frame(frame: tuple[Any, ...]) -> bytes:
    body = marshal.dumps(frame)
    return _LENGTH.pack(len(body)) + body


class FrameReader:
    """Reads whole frames from one socket, for the one thread that owns it."""

    __slots__ = ("_socket", "_buffer", "_scratch")

    def __init__(self, sock: socket.socket) -> None:
        self._socket = sock
        self._buffer = bytearray()
        # Received into one reused buffer: ``recv(n)`` allocates n bytes per call, and at
        # this size glibc maps, faults in and unmaps them every time (~12 µs a call).
        self._scratch = memoryview(bytearray(_READ_SIZE))

    def read(self) -> list[tuple[Any, ...]]:
        """Every complete frame received so far, waiting for one; [] when the peer is gone
        (or at the socket's timeout)."""
        buffer = self._buffer
        while True:
            frames = self._parse(buffer)
            if frames:
                return frames
            try:
                count = self._socket.recv_into(self._scratch)
            except BlockingIOError:
                # An event loop that watched this socket (uvloop's libuv) left its
                # descriptor non-blocking: give it back the mode its timeout stands for.
                timeout = self._socket.gettimeout()
                if timeout == 0:
                    return []  # non-blocking on purpose: nothing to wait for
                self._socket.settimeout(timeout)
                continue
            except OSError:  # reset, a timeout, or closed under us
                return []
            if not count:
                return []
            buffer += self._scratch[:count]

    def read_available(self) -> list[tuple[Any, ...]] | None:
        """Without waiting (for an event loop told the socket is readable): the complete
        frames received so far; None when no whole frame has come yet; [] when the peer
        is gone."""
        buffer = self._buffer
        frames = self._parse(buffer)
        if frames:
            return frames
        try:
            count = self._socket.recv_into(self._scratch, 0, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return None
        except OSError:  # reset, or closed under us
            return []
        if not count:
            return []
        buffer += self._scratch[:count]
        return self._parse(buffer) or None

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
        if tensor.memory_type is _GPU:
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
            # A C-contiguous array is its own bytes-like data, but the buffer protocol
            # cannot export ml_dtypes' bfloat16: its bits as uint16.
            data = array.view(np.uint16) if code == _BF16_CODE else array
        prepared.append((name, code, array.shape, data, nbytes, size))
        size += (nbytes + _ALIGN_LESS_ONE) & -ALIGN  # round_up(nbytes, ALIGN), inlined
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
        if offset >= 0 and nbytes and code != _BYTES_CODE:  # the usual case, inlined
            array = np.ndarray(shape, _NUMPY_DTYPES[code], buffer, offset)
            inputs[name] = CoreTensor(_DATATYPES[code], array)
        else:
            inputs[name] = _tensor_at(buffer, code, shape, offset, nbytes, copy=False)
    return inputs


# -- BLS: leased blocks, either way -------------------------------------------------------
def stage_leased(arena: InputArena, tensors: Mapping[str, CoreTensor], what: str
                 ) -> tuple[int, int, tuple[Descriptor, ...]]:
    """Copy ``tensors`` into a new leased block: ``(block, block size, descriptors)``."""
    prepared, size = _prepare(tensors, what, BLOCK_HEADER)
    block = arena.allocate(size, leased=True)
    return block, size, _copy_into(arena.buffer(), block, prepared)


def read_leased(view: ArenaView, size: int, block: int, block_size: int,
                descriptors: tuple[Descriptor, ...]) -> dict[str, CoreTensor]:
    """Tensors over a leased block: views, no copies (BYTES are parsed). The block is
    released when the last of them is gone."""
    held = lease(view.buffer(size), block, block_size)
    tensors: dict[str, CoreTensor] = {}
    for name, code, shape, offset, nbytes in descriptors:
        if code == _BYTES_CODE or nbytes == 0:
            tensors[name] = _tensor_at(held, code, shape, offset - block, nbytes, copy=False)
            continue
        dtype = _DATATYPES[code].numpy_dtype
        start = offset - block
        array = held[start : start + nbytes].view(dtype).reshape(shape)
        tensors[name] = CoreTensor(_DATATYPES[code], array)
    return tensors


def release_block(view: ArenaView, size: int, block: int) -> None:
    """Release a leased block nobody will read (its call is gone)."""
    view.buffer(size)[block] = RELEASED


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


def inline_outputs(outputs: Mapping[str, CoreTensor]) -> tuple[Descriptor, ...]:
    """A response's outputs carried in its frame itself (no ring chunk): what
    ``write_outputs`` does when the ring is full, for a frame on another channel."""
    if not outputs:
        return ()
    prepared, _ = _prepare(outputs, "output", 0)
    return tuple((name, code, shape, -1, bytes(data)) for name, code, shape, data, _, _ in prepared)


def read_outputs(view: ArenaView, size: int, descriptors: tuple[Descriptor, ...]
                 ) -> dict[str, CoreTensor]:
    """The server's copies of a response's outputs (the ring chunk is reused after this).

    The fixed-size tensors of the chunk are copied out together, in one copy, and each is
    an array over its part of that copy.
    """
    buffer = view.buffer(size)
    low = high = -1
    for _, code, _, offset, nbytes in descriptors:
        if offset >= 0 and code != _BYTES_CODE and nbytes:
            if low < 0 or offset < low:
                low = offset
            high = max(high, offset + nbytes)
    copied = None
    if low >= 0:
        with memoryview(buffer) as whole:  # released at once: the mapping may grow later
            copied = bytearray(whole[low:high])  # the one copy
    outputs: dict[str, CoreTensor] = {}
    for name, code, shape, offset, data in descriptors:
        if copied is not None and offset >= 0 and code != _BYTES_CODE and data:
            array = np.ndarray(shape, _NUMPY_DTYPES[code], copied, offset - low)
            outputs[name] = CoreTensor(_DATATYPES[code], array)
        else:
            outputs[name] = _tensor_at(buffer, code, shape, offset, data, copy=True)
    return outputs


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
