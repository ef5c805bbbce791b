"""A Python model's own ``is_ready()`` answering the model readiness endpoints, as
current Triton's python_backend asks it (qa/L0_backend_python/model_readiness); newer
than Triton 2.51, whose backend never calls it (recorded: every model here is ready).

One model per answer: True, False, an exception, a value that is no bool, async def; a
copy of each runs process-isolated under infercore (a model parameter Triton ignores).
"""

from __future__ import annotations

from typing import Any

from ..case import Case, Grpc, Http, Suite
from ..models import PROCESS_MODE, python_model

READY_PY = """
import asyncio

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([]) for _ in requests]

    IS_READY
"""

_ANSWERS = {
    "returns_true": ("def is_ready(self):\n        return True", True),
    "returns_false": ("def is_ready(self):\n        return False", False),
    "raises_error": ("def is_ready(self):\n        raise RuntimeError('no')", False),
    "returns_non_boolean": ("def is_ready(self):\n        return 'yes'", False),
    "async_returns_false": (
        "async def is_ready(self):\n        await asyncio.sleep(0)\n        return False",
        False,
    ),
}

_NEWER = (
    "python_backend pull request #430 (2026-02, 'Support user-defined is_ready() in Python "
    "backend readiness checks'; README 'is_ready'): when a model defines is_ready(), sync "
    "or async def, the model readiness endpoint (v2/models/<model>/ready, gRPC ModelReady) "
    "answers what it returns; an exception, a value that is not a bool, or no answer "
    "within 5 s (kUserModelReadinessTimeoutMs) is not ready (server qa/L0_backend_python/"
    "model_readiness, pull request #8661). Triton 2.51 never calls it: the model is ready"
)


def _config(name: str, extra: str) -> str:
    return f'''
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{extra}
'''


_MODELS = []
_CASES = []
for _suffix, _extra in (("", ""), ("_process", PROCESS_MODE)):
    for _answer, (_source, _ready) in _ANSWERS.items():
        _name = f"is_ready_{_answer}{_suffix}"
        _MODELS.append(
            python_model(_name, _config(_name, _extra), READY_PY.replace("IS_READY", _source))
        )
        http_expect: dict[str, Any] = {"status": 200 if _ready else 400}
        grpc_expect: dict[str, Any] = {"code": "OK", "response": {"ready": True} if _ready else {}}
        _CASES += [
            Case(
                f"http_{_answer}{_suffix}",
                [Http("GET", f"/v2/models/{_name}/ready")],
                newer=_NEWER,
                expect=[http_expect],
            ),
            Case(
                f"grpc_{_answer}{_suffix}",
                [Grpc("ModelReady", {"name": _name})],
                newer=_NEWER,
                expect=[grpc_expect],
            ),
        ]

SUITES = [
    Suite("qa_python_readiness", "python_backend", _MODELS, (), _CASES),
]
