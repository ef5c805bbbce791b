"""The response cache: request hashing, a byte-bounded LRU of responses, and the senders
that fill it.

Triton's ``local`` cache, natively: one cache per server (``--cache-config local,size=N``,
or the deprecated ``--response-cache-byte-size N``), shared by every model whose config
has ``response_cache { enable: true }``. A request's key hashes the model name and
version, every input's name, datatype, shape and bytes, and the outputs it asks for; the
value is the output tensors of the request's successful response. On a hit the model
answers at once with copies of those tensors and nothing executes (model.py); on a miss
the request runs and its sender (``CachingSender``) inserts the response before the
caller can see it, so an identical request sent after the answer arrived always hits.

Entries are private copies made read-only, and every hit hands out fresh copies, so no
caller or backend can change what the cache holds. Only CPU tensors are hashed and
stored (Triton's rule): a request with an input elsewhere is not looked up, a response
with an output elsewhere is not inserted.

Threads: lookups run on callers' threads, insertions on whichever thread sends a final
response (an instance's thread, an ensemble's callback). ``ResponseCache._lock`` guards
the entry map (kept in LRU order, oldest first), the byte count and the counters; hashing
and copying happen outside it.
"""

from __future__ import annotations

import hashlib
import logging
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import InvalidArgumentError
from .observability.trace_record import TracingSender
from .options import LOCAL_CACHE, local_cache_size
from .request import InferRequest
from .response import ResponseSender
from .tensor import DataType, MemoryType, Tensor

if TYPE_CHECKING:
    from .stats import ModelStats

__all__ = ["CacheFill", "CacheStatistics", "CachingSender", "ResponseCache", "request_key"]

logger = logging.getLogger(__name__)


_LENGTH = struct.Struct("<Q")


@dataclass(frozen=True, slots=True)
class CacheStatistics:
    """A snapshot of the cache: its capacity and use, and what happened to it."""

    size_bytes: int  # capacity
    used_bytes: int
    entries: int
    lookups: int
    hits: int
    misses: int
    insertions: int
    evictions: int


class _Entry:
    """One cached response: read-only arrays, their datatypes, their byte size."""

    __slots__ = ("outputs", "byte_size")

    def __init__(self, outputs: tuple[tuple[str, DataType, np.ndarray], ...],
                 byte_size: int) -> None:
        self.outputs = outputs
        self.byte_size = byte_size


class ResponseCache:
    """A server-wide cache of responses, at most ``size_bytes`` of output data, least
    recently used entries evicted first. Safe to use from any thread."""

    def __init__(self, size_bytes: int) -> None:
        if size_bytes <= 0:
            raise InvalidArgumentError(
                f"the response cache size must be a positive number of bytes, not {size_bytes}")
        self.size_bytes = size_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()
        self._used = 0
        self._lookups = 0
        self._hits = 0
        self._insertions = 0
        self._evictions = 0

    @classmethod
    def from_config(cls, config: Mapping[str, Mapping[str, str]]) -> ResponseCache | None:
        """The cache ``Options.cache_config`` describes (``{"local": {"size": "N"}}``), or
        None when it describes none. A size of 0 means no cache, as for Triton's
        ``--response-cache-byte-size 0``.

        Raises InvalidArgumentError for another implementation, a missing or invalid
        size, or a setting the local cache does not have.
        """
        if not config:
            return None
        names = sorted(config)
        if names != [LOCAL_CACHE]:
            unknown = [name for name in names if name != LOCAL_CACHE]
            raise InvalidArgumentError(
                f"unsupported cache implementation '{unknown[0]}': infercore has only the "
                f"'{LOCAL_CACHE}' cache (--cache-config {LOCAL_CACHE},size=<bytes>)")
        size = local_cache_size(config[LOCAL_CACHE])
        if size == 0:
            return None
        logger.info("response cache: %s, %d bytes", LOCAL_CACHE, size)
        return cls(size)

    # -- lookup and insertion ----------------------------------------------------------
    def lookup(self, key: bytes) -> dict[str, Tensor] | None:
        """Fresh copies of the outputs cached under ``key``, or None (a miss)."""
        with self._lock:
            self._lookups += 1
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            self._hits += 1
        # Entries are immutable once stored, so they are copied outside the lock.
        return {name: Tensor(data_type, array.copy())
                for name, data_type, array in entry.outputs}

    def insert(self, key: bytes, outputs: Mapping[str, Tensor]) -> bool:
        """Store a copy of ``outputs`` under ``key``, evicting the least recently used
        entries to make room. False when not stored: an output is not in CPU memory, the
        response is larger than the whole cache, or ``key`` is already cached (a
        concurrent identical request inserted it first)."""
        stored = []
        byte_size = 0
        for name, tensor in outputs.items():
            if tensor.memory_type is MemoryType.GPU:
                return False
            array = np.array(tensor.to_numpy(), copy=True)
            array.flags.writeable = False
            stored.append((name, tensor.data_type, array))
            byte_size += _byte_size(tensor.data_type, array)
        if byte_size > self.size_bytes:
            return False
        entry = _Entry(tuple(stored), byte_size)
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return False
            while self._used + byte_size > self.size_bytes:
                _, evicted = self._entries.popitem(last=False)
                self._used -= evicted.byte_size
                self._evictions += 1
            self._entries[key] = entry
            self._used += byte_size
            self._insertions += 1
        return True

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._entries

    def statistics(self) -> CacheStatistics:
        with self._lock:
            return CacheStatistics(
                size_bytes=self.size_bytes,
                used_bytes=self._used,
                entries=len(self._entries),
                lookups=self._lookups,
                hits=self._hits,
                misses=self._lookups - self._hits,
                insertions=self._insertions,
                evictions=self._evictions,
            )

    def __repr__(self) -> str:
        return f"ResponseCache({LOCAL_CACHE}, size_bytes={self.size_bytes})"


def _byte_size(data_type: DataType, array: np.ndarray) -> int:
    """Bytes an output counts against the cache: its data (BYTES: the wire form)."""
    if data_type is DataType.BYTES:
        return sum(4 + len(_as_bytes(item)) for item in array.flat)
    return int(array.nbytes)


def _as_bytes(item: Any) -> bytes:
    return item if isinstance(item, bytes) else str(item).encode("utf-8")


def request_key(model_name: str, model_version: int, inputs: Mapping[str, Tensor],
                requested_outputs: tuple[str, ...] | None, generation: int = 0
                ) -> bytes | None:
    """The cache key of a request: a 128-bit BLAKE2b digest of the model name and
    version, each input's name, datatype, shape and bytes (in name order) and the
    requested outputs. None when an input is not in CPU memory (not cacheable).

    Triton hashes the name, version and each input's name and bytes; the datatype and
    shape are added here so that requests whose bytes agree but whose tensors do not
    (a [2, 3] and a [3, 2] input) never share an entry, and the requested outputs so
    that a response holding only some outputs never answers a request for others.
    ``generation`` tells loads of one model version apart: a version reloaded (its
    files may have changed) never answers from what its previous load computed.
    """
    digest = hashlib.blake2b(digest_size=16)
    _add_text(digest, model_name)
    digest.update(_LENGTH.pack(model_version & 0xFFFFFFFFFFFFFFFF))
    digest.update(_LENGTH.pack(generation))
    digest.update(_LENGTH.pack(len(inputs)))
    for name in sorted(inputs):
        tensor = inputs[name]
        if tensor.memory_type is MemoryType.GPU:
            return None
        array = tensor.to_numpy()
        _add_text(digest, name)
        _add_text(digest, tensor.data_type.value)
        digest.update(_LENGTH.pack(array.ndim))
        for dim in array.shape:
            digest.update(_LENGTH.pack(dim))
        if tensor.data_type is DataType.BYTES:
            for item in array.flat:
                _add_bytes(digest, _as_bytes(item))
        else:
            data = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
            digest.update(_LENGTH.pack(data.size))
            digest.update(data.data)
    if requested_outputs is None:
        digest.update(b"*")
    else:
        wanted = sorted(set(requested_outputs))
        digest.update(b"=" + _LENGTH.pack(len(wanted)))
        for name in wanted:
            _add_text(digest, name)
    return digest.digest()


def _add_text(digest: Any, text: str) -> None:
    _add_bytes(digest, text.encode("utf-8"))


def _add_bytes(digest: Any, data: bytes) -> None:
    # Length-prefixed, so no two different sequences of fields hash the same bytes.
    digest.update(_LENGTH.pack(len(data)))
    digest.update(data)


class CacheFill:
    """What a request that missed the cache needs to fill it from its response: the key,
    the cache, and where to record the insertion's duration."""

    __slots__ = ("_cache", "_key", "_lookup_ns", "_stats", "_clock")

    def __init__(self, cache: ResponseCache, key: bytes, lookup_ns: int, stats: ModelStats,
                 clock: Callable[[], int]) -> None:
        self._cache = cache
        self._key = key
        self._lookup_ns = lookup_ns
        self._stats = stats
        self._clock = clock

    def complete(self, request: InferRequest, outputs: Mapping[str, Tensor] | None) -> None:
        """Insert a successful final response's outputs (those the request asked for, as
        its response holds them); record the insertion as part of the miss."""
        wanted = request.requested_outputs
        chosen = dict(outputs or {})
        if wanted is not None:
            chosen = {name: tensor for name, tensor in chosen.items() if name in wanted}
        clock = self._clock
        start = clock()
        try:
            self._cache.insert(self._key, chosen)
        except Exception:  # a response the cache cannot copy is answered all the same
            logger.exception("could not insert the response of model '%s' into the cache",
                             request.model_name)
        end = clock()
        self._stats.record_cache_insert(end - start, self._lookup_ns + end - start, end)


def _before_send(sender: CachingSender | _CachingTracingSender, outputs: Any, error: Any,
                 final: bool) -> None:
    fill, request = sender._fill, sender._request
    if fill is None or sender.closed or request is None:
        return
    sender._fill = None  # one chance: a model that sends more than one response is not cached
    if final and error is None:
        fill.complete(request, outputs)


class CachingSender(ResponseSender):
    """A ResponseSender for a request that missed the cache: its successful final
    response is inserted before it is delivered."""

    __slots__ = ("_fill",)

    def __init__(self, fill: CacheFill, request: InferRequest, stream: Any, model: str,
                 version: int, on_close: Callable[[InferRequest], None] | None) -> None:
        super().__init__(request, stream, model, version, on_close)
        self._fill: CacheFill | None = fill

    def send(self, outputs: Mapping[str, Tensor] | None = None, **kwargs: Any) -> None:
        _before_send(self, outputs, kwargs.get("error"), kwargs.get("final", True))
        super().send(outputs, **kwargs)


class _CachingTracingSender(TracingSender):
    """CachingSender's behaviour for a request traced at the TENSORS level."""

    __slots__ = ("_fill",)

    def __init__(self, fill: CacheFill, trace: Any, request: InferRequest, stream: Any,
                 model: str, version: int,
                 on_close: Callable[[InferRequest], None] | None) -> None:
        super().__init__(trace, request, stream, model, version, on_close)
        self._fill: CacheFill | None = fill

    def send(self, outputs: Mapping[str, Tensor] | None = None, **kwargs: Any) -> None:
        _before_send(self, outputs, kwargs.get("error"), kwargs.get("final", True))
        super().send(outputs, **kwargs)


def caching_sender(fill: CacheFill, trace: Any, request: InferRequest, stream: Any,
                   model: str, version: int,
                   on_close: Callable[[InferRequest], None] | None) -> ResponseSender:
    """The sender of a request that missed the cache (``trace``: a trace capturing its
    outputs, or None)."""
    if trace is not None:
        return _CachingTracingSender(fill, trace, request, stream, model, version, on_close)
    return CachingSender(fill, request, stream, model, version, on_close)
