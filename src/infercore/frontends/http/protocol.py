"""One HTTP/1.1 connection: an asyncio Protocol over httptools' parser.

The parser calls back as bytes arrive; a complete message becomes an ``HttpRequest`` that
the router answers, at once for most endpoints, or (inference and model control) by a
coroutine started at once that, if it must wait, the future it waits on steps on
(http_eager). Requests on a connection are answered in order, one at a time: pipelined
requests wait in ``_pending`` (and reading pauses while they wait), so a client cannot
make the server buffer without bound; after ``_ANSWERS_PER_TURN`` answered at once, the
connection lets the loop serve the others before it goes on, so a client pipelining
thousands of requests does not hold up every other client while they are answered.
Writes respect the transport's flow control: while the peer does not read, no further
request is started.

Framing comes from the request head only. A request with both Transfer-Encoding and
Content-Length is read by its Transfer-Encoding (RFC 9112 allows a server that, and Triton
reads such a body, which clients such as ``requests`` send when a caller sets
Transfer-Encoding itself), and its connection is closed once it is answered, as the RFC
asks. A chunked body's trailer fields are read and dropped (they never become headers:
not a restricted API's key, not Content-Encoding or Inference-Header-Content-Length), as
Triton's libevhtp drops them.

Limits, checked as bytes arrive (a request is refused at once, never buffered until the
client gives up): a request target may take 8 KiB (414), a header line 8 KiB and the
whole head, or a trailer, 1 MiB (431); a body ``max_input_size`` bytes (Triton's
``--http-max-input-size``), a chunk announcing more is refused from its announced size
(400, the same answer as a body that grew too large). A refused request is answered and
the rest of it read and discarded for a moment before the connection closes, so the
client still reads the answer; what it had buffered is dropped at once (and, when that
was much, memory is given back: large_requests.py). Bytes that are not HTTP are not
answered: the connection is closed (after the requests before them are answered), as
Triton closes it.

A response with a ``stream`` (server-sent events) is written as its pieces come, in
chunked transfer encoding (raw, then closing, for an HTTP/1.0 client), by the task that
answers the request; while the peer does not read, that task waits for the transport to
drain before it takes the next piece.

With a ``BusyPoll`` (busy_poll.py), each chunk of request read and each response written
keeps the loop awake for its window, so a quick next event is handled without a wake-up.

Threads: everything here runs on the frontend's event-loop thread (a large body's
decoding aside: http_infer). A connection that
goes away cancels its request in flight, which cancels the inference request (a streamed
body's iterator is closed, which ends what produces it).

Connection states: open -> (draining: finish the current request, then close) -> closed.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import httptools

from ..large_requests import LARGE_REQUEST_BYTES, LargeRequests
from ..trace_stamps import HTTP_SEND_END, HTTP_SEND_START
from .busy_poll import BusyPoll
from .eager import Suspended, start_eagerly
from .messages import (
    LAST_CHUNK,
    HttpRequest,
    HttpResponse,
    chunk,
    error_response,
    serialize_head,
)

if TYPE_CHECKING:
    from ...observability.tracing import Tracer

__all__ = ["ConnectionSet", "HttpConnection", "WANTED_HEADERS"]

logger = logging.getLogger(__name__)

# The only request headers the frontend reads; others are skipped while parsing.
WANTED_HEADERS = frozenset({b"inference-header-content-length", b"content-encoding",
                            b"accept-encoding", b"content-length", b"expect"})
# Triton's libevhtp buffers about 8 KiB per token (target, header name, header value) and
# drops the connection past that; infercore answers instead (414 / 431).
MAX_TARGET_BYTES = 8 * 1024
MAX_HEADER_LINE_BYTES = 8 * 1024
# The whole head, and a trailer section, as bytes arrive: Triton has no bound at all.
MAX_HEAD_BYTES = 1024 * 1024
_CHUNK_TAIL_BYTES = 1024  # kept of a feed that ended between chunks (a split size line)
_DISCARD_SECONDS = 2.0  # how long a refused body may keep arriving before we hang up
_ANSWERS_PER_TURN = 32  # requests answered in a row before the loop serves other clients
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_METHODS = {m.encode(): m for m in ("GET", "POST", "PUT", "DELETE", "HEAD", "PATCH",
                                      "OPTIONS")}
# libevhtp's numbers for methods, as Triton's verbose "HTTP request: <method> <path>" line
# prints them (htp_method_UNKNOWN for the others)
_EVHTP_METHODS = {"GET": 0, "HEAD": 1, "POST": 2, "PUT": 3, "DELETE": 4, "MKCOL": 5,
                  "COPY": 6, "MOVE": 7, "OPTIONS": 8, "PROPFIND": 9, "PROPPATCH": 10,
                  "LOCK": 11, "UNLOCK": 12, "TRACE": 13, "CONNECT": 14, "PATCH": 15}
_EVHTP_UNKNOWN = 16

Router = Callable[[HttpRequest], Any]  # -> HttpResponse | Coroutine[..., HttpResponse]


class ConnectionSet:
    """The open connections of one frontend, so shutdown can drain and close them."""

    def __init__(self) -> None:
        self.connections: set[HttpConnection] = set()
        self.empty = asyncio.Event()
        self.empty.set()
        self.closing = False  # shutdown began: new connections are closed at once

    def drain(self) -> None:
        """Close idle connections now and busy ones after their request; refuse new ones."""
        self.closing = True
        for connection in list(self.connections):
            connection.drain()

    def add(self, connection: HttpConnection) -> None:
        self.connections.add(connection)
        self.empty.clear()

    def discard(self, connection: HttpConnection) -> None:
        self.connections.discard(connection)
        if not self.connections:
            self.empty.set()


class HttpConnection(asyncio.Protocol):
    """Parses requests from one client and writes their responses in order."""

    def __init__(self, router: Router, connections: ConnectionSet, *, max_input_size: int,
                 keep_raw_headers: bool = False, busy_poll: BusyPoll | None = None,
                 wanted_headers: frozenset[bytes] = WANTED_HEADERS,
                 large: LargeRequests | None = None, tracer: Tracer | None = None,
                 label: str = "HTTP") -> None:
        self._router = router
        self._verbose_prefix = f"{label} request: %d %s"  # Triton's verbose line
        self._tracer = tracer  # stamps a request's arrival while it may sample
        self._recv_start = 0
        self._wanted = wanted_headers
        self._large = large  # gives memory back after a large refused body
        self._connections = connections
        self._busy_poll = busy_poll
        self._max_input_size = max_input_size
        self._keep_raw_headers = keep_raw_headers
        self._loop = asyncio.get_running_loop()
        self._parser = httptools.HttpRequestParser(self)
        # llhttp refuses Transfer-Encoding with Content-Length unless told otherwise
        self._parser.set_dangerous_leniencies(lenient_chunked_length=True)
        self._transport: asyncio.Transport | None = None
        # the message being parsed
        self._url = b""
        self._headers: dict[bytes, bytes] = {}
        self._raw_headers: list[tuple[bytes, bytes]] | None = None
        self._header_bytes = 0
        self._transfer_coding: bytes | None = None  # the Transfer-Encoding field
        self._framed_twice = False  # ... beside a Content-Length
        self._in_head = False  # between message begin and headers complete
        self._head_began = False  # ... and the head began in the feed being parsed
        self._head_fed = 0  # bytes of later feeds that ended inside the head
        self._body: list[bytes] = []
        self._body_size = 0
        # chunked bodies: the chunk being read (its data starts at _chunk_start bytes of
        # body), whether its size line was parsed in the feed being parsed, the trailer
        self._chunked = False
        self._in_chunk = False
        self._chunk_opened = False
        self._chunk_start = 0
        self._chunk_tail = b""
        self._in_trailer = False
        self._trailer_fed = 0
        # requests parsed but not answered yet, and the one being answered
        self._pending: deque[tuple[HttpRequest, bool]] = deque()
        # what answers the current request when it could not be answered at once
        self._task: asyncio.Task[None] | Suspended[HttpResponse] | None = None
        self._busy = False
        self._turn_answers = 0  # answered in a row in this turn of the loop
        self._yielded = False  # the loop serves other clients before we go on
        self._read_paused = False
        self._write_paused = False
        self._writable: asyncio.Future[None] | None = None  # a streamed body waits on it
        self._streaming = False  # a streamed body is being written
        self._streamed: HttpResponse | None = None  # a streamed answer not finished yet
        self._draining = False
        self._discarding = False
        self._hung_up = False  # bytes that are not HTTP came: close once answered
        self._closed = False

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._connections.add(self)
        if self._connections.closing:  # accepted from the backlog after shutdown began
            self.drain()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._connections.discard(self)
        self._pending.clear()
        if self._task is not None:
            self._task.cancel()  # the client is gone: cancel its inference
        self._abandon_stream()

    def data_received(self, data: bytes) -> None:
        if self._discarding:
            return
        if self._busy_poll is not None:  # its answer, or the engine's, may come soon
            self._busy_poll.touch()
        self._turn_answers = 0  # a read: a new turn of the loop
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._hang_up()
            return
        except httptools.HttpParserCallbackError as exc:
            if not self._discarding:  # not a refusal: a bug in answering the request
                logger.error("failed to answer an HTTP request", exc_info=exc.__context__)
                self._refuse(error_response("internal error while reading the request", 500))
            return
        except httptools.HttpParserError:
            self._hang_up()  # not HTTP: Triton closes without an answer
            return
        # The feed ended inside a head, a chunk or a trailer: bound what is buffered.
        if self._in_head:
            self._bound_head(len(data))
        elif self._in_chunk:
            self._bound_chunk(data)
        elif self._chunked:  # between chunks: keep what a split size line needs
            self._chunk_tail = (self._chunk_tail
                                + data[-_CHUNK_TAIL_BYTES:])[-_CHUNK_TAIL_BYTES:]

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)
        self._serve_pending()

    # -- httptools callbacks ---------------------------------------------------------------
    def on_message_begin(self) -> None:
        tracer = self._tracer
        if tracer is not None and tracer.active:
            self._recv_start = tracer.now_ns()
        self._url = b""
        self._headers = {}
        self._raw_headers = [] if self._keep_raw_headers else None
        self._header_bytes = 0
        self._transfer_coding = None
        self._framed_twice = False
        self._in_head = self._head_began = True
        self._head_fed = 0
        self._body = []
        self._body_size = 0
        self._chunked = False
        self._chunk_tail = b""
        self._in_trailer = False

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > MAX_TARGET_BYTES:
            self._refuse(_URI_TOO_LONG, linger=True)
            raise _Refused

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._in_head:  # a chunked body's trailer: read, never a request header
            return
        size = len(name) + len(value)
        self._header_bytes += size
        if size > MAX_HEADER_LINE_BYTES or self._header_bytes > MAX_HEAD_BYTES:
            self._refuse(_HEADERS_TOO_LARGE, linger=True)
            raise _Refused
        lowered = name.lower()
        if lowered == b"transfer-encoding":
            self._transfer_coding = value
        if lowered in self._wanted:
            self._headers[lowered] = value
        if self._raw_headers is not None:
            self._raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._in_head = False
        length = self._headers.get(b"content-length")
        if self._transfer_coding is not None:
            final = self._transfer_coding.rsplit(b",", 1)[-1].strip().lower()
            if final != b"chunked":
                # a body framed by no chunked coding: llhttp, told to allow a Content-Length
                # beside a Transfer-Encoding, would read it to the end of the stream
                self._hang_up()
                raise _Refused
            self._framed_twice = length is not None
        if length is not None and length.isdigit() and int(length) > self._max_input_size:
            self._refuse_too_large(int(length))
            raise _Refused
        expect = self._headers.get(b"expect")
        if expect is not None and expect.lower() == b"100-continue" and self._transport:
            self._transport.write(_CONTINUE)

    def on_body(self, body: bytes) -> None:
        self._body_size += len(body)
        if self._body_size > self._max_input_size:
            self._refuse_too_large(self._body_size)
            raise _Refused
        self._body.append(body)

    def on_chunk_header(self) -> None:
        self._chunked = self._in_chunk = self._chunk_opened = True
        self._chunk_start = self._body_size

    def on_chunk_complete(self) -> None:
        self._in_chunk = self._in_trailer = False

    def on_message_complete(self) -> None:
        self._in_chunk = False
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        url = self._url
        if not url.startswith(b"/"):  # absolute-form (a proxy's form), or not a path
            origin = _origin_form(url)
            if origin is None:
                self._hang_up()
                raise _Refused
            url = origin
        query = url.find(b"?")
        path = (url if query < 0 else url[:query]).decode("latin-1")
        raw_method = self._parser.get_method()
        method = _METHODS.get(raw_method) or raw_method.decode("latin-1")
        request = HttpRequest(method, path, body, self._headers, self._raw_headers)
        if logger.isEnabledFor(logging.DEBUG):  # verbose level 1: Triton logs each request
            logger.debug(self._verbose_prefix, _EVHTP_METHODS.get(method, _EVHTP_UNKNOWN),
                         path)
        if self._recv_start:
            assert self._tracer is not None
            request.received = (self._recv_start, self._tracer.now_ns())
            self._recv_start = 0
        self._body = []
        keep_alive = self._parser.should_keep_alive() and not self._framed_twice
        self._pending.append((request, keep_alive))
        if self._busy or self._yielded:
            if self._transport is not None and not self._read_paused:
                self._read_paused = True
                self._transport.pause_reading()  # answer what we have before reading more
        else:
            self._serve_pending()

    # -- answering ---------------------------------------------------------------------------
    def _serve_pending(self) -> None:
        """Answer queued requests in order until one must wait or writing is paused."""
        while (self._pending and not self._busy and not self._yielded
               and not self._write_paused and not self._closed):
            if self._turn_answers == _ANSWERS_PER_TURN:
                self._yielded = True
                self._loop.call_soon(self._next_turn)
                if self._transport is not None and not self._read_paused:
                    self._read_paused = True
                    self._transport.pause_reading()
                return
            self._turn_answers += 1
            request, keep_alive = self._pending.popleft()
            result = self._router(request)
            if not isinstance(result, HttpResponse):
                result = start_eagerly(result)
            if isinstance(result, Suspended):  # the handler waits: its future calls back
                self._busy = True
                self._task = result
                result.finish(self._answered if keep_alive else self._answered_last)
                continue
            if result.stream is None:
                self._write(result, keep_alive)
                continue
            self._busy = True
            self._start_stream(result, keep_alive)
        if not self._pending and not self._busy and self._transport is not None:
            if self._draining or self._hung_up:
                self._closed = True
                self._transport.close()
            elif self._read_paused and not self._closed:
                self._read_paused = False
                self._transport.resume_reading()

    def _next_turn(self) -> None:
        """The loop served the others: answer the next requests queued."""
        self._yielded = False
        self._turn_answers = 0
        self._serve_pending()

    def _answered(self, response: HttpResponse | None, error: BaseException | None,
                  keep_alive: bool = True) -> None:
        """A handler that had to wait finished: answer, and go on with the next requests."""
        self._task = None
        if error is not None:
            if isinstance(error, asyncio.CancelledError):
                return  # the connection was lost, or aborted at shutdown: nobody to answer
            # handlers answer their errors: this is a bug
            logger.error("failed to answer an HTTP request", exc_info=error)
            response = error_response("internal error while answering the request", 500)
        assert response is not None
        if response.stream is not None:
            self._start_stream(response, keep_alive)
            return
        self._busy = False
        if not self._closed:
            self._write(response, keep_alive)
            self._serve_pending()
        elif response.trace is not None:
            response.trace.frontend_done()

    def _answered_last(self, response: HttpResponse | None,
                       error: BaseException | None) -> None:
        self._answered(response, error, keep_alive=False)

    def _start_stream(self, response: HttpResponse, keep_alive: bool) -> None:
        """Write ``response``, whose body streams, from a task of its own."""
        self._streamed = response
        self._task = self._loop.create_task(self._answer_stream(response, keep_alive))

    async def _answer_stream(self, response: HttpResponse, keep_alive: bool) -> None:
        """Write a response whose body streams, then go on with the next requests."""
        assert response.stream is not None
        try:
            if not await self._write_stream(response, response.stream, keep_alive):
                self._abandon_stream()
                return
        except asyncio.CancelledError:
            self._abandon_stream()
            return
        self._streamed = None
        self._task = None
        self._busy = False
        if not self._closed:
            self._serve_pending()

    async def _write_stream(self, response: HttpResponse, stream: AsyncIterator[bytes],
                            keep_alive: bool) -> bool:
        """Write a response whose body is produced as it goes; False if the connection
        ended meanwhile (or had to be dropped: the body could not be finished)."""
        transport = self._transport
        if transport is None or self._closed:
            await _close(stream)
            return False
        # Read now, not when the request arrived: an HTTP/1.0 client does not pipeline.
        chunked = self._parser.get_http_version() != "1.0"
        keep_alive = keep_alive and chunked and not self._draining
        self._streaming = True
        try:
            transport.writelines([
                serialize_head(response, None, keep_alive, chunked=chunked),
                *(chunk(part) if chunked else part for part in response.parts if part)])
            async for piece in stream:
                if self._closed:
                    return False
                if piece:
                    transport.write(chunk(piece) if chunked else piece)
                if self._write_paused:
                    await self._wait_writable()
        except Exception as exc:  # noqa: BLE001 - the body is cut short: drop the connection
            logger.error("failed to stream an HTTP response", exc_info=exc)
            self._closed = True
            transport.abort()
            return False
        finally:
            self._streaming = False
            await _close(stream)
        if self._closed:
            return False
        if chunked:
            transport.write(LAST_CHUNK)
        if not keep_alive or self._draining:
            self._streamed = None  # sent to its end: nothing to abandon
            self._pending.clear()
            transport.close()
            self._closed = True
            return False
        return True

    def _abandon_stream(self) -> None:
        """The streamed answer in progress will not be finished: stop what produces it."""
        response, self._streamed = self._streamed, None
        if response is not None and response.cancel is not None:
            response.cancel()

    async def _wait_writable(self) -> None:
        """Until the transport drains below its high-water mark (or the connection ends)."""
        if self._writable is None or self._writable.done():
            self._writable = self._loop.create_future()
        await self._writable

    def _write(self, response: HttpResponse, keep_alive: bool) -> None:
        transport = self._transport
        trace = response.trace
        if transport is None or self._closed:
            if trace is not None:
                trace.frontend_done()
            return
        keep_alive = keep_alive and not self._draining
        if trace is not None:
            trace.frontend_stamp(HTTP_SEND_START)
        head = serialize_head(response, response.body_length, keep_alive)
        if response.parts:
            transport.writelines([head, *response.parts])
        else:
            transport.write(head)
        if trace is not None:
            trace.frontend_stamp(HTTP_SEND_END)
            trace.frontend_done()
        if self._busy_poll is not None:  # the client's next request may come soon
            self._busy_poll.touch()
        if not keep_alive:
            self._pending.clear()
            transport.close()
            self._closed = True

    def _bound_head(self, fed: int) -> None:
        """The feed ended inside a head: refuse one that grew past MAX_HEAD_BYTES.

        The feed in which the head began is not counted (part of it may have been the
        previous request): the bound is MAX_HEAD_BYTES plus at most one read.
        """
        if self._head_began:
            self._head_began = False
            return
        self._head_fed += fed
        if self._head_fed > MAX_HEAD_BYTES:
            self._refuse(_HEADERS_TOO_LARGE, linger=True)

    def _bound_chunk(self, data: bytes) -> None:
        """The feed ended inside a chunk (or the trailer after the last one): refuse a
        chunk announcing more body than the limit, or a trailer past MAX_HEAD_BYTES."""
        if self._chunk_opened:  # its size line is in this feed: read the size from it
            self._chunk_opened = False
            start = self._chunk_start
            size = _announced_chunk_size(self._chunk_tail, data,
                                         len(data) - (self._body_size - start))
            if not size:  # the last chunk (or no size line ends here): the trailer
                self._in_trailer = True
                self._trailer_fed = 0
            elif start + size > self._max_input_size:
                self._refuse_too_large(start + size)
        elif self._in_trailer:
            self._trailer_fed += len(data)
            if self._trailer_fed > MAX_HEAD_BYTES:
                self._refuse(_HEADERS_TOO_LARGE, linger=True)

    def _hang_up(self) -> None:
        """Bytes that are not HTTP: read nothing more, answer the requests before them,
        then close (Triton closes such a connection without an answer)."""
        self._discarding = True
        self._hung_up = True
        if self._transport is not None and not self._busy and not self._pending:
            self._closed = True
            self._transport.close()

    def _refuse_too_large(self, size: int) -> None:
        self._refuse(error_response(
            f"Request size of {size} bytes exceeds the maximum allowed value of "
            f"{self._max_input_size} bytes. Use --http-max-input-size to increase the "
            "limit.", 400), linger=True)

    def _refuse(self, response: HttpResponse, *, linger: bool = False) -> None:
        """Answer an unreadable request and hang up.

        With ``linger``, the rest of the request (a body we refused) is read and dropped
        for a moment first: closing at once could reset the connection while the client
        still sends, and it would then miss the answer.
        """
        transport = self._transport
        if transport is None or self._closed or self._discarding:
            return
        self._discarding = True
        self._pending.clear()
        self._body = []  # what a refused body buffered: dropped now, not at the close
        if self._body_size > LARGE_REQUEST_BYTES and self._large is not None:
            self._large.release_refused()
        if self._task is not None:
            self._task.cancel()
        self._abandon_stream()
        if self._streaming:  # an answer is half written: nothing else can follow it
            self._closed = True
            transport.close()
            return
        transport.writelines([serialize_head(response, response.body_length, False),
                              *response.parts])
        if linger:
            self._loop.call_later(_DISCARD_SECONDS, transport.close)
        else:
            transport.close()

    # -- shutdown ----------------------------------------------------------------------------
    def drain(self) -> None:
        """Finish the request in progress (if any), then close; stop reading new ones."""
        self._draining = True
        if self._transport is None or self._closed:
            return
        self._pending.clear()
        if not self._busy:
            self._transport.close()

    def abort(self) -> None:
        """Cancel the request in progress and drop the connection now."""
        if self._task is not None:
            self._task.cancel()
        self._abandon_stream()
        if self._transport is not None:
            self._transport.abort()


_URI_TOO_LONG = error_response("URI Too Long", 414)
_HEADERS_TOO_LARGE = error_response("Request Header Fields Too Large", 431)


def _origin_form(url: bytes) -> bytes | None:
    """The path of an absolute-form target (``http://host:port/path``), as Triton routes
    it; None for a target that is neither (``*``)."""
    scheme, sep, rest = url.partition(b"://")
    if not sep or scheme.lower() not in (b"http", b"https"):
        return None
    slash = rest.find(b"/")
    return b"/" if slash < 0 else rest[slash:]


def _announced_chunk_size(tail: bytes, data: bytes, end: int) -> int | None:
    """The size a chunk's size line announced, that line ending at ``data[:end]`` (its
    data follows); None if no size line ends there (the last chunk's trailer does).

    ``tail``: the end of the feeds before, for a size line split across reads.
    """
    if end < 2 or data[end - 2:end] != b"\r\n":
        return None
    start = data.rfind(b"\n", 0, end - 2)
    if start >= 0:
        line = data[start + 1:end - 2]
    else:
        joined = tail + data[:end - 2]
        line = joined[joined.rfind(b"\n") + 1:]
    digits = line.split(b";", 1)[0].strip()
    try:
        return int(digits, 16) if digits else None
    except ValueError:
        return None


async def _close(stream: AsyncIterator[bytes]) -> None:
    """Close an async generator body (its ``finally`` ends what produces it)."""
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()


class _Refused(Exception):
    """Raised from a parser callback to stop parsing a request that was refused."""
