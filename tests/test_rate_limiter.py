"""RateLimiter: resource sizing, load-time checks, exclusion and priority-weighted grants."""

from __future__ import annotations

import threading

import pytest

from infercore import InvalidArgumentError, RateLimiterResource, RateLimitMode
from infercore.rate_limiter import RateLimiter, ResourceAsk


def _ask(*needs: tuple[str, int, int], priority: int = 1) -> ResourceAsk:
    return ResourceAsk(tuple(needs), priority)


def test_off_mode_never_blocks():
    limiter = RateLimiter()
    ask = _ask(("R", -1, 5))
    limiter.register("m", [ask])
    limiter.acquire("a", ask)
    limiter.acquire("b", ask)
    assert limiter.try_acquire("c", ask)


def test_implicit_resources_take_the_largest_single_ask():
    limiter = RateLimiter(RateLimitMode.EXEC_COUNT)
    limiter.register("m1", [_ask(("R", -1, 2))])
    limiter.register("m2", [_ask(("R", -1, 3))])
    assert limiter.free() == {("R", -1): 3}


def test_explicit_resources_limit_and_reject_bigger_asks():
    limiter = RateLimiter(RateLimitMode.EXEC_COUNT, [RateLimiterResource("R", 2)])
    limiter.register("ok", [_ask(("R", 0, 2))])
    assert limiter.free() == {("R", 0): 2}
    with pytest.raises(InvalidArgumentError, match='"R" is limited to 2 .* count is 3'):
        limiter.register("big", [_ask(("R", 0, 3))])


def test_once_any_resource_is_sized_the_others_have_none():
    # Triton's ParseAndValidateExplicitResources; names are compared as given
    limiter = RateLimiter(RateLimitMode.EXEC_COUNT, [RateLimiterResource("r", 2)])
    with pytest.raises(InvalidArgumentError, match='"R" is limited to 0'):
        limiter.register("m", [_ask(("R", 0, 1))])


def test_a_global_resource_takes_the_largest_sized_entry():
    limiter = RateLimiter(RateLimitMode.EXEC_COUNT, [RateLimiterResource("G", 1, 0),
                                                     RateLimiterResource("G", 3, 1)])
    limiter.register("m", [_ask(("G", -1, 3))])
    assert limiter.free() == {("G", -1): 3}


def test_per_device_resources_are_counted_separately():
    limiter = RateLimiter(RateLimitMode.EXEC_COUNT)
    a, b = _ask(("R", 0, 1)), _ask(("R", 1, 1))
    limiter.register("m", [a, b])
    limiter.acquire("a", a)
    assert limiter.try_acquire("b", b)  # another device's R
    assert not limiter.try_acquire("a2", a)


def test_an_instance_waits_until_resources_are_released():
    limiter = RateLimiter(RateLimitMode.EXEC_COUNT)
    ask = _ask(("R", -1, 1))
    limiter.register("m", [ask])
    limiter.acquire("first", ask)
    granted = threading.Event()

    def second() -> None:
        limiter.acquire("second", ask)
        granted.set()

    thread = threading.Thread(target=second)
    thread.start()
    assert not granted.wait(0.05)
    limiter.release("first", ask)
    assert granted.wait(5)
    thread.join(5)


def test_priority_weights_the_grants_among_competing_instances():
    limiter = RateLimiter(RateLimitMode.EXEC_COUNT)
    fast, slow = _ask(("R", -1, 1), priority=1), _ask(("R", -1, 1), priority=3)
    limiter.register("m", [fast, slow])
    order: list[str] = []
    holder = object()
    limiter.acquire(holder, fast)  # hold R so both competitors queue up
    stop = threading.Event()

    def compete(name: str, ask: ResourceAsk) -> None:
        while not stop.is_set():
            limiter.acquire(name, ask)
            order.append(name)
            if len(order) >= 40:
                stop.set()
            limiter.release(name, ask)

    threads = [threading.Thread(target=compete, args=("p1", fast)),
               threading.Thread(target=compete, args=("p3", slow))]
    for thread in threads:
        thread.start()
    limiter.release(holder, fast)
    for thread in threads:
        thread.join(10)
    first = order[:40]
    # priority 3 gets about a third of the chances of priority 1
    assert first.count("p1") >= 2 * first.count("p3") > 0
