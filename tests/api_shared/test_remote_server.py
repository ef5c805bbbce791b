"""What only a RemoteServer has: addresses and protocols, an unreachable or stopped
server, its own shutdown, async twins, many threads, and what a protocol cannot carry.

Against a real ``infercore serve`` process (conftest_api.py), over HTTP and gRPC.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import numpy as np
import pytest
from integration.serve_process import ServeProcess, free_port

from infercore import (
    CancelledError,
    InferRequest,
    InferResponse,
    InternalError,
    InvalidArgumentError,
    RemoteServer,
    Tensor,
    UnavailableError,
    UnsupportedError,
)

pytest_plugins = ["conftest_api"]

A = np.arange(4, dtype=np.float32).reshape(1, 4)
PROTOCOLS = ("http", "grpc")


def url_of(serve: ServeProcess, protocol: str) -> str:
    return serve.http_url if protocol == "http" else serve.grpc_url


@pytest.fixture(params=PROTOCOLS)
def remote(request: pytest.FixtureRequest, serve: ServeProcess) -> Iterator[RemoteServer]:
    server = RemoteServer(url_of(serve, request.param), request.param)
    yield server
    server.stop()


# -- addresses and protocols ------------------------------------------------------------------

def test_the_url_scheme_chooses_the_protocol() -> None:
    assert RemoteServer("http://127.0.0.1:8000").protocol == "http"
    assert RemoteServer("grpc://127.0.0.1:8001/").protocol == "grpc"
    assert RemoteServer("127.0.0.1:8001").protocol == "grpc"
    server = RemoteServer("127.0.0.1:8000", "HTTP")
    assert (server.protocol, server.url) == ("http", "127.0.0.1:8000")
    assert repr(server) == "RemoteServer(url='127.0.0.1:8000', protocol='http', created)"


@pytest.mark.parametrize(("url", "protocol", "message"), [
    ("127.0.0.1:8000", "websocket", "unknown protocol"),
    ("http://127.0.0.1:8000", "grpc", "another protocol"),
    ("ftp://127.0.0.1:8000", None, "scheme"),
    ("http://", None, "host:port"),
])
def test_a_bad_address_or_protocol_is_refused(url: str, protocol: str | None,
                                              message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        RemoteServer(url, protocol)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_unreachable_server_is_not_live_and_its_calls_are_unavailable(protocol: str
                                                                          ) -> None:
    with RemoteServer(f"127.0.0.1:{free_port()}", protocol) as server:
        assert server.live() is False
        assert server.ready() is False
        assert server.model("add_sub").ready() is False
        with pytest.raises(UnavailableError):
            server.metadata()
        with pytest.raises(UnavailableError):
            server.model("add_sub").infer(inputs={"INPUT0": A, "INPUT1": A}).result()
        with pytest.raises(UnavailableError, match="not ready"):
            server.start(wait_until_ready=True, timeout=0.2)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_waiting_until_ready(serve: ServeProcess, protocol: str) -> None:
    with RemoteServer(url_of(serve, protocol), protocol).start(wait_until_ready=True) as server:
        assert server.ready() is True


# -- lifecycle --------------------------------------------------------------------------------

def test_a_stopped_remote_server_refuses_calls(remote: RemoteServer) -> None:
    assert remote.live() is True  # started on first use
    remote.stop()
    remote.stop()  # idempotent
    assert "stopped" in repr(remote)
    with pytest.raises(UnavailableError, match="stopped"):
        remote.metadata()
    with pytest.raises(UnavailableError, match="stopped"):
        remote.model("add_sub").infer(inputs={"INPUT0": A, "INPUT1": A})


def test_stop_cancels_what_is_still_running(remote: RemoteServer, serve: ServeProcess
                                            ) -> None:
    running = remote.model("slow").infer(inputs={"SECONDS": np.array([600], np.float32)})
    remote.stop(timeout=0)
    with pytest.raises(CancelledError):
        running.result()
    # The server stopped the execution: its one instance runs the next request.
    with RemoteServer(url_of(serve, remote.protocol), remote.protocol) as other:
        slow = other.model("slow")
        assert slow.infer(inputs={"SECONDS": np.array([0], np.float32)}).result().error is None


def test_stop_lets_requests_in_flight_finish(remote: RemoteServer) -> None:
    running = remote.model("slow").infer(inputs={"SECONDS": np.array([0.05], np.float32)})
    remote.stop(timeout=60)
    assert running.result().outputs["SLEPT"].to_numpy()[0] == np.float32(0.05)


def test_many_threads_share_one_remote_server(remote: RemoteServer) -> None:
    model = remote.model("add_sub")
    failures: list[BaseException] = []

    def client(offset: int) -> None:
        try:
            for i in range(20):
                x = np.full((1, 4), offset * 100 + i, np.float32)
                out = model.infer(inputs={"INPUT0": x, "INPUT1": A}).result()
                np.testing.assert_array_equal(out.outputs["OUTPUT0"].to_numpy(), x + A)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_a_request_built_by_the_caller(remote: RemoteServer) -> None:
    request = InferRequest("add_sub", {"INPUT0": Tensor.from_numpy(A),
                                       "INPUT1": Tensor.from_numpy(A)}, id="built")
    response = remote.infer(request).result()
    assert response.request_id == "built"
    np.testing.assert_array_equal(response.outputs["OUTPUT0"].to_numpy(), A + A)


def test_a_callback_gets_every_response_and_the_final_flag(remote: RemoteServer) -> None:
    got: list[tuple[int | None, bool]] = []
    done = threading.Event()

    def callback(response: InferResponse | None, final: bool) -> None:
        index = None if response is None else int(response.outputs["INDEX"].to_numpy()[0])
        got.append((index, final))
        if final:
            done.set()

    request = InferRequest("counter", {"COUNT": Tensor.from_numpy(np.array([2], np.int32))})
    remote.infer(request, callback=callback)
    done.wait()
    assert got == [(0, False), (1, False), (None, True)]


def test_a_callback_cannot_block_on_its_own_server(remote: RemoteServer) -> None:
    seen: list[BaseException] = []
    done = threading.Event()

    def callback(response: InferResponse | None, final: bool) -> None:
        for blocking in (remote.metadata, remote.stop):
            try:
                blocking()
            except InternalError as exc:
                seen.append(exc)
        done.set()

    request = InferRequest("add_sub", {"INPUT0": Tensor.from_numpy(A),
                                       "INPUT1": Tensor.from_numpy(A)})
    remote.infer(request, callback=callback)
    done.wait()
    assert [str(e) for e in seen][0].startswith("a blocking RemoteServer call cannot run")
    assert "cannot be stopped from its own event loop" in str(seen[1])
    assert remote.live() is True  # neither deadlocked nor stopped it


def test_http_without_aiohttp_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "aiohttp", None)  # import aiohttp now fails
    server = RemoteServer(f"127.0.0.1:{free_port()}", "http")
    with pytest.raises(UnavailableError, match=r"infercore\[remote\]"):
        server.metadata()
    server.stop()


def test_a_result_timeout_leaves_the_request_running(remote: RemoteServer) -> None:
    stream = remote.model("slow").infer(inputs={"SECONDS": np.array([600], np.float32)})
    with pytest.raises(TimeoutError):
        stream.result(timeout=0.05)
    stream.cancel()
    with pytest.raises(CancelledError):
        stream.result()


# -- async context ---------------------------------------------------------------------------

async def test_an_async_context_starts_and_stops(serve: ServeProcess) -> None:
    async with RemoteServer(serve.grpc_url, "grpc") as server:
        response = await server.model("add_sub").async_infer(inputs={"INPUT0": A, "INPUT1": A})
        assert response.model == "add_sub"
    with pytest.raises(UnavailableError):
        server.metadata()


# -- what the wire cannot carry ---------------------------------------------------------------

def test_reserved_parameters_are_refused(remote: RemoteServer) -> None:
    with pytest.raises(InvalidArgumentError, match="reserved"):
        remote.model("add_sub").infer(inputs={"INPUT0": A, "INPUT1": A},
                                      parameters={"sequence_id": 3}).result()
    with pytest.raises(InvalidArgumentError, match="reserved"):
        remote.model("add_sub").infer(inputs={"INPUT0": A, "INPUT1": A},
                                      parameters={"triton_x": 1}).result()


def test_http_streams_cannot_carry_sequence_fields(serve: ServeProcess) -> None:
    with RemoteServer(serve.http_url, "http") as server:
        counter = server.model("counter")
        with pytest.raises(UnsupportedError, match="generate_stream"):
            counter.infer(inputs={"COUNT": np.array([1], np.int32)}, correlation_id=5).result()
        # the shape the generate schema would rebuild is [1]; [1, 1] cannot travel
        with pytest.raises(UnsupportedError, match="shape"):
            counter.infer(inputs={"COUNT": np.array([[1]], np.int32)}).result()
        assert [int(r.outputs["INDEX"].to_numpy()[0])
                for r in counter.infer(inputs={"COUNT": [2]})] == [0, 1]


def test_grpc_streams_carry_sequence_fields(serve: ServeProcess) -> None:
    with RemoteServer(serve.grpc_url, "grpc") as server:
        stream = server.model("counter").infer(inputs={"COUNT": np.array([2], np.int32)},
                                               correlation_id=5, priority=1, timeout=10**7)
        assert [int(r.outputs["INDEX"].to_numpy()[0]) for r in stream] == [0, 1]


def test_per_request_traces_are_in_process_only(remote: RemoteServer) -> None:
    with pytest.raises(UnsupportedError, match="in-process only"):
        remote.model("add_sub").infer(inputs={"INPUT0": A, "INPUT1": A}, trace=object())


def test_outputs_are_read_only_views_of_the_received_bytes(remote: RemoteServer) -> None:
    out = remote.model("add_sub").infer(inputs={"INPUT0": A, "INPUT1": A}).result()
    array = out.outputs["OUTPUT0"].to_numpy()
    assert not array.flags.writeable
    assert array.copy().flags.writeable
