"""System shared memory regions (Triton's shared-memory extension), shared by all frontends.

A client creates a POSIX shared memory object (``shm_open``: ``/dev/shm/<key>`` on Linux),
registers ``(name, key, offset, byte_size)``, and then names the region in its requests:
inputs are read from it as numpy views (no copy) and outputs are written into it.

Registering answers as Triton 2.51 does, texts and codes, with two checks current Triton
added (a key with the Python backend's reserved prefix is refused; an offset + byte size
past size_t is named an overflow): the object is opened as
``shm_open`` opens it (a name in /dev/shm, no slash inside, no symbolic link followed),
the region must lie inside it, and the region itself is mapped, so its offset must be a
multiple of the page size. Beyond Triton: only a regular file is accepted (not a FIFO or
a device a key might name), and the object's size is checked again each time a region is
used, so an object truncated after registration is answered with an error instead of a
fault (SIGBUS) that would kill the server.

``--allow-client-shm`` (``add_arguments``; HttpOptions/GrpcOptions.allow_client_shm) is
current Triton's flag, false by default: a frontend started without it reaches
``REFUSED`` (``for_clients``), which refuses every shared-memory call of its clients, the
status, register and unregister endpoints and any tensor that names a region.

A request uses its regions from its decoding until it is answered: it resolves them
through a ``RegionUse`` (``SystemSharedMemory.use``), released once the answer is written.
As current Triton (shared_memory_manager.cc, ``awaiting_unregister_``), unregistering a
region in use succeeds at once but takes effect when its last request is answered: till
then it is still listed and still usable. (Triton 2.51 refused it: "it is currently in
use"; Triton's QA test TestSharedMemoryUnregister expects the deferral.)

Threads: frontends register, unregister and resolve regions from any thread; ``_lock``
guards the name map and the use counts. A region stays mapped (and its object open)
while a request still holds a view of it: unregistering drops the registry's reference,
and the mapping closes with its last view.
"""

from __future__ import annotations

import argparse
import errno
import logging
import mmap
import os
import stat
import threading
import weakref
from collections import Counter
from dataclasses import dataclass
from typing import Protocol

from ..errors import (
    AlreadyExistsError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
)
from .flag_types import boolean

__all__ = ["REFUSED", "RegionUse", "Regions", "SharedMemoryRegion", "SystemSharedMemory",
           "add_arguments", "for_clients", "registry_for"]

logger = logging.getLogger(__name__)

_SHM_DIR = "/dev/shm"
# O_NOFOLLOW: as glibc's shm_open, a key that is a symbolic link is refused; O_NONBLOCK:
# opening a FIFO a key might name never waits (it is refused once opened, not regular).
_OPEN_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

# Current Triton keeps keys with this prefix for the Python backend's own regions
# (kTritonSharedMemoryRegionPrefix in its shared_memory_manager.cc); 2.51 took any key.
_RESERVED_KEY_PREFIX = "triton_python_backend_shm_region_"
_SIZE_MAX = 2**64 - 1  # size_t, what Triton's offset + byte_size must fit

REFUSAL = ("Client shared memory is disabled: start the server with "
           "--allow-client-shm=true to use shared-memory regions")


class _Descriptor:
    """A region's open object, closed once no region holds it."""

    __slots__ = ("fd", "__weakref__")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        weakref.finalize(self, os.close, fd)


@dataclass(frozen=True, slots=True)
class SharedMemoryRegion:
    name: str
    key: str
    offset: int
    byte_size: int
    buffer: memoryview  # exactly the registered bytes
    descriptor: _Descriptor  # the object, kept open: its size is checked at each use

    def status(self) -> dict[str, object]:
        """Triton's status JSON of one region."""
        return {"name": self.name, "key": self.key, "offset": self.offset,
                "byte_size": self.byte_size}

    def view(self, offset: int, byte_size: int) -> memoryview:
        """``byte_size`` bytes at ``offset`` inside the region (bounds checked), once the
        object is known to still hold the whole region."""
        if offset < 0 or offset >= self.byte_size:
            raise InvalidArgumentError(
                f"Invalid offset for shared memory region: '{self.name}'")
        if byte_size > _SIZE_MAX - offset:  # current Triton's words; 2.51 said the next
            raise InvalidArgumentError(
                f"Integer overflow detected: byte_size ({byte_size}) + offset ({offset}) "
                f"exceeds maximum value ({_SIZE_MAX}) for region '{self.name}'")
        if byte_size <= 0 or offset + byte_size > self.byte_size:
            raise InvalidArgumentError(
                f"Invalid offset + byte size for shared memory region: '{self.name}'")
        # A page of the mapping past the object's end faults when touched: check first.
        needed = self.offset + self.byte_size
        size = os.fstat(self.descriptor.fd).st_size
        if size < needed:
            raise InvalidArgumentError(
                f"shared memory region '{self.name}' is no longer valid: its object "
                f"'{self.key}' holds {size} bytes, the region needs {needed}")
        return self.buffer[offset:offset + byte_size]


class Regions(Protocol):
    """Where a decoder resolves the regions a request names."""

    def region(self, name: str) -> SharedMemoryRegion: ...


class RegionUse:
    """The regions one request reads or writes, in use until ``release``."""

    __slots__ = ("_registry", "_held", "_release", "__weakref__")

    def __init__(self, registry: SystemSharedMemory) -> None:
        self._registry = registry
        self._held: list[SharedMemoryRegion] = []
        self._release: weakref.finalize | None = None  # set by the first region held

    def region(self, name: str) -> SharedMemoryRegion:
        """The region named ``name`` (NotFoundError if none), now in use."""
        region = self._registry._acquire(name, required=True)
        assert region is not None
        self._keep(region)
        return region

    def hold(self, name: str) -> None:
        """Mark the region named ``name`` in use if it is registered (an output region,
        looked up again when the output is written, which reports a missing one)."""
        region = self._registry._acquire(name, required=False)
        if region is not None:
            self._keep(region)

    def release(self) -> None:
        """The request is answered: its regions are no longer in use by it."""
        if self._release is not None:
            self._release()  # once: a finalizer runs at most once

    def _keep(self, region: SharedMemoryRegion) -> None:
        self._held.append(region)
        if self._release is None or not self._release.alive:
            # a request dropped on a path that forgot to release does not pin its regions
            self._release = weakref.finalize(self, self._registry._release, self._held)


class SystemSharedMemory:
    """The registry of system shared memory regions of one server."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._regions: dict[str, SharedMemoryRegion] = {}
        self._users: Counter[int] = Counter()  # id(region) -> requests using it
        self._awaiting: set[str] = set()  # names unregistered while in use

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        if key.startswith(_RESERVED_KEY_PREFIX):
            raise InvalidArgumentError(
                f"cannot register shared memory region '{name}' with key '{key}' as the "
                f"key contains the reserved prefix '{_RESERVED_KEY_PREFIX}'")
        # Under the lock throughout, as Triton: two registrations of one name or key
        # cannot both succeed.
        with self._lock:
            if name in self._regions:
                raise AlreadyExistsError(f"shared memory region '{name}' already in manager")
            if any(region.key == key for region in self._regions.values()):
                # Triton 2.51 looks for the descriptor of a key already registered to
                # reuse it, finds it closed, and fails: one region per key at a time.
                raise InternalError(f"Invalid shared memory region: '{key}'")
            self._regions[name] = _map(name, key, offset, byte_size)

    def unregister(self, name: str = "") -> None:
        """Forget one region, or every region when ``name`` is empty; a region in use is
        forgotten once its last request is answered."""
        with self._lock:
            for each in [name] if name else list(self._regions):
                region = self._regions.get(each)
                if region is None:
                    continue
                if id(region) in self._users:
                    self._awaiting.add(each)
                else:
                    del self._regions[each]

    def use(self) -> RegionUse:
        """The regions of one request, resolved as it is decoded."""
        return RegionUse(self)

    def _acquire(self, name: str, *, required: bool) -> SharedMemoryRegion | None:
        with self._lock:
            region = self.region(name) if required else self._regions.get(name)
            if region is not None:
                self._users[id(region)] += 1
            return region

    def _release(self, held: list[SharedMemoryRegion]) -> None:
        with self._lock:
            for region in held:
                key = id(region)
                self._users[key] -= 1
                if self._users[key] <= 0:
                    del self._users[key]
                    name = region.name
                    if name in self._awaiting and self._regions.get(name) is region:
                        self._awaiting.discard(name)
                        del self._regions[name]
            held.clear()

    def status(self, name: str = "") -> list[dict[str, object]]:
        """One region's status, or every region's by name when ``name`` is empty."""
        with self._lock:
            if name:
                region = self._regions.get(name)
                if region is None:
                    raise NotFoundError(
                        f"Unable to find system shared memory region: '{name}'")
                return [region.status()]
            return [self._regions[n].status() for n in sorted(self._regions)]

    def region(self, name: str) -> SharedMemoryRegion:
        region = self._regions.get(name)
        if region is None:
            raise NotFoundError(f"Unable to find shared memory region: '{name}'")
        return region

    # CUDA shared memory, as Triton built with GPU support answers on a host without
    # one: no CUDA region can be registered (the IPC handle never opens), so status
    # lists none and unregistering finds none; the names are shared with system regions.
    def cuda_status(self, name: str = "") -> list[dict[str, object]]:
        if not name:
            return []
        with self._lock:
            if name in self._regions:
                raise NotFoundError(f"The region named '{name}' is registered as system "
                                    "shared memory, not CUDA shared memory")
        raise NotFoundError(f"Unable to find cuda shared memory region: '{name}'")

    def cuda_register(self, name: str) -> None:
        with self._lock:
            if name in self._regions:
                raise AlreadyExistsError(f"shared memory region '{name}' already in manager")
        raise InvalidArgumentError("failed to register shared memory region: invalid args")

    def cuda_unregister(self, name: str = "") -> None:
        """Nothing to forget: no CUDA region is ever registered."""


class _Refused(SystemSharedMemory):
    """What a frontend started without --allow-client-shm offers: every call refused."""

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        raise UnavailableError(REFUSAL)

    def unregister(self, name: str = "") -> None:
        raise UnavailableError(REFUSAL)

    def status(self, name: str = "") -> list[dict[str, object]]:
        raise UnavailableError(REFUSAL)

    def region(self, name: str) -> SharedMemoryRegion:
        raise UnavailableError(REFUSAL)

    def cuda_status(self, name: str = "") -> list[dict[str, object]]:
        raise UnavailableError(REFUSAL)

    def cuda_register(self, name: str) -> None:
        raise UnavailableError(REFUSAL)

    def cuda_unregister(self, name: str = "") -> None:
        raise UnavailableError(REFUSAL)


REFUSED: SystemSharedMemory = _Refused()

_REGISTRIES: weakref.WeakKeyDictionary[object, SystemSharedMemory] = weakref.WeakKeyDictionary()
_REGISTRIES_LOCK = threading.Lock()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """--allow-client-shm, read by the HTTP and gRPC frontends alike."""
    group = parser.add_argument_group(
        "Shared Memory", "Clients' system and CUDA shared-memory regions (HTTP and gRPC).")
    group.add_argument(
        "--allow-client-shm", type=boolean, default=False, metavar="BOOL",
        help="let clients register, unregister and use system and CUDA shared-memory "
             "regions (default false, as current tritonserver)")


def for_clients(server: object, allowed: bool,
                registry: SystemSharedMemory | None = None) -> SystemSharedMemory:
    """What a frontend's clients reach: the server's registry (or ``registry``), or
    REFUSED when the frontend does not allow client shared memory."""
    if not allowed:
        return REFUSED
    return registry if registry is not None else registry_for(server)


def registry_for(server: object) -> SystemSharedMemory:
    """The one registry of ``server``: its HTTP and gRPC frontends see the same regions."""
    with _REGISTRIES_LOCK:
        registry = _REGISTRIES.get(server)
        if registry is None:
            registry = _REGISTRIES[server] = SystemSharedMemory()
        return registry


def _map(name: str, key: str, offset: int, byte_size: int) -> SharedMemoryRegion:
    fd = _open(key)
    try:
        size = os.fstat(fd).st_size
        if offset + byte_size > size:
            raise InvalidArgumentError(
                f"failed to register shared memory region '{name}': invalid args")
        # mmap(2) refuses an empty or unaligned mapping (EINVAL), as Triton reports;
        # Python's mmap would read an empty length as the whole object.
        if byte_size == 0:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        mapping = mmap.mmap(fd, byte_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE,
                            offset=offset)
    except OSError as exc:
        os.close(fd)
        raise InvalidArgumentError(f"failed to register shared memory region '{name}': "
                                   f"unable to process address space{exc.strerror}") from None
    except BaseException:
        os.close(fd)
        raise
    return SharedMemoryRegion(name, key, offset, byte_size, memoryview(mapping),
                              _Descriptor(fd))


def _open(key: str) -> int:
    """The object ``key`` names, opened as shm_open opens it, if it is a regular file."""
    name = key.lstrip("/")
    failure = InternalError(f"Unable to open shared memory region: '{key}'")
    if not name or "/" in name or name in (".", ".."):
        raise failure
    directory = os.open(_SHM_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = os.open(name, _OPEN_FLAGS, dir_fd=directory)
    except OSError as exc:
        logger.debug("shm_open of '%s' failed: %s", key, exc.strerror)
        raise failure from None
    finally:
        os.close(directory)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        logger.warning("shared memory key '%s' is not a regular file: refused", key)
        raise failure
    return fd
