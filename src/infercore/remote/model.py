"""RemoteModel: the name a RemoteServer's model handles carry; the class is ``Model``.

``infercore.Model`` is one handle for both servers, over the seam ``handle.ModelEngine``
that ``RemoteServer`` implements (remote/server.py). This subclass adds no behaviour: it
keeps ``RemoteModel`` the type of a remote handle, so ``isinstance(handle, RemoteModel)``
tells a remote handle from an in-process one and its repr says which it is, while
``isinstance(handle, Model)`` holds for both.
"""

from __future__ import annotations

from ..handle import Model

__all__ = ["RemoteModel"]


class RemoteModel(Model):
    """One model of a RemoteServer; get it with ``server.model(name, version)``.

    The methods are ``Model``'s. Each blocking one has an a-prefixed async twin, since
    every call here crosses a network. Errors of a request (an unknown model, invalid
    inputs) arrive on its stream; per-request traces, request objects and ``labels`` are
    in-process only (UnsupportedError).
    """

    __slots__ = ()
