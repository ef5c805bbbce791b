"""busy_poll: the loop polls instead of sleeping for a window after each touch."""

from __future__ import annotations

import asyncio
import time

import pytest

from infercore.frontends.http.busy_poll import BusyPoll


class RecordingLoop(asyncio.SelectorEventLoop):
    """A selector loop that records how long each of its waits for I/O could last."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float | None] = []
        select = self._selector.select

        def recording(timeout: float | None = None):  # noqa: ANN202
            self.waits.append(timeout)
            return select(timeout)

        self._selector.select = recording  # type: ignore[method-assign]


@pytest.fixture
def loop():
    created = RecordingLoop()
    yield created
    created.close()


def _waits_during(loop: RecordingLoop, seconds: float) -> list[float | None]:
    start = len(loop.waits)
    loop.run_until_complete(asyncio.sleep(seconds))
    return loop.waits[start:]


def _slept(waits: list[float | None]) -> bool:
    return any(wait is None or wait > 0.005 for wait in waits)


def test_after_a_touch_the_loop_polls_until_the_window_ends_then_sleeps(loop):
    busy = BusyPoll(loop, 50_000)  # 50 ms
    assert _slept(_waits_during(loop, 0.02))  # untouched: it sleeps until the timer
    touched = time.monotonic()
    busy.touch()
    assert busy.polling
    polled = _waits_during(loop, 0.02)
    assert len(polled) > 10 and set(polled) == {0}  # never slept, however briefly
    while time.monotonic() - touched < 0.06:
        loop.run_until_complete(asyncio.sleep(0.005))
    assert not busy.polling  # the window has passed
    assert _slept(_waits_during(loop, 0.02))  # asleep again


def test_each_touch_extends_the_window(loop):
    now = [1_000_000_000]  # ns, moved by hand: a busy machine cannot stretch the 20 ms steps
    busy = BusyPoll(loop, 30_000, clock=lambda: now[0])  # 30 ms
    busy.touch()
    for _ in range(4):  # touched every 20 ms: the 30 ms window never runs out
        now[0] += 20_000_000
        loop.run_until_complete(asyncio.sleep(0))  # the poll callback runs meanwhile
        assert busy.polling
        busy.touch()
    now[0] += 31_000_000
    loop.run_until_complete(asyncio.sleep(0))
    assert not busy.polling


def test_touching_a_polling_loop_schedules_nothing_more(loop):
    busy = BusyPoll(loop, 10_000)
    busy.touch()
    busy.touch()
    busy.touch()
    assert len(loop._ready) == 1  # one poll callback, however often touched


@pytest.mark.parametrize("window", [0, -5])
def test_a_window_must_be_positive(loop, window: int):
    with pytest.raises(ValueError, match="must be positive"):
        BusyPoll(loop, window)


def test_while_held_the_loop_sleeps_and_stays_quiet_a_while_after(loop):
    busy = BusyPoll(loop, 50_000)
    busy.touch()
    busy.hold()  # a thread of this process answers: it needs the GIL
    assert _slept(_waits_during(loop, 0.02))
    assert not busy.polling
    busy.touch()  # a request or an answer meanwhile: still no polling
    assert not busy.polling
    busy.release()
    busy.touch()  # just after the hold: still quiet
    assert not busy.polling
    loop.run_until_complete(asyncio.sleep(0.015))  # the quiet time after a hold is over
    busy.touch()
    assert busy.polling
    assert set(_waits_during(loop, 0.01)) == {0}


def test_a_hold_stops_a_loop_that_polls(loop):
    busy = BusyPoll(loop, 50_000)
    busy.touch()
    assert busy.polling
    busy.hold()
    loop.run_until_complete(asyncio.sleep(0))  # the next poll sees the hold
    assert not busy.polling
    busy.release()
