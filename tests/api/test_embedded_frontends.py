"""HTTP, gRPC and metrics frontends started from an in-process Server, used by tritonclient."""

from __future__ import annotations

import socket
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from infercore import (
    AlreadyExistsError,
    Endpoint,
    InvalidArgumentError,
    Server,
    UnavailableError,
)

A = np.array([[1.0, 2.0, 3.0, 4.0]], np.float32)
B = np.ones((1, 4), np.float32)


@pytest.fixture
def server(add_sub_repo):
    with Server(model_repository=add_sub_repo.path) as running:
        yield running


def http_infer(url: str) -> np.ndarray:
    with httpclient.InferenceServerClient(url) as client:
        inputs = [httpclient.InferInput("INPUT0", [1, 4], "FP32"),
                  httpclient.InferInput("INPUT1", [1, 4], "FP32")]
        inputs[0].set_data_from_numpy(A)
        inputs[1].set_data_from_numpy(B)
        return client.infer("add_sub", inputs).as_numpy("OUTPUT0")


def grpc_infer(url: str) -> np.ndarray:
    with grpcclient.InferenceServerClient(url) as client:
        inputs = [grpcclient.InferInput("INPUT0", [1, 4], "FP32"),
                  grpcclient.InferInput("INPUT1", [1, 4], "FP32")]
        inputs[0].set_data_from_numpy(A)
        inputs[1].set_data_from_numpy(B)
        return client.infer("add_sub", inputs).as_numpy("OUTPUT1")


def port_is_free(port: int) -> bool:
    """Whether a new listener can bind the port (nothing listens there any more)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
            probe.listen()
        except OSError:
            return False
        return True


def test_http_grpc_and_metrics_serve_the_in_process_server(server):
    http = server.serve_http(address="127.0.0.1", port=0)
    grpc = server.serve_grpc(address="127.0.0.1", port=0)
    metrics = server.serve_metrics(address="127.0.0.1", port=0)
    endpoints = (http, grpc, metrics)
    assert all(isinstance(e, Endpoint) and e.running and e.port > 0 for e in endpoints)
    assert [e.kind for e in endpoints] == ["http", "grpc", "metrics"]
    assert http.url == f"127.0.0.1:{http.port}"
    assert http_infer(http.url).tolist() == (A + B).tolist()
    assert grpc_infer(grpc.url).tolist() == (A - B).tolist()
    # the requests went through the same engine the in-process API uses
    (stats,) = server.model("add_sub").statistics()
    assert stats.inference_count == 2
    with urllib.request.urlopen(f"http://{metrics.url}/metrics", timeout=30) as reply:
        assert 'nv_inference_count{model="add_sub",version="1"} 2' in reply.read().decode()
    for endpoint in endpoints:
        endpoint.stop()
        assert not endpoint.running and port_is_free(endpoint.port)
    with pytest.raises((InferenceServerException, ConnectionRefusedError)):
        http_infer(http.url)
    assert server.ready()  # the server goes on without its frontends
    assert server.model("add_sub").infer({"INPUT0": A, "INPUT1": B}).result().error is None


def test_one_endpoint_of_a_kind_at_a_time(server):
    with server.serve_http(address="127.0.0.1", port=0) as first:
        with pytest.raises(AlreadyExistsError, match="already serving at 127.0.0.1"):
            server.serve_http(address="127.0.0.1", port=0)
        assert first.running  # the refused start did not touch it
    assert not first.running and port_is_free(first.port)
    with server.serve_http(address="127.0.0.1", port=0) as second:
        assert http_infer(second.url).tolist() == (A + B).tolist()
    first.stop()  # stopping twice does nothing


def test_stopping_the_server_stops_its_endpoints(add_sub_repo):
    server = Server(model_repository=add_sub_repo.path).start()
    http = server.serve_http(address="127.0.0.1", port=0)
    grpc = server.serve_grpc(address="127.0.0.1", port=0)
    metrics = server.serve_metrics(address="127.0.0.1", port=0)
    assert grpc_infer(grpc.url).tolist() == (A - B).tolist()
    server.stop()
    for endpoint in (http, grpc, metrics):
        assert not endpoint.running and port_is_free(endpoint.port)
    with pytest.raises(InferenceServerException):
        grpc_infer(grpc.url)
    with pytest.raises(UnavailableError, match="server is not running"):
        server.serve_http(address="127.0.0.1", port=0)


def test_a_busy_port_is_a_clear_error_and_the_server_keeps_serving(server):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(UnavailableError, match=f"failed to start the HTTP frontend at "
                                                   f"127.0.0.1:{port}"):
            server.serve_http(address="127.0.0.1", port=port)
    with server.serve_http(address="127.0.0.1", port=0) as http:  # the slot was freed
        assert http_infer(http.url).tolist() == (A + B).tolist()


@pytest.mark.parametrize(("start", "message"), [
    (lambda s: s.serve_http(port=70000), r"port must be an integer in \[0, 65535\]"),
    (lambda s: s.serve_grpc(port="8001"), "port must be an integer"),
    (lambda s: s.serve_http(port=0, threads=4), "unknown HTTP frontend setting 'threads'"),
    (lambda s: s.serve_grpc(port=0, response_compression="extreme"),
     "invalid gRPC response compression level 'extreme'"),
    (lambda s: s.serve_http(port=0, thread_count=0), "invalid HTTP frontend settings"),
    (lambda s: s.serve_http(port=0, busy_poll_us=-1),
     "invalid HTTP frontend settings: busy_poll_us must be a whole number of microseconds "
     "from 0 .off. to 1000000, not -1"),
    (lambda s: s.serve_http(port=0, busy_poll_us=10**7), "to 1000000, not 10000000"),
    (lambda s: s.serve_http(port=0, busy_poll_us="200"), "not '200'"),
])
def test_bad_frontend_settings_are_refused(server, start, message):
    with pytest.raises(InvalidArgumentError, match=message):
        start(server)
    with server.serve_http(address="127.0.0.1", port=0):  # nothing was left registered
        pass


def test_frontend_settings_reach_the_frontend(server):
    with server.serve_http(address="127.0.0.1", port=0, max_input_size=16) as http:
        with pytest.raises(InferenceServerException) as refused:
            http_infer(http.url)  # two 16-byte tensors: a body over 16 bytes
        assert "exceeds the maximum allowed value of 16 bytes" in refused.value.message()
    with server.serve_http(address="127.0.0.1", port=0) as http:
        assert http_infer(http.url).tolist() == (A + B).tolist()
