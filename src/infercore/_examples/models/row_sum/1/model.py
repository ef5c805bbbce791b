"""row_sum: one sum per row of an [rows, columns] FP64 matrix of any size."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            matrix = pb_utils.get_input_tensor_by_name(request, "MATRIX").as_numpy()
            sums = matrix.sum(axis=1)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUMS", sums)]))
        return responses
