"""Payload: the requests bound for one backend execution, and its compute timestamps.

A scheduler builds a payload, an instance's backend thread executes it. Backends may mark
where their input preparation ends and their output collection starts; unmarked, both
default to the execution's start and end, so statistics stay consistent either way.
"""

from __future__ import annotations

from collections.abc import Callable

from .request import InferRequest

__all__ = ["Payload"]


class Payload:
    """The requests of one execution (one request, or a batch)."""

    __slots__ = ("requests", "batch_size", "compute_input_end_ns", "compute_output_start_ns",
                 "on_release", "_clock")

    def __init__(self, requests: list[InferRequest], clock: Callable[[], int]) -> None:
        self.requests = requests
        self.batch_size = sum(r.batch_size or 1 for r in requests)
        self.compute_input_end_ns = 0
        self.compute_output_start_ns = 0
        # Who delivers the held final responses after execution (None: each at once);
        # the dynamic batcher's preserve_ordering sets it.
        self.on_release: Callable[[list[InferRequest]], None] | None = None
        self._clock = clock

    def mark_compute_input_end(self) -> None:
        """The backend has its inputs ready; the model's own compute starts now."""
        self.compute_input_end_ns = self._clock()

    def mark_compute_output_start(self) -> None:
        """The model's compute is done; collecting and sending outputs starts now."""
        self.compute_output_start_ns = self._clock()

    def __repr__(self) -> str:
        return f"Payload(requests={len(self.requests)}, batch_size={self.batch_size})"
