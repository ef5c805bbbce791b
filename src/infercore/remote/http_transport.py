"""KServe v2 over HTTP/REST, on an aiohttp session (``pip install infercore[remote]``).

- A model that is not decoupled: ``POST .../infer`` with binary tensors
  (``http_codec.py``); cancelling the task closes the connection.
- A decoupled model: Triton's ``POST .../generate_stream``, read as server-sent events.
  A request that fails before it runs is answered with a plain JSON error and its status;
  otherwise each ``data:`` event is one response, an ``{"error": ...}`` event an error
  response (typed from the HTTP status when it is the first event, UnknownError after
  it: the status is sent before later errors exist), and the end of the body is the
  request's final flag.
- Errors: an answer other than 200 carries ``{"error": "..."}``; ``status.py`` types it.
  A server that cannot be reached is UnavailableError.

Threads: created and used on the RemoteServer's loop thread only.
"""

from __future__ import annotations

import ssl as ssl_module
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import orjson
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2

from ..errors import InternalError, TritonError, UnavailableError, UnknownError
from ..kserve.status import error_from_http
from ..request import InferRequest
from ..response import InferResponse
from .http_codec import decode_generate_event, decode_infer, encode_generate, encode_infer
from .transport import ResponseSink
from .wire import ModelInfo

__all__ = ["HttpTransport"]

_JSON = {"Content-Type": "application/json"}


def _aiohttp() -> Any:
    try:
        import aiohttp
    except ImportError:
        raise UnavailableError("RemoteServer over HTTP needs aiohttp: pip install "
                               "'infercore[remote]' (or use protocol='grpc')") from None
    return aiohttp


class HttpTransport:
    """A pool of HTTP/1.1 keep-alive connections to a KServe v2 server."""

    def __init__(self, url: str, *, ssl_context: ssl_module.SSLContext | None = None,
                 headers: Mapping[str, str] | None = None, connections: int = 100,
                 connect_timeout: float = 60.0) -> None:
        aiohttp = _aiohttp()
        self._errors = (aiohttp.ClientError, OSError)
        scheme = "https://" if ssl_context is not None else "http://"
        self._base = scheme + url.rstrip("/")
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=connections,
                                           ssl=ssl_context if ssl_context else False),
            # inference may take any time; only connecting is bounded
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout),
            headers=dict(headers or {}),
        )

    def _url(self, name: str | None = None, version: int = -1, tail: str = "") -> str:
        if name is None:
            return self._base + tail
        path = f"{self._base}/v2/models/{quote(name, safe='')}"
        if version >= 0:
            path += f"/versions/{version}"
        return path + tail

    async def _request(self, method: str, url: str, body: bytes | None = None,
                       headers: Mapping[str, str] | None = None) -> tuple[int, bytes]:
        try:
            async with self._session.request(method, url, data=body, headers=headers
                                             ) as response:
                return response.status, await response.read()
        except self._errors as exc:
            raise UnavailableError(f"cannot reach {self._base}: {exc}") from None

    async def _json(self, method: str, url: str, document: Any = None) -> Any:
        body = None if document is None else orjson.dumps(document)
        status, data = await self._request(method, url, body, _JSON if body else None)
        if status != 200:
            raise _error(status, data)
        return orjson.loads(data) if data else None

    async def _status(self, url: str) -> int:
        return (await self._request("GET", url))[0]

    # -- health and descriptions -----------------------------------------------------------
    async def live(self) -> bool:
        return await self._status(self._base + "/v2/health/live") == 200

    async def ready(self) -> bool:
        return await self._status(self._base + "/v2/health/ready") == 200

    async def server_metadata(self) -> dict[str, Any]:
        document = await self._json("GET", self._base + "/v2")
        return {"name": document.get("name", ""), "version": document.get("version", ""),
                "extensions": list(document.get("extensions") or ())}

    async def model_ready(self, name: str, version: int) -> bool:
        return await self._status(self._url(name, version, "/ready")) == 200

    async def model_metadata(self, name: str, version: int) -> dict[str, Any]:
        document: dict[str, Any] = await self._json("GET", self._url(name, version))
        return document

    async def model_config(self, name: str, version: int) -> dict[str, Any]:
        document: dict[str, Any] = await self._json("GET", self._url(name, version, "/config"))
        return document

    async def model_config_proto(self, name: str, version: int
                                 ) -> model_config_pb2.ModelConfig:
        document = await self.model_config(name, version)
        config = model_config_pb2.ModelConfig()
        try:
            # A newer server may render fields this protobuf does not know yet.
            json_format.ParseDict(document, config, ignore_unknown_fields=True)
        except json_format.ParseError as exc:
            raise InternalError(f"failed to parse the configuration of model '{name}': "
                                f"{str(exc).splitlines()[0]}") from None
        return config

    async def statistics(self, name: str, version: int) -> list[dict[str, Any]]:
        url = self._url(name, version, "/stats") if name else self._base + "/v2/models/stats"
        document = await self._json("GET", url)
        return list(document.get("model_stats") or ())

    # -- repository ------------------------------------------------------------------------
    async def repository_index(self, ready_only: bool) -> list[dict[str, Any]]:
        rows = await self._json("POST", self._base + "/v2/repository/index",
                                {"ready": ready_only})
        return list(rows or ())

    async def load(self, name: str, config: str | None, files: Mapping[str, bytes]) -> None:
        import base64

        parameters: dict[str, Any] = {}
        if config is not None:
            parameters["config"] = config
        for path, content in files.items():
            parameters["file:" + path] = base64.b64encode(content).decode()
        await self._json("POST", f"{self._base}/v2/repository/models/{quote(name, safe='')}"
                         "/load", {"parameters": parameters} if parameters else {})

    async def unload(self, name: str, unload_dependents: bool) -> None:
        await self._json("POST", f"{self._base}/v2/repository/models/{quote(name, safe='')}"
                         "/unload", {"parameters": {"unload_dependents": unload_dependents}})

    # -- log and trace settings ------------------------------------------------------------
    async def log_settings(self, changes: Mapping[str, bool | int | str]) -> dict[str, Any]:
        url = self._base + "/v2/logging"
        if not changes:
            return dict(await self._json("GET", url))
        return dict(await self._json("POST", url, dict(changes)))

    async def trace_settings(self, model: str, changes: Mapping[str, list[str] | None]
                             ) -> dict[str, Any]:
        url = (self._url(model, -1, "/trace/setting") if model
               else self._base + "/v2/trace/setting")
        if not changes:
            return dict(await self._json("GET", url))
        # Triton's JSON: a list for trace_level, one string for the others, null to clear
        document = {key: values if values is None or key == "trace_level" else values[-1]
                    for key, values in changes.items()}
        return dict(await self._json("POST", url, document))

    # -- inference -------------------------------------------------------------------------
    async def infer(self, request: InferRequest, info: ModelInfo, sink: ResponseSink) -> None:
        if info.decoupled:
            await self._generate_stream(request, info, sink)
            return
        body, header_length = encode_infer(request)
        headers = ({"Inference-Header-Content-Length": str(header_length)}
                   if header_length is not None else _JSON)
        url = self._url(request.model_name, request.model_version, "/infer")
        try:
            async with self._session.post(url, data=body, headers=headers) as response:
                data = await response.read()
                if response.status != 200:
                    raise _error(response.status, data)
                length = response.headers.get("Inference-Header-Content-Length")
        except self._errors as exc:
            raise UnavailableError(f"cannot reach {self._base}: {exc}") from None
        sink.send(decode_infer(data, int(length) if length is not None else None))

    async def _generate_stream(self, request: InferRequest, info: ModelInfo,
                               sink: ResponseSink) -> None:
        body = encode_generate(request, info)
        url = self._url(request.model_name, request.model_version, "/generate_stream")
        try:
            async with self._session.post(url, data=body, headers=_JSON) as response:
                if not response.content_type.startswith("text/event-stream"):
                    data = await response.read()  # refused before it ran: a JSON error
                    raise _error(response.status, data)
                first = True
                async for line in response.content:
                    if not line.startswith(b"data:"):
                        continue  # the blank line ending an event, or a comment
                    sink.send(self._event(line[5:], response.status if first else 200,
                                          request, info))
                    first = False
        except self._errors as exc:
            raise UnavailableError(f"cannot reach {self._base}: {exc}") from None
        sink.close()

    @staticmethod
    def _event(data: bytes, status: int, request: InferRequest, info: ModelInfo
               ) -> InferResponse:
        try:
            document = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise InternalError(f"failed to parse a generate_stream event: {exc}") from None
        if "error" in document:
            message = str(document["error"])
            error = error_from_http(status, message) if status != 200 else UnknownError(message)
            return InferResponse(request.model_name, request.model_version, request.id,
                                 error=error, final=False)
        return decode_generate_event(document, info)

    async def close(self) -> None:
        await self._session.close()


def _error(status: int, data: bytes) -> TritonError:
    try:
        message = str(orjson.loads(data)["error"])
    except (orjson.JSONDecodeError, KeyError, TypeError):
        message = data.decode("utf-8", "replace") or f"HTTP status {status}"
    return error_from_http(status, message)
