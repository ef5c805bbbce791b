"""Unloading an in-thread Python model gives its memory back, as Triton's exiting stub does.

A model that keeps 1 MiB per request in a module-level list holds ~200 MiB after 200
requests; once it is unloaded, the server's resident memory (from /proc) returns to near
where it was before the model grew, with a generous margin.
"""

from __future__ import annotations

import http.client
import json

from serve_process import HttpServeProcess

from infercore.testing import RepositoryBuilder

HOARDER_CONFIG = """
name: "hoarder"
backend: "python"
max_batch_size: 0
input [ { name: "IN", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

HOARDER_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

KEPT = []  # module state that only an unload can free


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            KEPT.append(np.ones(1 << 20, dtype=np.uint8))  # 1 MiB, touched
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)]))
        return responses
"""

MIB = 1 << 20
REQUESTS = 200


def _post(port: int, path: str, body: dict | None = None) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request("POST", path, body=json.dumps(body or {}))
    response = connection.getresponse()
    response.read()
    connection.close()
    return response.status


def test_unloading_an_in_thread_model_returns_its_memory(tmp_path):
    repo = RepositoryBuilder(tmp_path / "models")
    repo.add_model("hoarder", config=HOARDER_CONFIG, model_py=HOARDER_PY)
    server = HttpServeProcess(repo.path, tmp_path / "serve.log",
                              "--model-control-mode=explicit", "--load-model=hoarder")
    try:
        server.wait_ready()
        request = {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [1]}]}
        assert _post(server.port, "/v2/models/hoarder/infer", request) == 200
        before = server.rss_bytes()
        for _ in range(REQUESTS):
            assert _post(server.port, "/v2/models/hoarder/infer", request) == 200
        grown = server.rss_bytes()
        assert grown - before > REQUESTS * MIB * 0.8, "the model did not hold its memory"
        assert _post(server.port, "/v2/repository/models/hoarder/unload") == 200
        after = server.rss_bytes()
        # Triton's stub exits and frees everything; here the module, its globals and the
        # freed heap must go back to the system: well under a quarter of what it held.
        assert after - before < REQUESTS * MIB / 4, (before, grown, after)
        # the server keeps serving: the model loads and answers again
        assert _post(server.port, "/v2/repository/models/hoarder/load") == 200
        assert _post(server.port, "/v2/models/hoarder/infer", request) == 200
    finally:
        server.stop()
