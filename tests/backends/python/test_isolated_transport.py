"""Shared memory transport of isolated instances, both ends in this process (no workers)."""

from __future__ import annotations

import os
import socket
import threading

import ml_dtypes
import numpy as np
import pytest

from infercore.backends.python.ipc.arena import (
    ALIGN,
    RING_HEADER,
    ArenaView,
    InputArena,
    OutputRing,
    create_memory_file,
)
from infercore.backends.python.ipc.protocol import (
    RESPONSE,
    FrameReader,
    encode_frame,
    read_inputs,
    read_leased,
    read_outputs,
    stage_inputs,
    stage_leased,
    write_outputs,
)
from infercore.backends.python.worker.runtime import _Outbox, _WorkerRequest, _WorkerSender
from infercore.errors import InternalError, UnsupportedError
from infercore.tensor import DataType, MemoryType
from infercore.tensor import Tensor as CoreTensor

SAMPLES = {
    DataType.BOOL: np.array([True, False, True]),
    DataType.INT8: np.array([-128, 0, 127], dtype=np.int8),
    DataType.INT16: np.array([-32768, 1, 32767], dtype=np.int16),
    DataType.INT32: np.array([-(2**31), 2, 2**31 - 1], dtype=np.int32),
    DataType.INT64: np.array([-(2**63), 3, 2**63 - 1], dtype=np.int64),
    DataType.UINT8: np.array([0, 1, 255], dtype=np.uint8),
    DataType.UINT16: np.array([0, 1, 65535], dtype=np.uint16),
    DataType.UINT32: np.array([0, 1, 2**32 - 1], dtype=np.uint32),
    DataType.UINT64: np.array([0, 1, 2**64 - 1], dtype=np.uint64),
    DataType.FP16: np.array([0.5, -1.0, 65504.0], dtype=np.float16),
    DataType.FP32: np.array([0.25, -1e30, 3.5], dtype=np.float32),
    DataType.FP64: np.array([1e-300, -2.0, 1e300], dtype=np.float64),
    DataType.BF16: np.array([1.5, -2.0, 3.0e38], dtype=ml_dtypes.bfloat16),
    DataType.BYTES: np.array([b"", b"\x00bin\xff", "ünï".encode()], dtype=np.object_),
}


def tensors() -> dict[str, CoreTensor]:
    made = {f"T_{dt.value}": CoreTensor(dt, array.reshape(1, 3)) for dt, array in SAMPLES.items()}
    made["EMPTY"] = CoreTensor(DataType.FP32, np.zeros((0, 4), np.float32))
    made["EMPTY_BYTES"] = CoreTensor(DataType.BYTES, np.empty((2, 0), dtype=np.object_))
    return made


def assert_same(got: dict[str, CoreTensor], want: dict[str, CoreTensor]) -> None:
    assert list(got) == list(want)
    for name, tensor in want.items():
        assert got[name].data_type is tensor.data_type, name
        assert got[name].shape == tensor.shape, name
        np.testing.assert_array_equal(got[name].to_numpy(), tensor.to_numpy(), err_msg=name)


@pytest.fixture
def arena():
    made = InputArena("test-in", 4096, 4096)
    yield made
    made.close()


@pytest.fixture
def ring():
    fd = create_memory_file("test-out", 4096)
    writer = OutputRing(os.dup(fd), 4096, 4096)
    reader = ArenaView(fd, 4096)
    yield writer, reader
    writer.close()
    reader.close()


def test_inputs_of_every_datatype_cross_as_views(arena: InputArena):
    want = tensors()
    block, descriptors = stage_inputs(arena, want, cancelled=False)
    view = ArenaView(os.dup(arena.fd), arena.size)
    got = read_inputs(view, arena.size, descriptors)
    assert_same(got, want)
    # numeric inputs are views of the shared memory, not copies
    assert not got["T_FP32"].to_numpy().flags.owndata
    assert view.flag(block) == 0
    view.close()


def test_outputs_of_every_datatype_are_copied_out(ring):
    writer, reader = ring
    want = tensors()
    sequence, descriptors = write_outputs(writer, want)
    assert sequence == 1
    got = read_outputs(reader, writer.size, descriptors)
    assert_same(got, want)
    ring_memory = np.frombuffer(reader.buffer(writer.size), np.uint8)
    for name, tensor in got.items():  # copies: the ring chunk is reused after this
        assert not np.shares_memory(tensor.to_numpy(), ring_memory), name
    got["T_FP64"].to_numpy()[0, 0] = 7.0  # writable, as a client may expect


def test_cancel_flag_is_the_blocks_first_byte(arena: InputArena):
    block, _ = stage_inputs(arena, {"A": CoreTensor(DataType.FP32, np.ones(2, np.float32))},
                            cancelled=True)
    view = ArenaView(os.dup(arena.fd), arena.size)
    assert view.flag(block) == 1
    arena.set_flag(block, 0)
    assert view.flag(block) == 0
    view.close()


def test_input_arena_reuses_freed_gaps_first_fit(arena: InputArena):
    first = arena.allocate(100)
    second = arena.allocate(100)
    third = arena.allocate(100)
    assert (first, second, third) == (0, 128, 256)
    arena.free(second)
    assert arena.allocate(64) == 128
    assert arena.allocate(64) == 192
    assert arena.live_blocks == 4


def test_input_arena_grows_when_nothing_fits_and_views_follow(arena: InputArena):
    view = ArenaView(os.dup(arena.fd), arena.size)
    big = CoreTensor(DataType.UINT8, np.arange(10_000, dtype=np.uint8) % 251)
    _, descriptors = stage_inputs(arena, {"BIG": big}, cancelled=False)
    assert arena.size >= 10_000 + ALIGN
    got = read_inputs(view, arena.size, descriptors)  # the view remaps to the new size
    np.testing.assert_array_equal(got["BIG"].to_numpy(), big.to_numpy())
    view.close()


def test_output_ring_restarts_at_its_beginning_once_consumed(ring):
    writer, reader = ring
    first = writer.allocate(100)
    assert first == (1, RING_HEADER)
    reader.mark_consumed(1)
    assert writer.allocate(100) == (2, RING_HEADER)


def test_output_ring_wraps_and_refuses_to_overwrite_unread_chunks(ring):
    writer, reader = ring
    chunk = 1024
    sequences = [writer.allocate(chunk) for _ in range(3)]  # 64..3136 of 4096
    assert [offset for _, offset in sequences] == [64, 64 + chunk, 64 + 2 * chunk]
    reader.mark_consumed(1)  # the first chunk is free: the ring wraps to its start
    assert writer.allocate(chunk) == (4, RING_HEADER)
    assert writer.allocate(chunk) is None  # wrapped: only the gap before chunk 2 is free
    assert writer.size == 4096


def test_a_ring_full_of_unread_chunks_grows_past_them(ring):
    # a batch's responses, all written before the server reads any (they come with DONE)
    writer, reader = ring
    big = CoreTensor(DataType.FP32, np.arange(512, dtype=np.float32))  # 2 KiB
    written = [write_outputs(writer, {"OUT": big}) for _ in range(4)]
    assert [sequence for sequence, _ in written] == [1, 2, 3, 4]  # none inline
    assert writer.size >= 64 + 4 * 2048
    for _, descriptors in written:  # every chunk is still there, where it was written
        assert_same(read_outputs(reader, writer.size, descriptors), {"OUT": big})
    reader.mark_consumed(4)
    assert writer.allocate(100) == (5, RING_HEADER)


def test_full_ring_sends_outputs_inline(ring):
    writer, reader = ring
    writer.allocate(2048)
    writer.allocate(1024)
    reader.mark_consumed(1)
    writer.allocate(1024)  # wrapped to the start: 1 KiB free before chunk 2
    want = {"A": CoreTensor(DataType.INT64, np.arange(200, dtype=np.int64)),
            "S": CoreTensor(DataType.BYTES, np.array([b"x" * 300], dtype=np.object_))}
    sequence, descriptors = write_outputs(writer, want)
    assert sequence == 0 and all(offset == -1 for _, _, _, offset, _ in descriptors)
    assert_same(read_outputs(reader, writer.size, descriptors), want)


def test_empty_ring_grows_for_a_large_response(ring):
    writer, reader = ring
    big = CoreTensor(DataType.FP32, np.arange(5000, dtype=np.float32))
    sequence, descriptors = write_outputs(writer, {"BIG": big})
    assert sequence == 1 and writer.size > 4096
    assert_same(read_outputs(reader, writer.size, descriptors), {"BIG": big})


def test_gpu_tensors_do_not_cross(arena: InputArena, ring):
    writer, _ = ring
    gpu = CoreTensor(DataType.FP32, object(), MemoryType.GPU, 0)
    with pytest.raises(UnsupportedError, match="GPU"):
        stage_inputs(arena, {"G": gpu}, cancelled=False)
    with pytest.raises(UnsupportedError, match="GPU"):
        write_outputs(writer, {"G": gpu})


def test_leased_tensors_are_views_and_their_block_is_freed_when_they_go(arena: InputArena):
    # BLS: the writer copies once into a leased block, the reader views it; the block is
    # reused only once the reader dropped every view (no message needed).
    view = ArenaView(os.dup(arena.fd), arena.size)
    want = tensors()
    block, size, descriptors = stage_leased(arena, want, "output")
    got = read_leased(view, arena.size, block, size, descriptors)
    assert_same(got, want)
    kept = got["T_INT64"].to_numpy()
    assert not kept.flags.owndata  # a view of the shared memory
    del got
    assert arena.leased_blocks == 1  # one array still views the block
    second, _, _ = stage_leased(arena, want, "output")
    assert second != block
    del kept
    assert arena.leased_blocks == 1  # only the second block is still leased
    third, _, _ = stage_leased(arena, want, "output")
    assert third == block  # first fit: the released block's place
    view.close()


def test_leased_views_survive_closing_their_mapping(arena: InputArena):
    view = ArenaView(os.dup(arena.fd), arena.size, keep_mapped=True)
    want = {"A": CoreTensor(DataType.FP64, np.arange(64, dtype=np.float64))}
    block, size, descriptors = stage_leased(arena, want, "input")
    got = read_leased(view, arena.size, block, size, descriptors)
    view.close()  # e.g. the worker died while a called model still reads its inputs
    assert_same(got, want)


def test_frame_reader_splits_and_joins_frames():
    ours, theirs = socket.socketpair()
    with ours, theirs:
        frames = [(1, "a" * 10, None), (2, {"k": (1, 2.5, True)}), (3, b"\x00" * 300_000)]
        raw = b"".join(encode_frame(frame) for frame in frames)
        reader = FrameReader(ours)
        theirs.sendall(raw[:3])  # not even a length yet: read() waits for more

        def send_rest() -> None:
            theirs.sendall(raw[3:])  # larger than the socket buffer: sent while read
            theirs.shutdown(socket.SHUT_WR)

        sender = threading.Thread(target=send_rest)
        sender.start()
        got: list[tuple] = []
        while len(got) < 3:
            got.extend(reader.read())
        sender.join()
        assert got == frames
        assert reader.read() == []


def test_worker_sender_lets_go_of_its_request_at_the_final_response(arena: InputArena, ring):
    writer, _ = ring
    data, peer = socket.socketpair()
    events, events_peer = socket.socketpair()
    outbox = _Outbox(data, events, writer, decoupled=False, model_name="m")
    flags = ArenaView(os.dup(arena.fd), arena.size)
    request = _WorkerRequest("m", {}, id="req-7")
    request.watch_flag(flags, 0)
    sender = _WorkerSender(request, 1, outbox)
    request.sender = sender  # type: ignore[assignment]
    try:
        sender.send({"OUT": CoreTensor(DataType.INT32, np.arange(3, dtype=np.int32))})
        assert sender.closed
        assert sender._request is None  # no request <-> sender cycle left behind
        with pytest.raises(InternalError, match="request 'req-7' for model 'm' is closed"):
            sender.send({})
        with pytest.raises(InternalError, match="is closed"):
            sender.close()
        assert [frame[0] for frame in FrameReader(peer).read()] == [RESPONSE]
    finally:
        flags.close()
        for sock in (data, peer, events, events_peer):
            sock.close()
