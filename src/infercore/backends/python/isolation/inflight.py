"""The requests a worker process holds, and the one final answer each of them gets.

A request is registered under a slot number when the server sends it to a worker, and
leaves the table with its final answer: the worker's final response, an error when the
worker dies, or taken back by the ``execute`` that sent it (to retry it on a new worker,
or for the engine to answer). Whichever thread sees what first, each request is answered
exactly once.

Per entry:

    pending   the ``execute`` that sent it is still running: that thread alone decides how
              the request ends if the worker dies (retried when the worker never read it,
              failed otherwise). Cleared when DONE arrives.
    done      its final answer is given, or in the hands of the thread giving it.

Threads: the thread executing a payload adds entries, takes them back and clears
``pending``; the thread reading a worker's responses (that same thread, or the event thread
for decoupled models) delivers them; the event thread fails the rest when the worker dies;
any thread cancels. ``InflightTable._lock`` guards the table and ``closed`` (the worker is
gone): clearing ``pending`` and reading ``closed`` happen together, as do setting ``closed``
and choosing the entries to fail, so no request falls between the two threads. Each entry's
``lock`` orders the deliveries to one request against its failure.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping
from typing import Any

from ....errors import InternalError, TritonError, UnavailableError, error_from_code
from ....request import InferRequest
from ....tensor import Tensor as CoreTensor

__all__ = ["Inflight", "InflightTable"]


class Inflight:
    """A request sent to a worker and not finished yet."""

    __slots__ = ("request", "block", "lock", "done", "pending")

    def __init__(self, request: InferRequest, block: int) -> None:
        self.request = request
        self.block = block  # its input block: freed with its final answer
        self.lock = threading.Lock()
        self.done = False
        self.pending = True


class InflightTable:
    """The slot table of one worker."""

    def __init__(self, free_block: Callable[[int], None], set_flag: Callable[[int], None]
                 ) -> None:
        self._free_block = free_block
        self._set_flag = set_flag
        self._lock = threading.Lock()
        self._entries: dict[int, Inflight] = {}
        self._slots = itertools.count(1)
        self.closed = False

    def add(self, request: InferRequest, block: int) -> tuple[int, Inflight]:
        """Register a request about to be sent: its slot number and entry."""
        entry = Inflight(request, block)
        slot = next(self._slots)
        with self._lock:
            self._entries[slot] = entry
        # The worker reads the flag byte in the request's block: nothing else to send.
        request.on_cancel(lambda: self._cancel(entry))
        return slot, entry

    def deliver(self, slot: int, *, final: bool, has_response: bool,
                outputs: Mapping[str, CoreTensor], parameters: dict[str, Any] | None,
                error: tuple[int, str] | None, fails: bool = True) -> None:
        """Pass one of the worker's responses to the request's engine sender; ``fails``:
        its error fails the request (False: the model's own error answer)."""
        with self._lock:
            entry = self._entries.pop(slot, None) if final else self._entries.get(slot)
        if entry is None:  # answered already (failed, or a late answer after DONE)
            return
        with entry.lock:
            if entry.done:
                return
            entry.done = final
            sender = entry.request.sender
            try:
                if sender is None:
                    pass
                elif has_response:
                    sender.send(outputs, parameters=parameters, final=final,
                                error=None if error is None else error_from_code(*error),
                                fails=fails)
                else:
                    sender.close()
            except TritonError:  # closed meanwhile by the engine (cancelled, unloading)
                pass
        if final:
            self._free_block(entry.block)

    def _cancel(self, entry: Inflight) -> None:
        with entry.lock:
            if not entry.done:
                self._set_flag(entry.block)

    def take_back(self, entries: list[Inflight]) -> list[Inflight]:
        """Remove those of ``entries`` still unanswered and free their blocks; return them.

        The caller now owns answering them (or lets the engine do it).
        """
        wanted = {id(entry) for entry in entries}
        with self._lock:
            for slot, entry in list(self._entries.items()):
                if id(entry) in wanted:
                    del self._entries[slot]
        taken = _claim(entries)
        for entry in taken:
            self._free_block(entry.block)
        return taken

    def keep(self, slots: tuple[int, ...]) -> list[Inflight]:
        """The entries of ``slots`` still unanswered (answered later, on the event thread)."""
        with self._lock:
            return [entry for entry in map(self._entries.get, slots) if entry is not None]

    def settle(self, entries: list[Inflight]) -> bool:
        """The ``execute`` that sent ``entries`` is over: from now on a death fails them.

        Returns whether the worker is already gone (then the caller fails them).
        """
        with self._lock:
            for entry in entries:
                entry.pending = False
            return self.closed

    def close(self) -> None:
        """The worker is gone."""
        with self._lock:
            self.closed = True

    def fail_all(self, text: str, *, unavailable: bool = False) -> None:
        """Close, and answer every request not owned by a running ``execute`` with an error."""
        with self._lock:
            self.closed = True
            entries = []
            for slot, entry in list(self._entries.items()):
                if not entry.pending:
                    entries.append(entry)
                    del self._entries[slot]
        taken = _claim(entries)
        fail(taken, text, unavailable=unavailable)
        for entry in taken:
            self._free_block(entry.block)


def _claim(entries: list[Inflight]) -> list[Inflight]:
    claimed: list[Inflight] = []
    for entry in entries:
        with entry.lock:
            if not entry.done:
                entry.done = True
                claimed.append(entry)
    return claimed


def fail(entries: list[Inflight], text: str, *, unavailable: bool = False) -> None:
    """Answer claimed entries with an error."""
    for entry in entries:
        sender = entry.request.sender
        if sender is not None and not sender.closed:
            # One error object per request: each may be raised on another thread.
            error = UnavailableError(text) if unavailable else InternalError(text)
            try:
                sender.send_error(error)
            except TritonError:  # closed meanwhile by the engine
                pass
