"""The SageMaker frontend in process: its settings from the environment, how an archive
folder is split into a repository and a model, and the inference-type switch."""

from __future__ import annotations

import http.client
import json

import pytest
from sample_models import ADD_SUB_CONFIG, ADD_SUB_PY

from infercore import Server
from infercore.frontends.http.server import HttpOptions
from infercore.frontends.sagemaker import SageMakerFrontend, SageMakerSettings, split_model_url

ENSEMBLE = 'name: "pipe"\nplatform: "ensemble"\n'


def test_settings_come_from_sagemakers_variables():
    assert SageMakerSettings.from_environment({}) == SageMakerSettings(
        "unspecified_SAGEMAKER_TRITON_DEFAULT_MODEL_NAME", "ready", "infer")
    assert SageMakerSettings.from_environment({
        "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "m", "SAGEMAKER_TRITON_PING_MODE": "live",
        "SAGEMAKER_TRITON_INFERENCE_TYPE": "generate"}) == SageMakerSettings(
            "m", "live", "generate")


def test_an_archive_folder_is_the_repository_of_its_ensemble_or_last_model(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert split_model_url(str(tmp_path)) == (str(tmp_path), "b")
    (tmp_path / "a" / "config.pbtxt").write_text(ENSEMBLE)
    assert split_model_url(str(tmp_path)) == (str(tmp_path), "a")


def test_a_config_at_the_archive_root_needs_sagemakers_layout(tmp_path):
    (tmp_path / "config.pbtxt").write_text('name: "m"\n')
    assert split_model_url(str(tmp_path)) == ("", "")  # not /opt/ml/models/<hash>/model


@pytest.fixture
def server(repo):
    repo.add_model("add_sub", config=ADD_SUB_CONFIG, model_py=ADD_SUB_PY)
    with Server(model_repository=repo.path) as server:
        yield server


def _post(port: int, path: str, body: bytes) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", path, body=body)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_an_unknown_inference_type_is_answered_400(server):
    settings = SageMakerSettings("add_sub", "ready", "classify")
    with SageMakerFrontend(server, HttpOptions(address="127.0.0.1", port=0),
                           settings) as frontend:
        status, body = _post(frontend.port, "/invocations", b"{}")
    assert status == 400
    assert json.loads(body) == {"error": "Server has invalid inference type 'classify'. "
                                         "Must be one of: infer, generate, generate_stream."}


def test_the_generate_inference_type_answers_as_the_generate_route(server):
    settings = SageMakerSettings("add_sub", "ready", "generate")
    with SageMakerFrontend(server, HttpOptions(address="127.0.0.1", port=0),
                           settings) as frontend:
        status, body = _post(frontend.port, "/invocations",
                             json.dumps({"INPUT0": [1, 2, 3, 4],
                                         "INPUT1": [1, 1, 1, 1]}).encode())
    assert status == 200, body
    answer = json.loads(body)
    assert answer["model_name"] == "add_sub"
    assert answer["OUTPUT0"] == [2, 3, 4, 5] and answer["OUTPUT1"] == [0, 1, 2, 3]
