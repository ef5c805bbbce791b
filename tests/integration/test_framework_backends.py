"""ONNX Runtime and PyTorch models served by infercore.Server, as users load and call them."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
torch = pytest.importorskip("torch")

from framework_models import (  # noqa: E402 - after the skips
    ONNX_ADD_SUB_CONFIG,
    TORCH_ADD_SUB_CONFIG,
    onnx_add_sub,
    onnx_mlp,
    onnx_strings,
    torch_model,
)

import infercore  # noqa: E402
from infercore import ModelState  # noqa: E402

pytestmark = pytest.mark.filterwarnings(r"ignore:`torch\.jit\.\w+` is deprecated")

BATCHED_MLP_CONFIG = """
name: "batched_mlp"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "x", data_type: TYPE_FP32, dims: [ 8 ] } ]
output [ { name: "y", data_type: TYPE_FP32, dims: [ 4 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 5000000 }
"""

TORCH_BATCHED_CONFIG = TORCH_ADD_SUB_CONFIG.replace("{name}", "torch_add_sub") + \
    "dynamic_batching { preferred_batch_size: [ 3 ] max_queue_delay_microseconds: 5000000 }\n"

NAMED_CONFIG = """
platform: "pytorch_libtorch"
max_batch_size: 4
input [ { name: "values", data_type: TYPE_FP32, dims: [ 3 ] },
        { name: "scale", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "scaled", data_type: TYPE_FP32, dims: [ 3 ] },
         { name: "total", data_type: TYPE_FP32, dims: [ 1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""


def write(model_dir: Path, config: str | None = None) -> Path:
    model_dir.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (model_dir / "config.pbtxt").write_text(config.replace("{name}", model_dir.name))
    return model_dir / "1"


def session(path: Path):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def f32(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Path:
    """One repository of good and bad framework models, shared by this module's tests."""
    root = tmp_path_factory.mktemp("framework") / "models"
    onnx_add_sub(write(root / "onnx_auto") / "model.onnx")  # no config.pbtxt at all
    onnx_add_sub(write(root / "onnx_add_sub", ONNX_ADD_SUB_CONFIG) / "model.onnx")
    onnx_mlp(write(root / "batched_mlp", BATCHED_MLP_CONFIG) / "model.onnx")
    onnx_strings(write(root / "onnx_strings") / "model.onnx")
    torch_model("add_sub", write(root / "torch_add_sub", TORCH_BATCHED_CONFIG) / "model.pt")
    torch_model("named", write(root / "torch_named", NAMED_CONFIG) / "model.pt")
    # Models that must fail to load, each with its own reason.
    bad = write(root / "onnx_corrupt", ONNX_ADD_SUB_CONFIG)
    bad.mkdir()
    (bad / "model.onnx").write_bytes(b"\x08\x01garbage")
    onnx_add_sub(write(root / "onnx_contradicted", ONNX_ADD_SUB_CONFIG.replace(
        '"INPUT1", data_type: TYPE_FP32', '"INPUT1", data_type: TYPE_INT64')) / "model.onnx")
    write(root / "onnx_missing", ONNX_ADD_SUB_CONFIG).mkdir()
    torch_model("mlp", write(root / "torch_no_config") / "model.pt", trace=True)
    torch_model("add_sub", write(root / "torch_gpu", TORCH_ADD_SUB_CONFIG.replace(
        "KIND_CPU", "KIND_GPU")) / "model.pt")
    return root


@pytest.fixture(scope="module")
def server(repository: Path):
    with infercore.Server(model_repository=repository, exit_on_error=False) as running:
        yield running


def test_bad_models_are_unavailable_with_their_reason_and_good_ones_ready(server):
    states = {entry.name: entry for entry in server.repository_index()}
    reasons = {name: entry.reason for name, entry in states.items()
               if entry.state is not ModelState.READY}
    assert set(reasons) == {"onnx_corrupt", "onnx_contradicted", "onnx_missing",
                            "torch_no_config", "torch_gpu"}
    assert "onnx runtime error 7" in reasons["onnx_corrupt"]
    assert "unexpected datatype TYPE_INT64 for input 'INPUT1', expecting TYPE_FP32" in \
        reasons["onnx_contradicted"]
    assert "unable to find" in reasons["onnx_missing"]
    assert "cannot auto-complete" in reasons["torch_no_config"]
    # a GPU instance group on a host without GPUs fails the version, as in Triton 2.51 (with
    # GPUs and a CPU-only torch, torch refuses it)
    assert "KIND_GPU" in reasons["torch_gpu"]


def test_onnx_model_without_config_is_auto_completed_and_matches_onnxruntime(server,
                                                                             repository):
    config = server.model("onnx_auto").config()
    assert config["max_batch_size"] == 4 and "dynamic_batching" in config
    assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [
        ("INPUT0", "TYPE_FP32", [4]), ("INPUT1", "TYPE_FP32", [4])]
    a, b = f32((3, 4), 1), f32((3, 4), 2)
    response = server.model("onnx_auto").infer(inputs={"INPUT0": a, "INPUT1": b}).result()
    want = session(repository / "onnx_auto" / "1" / "model.onnx").run(
        None, {"INPUT0": a, "INPUT1": b})
    np.testing.assert_array_equal(response.outputs["OUTPUT0"].to_numpy(), want[0])
    np.testing.assert_array_equal(response.outputs["OUTPUT1"].to_numpy(), want[1])


def test_dynamic_batching_runs_queued_requests_as_one_execution(server, repository):
    model = server.model("batched_mlp")
    inputs = [f32((1, 8), seed) for seed in range(4)]
    streams = [model.infer(inputs={"x": x}) for x in inputs]  # queued, not yet run
    results = [stream.result(timeout=30) for stream in streams]
    statistics = model.statistics()[0]
    assert statistics.inference_count == 4
    assert statistics.execution_count == 1  # one session.run for the four requests
    direct = session(repository / "batched_mlp" / "1" / "model.onnx")
    for x, response in zip(inputs, results, strict=True):
        np.testing.assert_allclose(response.outputs["y"].to_numpy(),
                                   direct.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_onnx_strings_through_the_in_process_api(server):
    response = server.model("onnx_strings").infer(inputs={
        "TEXT": np.array([["héllo"], ["x"]], dtype=object),
        "SUFFIX": np.array([["!"], ["?"]], dtype=object),
    }).result()
    assert response.outputs["JOINED"].to_numpy().tolist() == [["héllo!".encode()], [b"x?"]]


def test_onnx_model_serves_concurrent_callers(server):
    model = server.model("onnx_add_sub")
    errors: list[BaseException] = []

    def call(seed: int) -> None:
        try:
            for round_ in range(20):
                a = f32((2, 4), seed * 100 + round_)
                out = model.infer(inputs={"INPUT0": a, "INPUT1": a}).result(timeout=30)
                np.testing.assert_array_equal(out.outputs["OUTPUT0"].to_numpy(), a + a)
        except BaseException as exc:  # noqa: BLE001 - reported on the main thread
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors


def test_onnx_model_through_asyncio(server):
    async def main() -> np.ndarray:
        a = np.ones((1, 4), np.float32)
        response = await server.model("onnx_add_sub").async_infer(inputs={"INPUT0": a,
                                                                         "INPUT1": a})
        return response.outputs["OUTPUT1"].to_numpy()

    np.testing.assert_array_equal(asyncio.run(main()), np.zeros((1, 4), np.float32))


def test_torchscript_batches_and_matches_the_module(server, repository):
    model = server.model("torch_add_sub")
    pairs = [(f32((1, 4), seed), f32((1, 4), seed + 10)) for seed in range(3)]
    # torch tensors go in through DLPack, as a torch user would pass them.
    streams = [model.infer(inputs={"INPUT__0": torch.from_numpy(a), "INPUT__1": b})
               for a, b in pairs]
    results = [stream.result(timeout=30) for stream in streams]
    assert model.statistics()[0].execution_count == 1
    module = torch.jit.load(str(repository / "torch_add_sub" / "1" / "model.pt"))
    for (a, b), response in zip(pairs, results, strict=True):
        total, difference = module(torch.from_numpy(a), torch.from_numpy(b))
        np.testing.assert_array_equal(response.outputs["OUTPUT__0"].to_numpy(), total.numpy())
        np.testing.assert_array_equal(response.outputs["OUTPUT__1"].to_numpy(),
                                      difference.numpy())


def test_torchscript_named_arguments_and_dictionary_outputs(server):
    values = np.array([[1, 2, 3]], np.float32)
    response = server.model("torch_named").infer(
        inputs={"scale": np.array([[3]], np.float32), "values": values},
        outputs=["total"]).result()
    assert set(response.outputs) == {"total"}
    np.testing.assert_array_equal(response.outputs["total"].to_numpy(), [[18]])
