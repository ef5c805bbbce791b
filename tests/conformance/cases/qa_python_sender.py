"""The response sender of a model that is not decoupled, as Triton's Python backend has it:
the model may answer through ``request.get_response_sender()`` instead of returning
responses, with exactly one response and the final flag, during ``execute`` or after it
returned (from a thread of its own), and gets Triton's errors for a second response, for a
response after the final flag, and for returning responses as well.

The probe records what each of its ``send`` calls gave (``ok`` or the exception's type and
text) and a later request (MODE "report") answers with that record; the client's own
answer to each request is recorded too. A second copy runs process-isolated under
infercore (a model parameter Triton ignores).
"""

from __future__ import annotations

from ..case import Case, Http, Model, Suite
from ..models import PROCESS_MODE

PROBE_PY = '''
import json
import threading
import time
import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def answer(value):
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", (value + 1).astype(np.int32))])


class TritonPythonModel:
    def initialize(self, args):
        self.record = []

    def attempt(self, what, call):
        try:
            call()
            self.record.append([what, "ok"])
        except Exception as exc:
            self.record.append([what, f"{type(exc).__name__}: {exc}"])

    def execute(self, requests):
        returned = []
        for request in requests:
            mode = pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0].decode()
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if mode == "report":
                text = json.dumps(self.record)
                self.record = []
                returned.append(pb_utils.InferenceResponse([
                    pb_utils.Tensor("OUT", value),
                    pb_utils.Tensor("SEEN", np.array([text], dtype=np.object_))]))
                continue
            sender = request.get_response_sender()
            returned.append(None)
            if mode == "during":
                self.attempt("response+final", lambda: sender.send(answer(value), flags=FINAL))
            elif mode == "then_flag":
                self.attempt("response", lambda: sender.send(answer(value)))
                self.attempt("final", lambda: sender.send(flags=FINAL))
            elif mode == "two":
                self.attempt("response", lambda: sender.send(answer(value)))
                self.attempt("second response", lambda: sender.send(answer(value + 10)))
                self.attempt("final", lambda: sender.send(flags=FINAL))
            elif mode == "after_final":
                self.attempt("response+final", lambda: sender.send(answer(value), flags=FINAL))
                self.attempt("response", lambda: sender.send(answer(value + 10)))
                self.attempt("final", lambda: sender.send(flags=FINAL))
            elif mode == "and_return":
                self.attempt("response+final", lambda: sender.send(answer(value), flags=FINAL))
                returned[-1] = answer(value + 10)
            elif mode == "flag_only":
                self.attempt("final", lambda: sender.send(flags=FINAL))
                # refused: the request is still open (Triton's client would wait for good)
                self.attempt("response+final", lambda: sender.send(answer(value), flags=FINAL))
            elif mode == "thread":
                def later(sender=sender, value=value):
                    time.sleep(0.3)
                    self.attempt("response+final",
                                 lambda: sender.send(answer(value), flags=FINAL))
                    self.attempt("response", lambda: sender.send(answer(value + 10)))
                threading.Thread(target=later, daemon=True).start()
        if all(response is None for response in returned):
            return None
        return returned
'''


def _probe(name: str, extra: str) -> Model:
    config = f'''
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "MODE" data_type: TYPE_STRING dims: [ 1 ] }},
        {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }},
         {{ name: "SEEN" data_type: TYPE_STRING dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{extra}
'''
    return Model(name, config, {"1/model.py": PROBE_PY})


def _ask(model: str, mode: str, value: int = 1) -> Http:
    return Http("POST", f"/v2/models/{model}/infer", json={"inputs": [
        {"name": "MODE", "datatype": "BYTES", "shape": [1], "data": [mode]},
        {"name": "IN", "datatype": "INT32", "shape": [1], "data": [value]}]})


_NOTES = {
    "during": "one response with the final flag, sent during execute, which returns None",
    "then_flag": "the response, then the final flag alone",
    "two": "a second response before the final flag",
    "after_final": "a response, and a final flag, after the final flag",
    "and_return": "answered through the sender and returned a response as well",
    "flag_only": "the final flag alone, before any response (refused), then the response",
    "thread": "answered from the model's thread after execute returned None; then a second "
              "response",
}


def _cases(model: str, suffix: str) -> list[Case]:
    cases = []
    for mode, note in _NOTES.items():
        steps = [_ask(model, mode, 4)]
        if mode == "thread":
            steps.append(_ask(model, "during", 6))  # the thread's sends are done by then
        steps += [_ask(model, "report"), _ask(model, "during", 2)]
        cases.append(Case(f"sender_{mode}{suffix}", steps, note=note))
    return cases


SUITES = [
    Suite("qa_python_sender", "python_backend", [_probe("sender_probe", "")], (),
          _cases("sender_probe", "")),
    Suite("qa_python_sender_process", "python_backend",
          [_probe("sender_probe_process", PROCESS_MODE)], (),
          _cases("sender_probe_process", "_process")),
]
