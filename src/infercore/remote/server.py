"""RemoteServer: a KServe v2 server (infercore or Triton) behind the in-process API.

``RemoteServer(url, protocol="grpc" | "http")`` has the surface of ``Server`` for what a
network allows: health, metadata, ``model()`` handles with ``infer``/``async_infer``
(responses on the same ``ResponseStream``), streaming for decoupled models,
cancellation, model configuration and statistics, the repository index, load and
unload, with errors typed as ``infercore.errors``. Every blocking call has an a-prefixed
async twin.

Threads: callers use it from any thread or event loop. The transport runs on one event
loop on a thread the server owns (``loop_thread.py``), started on first use; requests cross to
it with ``call_soon_threadsafe`` and their responses come back through the
ResponseStream, the engine's one thread<->asyncio bridge. ``_infos``,
``_pending_infos``, ``_tasks`` and ``_closing`` are touched on the loop's thread only;
``_lock`` guards ``_state`` and the transport's creation.

States: created -> started (on ``start()`` or first use) -> stopped.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl as ssl_module
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from ..caller import Caller
from ..errors import (
    CancelledError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    TritonError,
    UnavailableError,
    UnsupportedError,
)
from ..lifecycle import StartStop
from ..loop_thread import LoopThread
from ..repository.states import ModelIndexEntry, ModelState
from ..request import InferRequest
from ..response import InferResponse, ResponseStream
from ..stats import ModelStatistics
from .convert import index_entry_from_json, statistics_from_json
from .handles import RemoteHandleEngine
from .model import RemoteModel
from .transport import ResponseSink, Transport
from .wire import ModelInfo, convert_inputs

__all__ = ["RemoteServer"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
_PROTOCOLS = ("grpc", "http")
_SCHEMES = {"http": ("http", False), "https": ("http", True), "grpc": ("grpc", False),
            "grpcs": ("grpc", True)}
# Errors after which a model's cached facts may be stale (reloaded, removed, decoupled
# now): the next request reads its configuration again.
_STALE = (NotFoundError, UnsupportedError, UnavailableError, InvalidArgumentError)
_READY_POLL_SECONDS = 0.1


class _Call:
    """One request on its way: what the loop needs to start, cancel and answer it."""

    __slots__ = ("request", "sink", "pending", "task")

    def __init__(self, request: InferRequest, sink: ResponseSink, pending: dict[str, Any]
                 ) -> None:
        self.request = request
        self.sink = sink
        self.pending = pending
        self.task: asyncio.Task[None] | None = None


class RemoteServer(RemoteHandleEngine, StartStop):
    """A remote inference server with the in-process ``Server``'s API.

    ``url`` is ``host:port``, optionally with a scheme (``http://``, ``https://``,
    ``grpc://``, ``grpcs://``) that also chooses the protocol. ``headers`` go with every
    call. TLS: ``ssl=True`` with optional PEM files (``root_certificates``, and
    ``private_key`` with ``certificate_chain`` for a client certificate).
    """

    def __init__(
        self,
        url: str,
        protocol: str | None = None,
        *,
        ssl: bool = False,
        root_certificates: str | None = None,
        private_key: str | None = None,
        certificate_chain: str | None = None,
        headers: Mapping[str, str] | None = None,
        exit_timeout: float = 30.0,
    ) -> None:
        address, scheme_protocol, scheme_ssl = _split_url(url)
        if protocol is None:
            protocol = scheme_protocol or "grpc"
        protocol = str(protocol).lower()
        if protocol not in _PROTOCOLS:
            raise InvalidArgumentError(
                f"unknown protocol '{protocol}': RemoteServer speaks 'grpc' or 'http'")
        if scheme_protocol is not None and scheme_protocol != protocol:
            raise InvalidArgumentError(
                f"the url '{url}' names another protocol than '{protocol}'")
        if not address:
            raise InvalidArgumentError(f"invalid url '{url}': expected host:port")
        self.url = address
        self.protocol = protocol
        self._ssl = ssl or scheme_ssl
        self._root_certificates = root_certificates
        self._private_key = private_key
        self._certificate_chain = certificate_chain
        self._headers = dict(headers or {})
        self._exit_timeout = float(exit_timeout)
        self._loop = LoopThread("infercore-remote", owner="RemoteServer")
        self._lock = threading.Lock()
        self._state = "created"
        self._transport: Transport | None = None
        self._infos: dict[tuple[str, int], ModelInfo] = {}
        self._pending_infos: dict[tuple[str, int], asyncio.Future[ModelInfo]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False

    def __repr__(self) -> str:
        return f"RemoteServer(url={self.url!r}, protocol={self.protocol!r}, {self._state})"

    # -- lifecycle -------------------------------------------------------------------------
    def start(self, *, wait_until_ready: bool = False, timeout: float = 30.0) -> RemoteServer:
        """Open the connection (done on first use otherwise). ``wait_until_ready`` waits up
        to ``timeout`` seconds for the server to answer ready, then raises UnavailableError.
        """
        self._ensure_started()
        if wait_until_ready:
            self._loop.call(self._wait_ready(timeout))
        return self

    async def astart(self, *, wait_until_ready: bool = False, timeout: float = 30.0
                     ) -> RemoteServer:
        await asyncio.to_thread(self._ensure_started)
        if wait_until_ready:
            await self._loop.acall(self._wait_ready(timeout))
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Let in-flight requests finish within ``timeout`` seconds (default
        ``exit_timeout``), cancel the rest, close the connection. Idempotent."""
        if self._loop.on_loop_thread():
            raise InternalError("a RemoteServer cannot be stopped from its own event loop "
                                "(a response callback); stop it from another thread")
        with self._lock:
            if self._state == "stopped":
                return
            self._state = "stopped"
        wait = self._exit_timeout if timeout is None else max(0.0, timeout)
        self._loop.stop(self._shutdown(wait))

    close = stop

    def _ensure_started(self) -> None:
        if self._state == "started":
            return
        with self._lock:
            if self._state == "stopped":
                raise UnavailableError("the RemoteServer is stopped")
            if self._state == "started":
                return
            self._loop.start()
            try:
                self._transport = self._loop.call(self._open())
            except BaseException:
                self._loop.stop()
                self._state = "stopped"
                raise
            self._state = "started"

    async def _open(self) -> Transport:
        """The transport, built on the loop (grpc.aio and aiohttp bind to it)."""
        if self.protocol == "grpc":
            from .grpc_transport import GrpcTransport

            return GrpcTransport(self.url, credentials=self._grpc_credentials(),
                                 headers=self._headers)
        from .http_transport import HttpTransport

        return HttpTransport(self.url, ssl_context=self._ssl_context(), headers=self._headers)

    def _grpc_credentials(self) -> Any:
        if not self._ssl:
            return None
        import grpc

        def read(path: str | None) -> bytes | None:
            if path is None:
                return None
            with open(path, "rb") as file:
                return file.read()

        return grpc.ssl_channel_credentials(read(self._root_certificates),
                                            read(self._private_key),
                                            read(self._certificate_chain))

    def _ssl_context(self) -> ssl_module.SSLContext | None:
        if not self._ssl:
            return None
        context = ssl_module.create_default_context(cafile=self._root_certificates)
        if self._certificate_chain is not None:
            context.load_cert_chain(self._certificate_chain, self._private_key)
        return context

    async def _wait_ready(self, timeout: float) -> None:
        # A remote process: nothing to wait on but its answers, polled to a deadline.
        deadline = time.monotonic() + timeout
        last = "not ready"
        while True:
            try:
                if await self._live_transport().ready():
                    return
            except TritonError as exc:
                last = exc.message
            if time.monotonic() >= deadline:
                raise UnavailableError(f"{self.url} is not ready after {timeout:g} s: {last}")
            await asyncio.sleep(_READY_POLL_SECONDS)

    async def _shutdown(self, timeout: float) -> None:
        self._closing = True
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if self._transport is not None:
            await self._transport.close()

    def _live_transport(self) -> Transport:
        transport = self._transport
        if transport is None or self._state != "started":
            raise UnavailableError("the RemoteServer is stopped")
        return transport

    def _open_transport(self) -> Transport:
        """The transport for work already admitted: open until the shutdown closes it."""
        if self._transport is None:
            raise UnavailableError("the RemoteServer is stopped")
        return self._transport

    # -- calls on the loop -------------------------------------------------------------------
    def _call(self, make: Callable[[Transport], Coroutine[Any, Any, T]]) -> T:
        """Run ``make(transport)`` on the loop, blocking for its result."""
        self._ensure_started()
        return self._loop.call(make(self._live_transport()))

    async def _acall(self, make: Callable[[Transport], Coroutine[Any, Any, T]]) -> T:
        if self._state != "started":
            await asyncio.to_thread(self._ensure_started)
        return await self._loop.acall(make(self._live_transport()))

    # -- health and descriptions -----------------------------------------------------------
    def _probe(self, make: Callable[[Transport], Coroutine[Any, Any, bool]]) -> bool:
        """A health answer; False when the server cannot be reached."""
        try:
            return self._call(make)
        except UnavailableError:
            return False

    async def _aprobe(self, make: Callable[[Transport], Coroutine[Any, Any, bool]]) -> bool:
        try:
            return await self._acall(make)
        except UnavailableError:
            return False

    def live(self) -> bool:
        """Whether the server answers live; False when it cannot be reached."""
        return self._probe(lambda t: t.live())

    async def alive(self) -> bool:
        return await self._aprobe(lambda t: t.live())

    def ready(self) -> bool:
        """Whether the server answers ready; False when it cannot be reached."""
        return self._probe(lambda t: t.ready())

    async def aready(self) -> bool:
        return await self._aprobe(lambda t: t.ready())

    def metadata(self) -> dict[str, Any]:
        """The server's name, version and extensions."""
        return self._call(lambda t: t.server_metadata())

    async def ametadata(self) -> dict[str, Any]:
        return await self._acall(lambda t: t.server_metadata())

    def model(self, name: str, version: int = -1) -> RemoteModel:
        """A handle on a model; ``version`` -1 means the latest ready version."""
        return RemoteModel(self, name, int(version))

    def models(self, exclude_not_ready: bool = False) -> dict[tuple[str, int], RemoteModel]:
        """Handles of every model version the server knows, keyed by (name, version)."""
        return self._handles(self.repository_index(), exclude_not_ready)

    async def amodels(self, exclude_not_ready: bool = False
                      ) -> dict[tuple[str, int], RemoteModel]:
        return self._handles(await self.arepository_index(), exclude_not_ready)

    def _handles(self, entries: list[ModelIndexEntry], exclude_not_ready: bool
                 ) -> dict[tuple[str, int], RemoteModel]:
        found: dict[tuple[str, int], RemoteModel] = {}
        for entry in entries:
            if exclude_not_ready and entry.state is not ModelState.READY:
                continue
            version = int(entry.version) if entry.version else -1
            found[(entry.name, version)] = RemoteModel(self, entry.name, version)
        return found

    def repository_index(self, ready_only: bool = False) -> list[ModelIndexEntry]:
        """Every model and version found, with its state and the reason for that state."""
        rows = self._call(lambda t: t.repository_index(ready_only))
        return [index_entry_from_json(row) for row in rows]

    async def arepository_index(self, ready_only: bool = False) -> list[ModelIndexEntry]:
        rows = await self._acall(lambda t: t.repository_index(ready_only))
        return [index_entry_from_json(row) for row in rows]

    def statistics(self, name: str = "", version: int = -1) -> list[ModelStatistics]:
        """Statistics of one model's versions, or of every model when name is ""."""
        rows = self._call(lambda t: t.statistics(name, version))
        return _sorted_statistics(rows)

    async def astatistics(self, name: str = "", version: int = -1) -> list[ModelStatistics]:
        return _sorted_statistics(await self._acall(lambda t: t.statistics(name, version)))

    # -- model control ---------------------------------------------------------------------
    def load(
        self,
        name: str,
        config: str | Mapping[str, Any] | None = None,
        files: Mapping[str, bytes] | None = None,
        *,
        parameters: Mapping[str, Any] | None = None,
    ) -> RemoteModel:
        """Load (or reload) a model, as ``Server.load``; the server must be in EXPLICIT
        model control mode. Raises the load error."""
        config_json, file_map = _load_arguments(name, config, files, parameters)
        self._call(lambda t: self._changed(t.load(name, config_json, file_map)))
        return RemoteModel(self, name)

    async def aload(
        self,
        name: str,
        config: str | Mapping[str, Any] | None = None,
        files: Mapping[str, bytes] | None = None,
        *,
        parameters: Mapping[str, Any] | None = None,
    ) -> RemoteModel:
        config_json, file_map = _load_arguments(name, config, files, parameters)
        await self._acall(lambda t: self._changed(t.load(name, config_json, file_map)))
        return RemoteModel(self, name)

    def unload(self, name: str, *, unload_dependents: bool = False) -> None:
        """Unload a model (EXPLICIT model control mode), as ``Server.unload``."""
        self._call(lambda t: self._changed(t.unload(name, unload_dependents)))

    async def aunload(self, name: str, *, unload_dependents: bool = False) -> None:
        await self._acall(lambda t: self._changed(t.unload(name, unload_dependents)))

    async def _changed(self, change: Coroutine[Any, Any, None]) -> None:
        """Apply a repository change; every cached model fact may be stale after it."""
        try:
            await change
        finally:
            self._infos.clear()

    # -- log and trace settings (Triton's logging and trace extensions) ----------------------
    def log_settings(self) -> dict[str, Any]:
        """The server's logging settings (log_file, log_info, ..., log_format)."""
        return self._call(lambda t: t.log_settings({}))

    async def alog_settings(self) -> dict[str, Any]:
        return await self._acall(lambda t: t.log_settings({}))

    def update_log_settings(self, **changes: Any) -> dict[str, Any]:
        """Change the server's logging with Triton's setting names; the new settings.
        A server refuses ``log_file`` over the network (UnsupportedError)."""
        checked = _log_changes(changes)
        return self._call(lambda t: t.log_settings(checked))

    async def aupdate_log_settings(self, **changes: Any) -> dict[str, Any]:
        checked = _log_changes(changes)
        return await self._acall(lambda t: t.log_settings(checked))

    def trace_settings(self, model: str = "") -> dict[str, Any]:
        """Trace settings in force for ``model`` (global ones for "")."""
        return self._call(lambda t: t.trace_settings(model, {}))

    async def atrace_settings(self, model: str = "") -> dict[str, Any]:
        return await self._acall(lambda t: t.trace_settings(model, {}))

    def update_trace_settings(self, model: str = "", **changes: Any) -> dict[str, Any]:
        """Change trace settings, globally or for one model (None clears an override);
        the settings in force after. A server refuses ``trace_file`` over the network."""
        checked = _trace_changes(changes)
        return self._call(lambda t: t.trace_settings(model, checked))

    async def aupdate_trace_settings(self, model: str = "", **changes: Any) -> dict[str, Any]:
        checked = _trace_changes(changes)
        return await self._acall(lambda t: t.trace_settings(model, checked))

    # -- inference -------------------------------------------------------------------------
    def infer(
        self,
        request: InferRequest,
        *,
        raise_on_error: bool = True,
        callback: Callable[[InferResponse | None, bool], None] | None = None,
        caller: Caller | None = None,
    ) -> ResponseStream:
        """Send a request built by the caller; see ``RemoteModel.infer``.

        As ``Server.infer``: with ``callback``, each response is passed to
        ``callback(response, final)`` instead of being queued on the stream; here it runs
        on the RemoteServer's loop thread, and must not block. ``caller`` is for the
        in-process engine (where the request may run) and changes nothing remotely.
        """
        return self._submit(request, raise_on_error, {}, callback)

    def _submit(self, request: InferRequest, raise_on_error: bool, pending: dict[str, Any],
                callback: Callable[[InferResponse | None, bool], None] | None = None
                ) -> ResponseStream:
        self._ensure_started()
        stream = ResponseStream(request, raise_on_error=raise_on_error, callback=callback)
        call = _Call(request, ResponseSink(stream), pending)
        try:
            self._loop.call_soon(self._start_call, call)
        except RuntimeError:  # the loop closed between the check and now
            raise UnavailableError("the RemoteServer is stopped") from None
        # Registered after the start is queued: both run on the loop, in order, so a
        # cancel finds the task or the start finds the flag.
        request.on_cancel(lambda: self._cancel_soon(call))
        return stream

    def _cancel_soon(self, call: _Call) -> None:
        try:
            self._loop.call_soon(_cancel_call, call)
        except (RuntimeError, UnavailableError):
            pass  # stopped: the shutdown ended every request

    def _start_call(self, call: _Call) -> None:
        request = call.request
        if request.cancelled:
            call.sink.fail(_cancelled(request))
            return
        if self._closing:
            call.sink.fail(UnavailableError("the RemoteServer is stopping"))
            return
        task = asyncio.get_running_loop().create_task(self._run(call))
        call.task = task
        self._tasks.add(task)
        task.add_done_callback(lambda done: self._ended(call, done))

    def _ended(self, call: _Call, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not call.sink.done:
            # Cancelled before its first step (its body never ran), or a path that did
            # not answer: the stream still ends.
            call.sink.fail(_cancelled(call.request) if task.cancelled() else InternalError(
                f"request for model '{call.request.model_name}' ended without an answer"))

    async def _run(self, call: _Call) -> None:
        request, sink = call.request, call.sink
        try:
            info = self._infos.get((request.model_name, request.model_version))
            if info is None:
                info = await self._info(request.model_name, request.model_version)
            if call.pending:
                request.inputs.update(convert_inputs(call.pending, info))
            await self._open_transport().infer(request, info, sink)
        except asyncio.CancelledError:
            sink.fail(_cancelled(request))  # the task is ours: it ends here
        except TritonError as exc:
            if isinstance(exc, _STALE):
                self._forget(request.model_name)
            sink.fail(exc)
        except Exception as exc:  # noqa: BLE001 - every request gets an answer
            logger.exception("remote inference on model '%s' failed", request.model_name)
            sink.fail(InternalError(f"{type(exc).__name__}: {exc}"))

    # -- model facts (loop thread) -----------------------------------------------------------
    def _model_info(self, name: str, version: int) -> ModelInfo:
        return self._call(lambda t: self._info(name, version))

    async def _info(self, name: str, version: int) -> ModelInfo:
        key = (name, version)
        info = self._infos.get(key)
        if info is not None:
            return info
        pending = self._pending_infos.get(key)
        if pending is None:
            # Requests arriving together share one read of the configuration.
            pending = asyncio.ensure_future(self._fetch_info(key))
            self._pending_infos[key] = pending
        return await asyncio.shield(pending)

    async def _fetch_info(self, key: tuple[str, int]) -> ModelInfo:
        try:
            config = await self._open_transport().model_config_proto(*key)
            info = ModelInfo.from_config(config)
            self._infos[key] = info
            return info
        finally:
            del self._pending_infos[key]

    def _forget(self, name: str) -> None:
        for key in [key for key in self._infos if key[0] == name]:
            del self._infos[key]


def _cancel_call(call: _Call) -> None:
    if call.task is not None:
        call.task.cancel()
    # not started yet: _start_call sees the request's cancel flag


def _cancelled(request: InferRequest) -> CancelledError:
    return CancelledError(f"request for model '{request.model_name}' was cancelled")


def _sorted_statistics(rows: list[dict[str, Any]]) -> list[ModelStatistics]:
    return sorted((statistics_from_json(row) for row in rows), key=lambda s: (s.name, s.version))


def _split_url(url: str) -> tuple[str, str | None, bool]:
    """(host:port, the protocol its scheme names or None, whether the scheme is TLS)."""
    if "://" not in url:
        return url.rstrip("/"), None, False
    scheme, address = url.split("://", 1)
    try:
        protocol, tls = _SCHEMES[scheme.lower()]
    except KeyError:
        raise InvalidArgumentError(
            f"invalid url '{url}': the scheme must be http, https, grpc or grpcs") from None
    return address.rstrip("/"), protocol, tls


def _log_changes(changes: Mapping[str, Any]) -> dict[str, bool | int | str]:
    """Log setting changes as the protocol carries them: booleans, numbers, strings."""
    for key, value in changes.items():
        if not isinstance(value, (bool, int, str)):
            raise InvalidArgumentError(
                f"log setting '{key}' must be a boolean, a number or a string, got "
                f"{type(value).__name__}")
    return dict(changes)


def _trace_changes(changes: Mapping[str, Any]) -> dict[str, list[str] | None]:
    """Trace setting changes as the protocol carries them: strings (numbers as the
    in-process API takes them, written out), a list for trace_level, None to clear."""
    checked: dict[str, list[str] | None] = {}
    for key, value in changes.items():
        if value is None:
            checked[key] = None
        elif isinstance(value, (list, tuple)):
            checked[key] = [str(item) for item in value]
        elif isinstance(value, (int, str)) and not isinstance(value, bool):
            checked[key] = [str(value)]
        else:
            raise InvalidArgumentError(
                f"trace setting '{key}' must be a string, a number or a list of strings, "
                f"got {type(value).__name__}")
    return checked


def _load_arguments(name: str, config: str | Mapping[str, Any] | None,
                    files: Mapping[str, bytes] | None, parameters: Mapping[str, Any] | None
                    ) -> tuple[str | None, dict[str, bytes]]:
    """``Server.load``'s arguments as Triton's load request: config JSON and files."""
    if isinstance(config, Mapping) and parameters is None and any(
            key == "config" or key.startswith("file:") for key in config):
        config, parameters = None, config  # tritonserver's load(name, parameters)
    file_map = {key.removeprefix("file:"): bytes(value) for key, value in (files or {}).items()}
    for key, value in (parameters or {}).items():
        if key == "config":
            config = value
        elif key.startswith("file:"):
            file_map[key.removeprefix("file:")] = bytes(value)
        else:
            raise InvalidArgumentError(f"unknown load parameter '{key}' for model '{name}'")
    if file_map and config is None:
        raise InvalidArgumentError(
            f"loading model '{name}' from files needs its config as well")
    if isinstance(config, Mapping):
        config = json.dumps(dict(config))
    return config, file_map
