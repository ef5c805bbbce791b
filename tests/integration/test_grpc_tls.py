"""TLS (server-only and mutual) and compressed responses against real servers, with a
certificate authority and certificates made by openssl for this test only."""

from __future__ import annotations

import queue
import shutil
import subprocess
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

pytest_plugins = ["conftest_grpc"]

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _issue(name: str, subject: str, extensions: str, cwd: Path) -> None:
    """A P-256 key and a certificate for it, signed by the test CA."""
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=cwd)
    (cwd / f"{name}.ext").write_text(extensions)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "1", "-out", f"{name}.crt", "-extfile", f"{name}.ext",
             cwd=cwd)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A test CA, a server certificate for localhost / 127.0.0.1, and a client one."""
    path = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
             "-subj", "/CN=infercore test CA", cwd=path)
    _issue("server", "/CN=localhost",
           "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n", path)
    _issue("client", "/CN=infercore test client", "extendedKeyUsage=clientAuth\n", path)
    return path


def _credentials(pki: Path, *, client_cert: bool = False) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=(pki / "ca.crt").read_bytes(),
        private_key=(pki / "client.key").read_bytes() if client_cert else None,
        certificate_chain=(pki / "client.crt").read_bytes() if client_cert else None)


def _server_flags(pki: Path, *extra: str) -> list[str]:
    return ["--grpc-use-ssl", "true", "--grpc-server-cert", str(pki / "server.crt"),
            "--grpc-server-key", str(pki / "server.key"), *extra]


def _add_sub(client: grpcclient.InferenceServerClient, **kwargs) -> np.ndarray:
    a = np.arange(4, dtype=np.float32).reshape(1, 4)
    inputs = [grpcclient.InferInput("INPUT0", [1, 4], "FP32"),
              grpcclient.InferInput("INPUT1", [1, 4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    return client.infer("add_sub", inputs, **kwargs).as_numpy("OUTPUT0")


@pytest.fixture(scope="module")
def tls_server(grpc_serve, pki):
    return grpc_serve(*_server_flags(pki, "--grpc-infer-response-compression-level", "high"),
                      credentials=_credentials(pki))


@pytest.fixture(scope="module")
def mutual_tls_server(grpc_serve, pki):
    flags = _server_flags(pki, "--grpc-use-ssl-mutual", "true", "--grpc-root-cert",
                          str(pki / "ca.crt"), "--grpc-infer-response-compression-level", "low")
    return grpc_serve(*flags, credentials=_credentials(pki, client_cert=True))


def test_tls_clients_are_served_with_compressed_responses(tls_server, pki):
    with grpcclient.InferenceServerClient(
            tls_server.url, ssl=True, root_certificates=str(pki / "ca.crt")) as client:
        assert client.is_server_ready()
        np.testing.assert_array_equal(_add_sub(client), np.arange(4).reshape(1, 4) * 2)
        np.testing.assert_array_equal(_add_sub(client, compression_algorithm="deflate"),
                                      np.arange(4).reshape(1, 4) * 2)


def test_plaintext_clients_are_refused_by_a_tls_server(tls_server):
    with grpcclient.InferenceServerClient(tls_server.url) as client:
        with pytest.raises(InferenceServerException) as raised:
            client.is_server_live(client_timeout=5)
    assert raised.value.status() == "StatusCode.UNAVAILABLE"


def test_mutual_tls_requires_a_client_certificate(mutual_tls_server, pki):
    with grpcclient.InferenceServerClient(
            mutual_tls_server.url, ssl=True, root_certificates=str(pki / "ca.crt"),
            private_key=str(pki / "client.key"),
            certificate_chain=str(pki / "client.crt")) as client:
        np.testing.assert_array_equal(_add_sub(client), np.arange(4).reshape(1, 4) * 2)
    with grpcclient.InferenceServerClient(
            mutual_tls_server.url, ssl=True, root_certificates=str(pki / "ca.crt")) as client:
        with pytest.raises(InferenceServerException) as raised:
            client.is_server_live(client_timeout=5)
    assert raised.value.status() == "StatusCode.UNAVAILABLE"


def test_streams_work_over_tls_with_compression(tls_server, pki):
    results: queue.Queue = queue.Queue()
    with grpcclient.InferenceServerClient(
            tls_server.url, ssl=True, root_certificates=str(pki / "ca.crt")) as client:
        client.start_stream(callback=lambda result, error: results.put((result, error)),
                            compression_algorithm="gzip")
        try:
            count = grpcclient.InferInput("COUNT", [1], "INT32")
            count.set_data_from_numpy(np.array([3], np.int32))
            client.async_stream_infer("counter", [count], request_id="tls")
            got = [results.get(timeout=10) for _ in range(3)]
        finally:
            client.stop_stream()
    assert [int(result.as_numpy("INDEX")[0]) for result, _ in got] == [0, 1, 2]
