"""``with`` and ``async with`` for objects that start and stop: Server and RemoteServer."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import TypeVar

__all__ = ["StartStop"]

_Self = TypeVar("_Self", bound="StartStop")


class StartStop:
    """Context-manager methods over ``start()`` / ``astart()`` and ``stop()``; ``astop`` runs
    ``stop`` on a worker thread, since it blocks (draining requests)."""

    def start(self: _Self) -> _Self:
        raise NotImplementedError

    async def astart(self: _Self) -> _Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    async def astop(self) -> None:
        await asyncio.to_thread(self.stop)

    def __enter__(self: _Self) -> _Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    async def __aenter__(self: _Self) -> _Self:
        return await self.astart()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.astop()
