"""The gRPC frontend's flags, options and lifecycle, in process (sync gRPC client)."""

from __future__ import annotations

import argparse
import os
import threading
import uuid

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from infercore import InvalidArgumentError, Server
from infercore.frontends import shm
from infercore.frontends.grpc import server as grpc_frontend
from infercore.frontends.grpc.server import GrpcFrontend, GrpcOptions
from infercore.frontends.shm import registry_for


def parse(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    grpc_frontend.add_arguments(parser)
    shm.add_arguments(parser)
    return parser.parse_args(list(flags))


def test_flags_default_to_tritonservers_values():
    args = parse()
    assert (args.allow_grpc, args.grpc_port, args.grpc_address) == (True, 8001, "0.0.0.0")
    assert args.grpc_keepalive_time == 7_200_000 and args.grpc_keepalive_timeout == 20_000
    assert args.grpc_keepalive_permit_without_calls is False
    assert args.grpc_http2_max_pings_without_data == 2
    assert args.grpc_http2_min_recv_ping_interval_without_data == 300_000
    assert args.grpc_http2_max_ping_strikes == 2
    assert args.grpc_infer_response_compression_level == "none"
    assert args.grpc_max_message_size == 2**31 - 1


def test_flags_become_options(add_sub_repo):
    args = parse("--grpc-port", "0", "--grpc-address", "127.0.0.1", "--grpc-use-ssl", "true",
                 "--grpc-server-cert", "c.pem", "--grpc-server-key", "k.pem",
                 "--grpc-keepalive-time", "1000", "--grpc-keepalive-permit-without-calls", "1",
                 "--grpc-max-connection-age", "60000", "--grpc-max-message-size", "1024",
                 "--grpc-infer-response-compression-level", "high",
                 "--grpc-infer-allocation-pool-size", "8", "--reuse-grpc-port", "true")
    frontend = grpc_frontend.from_args(Server(model_repository=add_sub_repo.path), args)
    assert isinstance(frontend, GrpcFrontend)
    options = frontend.options
    assert (options.port, options.address, options.use_ssl) == (0, "127.0.0.1", True)
    assert (options.server_cert, options.server_key) == ("c.pem", "k.pem")
    assert options.response_compression == "high" and options.reuse_port is True
    channel_args = dict(options.channel_args())
    assert channel_args["grpc.keepalive_time_ms"] == 1000
    assert channel_args["grpc.keepalive_permit_without_calls"] == 1
    assert channel_args["grpc.max_connection_age_ms"] == 60000
    assert "grpc.max_connection_age_grace_ms" not in channel_args  # unset: no limit
    assert channel_args["grpc.max_receive_message_length"] == 1024
    assert channel_args["grpc.so_reuseport"] == 1


def test_allow_grpc_false_builds_no_frontend(add_sub_repo):
    args = parse("--allow-grpc", "false")
    assert grpc_frontend.from_args(Server(model_repository=add_sub_repo.path), args) is None


@pytest.mark.parametrize("flags", [["--grpc-infer-response-compression-level", "max"],
                                   ["--grpc-port", "4294967296"],
                                   ["--grpc-keepalive-time", "zero"],
                                   # one transport: the flag that chose one is gone
                                   ["--grpc-transport", "aio"]])
def test_invalid_flag_values_are_refused(flags, capsys):
    with pytest.raises(SystemExit):
        parse(*flags)


@pytest.fixture
def server(add_sub_repo):
    # explicit model control: the test loads and unloads through the frontend
    with Server(model_repository=add_sub_repo.path, model_control_mode="explicit",
                startup_models=["*"]) as server:
        yield server


def _frontend_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("infercore-grpc")]


def test_start_listens_on_a_free_port_and_stop_joins_its_threads(server):
    frontend = GrpcFrontend(server, GrpcOptions(address="127.0.0.1", port=0))
    frontend.start()
    try:
        assert frontend.port > 0 and "infercore-grpc" in _frontend_threads()
        # gRPC core's queue is polled on a thread of its own
        assert "infercore-grpc-cq" in _frontend_threads()
        with grpc.insecure_channel(f"127.0.0.1:{frontend.port}") as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            assert stub.ServerLive(service_pb2.ServerLiveRequest(), timeout=10).live
            request = service_pb2.ModelInferRequest(model_name="add_sub")
            for name in ("INPUT0", "INPUT1"):
                request.inputs.add(name=name, datatype="FP32", shape=[1, 4])
                request.raw_input_contents.append(np.ones(4, np.float32).tobytes())
            response = stub.ModelInfer(request, timeout=10)
            assert np.frombuffer(response.raw_output_contents[0], np.float32).tolist() == [2] * 4
            # model load / unload run on the frontend's own pool
            stub.RepositoryModelUnload(
                service_pb2.RepositoryModelUnloadRequest(model_name="add_sub"), timeout=30)
            assert not stub.ModelReady(service_pb2.ModelReadyRequest(name="add_sub")).ready
            stub.RepositoryModelLoad(
                service_pb2.RepositoryModelLoadRequest(model_name="add_sub"), timeout=30)
            assert stub.ModelReady(service_pb2.ModelReadyRequest(name="add_sub")).ready
    finally:
        frontend.stop(timeout=5)
    assert _frontend_threads() == []
    frontend.stop(timeout=5)  # stopping twice is harmless
    with pytest.raises(Exception, match="stopped"):
        frontend.start()


def test_a_port_in_use_raises_os_error(server):
    first = GrpcFrontend(server, GrpcOptions(address="127.0.0.1", port=0))
    first.start()
    try:
        second = GrpcFrontend(server, GrpcOptions(address="127.0.0.1", port=first.port))
        with pytest.raises(OSError, match="already in use"):
            second.start()
    finally:
        first.stop(timeout=5)
    assert _frontend_threads() == []


def test_missing_tls_files_fail_the_start(server, tmp_path):
    frontend = GrpcFrontend(server, GrpcOptions(
        address="127.0.0.1", port=0, use_ssl=True, server_cert=str(tmp_path / "none.pem"),
        server_key=str(tmp_path / "none.key")))
    with pytest.raises(OSError):
        frontend.start()
    assert _frontend_threads() == []


@pytest.mark.parametrize("options", [
    GrpcOptions(use_ssl=True, server_cert="c.pem"),
    GrpcOptions(use_ssl_mutual=True, server_cert="c.pem", server_key="k.pem"),
])
def test_incomplete_tls_flags_are_refused_with_a_clear_error(server, options):
    frontend = GrpcFrontend(server, options)
    with pytest.raises(InvalidArgumentError, match="needs --grpc-"):
        frontend.start()
    assert _frontend_threads() == []


def test_http_and_grpc_share_the_servers_shared_memory_registry(server):
    key = f"infercore-test-{uuid.uuid4().hex}"
    fd = os.open(f"/dev/shm/{key}", os.O_CREAT | os.O_RDWR, 0o600)
    os.ftruncate(fd, 16)
    os.close(fd)
    registry_for(server).register("shared", key, 0, 16)  # as the HTTP frontend would
    frontend = GrpcFrontend(server, GrpcOptions(address="127.0.0.1", port=0,
                                                allow_client_shm=True))
    frontend.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{frontend.port}") as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            status = stub.SystemSharedMemoryStatus(
                service_pb2.SystemSharedMemoryStatusRequest(), timeout=10)
            assert status.regions["shared"].key == key
    finally:
        frontend.stop(timeout=5)
        registry_for(server).unregister("shared")
        os.unlink(f"/dev/shm/{key}")
