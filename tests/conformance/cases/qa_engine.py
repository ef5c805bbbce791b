"""Ensemble semantics that Triton's own QA tests (qa/L0_simple_ensemble,
qa/L0_optional_input, the ensembles of qa/L0_ensemble*) rely on, found by running those
tests against both servers: which steps run when only some outputs are asked for (and so
whose statistics move), optional ensemble inputs left out, optional connecting tensors,
a step's optional input left unwired, outputs a step does not produce, tensors passed
between batching and non-batching sides, zero-size tensors, sequence ids and flags handed
to sequence-model steps, decoupled steps, a failing step, and the per-step statistics.

The models are small Python-backend ones; each case is one request or a few in order
(a suite is one server, so the statistics cases count what the cases before them sent).
Triton's Python backend reports a request's statistics after answering it, so the
statistics of models that just answered are read in the last case. A second suite loads
an ensemble Triton refuses when it reads its config (a step output nothing reads).
"""

from __future__ import annotations

import numpy as np

from ..case import Case, Grpc, GrpcStream, Http, Model, Suite, binary_body, raw_tensor
from ..models import add_sub, decoupled_repeat, identity, python_model
from .repository import INDEX, load

# -- models ----------------------------------------------------------------------------------
_TENSORS = '''
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
        { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
         { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
'''


def _ensemble(name: str, steps: str, *, max_batch_size: int = 8, tensors: str = _TENSORS,
              extra: str = "") -> Model:
    config = f'''
name: "{name}"
platform: "ensemble"
max_batch_size: {max_batch_size}
{tensors}
ensemble_scheduling {{ step [ {steps} ] }}
{extra}
'''
    return Model(name, config, {"1/.keep": ""})


def _step(model: str, inputs: dict[str, str], outputs: dict[str, str], version: int = -1) -> str:
    maps = " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    maps += " " + " ".join(f'output_map {{ key: "{k}" value: "{v}" }}'
                           for k, v in outputs.items())
    return f'{{ model_name: "{model}" model_version: {version} {maps} }}'


_BOTH = {"INPUT0": "INPUT0", "INPUT1": "INPUT1"}

# OUTPUT1 comes from version 1 of simple, OUTPUT0 from version 2 (qa/L0_simple_ensemble
# counts each version's executions to see which steps ran).
_SPLIT = _ensemble("ens_split", ", ".join([
    _step("simple", _BOTH, {"OUTPUT1": "OUTPUT1"}, version=1),
    _step("simple", _BOTH, {"OUTPUT0": "OUTPUT0"}, version=2)]))

ADD_ONLY_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """OUTPUT0 = INPUT0 + INPUT1; OUTPUT1 is declared but never produced."""

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", (a + b).astype(np.int32))]))
        return responses
'''

_ADD_ONLY = python_model("add_only", f'''
name: "add_only"
backend: "python"
max_batch_size: 8
{_TENSORS}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
''', ADD_ONLY_PY)

# simple's OUTPUT1 (INPUT1 - INPUT1 = 0) feeds add_only, which leaves OUTPUT1 out.
_PARTIAL = _ensemble("ens_partial", ", ".join([
    _step("simple", {"INPUT0": "INPUT1", "INPUT1": "INPUT1"}, {"OUTPUT1": "zero"}),
    _step("add_only", {"INPUT0": "INPUT0", "INPUT1": "zero"},
          {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"})]))

# add_only's missing OUTPUT1 feeds a required input of the next step.
_BROKEN_CHAIN = _ensemble("ens_broken_chain", ", ".join([
    _step("add_only", _BOTH, {"OUTPUT0": "sum", "OUTPUT1": "missing"}),
    _step("simple", {"INPUT0": "sum", "INPUT1": "missing"},
          {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"})]))

# a step output that nothing reads
_UNUSED = _ensemble("ens_unused", _step(
    "simple", _BOTH, {"OUTPUT0": "OUTPUT0", "OUTPUT1": "unused"}), tensors='''
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
        { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
''')

OPTIONAL_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """OUTPUTi = INPUTi; for an input left out: {missing}."""

    def execute(self, requests):
        responses = []
        for request in requests:
            given = {{name: pb_utils.get_input_tensor_by_name(request, name)
                     for name in ("INPUT0", "INPUT1")}}
            shapes = [t.as_numpy().shape for t in given.values() if t is not None]
            outputs = []
            for name, tensor in given.items():
                out = "OUTPUT" + name[-1]
                if tensor is not None:
                    outputs.append(pb_utils.Tensor(out, tensor.as_numpy()))
                elif {zeros} and shapes:
                    outputs.append(pb_utils.Tensor(out, np.zeros(shapes[0], np.float32)))
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
'''

_OPTIONAL_TENSORS = '''
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] optional: true },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 1 ] optional: true } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 1 ] } ]
'''


def _optional_model(name: str, zeros: bool) -> Model:
    missing = "zeros of the other input's shape" if zeros else "no output"
    config = f'''
name: "{name}"
backend: "python"
max_batch_size: 4
{_OPTIONAL_TENSORS}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
'''
    return python_model(name, config, OPTIONAL_PY.format(missing=missing, zeros=zeros))


_OPT_BOTH = {"INPUT0": "INPUT0", "INPUT1": "INPUT1"}
_OUT_BOTH = {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"}
_ENS_OPTIONAL = _ensemble("ens_optional", _step("opt_zero", _OPT_BOTH, _OUT_BOTH),
                          max_batch_size=4, tensors=_OPTIONAL_TENSORS)
# the second step's INPUT0 (optional) is not wired at all
_ENS_PIPE = _ensemble("ens_optional_pipe", ", ".join([
    _step("opt_zero", _OPT_BOTH, {"OUTPUT0": "mid"}),
    _step("opt_zero", {"INPUT1": "mid"}, _OUT_BOTH)]),
    max_batch_size=4, tensors=_OPTIONAL_TENSORS)
# both tensors between the steps are wired; the first step produces only some of them
_ENS_CONNECT = _ensemble("ens_optional_connect", ", ".join([
    _step("opt_skip", _OPT_BOTH, {"OUTPUT0": "mid0", "OUTPUT1": "mid1"}),
    _step("opt_skip", {"INPUT0": "mid0", "INPUT1": "mid1"}, _OUT_BOTH)]),
    max_batch_size=4, tensors=_OPTIONAL_TENSORS)

# batching and non-batching sides
_NOBATCH_OVER_BATCHING = _ensemble("ens_nobatch", _step("simple", _BOTH, _OUT_BOTH, 2),
                                   max_batch_size=0)
_NOBATCH_VAR_OVER_BATCHING = _ensemble(
    "ens_nobatch_var", _step("simple", _BOTH, _OUT_BOTH, 2), max_batch_size=0, tensors='''
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1, 16 ] },
        { name: "INPUT1" data_type: TYPE_INT32 dims: [ -1, 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1, 16 ] },
         { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ -1, 16 ] } ]
''')
_SIMPLE_NOBATCH = add_sub("simple_nobatch", max_batch_size=0)
_SIMPLE_NOBATCH_VAR = add_sub("simple_nobatch_var", max_batch_size=0, dims="[ -1, 16 ]")
_BATCH_OVER_NOBATCH = _ensemble("ens_over_nobatch",
                                _step("simple_nobatch", _BOTH, _OUT_BOTH))
_BATCH_OVER_NOBATCH_VAR = _ensemble("ens_over_nobatch_var",
                                    _step("simple_nobatch_var", _BOTH, _OUT_BOTH))
# one input only, where a shape is refused: Triton names whichever input it checks first
_ID_BATCH16 = identity("id_batch16", datatype="TYPE_INT32", dims="[ 16 ]", max_batch_size=8)
_ID_NOBATCH16 = identity("id_nobatch16", datatype="TYPE_INT32", dims="[ 16 ]")
_ONE_IO = {"INPUT0": "IN"}, {"OUTPUT0": "OUT"}
_ENS_NOBATCH_ONE = _ensemble("ens_nobatch_one", _step("id_batch16", *_ONE_IO),
                             max_batch_size=0, tensors='''
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1, 16 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1, 16 ] } ]
''')
_ENS_OVER_NOBATCH_ONE = _ensemble("ens_over_nobatch_one", _step("id_nobatch16", *_ONE_IO),
                                  tensors='''
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 16 ] } ]
''')

# zero-size tensors through an ensemble
_ID_VAR = identity("id_var", datatype="TYPE_FP32", dims="[ -1 ]")
_ID_BATCH = identity("id_batch", datatype="TYPE_FP32", dims="[ -1 ]", max_batch_size=8)
_VAR_TENSORS = '''
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
'''
_ENS_ZERO = _ensemble("ens_var", _step("id_var", {"INPUT0": "IN"}, {"OUTPUT0": "OUT"}),
                      max_batch_size=0, tensors=_VAR_TENSORS)
_ENS_ZERO_BATCH = _ensemble("ens_var_batch",
                            _step("id_batch", {"INPUT0": "IN"}, {"OUTPUT0": "OUT"}),
                            tensors=_VAR_TENSORS)

FAILS_PY = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(error=pb_utils.TritonError("the step fails"))
                for _ in requests]
'''
_FAILS = python_model("fails", f'''
name: "fails"
backend: "python"
max_batch_size: 8
{_TENSORS}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
''', FAILS_PY)
_ENS_FAILS = _ensemble("ens_fails", ", ".join([
    _step("simple", _BOTH, {"OUTPUT0": "sum", "OUTPUT1": "diff"}, 2),
    _step("fails", {"INPUT0": "sum", "INPUT1": "diff"}, _OUT_BOTH)]))

# a sequence model as a step: it reports the sequence controls it received
SEQUENCE_PY = '''
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """OUT = the sum of IN over the sequence so far; SEEN: the controls received."""

    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            get = lambda name: pb_utils.get_input_tensor_by_name(request, name).as_numpy()
            value = int(get("IN")[0][0])
            start, end = int(get("START")[0][0]), int(get("END")[0][0])
            corrid = int(get("CORRID")[0][0])
            total = value + (0 if start else self.sums.get(corrid, 0))
            self.sums[corrid] = total
            seen = json.dumps({"start": start, "end": end, "corrid": corrid,
                               "request_corrid": request.correlation_id()})
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", np.array([[total]], np.int32)),
                pb_utils.Tensor("SEEN", np.array([[seen]], np.object_))]))
        return responses
'''
_SEQ_STEP = python_model("seq_step", '''
name: "seq_step"
backend: "python"
max_batch_size: 4
sequence_batching {
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
}
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "SEEN" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
''', SEQUENCE_PY)
_ENS_SEQ = _ensemble("ens_seq", _step("seq_step", {"IN": "IN"}, {"OUT": "OUT", "SEEN": "SEEN"}),
                     max_batch_size=4, tensors='''
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "SEEN" data_type: TYPE_STRING dims: [ 1 ] } ]
''')

# a decoupled step, then a step that runs once per response of it
_REPEAT = decoupled_repeat("repeat")
_ID_INT = identity("id_int", datatype="TYPE_INT32", dims="[ 1 ]")
_ENS_DECOUPLED = _ensemble("ens_decoupled", ", ".join([
    _step("repeat", {"IN": "IN"}, {"OUT": "each"}),
    _step("id_int", {"INPUT0": "each"}, {"OUTPUT0": "OUT"})]), max_batch_size=0, tensors='''
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
''')

_MODELS = [
    add_sub("simple", versions=(1, 2), extra="version_policy: { all {} }"),
    _SPLIT, _ADD_ONLY, _PARTIAL, _BROKEN_CHAIN,
    _optional_model("opt_zero", zeros=True), _optional_model("opt_skip", zeros=False),
    _ENS_OPTIONAL, _ENS_PIPE, _ENS_CONNECT,
    _NOBATCH_OVER_BATCHING, _NOBATCH_VAR_OVER_BATCHING, _SIMPLE_NOBATCH, _SIMPLE_NOBATCH_VAR,
    _BATCH_OVER_NOBATCH, _BATCH_OVER_NOBATCH_VAR,
    _ID_BATCH16, _ID_NOBATCH16, _ENS_NOBATCH_ONE, _ENS_OVER_NOBATCH_ONE,
    _ID_VAR, _ID_BATCH, _ENS_ZERO, _ENS_ZERO_BATCH,
    _FAILS, _ENS_FAILS, _SEQ_STEP, _ENS_SEQ, _REPEAT, _ID_INT, _ENS_DECOUPLED,
    decoupled_repeat("repeat_direct"),
    python_model("seq_direct", _SEQ_STEP.config.replace('"seq_step"', '"seq_direct"'),
                 SEQUENCE_PY),
]


# -- requests --------------------------------------------------------------------------------
_A = list(range(16))
_B = [1] * 16


def _infer(model: str, shape: list[int], rows: int = 1, outputs: list[str] | None = None,
           inputs: tuple[str, ...] = ("INPUT0", "INPUT1"), **extra: object) -> Http:
    data = {"INPUT0": _A * rows, "INPUT1": _B * rows}
    body: dict[str, object] = {"inputs": [
        {"name": name, "datatype": "INT32", "shape": shape, "data": data[name]}
        for name in inputs]}
    if outputs is not None:
        body["outputs"] = [{"name": name} for name in outputs]
    body.update(extra)
    return Http("POST", f"/v2/models/{model}/infer", json=body)


def _grpc_infer(model: str, outputs: list[str] | None = None, **extra: object) -> Grpc:
    request: dict[str, object] = {"model_name": model, "inputs": [
        {"name": name, "datatype": "INT32", "shape": ["1", "16"]}
        for name in ("INPUT0", "INPUT1")]}
    if outputs is not None:
        request["outputs"] = [{"name": name} for name in outputs]
    request.update(extra)
    return Grpc("ModelInfer", request, raw=[raw_tensor(np.array(_A, np.int32)),
                                            raw_tensor(np.array(_B, np.int32))])


def _one(model: str, shape: list[int]) -> Http:
    return Http("POST", f"/v2/models/{model}/infer", json={"inputs": [
        {"name": "IN", "datatype": "INT32", "shape": shape,
         "data": list(range(int(np.prod(shape))))}]})


def _stats(model: str) -> Http:
    return Http("GET", f"/v2/models/{model}/stats")


def _optional(model: str, given: dict[str, float], outputs: list[str] | None = None) -> Http:
    body: dict[str, object] = {"inputs": [
        {"name": name, "datatype": "FP32", "shape": [1, 1], "data": [value]}
        for name, value in given.items()]}
    if outputs is not None:
        body["outputs"] = [{"name": name} for name in outputs]
    return Http("POST", f"/v2/models/{model}/infer", json=body)


def _var(model: str, shape: list[int], binary: bool = False) -> Http:
    count = int(np.prod(shape))
    values = [float(i) for i in range(count)]
    if not binary:
        return Http("POST", f"/v2/models/{model}/infer", json={"inputs": [
            {"name": "IN", "datatype": "FP32", "shape": shape, "data": values}]})
    body, headers = binary_body(
        {"inputs": [{"name": "IN", "datatype": "FP32", "shape": shape,
                     "parameters": {"binary_data_size": 4 * count}}],
         "outputs": [{"name": "OUT", "parameters": {"binary_data": True}}]},
        raw_tensor(np.array(values, np.float32)))
    return Http("POST", f"/v2/models/{model}/infer", body=body, headers=headers)


def _seq(value: int, **parameters: object) -> Http:
    return Http("POST", "/v2/models/ens_seq/infer", json={
        "inputs": [{"name": "IN", "datatype": "INT32", "shape": [1, 1], "data": [value]}],
        "parameters": parameters})


def _stream_repeat(values: list[int]) -> GrpcStream:
    return GrpcStream(requests=[{"model_name": "ens_decoupled", "id": "r0", "inputs": [
        {"name": "IN", "datatype": "INT32", "shape": [str(len(values))]}]}],
        raw=[[raw_tensor(np.array(values, np.int32))]])


_CASES = [
    # -- which steps run ----------------------------------------------------------------------
    Case("all_outputs_run_every_step", [_infer("ens_split", [1, 16]), _stats("simple")],
         note="each version of simple ran once"),
    Case("one_output_runs_only_its_steps",
         [_infer("ens_split", [1, 16], outputs=["OUTPUT0"]),
          _grpc_infer("ens_split", outputs=["OUTPUT0"]), _stats("simple")],
         note="only version 2 (which makes OUTPUT0) ran again; version 1's counts stay"),
    Case("other_output_runs_only_its_steps",
         [_grpc_infer("ens_split", outputs=["OUTPUT1"]), _stats("simple"),
          _stats("ens_split")]),
    Case("batch_of_eight_through_ensemble", [_infer("ens_split", [8, 16], rows=8)]),
    # -- outputs a step does not produce -----------------------------------------------------
    Case("missing_step_output_left_out",
         [_infer("ens_partial", [1, 16]), _grpc_infer("ens_partial", ["OUTPUT0", "OUTPUT1"])],
         note="add_only never produces OUTPUT1: the response has OUTPUT0 alone"),
    Case("only_missing_output_requested",
         [_infer("ens_partial", [1, 16], outputs=["OUTPUT1"]),
          _grpc_infer("ens_partial", ["OUTPUT1"])]),
    Case("missing_output_feeds_required_input",
         [_infer("ens_broken_chain", [1, 16]), _grpc_infer("ens_broken_chain"),
          _infer("ens_split", [1, 16])],
         note="the next step's validation refuses its request, named in the ensemble"),
    # -- optional inputs ---------------------------------------------------------------------
    Case("optional_ensemble_input_left_out",
         [_optional("ens_optional", {"INPUT1": 5.0}),
          _optional("ens_optional", {"INPUT0": 3.0}, outputs=["OUTPUT0"]),
          _optional("ens_optional", {"INPUT0": 3.0, "INPUT1": 5.0})]),
    Case("step_optional_input_unwired",
         [_optional("ens_optional_pipe", {"INPUT0": 3.0, "INPUT1": 5.0}),
          _optional("ens_optional_pipe", {"INPUT1": 5.0})],
         note="the second step gets INPUT1 only; its INPUT0 is never wired"),
    Case("optional_connecting_tensor",
         [_optional("ens_optional_connect", {"INPUT0": 3.0}, outputs=["OUTPUT0"]),
          _optional("ens_optional_connect", {"INPUT0": 3.0}),
          _optional("ens_optional_connect", {"INPUT1": 5.0}, outputs=["OUTPUT1"])],
         note="the first step produces only the outputs of the inputs it got"),
    # -- batching and non-batching sides -----------------------------------------------------
    Case("nobatch_ensemble_over_batching_step",
         [_infer("ens_nobatch", [16]), _infer("ens_nobatch", [1, 16])],
         note="the step gets a batch dimension of 1; the ensemble answers without it"),
    Case("nobatch_variable_ensemble_over_batching_step",
         [_infer("ens_nobatch_var", [3, 16], rows=3), _infer("ens_nobatch_var", [1, 16]),
          _one("ens_nobatch_one", [0, 16]), _one("ens_nobatch_one", [2, 16])],
         note="[0, 16] does not fit the step's [16]: it keeps its shape, and the step's "
              "batch size is taken from it"),
    Case("batching_ensemble_over_nobatch_step",
         [_infer("ens_over_nobatch", [1, 16]), _one("ens_over_nobatch_one", [2, 16]),
          _one("ens_over_nobatch_one", [1, 16])],
         note="batch 1: the step gets the tensor without its batch dimension"),
    Case("batching_ensemble_over_nobatch_variable_step",
         [_infer("ens_over_nobatch_var", [2, 16], rows=2),
          _infer("ens_over_nobatch_var", [1, 16])]),
    # -- zero-size tensors -------------------------------------------------------------------
    Case("zero_size_json", [_var("ens_var", [0]), _var("ens_var_batch", [1, 0]),
                            _var("ens_var_batch", [0, 3])]),
    Case("zero_size_binary", [_var("ens_var", [0], binary=True),
                              _var("ens_var_batch", [2, 0], binary=True),
                              _var("ens_var", [3], binary=True)]),
    # -- a failing step ----------------------------------------------------------------------
    Case("failing_step", [_infer("ens_fails", [1, 16]), _grpc_infer("ens_fails"),
                          _infer("ens_split", [1, 16])],
         note="the statistics are read in statistics_of_steps: Triton counts the steps' "
              "executions and the ensemble's second count of a failure after answering"),
    # -- sequences through an ensemble -------------------------------------------------------
    Case("sequence_through_ensemble",
         [_seq(4, sequence_id=42, sequence_start=True), _seq(5, sequence_id=42),
          _seq(6, sequence_id=42, sequence_end=True)],
         note="the step's controls follow the ensemble request's id and flags; the "
              "ensemble's responses carry them back as parameters"),
    Case("sequence_step_without_id", [_seq(4), _seq(1, sequence_id=43, sequence_start=True,
                                                    sequence_end=True)]),
    Case("sequence_step_without_start", [_seq(4, sequence_id=44),
                                         _seq(1, sequence_id=44, sequence_start=True,
                                              sequence_end=True)]),
    # -- decoupled steps ---------------------------------------------------------------------
    Case("decoupled_step_stream", [_stream_repeat([7, 8, 9])],
         note="the step after the decoupled one runs once per response"),
    Case("decoupled_step_no_response", [_stream_repeat([])]),
    Case("decoupled_ensemble_over_http",
         [Http("POST", "/v2/models/ens_decoupled/infer", json={"inputs": [
             {"name": "IN", "datatype": "INT32", "shape": [1], "data": [1]}]})]),
    # -- the same requests sent to the step models directly ---------------------------------
    Case("direct_sequence_errors",
         [Http("POST", "/v2/models/seq_direct/infer", json={"inputs": [
             {"name": "IN", "datatype": "INT32", "shape": [1, 1], "data": [1]}]}),
          Http("POST", "/v2/models/seq_direct/infer", json={"inputs": [
              {"name": "IN", "datatype": "INT32", "shape": [1, 1], "data": [1]}],
              "parameters": {"sequence_id": 9}}),
          _stats("seq_direct")]),
    Case("direct_decoupled_stream",
         [GrpcStream(requests=[{"model_name": "repeat_direct", "id": "r0", "inputs": [
             {"name": "IN", "datatype": "INT32", "shape": ["2"]}]}],
             raw=[[raw_tensor(np.array([1, 2], np.int32))]])]),
    # -- statistics of every step ------------------------------------------------------------
    Case("statistics_of_steps", [_stats("add_only"), _stats("opt_zero"), _stats("opt_skip"),
                                 _stats("ens_optional_connect"), _stats("seq_step"),
                                 _stats("id_int"), _stats("ens_decoupled"),
                                 _stats("fails")],
         note="last, so that what Triton counts after answering has been counted"),
]

# -- an ensemble Triton refuses to load ------------------------------------------------------
_LOAD_CASES = [
    Case("step_output_nothing_reads",
         [load("ens_unused"), INDEX, load("simple"), _infer("simple", [1, 16])],
         note="a step output neither read by a step nor an ensemble output: refused when "
              "the configuration is read"),
]

# -- an ensemble whose step fails, and the statistics of each ------------------------------
RAISES_PY = FAILS_PY.replace(
    "return [pb_utils.InferenceResponse(error=pb_utils.TritonError(\"the step fails\"))\n"
    "                for _ in requests]",
    "raise pb_utils.TritonModelException(\"the step raises\")")
_RAISES = python_model("raises", _FAILS.config.replace('"fails"', '"raises"'), RAISES_PY)
_ENS_RAISES = _ensemble("ens_raises", _step("raises", _BOTH, _OUT_BOTH))

_FAILURE_CASES = [
    Case("failing_step_http", [_infer("ens_fails", [1, 16])]),
    Case("failing_step_grpc", [_grpc_infer("ens_fails")]),
    Case("raising_step", [_infer("ens_raises", [1, 16])]),
    Case("step_refuses_request", [_seq(4)],
         note="the sequence step refuses a request without a correlation id at its door"),
    Case("failing_step_statistics",
         [_stats("ens_fails"), _stats("fails"), Http("GET", "/v2/models/simple/versions/2/stats"),
          _stats("ens_raises"), _stats("ens_seq"), _stats("seq_step")],
         note="how many failures each ensemble and its failing step count (the raising "
              "step's own statistics are left out: Triton's Python backend reports the "
              "batch of an execution that raised, infercore does not yet)"),
]

SUITES = [
    Suite("qa_engine_ensemble", "engine", _MODELS, (), _CASES),
    Suite("qa_engine_ensemble_failure", "engine",
          [add_sub("simple", versions=(1, 2), extra="version_policy: { all {} }"), _FAILS,
           _ENS_FAILS, _RAISES, _ENS_RAISES, _SEQ_STEP, _ENS_SEQ], (), _FAILURE_CASES),
    Suite("qa_engine_ensemble_load", "engine",
          [add_sub("simple", versions=(1, 2), extra="version_policy: { all {} }"), _UNUSED],
          ("--model-control-mode=explicit",), _LOAD_CASES),
]
