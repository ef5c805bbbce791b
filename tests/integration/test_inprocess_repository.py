"""Repositories through the in-process API: versions, auto-complete, broken models."""

from __future__ import annotations

import os

import numpy as np
import pytest

from infercore import (
    InternalError,
    ModelState,
    NotFoundError,
    Server,
)


def _states(server: Server) -> dict[tuple[str, str], tuple[str, str]]:
    return {(e.name, e.version): (e.state.value, e.reason) for e in server.repository_index()}


def _infer_add_sub(server: Server, version: int = -1):
    a = np.ones((1, 4), np.float32)
    return server.model("add_sub", version).infer(inputs={"INPUT0": a, "INPUT1": a}).result()


def test_server_surface(add_sub_repo):
    server = Server(model_repository=add_sub_repo.path)
    assert not server.live()
    with server:
        assert server.live() and server.ready()
        meta = server.metadata()
        assert meta["name"] == "triton" and "statistics" in meta["extensions"]
        assert ("add_sub", 1) in server.models()
        model = server.model("add_sub")
        assert model.ready()
        assert model.metadata() == {
            "name": "add_sub",
            "versions": ["1"],
            "platform": "python",
            "inputs": [
                {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]},
                {"name": "INPUT1", "datatype": "FP32", "shape": [-1, 4]},
            ],
            "outputs": [
                {"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, 4]},
                {"name": "OUTPUT1", "datatype": "FP32", "shape": [-1, 4]},
            ],
        }
        config = model.config()
        assert config["name"] == "add_sub" and config["max_batch_size"] == 8
        assert config["input"][0]["dims"] == [4]
        assert config["instance_group"][0]["kind"] == "KIND_CPU"
        _infer_add_sub(server)
        stats = model.statistics()[0].to_dict()
        assert stats["name"] == "add_sub" and stats["version"] == "1"
        assert stats["inference_count"] == 1 and stats["execution_count"] == 1
        assert stats["inference_stats"]["success"]["count"] == 1
        assert stats["last_inference"] > 0
    assert not server.live()


def test_version_policy_latest_two(add_sub_repo, add_sub_source):
    config, model_py = add_sub_source
    add_sub_repo.add_model(
        "add_sub", config=config + "version_policy: { latest: { num_versions: 2 } }\n",
        model_py=model_py, versions=(1, 2, 3),
    )
    with Server(model_repository=add_sub_repo.path) as server:
        assert {k: v[0] for k, v in _states(server).items()} == {
            ("add_sub", "2"): "READY", ("add_sub", "3"): "READY"}
        assert _infer_add_sub(server).model_version == 3
        assert _infer_add_sub(server, 2).model_version == 2
        with pytest.raises(NotFoundError):
            _infer_add_sub(server, 1)
        assert server.model("add_sub").metadata()["versions"] == ["2", "3"]
        assert len(server.model("add_sub").statistics()) == 2


def test_version_policy_specific_logs_a_missing_version(repo, add_sub_source, caplog):
    config, model_py = add_sub_source
    repo.add_model("add_sub",
                   config=config + "version_policy: { specific: { versions: [1, 4] } }\n",
                   model_py=model_py, versions=(1, 2))
    with Server(model_repository=repo.path, exit_on_error=False) as server:
        states = _states(server)
        assert states[("add_sub", "1")][0] == "READY"
        assert ("add_sub", "4") not in states  # as Triton: logged, not in the index
        assert ("version 4 is specified for model 'add_sub', but the version directory is "
                "not present") in caplog.text
        assert ("add_sub", "2") not in states


def test_default_model_filename(repo, add_sub_source):
    config, model_py = add_sub_source
    repo.add_model("add_sub", config=config + 'default_model_filename: "impl.py"\n',
                   files={"1/impl.py": model_py})
    with Server(model_repository=repo.path) as server:
        assert _infer_add_sub(server).error is None


AUTO_COMPLETE_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.set_max_batch_size(4)
        auto_complete_model_config.add_input({"name": "IN", "data_type": "TYPE_INT32",
                                              "dims": [2]})
        auto_complete_model_config.add_output({"name": "OUT", "data_type": "TYPE_INT32",
                                               "dims": [2]})
        return auto_complete_model_config

    def initialize(self, args):
        self.name = args["model_name"]

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
                    "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * 2)])
                for r in requests]
"""


def test_model_without_config_is_auto_completed(repo):
    repo.add_model("doubler", model_py=AUTO_COMPLETE_PY)
    with Server(model_repository=repo.path) as server:
        config = server.model("doubler").config()
        assert config["backend"] == "python" and config["max_batch_size"] == 4
        assert [i["name"] for i in config["input"]] == ["IN"]
        out = server.model("doubler").infer(inputs={"IN": [[1, 2]]}).result()
        assert out.outputs["OUT"].to_numpy().tolist() == [[2, 4]]


BROKEN_MODELS = {
    "bad_syntax_config": ("name: 'bad_syntax_config'\nbackend: \"python\"\ninput [ {{{", None,
                          "bad_syntax_config"),
    "unknown_field": ('name: "unknown_field"\nbackend: "python"\nfoo: 1\n', None,
                      'no field named "foo"'),
    "bad_datatype": ('name: "bad_datatype"\nbackend: "python"\n'
                     'input [ { name: "X", data_type: TYPE_NOPE, dims: [1] } ]\n', None,
                     "TYPE_NOPE"),
    "init_raises": ('name: "init_raises"\nbackend: "python"\n',
                    "class TritonPythonModel:\n    def initialize(self, args):\n"
                    "        raise ValueError('no weights found')\n", "no weights found"),
    "syntax_error": ('name: "syntax_error"\nbackend: "python"\n',
                     "class TritonPythonModel:\n    def execute(self, requests)\n", "syntax"),
    "no_class": ('name: "no_class"\nbackend: "python"\n', "x = 1\n", "TritonPythonModel"),
    "gpu_instance": ('name: "gpu_instance"\nbackend: "python"\n'
                     "instance_group [ { kind: KIND_GPU } ]\n", "class TritonPythonModel: pass\n",
                     "KIND_GPU"),
    "name_mismatch": ('name: "other_name"\nbackend: "python"\n',
                          "class TritonPythonModel: pass\n", "other_name"),
}
# Those whose config Triton's poll refuses: never loaded (by name alone in the index), the
# reason only logged.
# (A KIND_GPU group on a host without GPUs fails as its version loads, as in Triton 2.51.)
UNPOLLED = {"bad_syntax_config", "unknown_field", "bad_datatype", "name_mismatch"}


@pytest.fixture
def broken_repo(add_sub_repo):
    for name, (config, model_py, _) in BROKEN_MODELS.items():
        add_sub_repo.add_model(name, config=config, model_py=model_py)
    return add_sub_repo


def test_broken_models_are_unavailable_with_reasons_and_others_serve(broken_repo, caplog):
    with Server(model_repository=broken_repo.path, exit_on_error=False) as server:
        states = _states(server)
        assert states[("add_sub", "1")] == ("READY", "")
        for name, (_, _, expected) in BROKEN_MODELS.items():
            entries = {k: v for k, v in states.items() if k[0] == name}
            assert entries, name
            if name in UNPOLLED:
                assert entries == {(name, ""): ("UNKNOWN", "")}, name
                assert expected.lower() in caplog.text.lower(), name
                continue
            for state, reason in entries.values():
                assert state == "UNAVAILABLE", name
                assert expected.lower() in reason.lower(), (name, reason)
            assert not server.model(name).ready()
        assert not server.ready()  # strict readiness: not every model is ready
        assert _infer_add_sub(server).error is None


def test_exit_on_error_stops_the_server_logging_every_reason(broken_repo, caplog):
    server = Server(model_repository=broken_repo.path)
    with pytest.raises(InternalError) as caught:
        server.start()
    assert str(caught.value) == "failed to load all models"  # tritonserver's words
    assert "no weights found" in caplog.text
    assert not server.live()


EXECUTE_FAILS_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        x = pb_utils.get_input_tensor_by_name(requests[0], "X").as_numpy()
        if x[0] == 1:
            raise RuntimeError("execute exploded")
        if x[0] == 2:
            return []
        if x[0] == 3:
            return [pb_utils.InferenceResponse(error=pb_utils.TritonError(
                "bad value", pb_utils.TritonError.INVALID_ARG))]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]) for _ in requests]
"""


def test_execute_failures_fail_only_their_requests(repo):
    repo.add_model(
        "fragile",
        config='name: "fragile"\nbackend: "python"\n'
        'input [ { name: "X", data_type: TYPE_INT32, dims: [ 1 ] } ]\n'
        'output [ { name: "Y", data_type: TYPE_INT32, dims: [ 1 ] } ]\n',
        model_py=EXECUTE_FAILS_PY,
    )
    from infercore import InvalidArgumentError, TritonError

    with Server(model_repository=repo.path) as server:
        model = server.model("fragile")

        def run(value: int):
            return model.infer(inputs={"X": np.array([value], np.int32)}).result(timeout=10)

        with pytest.raises(TritonError, match="execute exploded"):
            run(1)
        with pytest.raises(TritonError, match="(?i)response"):
            run(2)
        with pytest.raises(InvalidArgumentError, match="bad value"):
            run(3)
        assert run(7).outputs["Y"].to_numpy().tolist() == [7]
        stats = model.statistics()[0]
        # the model's own error answer (3) is a success, as Triton's Python backend counts it
        assert stats.fail.count == 2 and stats.success.count == 2
        response = model.infer(inputs={"X": np.array([1], np.int32)}, raise_on_error=False
                               ).result()
        assert response.error is not None and response.final


def test_model_file_outside_the_repository_is_never_imported(repo, add_sub_source, tmp_path):
    config, model_py = add_sub_source
    outside = tmp_path / "outside.py"
    marker = tmp_path / "imported"
    outside.write_text(f"open({str(marker)!r}, 'w').close()\n" + model_py)
    model_dir = repo.add_model("add_sub", config=config)
    (model_dir / "1").mkdir(exist_ok=True)
    os.symlink(outside, model_dir / "1" / "model.py")
    with Server(model_repository=repo.path, exit_on_error=False) as server:
        state, reason = _states(server)[("add_sub", "1")]
        assert state == "UNAVAILABLE" and "outside" in reason
    assert not marker.exists()


def test_model_states_enum_is_public(add_sub_repo):
    with Server(model_repository=add_sub_repo.path) as server:
        assert all(e.state is ModelState.READY for e in server.repository_index())


def test_load_with_a_config_override_replaces_config_pbtxt(add_sub_repo):
    with Server(model_repository=add_sub_repo.path, model_control_mode="explicit",
                startup_models=["*"]) as server:
        config = server.model("add_sub").config()
        config["max_batch_size"] = 2
        server.load("add_sub", config=config)
        assert server.model("add_sub").config()["max_batch_size"] == 2
        a = np.ones((3, 4), np.float32)
        from infercore import InvalidArgumentError

        with pytest.raises(InvalidArgumentError, match="batch-size must be <= 2"):
            server.model("add_sub").infer(inputs={"INPUT0": a, "INPUT1": a})
        from infercore.errors import InternalError

        # what Triton's poll refuses: "failed to poll", the reason logged
        with pytest.raises(InternalError, match="failed to poll from model repository"):
            server.load("add_sub", config="{not json")
        with pytest.raises(InternalError, match="failed to poll from model repository"):
            server.load("add_sub", config={"max_batch_size": "lots"})
        assert _infer_add_sub(server).error is None  # the last good version still serves


def test_server_statistics_cover_every_ready_model(add_sub_repo, add_sub_source):
    config, model_py = add_sub_source
    add_sub_repo.add_model("add_sub_copy", config=config.replace('"add_sub"', '"add_sub_copy"'),
                           model_py=model_py)
    with Server(model_repository=add_sub_repo.path) as server:
        _infer_add_sub(server)
        names = [(s.name, s.version, s.inference_count) for s in server.statistics()]
        assert names == [("add_sub", 1, 1), ("add_sub_copy", 1, 0)]
        assert [s.name for s in server.statistics("add_sub_copy")] == ["add_sub_copy"]


def test_model_handle_describes_batching_and_decoupling(add_sub_repo):
    with Server(model_repository=add_sub_repo.path) as server:
        assert server.model("add_sub").max_batch_size == 8
        assert server.model("add_sub").decoupled is False
