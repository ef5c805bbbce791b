"""memory.py: the allocator's mmap threshold fixed unless the environment sets it."""

from __future__ import annotations

import platform

import pytest

from infercore.memory import map_large_buffers, release_memory


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
