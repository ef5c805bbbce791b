"""The RPCs around inference over a real server: health, metadata, configuration,
statistics, the model repository, shared memory, trace and log settings."""

from __future__ import annotations

import json
import mmap

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

pytest_plugins = ["conftest_grpc"]


@pytest.fixture(scope="module")
def client(grpc_server):
    with grpcclient.InferenceServerClient(grpc_server.url) as client:
        yield client


@pytest.fixture(scope="module")
def stub(grpc_server):
    with grpc.insecure_channel(grpc_server.url) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


def _failure(call, *args, **kwargs) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as raised:
        call(*args, **kwargs)
    return raised.value


def test_health(client):
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("add_sub") and client.is_model_ready("add_sub", "1")
    assert not client.is_model_ready("add_sub", "2")
    assert not client.is_model_ready("no_such_model")


def test_the_standard_grpc_health_check_serves(grpc_server):
    with grpc.insecure_channel(grpc_server.url) as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check")
        assert check(b"", timeout=5) == b"\x08\x01"  # status: SERVING


def test_server_and_model_metadata(client):
    metadata = client.get_server_metadata()
    assert metadata.name == "triton" and metadata.version
    assert {"statistics", "model_repository", "system_shared_memory", "classification"} <= set(
        metadata.extensions)
    model = client.get_model_metadata("add_sub")
    assert model.name == "add_sub" and list(model.versions) == ["1"]
    assert model.platform == "python"
    assert [(t.name, t.datatype, list(t.shape)) for t in model.inputs] == [
        ("INPUT0", "FP32", [-1, 4]), ("INPUT1", "FP32", [-1, 4])]
    assert [t.name for t in model.outputs] == ["OUTPUT0", "OUTPUT1"]
    error = _failure(client.get_model_metadata, "no_such_model")
    assert error.status() == "StatusCode.NOT_FOUND"
    assert error.message() == "Request for unknown model: 'no_such_model' is not found"


def test_model_config_is_the_model_config_protobuf(client):
    config = client.get_model_config("classifier").config
    assert isinstance(config, model_config_pb2.ModelConfig)
    assert config.name == "classifier" and config.max_batch_size == 4
    assert config.output[0].label_filename == "labels.txt"
    assert config.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_CPU
    as_json = client.get_model_config("counter", as_json=True)["config"]
    assert as_json["model_transaction_policy"]["decoupled"] is True
    assert _failure(client.get_model_config, "nope").status() == "StatusCode.NOT_FOUND"


def test_statistics_count_inferences(client):
    before = client.get_inference_statistics("add_sub", "1").model_stats[0]
    a = np.ones((2, 4), np.float32)
    inputs = [grpcclient.InferInput("INPUT0", [2, 4], "FP32"),
              grpcclient.InferInput("INPUT1", [2, 4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    client.infer("add_sub", inputs)
    after = client.get_inference_statistics("add_sub", "1").model_stats[0]
    assert after.name == "add_sub" and after.version == "1"
    assert after.inference_count == before.inference_count + 2
    assert after.execution_count == before.execution_count + 1
    success = after.inference_stats.success
    assert success.count == before.inference_stats.success.count + 1 and success.ns > 0
    assert any(batch.batch_size == 2 for batch in after.batch_stats)
    everything = client.get_inference_statistics()
    assert {"add_sub", "mirror", "counter"} <= {s.name for s in everything.model_stats}
    unknown = _failure(client.get_inference_statistics, "nope")  # as Triton 2.51 answers
    assert unknown.status() == "StatusCode.INVALID_ARGUMENT"
    assert unknown.message() == "requested model 'nope' is not available"


def test_repository_index_unload_and_load(client):
    index = {(m.name, m.version): m.state for m in client.get_model_repository_index().models}
    assert index[("spare", "1")] == "READY"
    client.unload_model("spare")
    assert not client.is_model_ready("spare")
    ready = {m.name for m in client.get_model_repository_index(as_json=False).models
             if m.state == "READY"}
    assert "spare" not in ready
    client.load_model("spare")
    assert client.is_model_ready("spare")
    client.unload_model("no_such_model")  # as in Triton: nothing to unload is no error


def test_load_with_a_config_override(client):
    config = client.get_model_config("spare", as_json=True)["config"]
    config["max_batch_size"] = 2
    client.load_model("spare", config=json.dumps(config))
    try:
        assert client.get_model_config("spare").config.max_batch_size == 2
        client.load_model("spare")  # as Triton 2.51: the unchanged folder keeps the override
        assert client.get_model_config("spare").config.max_batch_size == 2
    finally:
        config["max_batch_size"] = 8
        client.load_model("spare", config=json.dumps(config))
    assert client.get_model_config("spare").config.max_batch_size == 8


def test_load_reports_model_file_errors_and_refuses_unknown_parameters(client, stub):
    error = _failure(client.load_model, "spare", config="{}", files={"file:1/model.py": b"x"})
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    assert "load failed for model 'spare'" in error.message() and "NameError" in error.message()
    assert client.is_model_ready("spare")  # the failed reload left the serving version
    request = service_pb2.RepositoryModelLoadRequest(model_name="spare")
    request.parameters["colour"].string_param = "blue"
    with pytest.raises(grpc.RpcError) as raised:
        stub.RepositoryModelLoad(request)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details() == "unrecognized load parameter 'colour'."
    with pytest.raises(grpc.RpcError) as raised:
        stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(repository_name="elsewhere"))
    assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_trace_settings_are_reported_and_updated(client):
    settings = client.get_trace_settings(as_json=True)["settings"]
    assert settings["trace_level"]["value"] == ["OFF"]
    updated = client.update_trace_settings(settings={"trace_rate": "50"}, as_json=True)
    assert updated["settings"]["trace_rate"]["value"] == ["50"]
    model = client.update_trace_settings(model_name="add_sub",
                                         settings={"trace_count": "3"}, as_json=True)
    assert model["settings"]["trace_count"]["value"] == ["3"]
    cleared = client.update_trace_settings(model_name="add_sub", settings={"trace_count": None},
                                           as_json=True)
    assert cleared["settings"]["trace_count"]["value"] == ["-1"]
    client.update_trace_settings(settings={"trace_rate": None})
    error = _failure(client.get_trace_settings, model_name="no_such_model")
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    # no trace file: tracing cannot be turned on (Triton's check)
    error = _failure(client.update_trace_settings, settings={"trace_level": ["TIMESTAMPS"]})
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    assert "trace file name is not given" in error.message()
    # where a server writes is not the network's to choose
    for setting in ({"trace_file": "/tmp/elsewhere.json"}, {"trace_file": None}):
        error = _failure(client.update_trace_settings, settings=setting)
        assert error.status() == "StatusCode.UNIMPLEMENTED"
    assert client.get_trace_settings(as_json=True)["settings"]["trace_file"]["value"] == [""]


def test_log_settings_are_reported_and_updated(client, stub):
    settings = client.get_log_settings(as_json=True)["settings"]
    assert settings["log_info"]["bool_param"] is True
    assert settings["log_format"]["string_param"] == "default"
    updated = client.update_log_settings({"log_verbose_level": 2, "log_warning": False},
                                         as_json=True)["settings"]
    assert updated["log_verbose_level"]["uint32_param"] == 2
    assert updated["log_warning"]["bool_param"] is False
    client.update_log_settings({"log_verbose_level": 0, "log_warning": True})
    request = service_pb2.LogSettingsRequest()
    request.settings["log_info"].string_param = "yes"  # tritonclient would not send this
    with pytest.raises(grpc.RpcError) as raised:
        stub.LogSettings(request)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details() == "expect boolean for 'log_info'"


def test_system_shared_memory_registration(client):
    # a region's offset is a multiple of the page size: Triton maps the region itself
    region = shm.create_shared_memory_region("grpc_admin", "/infercore_grpc_admin",
                                             mmap.PAGESIZE + 64)
    try:
        client.register_system_shared_memory("grpc_admin", "/infercore_grpc_admin", 32,
                                             offset=mmap.PAGESIZE)
        status = client.get_system_shared_memory_status().regions["grpc_admin"]
        assert (status.key, status.offset, status.byte_size) == (
            "/infercore_grpc_admin", mmap.PAGESIZE, 32)
        error = _failure(client.register_system_shared_memory, "grpc_admin",
                         "/infercore_grpc_admin", 8)
        assert error.status() == "StatusCode.ALREADY_EXISTS"
        client.unregister_system_shared_memory("grpc_admin")
        assert "grpc_admin" not in client.get_system_shared_memory_status().regions
        error = _failure(client.get_system_shared_memory_status, region_name="grpc_admin")
        assert error.status() == "StatusCode.NOT_FOUND"
        error = _failure(client.register_system_shared_memory, "missing",
                         "/infercore_no_such_key", 8)
        assert error.status() == "StatusCode.INTERNAL"  # as Triton (shm_open failed)
    finally:
        client.unregister_system_shared_memory()
        shm.destroy_shared_memory_region(region)


def test_cuda_shared_memory_is_refused_on_a_host_without_gpus(client):
    error = _failure(client.register_cuda_shared_memory, "gpu", b"\x00" * 64, 0, 64)
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    # Triton built with GPU support, on a host without one: the IPC handle never opens
    assert error.message() == "failed to register shared memory region: invalid args"
    assert len(client.get_cuda_shared_memory_status().regions) == 0
    error = _failure(client.get_cuda_shared_memory_status, region_name="gpu")
    assert error.status() == "StatusCode.NOT_FOUND"
    client.unregister_cuda_shared_memory("gpu")  # nothing to unregister, as in Triton
