"""Who calls ``infer``, as the caller says it: the engine never guesses (dispatch.py).

    Caller.THREAD   a thread that blocks on the response stream right away: it may execute
                    the request itself on an idle instance, so no thread is woken for it
    Caller.LOOP     an event loop's thread, or a thread serving many clients without one
                    (the gRPC completion-queue thread, a frontend's large-request thread),
                    that reads the stream right away and must never be stalled: it may
                    execute only a model whose recent executions were short
    None            the caller said nothing (the in-process API's ``Model.infer``): the
                    request is queued; a reader that blocks on it later may still run it

A frontend's own event loop is attached (``Server.attach_loop``) for as long as it
serves, and passes its attachment, a ``Caller.LOOP`` that may also start payloads of
backends that run them from an event loop (process-isolated Python instances).

A value: no state, no imports of the engine (``RemoteServer.infer`` takes it too, and
ignores it: a remote server decides for itself).
"""

from __future__ import annotations

from typing import ClassVar

__all__ = ["Caller"]


class Caller:
    """What kind of thread calls ``infer`` and reads its stream (see the module doc)."""

    __slots__ = ("name", "on_loop")

    THREAD: ClassVar[Caller]
    LOOP: ClassVar[Caller]

    def __init__(self, name: str, *, on_loop: bool) -> None:
        self.name = name
        self.on_loop = on_loop  # must never wait for a long execution

    def __repr__(self) -> str:
        return f"Caller.{self.name}"


Caller.THREAD = Caller("THREAD", on_loop=False)
Caller.LOOP = Caller("LOOP", on_loop=True)
