"""large_requests.py: which requests leave the serving thread, and how they run there."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import traceback
import weakref
from collections.abc import Iterator

import pytest

from infercore.frontends.large_requests import (
    LARGE_REQUEST_BYTES,
    LARGE_WORK_SWITCH_S,
    LargeRequests,
    costs_much,
)

MIB = 1024 * 1024


@pytest.fixture
def large() -> Iterator[LargeRequests]:
    requests = LargeRequests("test-large")
    try:
        yield requests
    finally:
        requests.shutdown()


def test_large_tensors_of_numbers_stay_and_bytes_or_a_large_header_leave():
    header = b'{"inputs":[{"name":"IN","datatype":"FP32","shape":[262144]}]}'
    assert not costs_much(header + bytes(MIB), len(header), len(header) + MIB)
    text = header.replace(b"FP32", b"BYTES")
    assert costs_much(text + bytes(MIB), len(text), len(text) + MIB)
    assert not costs_much(text, len(text), len(text))  # small: decoded where it came
    json = b" " * (LARGE_REQUEST_BYTES + 1)
    assert costs_much(json, len(json), len(json))


def test_work_runs_with_the_collector_paused_which_resumes_after(large):
    assert large.submit(gc.isenabled).result() is False
    assert asyncio.run(large.run(gc.isenabled)) is False
    assert gc.isenabled()

    def fails() -> None:
        raise ValueError("refused")

    with pytest.raises(ValueError):
        asyncio.run(large.run(fails))
    assert gc.isenabled()


def test_a_refused_requests_objects_go_with_it_though_its_error_is_kept(large):
    class Parsed:  # stands for a parsed document, which the collector would walk
        pass

    refs: list[weakref.ref[Parsed]] = []

    def decode() -> None:
        document = Parsed()
        refs.append(weakref.ref(document))
        try:
            raise KeyError("inputs")
        except KeyError as exc:
            raise ValueError("refused") from exc

    error = large.submit(decode).exception()
    assert isinstance(error, ValueError)
    assert refs[0]() is None  # freed by its frame's clearing, not by a collection
    assert "in decode" in "".join(traceback.format_exception(error))  # still told


def test_a_refusal_gives_memory_back_once_for_those_queued_together(large, monkeypatch):
    released: list[int] = []
    monkeypatch.setattr("infercore.frontends.large_requests.release_memory",
                        lambda generation=2: released.append(generation))
    busy = threading.Event()
    blocker = large.submit(busy.wait, 10)  # the thread is busy: the releases queue up
    for _ in range(3):
        large.release_refused()
    busy.set()
    blocker.result()
    large.submit(lambda: None).result()  # queued behind them
    assert released == [2]  # one full collection, then the trim
    large.release_refused()
    large.submit(lambda: None).result()
    assert released == [2, 1]  # within FULL_COLLECTION_S: the young generations only
    monkeypatch.setattr("infercore.frontends.large_requests.time.monotonic",
                        lambda: 1e9)  # ... and a full one again once that has passed
    large.release_refused()
    large.submit(lambda: None).result()
    assert released == [2, 1, 2]


def test_work_runs_with_the_gil_handed_over_sooner_until_the_last_ends(large):
    before = sys.getswitchinterval()
    assert large.submit(sys.getswitchinterval).result() == LARGE_WORK_SWITCH_S
    assert sys.getswitchinterval() == before
    other = LargeRequests("test-large-other")  # two frontends' threads at once
    try:
        started, finish = threading.Event(), threading.Event()

        def hold() -> float:
            started.set()
            finish.wait(10)
            return sys.getswitchinterval()

        held = other.submit(hold)
        assert started.wait(10)
        assert large.submit(sys.getswitchinterval).result() == LARGE_WORK_SWITCH_S
        assert sys.getswitchinterval() == LARGE_WORK_SWITCH_S  # the other still runs
        finish.set()
        assert held.result() == LARGE_WORK_SWITCH_S
    finally:
        other.shutdown()
    assert sys.getswitchinterval() == before

    def fails() -> None:
        raise ValueError("refused")

    with pytest.raises(ValueError):
        large.submit(fails).result()
    assert sys.getswitchinterval() == before
