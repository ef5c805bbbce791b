"""What asyncio's private APIs would save infercore, measured side by side in one run.

    python benchmarks/asyncio_private.py [--n 2000000]

1. "Is the caller on this loop's thread?" - asked once per response put on a stream whose
   consumer waits on a loop (response.py ``ResponseStream._put``): ``asyncio._get_running_loop()``
   (private) against ``asyncio.get_running_loop()`` in try/except (public), from a thread
   that runs no loop (a backend thread: the public form raises) and from the loop's own
   thread (a model run inline: it does not). Each figure is the cost of the check alone,
   ns per call; the put that follows it costs a ``call_soon_threadsafe`` (a self-pipe
   write, several µs) off the loop, a callback on it. response.py asks neither: the
   consumer's thread is recorded with its future, and compared (``thread check``).
2. Stepping a handler that waits on a future (frontends/http_eager.py): reading the
   future protocol with ``getattr(f, "_asyncio_future_blocking", False)`` against the
   public ``asyncio.isfuture(f)``, ns per call.

Noise: a shared machine; compare the figures of one run only.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from collections.abc import Callable


def _private() -> object:
    return asyncio._get_running_loop()


def _public() -> object:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


_CONSUMER_THREAD = threading.get_ident()


def _thread_check() -> bool:  # what response.py asks instead (public)
    return threading.get_ident() == _CONSUMER_THREAD


def _ns_per_call(function: Callable[[], object], n: int) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter_ns()
        for _ in range(n):
            function()
        best = min(best, (time.perf_counter_ns() - start) / n)
    return best


def _loop_checks(n: int) -> dict[str, float]:
    async def on_loop() -> dict[str, float]:
        return {"private, on the loop": _ns_per_call(_private, n),
                "public, on the loop": _ns_per_call(_public, n)}

    figures = {"private, no loop": _ns_per_call(_private, n),
               "public, no loop": _ns_per_call(_public, n),
               "thread check (response.py)": _ns_per_call(_thread_check, n)}
    figures.update(asyncio.run(on_loop()))
    return figures


def _future_checks(n: int) -> dict[str, float]:
    async def measure() -> dict[str, float]:
        future = asyncio.get_running_loop().create_future()
        return {
            "getattr _asyncio_future_blocking":
                _ns_per_call(lambda: getattr(future, "_asyncio_future_blocking", False), n),
            "asyncio.isfuture": _ns_per_call(lambda: asyncio.isfuture(future), n),
        }

    return asyncio.run(measure())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    args = parser.parse_args()
    for name, ns in {**_loop_checks(args.n), **_future_checks(args.n)}.items():
        print(f"{name:36s} {ns:7.1f} ns")


if __name__ == "__main__":
    main()
