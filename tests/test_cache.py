"""The response cache on its own: keys, LRU eviction by bytes, copies, threads, config."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from infercore import InternalError, InvalidArgumentError
from infercore.cache import ResponseCache, request_key
from infercore.tensor import DataType, MemoryType, Tensor


def _outputs(value: float, count: int = 4) -> dict[str, Tensor]:
    """One FP32 output of ``count`` elements: 4 * count bytes."""
    return {"OUT": Tensor.from_object(np.full(count, value, np.float32))}


def _key(**changes: object) -> bytes | None:
    parts: dict[str, object] = {
        "model_name": "m", "model_version": 1,
        "inputs": {"A": Tensor.from_object(np.arange(6, dtype=np.int32).reshape(2, 3)),
                   "B": Tensor.from_object(np.array([b"x", b"yz"], dtype=np.object_))},
        "requested_outputs": None,
    }
    parts.update(changes)
    return request_key(**parts)  # type: ignore[arg-type]


# -- keys --------------------------------------------------------------------------------
def test_key_is_stable_and_ignores_input_order_and_memory_layout():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    b = Tensor.from_object(np.array([b"x", b"yz"], dtype=np.object_))
    base = _key()
    assert base is not None and len(base) == 16
    assert _key() == base
    assert _key(inputs={"B": b, "A": Tensor.from_object(a.copy())}) == base
    fortran = np.asfortranarray(a)  # same values, another memory layout
    assert _key(inputs={"A": Tensor.from_object(fortran), "B": b}) == base
    assert _key(requested_outputs=("Y", "X")) == _key(requested_outputs=("X", "Y", "X"))


@pytest.mark.parametrize("change", [
    {"model_name": "other"},
    {"model_version": 2},
    {"inputs": {"A2": Tensor.from_object(np.arange(6, dtype=np.int32).reshape(2, 3)),
                "B": Tensor.from_object(np.array([b"x", b"yz"], dtype=np.object_))}},
    # same bytes, another datatype
    {"inputs": {"A": Tensor.from_object(np.arange(6, dtype=np.int32).reshape(2, 3)
                                        .view(np.float32)),
                "B": Tensor.from_object(np.array([b"x", b"yz"], dtype=np.object_))}},
    # same bytes, another shape
    {"inputs": {"A": Tensor.from_object(np.arange(6, dtype=np.int32).reshape(3, 2)),
                "B": Tensor.from_object(np.array([b"x", b"yz"], dtype=np.object_))}},
    # another value
    {"inputs": {"A": Tensor.from_object(np.array([[0, 1, 2], [3, 4, 6]], np.int32)),
                "B": Tensor.from_object(np.array([b"x", b"yz"], dtype=np.object_))}},
    # the same BYTES concatenated, split differently
    {"inputs": {"A": Tensor.from_object(np.arange(6, dtype=np.int32).reshape(2, 3)),
                "B": Tensor.from_object(np.array([b"xy", b"z"], dtype=np.object_))}},
    # one input fewer
    {"inputs": {"A": Tensor.from_object(np.arange(6, dtype=np.int32).reshape(2, 3))}},
    {"requested_outputs": ("OUT",)},
    {"requested_outputs": ()},
    {"generation": 7},
], ids=["model", "version", "input-name", "datatype", "shape", "contents", "bytes-split",
        "input-count", "requested-outputs", "no-outputs", "generation"])
def test_every_part_of_the_request_changes_the_key(change):
    assert _key(**change) != _key()


def test_a_request_with_an_input_outside_cpu_memory_has_no_key():
    gpu = Tensor(DataType.FP32, np.zeros(2, np.float32), MemoryType.GPU, 0)
    assert _key(inputs={"A": gpu}) is None


# -- storage and eviction ------------------------------------------------------------------
def test_lookup_misses_then_hits_with_the_inserted_outputs():
    cache = ResponseCache(1024)
    assert cache.lookup(b"k") is None
    assert cache.insert(b"k", _outputs(3.0)) is True
    found = cache.lookup(b"k")
    assert found is not None and list(found) == ["OUT"]
    assert found["OUT"].data_type is DataType.FP32
    assert found["OUT"].to_numpy().tolist() == [3.0] * 4
    stats = cache.statistics()
    assert (stats.lookups, stats.hits, stats.misses, stats.insertions) == (2, 1, 1, 1)
    assert (stats.entries, stats.used_bytes, stats.size_bytes) == (1, 16, 1024)


def test_least_recently_used_entry_is_evicted_first():
    cache = ResponseCache(48)  # three 16-byte entries
    for key in (b"a", b"b", b"c"):
        assert cache.insert(key, _outputs(1.0))
    assert cache.lookup(b"a") is not None  # "a" is now the most recently used
    assert cache.insert(b"d", _outputs(2.0))
    assert b"b" not in cache
    assert all(key in cache for key in (b"a", b"c", b"d"))
    assert cache.statistics().evictions == 1


def test_used_bytes_never_exceed_the_size_and_larger_entries_evict_several():
    cache = ResponseCache(64)
    for index in range(4):
        cache.insert(bytes([index]), _outputs(float(index)))  # 16 bytes each: full
    assert cache.statistics().used_bytes == 64
    assert cache.insert(b"big", _outputs(9.0, count=10))  # 40 bytes: evicts three
    stats = cache.statistics()
    assert (stats.entries, stats.used_bytes, stats.evictions) == (2, 56, 3)
    assert b"\x03" in cache and b"big" in cache


def test_an_entry_larger_than_the_cache_is_not_inserted_and_evicts_nothing():
    cache = ResponseCache(32)
    cache.insert(b"small", _outputs(1.0))
    assert cache.insert(b"huge", _outputs(2.0, count=9)) is False  # 36 > 32 bytes
    assert b"huge" not in cache and b"small" in cache
    assert cache.insert(b"exact", _outputs(3.0, count=8)) is True  # 32 bytes: fits alone
    assert cache.statistics().entries == 1


def test_bytes_outputs_count_their_wire_size():
    cache = ResponseCache(1024)
    cache.insert(b"k", {"S": Tensor.from_object([b"abc", b""], DataType.BYTES)})
    assert cache.statistics().used_bytes == (4 + 3) + (4 + 0)
    found = cache.lookup(b"k")
    assert found is not None and found["S"].to_bytes_array().tolist() == [b"abc", b""]


def test_an_existing_key_keeps_its_first_value():
    cache = ResponseCache(1024)
    assert cache.insert(b"k", _outputs(1.0))
    assert cache.insert(b"k", _outputs(2.0)) is False
    found = cache.lookup(b"k")
    assert found is not None and found["OUT"].to_numpy()[0] == 1.0


def test_outputs_outside_cpu_memory_are_not_inserted():
    cache = ResponseCache(1024)
    gpu = Tensor(DataType.FP32, np.zeros(2, np.float32), MemoryType.GPU, 0)
    assert cache.insert(b"k", {"OUT": gpu}) is False
    assert b"k" not in cache


def test_cached_values_cannot_be_changed_through_the_inserted_or_returned_arrays():
    cache = ResponseCache(1024)
    source = np.array([1.0, 2.0], np.float32)
    cache.insert(b"k", {"OUT": Tensor.from_object(source)})
    source[:] = -1  # the backend reuses its buffer
    first = cache.lookup(b"k")
    assert first is not None
    returned = first["OUT"].to_numpy()
    assert returned.flags.writeable
    returned[:] = -2  # a caller writes into its response
    second = cache.lookup(b"k")
    assert second is not None and second["OUT"].to_numpy().tolist() == [1.0, 2.0]


def test_concurrent_inserts_and_lookups_keep_the_cache_consistent():
    cache = ResponseCache(16 * 40)  # room for 40 of the 100 distinct entries
    threads, rounds = 8, 200
    barrier = threading.Barrier(threads)
    wrong: list[tuple[int, float]] = []

    def work(seed: int) -> None:
        barrier.wait()
        for step in range(rounds):
            index = (seed * 37 + step * 11) % 100
            key = index.to_bytes(2, "little")
            found = cache.lookup(key)
            if found is None:
                cache.insert(key, _outputs(float(index)))
            elif found["OUT"].to_numpy().tolist() != [float(index)] * 4:
                wrong.append((index, float(found["OUT"].to_numpy()[0])))

    workers = [threading.Thread(target=work, args=(seed,)) for seed in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    stats = cache.statistics()
    assert wrong == []
    assert stats.lookups == threads * rounds
    assert stats.hits + stats.misses == stats.lookups
    assert stats.used_bytes == 16 * stats.entries <= cache.size_bytes
    assert stats.entries == stats.insertions - stats.evictions


# -- configuration -------------------------------------------------------------------------
def test_config_gives_a_local_cache_or_none():
    assert ResponseCache.from_config({}) is None
    assert ResponseCache.from_config({"local": {"size": "0"}}) is None
    cache = ResponseCache.from_config({"local": {"size": "1048576"}})
    assert cache is not None and cache.size_bytes == 1048576


@pytest.mark.parametrize(("config", "message"), [
    ({"redis": {"host": "localhost"}}, "unsupported cache implementation 'redis'"),
    ({"local": {"size": "1"}, "redis": {}}, "unsupported cache implementation 'redis'"),
    ({"local": {}}, "needs a size"),
    ({"local": {"size": "-5"}}, "cannot be negative"),
    ({"local": {"size": "10", "policy": "fifo"}}, "unknown setting 'policy'"),
])
def test_bad_config_is_refused_with_a_clear_error(config, message):
    with pytest.raises(InvalidArgumentError, match=message):
        ResponseCache.from_config(config)


def test_a_size_that_is_no_number_is_refused_in_tritons_words():
    # recorded from Triton 2.51: tests/conformance flags_cache_config_size_word
    with pytest.raises(InternalError, match="^Failed to initialize LocalCache: stoull$"):
        ResponseCache.from_config({"local": {"size": "lots"}})


def test_a_cache_needs_a_positive_size():
    with pytest.raises(InvalidArgumentError, match="positive"):
        ResponseCache(0)
