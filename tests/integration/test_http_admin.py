"""Health, metadata, statistics, repository, logging, trace and shared memory endpoints."""

from __future__ import annotations

import base64
import http.client
import json
import mmap

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

pytest_plugins = ["conftest_http"]


@pytest.fixture(scope="module")
def client(http_server):
    with httpclient.InferenceServerClient(http_server.url) as client:
        yield client


def _post(server, path: str, body: object = None) -> tuple[int, dict | list | None]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("POST", path, b"" if body is None else json.dumps(body))
    response = conn.getresponse()
    data = response.read()
    return response.status, (json.loads(data) if data else None)


def _add_sub(client: httpclient.InferenceServerClient, model: str = "add_sub") -> None:
    inputs = [httpclient.InferInput(n, [1, 4], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
    client.infer(model, inputs)


def test_server_is_live_and_ready_and_lists_its_extensions(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    extensions = client.get_server_metadata()["extensions"]
    for name in ("binary_tensor_data", "classification", "model_repository",
                 "system_shared_memory", "statistics", "logging", "trace", "parameters"):
        assert name in extensions


def test_model_metadata_config_and_readiness(client):
    metadata = client.get_model_metadata("add_sub", "1")
    assert metadata["inputs"][0] == {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]}
    assert client.get_model_config("add_sub")["max_batch_size"] == 8
    assert client.is_model_ready("add_sub")
    assert client.is_model_ready("add_sub", "1")
    assert not client.is_model_ready("add_sub", "2")
    assert not client.is_model_ready("missing")


def test_unknown_model_metadata_is_not_found(client):
    with pytest.raises(InferenceServerException) as caught:
        client.get_model_metadata("missing")
    assert caught.value.status() == "404"
    assert "Request for unknown model: 'missing' is not found" in caught.value.message()


def test_statistics_count_inferences_per_model_and_for_all(client):
    before = client.get_inference_statistics("add_sub")["model_stats"][0]["inference_count"]
    _add_sub(client)
    _add_sub(client)

    stats = client.get_inference_statistics("add_sub", "1")["model_stats"]
    everything = client.get_inference_statistics()["model_stats"]

    assert stats[0]["inference_count"] == before + 2
    assert stats[0]["inference_stats"]["success"]["count"] >= 2
    assert {"add_sub", "identity", "classifier"} <= {s["name"] for s in everything}


def test_repository_index_lists_every_model_and_ready_ones_only_on_request(client, http_server):
    index = client.get_model_repository_index()
    assert {"name": "add_sub", "version": "1", "state": "READY"} in index

    status, ready = _post(http_server, "/v2/repository/index", {"ready": True})
    assert status == 200 and all(entry["state"] == "READY" for entry in ready)


def test_unload_and_load_with_a_config_override(client):
    client.unload_model("spare")
    assert not client.is_model_ready("spare")

    override = json.loads(json.dumps(client.get_model_config("add_sub")))
    override["name"] = "spare"
    override["max_batch_size"] = 2
    client.load_model("spare", config=json.dumps(override))

    assert client.is_model_ready("spare")
    assert client.get_model_config("spare")["max_batch_size"] == 2
    _add_sub(client, "spare")
    client.load_model("spare")  # as Triton 2.51: the unchanged folder keeps the override
    assert client.get_model_config("spare")["max_batch_size"] == 2
    override["max_batch_size"] = 8
    client.load_model("spare", config=json.dumps(override))
    assert client.get_model_config("spare")["max_batch_size"] == 8


def test_load_of_an_unknown_model_fails(client):
    with pytest.raises(InferenceServerException, match="failed to load 'missing'"):
        client.load_model("missing")


def test_load_with_model_files_needs_a_config(http_server):
    status, body = _post(http_server, "/v2/repository/models/spare/load",
                         {"parameters": {"file:1/model.py": base64.b64encode(b"x").decode()}})
    # refused at Triton's poll: its whole answer (the reason is in the server's log)
    assert (status, body) == (500, {"error": "failed to load 'spare', failed to poll from "
                                             "model repository"})


def test_repository_names_in_the_path_are_unsupported(http_server):
    status, body = _post(http_server, "/v2/repository/elsewhere/models/spare/load")
    assert status == 501
    assert body == {"error": "'repository_name' specification is not supported"}


def test_log_settings_read_and_change(client):
    settings = client.get_log_settings()
    assert set(settings) == {"log_file", "log_info", "log_warning", "log_error",
                             "log_verbose_level", "log_format"}

    updated = client.update_log_settings({"log_verbose_level": 1, "log_info": True})
    assert updated["log_verbose_level"] == 1 and updated["log_info"] is True
    client.update_log_settings({"log_verbose_level": 0})


def test_log_file_cannot_change_over_the_network(client):
    with pytest.raises(InferenceServerException, match="log file location can not be updated"):
        client.update_log_settings({"log_file": "/tmp/elsewhere.log"})


def test_log_settings_with_a_wrong_type_are_refused(http_server):
    status, body = _post(http_server, "/v2/logging", {"log_verbose_level": "loud"})
    assert status == 500 and "unsigned-integer" in body["error"]  # Triton's status


def test_trace_settings_global_and_per_model(client):
    assert client.get_trace_settings()["trace_level"] == ["OFF"]

    updated = client.update_trace_settings(settings={"trace_rate": "5"})
    assert updated["trace_rate"] == "5"
    per_model = client.update_trace_settings("add_sub", {"trace_rate": "7",
                                                         "trace_count": "4"})
    assert per_model["trace_rate"] == "7" and per_model["trace_count"] == "4"
    assert client.get_trace_settings()["trace_rate"] == "5"

    cleared = client.update_trace_settings("add_sub", {"trace_rate": None,
                                                       "trace_count": None})
    assert cleared["trace_rate"] == "5" and cleared["trace_count"] == "-1"
    client.update_trace_settings(settings={"trace_rate": None})


def test_trace_settings_of_an_unknown_model_are_refused(client):
    with pytest.raises(InferenceServerException, match="Request for unknown model : missing"):
        client.get_trace_settings("missing")


def test_trace_file_cannot_change_over_the_network(client):
    with pytest.raises(InferenceServerException, match="trace file location can not be"):
        client.update_trace_settings(settings={"trace_file": "/tmp/trace.json"})


def test_system_shared_memory_register_status_unregister(client):
    # a region's offset is a multiple of the page size: Triton maps the region itself
    region = shm.create_shared_memory_region("status_region", "/infercore_status",
                                             mmap.PAGESIZE + 64)
    try:
        client.register_system_shared_memory("status_region", "/infercore_status", 32,
                                             offset=mmap.PAGESIZE)
        status = client.get_system_shared_memory_status("status_region")
        assert status == [{"name": "status_region", "key": "/infercore_status",
                           "offset": mmap.PAGESIZE, "byte_size": 32}]
        with pytest.raises(InferenceServerException, match="already in manager"):
            client.register_system_shared_memory("status_region", "/infercore_status", 8)
        client.unregister_system_shared_memory("status_region")
        assert client.get_system_shared_memory_status() == []
    finally:
        shm.destroy_shared_memory_region(region)


def test_unknown_shared_memory_region_status_is_not_found(client):
    with pytest.raises(InferenceServerException) as caught:
        client.get_system_shared_memory_status("nowhere")
    assert caught.value.status() == "404"


def test_registering_a_missing_shared_memory_key_fails(client):
    with pytest.raises(InferenceServerException, match="Unable to open shared memory region"):
        client.register_system_shared_memory("ghost", "/infercore_does_not_exist", 8)


def test_register_without_byte_size_is_refused(http_server):
    status, body = _post(http_server, "/v2/systemsharedmemory/region/r/register",
                         {"key": "/k"})
    assert status == 400
    assert body == {"error": "Shared memory register request has no 'byte_size' field"}


def test_cuda_shared_memory_answers_as_a_server_without_gpus(client, http_server):
    assert client.get_cuda_shared_memory_status() == []
    # Triton built with GPU support, on a host without one: the IPC handle never opens
    with pytest.raises(InferenceServerException,
                       match="failed to register shared memory region: invalid args"):
        client.register_cuda_shared_memory("gpu", b"\0" * 64, 0, 64)
    client.unregister_cuda_shared_memory()
    status, _ = _post(http_server, "/v2/cudasharedmemory/region/gpu/unregister")
    assert status == 200
