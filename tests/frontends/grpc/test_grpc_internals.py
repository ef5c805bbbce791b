"""The grpcio internals grpc/core.py and grpc/bridge.py rely on, checked by name and by use.

grpc/core.py drives gRPC core through grpcio's Cython layer (``grpc._cython.cygrpc``),
which grpcio does not document as public. pyproject.toml pins the grpcio releases whose
layer was checked; these tests fail with a message naming what moved when a release
(or a widened pin) changes it: the installed release outside the pin, a name gone, an
operation class taking other arguments, or a real call through ``CoreServer`` of each
handler kind that no longer goes through.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from grpc._cython import cygrpc
from packaging.requirements import Requirement
from packaging.version import Version

from infercore.frontends.grpc import bridge as grpc_bridge
from infercore.frontends.grpc import core as grpc_core
from infercore.frontends.grpc.bridge import LoopBridge
from infercore.frontends.grpc.core import (
    CallContext,
    CoreServer,
    DirectUnary,
    LoopStream,
    LoopUnary,
    UnaryCall,
)

ROOT = Path(__file__).resolve().parents[3]
GRPCIO = grpc.__version__
SOURCES = [Path(grpc_core.__file__), Path(grpc_bridge.__file__)]

# Every cygrpc name the two modules use, with the members they use of it. A use not listed
# here fails test_every_cygrpc_name_used_is_listed_here: list it, then check it.
USED: dict[str, tuple[str, ...]] = {
    "Call": ("start_server_batch",),
    "CompletionQueue": ("poll", "shutdown"),
    "CompletionType": ("queue_shutdown",),
    "GRPC_COMPRESSION_REQUEST_ALGORITHM_MD_KEY": (),
    "ReceiveCloseOnServerOperation": ("cancelled",),
    "ReceiveMessageOperation": ("message",),
    "SendInitialMetadataOperation": (),
    "SendMessageOperation": (),
    "SendStatusFromServerOperation": (),
    "Server": ("add_http2_port", "cancel_all_calls", "destroy", "register_completion_queue",
               "register_method", "request_call", "request_registered_call", "shutdown",
               "start"),
}
# The completion events grpc_core reads, and the fields it reads of them.
EVENTS = {
    "RequestCallEvent": ("completion_type", "tag", "success", "call", "invocation_metadata"),
    "BatchOperationEvent": ("completion_type", "tag", "success", "batch_operations"),
}


def _changed(what: str) -> str:
    return (f"grpcio {GRPCIO} changed its Cython layer: {what}. grpc/core.py / "
            "grpc/bridge.py rely on it; adapt them or narrow the grpcio pin in pyproject.toml")


def _pin() -> Requirement:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = [Requirement(line) for line in project["dependencies"]
            if Requirement(line).name == "grpcio"]
    assert len(pins) == 1, "pyproject.toml should pin grpcio once"
    return pins[0]


def test_the_installed_grpcio_is_within_the_pinned_range():
    pin = _pin()
    assert any(spec.operator == "<" for spec in pin.specifier), (
        "the grpcio pin needs an upper bound: releases after it are unchecked")
    assert Version(GRPCIO) in pin.specifier, (
        f"grpcio {GRPCIO} is outside the checked range {pin}: run these tests against it "
        "and widen the pin in pyproject.toml if they pass")


def test_every_cygrpc_name_used_is_listed_here():
    used = set()
    for source in SOURCES:
        used |= set(re.findall(r"\bcygrpc\.(\w+)", source.read_text()))
    assert used == set(USED), (
        f"the cygrpc names used changed: new {sorted(used - set(USED))}, "
        f"no longer used {sorted(set(USED) - used)}; update USED (and check them)")


@pytest.mark.parametrize("name", sorted(USED))
def test_every_cygrpc_name_used_exists(name):
    assert hasattr(cygrpc, name), _changed(f"cygrpc.{name} is gone")
    owner = getattr(cygrpc, name)
    for member in USED[name]:
        assert hasattr(owner, member), _changed(f"cygrpc.{name}.{member} is gone")


@pytest.mark.parametrize("name", sorted(EVENTS))
def test_the_completion_events_carry_the_fields_read(name):
    event = getattr(cygrpc, name, None)
    assert event is not None, _changed(f"cygrpc.{name} is gone")
    for field in EVENTS[name]:
        assert hasattr(event, field), _changed(f"cygrpc.{name} has no field '{field}'")


def test_the_compression_key_is_grpcs_internal_request_header():
    key = cygrpc.GRPC_COMPRESSION_REQUEST_ALGORITHM_MD_KEY  # bytes before 1.81, then str
    text = key.decode() if isinstance(key, bytes) else key
    assert text == "grpc-internal-encoding-request", _changed(
        f"the compression request key is {key!r}")


def test_server_credentials_still_wrap_cygrpcs_own():
    credentials = grpc.local_server_credentials()
    assert isinstance(getattr(credentials, "_credentials", None), cygrpc.ServerCredentials), (
        _changed("grpc.ServerCredentials no longer holds a cygrpc.ServerCredentials in "
                 "'_credentials' (CoreServer.add_port passes it to add_http2_port)"))


@pytest.mark.parametrize(("build", "shape"), [
    (lambda: cygrpc.CompletionQueue(), "CompletionQueue()"),
    (lambda: cygrpc.Server((), False), "Server(channel_args, False)"),
    (lambda: cygrpc.ReceiveMessageOperation(0), "ReceiveMessageOperation(flags)"),
    (lambda: cygrpc.ReceiveCloseOnServerOperation(0), "ReceiveCloseOnServerOperation(flags)"),
    (lambda: cygrpc.SendInitialMetadataOperation(None, 0),
     "SendInitialMetadataOperation(metadata, flags)"),
    (lambda: cygrpc.SendInitialMetadataOperation((("k", "v"),), 0),
     "SendInitialMetadataOperation(((key, value),), flags)"),
    (lambda: cygrpc.SendMessageOperation(b"m", 0), "SendMessageOperation(bytes, flags)"),
    (lambda: cygrpc.SendStatusFromServerOperation(None, 0, b"", 0),
     "SendStatusFromServerOperation(metadata, code, details, flags)"),
])
def test_the_classes_take_the_arguments_grpc_core_passes(build, shape):
    try:
        built = build()
    except TypeError as exc:
        pytest.fail(_changed(f"cygrpc.{shape} is refused ({exc})"))
    if isinstance(built, cygrpc.CompletionQueue):
        built.shutdown()


# -- a real call of each handler kind through CoreServer -----------------------------------
async def _loop_unary(data: bytes, context: CallContext) -> bytes:
    if data == b"abort":
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "aborted")
    context.set_compression(grpc.Compression.Gzip)
    return data + dict(context.invocation_metadata()).get("x-probe", "").encode()


async def _loop_stream(requests: AsyncIterator[bytes], context: CallContext) -> None:
    async for data in requests:
        await context.write(b"s:" + data)


def _direct(call: UnaryCall, data: bytes) -> None:
    if data == b"later":  # watched for cancellation, answered from another thread
        call.watch_cancel(lambda: None)
        threading.Thread(target=call.reply, args=(b"d:later",)).start()
    elif data == b"fail":
        call.fail(grpc.StatusCode.NOT_FOUND, "missing")
    else:
        call.reply(b"d:" + data, grpc_core.compression_metadata(grpc.Compression.Deflate))


@pytest.fixture(scope="module")
def channel() -> Iterator[grpc.Channel]:
    loop = asyncio.new_event_loop()
    loop_thread = threading.Thread(target=loop.run_forever, daemon=True)
    loop_thread.start()
    server = CoreServer([("grpc.max_receive_message_length", 1 << 20)], {
        "/probe.P/Direct": DirectUnary(_direct),
        "/probe.P/Unary": LoopUnary(_loop_unary),
        "/probe.P/Stream": LoopStream(_loop_stream),
    }, LoopBridge(loop))
    port = server.add_port("127.0.0.1:0", None)
    assert port > 0, _changed("Server.add_http2_port bound no port")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as opened:
            yield opened
    finally:
        server.shutdown()
        server.cancel_all()
        closed = server.close(10)
        loop.call_soon_threadsafe(loop.stop)
        loop_thread.join(10)
        loop.close()
    assert closed, _changed("the server did not shut its queue down (Server.shutdown's tag)")
    assert server.active == 0, _changed("calls stayed open: the status batches' tags")


def _rpc_error(call: object, *args: object, **kwargs: object) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as raised:
        call(*args, **kwargs)  # type: ignore[operator]
    return raised.value


def test_a_direct_unary_call_round_trips(channel):
    direct = channel.unary_unary("/probe.P/Direct")
    assert direct(b"x", timeout=10) == b"d:x", _changed("a DirectUnary reply")
    assert direct(b"later", timeout=10) == b"d:later", _changed("a reply from another thread")
    error = _rpc_error(direct, b"fail", timeout=10)
    assert (error.code(), error.details()) == (grpc.StatusCode.NOT_FOUND, "missing"), (
        _changed("a DirectUnary status"))


def test_a_loop_unary_call_round_trips(channel):
    unary = channel.unary_unary("/probe.P/Unary")
    assert unary(b"u", metadata=(("x-probe", "!"),), timeout=10) == b"u!", (
        _changed("a LoopUnary call, its metadata or its compressed reply"))
    error = _rpc_error(unary, b"abort", timeout=10)
    assert (error.code(), error.details()) == (grpc.StatusCode.FAILED_PRECONDITION,
                                               "aborted"), _changed("a LoopUnary abort")


def test_a_loop_stream_call_round_trips(channel):
    stream = channel.stream_stream("/probe.P/Stream")
    assert list(stream(iter([b"1", b"2"]), timeout=10)) == [b"s:1", b"s:2"], (
        _changed("a LoopStream's reads and writes"))


def test_an_unregistered_method_is_taken_by_request_call(channel):
    error = _rpc_error(channel.unary_unary("/probe.P/Nope"), b"", timeout=10)
    assert error.code() == grpc.StatusCode.UNIMPLEMENTED, _changed("Server.request_call")
