"""HTTP request and response values of the HTTP frontend, and the bytes they travel as.

``HttpRequest`` is what the connection protocol hands the router once a message is
complete; ``HttpResponse`` is what the router answers. Both are plain values: they are
built and consumed on the frontend's event-loop thread only. Status lines and the
headers every response carries are pre-built bytes, so answering costs a few
concatenations, never a formatting pass over a header dict.

A response whose body is produced while it is sent (the generate extension's server-sent
events) carries an async iterator of body pieces in ``stream``; the connection writes it
with chunked transfer encoding (``chunk`` frames one piece).

Compression follows Triton's frontend: ``Content-Encoding`` gzip or deflate (zlib
format) on inference requests, the best of gzip / deflate / identity in ``Accept-Encoding`` on
inference responses; any other content encoding is answered 501 "Unsupported
compression type".
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import orjson

from ...errors import InvalidArgumentError, TritonError, UnsupportedError
from ...kserve.status import http_status

if TYPE_CHECKING:
    from ...observability.trace_record import Trace

__all__ = [
    "HttpRequest",
    "HttpResponse",
    "LAST_CHUNK",
    "accepted_encoding",
    "chunk",
    "compress",
    "decompress",
    "error_response",
    "json_response",
    "serialize_head",
]

Buffer = bytes | bytearray | memoryview


@dataclass(slots=True)
class HttpRequest:
    """One complete request: method, path (query removed), the headers we use, body."""

    method: str
    path: str
    body: bytes
    # Lower-cased names of the headers the frontend reads (see http_protocol.WANTED).
    headers: dict[bytes, bytes] = field(default_factory=dict)
    # Every header as sent, only when --http-header-forward-pattern asks for them.
    raw_headers: list[tuple[bytes, bytes]] | None = None
    # When it began and ended arriving (trace clock ns), only while tracing may sample.
    received: tuple[int, int] | None = None

    def header(self, name: bytes) -> bytes | None:
        return self.headers.get(name)


@dataclass(slots=True)
class HttpResponse:
    """A status, the headers beyond Content-Length, and the body as one or more buffers."""

    status: int
    parts: Sequence[Buffer] = ()
    content_type: bytes = b"application/json"
    extra_headers: bytes = b""  # complete "name: value\r\n" lines
    # A body produced while it is sent, after ``parts`` (server-sent events). The
    # connection closes it (``aclose``) when done; ``cancel`` (sync, idempotent) is called
    # when the body will not be sent to its end: the client went away, perhaps before the
    # iterator was even started.
    stream: AsyncIterator[bytes] | None = None
    cancel: Callable[[], object] | None = None
    # The trace waiting for this answer's send timestamps (trace_stamps.py), if any.
    trace: Trace | None = None

    @property
    def body_length(self) -> int:
        return sum(map(len, self.parts))


_REASONS = {
    100: "Continue", 200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found",
    405: "Method Not Allowed", 413: "Payload Too Large", 414: "URI Too Long",
    431: "Request Header Fields Too Large", 500: "Internal Server Error",
    501: "Not Implemented", 503: "Service Unavailable",
}
_STATUS_LINES = {code: f"HTTP/1.1 {code} {reason}\r\n".encode() for code, reason in
                 _REASONS.items()}


def serialize_head(response: HttpResponse, body_length: int | None, keep_alive: bool,
                   *, chunked: bool = False) -> bytes:
    """The status line and headers of ``response`` (its body follows them on the wire).

    ``chunked``: the body follows in chunks (a streamed response). ``body_length`` None:
    neither a length nor chunks; the body ends when the connection closes (HTTP/1.0).
    """
    status = _STATUS_LINES.get(response.status)
    if status is None:
        status = f"HTTP/1.1 {response.status} Unknown\r\n".encode()
    if chunked:
        head = status + b"transfer-encoding: chunked\r\n"
    elif body_length is None:
        head = status
    else:
        head = status + b"content-length: " + str(body_length).encode() + b"\r\n"
    if response.content_type:
        head += b"content-type: " + response.content_type + b"\r\n"
    if response.extra_headers:
        head += response.extra_headers
    if not keep_alive:
        head += b"connection: close\r\n"
    return head + b"\r\n"


LAST_CHUNK = b"0\r\n\r\n"  # ends a chunked body (no trailers)


def chunk(data: Buffer) -> bytes:
    """One piece of a chunked body: its size in hex, the data, CRLF (never empty)."""
    return b"%x\r\n" % len(data) + bytes(data) + b"\r\n"


def json_response(value: object, status: int = 200) -> HttpResponse:
    return HttpResponse(status, (orjson.dumps(value),))


def error_response(error: TritonError | str, status: int | None = None, *,
                   content_type: bytes = b"application/json") -> HttpResponse:
    """Triton's error body ``{"error": "<message>"}`` with the status of the error's code.

    Triton's handlers that answer JSON declare it before they fail; the others (health,
    readiness, unknown routes) answer their errors as ``text/plain``, its default.
    """
    if isinstance(error, TritonError):
        message = error.message
        code = http_status(error) if status is None else status
    else:
        message = error
        code = 400 if status is None else status
    return HttpResponse(code, (orjson.dumps({"error": message}),), content_type)


# -- compression ---------------------------------------------------------------------------

_WBITS = {"gzip": 31, "deflate": 15}  # zlib: 16 + 15 selects the gzip container


def decompress(body: bytes, encoding: bytes, limit: int) -> bytes:
    """The body without its Content-Encoding; at most ``limit`` bytes once decompressed.

    The encoding is matched as Triton matches it (exactly ``gzip``, ``deflate``, zlib's
    format, or ``identity``); others raise UnsupportedError (the caller adds Triton's
    ``Accept-Encoding: gzip, deflate`` hint). Data that does not inflate to its end is
    not an error in Triton: what inflated before the failure is the body, so corrupt
    data is an empty body and a truncated stream its beginning. Raises
    InvalidArgumentError for a body that inflates past ``limit``.
    """
    name = encoding.decode("latin-1").strip()
    if name in ("", "identity"):
        return body
    wbits = _WBITS.get(name)
    if wbits is None:
        raise UnsupportedError("Unsupported compression type")
    inflater = zlib.decompressobj(wbits)
    try:
        data = inflater.decompress(body, limit + 1)
        too_large = len(data) > limit or bool(inflater.unconsumed_tail)
    except zlib.error:
        data = _inflated_before_failure(body, wbits, limit)
        too_large = len(data) > limit
    if too_large:
        raise InvalidArgumentError(
            f"Request size exceeds the maximum allowed value of {limit} bytes once "
            "decompressed. Use --http-max-input-size to increase the limit.")
    return data


_INFLATE_STEP = 4096


def _inflated_before_failure(body: bytes, wbits: int, limit: int) -> bytes:
    """What ``body`` inflates to before its data turns invalid (the error path only)."""
    inflater = zlib.decompressobj(wbits)
    parts: list[bytes] = []
    size = 0
    for offset in range(0, len(body), _INFLATE_STEP):
        try:
            part = inflater.decompress(body[offset:offset + _INFLATE_STEP], limit + 1 - size)
        except zlib.error:
            break
        parts.append(part)
        size += len(part)
        if size > limit or inflater.unconsumed_tail:
            break
    return b"".join(parts)


def accepted_encoding(accept_encoding: bytes | None) -> str:
    """gzip, deflate or identity: the highest-weighted one the client accepts.

    Ties keep the first listed, and unknown or malformed entries are skipped, as Triton's
    frontend does.
    """
    if not accept_encoding:
        return "identity"
    best, best_weight = "identity", 0.0
    for entry in accept_encoding.decode("latin-1").split(","):
        name, _, params = entry.strip().partition(";")
        name = name.strip().lower()
        weight = 1.0
        params = params.strip()
        if params:
            if not params.startswith("q="):
                continue
            try:
                weight = float(params[2:])
            except ValueError:
                continue
        if name in ("identity", "gzip", "deflate") and weight > best_weight:
            best, best_weight = name, weight
    return best


def compress(parts: Sequence[Buffer], encoding: str) -> bytes:
    """The concatenated ``parts`` compressed as gzip or deflate (zlib format)."""
    compressor = zlib.compressobj(wbits=_WBITS[encoding])
    chunks = [compressor.compress(part) for part in parts]
    chunks.append(compressor.flush())
    return b"".join(chunks)
