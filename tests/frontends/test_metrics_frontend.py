"""The metrics endpoint in-process: GET /metrics, keep-alive, errors, flags, lifecycle."""

from __future__ import annotations

import http.client

import pytest

from infercore import InvalidArgumentError, Options, Server
from infercore.cli import build_parser
from infercore.frontends import metrics as metrics_frontend
from infercore.frontends.metrics import MetricsFrontend


@pytest.fixture
def endpoint(tmp_path):
    (tmp_path / "models").mkdir()
    with Server(model_repository=tmp_path / "models") as server:
        frontend = MetricsFrontend(server, "127.0.0.1", 0)
        frontend.start()
        try:
            yield server, frontend
        finally:
            frontend.stop(5)


def test_serves_the_servers_metrics_with_keep_alive(endpoint):
    server, frontend = endpoint
    connection = http.client.HTTPConnection("127.0.0.1", frontend.port, timeout=10)
    try:
        for _ in range(2):  # one connection, two scrapes
            connection.request("GET", "/metrics")
            response = connection.getresponse()
            body = response.read().decode()
            assert response.status == 200
            assert response.getheader("Content-Type") == "text/plain; charset=utf-8"  # Triton's
            assert body == server.metrics()
        # any other path: an empty 200, as Triton's metrics server answers
        connection.request("GET", "/v2/health/ready")
        response = connection.getresponse()
        assert (response.status, response.read()) == (200, b"")
    finally:
        connection.close()


@pytest.mark.parametrize("method", ["POST", "HEAD", "PUT"])
def test_other_methods_are_refused(endpoint, method):
    _, frontend = endpoint
    connection = http.client.HTTPConnection("127.0.0.1", frontend.port, timeout=10)
    try:
        connection.request(method, "/metrics", body=b"x" if method != "HEAD" else None)
        response = connection.getresponse()
        assert response.status == 405
        if method != "HEAD":
            assert response.read() == b'{"error":"Method Not Allowed"}'
    finally:
        connection.close()


def test_stop_closes_the_port(tmp_path):
    (tmp_path / "models").mkdir()
    with Server(model_repository=tmp_path / "models") as server:
        frontend = MetricsFrontend(server, "127.0.0.1", 0)
        frontend.start()
        port = frontend.port
        frontend.stop(5)
        with pytest.raises(OSError):
            http.client.HTTPConnection("127.0.0.1", port, timeout=2).request("GET", "/metrics")
        with pytest.raises(InvalidArgumentError):
            frontend.start()  # a stopped endpoint does not restart


def test_a_busy_port_fails_start(endpoint):
    server, frontend = endpoint
    with pytest.raises(OSError):
        MetricsFrontend(server, "127.0.0.1", frontend.port).start()


def test_flags_build_options_and_the_frontend():
    parser = build_parser()
    args = parser.parse_args(["serve", "--metrics-port", "9102", "--allow-cpu-metrics=false",
                              "--metrics-interval-ms", "500", "--metrics-config",
                              "summary_latencies=true", "--metrics-config",
                              "summary_quantiles=0.5:0.05"])
    fields = metrics_frontend.options_from_args(args)
    assert fields == {"metrics": True, "gpu_metrics": True, "cpu_metrics": False,
                      "metrics_interval": 500, "metrics_configuration": {
                          "": {"summary_latencies": "true",
                               "summary_quantiles": "0.5:0.05"}}}
    Options(**fields)
    frontend = metrics_frontend.from_args(None, args)  # type: ignore[arg-type]
    assert frontend is not None and frontend.port == 9102
    off = parser.parse_args(["serve", "--allow-metrics=false"])
    assert metrics_frontend.from_args(None, off) is None  # type: ignore[arg-type]
    assert metrics_frontend.options_from_args(off)["metrics"] is False
