"""System shared memory regions (Triton's shared-memory extension), shared by all frontends.

A client creates a POSIX shared memory object (``shm_open``: ``/dev/shm/<key>`` on Linux),
registers ``(name, key, offset, byte_size)``, and then names the region in its requests:
inputs are read from it as numpy views (no copy) and outputs are written into it.

Threads: frontends register, unregister and resolve regions from any thread; ``_lock``
guards the name map. A region stays mapped while a request still holds a view of it:
unregistering drops the registry's reference and the mapping closes with its last view.
"""

from __future__ import annotations

import mmap
import os
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path

from ..errors import AlreadyExistsError, InvalidArgumentError, NotFoundError

__all__ = ["SharedMemoryRegion", "SystemSharedMemory", "registry_for"]

_SHM_DIR = Path("/dev/shm")


@dataclass(frozen=True, slots=True)
class SharedMemoryRegion:
    name: str
    key: str
    offset: int
    byte_size: int
    buffer: memoryview  # exactly the registered bytes

    def status(self) -> dict[str, object]:
        """Triton's status JSON of one region."""
        return {"name": self.name, "key": self.key, "offset": self.offset,
                "byte_size": self.byte_size}

    def view(self, offset: int, byte_size: int) -> memoryview:
        """``byte_size`` bytes at ``offset`` inside the region (bounds checked)."""
        if offset < 0 or byte_size < 0 or offset + byte_size > self.byte_size:
            raise InvalidArgumentError(
                f"Invalid offset + byte size for shared memory region: '{self.name}'"
            )
        return self.buffer[offset:offset + byte_size]


class SystemSharedMemory:
    """The registry of system shared memory regions of one server."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._regions: dict[str, SharedMemoryRegion] = {}

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        if not name:
            raise InvalidArgumentError("shared memory region name must not be empty")
        if offset < 0 or byte_size <= 0:
            raise InvalidArgumentError(
                f"failed to register shared memory region '{name}': offset must be >= 0 "
                "and byte_size > 0"
            )
        with self._lock:
            if name in self._regions:
                raise AlreadyExistsError(
                    f"shared memory region '{name}' already in manager"
                )
        buffer = _map(name, key, offset, byte_size)
        with self._lock:
            if name in self._regions:  # registered meanwhile by another request
                raise AlreadyExistsError(f"shared memory region '{name}' already in manager")
            self._regions[name] = SharedMemoryRegion(name, key, offset, byte_size, buffer)

    def unregister(self, name: str = "") -> None:
        """Forget one region, or every region when ``name`` is empty."""
        with self._lock:
            if name:
                self._regions.pop(name, None)
            else:
                self._regions.clear()

    def status(self, name: str = "") -> list[dict[str, object]]:
        with self._lock:
            if name:
                region = self._regions.get(name)
                if region is None:
                    raise NotFoundError(
                        f"Unable to find system shared memory region: '{name}'")
                return [region.status()]
            return [region.status() for region in self._regions.values()]

    def region(self, name: str) -> SharedMemoryRegion:
        region = self._regions.get(name)
        if region is None:
            raise NotFoundError(f"Unable to find shared memory region: '{name}'")
        return region


_REGISTRIES: weakref.WeakKeyDictionary[object, SystemSharedMemory] = weakref.WeakKeyDictionary()
_REGISTRIES_LOCK = threading.Lock()


def registry_for(server: object) -> SystemSharedMemory:
    """The one registry of ``server``: its HTTP and gRPC frontends see the same regions."""
    with _REGISTRIES_LOCK:
        registry = _REGISTRIES.get(server)
        if registry is None:
            registry = _REGISTRIES[server] = SystemSharedMemory()
        return registry


def _map(name: str, key: str, offset: int, byte_size: int) -> memoryview:
    path = _SHM_DIR / key.lstrip("/")
    if "/" in key.lstrip("/") or key.lstrip("/") in ("", ".", ".."):
        raise InvalidArgumentError(f"invalid shared memory key '{key}'")
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError as exc:
        raise InvalidArgumentError(
            f"Unable to open shared memory region: '{key}': {exc.strerror}") from exc
    try:
        size = os.fstat(fd).st_size
        if offset + byte_size > size:
            raise InvalidArgumentError(
                f"failed to register shared memory region '{name}': offset {offset} + "
                f"byte_size {byte_size} exceeds the {size} bytes of '{key}'"
            )
        mapping = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
    return memoryview(mapping)[offset:offset + byte_size]
