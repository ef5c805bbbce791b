"""The shared-memory registry: a region a request uses is unregistered once it is answered."""

from __future__ import annotations

import gc
import os
import uuid
from collections.abc import Iterator

import pytest

from infercore.errors import AlreadyExistsError, NotFoundError
from infercore.frontends.shm import SystemSharedMemory


@pytest.fixture
def registry() -> Iterator[SystemSharedMemory]:
    """A registry with regions 'a' and 'b' over fresh objects, removed afterwards."""
    keys = [f"/infercore_test_{uuid.uuid4().hex[:12]}" for _ in range(2)]
    for key in keys:
        fd = os.open(f"/dev/shm{key}", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.ftruncate(fd, 64)
        os.close(fd)
    shm = SystemSharedMemory()
    shm.register("a", keys[0], 0, 64)
    shm.register("b", keys[1], 0, 64)
    try:
        yield shm
    finally:
        for key in keys:
            os.unlink(f"/dev/shm{key}")


def _names(shm: SystemSharedMemory) -> list[object]:
    return [region["name"] for region in shm.status()]


def test_a_region_in_use_is_unregistered_once_its_request_is_answered(registry):
    use = registry.use()
    use.region("a").view(0, 64)
    registry.unregister("a")  # accepted; still listed, and still usable, while in use
    assert _names(registry) == ["a", "b"]
    registry.unregister("b")  # one not in use goes at once
    assert _names(registry) == ["a"]
    use.release()
    assert _names(registry) == []


def test_unregistering_all_defers_only_the_regions_in_use(registry):
    use = registry.use()
    use.region("b")
    registry.unregister()
    assert _names(registry) == ["b"]
    use.release()
    assert _names(registry) == []


def test_a_region_two_requests_use_goes_when_both_are_answered(registry):
    first, second = registry.use(), registry.use()
    first.region("a")
    second.region("a")
    registry.unregister("a")
    first.release()
    assert _names(registry) == ["a", "b"]
    second.release()
    assert _names(registry) == ["b"]


def test_a_request_after_the_unregister_still_finds_the_region_till_it_goes(registry):
    first = registry.use()
    first.region("a")
    registry.unregister("a")
    second = registry.use()
    second.region("a").view(0, 64)  # as current Triton: awaiting, not yet gone
    with pytest.raises(AlreadyExistsError):
        registry.register("a", "/unused", 0, 64)  # the name is still taken
    first.release()
    assert _names(registry) == ["a", "b"]
    second.release()
    assert _names(registry) == ["b"]
    with pytest.raises(NotFoundError):
        registry.use().region("a")


def test_releasing_twice_frees_the_region_once(registry):
    first, second = registry.use(), registry.use()
    first.region("a")
    second.region("a")
    registry.unregister("a")
    first.release()
    first.release()
    assert _names(registry) == ["a", "b"]
    second.release()
    assert _names(registry) == ["b"]


def test_a_use_dropped_without_release_frees_its_regions(registry):
    use = registry.use()
    use.region("a")
    del use
    gc.collect()
    registry.unregister("a")
    assert _names(registry) == ["b"]


def test_hold_marks_a_registered_region_and_skips_a_missing_one(registry):
    use = registry.use()
    use.hold("missing")
    use.hold("b")
    registry.unregister("b")
    assert _names(registry) == ["a", "b"]
    use.release()
    assert _names(registry) == ["a"]


def test_a_missing_region_is_not_found_and_holds_nothing(registry):
    use = registry.use()
    with pytest.raises(NotFoundError, match="Unable to find shared memory region: 'c'"):
        use.region("c")
    registry.unregister()
    assert _names(registry) == []
