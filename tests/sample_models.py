"""Model sources the tests share: Triton Python-backend models written as users write them."""

ADD_SUB_CONFIG = """
name: "add_sub"
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] },
  { name: "INPUT1", data_type: TYPE_FP32, dims: [ 4 ] }
]
output [
  { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] },
  { name: "OUTPUT1", data_type: TYPE_FP32, dims: [ 4 ] }
]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

ADD_SUB_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", a + b),
                pb_utils.Tensor("OUTPUT1", a - b),
            ]))
        return responses
"""

# Every Triton datatype, as the identity test models name their tensors.
DATATYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
             "FP16", "FP32", "FP64", "BF16", "BYTES")

# Decoupled: COUNT responses 0..COUNT-1, then a bare final flag. A negative COUNT sends
# an error response first, then one normal response, then the final flag.
DECOUPLED_COUNTER_CONFIG = """
name: "counter"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "COUNT", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "INDEX", data_type: TYPE_INT32, dims: [ 1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

DECOUPLED_COUNTER_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            sender = request.get_response_sender()
            if count < 0:
                sender.send(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("negative count")))
                count = 1
            for index in range(count):
                sender.send(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("INDEX", np.array([index], np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""
