"""Shared memory between the server and one worker process: arenas and an output ring.

Each worker has three anonymous memory files (``memfd_create``), mapped by both processes:
the input arena and the output ring below, and the BLS arena (see the end).

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

BLS (a model calling other models, docs/process_isolation.md) adds *leased* blocks, whose
reader decides when they are free: the worker's BLS requests put their inputs in a third
file, the BLS arena (an ``InputArena`` the worker allocates in, over a file the server
created), and the server puts BLS responses' outputs in blocks of the worker's input
arena. The reading side gets numpy views over a ``lease`` of the block; when the last view
is gone, the lease's finalizer sets the block's first byte (RELEASED), and the allocating
side frees every released block before its next allocation. No message is needed, and a
model may keep the arrays as long as it likes: the memory is not reused under them.

Nothing is named in /dev/shm: the files have no path, live as long as a descriptor or a
mapping refers to them, and vanish with both processes whatever way they end (a crash,
SIGKILL, or an orderly exit). Sizes follow Triton's Python backend: ``shm-default-byte-size``
to start with, growing by multiples of ``shm-growth-byte-size``.

Threads: on the server, the thread executing a payload allocates and writes input blocks;
the thread delivering a request's final response frees its block (``InputArena._lock``
guards the block list, and the leased ones); any thread may set a cancel flag, and any
thread may release a lease (one byte store: a finalizer, wherever the garbage collector
runs it). Two threads may find a grown file at once, so remapping takes
``_Mapping._remap_lock``. In the worker, sends are
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
import weakref
from collections import deque

import numpy as np

__all__ = [
    "ALIGN",
    "BLOCK_HEADER",
    "RELEASED",
    "RING_HEADER",
    "ArenaView",
    "InputArena",
    "OutputRing",
    "create_memory_file",
    "lease",
    "round_up",
]

ALIGN = 64  # every tensor starts on a cache line (and on any dtype's alignment)
BLOCK_HEADER = ALIGN  # an input block starts with its request's cancel flag
RING_HEADER = ALIGN  # the output ring starts with the last consumed sequence number
RELEASED = 1  # a leased block's first byte once its reader no longer uses it
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
        self._remap_lock = threading.Lock()  # two readers may learn of a growth at once

    def remap(self, size: int) -> None:
        """Map ``size`` bytes. The previous mapping stays alive while arrays view it."""
        with self._remap_lock:
            if size > self.size:
                # mm first: a reader that sees the new size must find a mapping that big
                self.mm = mmap.mmap(self.fd, size)
                self.size = size

    def grow(self, size: int) -> None:
        os.ftruncate(self.fd, size)
        self.remap(size)

    def close(self, unmap: bool = True) -> None:
        # numpy views of an mmap do not pin it (frombuffer releases its export), so a
        # mapping that arrays may still view is never unmapped here (``unmap=False``): it
        # goes, with the descriptor mmap keeps, when the last view of it does.
        if unmap:
            try:
                self.mm.close()
            except BufferError:
                pass
        else:
            self.mm = None  # type: ignore[assignment]
        try:
            os.close(self.fd)
        except OSError:
            pass


def lease(mm: mmap.mmap, block: int, size: int) -> np.ndarray:
    """A uint8 array over a leased block: slice views of it keep it (and ``mm``) alive;
    when the last one goes, the block is marked RELEASED for its allocator to free."""
    array = np.frombuffer(mm, np.uint8, size, block)
    weakref.finalize(array, _release, mm, block).atexit = False
    return array


def _release(mm: mmap.mmap, block: int) -> None:
    try:
        mm[block] = RELEASED
    except (ValueError, IndexError):  # the mapping is closed: the arena is gone anyway
        pass


class InputArena:
    """The allocating side of a file of blocks: the server's side of a worker's input file
    (request blocks, and leased BLS response blocks), or the worker's side of its BLS
    arena (leased BLS request blocks, over a file the server created: ``fd``)."""

    def __init__(self, name: str, size: int, growth: int, fd: int | None = None) -> None:
        self._growth = max(ALIGN, round_up(growth, ALIGN))
        size = max(round_up(size, ALIGN), ALIGN)
        if fd is None:
            fd = create_memory_file(name, size)
        self._map = _Mapping(fd, size)
        self._lock = threading.Lock()
        self._starts: list[int] = []  # sorted offsets of live blocks
        self._ends: list[int] = []  # their ends, same order
        self._leased: list[int] = []  # live blocks whose reader frees them (RELEASED)
        self._closed = False

    @property
    def fd(self) -> int:
        return self._map.fd

    @property
    def size(self) -> int:
        return self._map.size

    @property
    def live_blocks(self) -> int:
        return len(self._starts)

    @property
    def leased_blocks(self) -> int:
        with self._lock:
            self._reclaim()
            return len(self._leased)

    def allocate(self, size: int, *, leased: bool = False) -> int:
        """The offset of a free block of ``size`` bytes (the file grows if needed).

        A ``leased`` block is freed once its reader marks it RELEASED (its first byte),
        never by ``free``.
        """
        size = round_up(max(size, ALIGN), ALIGN)
        with self._lock:
            if self._closed:  # its descriptor number may name another file by now
                raise ValueError("the arena is closed")
            if self._leased:
                self._reclaim()
            block = self._place(size)
            if leased:
                self._map.mm[block] = 0
                self._leased.append(block)
            return block

    def _place(self, size: int) -> int:
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

    def _reclaim(self) -> None:
        """Free the leased blocks their readers released (``_lock`` held)."""
        mm = self._map.mm
        kept = []
        for block in self._leased:
            if mm[block] == RELEASED:
                self._remove(block)
            else:
                kept.append(block)
        self._leased = kept

    def free(self, offset: int) -> None:
        with self._lock:
            self._remove(offset)

    def _remove(self, offset: int) -> None:
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
        with self._lock:  # not while another thread allocates (and may grow the file)
            self._closed = True
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
        """``(sequence, offset)`` of a chunk of ``size`` bytes; None when the ring has
        wrapped and the gap between its newest and oldest unread chunks is too small (the
        file grows when nothing is unread, or when the unread chunks have not wrapped).

        The caller sends the sequence number with the frame that describes the chunk; the
        server stores it in the header once it has copied the chunk out.
        """
        if size < ALIGN:
            size = ALIGN
        elif size & (ALIGN - 1):  # callers mostly ask for sums of aligned sizes
            size = round_up(size, ALIGN)
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
                    # Unread chunks fill it: the responses of one batch, which the server
                    # reads only once execute returned. The file grows past them, so that
                    # a batch of large outputs does not travel inline through the socket
                    # (marshalled, sent, received in pieces, parsed: four copies of it
                    # with the GIL held, against the server's one copy out of the ring).
                    needed = newest_end + size
                    self._map.grow(max(round_up(needed, self._growth), self._map.size * 2))
                    start = newest_end
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
    """The reading side's mapping of a file the other process sizes.

    ``keep_mapped``: arrays of this process view the file (leased blocks), so ``close``
    leaves the mapping to go with its last reference instead of unmapping it under them.
    """

    def __init__(self, fd: int, size: int, *, keep_mapped: bool = False) -> None:
        self._map = _Mapping(fd, size)
        self._keep_mapped = keep_mapped

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
        self._map.close(unmap=not self._keep_mapped)
