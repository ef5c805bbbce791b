"""Shared memory between the server and one worker process: an input arena and an output ring.

Each worker has two anonymous memory files (``memfd_create``), mapped by both processes:

    InputArena  the server writes, the worker reads. One block per request, allocated by
                the server when it sends the request: [cancel flag (64 bytes) | its input
                tensors, 64-byte aligned]. The block lives until the request's final
                response arrives (the worker's views over it stay valid that long, which
                decoupled models rely on), then the server frees it. First fit over the
                live blocks; the file grows when nothing fits.
    OutputRing  the worker writes, the server reads. One chunk per response frame, holding
                that response's output tensors. The server copies them out as it reads the
                frame (a client may keep a response forever, so outputs cannot stay here)
                and stores the frame's sequence number in the ring's header; chunks up to
                that number are free again. Chunks are consumed in the order they were
                allocated, so the live ones form one contiguous (possibly wrapped) region.
                When nothing is live the ring restarts at its beginning, so a worker that
                answers one request at a time touches only its largest response's pages.
    ArenaView   a mapping of either file on the side that does not size it; remapped when
                a frame says the writer grew the file.

Nothing is named in /dev/shm: the files have no path, live as long as a descriptor or a
mapping refers to them, and vanish with both processes whatever way they end (a crash,
SIGKILL, or an orderly exit). Sizes follow Triton's Python backend: ``shm-default-byte-size``
to start with, growing by multiples of ``shm-growth-byte-size``.

Threads: on the server, the thread executing a payload allocates and writes input blocks;
the thread delivering a request's final response frees its block (``InputArena._lock``
guards the block list); any thread may set a cancel flag. In the worker, sends are
serialised by the worker's channel lock, so ``OutputRing`` needs no lock of its own; the
server thread reading that channel writes the ring's header. An 8-byte aligned store is
atomic on the platforms CPython supports, so the header needs no lock either.
"""

from __future__ import annotations

import bisect
import mmap
import os
import struct
import tempfile
import threading
from collections import deque

__all__ = [
    "ALIGN",
    "BLOCK_HEADER",
    "RING_HEADER",
    "ArenaView",
    "InputArena",
    "OutputRing",
    "create_memory_file",
    "round_up",
]

ALIGN = 64  # every tensor starts on a cache line (and on any dtype's alignment)
BLOCK_HEADER = ALIGN  # an input block starts with its request's cancel flag
RING_HEADER = ALIGN  # the output ring starts with the last consumed sequence number
_SEQ = struct.Struct("<Q")


def round_up(size: int, unit: int) -> int:
    return -(-size // unit) * unit


def create_memory_file(name: str, size: int) -> int:
    """An anonymous shared memory file of ``size`` bytes, as a close-on-exec descriptor."""
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is not None:
        fd = memfd_create(name, getattr(os, "MFD_CLOEXEC", 0))
    else:  # no memfd (not Linux): a temporary file unlinked at once has no name either
        directory = "/dev/shm" if os.path.isdir("/dev/shm") else None
        fd, path = tempfile.mkstemp(prefix="infercore-", dir=directory)
        os.unlink(path)
    try:
        os.ftruncate(fd, size)
    except OSError:
        os.close(fd)
        raise
    return fd


class _Mapping:
    """One shared memory file and this process's current mapping of it."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.size = size
        self.mm = mmap.mmap(fd, size)

    def remap(self, size: int) -> None:
        """Map ``size`` bytes. The previous mapping stays alive while arrays view it."""
        if size > self.size:
            self.mm = mmap.mmap(self.fd, size)
            self.size = size

    def grow(self, size: int) -> None:
        os.ftruncate(self.fd, size)
        self.remap(size)

    def close(self) -> None:
        try:
            self.mm.close()
        except BufferError:
            pass  # arrays still view it: it is unmapped when the last one goes
        try:
            os.close(self.fd)
        except OSError:
            pass


class InputArena:
    """The server's side of a worker's input file: request blocks, allocated and freed."""

    def __init__(self, name: str, size: int, growth: int) -> None:
        self._growth = max(ALIGN, round_up(growth, ALIGN))
        size = max(round_up(size, ALIGN), ALIGN)
        self._map = _Mapping(create_memory_file(name, size), size)
        self._lock = threading.Lock()
        self._starts: list[int] = []  # sorted offsets of live blocks
        self._ends: list[int] = []  # their ends, same order

    @property
    def fd(self) -> int:
        return self._map.fd

    @property
    def size(self) -> int:
        return self._map.size

    @property
    def live_blocks(self) -> int:
        return len(self._starts)

    def allocate(self, size: int) -> int:
        """The offset of a free block of ``size`` bytes (the file grows if needed)."""
        size = round_up(max(size, ALIGN), ALIGN)
        with self._lock:
            previous_end = 0
            for index, start in enumerate(self._starts):
                if start - previous_end >= size:
                    self._starts.insert(index, previous_end)
                    self._ends.insert(index, previous_end + size)
                    return previous_end
                previous_end = self._ends[index]
            if self._map.size - previous_end < size:
                needed = previous_end + size
                self._map.grow(max(round_up(needed, self._growth), self._map.size * 2))
            self._starts.append(previous_end)
            self._ends.append(previous_end + size)
            return previous_end

    def free(self, offset: int) -> None:
        with self._lock:
            index = bisect.bisect_left(self._starts, offset)
            if index < len(self._starts) and self._starts[index] == offset:
                del self._starts[index]
                del self._ends[index]

    def write(self, offset: int, data: bytes | memoryview) -> None:
        self._map.mm[offset : offset + len(data)] = data

    def buffer(self) -> mmap.mmap:
        """The current mapping (to write arrays into without an intermediate copy)."""
        return self._map.mm

    def set_flag(self, offset: int, value: int) -> None:
        self._map.mm[offset] = value

    def close(self) -> None:
        self._map.close()


class OutputRing:
    """The worker's side of its output file: one chunk per response frame, in a ring."""

    def __init__(self, fd: int, size: int, growth: int) -> None:
        self._growth = max(ALIGN, round_up(growth, ALIGN))
        self._map = _Mapping(fd, size)
        self._chunks: deque[tuple[int, int, int]] = deque()  # (sequence, start, end)
        self._sequence = 0

    @property
    def size(self) -> int:
        return self._map.size

    def buffer(self) -> mmap.mmap:
        return self._map.mm

    def allocate(self, size: int) -> tuple[int, int] | None:
        """``(sequence, offset)`` of a chunk of ``size`` bytes; None when the ring is full.

        The caller sends the sequence number with the frame that describes the chunk; the
        server stores it in the header once it has copied the chunk out.
        """
        size = round_up(max(size, ALIGN), ALIGN)
        (consumed,) = _SEQ.unpack_from(self._map.mm, 0)
        chunks = self._chunks
        while chunks and chunks[0][0] <= consumed:
            chunks.popleft()
        if not chunks:
            if RING_HEADER + size > self._map.size:
                needed = RING_HEADER + size
                self._map.grow(max(round_up(needed, self._growth), self._map.size * 2))
            start = RING_HEADER
        else:
            oldest_start = chunks[0][1]
            newest_end = chunks[-1][2]
            if newest_end > oldest_start:  # live region not wrapped: room after it, or before
                if newest_end + size <= self._map.size:
                    start = newest_end
                elif RING_HEADER + size <= oldest_start:
                    start = RING_HEADER
                else:
                    return None
            elif newest_end + size <= oldest_start:  # wrapped: room between the two ends
                start = newest_end
            else:
                return None
        self._sequence += 1
        chunks.append((self._sequence, start, start + size))
        return self._sequence, start

    def close(self) -> None:
        self._map.close()


class ArenaView:
    """The reading side's mapping of a file the other process sizes."""

    def __init__(self, fd: int, size: int) -> None:
        self._map = _Mapping(fd, size)

    @property
    def fd(self) -> int:
        return self._map.fd

    @property
    def size(self) -> int:
        return self._map.size

    def buffer(self, size: int) -> mmap.mmap:
        """The mapping, remapped first if the writer has grown the file to ``size``."""
        if size > self._map.size:
            self._map.remap(size)
        return self._map.mm

    def flag(self, offset: int) -> int:
        return self._map.mm[offset]

    def mark_consumed(self, sequence: int) -> None:
        """Tell the ring's writer that chunks up to ``sequence`` were copied out."""
        _SEQ.pack_into(self._map.mm, 0, sequence)

    def close(self) -> None:
        self._map.close()
