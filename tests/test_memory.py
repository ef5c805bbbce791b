"""memory.py: the allocator's mmap threshold and heap count fixed unless the environment
sets them."""

from __future__ import annotations

import platform

import pytest

from infercore.memory import limit_arenas, map_large_buffers, release_memory


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_large_buffers_are_mapped_on_their_own_with_glibc():
    assert map_large_buffers()
    release_memory()  # and trimming still works after it


@pytest.mark.parametrize(("name", "value"), [
    ("MALLOC_MMAP_THRESHOLD_", "65536"),
    ("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=65536"),
    ("MALLOC_TRIM_THRESHOLD_", "65536"),
])
def test_a_threshold_set_by_the_environment_is_left_alone(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    assert not map_large_buffers()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_the_heaps_are_limited_with_glibc():
    assert limit_arenas()


@pytest.mark.parametrize(("name", "value"), [
    ("MALLOC_ARENA_MAX", "4"),
    ("GLIBC_TUNABLES", "glibc.malloc.arena_max=4"),
])
def test_a_heap_count_set_by_the_environment_is_left_alone(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    assert not limit_arenas()
