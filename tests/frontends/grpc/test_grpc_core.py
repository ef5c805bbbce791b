"""grpc_core's server and grpc_bridge, driven by a real grpc channel, with small handlers
of each kind (DirectUnary on the queue thread, LoopUnary and LoopStream on a loop)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Iterator

import grpc
import pytest

from infercore.frontends.grpc.bridge import LoopBridge
from infercore.frontends.grpc.core import CoreServer, DirectUnary, LoopStream, LoopUnary, UnaryCall

SERVICE = "/test.Service/"


class Fixture:
    def __init__(self, server: CoreServer, channel: grpc.Channel,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.server = server
        self.channel = channel
        self.loop = loop

    def unary(self, method: str) -> grpc.UnaryUnaryMultiCallable:
        return self.channel.unary_unary(SERVICE + method)

    def stream(self, method: str) -> grpc.StreamStreamMultiCallable:
        return self.channel.stream_stream(SERVICE + method)


cancelled = threading.Event()
parked: list[UnaryCall] = []
stream_cancelled = threading.Event()
stream_hanging = threading.Event()


def _direct_echo(call: UnaryCall, data: bytes) -> None:
    call.reply(b"echo:" + data)


def _direct_later(call: UnaryCall, data: bytes) -> None:
    # answered by another thread, as an instance thread answers a long request
    call.watch_cancel(lambda: None)
    threading.Timer(0.05, call.reply, args=(b"later:" + data,)).start()


def _direct_refuse(call: UnaryCall, data: bytes) -> None:
    call.fail(grpc.StatusCode.NOT_FOUND, "no such thing")


def _direct_buggy(call: UnaryCall, data: bytes) -> None:
    raise KeyError("handler bug")


def _direct_park(call: UnaryCall, data: bytes) -> None:
    # never answered unless cancelled: the cancel callback answers it
    def on_cancel() -> None:
        cancelled.set()
        call.fail(grpc.StatusCode.CANCELLED, "cancelled")

    parked.append(call)
    call.watch_cancel(on_cancel)


async def _bridged_upper(request: bytes, context) -> bytes:
    if request == b"abort":
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad request")
    if request == b"crash":
        raise RuntimeError("handler bug")
    metadata = dict(context.invocation_metadata())
    return request.upper() + metadata.get("x-tag", "").encode()


async def _bridged_stream(requests, context) -> None:
    try:
        async for request in requests:
            if request == b"hang":
                stream_hanging.set()
                await asyncio.sleep(3600)
            await context.write(b"got:" + request)
    except asyncio.CancelledError:
        stream_cancelled.set()
        raise


@pytest.fixture
def core() -> Iterator[Fixture]:
    cancelled.clear()
    stream_cancelled.clear()
    stream_hanging.clear()
    parked.clear()
    loop = asyncio.new_event_loop()
    loop_thread = threading.Thread(target=loop.run_forever, daemon=True)
    loop_thread.start()
    handlers = {
        SERVICE + "Echo": DirectUnary(_direct_echo),
        SERVICE + "Later": DirectUnary(_direct_later),
        SERVICE + "Refuse": DirectUnary(_direct_refuse),
        SERVICE + "Park": DirectUnary(_direct_park),
        SERVICE + "Buggy": DirectUnary(_direct_buggy),
        SERVICE + "Upper": LoopUnary(_bridged_upper),
        SERVICE + "Stream": LoopStream(_bridged_stream),
    }
    server = CoreServer((), handlers, LoopBridge(loop))
    port = server.add_port("127.0.0.1:0", None)
    assert port > 0
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield Fixture(server, channel, loop)
    finally:
        channel.close()
        server.shutdown()
        server.cancel_all()
        assert server.close(10)
        loop.call_soon_threadsafe(loop.stop)
        loop_thread.join(10)
        loop.close()
    assert server.active == 0
    assert not [t for t in threading.enumerate() if t.name == "infercore-grpc-cq"]


def test_direct_methods_answer_now_or_from_another_thread(core):
    assert core.unary("Echo")(b"a", timeout=10) == b"echo:a"
    assert core.unary("Later")(b"b", timeout=10) == b"later:b"
    futures = [core.unary("Later").future(str(i).encode(), timeout=10) for i in range(20)]
    assert [f.result() for f in futures] == [b"later:" + str(i).encode() for i in range(20)]


def test_a_direct_failure_is_the_calls_status(core):
    with pytest.raises(grpc.RpcError) as raised:
        core.unary("Refuse")(b"x", timeout=10)
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    assert raised.value.details() == "no such thing"
    assert core.unary("Echo")(b"after", timeout=10) == b"echo:after"


def test_a_deadline_reaches_the_direct_handlers_cancel_watch(core):
    with pytest.raises(grpc.RpcError) as raised:
        core.unary("Park")(b"x", timeout=0.2)
    assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert cancelled.wait(10)
    parked[0].reply(b"too late")  # answering a cancelled call is harmless
    assert core.unary("Echo")(b"still", timeout=10) == b"echo:still"


def test_shutdown_cancels_calls_still_in_flight(core):
    pending = core.unary("Park").future(b"x", timeout=30)
    while not parked:
        threading.Event().wait(0.01)
    core.server.shutdown()
    core.server.cancel_all()
    assert cancelled.wait(10)
    with pytest.raises(grpc.RpcError):
        pending.result(timeout=10)


def test_bridged_unary_methods_run_on_the_loop_with_their_context(core):
    upper = core.unary("Upper")
    assert upper(b"abc", metadata=(("x-tag", "!"),), timeout=10) == b"ABC!"
    with pytest.raises(grpc.RpcError) as raised:
        upper(b"abort", timeout=10)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details() == "bad request"


@pytest.mark.parametrize(("method", "request_"), [("Upper", b"crash"), ("Buggy", b"x")])
def test_a_handler_bug_is_unknown_and_the_server_goes_on(core, method, request_):
    with pytest.raises(grpc.RpcError) as raised:
        core.unary(method)(request_, timeout=10)
    assert raised.value.code() == grpc.StatusCode.UNKNOWN
    assert "handler bug" in raised.value.details()
    assert core.unary("Upper")(b"ok", timeout=10) == b"OK"
    assert core.unary("Echo")(b"ok", timeout=10) == b"echo:ok"


def test_bridged_streams_read_and_write_many_messages(core):
    replies = list(core.stream("Stream")(iter([b"1", b"2", b"3"]), timeout=10))
    assert replies == [b"got:1", b"got:2", b"got:3"]


def test_a_cancelled_stream_cancels_its_handler(core):
    call = core.stream("Stream")(iter([b"1", b"hang"]), timeout=30)
    assert next(call) == b"got:1"
    # Cancelled before "hang" arrives, the handler could see the end of the requests
    # first and return on its own: cancel it while it waits.
    assert stream_hanging.wait(10)
    call.cancel()
    assert stream_cancelled.wait(10)
    assert core.unary("Echo")(b"next", timeout=10) == b"echo:next"


def test_unknown_methods_are_unimplemented_with_no_details(core):
    # as gRPC C++ (Triton) answers them
    with pytest.raises(grpc.RpcError) as raised:
        core.unary("Nope")(b"x", timeout=10)
    assert (raised.value.code(), raised.value.details()) == (grpc.StatusCode.UNIMPLEMENTED, "")
    with pytest.raises(grpc.RpcError) as raised:
        core.channel.unary_unary("/other.Service/Echo")(b"x", timeout=10)
    assert (raised.value.code(), raised.value.details()) == (grpc.StatusCode.UNIMPLEMENTED, "")


# A server whose one call is answered only after the queue has shut down, as a model that
# ignores cancellation answers once the exit timeout has passed. gRPC core aborts the
# process when a batch starts on a shut-down queue, so this runs in a process of its own.
_LATE_ANSWER = """
import asyncio, threading, grpc
from infercore.frontends.grpc.bridge import LoopBridge
from infercore.frontends.grpc.core import CoreServer, DirectUnary

parked, arrived = [], threading.Event()

def park(call, data):
    call.watch_cancel(lambda: None)  # ignores the cancellation
    parked.append(call)
    arrived.set()

loop = asyncio.new_event_loop()
server = CoreServer((), {"/test.Service/Park": DirectUnary(park)}, LoopBridge(loop))
port = server.add_port("127.0.0.1:0", None)
server.start()
channel = grpc.insecure_channel(f"127.0.0.1:{port}")
future = channel.unary_unary("/test.Service/Park").future(b"x", timeout=30)
assert arrived.wait(10)
server.shutdown()
server.cancel_all()
server.close(1.0)
parked[0].reply(b"late")
parked[0].fail(grpc.StatusCode.CANCELLED, "late")
print("client saw", future.exception(10).code().name)
channel.close()
print("survived")
"""


def test_an_answer_after_the_queue_shut_down_is_dropped():
    done = subprocess.run([sys.executable, "-c", _LATE_ANSWER], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "client saw" in done.stdout  # an error (the server went away), never OK
    assert "survived" in done.stdout
