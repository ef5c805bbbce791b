"""The model's own module and its siblings, as Triton's Python backend imports them: code
of a model can import its file as ``model`` (``unittest.main("model")``, as Triton's QA
models run their tests) and a helper beside it by name, from ``execute`` or from a thread
the model started, and two models whose files are both ``model.py``, each with a
``helper.py`` of its own, never see each other's module or globals.

The imports run on threads the model starts: one in ``initialize`` that looks after a
while, outside any ``execute``, and one per request inside ``execute``, so nothing of the
import is left to the backend's context. The answers alternate between the
two models; each reports what it saw (its helper's word, how often that helper was called,
the names Triton gives the modules, and its unittest run) as a JSON text. A second pair
runs process-isolated under infercore (a model parameter Triton ignores).
"""

from __future__ import annotations

from ..case import Case, Http, Model, Suite
from ..models import PROCESS_MODE

MODEL_PY = '''
import io
import json
import os
import threading
import time
import unittest

import numpy as np
import triton_python_backend_utils as pb_utils

import helper

MODEL_DIR = os.path.basename(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class HelperTest(unittest.TestCase):
    def test_own_helper(self):
        import helper
        self.assertEqual(helper.WORD, MODEL_DIR)


def look(value):
    import helper
    import model
    from helper import WORD
    helper.CALLS.append(value)
    program = unittest.main("model", argv=["model"], exit=False,
                            testRunner=unittest.TextTestRunner(stream=io.StringIO()))
    return {"word": WORD, "calls": len(helper.CALLS), "helper_name": helper.__name__,
            "model_name": model.__name__, "model_has_class": hasattr(model, "TritonPythonModel"),
            "same_helper_in_model": helper is model.helper,
            "tests_run": program.result.testsRun, "tests_ok": program.result.wasSuccessful()}


class TritonPythonModel:
    def initialize(self, args):
        # The first look runs on a thread of the model's own, outside any execute.
        self._first = {}
        self._thread = threading.Thread(
            target=lambda: (time.sleep(0.5), self._first.update(look(0))), daemon=True)
        self._thread.start()

    def execute(self, requests):
        self._thread.join(10)
        responses = []
        for request in requests:
            value = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            seen = {}
            worker = threading.Thread(target=lambda s=seen, v=value: s.update(look(v)))
            worker.start()
            worker.join(10)
            text = json.dumps({"at_start": self._first, "now": seen}, sort_keys=True)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("SEEN", np.array([text], dtype=np.object_))]))
        return responses
'''

HELPER_PY = '''
WORD = "{word}"
CALLS = []
'''


def _model(name: str, extra: str = "") -> Model:
    config = f'''
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "SEEN" data_type: TYPE_STRING dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{extra}
'''
    return Model(name, config, {"1/model.py": MODEL_PY,
                                "1/helper.py": HELPER_PY.format(word=name)})


def _ask(model: str, value: int) -> Http:
    return Http("POST", f"/v2/models/{model}/infer", json={"inputs": [
        {"name": "IN", "datatype": "INT32", "shape": [1], "data": [value]}]})


_MODELS = [_model("mod_a"), _model("mod_b"),
           _model("mod_a_process", PROCESS_MODE), _model("mod_b_process", PROCESS_MODE)]


def _alternating(a: str, b: str) -> list[Http]:
    return [_ask(a, 1), _ask(b, 2), _ask(a, 3), _ask(b, 4)]


_CASES = [
    Case("own_helper_from_threads", _alternating("mod_a", "mod_b"),
         note="two model.py files with a helper.py each, imported by name from threads "
              "the models started: each sees its own helper, its own calls, and passes "
              "its unittest.main(\"model\")"),
    Case("own_helper_from_threads_process", _alternating("mod_a_process", "mod_b_process"),
         note="the same, process-isolated under infercore"),
    Case("own_helper_across_modes", [_ask("mod_a", 5), _ask("mod_a_process", 6),
                                     _ask("mod_b", 7)]),
]

SUITES = [
    Suite("qa_python_modules", "python_backend", _MODELS, (), _CASES),
]
