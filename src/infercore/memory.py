"""Giving memory back to the operating system once a large owner of it is gone.

Python frees an object when its last reference goes, but what a model's module reached
(a class is always in a reference cycle with its module's globals) waits for the cyclic
collector, and glibc keeps freed heap pages mapped: after a few large frees its mmap
threshold grows, so later 1 MiB buffers come from the heap, and freeing them lowers the
process's resident memory only when the heap is trimmed. ``release_memory`` does both:
a full collection, then ``malloc_trim(0)`` where the C library has it (glibc).

Call it after work that frees much at once (an unload), never on a request's path: a full
collection costs milliseconds.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
from collections.abc import Callable

__all__ = ["release_memory"]

logger = logging.getLogger(__name__)


def _find_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim with
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_TRIM = _find_trim()


def release_memory() -> None:
    """Collect unreachable cycles, then return free heap pages to the system."""
    collected = gc.collect()
    if _TRIM is not None:
        _TRIM(0)
    logger.debug("released memory: %d objects collected", collected)
