"""How the pb_utils constructors and the Logger take their arguments, as Triton's QA model
``qa/L0_backend_python/argument_validation`` checks them: which calls are refused, and
with which exception type (``TypeError`` where Triton's pybind11 binding cannot convert an
argument, ``TritonModelException`` where Triton's own code refuses it), which conversions
are taken (bytes for a str, a tuple for a list), and the command line a model sees
(``unittest.main()`` in a model reads ``sys.argv``).

One probe model runs a group of calls and reports each outcome as a JSON text; a second
copy of it runs process-isolated under infercore (a model parameter Triton ignores), so
both execution modes answer the same cases.
"""

from __future__ import annotations

import json

from ..case import Case, Http, Model, Suite
from ..models import PROCESS_MODE, string_probe

ARG_PROBE_PY = '''
import json
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

ARRAY = np.array([1, 2], dtype=np.int32)


def tensor():  # made in execute: Triton's pb_utils has no Tensor while model.py is imported
    return pb_utils.Tensor("OUT0", ARRAY)


def request(**changes):
    arguments = dict(inputs=[tensor()], model_name="m", requested_output_names=["OUT"])
    return pb_utils.InferenceRequest(**dict(arguments, **changes))


def log(call, *args):
    call(*args)
    return True


GROUPS = {
    "request": {
        "inputs_none_item": lambda: request(inputs=[None]),
        "inputs_none": lambda: request(inputs=None),
        "inputs_tuple": lambda: request(inputs=(tensor(),)),
        "inputs_int_item": lambda: request(inputs=[1]),
        "model_name_none": lambda: request(model_name=None),
        "model_name_bytes": lambda: request(model_name=b"m"),
        "model_name_int": lambda: request(model_name=3),
        "names_none_item": lambda: request(requested_output_names=[None]),
        "names_none": lambda: request(requested_output_names=None),
        "names_str": lambda: request(requested_output_names="OUT"),
        "names_tuple": lambda: sorted(request(requested_output_names=("A", "B"))
                                      .requested_output_names()),
        "names_bytes_item": lambda: sorted(request(requested_output_names=[b"A"])
                                           .requested_output_names()),
        "correlation_id_none": lambda: request(correlation_id=None),
        "correlation_id_float": lambda: request(correlation_id=1.5),
        "correlation_id_bytes": lambda: request(correlation_id=b"seq"),
        "correlation_id_str": lambda: request(correlation_id="seq").correlation_id(),
        "request_id_none": lambda: request(request_id=None),
        "request_id_bytes": lambda: request(request_id=b"r").request_id(),
        "request_id_int": lambda: request(request_id=7),
        "model_version_none": lambda: request(model_version=None),
        "model_version_float": lambda: request(model_version=1.0),
        "model_version_str": lambda: request(model_version="1"),
        "flags_none": lambda: request(flags=None),
        "flags_bool": lambda: request(flags=True).flags(),
        "timeout_none": lambda: request(timeout=None),
        "unknown_keyword": lambda: request(correleation_id=None),
        "empty_lists": lambda: pb_utils.InferenceRequest(
            requested_output_names=[], inputs=[], model_name="m"),
    },
    "response": {
        "outputs_none_item": lambda: pb_utils.InferenceResponse(output_tensors=[None]),
        "outputs_none": lambda: pb_utils.InferenceResponse(output_tensors=None),
        "outputs_empty": lambda: len(pb_utils.InferenceResponse(output_tensors=[])
                                     .output_tensors()),
        "outputs_tuple": lambda: len(pb_utils.InferenceResponse((tensor(),)).output_tensors()),
        "outputs_positional": lambda: len(pb_utils.InferenceResponse([tensor()])
                                          .output_tensors()),
        "no_arguments": lambda: len(pb_utils.InferenceResponse().output_tensors()),
        "error_none": lambda: pb_utils.InferenceResponse([], error=None).has_error(),
    },
    "tensor": {
        "name_none": lambda: pb_utils.Tensor(None, ARRAY),
        "name_int": lambda: pb_utils.Tensor(1, ARRAY),
        "name_bytes": lambda: pb_utils.Tensor(b"OUT0", ARRAY).name(),
        "name_empty": lambda: pb_utils.Tensor("", ARRAY),
        "array_none": lambda: pb_utils.Tensor("OUT0", None),
        "empty_name_array_none": lambda: pb_utils.Tensor("", None),
        "array_list": lambda: pb_utils.Tensor("OUT0", [1, 2]),
        "array_int": lambda: pb_utils.Tensor("OUT0", 5),
        "from_dlpack_none": lambda: pb_utils.Tensor.from_dlpack("OUT0", None),
        "from_dlpack_empty_name_none": lambda: pb_utils.Tensor.from_dlpack("", None),
    },
    "logger": {
        "log_level_none": lambda: log(pb_utils.Logger.log, "text", None),
        "log_level_int": lambda: log(pb_utils.Logger.log, "text", 1),
        "log_level_enum": lambda: log(pb_utils.Logger.log, "text", pb_utils.Logger.INFO),
        "log_no_level": lambda: log(pb_utils.Logger.log, "Level unspecified"),
        "log_info_none": lambda: log(pb_utils.Logger.log_info, None),
        "log_info_int": lambda: log(pb_utils.Logger.log_info, 1),
        "log_info_bytes": lambda: log(pb_utils.Logger.log_info, b"bytes"),
        "log_warn_none": lambda: log(pb_utils.Logger.log_warn, None),
        "log_error_none": lambda: log(pb_utils.Logger.log_error, None),
        "log_verbose_none": lambda: log(pb_utils.Logger.log_verbose, None),
    },
    "argv": {
        "sys_argv": lambda: sys.argv,
    },
    "response_parameters": {
        "taken": lambda: pb_utils.InferenceResponse(
            [], parameters={"b": True, "i": 1, "s": "x"}).parameters(),
        "float_value": lambda: pb_utils.InferenceResponse([], parameters={"f": 1.5}),
        "int_key": lambda: pb_utils.InferenceResponse([], parameters={1: 1}),
    },
}


def outcome(make):
    try:
        made = make()
    except pb_utils.TritonModelException as exc:  # Triton's own refusal: its text too
        return f"TritonModelException: {exc}"
    except Exception as exc:  # the type only: pybind's texts list every signature
        return type(exc).__name__
    if made is None or isinstance(made, (bool, int, str, list)):
        return made
    return "accepted"


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            group = pb_utils.get_input_tensor_by_name(request, "GROUP").as_numpy()[0].decode()
            seen = {name: outcome(make) for name, make in GROUPS[group].items()}
            text = json.dumps(seen, sort_keys=True)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("SEEN", np.array([text], dtype=np.object_))]))
        return responses
'''


def _probe(name: str, extra: str = "") -> Model:
    return string_probe(name, "GROUP", ARG_PROBE_PY, extra)



_MODELS = [_probe("arg_probe"), _probe("arg_probe_process", PROCESS_MODE)]


def _ask(model: str, group: str) -> Http:
    return Http("POST", f"/v2/models/{model}/infer", json={
        "inputs": [{"name": "GROUP", "datatype": "BYTES", "shape": [1], "data": [group]}]})


_NOTES = {
    "request": "InferenceRequest: None where a value is required is a TypeError, a None "
               "tensor a TritonModelException; bytes names and tuples are converted",
    "response": "InferenceResponse: output_tensors=None is a TypeError, [None] a "
                "TritonModelException",
    "tensor": "Tensor: only a numpy array is an array; from_dlpack(None) is Triton's own "
              "refusal",
    "logger": "Logger: a str message and a Logger level, nothing else",
    "argv": "the command line a model sees (unittest.main() in a model reads it)",
}

# Triton 2.51's InferenceResponse has no parameters (a TypeError); newer ones take them
_RESPONSE_PARAMETERS = (
    "python_backend src/pb_stub.cc (current main): InferenceResponse's binding takes "
    "parameters=None and has parameters(); PyParametersToJSON refuses keys that are not "
    "str and values that are not bool/int/str with TritonModelException texts "
    "(L0_backend_python/parameters, response_parameters_test.py)")
_PARAMETERS_SEEN = json.dumps({
    "float_value": "TritonModelException: Expect parameters values to have type "
                   "bool/int/str, found type <class 'float'>",
    "int_key": "TritonModelException: Expect parameters keys to have type str, found type "
               "<class 'int'>",
    "taken": json.dumps({"b": True, "i": 1, "s": "x"}),
}, sort_keys=True)

_CASES = [
    Case(f"{group}_args{suffix}", [_ask(model, group), _ask(model, "argv")], note=note)
    for group, note in _NOTES.items() if group != "argv"
    for model, suffix in (("arg_probe", ""), ("arg_probe_process", "_process"))
] + [
    Case("response_parameters", [_ask("arg_probe", "response_parameters")],
         newer=_RESPONSE_PARAMETERS, expect=[{"status": 200, "body": {"outputs": [{
             "name": "SEEN", "datatype": "BYTES", "shape": [1], "data": [_PARAMETERS_SEEN]}]}}]),
    Case("model_argv", [_ask("arg_probe", "argv")], note=_NOTES["argv"]),
    Case("model_argv_process", [_ask("arg_probe_process", "argv")], note=_NOTES["argv"]),
]

SUITES = [
    Suite("qa_python_backend_args", "python_backend", _MODELS, (), _CASES),
]
