"""The scheduler protocol every scheduler implements, and the handoff rules they share.

Callers (the model, on the request's thread) call ``enqueue``; each instance's backend
thread calls ``next_payload`` and blocks in it until there is work or the scheduler stops
(then it returns None). ``stop`` wakes every blocked instance thread.

Handoffs ("caller runs", docs/architecture.md). A request reaches an instance in one of
two ways, and the scheduler decides which inside ``enqueue``, on the caller's thread:

- ``caller_runs=True`` (the caller reads the stream at once): if an instance is idle (and,
  ``on_loop``, known to execute briefly), the caller reserves it, claims its request and
  executes it before ``enqueue`` returns. No instance thread is woken.
- Otherwise (not allowed, or no instance can be reserved now), the request is queued and
  exactly one wake-up is signalled to the instance threads. A thread that is busy sees the
  request when it next looks at the queue; one that sleeps is woken by the signal.

A model whose one instance can run a payload from an event loop without blocking it
(process-isolated Python instances: ``ModelInstance.runs_on_loop``) is run by a loop
caller through ``execute_on_loop`` when the instance is idle: the loop sends the payload
and finishes it when the answer is readable, so no instance thread is woken
(``reserve_for_loop``; the dynamic batcher also chains the next batches there).

There is no third state: when ``enqueue`` returns, the request has run (or been answered)
or it is in the queue with its wake-up sent, so no request waits on a reader that may
never come. Readers that did not promise to read at once (``run_inline``) may still claim
a queued request when an idle instance lets them; claiming is atomic in each scheduler,
so exactly one of an instance thread, a reader or a cancel owns a request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ..payload import Payload
from ..request import InferRequest
from ..response import running_long_lived_loop

if TYPE_CHECKING:
    from ..instance import ModelInstance

__all__ = ["Scheduler", "SchedulerStatistics"]


@dataclass(frozen=True, slots=True)
class SchedulerStatistics:
    """How a scheduler's requests reached their instances so far."""

    queued: int  # requests waiting now (not yet handed to an instance)
    ran_inline: int  # payloads executed on callers' threads (no thread crossing)
    wakeups: int  # wake-up signals sent to the instance threads for new work


class Scheduler(Protocol):
    def enqueue(self, request: InferRequest, *, caller_runs: bool = False,
                on_loop: bool = False) -> None:
        """Accept a validated request (its sender set); answer it through the sender.

        ``caller_runs``: the caller reads the stream at once, so the request may execute
        on the calling thread now if an instance is idle (``on_loop``: the caller is an
        event loop, so only an instance whose recent executions were short qualifies).
        Otherwise it is queued and one instance thread is woken. Raises for what is
        refused at the door (stopped, a full queue).
        """
        ...

    def attach(self, instances: Sequence[ModelInstance]) -> None:
        """The active instances (a caller may reserve an idle one to run inline)."""
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


def reserve_for_loop(instances: Sequence[ModelInstance]
                     ) -> tuple[ModelInstance, asyncio.AbstractEventLoop] | None:
    """Reserve, for the running event loop, the model's one instance if it can run a payload
    from the loop without blocking it (``ModelInstance.runs_on_loop``: process-isolated
    instances) and is idle: ``(instance, loop)``; else None. Only a loop marked long-lived
    (a frontend's, ``response.mark_long_lived_loop``) qualifies: the payload's answer is
    read there later. The payload's ``then`` must ``unreserve()`` it."""
    if len(instances) != 1 or not instances[0].runs_on_loop():
        return None
    loop = running_long_lived_loop()
    if loop is None or not instances[0].try_reserve():
        return None
    return instances[0], loop


def reserve_idle(instances: Sequence[ModelInstance], on_loop: bool) -> ModelInstance | None:
    """Reserve an idle instance for the calling thread without waiting, or None.

    ``on_loop``: only an instance known to execute briefly, so an event loop never stalls.
    The caller must ``unreserve()`` the instance it gets.
    """
    for instance in instances:
        if on_loop and not instance.runs_short():
            continue  # unknown or long: the loop must not wait for it
        if instance.try_reserve():
            return instance
    return None
