"""Ensembles through the in-process API: DAG wiring, parallel steps, errors, decoupled."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from infercore import InvalidArgumentError, Server, TritonError

UNARY_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        import json
        params = json.loads(args["model_config"])["parameters"]
        self.scale = float(params["scale"]["string_value"])
        self.shift = float(params["shift"]["string_value"])

    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if np.any(x < 0):
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    "negative input", pb_utils.TritonError.INVALID_ARG)))
                continue
            out.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", (x * self.scale + self.shift).astype(np.float32))]))
        return out
"""

SUM_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("SUM",
                    pb_utils.get_input_tensor_by_name(r, "A").as_numpy()
                    + pb_utils.get_input_tensor_by_name(r, "B").as_numpy())])
                for r in requests]
"""

FANOUT_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            for i in range(3):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x + i)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


def _unary(name: str, scale: float, shift: float, batching: str = "") -> str:
    return f"""
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "IN", data_type: TYPE_FP32, dims: [ 2 ] }} ]
output [ {{ name: "OUT", data_type: TYPE_FP32, dims: [ 2 ] }} ]
parameters: {{ key: "scale" value: {{ string_value: "{scale}" }} }}
parameters: {{ key: "shift" value: {{ string_value: "{shift}" }} }}
{batching}
"""


SUM_CONFIG = """
name: "sum"
backend: "python"
max_batch_size: 8
input [ { name: "A", data_type: TYPE_FP32, dims: [ 2 ] },
        { name: "B", data_type: TYPE_FP32, dims: [ 2 ] } ]
output [ { name: "SUM", data_type: TYPE_FP32, dims: [ 2 ] } ]
"""


def _ensemble(name: str, steps: str, outputs: str = "RESULT") -> str:
    return f"""
name: "{name}"
platform: "ensemble"
max_batch_size: 8
input [ {{ name: "X", data_type: TYPE_FP32, dims: [ 2 ] }} ]
output [ {{ name: "{outputs}", data_type: TYPE_FP32, dims: [ 2 ] }} ]
ensemble_scheduling {{ step [ {steps} ] }}
"""


DIAMOND = """
{ model_name: "plus_one" model_version: -1 input_map { key: "IN" value: "X" }
  output_map { key: "OUT" value: "x1" } },
{ model_name: "double" model_version: -1 input_map { key: "IN" value: "x1" }
  output_map { key: "OUT" value: "a" } },
{ model_name: "triple" model_version: -1 input_map { key: "IN" value: "x1" }
  output_map { key: "OUT" value: "b" } },
{ model_name: "sum" model_version: -1 input_map [ { key: "A" value: "a" },
                                                  { key: "B" value: "b" } ]
  output_map { key: "SUM" value: "RESULT" } }
"""


@pytest.fixture
def pipeline_repo(repo):
    repo.add_model("plus_one", config=_unary("plus_one", 1, 1, "dynamic_batching { }"),
                   model_py=UNARY_PY)
    repo.add_model("double", config=_unary("double", 2, 0), model_py=UNARY_PY)
    repo.add_model("triple", config=_unary("triple", 3, 0), model_py=UNARY_PY)
    repo.add_model("sum", config=SUM_CONFIG, model_py=SUM_PY)
    repo.add_model("diamond", config=_ensemble("diamond", DIAMOND))
    return repo


X = np.array([[1.0, 2.0]], np.float32)
EXPECTED = ((X + 1) * 2 + (X + 1) * 3).tolist()


def test_diamond_runs_every_step_and_answers(pipeline_repo):
    with Server(model_repository=pipeline_repo.path) as server:
        response = server.model("diamond").infer(inputs={"X": X}).result(timeout=10)
        assert response.outputs["RESULT"].to_numpy().tolist() == EXPECTED
        for step in ("plus_one", "double", "triple", "sum"):
            assert server.model(step).statistics()[0].execution_count == 1
        stats = server.model("diamond").statistics()[0]
        assert stats.success.count == 1 and stats.inference_count == 1


async def test_concurrent_async_ensemble_requests(pipeline_repo):
    async with Server(model_repository=pipeline_repo.path) as server:
        model = server.model("diamond")
        responses = await asyncio.gather(
            *(model.async_infer(inputs={"X": X * i}) for i in range(1, 21)))
        for i, response in enumerate(responses, start=1):
            expected = ((X * i + 1) * 5).tolist()
            assert response.outputs["RESULT"].to_numpy().tolist() == expected


def test_wrong_input_shape_is_rejected_at_entry(pipeline_repo):
    with Server(model_repository=pipeline_repo.path) as server:
        with pytest.raises(InvalidArgumentError, match="unexpected shape for input 'X'"):
            server.model("diamond").infer(inputs={"X": np.zeros((1, 3), np.float32)})


def test_a_failing_step_fails_the_ensemble_request_only(pipeline_repo):
    with Server(model_repository=pipeline_repo.path) as server:
        with pytest.raises(TritonError, match="negative input"):
            server.model("diamond").infer(inputs={"X": -X * 10}).result(timeout=10)
        ok = server.model("diamond").infer(inputs={"X": X}).result(timeout=10)
        assert ok.outputs["RESULT"].to_numpy().tolist() == EXPECTED
        # Triton 2.51 counts an ensemble's failure twice (qa_engine_ensemble_failure)
        assert server.model("diamond").statistics()[0].fail.count == 2


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ('{ model_name: "missing" model_version: -1 input_map { key: "IN" value: "X" } '
         'output_map { key: "OUT" value: "RESULT" } }', "not available"),
        ('{ model_name: "double" model_version: -1 input_map { key: "IN" value: "nowhere" } '
         'output_map { key: "OUT" value: "RESULT" } }', "neither an ensemble input"),
        ('{ model_name: "double" model_version: -1 input_map { key: "IN" value: "X" } '
         'output_map { key: "OUT" value: "other" } }', "'RESULT' is not produced"),
        ('{ model_name: "double" model_version: -1 input_map { key: "IN" value: "c" } '
         'output_map { key: "OUT" value: "d" } }, '
         '{ model_name: "triple" model_version: -1 input_map { key: "IN" value: "d" } '
         'output_map { key: "OUT" value: "c" } }, '
         '{ model_name: "double" model_version: -1 input_map { key: "IN" value: "X" } '
         'output_map { key: "OUT" value: "RESULT" } }', "circular dependency"),
        ('{ model_name: "double" model_version: -1 input_map { key: "NOPE" value: "X" } '
         'output_map { key: "OUT" value: "RESULT" } }', "not an input of model double"),
    ],
)
def test_bad_wiring_fails_the_load_with_a_clear_reason(pipeline_repo, steps, message):
    pipeline_repo.add_model("broken", config=_ensemble("broken", steps))
    with Server(model_repository=pipeline_repo.path, exit_on_error=False) as server:
        entries = {e.name: e for e in server.repository_index()}
        assert entries["broken"].state.value == "UNAVAILABLE"
        assert message in entries["broken"].reason
        assert entries["diamond"].state.value == "READY"


def test_decoupled_step_streams_one_ensemble_response_per_step_response(repo):
    repo.add_model("fanout", model_py=FANOUT_PY, config="""
name: "fanout"
backend: "python"
max_batch_size: 8
model_transaction_policy { decoupled: true }
input [ { name: "IN", data_type: TYPE_FP32, dims: [ 2 ] } ]
output [ { name: "OUT", data_type: TYPE_FP32, dims: [ 2 ] } ]
""")
    repo.add_model("double", config=_unary("double", 2, 0), model_py=UNARY_PY)
    repo.add_model("stream", config=_ensemble("stream", """
{ model_name: "fanout" model_version: -1 input_map { key: "IN" value: "X" }
  output_map { key: "OUT" value: "f" } },
{ model_name: "double" model_version: -1 input_map { key: "IN" value: "f" }
  output_map { key: "OUT" value: "RESULT" } }
""") + "model_transaction_policy { decoupled: true }\n")
    with Server(model_repository=repo.path) as server:
        results = sorted(r.outputs["RESULT"].to_numpy().tolist()
                         for r in server.model("stream").infer(inputs={"X": X}))
        assert results == [((X + i) * 2).tolist() for i in range(3)]
