"""The scheduler protocol every scheduler implements: schedulers form payloads.

A scheduler never touches a model instance: dispatch.py decides who executes each payload
(a backend thread, a caller, an event loop's chain) and holds the instance meanwhile. The
scheduler only queues requests, forms payloads from them, and says whether a caller may run
them itself (``callers_run``).

Threads: callers (through dispatch.py) call ``enqueue``, ``take`` and the chain methods;
each backend thread calls ``next_payload`` and blocks in it until there is work or the
scheduler stops (then it returns None). ``stop`` wakes every blocked backend thread.

Handoffs (docs/architecture.md, "Dispatch entry points"):

- ``enqueue(request)``: the request is queued and exactly one wake-up is signalled to the
  backend threads (a thread that is busy sees it when it next looks; one that sleeps is
  woken), or none when a waiting thread will take it anyway (the dynamic batcher's delay).
- ``enqueue(request, take=True)``: the caller holds an idle instance: the scheduler returns
  a payload holding the request for the caller to execute now, or queues it as above and
  returns None (it cannot run now: another batch is at the front).
- ``take(request)``: a reader that made no promise claims its still-queued request: a
  payload holding it, or None. Claiming is atomic in each scheduler, so exactly one of a
  backend thread, a reader or a cancel owns a request.
- The loop-driven chain (``enqueue(take=True, chain=c)`` starts it; ``join_chain``,
  ``poll``, ``end_chain``): while chain ``c`` (an opaque token, a loop's attachment) runs,
  its loop's requests may be queued without a wake-up, and the chain forms the next
  payload itself when the previous one is answered. When it ends, what is queued gets its
  wake-up. A scheduler that does not chain declines (``join_chain`` False, ``poll`` None).
- ``hand_back(payload)``: a payload formed for a chain that the backend could not start:
  a backend thread takes it next.

There is no third state: when ``enqueue`` returns, the request has a payload the caller
executes, or it is queued with its wake-up sent (or joined to a running chain), so no
request waits on a reader that may never come.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..payload import Payload
from ..request import InferRequest

__all__ = ["NoCallerRuns", "Scheduler", "SchedulerStatistics"]


@dataclass(frozen=True, slots=True)
class SchedulerStatistics:
    """How a scheduler's requests reached their instances so far."""

    queued: int  # requests waiting now (not yet handed to an instance)
    ran_inline: int  # payloads executed on callers' threads or loops (no thread crossing)
    wakeups: int  # wake-up signals sent to the instance threads for new work


class Scheduler(Protocol):
    # Whether a caller holding an idle instance may run payloads (False: a request must
    # wait for something, e.g. its sequence's lane or a batch's queue delay).
    callers_run: bool

    def enqueue(self, request: InferRequest, *, take: bool = False,
                chain: object | None = None) -> Payload | None:
        """Accept a validated request (its sender set); answer it through the sender.

        ``take``: the caller holds an idle instance; return a payload holding the request
        to execute now, or queue it and return None. ``chain`` (with ``take``): a payload
        returned starts that loop-driven chain. Raises for what is refused at the door
        (stopped, a full queue).
        """
        ...

    def take(self, request: InferRequest) -> Payload | None:
        """A payload holding the still-queued ``request``, for the calling reader, if one
        can be formed now; None (nothing done) otherwise."""
        ...

    def join_chain(self, request: InferRequest, chain: object) -> bool:
        """Queue ``request`` without a wake-up if ``chain`` runs now (it will take it);
        False (nothing done) if it does not."""
        ...

    def poll(self, chain: object) -> Payload | None:
        """The chain's next payload, if one is ready now; None ends the chain (what is
        queued gets its wake-up)."""
        ...

    def end_chain(self, chain: object) -> None:
        """``chain`` stops; what is queued gets its wake-up."""
        ...

    def hand_back(self, payload: Payload) -> None:
        """A payload a chain could not start: a backend thread takes it next."""
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


class NoCallerRuns:
    """The caller-runs and chain half of the protocol for a scheduler whose callers never
    run requests (``callers_run`` False: dispatch.py never offers it a payload's caller)."""

    callers_run = False

    def take(self, request: InferRequest) -> Payload | None:
        return None

    def join_chain(self, request: InferRequest, chain: object) -> bool:
        return False

    def poll(self, chain: object) -> Payload | None:
        return None

    def end_chain(self, chain: object) -> None:
        pass

    def hand_back(self, payload: Payload) -> None:
        raise RuntimeError("this scheduler never starts a payload on a caller")
