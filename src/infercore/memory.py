"""Giving memory back to the operating system once a large owner of it is gone.

Python frees an object when its last reference goes, but what a model's module reached
(a class is always in a reference cycle with its module's globals) waits for the cyclic
collector, and glibc keeps freed heap pages mapped: after a few large frees its mmap
threshold grows, so later 1 MiB buffers come from the heap, and freeing them lowers the
process's resident memory only when the heap is trimmed. ``release_memory`` does both:
a collection (a full one unless told which generations), then ``malloc_trim(0)`` where
the C library has it (glibc).

Call it after work that frees much at once (an unload, a large refused request), never
on a request's path: a full collection costs milliseconds, and holds the GIL meanwhile.

``map_large_buffers`` (called once by ``infercore serve``) fixes glibc's mmap threshold:
by default it rises with every large buffer freed (up to 32 MiB), so that tensors of many
MiB then come from a thread's heap, and ``malloc_trim`` does not shrink the top of a
thread's heap: after a few refused 16 MiB requests the server kept some 100 MiB it no
longer used. With a fixed threshold every buffer of 4 MiB or more is mapped on its own
and unmapped when freed, and smaller ones stay on the heap (an MiB-sized tensor is reused
from there without page faults); the heap's free top is kept up to twice that, as glibc's
own rule keeps it (trimming each MiB freed cost a tenth of the 1 MiB requests' rate).

``limit_arenas`` (also called once by ``infercore serve``) caps glibc's heaps at two
(``M_ARENA_MAX``; glibc's default is eight per core): each thread that allocates while
another holds a heap's lock gets a heap of its own, and the server has many threads (the
frontends' loops, gRPC core's, the large-request threads, an instance thread per model
instance). A large request decoded on one thread then leaves that thread's heap with
free pages held in place by a few small blocks still in use, which ``malloc_trim`` cannot
hand back: the load-probe corpus (benchmarks/load_probes.py) left the server 17 MiB
larger with the default and 2 MiB with two heaps. Python code allocates under the GIL,
so the threads seldom contend for a heap's lock.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import os
from collections.abc import Callable

__all__ = ["limit_arenas", "map_large_buffers", "release_memory"]

logger = logging.getLogger(__name__)


LARGE_BUFFER_BYTES = 4 * 1024 * 1024
_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
ARENAS = 2


def _libc_function(name: str, argtypes: list[type]) -> Callable[..., int] | None:
    library = ctypes.util.find_library("c")
    if library is None:
        return None
    try:
        function = getattr(ctypes.CDLL(library), name)
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to tune
        return None
    function.argtypes = argtypes
    function.restype = ctypes.c_int
    return function  # type: ignore[no-any-return]


_TRIM = _libc_function("malloc_trim", [ctypes.c_size_t])
_MALLOPT = _libc_function("mallopt", [ctypes.c_int, ctypes.c_int])


def map_large_buffers(threshold: int = LARGE_BUFFER_BYTES) -> bool:
    """Have glibc map each buffer of ``threshold`` bytes or more on its own (see the module
    doc); False where it cannot, or where the environment already tunes these."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    tuned = any(os.environ.get(f"MALLOC_{name.upper()}_") is not None or name in tunables
                for name in ("mmap_threshold", "trim_threshold"))
    if _MALLOPT is None or tuned:
        return False
    return bool(_MALLOPT(_M_MMAP_THRESHOLD, threshold)
                and _MALLOPT(_M_TRIM_THRESHOLD, 2 * threshold))


def limit_arenas(count: int = ARENAS) -> bool:
    """Have glibc keep at most ``count`` heaps (see the module doc); False where it
    cannot, or where the environment already sets the number. Call it before the
    server's threads start: a thread keeps the heap it was given."""
    tuned = (os.environ.get("MALLOC_ARENA_MAX") is not None
             or "arena_max" in os.environ.get("GLIBC_TUNABLES", ""))
    if _MALLOPT is None or tuned:
        return False
    return bool(_MALLOPT(_M_ARENA_MAX, count))


def release_memory(generation: int = 2) -> None:
    """Collect unreachable cycles (up to ``generation``: 2 is a full collection), then
    return free heap pages to the system."""
    collected = gc.collect(generation)
    if _TRIM is not None:
        _TRIM(0)
    logger.debug("released memory: %d objects collected", collected)
