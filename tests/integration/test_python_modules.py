"""A Python model's own module and its siblings through a real ``infercore serve``: two
models whose files are both ``model.py``, each with a ``helper.py`` of its own, imported by
name from threads the models start (one outside any ``execute``), in-thread and
process-isolated; each model sees only its own helper and globals, and
``unittest.main("model")`` runs its own tests."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient
from serve_process import ServeProcess

from infercore.testing import RepositoryBuilder

PROCESS = 'parameters: { key: "infercore.execution_mode" value: { string_value: "process" } }'

MODEL_PY = """
import io
import threading
import time
import unittest

import numpy as np
import triton_python_backend_utils as pb_utils

import helper


class OwnHelper(unittest.TestCase):
    def test_word(self):
        import helper
        self.assertEqual(helper.WORD, NAME)


NAME = "{name}"


def look():
    import helper
    import model
    helper.CALLS.append(1)
    program = unittest.main("model", argv=["model"], exit=False,
                            testRunner=unittest.TextTestRunner(stream=io.StringIO()))
    ok = program.result.wasSuccessful() and program.result.testsRun == 1
    return f"{{helper.WORD}}:{{len(helper.CALLS)}}:{{model.NAME}}:{{ok}}"


class TritonPythonModel:
    def initialize(self, args):
        self.first = []
        self.thread = threading.Thread(
            target=lambda: (time.sleep(0.5), self.first.append(look())), daemon=True)
        self.thread.start()

    def execute(self, requests):
        self.thread.join(10)
        responses = []
        for _ in requests:
            now = []
            thread = threading.Thread(target=lambda: now.append(look()))
            thread.start()
            thread.join(10)
            text = ",".join(self.first + now)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("SEEN", np.array([text], dtype=np.object_))]))
        return responses
"""

MODES = {"in_thread": "", "process": PROCESS}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp("modules")
    repo = RepositoryBuilder(root / "models")
    for mode, extra in MODES.items():
        for letter in "ab":
            name = f"{letter}_{mode}"
            config = f"""
            name: "{name}"
            backend: "python"
            max_batch_size: 0
            input [ {{ name: "IN", data_type: TYPE_INT32, dims: [ 1 ] }} ]
            output [ {{ name: "SEEN", data_type: TYPE_STRING, dims: [ 1 ] }} ]
            {extra}
            """
            repo.add_model(name, config=config, model_py=MODEL_PY.format(name=name),
                           files={"1/helper.py": f"WORD = {name!r}\nCALLS = []\n"})
    started = ServeProcess(root / "server.log", f"--model-repository={repo.path}",
                           "--exit-timeout-secs=5")
    try:
        started.wait_ready(timeout=120)
        yield started
    finally:
        started.stop()


def _seen(client: httpclient.InferenceServerClient, model: str) -> str:
    tensor = httpclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([1], np.int32))
    return client.infer(model, [tensor]).as_numpy("SEEN")[0].decode()


@pytest.mark.parametrize("mode", MODES)
def test_each_model_imports_its_own_helper_from_its_threads(server, mode):
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    try:
        a, b = f"a_{mode}", f"b_{mode}"
        seen = [_seen(client, a), _seen(client, b), _seen(client, a), _seen(client, b)]
    finally:
        client.close()
    assert seen == [f"{a}:1:{a}:True,{a}:2:{a}:True", f"{b}:1:{b}:True,{b}:2:{b}:True",
                    f"{a}:1:{a}:True,{a}:3:{a}:True", f"{b}:1:{b}:True,{b}:3:{b}:True"]
