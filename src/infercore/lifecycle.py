"""Lifecycle of the two servers (``with``, ``async with``) and ``ServerAPI``, the surface
``Server`` (in process) and ``RemoteServer`` (over KServe v2) both offer.

``ServerAPI`` names every method the two share; each one that may block has an
a-prefixed async twin with the same parameters (``start``/``astart``, ``load``/``aload``,
...), on both servers: remotely every call crosses a network, in process the twins of
calls that block (start, stop, load, unload) run them on a worker thread and the others
answer at once. ``model()`` and ``infer()`` never block and have no twin. Model handles
are one class, ``handle.Model``. tests/api_shared/test_one_api.py checks the sets and the
signatures.

What only one server has, and why, is ``SERVER_ONLY`` and ``REMOTE_ONLY`` below.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from .caller import Caller
    from .handle import Model
    from .repository.states import ModelIndexEntry
    from .request import InferRequest
    from .response import InferResponse, ResponseStream
    from .stats import ModelStatistics

__all__ = ["REMOTE_ONLY", "SERVER_ONLY", "ServerAPI", "StartStop"]

_Self = TypeVar("_Self", bound="StartStop")


class StartStop:
    """Context-manager methods over ``start()`` / ``astart()`` and ``stop()``; ``astop`` runs
    ``stop`` on a worker thread, since it blocks (draining requests)."""

    def start(self: _Self) -> _Self:
        raise NotImplementedError

    async def astart(self: _Self) -> _Self:
        raise NotImplementedError

    def stop(self, timeout: float | None = None) -> None:
        raise NotImplementedError

    async def astop(self, timeout: float | None = None) -> None:
        await asyncio.to_thread(self.stop, timeout)

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


# Public names of Server that RemoteServer lacks: name -> why.
SERVER_ONLY: Mapping[str, str] = MappingProxyType({
    "options": "the engine's configuration; a remote server was configured by whoever "
               "started it",
    "exit_timeout": "the drain deadline of this process's engine; KServe has no call to "
                    "read or set another server's (a RemoteServer's exit_timeout argument "
                    "bounds its own stop)",
    "set_exit_timeout": "as exit_timeout",
    "register_model_repository": "Triton offers repository registration in its C API "
                                 "only, no HTTP or gRPC endpoint",
    "unregister_model_repository": "as register_model_repository",
    "poll_model_repository": "Triton's C API only (TRITONSERVER_ServerPollModelRepository)",
    "metrics": "served on the metrics port in Prometheus text, not over the KServe "
               "protocol a RemoteServer speaks",
    "log": "writes to this process's log (TRITONSERVER_LogMessage)",
    "log_enabled": "asks this process's log settings at no cost, per message",
    "serve_http": "puts this process's engine on the network",
    "serve_grpc": "as serve_http",
    "serve_metrics": "as serve_http",
    "attach_loop": "a frontend's event loop in this process, on which the engine may start "
                   "payloads (dispatch.py); nothing to attach across a network",
    "detach_loop": "as attach_loop",
    "tracer": "this process's tracing, which the frontends in it add their timestamps to "
              "(frontends/trace_stamps.py); a remote server's traces are its own",
    "started_up": "the startup probe of this process's engine (/v2/health/startup); KServe "
                  "has no such call for a RemoteServer to make",
    "initialization_failure": "why this process's start left it neither live nor ready; "
                              "over the network a client sees only 'Server not ready'",
    "model_table_index": "the start-up model table this process logs (models the index "
                         "leaves out included); KServe's index is repository_index",
})

# Public names of RemoteServer that Server lacks: name -> why.
REMOTE_ONLY: Mapping[str, str] = MappingProxyType({
    "url": "where the remote server is",
    "protocol": "'grpc' or 'http', the wire it is reached over",
    "close": "tritonclient's name for stop()",
})


@runtime_checkable
class ServerAPI(Protocol):
    """What ``Server`` and ``RemoteServer`` both offer, with the same parameters.

    A server may add keyword-only parameters with defaults (RemoteServer.start's
    ``timeout``); the test names each one. Errors are ``infercore.errors`` on both.
    """

    # -- lifecycle (and StartStop's ``with`` / ``async with``) ------------------------------
    def start(self, *, wait_until_ready: bool = False) -> ServerAPI: ...

    async def astart(self, *, wait_until_ready: bool = False) -> ServerAPI: ...

    def stop(self, timeout: float | None = None) -> None: ...

    async def astop(self, timeout: float | None = None) -> None: ...

    # -- health and descriptions -------------------------------------------------------------
    def live(self) -> bool: ...

    async def alive(self) -> bool: ...

    def ready(self) -> bool: ...

    async def aready(self) -> bool: ...

    def metadata(self) -> dict[str, Any]: ...

    async def ametadata(self) -> dict[str, Any]: ...

    def model(self, name: str, version: int = -1) -> Model: ...

    def models(self, exclude_not_ready: bool = False) -> Mapping[tuple[str, int], Model]: ...

    async def amodels(self, exclude_not_ready: bool = False
                      ) -> Mapping[tuple[str, int], Model]: ...

    def repository_index(self, ready_only: bool = False) -> list[ModelIndexEntry]: ...

    async def arepository_index(self, ready_only: bool = False) -> list[ModelIndexEntry]: ...

    def statistics(self, name: str = "", version: int = -1) -> list[ModelStatistics]: ...

    async def astatistics(self, name: str = "", version: int = -1
                          ) -> list[ModelStatistics]: ...

    # -- model control -------------------------------------------------------------------------
    def load(self, name: str, config: str | Mapping[str, Any] | None = None,
             files: Mapping[str, bytes] | None = None, *,
             parameters: Mapping[str, Any] | None = None) -> Model: ...

    async def aload(self, name: str, config: str | Mapping[str, Any] | None = None,
                    files: Mapping[str, bytes] | None = None, *,
                    parameters: Mapping[str, Any] | None = None) -> Model: ...

    def unload(self, name: str, *, unload_dependents: bool = False) -> None: ...

    async def aunload(self, name: str, *, unload_dependents: bool = False) -> None: ...

    # -- inference -----------------------------------------------------------------------------
    def infer(self, request: InferRequest, *, raise_on_error: bool = True,
              callback: Callable[[InferResponse | None, bool], None] | None = None,
              caller: Caller | None = None) -> ResponseStream: ...

    # -- log and trace settings (Triton's logging and trace extensions) ----------------------
    def log_settings(self) -> dict[str, Any]: ...

    async def alog_settings(self) -> dict[str, Any]: ...

    def update_log_settings(self, **changes: Any) -> dict[str, Any]: ...

    async def aupdate_log_settings(self, **changes: Any) -> dict[str, Any]: ...

    def trace_settings(self, model: str = "") -> dict[str, Any]: ...

    async def atrace_settings(self, model: str = "") -> dict[str, Any]: ...

    def update_trace_settings(self, model: str = "", **changes: Any) -> dict[str, Any]: ...

    async def aupdate_trace_settings(self, model: str = "", **changes: Any
                                     ) -> dict[str, Any]: ...
