"""The shared-memory registry: regions a request uses are not unregistered under it."""

from __future__ import annotations

import gc
import os
import uuid
from collections.abc import Iterator

import pytest

from infercore.errors import InternalError, NotFoundError
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


def test_a_region_in_use_is_not_unregistered_by_name(registry):
    use = registry.use()
    use.region("a").view(0, 64)
    with pytest.raises(InternalError, match="^Cannot unregister shared memory region 'a', "
                                            "it is currently in use.$"):
        registry.unregister("a")
    registry.unregister("b")  # one not in use goes
    assert _names(registry) == ["a"]
    use.release()
    registry.unregister("a")
    assert _names(registry) == []


def test_unregistering_all_forgets_the_regions_not_in_use_and_names_the_others(registry):
    use = registry.use()
    use.region("b")
    with pytest.raises(InternalError) as refused:
        registry.unregister()
    assert refused.value.message == ("Failed to unregister the following system shared "
                                     "memory regions: b ,")
    assert _names(registry) == ["b"]
    use.release()
    registry.unregister()
    assert _names(registry) == []


def test_a_region_two_requests_use_stays_in_use_until_both_are_answered(registry):
    first, second = registry.use(), registry.use()
    first.region("a")
    second.region("a")
    first.release()
    with pytest.raises(InternalError):
        registry.unregister("a")
    second.release()
    registry.unregister("a")


def test_releasing_twice_frees_the_region_once(registry):
    first, second = registry.use(), registry.use()
    first.region("a")
    second.region("a")
    first.release()
    first.release()
    with pytest.raises(InternalError):
        registry.unregister("a")
    second.release()


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
    with pytest.raises(InternalError):
        registry.unregister("b")
    use.release()
    registry.unregister("b")


def test_a_missing_region_is_not_found_and_holds_nothing(registry):
    use = registry.use()
    with pytest.raises(NotFoundError, match="Unable to find shared memory region: 'c'"):
        use.region("c")
    registry.unregister()
    assert _names(registry) == []
