"""The scheduler protocol every scheduler implements.

Callers (the model, on the request's thread) call ``enqueue``; each instance's backend
thread calls ``next_payload`` and blocks in it until there is work or the scheduler stops
(then it returns None). ``stop`` wakes every blocked instance thread.
"""

from __future__ import annotations

from typing import Protocol

from ..payload import Payload
from ..request import InferRequest

__all__ = ["Scheduler"]


class Scheduler(Protocol):
    def enqueue(self, request: InferRequest) -> None:
        """Accept a validated request (its sender set); answer it later through the sender."""
        ...

    def next_payload(self) -> Payload | None:
        """Block until a payload is ready for an instance; None once stopped."""
        ...

    def queued_count(self) -> int:
        """Requests waiting in the queue (not yet handed to an instance)."""
        ...

    def stop(self) -> None:
        """Stop admitting; instance threads take what was queued before, then get None."""
        ...
