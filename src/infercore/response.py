"""Responses, and the one bridge between the engine's threads and its callers.

Threads: a backend thread (or a scheduler thread, for requests failed in the queue) calls
``ResponseSender.send``; exactly one consumer reads the ``ResponseStream``, either a sync
caller blocked in ``__next__``/``result()`` or an asyncio task in ``__anext__``/``await``.
``ResponseStream._lock`` guards ``_items``, ``_done`` and the two waiter slots; nothing is
done under it but swapping those fields. A sync consumer parks on a private lock that the
producer releases; an async consumer parks on a future that the producer resolves with
``loop.call_soon_threadsafe`` (resolved directly when the producer is that loop's own
thread). So one response costs at most one thread wake-up, never a poll.

Stream states: open -> done (final response or final flag received). Items queued before
``done`` are still handed out after it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Mapping
from typing import Any, Protocol

from .errors import CancelledError, InternalError, TritonError
from .request import InferRequest, ParameterValue
from .tensor import Tensor

__all__ = ["InferResponse", "ResponseSender", "ResponseStream"]

_allocate_lock = threading.Lock
_get_ident = threading.get_ident  # read on every response put


class InlineRunner(Protocol):
    """Who may run a queued request for the reader that blocks on it (dispatch.py)."""

    def run_inline(self, request: InferRequest, *, on_loop: bool = False) -> bool:
        """Execute the still-queued request on the calling thread; False if it cannot."""
        ...


class InferResponse:
    """One response of a request: outputs or an error, and whether it is the last one."""

    __slots__ = ("model", "model_version", "request_id", "outputs", "parameters", "error",
                 "final")

    def __init__(
        self,
        model: str,
        model_version: int,
        request_id: str = "",
        outputs: dict[str, Tensor] | None = None,
        parameters: dict[str, ParameterValue] | None = None,
        error: TritonError | None = None,
        final: bool = True,
    ) -> None:
        self.model = model
        self.model_version = model_version
        self.request_id = request_id
        self.outputs: dict[str, Tensor] = outputs if outputs is not None else {}
        self.parameters: dict[str, ParameterValue] = parameters if parameters is not None else {}
        self.error = error
        self.final = final

    def __repr__(self) -> str:
        extra = f", error={type(self.error).__name__}" if self.error is not None else ""
        return (
            f"InferResponse(model={self.model!r}, version={self.model_version}, "
            f"final={self.final}{extra})"
        )


class ResponseStream:
    """The responses of one request, as they arrive.

    Iterate it (``for``/``async for``), await it, or call ``result()``: awaiting and
    ``result()`` give the last response (the only one, for a model that is not
    decoupled). With ``raise_on_error`` (the default, as Triton's API) an error response
    raises its typed error instead of being returned. ``cancel()`` cancels the request;
    cancelling the task that awaits or iterates the stream does the same.
    """

    __slots__ = ("_request", "_raise_on_error", "_lock", "_items", "_done", "_waiter",
                 "_future", "_future_thread", "_runner", "_callback", "__weakref__")

    def __init__(
        self,
        request: InferRequest,
        *,
        raise_on_error: bool = True,
        callback: Callable[[InferResponse | None, bool], None] | None = None,
    ) -> None:
        self._request = request
        self._raise_on_error = raise_on_error
        self._lock = _allocate_lock()
        self._items: deque[InferResponse] = deque()
        self._done = False
        self._waiter: Any = None  # a held lock a sync consumer parks on
        self._future: asyncio.Future[None] | None = None
        self._future_thread = 0  # the thread of the loop that awaits ``_future``
        # Set by the model when the first consumer to block may run the queued request
        # itself (taken by that consumer, so it is tried once).
        self._runner: InlineRunner | None = None
        # Callback mode: every response (and the final flag) goes to the callback, on the
        # producer's thread, in order; nothing is queued for iteration.
        self._callback = callback

    # -- producer side (any thread) ----------------------------------------------------
    def _push(self, response: InferResponse | None, final: bool) -> None:
        callback = self._callback
        if callback is not None:
            with self._lock:
                if self._done:
                    return
                if final:
                    self._done = True
            callback(response, final)
            return
        with self._lock:
            if self._done:
                return
            if response is not None:
                self._items.append(response)
            if final:
                self._done = True
            waiter, self._waiter = self._waiter, None
            future, self._future = self._future, None
            consumer_thread = self._future_thread
        if waiter is not None:
            waiter.release()
        if future is not None:
            # The consumer awaits ``future`` on its loop's thread, which runs no other loop
            # meanwhile: produced on that thread is produced on its loop (public and cheaper
            # than asking asyncio for the running loop; benchmarks/asyncio_private.py).
            if _get_ident() == consumer_thread:
                _wake(future)  # produced on the consumer's own loop: no self-pipe write
                return
            try:
                future.get_loop().call_soon_threadsafe(_wake, future)
            except RuntimeError:  # the consumer's loop is closed: nobody is waiting
                pass

    # -- consumer side -----------------------------------------------------------------
    @property
    def request(self) -> InferRequest:
        return self._request

    @property
    def done(self) -> bool:
        """True once the final response has arrived (some may still be unread)."""
        return self._done

    def cancel(self) -> None:
        """Cancel the request: dropped if still queued, flagged if executing. Idempotent."""
        if not self._done:
            self._request.cancel()

    def _take(self, raise_errors: bool = True) -> InferResponse:
        response = self._items.popleft()
        if raise_errors and self._raise_on_error and response.error is not None:
            raise response.error
        return response

    def next_nowait(self) -> InferResponse | None:
        """The next response if one has arrived, else None (does not raise its error)."""
        with self._lock:
            return self._items.popleft() if self._items else None

    def when_ready(self, notify: Callable[[], None]) -> bool:
        """Call ``notify()`` once, on the producer's thread, when the next response or the
        end arrives; False (and no call) if one is there already. For a consumer that is
        neither a blocked thread nor an asyncio task (the gRPC completion-queue thread)."""
        with self._lock:
            if self._items or self._done:
                return False
            self._waiter = _Notify(notify)
        return True

    def __iter__(self) -> Iterator[InferResponse]:
        return self

    def __next__(self) -> InferResponse:
        response = self._next(None)
        if response is None:
            raise StopIteration
        return response

    def next_response(self) -> InferResponse | None:
        """Block for the next response, None at the end; an error response is returned,
        never raised, so its ``final`` flag can be read (BLS iterators need it)."""
        return self._next(None, raise_errors=False)

    def _next(self, deadline: float | None, raise_errors: bool = True
              ) -> InferResponse | None:
        """The next response, None at the end; TimeoutError past ``deadline``."""
        lock = self._lock
        while True:
            with lock:
                if self._items:
                    return self._take(raise_errors)
                if self._done:
                    return None
                runner, self._runner = self._runner, None
            if runner is not None and deadline is None and runner.run_inline(self._request):
                continue  # executed on this thread; its responses are queued
            with lock:
                if self._items:
                    return self._take(raise_errors)
                if self._done:
                    return None
                waiter = _allocate_lock()
                waiter.acquire()
                self._waiter = waiter
            if deadline is None:
                waiter.acquire()
            else:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not waiter.acquire(timeout=remaining):
                    with lock:
                        if self._waiter is waiter:
                            self._waiter = None
                    if not self._items and not self._done:
                        raise TimeoutError("timed out waiting for a response")

    def result(self, timeout: float | None = None) -> InferResponse | None:
        """Block until the final response; return the last response (None if there was none).

        ``timeout`` in seconds raises TimeoutError when it passes; the request goes on
        (call ``cancel()`` to stop it).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        last = None
        while True:
            response = self._next(deadline)
            if response is None:
                return last
            last = response

    def __aiter__(self) -> AsyncIterator[InferResponse]:
        return self

    async def __anext__(self) -> InferResponse:
        while True:
            with self._lock:
                if self._items:
                    return self._take()
                if self._done:
                    raise StopAsyncIteration
                runner, self._runner = self._runner, None
            if runner is not None and runner.run_inline(self._request, on_loop=True):
                continue  # a short execution ran on this loop's thread
            with self._lock:
                if self._items:
                    return self._take()
                if self._done:
                    raise StopAsyncIteration
                future = asyncio.get_running_loop().create_future()
                self._future, self._future_thread = future, _get_ident()
            try:
                await future
            except asyncio.CancelledError:
                with self._lock:
                    if self._future is future:
                        self._future = None  # the loop may close; never wake it later
                self.cancel()
                raise

    async def _last(self) -> InferResponse | None:
        last = None
        async for response in self:
            last = response
        return last

    def __await__(self) -> Generator[Any, None, InferResponse | None]:
        return self._last().__await__()

    def __repr__(self) -> str:
        return f"ResponseStream(model={self._request.model_name!r}, done={self._done})"


class _Notify:
    """Parks a callback where a blocked consumer's lock would be (``_push`` releases it)."""

    __slots__ = ("release",)

    def __init__(self, notify: Callable[[], None]) -> None:
        self.release = notify


_BARE_FINAL = object()  # a held final flag without a response


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _no_clock() -> int:
    return 0  # never called: a sender reads its clock only once it has an observer


class ResponseSender:
    """What a backend answers a request through, from any thread.

    Each ``send`` delivers one response; the one with ``final=True`` closes the sender.
    Outputs the request did not ask for are dropped here, so backends may return all.
    """

    __slots__ = ("_request", "_stream", "_id", "_model", "_version", "_closed", "failed",
                 "_on_close", "_hold", "_held", "_observer", "_now", "_sent", "_last_ns",
                 "_late")

    def __init__(
        self,
        request: InferRequest,
        stream: ResponseStream,
        model: str,
        version: int,
        on_close: Callable[[InferRequest], None] | None = None,
    ) -> None:
        # Both links are dropped (None) once the final response is out (``_finish``).
        # Readers take them into locals once: an unload's ``abort`` on another thread may
        # finish the request meanwhile.
        self._request: InferRequest | None = request
        self._stream: ResponseStream | None = stream
        self._id = request.id
        self._model = model
        self._version = version
        self._closed = False
        self.failed = False  # an error response was sent
        self._on_close = on_close
        # While held, a final response waits in _held until release_held(): the instance
        # records statistics first, so a caller that sees its response also sees its stats.
        self._hold = False
        self._held: Any = None  # InferResponse, _BARE_FINAL or None
        # Decoupled models: per-response statistics (index, infer ns, output ns, kind).
        self._observer: Callable[[int, int, int, str], None] | None = None
        self._now: Callable[[], int] = _no_clock  # the model's clock, with the observer
        self._sent = 0
        self._last_ns = 0
        self._late = False

    def observe_responses(self, observer: Callable[[int, int, int, str], None],
                          clock: Callable[[], int]) -> None:
        """Report every response's index and timing to ``observer`` (decoupled models),
        timed on ``clock`` (the model's: the request's own stamps are on it)."""
        self._now = clock
        self._observer = observer

    def _observe(self, request: InferRequest, kind: str, started_ns: int) -> None:
        now = self._now()
        previous = self._last_ns or request.compute_start_ns or started_ns
        self._observer(self._sent, max(0, started_ns - previous), now - started_ns,  # type: ignore[misc]
                       kind)
        self._sent += 1
        self._last_ns = now

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def late(self) -> bool:
        """True once the backend said it answers after its execution returns."""
        return self._late

    def answer_later(self) -> None:
        """The backend answers this request after its execution returns (a Python model
        that keeps the request's response sender past ``execute``, as Triton allows): the
        instance then leaves it open instead of failing it as unanswered."""
        self._late = True

    def send(
        self,
        outputs: Mapping[str, Tensor] | None = None,
        *,
        parameters: Mapping[str, ParameterValue] | None = None,
        error: TritonError | None = None,
        final: bool = True,
        fails: bool = True,
    ) -> None:
        """Send one response (outputs or error); ``final`` closes the request's stream.

        ``fails=False``: ``error`` is the answer the model itself gave, which does not make
        the request a failure in its statistics (Triton's Python backend counts such a
        request as a success; only its own failures count as failed)."""
        started_ns = self._now() if self._observer is not None else 0
        request, stream = self._request, self._stream
        if self._closed or request is None or stream is None:
            raise self._closed_error()
        if final:
            self._closed = True
        wanted = request.requested_outputs
        if outputs is None:
            chosen: dict[str, Tensor] = {}
        elif wanted is None:
            chosen = dict(outputs)
        else:
            chosen = {name: tensor for name, tensor in outputs.items() if name in wanted}
        if error is not None and fails:
            self.failed = True
        response = InferResponse(
            self._model,
            self._version,
            request.id,
            chosen,
            dict(parameters) if parameters else None,
            error,
            final,
        )
        if final and self._hold:
            self._held = response
            return
        stream._push(response, final)
        if started_ns:
            self._observe(request, "fail" if error is not None else "success", started_ns)
        if final:
            self._finish(request)

    def abort(self, error: TritonError) -> None:
        """End the request with ``error`` now, even if a response is held (unload).

        A backend still holding the request may answer later: the stream ignores it.
        """
        request, stream = self._request, self._stream
        self._closed = True
        self._hold = False
        self._held = None
        if request is None or stream is None:  # finished already: nothing is waiting
            return
        self.failed = True
        stream._push(InferResponse(self._model, self._version, self._id, error=error), True)
        self._finish(request)

    def hold(self) -> None:
        """Keep the final response back until ``release_held`` (set before execution)."""
        self._hold = True

    def release_held(self) -> None:
        """Deliver a held final response, if any, and stop holding."""
        self._hold = False
        response, self._held = self._held, None
        request, stream = self._request, self._stream
        if response is not None and request is not None and stream is not None:
            stream._push(None if response is _BARE_FINAL else response, True)
            self._finish(request)

    def send_error(self, error: TritonError, *, final: bool = True) -> None:
        self.send(error=error, final=final)

    def close(self) -> None:
        """End the stream without a response (decoupled models' bare final flag)."""
        request, stream = self._request, self._stream
        if self._closed or request is None or stream is None:
            raise self._closed_error()
        self._closed = True
        if self._hold:
            self._held = _BARE_FINAL  # release_held() ends the stream
            return
        started_ns = self._now() if self._observer is not None else 0
        stream._push(None, True)
        if started_ns:
            self._observe(request, "cancel" if request.cancelled else "empty", started_ns)
        self._finish(request)

    def _finish(self, request: InferRequest) -> None:
        """The final response is out: tell the model, and unlink. The request, its sender
        and its stream (and a scheduler's cancel hook holding the request) would
        otherwise form reference cycles, left for the garbage collector to find, at a
        cost paid by every request; unlinked, they are freed as soon as the last holder
        lets go."""
        if self._on_close is not None:
            self._on_close(request)
        request.finished()
        self._request = self._stream = None

    def _closed_error(self) -> InternalError:
        return InternalError(
            f"response sender of request '{self._id}' for model '{self._model}' is "
            "closed: the final response was already sent")

    def cancel_if_open(self) -> None:
        """Answer CancelledError unless the final response was already sent."""
        if not self._closed:
            self.send_error(
                CancelledError(f"request for model '{self._model}' was cancelled")
            )
