"""The KServe codec on the request path, old source tree vs new, alternated in one run.

What a frontend does per add_sub request besides the transport and the engine: gRPC
(``decode_request`` of a serialized ModelInferRequest, ``serialize_response``) and HTTP
(``decode_infer`` of a binary request body, ``encode_infer`` of the answer), for two
FP32[16] inputs echoed as outputs. The request bytes are what RemoteServer's codecs send.
Each measurement runs in a fresh interpreter with ``PYTHONPATH`` set to one tree's
``src``; rounds alternate old/new then new/old, and each cell is the best of 5 runs of
``--calls`` calls, in µs per request.

    git worktree add --detach /tmp/old-main main
    python benchmarks/kserve_codec.py --old /tmp/old-main/src --new src --rounds 6
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

_MEASURE = r'''
import json, sys, time
import numpy as np
from tritonclient.grpc import service_pb2
from infercore.frontends.grpc import codec as grpc_codec, encode as grpc_encode
from infercore.frontends.http import decode as http_decode, encode as http_encode
from infercore.frontends.shm import SystemSharedMemory
from infercore.remote import grpc_transport, http_codec
from infercore.request import InferRequest
from infercore.response import InferResponse
from infercore.tensor import DataType, Tensor

calls = int(sys.argv[1])
shm = SystemSharedMemory()
request = InferRequest("add_sub", {name: Tensor(DataType.FP32, np.arange(16, dtype=np.float32))
                                   for name in ("INPUT0", "INPUT1")})
wire = grpc_transport.encode_request(request).SerializeToString()
body, header_length = http_codec.encode_infer(request)

def grpc_path():
    decoded = grpc_codec.decode_request(service_pb2.ModelInferRequest.FromString(wire), shm)
    grpc_encode.serialize_response(
        InferResponse("add_sub", 1, "", decoded.request.inputs, {}, None, True))

def http_path():
    decoded = http_decode.decode_infer("add_sub", -1, body, header_length, shm)
    http_encode.encode_infer(
        InferResponse("add_sub", 1, "", decoded.request.inputs, {}, None, True), decoded,
        lambda name: ([], False))

best = {}
for name, path in (("grpc", grpc_path), ("http", http_path)):
    for _ in range(calls // 10):
        path()
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            path()
        runs.append((time.perf_counter() - start) / calls * 1e6)
    best[name] = min(runs)
print(json.dumps(best))
'''


def _measure(src: str, calls: int) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
    done = subprocess.run([sys.executable, "-c", _MEASURE, str(calls)], env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", required=True, help="the old tree's src folder")
    parser.add_argument("--new", default="src", help="the new tree's src folder")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    cells: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for index in range(args.rounds):
        order = [("old", args.old), ("new", args.new)]
        for label, src in order if index % 2 == 0 else reversed(order):
            cells[label].append(_measure(src, args.calls))
    print("| path | old µs | new µs | new / old (best) |")
    print("|---|---|---|---:|")
    for path in ("grpc", "http"):
        old = [cell[path] for cell in cells["old"]]
        new = [cell[path] for cell in cells["new"]]
        print(f"| {path} | {' / '.join(f'{v:.2f}' for v in old)} | "
              f"{' / '.join(f'{v:.2f}' for v in new)} | {min(new) / min(old):.3f} |")


if __name__ == "__main__":
    main()
