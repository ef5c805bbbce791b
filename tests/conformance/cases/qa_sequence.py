"""The sequence batcher's direct strategy when the model batches: the empty slots below
the highest slot that has a request are filled with null (padding) requests, so a
request's batch index is its sequence's slot. The model answers what its execute saw:
how many requests, and for each one READY, CORRID and its input (a null request's
READY is 0). Requests are sent one at a time, so every batch holds one real request.

Slots: sequence 1 takes slot 0, 2 slot 1, 3 slot 2; when 1 ends, slot 0 is free again and
sequence 4 takes it. The statistics are read in the last case (Triton's Python backend
reports a request's statistics after answering it).
"""

from __future__ import annotations

from ..case import Case, Http, Suite
from ..models import python_model

_SEEN_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """SEEN = [requests in this execute, then READY, CORRID and X of each (-1 past them;
    a null request's X is left out, -2: Triton hands it uninitialised memory)]."""

    def execute(self, requests):
        seen = np.full((1, 13), -1, np.int32)
        seen[0, 0] = len(requests)
        for index, request in enumerate(requests[:4]):
            for offset, name in enumerate(("READY", "CORRID", "X")):
                value = pb_utils.get_input_tensor_by_name(request, name).as_numpy()
                seen[0, 1 + 3 * index + offset] = int(value.flatten()[0])
            if seen[0, 1 + 3 * index] == 0:
                seen[0, 3 + 3 * index] = -2
        return [pb_utils.InferenceResponse([pb_utils.Tensor("SEEN", seen)])
                for _ in requests]
'''

_DIRECT = python_model("seq_direct_pad", '''
name: "seq_direct_pad"
backend: "python"
max_batch_size: 4
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "SEEN" data_type: TYPE_INT32 dims: [ 13 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  direct { }
  control_input [
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_INT32 } ] }
  ]
}
''', _SEEN_PY)


def _step(correlation_id: int, value: int, *, start: bool = False, end: bool = False
          ) -> Http:
    parameters: dict[str, object] = {"sequence_id": correlation_id}
    if start:
        parameters["sequence_start"] = True
    if end:
        parameters["sequence_end"] = True
    return Http("POST", "/v2/models/seq_direct_pad/infer", json={
        "parameters": parameters,
        "inputs": [{"name": "X", "datatype": "INT32", "shape": [1, 1], "data": [value]}]})


_CASES = [
    Case("direct_slot_0_runs_alone", [_step(1, 10, start=True)]),
    Case("direct_slot_1_is_padded_below", [_step(2, 20, start=True)],
         note="one null request (READY 0) in slot 0, then sequence 2's request"),
    Case("direct_slot_2_is_padded_below", [_step(3, 30, start=True), _step(3, 31)]),
    Case("direct_end_frees_slot_0", [_step(1, 11, end=True), _step(4, 40, start=True),
                                     _step(2, 21)]),
    Case("direct_padding_statistics", [Http("GET", "/v2/models/seq_direct_pad/stats")],
         note="what Triton counts for the null requests: inferences, executions and "
              "the batch sizes"),
]

SUITES = [Suite("qa_sequence_direct_padding", "sequence", [_DIRECT], (), _CASES)]
