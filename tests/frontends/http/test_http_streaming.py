"""Streamed HTTP bodies (server-sent events): chunked framing, keep-alive after the last
chunk, flow control, the producer closed when the client goes away, and HTTP/1.0."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from infercore.frontends.http.messages import HttpRequest, HttpResponse
from infercore.frontends.http.protocol import ConnectionSet, HttpConnection


class FakeTransport:
    """Records what the connection writes; nothing is sent anywhere."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.data += data

    def writelines(self, parts: list[bytes]) -> None:
        for part in parts:
            self.data += part

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class Producer:
    """A streamed body whose pieces the test hands over one by one."""

    def __init__(self) -> None:
        self.pieces: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.pulled = 0
        self.closed = False
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    async def body(self) -> AsyncIterator[bytes]:
        try:
            while True:
                self.pulled += 1
                piece = await self.pieces.get()
                if piece is None:
                    return
                yield piece
        finally:
            self.closed = True


def _connection(producer: Producer) -> tuple[HttpConnection, FakeTransport]:
    def route(request: HttpRequest) -> HttpResponse:
        if request.path == "/stream":
            return HttpResponse(200, (b"first",), b"text/event-stream",
                                stream=producer.body(), cancel=producer.cancel)
        return HttpResponse(200, (b"plain",), b"text/plain")

    connection = HttpConnection(route, ConnectionSet(), max_input_size=1024)
    transport = FakeTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    return connection, transport


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_streamed_body_is_chunked_and_the_connection_serves_the_next_request():
    producer = Producer()
    connection, transport = _connection(producer)
    connection.data_received(b"GET /stream HTTP/1.1\r\n\r\nGET /plain HTTP/1.1\r\n\r\n")
    await _settle()
    producer.pieces.put_nowait(b"data: 1\n\n")
    producer.pieces.put_nowait(b"")  # empty pieces are skipped: "0\r\n" would end the body
    producer.pieces.put_nowait(b"data: 22\n\n")
    producer.pieces.put_nowait(None)
    await _settle()

    head, _, rest = bytes(transport.data).partition(b"\r\n\r\n")
    assert head.splitlines() == [b"HTTP/1.1 200 OK", b"transfer-encoding: chunked",
                                 b"content-type: text/event-stream"]
    body, _, after = rest.partition(b"0\r\n\r\n")
    assert body == b"5\r\nfirst\r\n9\r\ndata: 1\n\n\r\na\r\ndata: 22\n\n\r\n"
    assert after.startswith(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n")
    assert after.endswith(b"\r\n\r\nplain")
    assert producer.closed and not transport.closed


async def test_no_piece_is_taken_while_the_peer_does_not_read():
    producer = Producer()
    connection, transport = _connection(producer)
    connection.data_received(b"GET /stream HTTP/1.1\r\n\r\n")
    await _settle()
    connection.pause_writing()
    producer.pieces.put_nowait(b"a")
    await _settle()
    pulled = producer.pulled  # took "a", then waits for the transport before pulling again
    producer.pieces.put_nowait(b"b")
    await _settle()

    assert producer.pulled == pulled and b"1\r\nb\r\n" not in transport.data
    connection.resume_writing()
    await _settle()
    assert b"1\r\nb\r\n" in transport.data


async def test_a_client_that_goes_away_closes_the_producer():
    producer = Producer()
    connection, transport = _connection(producer)
    connection.data_received(b"GET /stream HTTP/1.1\r\n\r\n")
    await _settle()
    producer.pieces.put_nowait(b"a")
    await _settle()

    connection.connection_lost(None)
    await _settle()
    assert producer.closed and producer.cancelled


async def test_a_client_gone_before_the_body_started_still_cancels_the_producer():
    producer = Producer()
    connection, transport = _connection(producer)
    connection.data_received(b"GET /stream HTTP/1.1\r\n\r\n")
    connection.connection_lost(None)  # before the task that writes the body ran at all
    await _settle()

    assert producer.cancelled and producer.pulled == 0 and not transport.data


async def test_a_body_sent_to_its_end_is_not_cancelled():
    producer = Producer()
    connection, transport = _connection(producer)
    connection.data_received(b"GET /stream HTTP/1.1\r\nConnection: close\r\n\r\n")
    await _settle()
    producer.pieces.put_nowait(None)
    await _settle()

    assert transport.closed and transport.data.endswith(b"0\r\n\r\n")
    connection.connection_lost(None)
    assert producer.closed and not producer.cancelled


async def test_an_http_1_0_client_gets_the_raw_body_and_then_the_end_of_the_connection():
    producer = Producer()
    connection, transport = _connection(producer)
    connection.data_received(b"GET /stream HTTP/1.0\r\n\r\n")
    await _settle()
    producer.pieces.put_nowait(b"data: x\n\n")
    producer.pieces.put_nowait(None)
    await _settle()

    head, _, body = bytes(transport.data).partition(b"\r\n\r\n")
    assert b"transfer-encoding" not in head and b"content-length" not in head
    assert b"connection: close" in head
    assert body == b"firstdata: x\n\n"
    assert transport.closed
