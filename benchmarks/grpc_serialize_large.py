"""``serialize_response`` (the gRPC frontend's common answer) of a 1 MiB FP32 response and
of add_sub's two FP32 [1, 16] outputs, with ``infercore serve``'s malloc settings
(memory.py): the best of 5 runs, in µs per call.

Run it once per source tree, alternating the trees, and compare within the run:

    PYTHONPATH=<old tree>/src python benchmarks/grpc_serialize_large.py
    PYTHONPATH=src python benchmarks/grpc_serialize_large.py

Prints ``<1 MiB µs> <add_sub µs>``.
"""

from __future__ import annotations

import time

import numpy as np

from infercore.frontends.grpc.encode import serialize_response
from infercore.memory import limit_arenas, map_large_buffers
from infercore.response import InferResponse
from infercore.tensor import Tensor


def best_us(response: InferResponse, calls: int, runs: int = 5) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(calls):
            serialize_response(response)
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def main() -> None:
    map_large_buffers()
    limit_arenas()
    large = np.random.default_rng(0).random((1, 262144), dtype=np.float32)
    small = np.arange(16, dtype=np.float32).reshape(1, 16)
    cases = (
        (InferResponse("identity_large", 1, "", {"OUTPUT0": Tensor.from_numpy(large)}), 300),
        (InferResponse("add_sub", 1, "", {name: Tensor.from_numpy(small)
                                          for name in ("OUTPUT0", "OUTPUT1")}), 20000),
    )
    print(" ".join(f"{best_us(response, calls):.2f}" for response, calls in cases))


if __name__ == "__main__":
    main()
