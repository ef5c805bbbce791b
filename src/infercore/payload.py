"""Payload: the requests bound for one backend execution, and its compute timestamps.

A scheduler builds a payload, an instance's backend thread executes it. Backends may mark
where their input preparation ends and their output collection starts; unmarked, both
default to the execution's start and end, so statistics stay consistent either way.

A payload formed while its instance is still busy (a caller running its own request there)
waits for it; a request whose queue timeout passes meanwhile is still queued as far as
Triton is concerned (Triton forms a batch only for a free instance), so it is answered as
timed out and never executed: the scheduler sets ``rejects_at`` (a deadline per request,
0: none) and ``on_expired`` (its timeout answer), and dispatch.py calls ``expire`` while
it waits.
"""

from __future__ import annotations

from collections.abc import Callable

from .request import InferRequest

__all__ = ["Payload"]


class Payload:
    """The requests of one execution (one request, or a batch)."""

    __slots__ = ("requests", "batch_size", "compute_input_end_ns", "compute_output_start_ns",
                 "on_release", "rejects_at", "on_expired", "_clock")

    def __init__(self, requests: list[InferRequest], clock: Callable[[], int]) -> None:
        self.requests = requests
        self.batch_size = sum(r.batch_size or 1 for r in requests)
        self.compute_input_end_ns = 0
        self.compute_output_start_ns = 0
        # Who delivers the held final responses after execution (None: each at once);
        # the dynamic batcher's preserve_ordering sets it.
        self.on_release: Callable[[list[InferRequest]], None] | None = None
        # Per request, when it times out while the payload waits for its instance (0:
        # never), and who answers the ones that do (set together by the scheduler).
        self.rejects_at: list[int] | None = None
        self.on_expired: Callable[[list[InferRequest]], None] | None = None
        self._clock = clock

    def next_timeout(self) -> int | None:
        """The earliest deadline in ``rejects_at`` (ns), or None."""
        rejects_at = self.rejects_at
        if not rejects_at:
            return None
        return min((d for d in rejects_at if d), default=None)

    def expire(self) -> None:
        """Answer (``on_expired``) and drop the requests whose deadline passed; the payload
        may be left empty (then nothing is to execute)."""
        rejects_at = self.rejects_at
        on_expired = self.on_expired
        if not rejects_at or on_expired is None:
            return
        now = self._clock()
        kept: list[InferRequest] = []
        kept_at: list[int] = []
        expired: list[InferRequest] = []
        for request, deadline in zip(self.requests, rejects_at, strict=True):
            if deadline and deadline <= now:
                expired.append(request)
            else:
                kept.append(request)
                kept_at.append(deadline)
        if not expired:
            return
        self.requests = kept
        self.rejects_at = kept_at
        self.batch_size = sum(r.batch_size or 1 for r in kept)
        on_expired(expired)

    def mark_compute_input_end(self) -> None:
        """The backend has its inputs ready; the model's own compute starts now."""
        self.compute_input_end_ns = self._clock()

    def mark_compute_output_start(self) -> None:
        """The model's compute is done; collecting and sending outputs starts now."""
        self.compute_output_start_ns = self._clock()

    def __repr__(self) -> str:
        return f"Payload(requests={len(self.requests)}, batch_size={self.batch_size})"
