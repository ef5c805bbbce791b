"""batch_matmul: Y = X @ W over the whole assembled batch, in one numpy call.

With "infercore.batch_assembly" set to "concat", execute() receives one request whose X
holds every row of the batch, [batch_size, 256], and returns one response; infercore splits
Y back per request along the batch dimension. numpy releases the GIL inside the matmul, so
instances run in parallel.
"""

import numpy as np

import triton_python_backend_utils as pb_utils

SIZE = 256


class TritonPythonModel:
    def initialize(self, args):
        # Fixed weights, the same in every instance and every run.
        rng = np.random.default_rng(0)
        self.weights = (rng.standard_normal((SIZE, SIZE)) / np.sqrt(SIZE)).astype(np.float32)

    def execute(self, batch):
        x = pb_utils.get_input_tensor_by_name(batch, "X").as_numpy()
        y = x @ self.weights
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("Y", y)])
