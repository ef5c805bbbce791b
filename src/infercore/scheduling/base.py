"""The scheduler protocol every scheduler implements.

Callers (the model, on the request's thread) call ``enqueue``; each instance's backend
thread calls ``next_payload`` and blocks in it until there is work or the scheduler stops
(then it returns None). ``stop`` wakes every blocked instance thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from ..payload import Payload
from ..request import InferRequest

if TYPE_CHECKING:
    from ..instance import ModelInstance

__all__ = ["Scheduler"]


class Scheduler(Protocol):
    def enqueue(self, request: InferRequest, wake: bool = True) -> None:
        """Accept a validated request (its sender set); answer it later through the sender.

        ``wake=False``: its consumer will first try to run it inline and calls
        ``dispatch`` if that fails, so no instance thread is woken for nothing.
        """
        ...

    def dispatch(self, request: InferRequest) -> None:
        """Hand a request enqueued with ``wake=False`` to the instance threads."""
        ...

    def attach(self, instances: Sequence[ModelInstance]) -> None:
        """The active instances (a blocked caller may reserve one to run inline)."""
        ...

    def run_inline(self, request: InferRequest, *, on_loop: bool = False) -> bool:
        """Run the still-queued ``request`` on the calling thread if an instance is idle."""
        ...

    def drain(self) -> None:
        """After the instance threads exited: answer requests left in the queue."""
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
