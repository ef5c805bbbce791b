"""The bench harness (``<bench>/bench.py``) on another model repository.

The harness measures its own repository (``models/triton``: add_sub, identity_large) and
checks the answers of those two models only. This runs its driver unchanged (servers one at
a time, rotation, quiet gate, perf_analyzer with stabilisation, the JSON result file) on
``--repo`` instead, with the inputs and expected outputs of ``--reference``: an ``.npz``
holding ``<model>.x`` (one request's input ``X``, batch dimension included) and
``<model>.y`` (the expected ``Y``) per model.

    <bench>/.venv/bin/python benchmarks/harness_models.py --bench DIR --repo DIR \\
        --reference ref.npz -- <bench.py arguments>

Run it with the harness's interpreter (it imports the harness and tritonclient from there).
``{repo}`` in a ``--server`` command is ``--repo``; perf_analyzer's input data is the
harness's own (fixed seed, uniform [0, 1)), sized from the reference inputs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np


def load_reference(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{model: (x, y)}`` from the reference file."""
    with np.load(path) as data:
        names = sorted({key.rsplit(".", 1)[0] for key in data.files})
        return {name: (data[f"{name}.x"], data[f"{name}.y"]) for name in names}


def make_verify(reference: dict[str, tuple[np.ndarray, np.ndarray]], host: str) -> Any:
    """A replacement for the harness's ``verify``: one request through tritonclient."""

    def verify(server: Any, model: str, protocol: str) -> str | None:
        """None when the answer matches the reference, else what went wrong."""
        x, want = reference[model]
        try:
            if protocol == "grpc":
                import tritonclient.grpc as client_module

                client = client_module.InferenceServerClient(
                    f"{host}:{server.ports['grpc_port']}")
                binary: dict[str, bool] = {}
            else:
                import tritonclient.http as client_module

                client = client_module.InferenceServerClient(
                    f"{host}:{server.ports['http_port']}")
                binary = {"binary_data": protocol == "http"}
            feed = client_module.InferInput("X", list(x.shape), "FP32")
            feed.set_data_from_numpy(x, **binary)
            result = client.infer(model, [feed],
                                  outputs=[client_module.InferRequestedOutput("Y", **binary)])
            got = result.as_numpy("Y")
            # float32 matmuls: the servers' BLAS may sum in another order than the reference
            if got is None or got.shape != want.shape or not np.allclose(
                    got, want, rtol=1e-4, atol=1e-3):
                return f"Y: wrong answer (shape {None if got is None else got.shape})"
            return None
        except Exception as error:  # noqa: BLE001 - any failure is reported, not raised
            return f"{type(error).__name__}: {error}"[:300]

    return verify


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", required=True, help="the set-up harness folder")
    parser.add_argument("--repo", required=True, help="the model repository to serve")
    parser.add_argument("--reference", required=True, help="the .npz of inputs and outputs")
    parser.add_argument("bench_args", nargs=argparse.REMAINDER,
                        help="-- then the arguments for bench.py")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(args.bench).resolve()))
    import bench  # the harness's driver, from --bench

    reference = load_reference(Path(args.reference))
    # The driver reads these module globals when it runs: the repository ({repo}), the
    # models' input sizes (perf_analyzer's input data) and the answer check.
    bench.TRITON_REPO = str(Path(args.repo).resolve())
    bench.MODELS = {name: {"X": int(x[0].size)} for name, (x, _) in reference.items()}
    bench.verify = make_verify(reference, bench.HOST)
    rest = args.bench_args[1:] if args.bench_args[:1] == ["--"] else args.bench_args
    sys.argv = [str(Path(bench.__file__)), *rest]
    bench.main()


if __name__ == "__main__":
    main()
