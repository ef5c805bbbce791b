"""System and CUDA shared memory: status, register and unregister over HTTP and gRPC, and
inference reading inputs from regions and writing outputs into them.

Every key carries ``{run}``: servers of other runs share /dev/shm. The suites that use
shared memory pass ``--allow-client-shm=true`` to infercore alone (``infercore_flags``):
current Triton refuses clients' shared memory without it, Triton 2.51 has no such flag.
``shm_not_allowed`` shows infercore's default, current Triton's.

The model is Triton's ``simple`` (INT32 [16], batching): a region of 128 bytes holds
INPUT0 (0..15) at offset 0 and INPUT1 (all ones) at offset 64.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..case import Case, Grpc, GrpcStream, Http, Shm, Suite, b64, raw_tensor
from ..models import add_sub

ALLOW = ("--allow-client-shm=true",)
KEY_IN = "/conf_{run}_in"
KEY_HI = "/conf_{run}_hi"
KEY_B = "/conf_{run}_b"
KEY_OUT = "/conf_{run}_out"
KEY_SMALL = "/conf_{run}_small"
KEY_GOUT = "/conf_{run}_gout"
KEY_ABSENT = "/conf_{run}_absent"
KEY_LINK = "/conf_{run}_link"

IN0 = np.arange(16, dtype=np.int32)
IN1 = np.ones(16, dtype=np.int32)
IN_BYTES = raw_tensor(IN0) + raw_tensor(IN1)
PAGE = 4096  # the offset of a region into its object is a multiple of the page size


# -- request builders ------------------------------------------------------------------------
def _http_register(region: str, key: str, byte_size: int, offset: int | None = None) -> Http:
    body: dict[str, Any] = {"key": key, "byte_size": byte_size}
    if offset is not None:
        body["offset"] = offset
    return Http("POST", f"/v2/systemsharedmemory/region/{region}/register", json=body)


def _http_status(region: str = "") -> Http:
    where = f"/region/{region}" if region else ""
    return Http("GET", f"/v2/systemsharedmemory{where}/status")


def _http_unregister(region: str = "") -> Http:
    where = f"/region/{region}" if region else ""
    return Http("POST", f"/v2/systemsharedmemory{where}/unregister")


def _grpc_register(region: str, key: str, byte_size: int, offset: int = 0) -> Grpc:
    return Grpc("SystemSharedMemoryRegister",
                {"name": region, "key": key, "offset": offset, "byte_size": byte_size})


def _grpc_status(region: str = "") -> Grpc:
    return Grpc("SystemSharedMemoryStatus", {"name": region} if region else {})


def _grpc_unregister(region: str = "") -> Grpc:
    return Grpc("SystemSharedMemoryUnregister", {"name": region} if region else {})


def _shm_params(region: Any, byte_size: Any = 64, offset: Any = None) -> dict[str, Any]:
    params: dict[str, Any] = {"shared_memory_region": region}
    if byte_size is not None:
        params["shared_memory_byte_size"] = byte_size
    if offset is not None:
        params["shared_memory_offset"] = offset
    return params


def _http_input(name: str, region: Any = "in", byte_size: Any = 64, offset: Any = None,
                datatype: str = "INT32", shape: tuple[int, ...] = (1, 16)) -> dict[str, Any]:
    return {"name": name, "datatype": datatype, "shape": list(shape),
            "parameters": _shm_params(region, byte_size, offset)}


def _http_data_input(name: str, values: np.ndarray) -> dict[str, Any]:
    return {"name": name, "datatype": "INT32", "shape": [1, 16], "data": values.tolist()}


def _http_output(name: str, region: Any = "out", byte_size: Any = 64, offset: Any = None,
                 **extra: Any) -> dict[str, Any]:
    return {"name": name, "parameters": {**_shm_params(region, byte_size, offset), **extra}}


def _http_infer(inputs: list[dict[str, Any]], outputs: list[dict[str, Any]] | None = None,
                model: str = "simple") -> Http:
    body: dict[str, Any] = {"inputs": inputs}
    if outputs is not None:
        body["outputs"] = outputs
    return Http("POST", f"/v2/models/{model}/infer", json=body)


def _http_shm_inputs(**overrides: Any) -> list[dict[str, Any]]:
    """INPUT0 and INPUT1 from region ``in``; ``overrides`` change INPUT0's placement."""
    first = {"region": "in", "byte_size": 64, "offset": None, **overrides}
    return [_http_input("INPUT0", **first), _http_input("INPUT1", "in", 64, 64)]


def _http_good() -> Http:
    """A plain JSON request: the server still serves."""
    return _http_infer([_http_data_input("INPUT0", IN0), _http_data_input("INPUT1", IN1)])


def _grpc_param(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        return {"string_param": value}
    if isinstance(value, bool):
        return {"bool_param": value}
    return {"int64_param": str(value)}


def _grpc_shm_params(region: Any, byte_size: Any = 64, offset: Any = None) -> dict[str, Any]:
    return {key: _grpc_param(value)
            for key, value in _shm_params(region, byte_size, offset).items()}


def _grpc_input(name: str, region: Any = "in", byte_size: Any = 64, offset: Any = None,
                datatype: str = "INT32", shape: tuple[int, ...] = (1, 16)) -> dict[str, Any]:
    return {"name": name, "datatype": datatype, "shape": [str(d) for d in shape],
            "parameters": _grpc_shm_params(region, byte_size, offset)}


def _grpc_shm_inputs(**overrides: Any) -> list[dict[str, Any]]:
    first = {"region": "in", "byte_size": 64, "offset": None, **overrides}
    return [_grpc_input("INPUT0", **first), _grpc_input("INPUT1", "in", 64, 64)]


def _grpc_output(name: str, region: Any = "gout", byte_size: Any = 64,
                 offset: Any = None) -> dict[str, Any]:
    return {"name": name, "parameters": _grpc_shm_params(region, byte_size, offset)}


def _grpc_infer_request(inputs: list[dict[str, Any]],
                        outputs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    request: dict[str, Any] = {"model_name": "simple", "inputs": inputs}
    if outputs is not None:
        request["outputs"] = outputs
    return request


def _grpc_infer(inputs: list[dict[str, Any]], outputs: list[dict[str, Any]] | None = None,
                raw: tuple[bytes, ...] = ()) -> Grpc:
    return Grpc("ModelInfer", _grpc_infer_request(inputs, outputs), raw=raw)


def _grpc_good() -> Grpc:
    inputs = [{"name": n, "datatype": "INT32", "shape": ["1", "16"]}
              for n in ("INPUT0", "INPUT1")]
    return Grpc("ModelInfer", {"model_name": "simple", "inputs": inputs},
                raw=(raw_tensor(IN0), raw_tensor(IN1)))


# -- the system shared-memory API ------------------------------------------------------------
_STATUS = [
    Case("http_status_empty", [_http_status()]),
    Case("grpc_status_empty", [_grpc_status()]),
    Case("http_status_region_unknown", [_http_status("nope")]),
    Case("grpc_status_region_unknown", [_grpc_status("nope")]),
    Case("http_status_post", [Http("POST", "/v2/systemsharedmemory/status"),
                              Http("POST", "/v2/systemsharedmemory/region/nope/status")],
         note="status takes GET only"),
    Case("http_register_get", [Http("GET", "/v2/systemsharedmemory/region/a/register"),
                               Http("GET", "/v2/systemsharedmemory/region/a/unregister"),
                               Http("GET", "/v2/systemsharedmemory/unregister")],
         note="register and unregister take POST only"),
    Case("http_unknown_action", [Http("POST", "/v2/systemsharedmemory/region/a/delete"),
                                 Http("GET", "/v2/systemsharedmemory"),
                                 Http("GET", "/v2/systemsharedmemory/region/status")]),
]

_REGISTER = [
    Case("http_register_key_missing",
         [_http_register("absent", KEY_ABSENT, 64), _http_status()],
         note="a key no shared-memory object has"),
    Case("grpc_register_key_missing", [_grpc_register("absent", KEY_ABSENT, 64), _grpc_status()]),
    Case("http_register", [Shm("create", KEY_IN, 128, IN_BYTES),
                           _http_register("in", KEY_IN, 128, 0),
                           _http_status("in"), _http_status()]),
    Case("grpc_status_of_http_region", [_grpc_status("in"), _grpc_status()],
         note="HTTP and gRPC share one registry"),
    Case("http_register_same_name", [_http_register("in", KEY_IN, 128), _http_status()]),
    Case("grpc_register_same_name", [_grpc_register("in", KEY_IN, 64), _grpc_status("in")]),
    Case("http_register_same_key_again", [_http_register("in_again", KEY_IN, 64, 64),
                                          _http_status()],
         note="Triton 2.51 keeps no descriptor of a registered key open, yet looks for one "
              "to reuse: a second region of a key fails while the first is registered"),
    Case("grpc_register_same_key_again", [_grpc_register("in_again", KEY_IN, 64),
                                          _grpc_status()]),
    Case("http_register_unaligned_offset", [Shm("create", KEY_HI, PAGE + 64),
                                            _http_register("in_hi", KEY_HI, 64, 64),
                                            _http_status()],
         note="Triton maps the region itself: its offset must be a multiple of the page size"),
    Case("http_register_at_offset", [Shm("create", KEY_HI, PAGE + 64, raw_tensor(IN1), PAGE),
                                     _http_register("in_hi", KEY_HI, 64, PAGE),
                                     _http_status()],
         note="a region one page into its object (holding ones); status lists regions by "
              "name"),
    Case("http_register_out_of_bounds",
         [Shm("create", KEY_B, 128), _http_register("oob", KEY_B, 128, 64),
          _http_status("oob")],
         note="offset + byte_size past the object's 128 bytes"),
    Case("http_register_offset_past_end", [_http_register("oob", KEY_B, 1, 256)]),
    Case("http_register_too_big", [_http_register("oob", KEY_B, 129)]),
    Case("grpc_register_out_of_bounds", [_grpc_register("oob", KEY_B, 100, 64),
                                         _grpc_status()]),
    Case("http_register_zero_byte_size",
         [_http_register("zero", KEY_B, 0), _http_status("zero"), _http_unregister("zero")]),
    Case("grpc_register_zero_byte_size",
         [_grpc_register("zero", KEY_B, 0), _grpc_status("zero"), _grpc_unregister("zero")]),
    Case("http_register_whole_object_default_offset",
         [_http_register("whole", KEY_B, 128), _http_status("whole"),
          _http_unregister("whole")],
         note="offset left out: 0"),
    Case("grpc_register_unaligned_offset",
         [_grpc_register("end", KEY_B, 1, 127), _grpc_status("end"), _grpc_unregister("end")]),
    Case("http_register_json_array",
         [Http("POST", "/v2/systemsharedmemory/region/x/register", body="[]")]),
    Case("http_register_no_key", [Http("POST", "/v2/systemsharedmemory/region/x/register",
                                       json={"byte_size": 64})]),
    Case("http_register_key_not_string",
         [Http("POST", "/v2/systemsharedmemory/region/x/register",
               json={"key": 5, "byte_size": 64})]),
    Case("http_register_no_byte_size",
         [Http("POST", "/v2/systemsharedmemory/region/x/register", json={"key": KEY_IN})]),
    Case("http_register_byte_size_string",
         [Http("POST", "/v2/systemsharedmemory/region/x/register",
               json={"key": KEY_IN, "byte_size": "64"})]),
    Case("http_register_byte_size_float",
         [Http("POST", "/v2/systemsharedmemory/region/x/register",
               json={"key": KEY_IN, "byte_size": 64.0})]),
    Case("http_register_negative_offset",
         [Http("POST", "/v2/systemsharedmemory/region/x/register",
               json={"key": KEY_IN, "offset": -1, "byte_size": 64})]),
    Case("http_register_negative_byte_size",
         [Http("POST", "/v2/systemsharedmemory/region/x/register",
               json={"key": KEY_IN, "byte_size": -64})]),
    Case("http_register_no_region_name",
         [Http("POST", "/v2/systemsharedmemory/register",
               json={"key": KEY_IN, "byte_size": 64})]),
    Case("http_register_key_inner_slash", [_http_register("x", "/conf_{run}/in", 64),
                                           _http_status()]),
    Case("http_register_key_empty", [_http_register("x", "", 64)]),
    Case("grpc_register_key_empty", [_grpc_register("x", "", 64)]),
    Case("http_register_key_no_leading_slash",
         [_http_register("noslash", "conf_{run}_b", 64), _http_status("noslash"),
          _http_unregister("noslash")],
         note="shm_open takes a name without its leading slash too"),
    Case("http_register_symlink",
         [Shm("symlink", KEY_LINK, target="{tmp}/outside", data=IN_BYTES),
          _http_register("link", KEY_LINK, 128), _http_status()],
         note="a key that is a symbolic link in /dev/shm to a file elsewhere"),
    Case("grpc_register_symlink", [_grpc_register("link", KEY_LINK, 64), _grpc_status(),
                                   Shm("unlink", KEY_LINK)]),
]

# -- inference from and into regions: "in" and "in_hi" are registered -----------------------
_OFFSET_TWICE = (
    "Triton 2.51 maps a region from its offset and then adds the offset again when a "
    "request reads it, reading past the region (here, bytes of another mapping); current "
    "Triton adds only the request's offset: SharedMemoryManager::GetMemoryInfo sets "
    "'*shm_mapped_addr = (void*)((uint8_t*)it->second->mapped_addr_ + offset)' "
    "(src/shared_memory_manager.cc, triton-inference-server/server main)")


def _ones_plus_ones() -> dict[str, Any]:
    """INPUT0 read from in_hi (ones) with INPUT1 (ones): OUTPUT0 twos, OUTPUT1 zeros."""
    return {"status": 200, "body": {"model_name": "simple", "model_version": "1", "outputs": [
        {"name": "OUTPUT0", "datatype": "INT32", "shape": [1, 16], "data": [2] * 16},
        {"name": "OUTPUT1", "datatype": "INT32", "shape": [1, 16], "data": [0] * 16}]}}


_INFER = [
    Case("http_infer_inputs_from_shm", [_http_infer(_http_shm_inputs())]),
    Case("http_infer_input_from_region_at_offset",
         [_http_infer(_http_shm_inputs(region="in_hi"))],
         note="in_hi starts a page into its object: INPUT0 reads ones",
         newer=_OFFSET_TWICE, expect=[_ones_plus_ones()]),
    Case("http_infer_outputs_into_shm",
         [Shm("create", KEY_OUT, 128), _http_register("out", KEY_OUT, 128),
          _http_infer(_http_shm_inputs(), [_http_output("OUTPUT0"),
                                           _http_output("OUTPUT1", offset=64)]),
          Shm("read", KEY_OUT, 128)]),
    Case("http_infer_one_output_into_shm",
         [Shm("create", KEY_OUT, 128),
          _http_infer(_http_shm_inputs(region="in_hi"),
                      [_http_output("OUTPUT1", offset=64), {"name": "OUTPUT0"}]),
          Shm("read", KEY_OUT, 128)],
         note="one output in a region, the other as JSON data",
         newer=_OFFSET_TWICE,
         expect=[{"shm": "created"},
                 {"status": 200, "body": {"outputs": [
                     {"name": "OUTPUT0", "datatype": "INT32", "shape": [1, 16],
                      "data": [2] * 16},
                     {"name": "OUTPUT1", "datatype": "INT32", "shape": [1, 16]}]}},
                 {"shm": {"hex": "00" * 128}}]),
    Case("http_infer_output_region_larger",
         [Shm("create", KEY_OUT, 128),
          _http_infer(_http_shm_inputs(), [_http_output("OUTPUT0", byte_size=128)]),
          Shm("read", KEY_OUT, 128)],
         note="a region larger than the output"),
    Case("grpc_infer_inputs_from_shm", [_grpc_infer(_grpc_shm_inputs())]),
    Case("grpc_infer_outputs_into_shm",
         [Shm("create", KEY_GOUT, 128), _grpc_register("gout", KEY_GOUT, 128),
          _grpc_infer(_grpc_shm_inputs(), [_grpc_output("OUTPUT0"),
                                           _grpc_output("OUTPUT1", offset=64)]),
          Shm("read", KEY_GOUT, 128)]),
    Case("grpc_infer_raw_inputs_shm_output",
         [Shm("create", KEY_GOUT, 128),
          Grpc("ModelInfer", {"model_name": "simple",
                              "inputs": [{"name": n, "datatype": "INT32", "shape": ["1", "16"]}
                                         for n in ("INPUT0", "INPUT1")],
                              "outputs": [_grpc_output("OUTPUT0"), {"name": "OUTPUT1"}]},
               raw=(raw_tensor(IN0), raw_tensor(IN1))),
          Shm("read", KEY_GOUT, 128)]),
    Case("grpc_stream_infer_shm",
         [Shm("create", KEY_GOUT, 128),
          GrpcStream([_grpc_infer_request(_grpc_shm_inputs(),
                                          [_grpc_output("OUTPUT0"),
                                           _grpc_output("OUTPUT1", offset=64)])]),
          Shm("read", KEY_GOUT, 128)]),
    # inputs placed wrongly
    Case("http_infer_input_region_unknown",
         [_http_infer(_http_shm_inputs(region="nope")), _http_good()]),
    Case("grpc_infer_input_region_unknown",
         [_grpc_infer(_grpc_shm_inputs(region="nope")), _grpc_good()]),
    Case("http_infer_input_offset_at_end",
         [_http_infer(_http_shm_inputs(offset=128)), _http_good()],
         note="offset == the region's byte size"),
    Case("http_infer_input_offset_past_end",
         [_http_infer(_http_shm_inputs(offset=1000)), _http_good()]),
    Case("http_infer_input_past_region",
         [_http_infer(_http_shm_inputs(offset=96)), _http_good()],
         note="offset inside, offset + byte_size past the region"),
    Case("grpc_infer_input_offset_at_end",
         [_grpc_infer(_grpc_shm_inputs(offset=128)), _grpc_good()]),
    Case("grpc_infer_input_past_region",
         [_grpc_infer(_grpc_shm_inputs(offset=96)), _grpc_good()]),
    Case("http_infer_input_byte_size_small",
         [_http_infer(_http_shm_inputs(byte_size=60)), _http_good()]),
    Case("http_infer_input_byte_size_large",
         [_http_infer(_http_shm_inputs(byte_size=68)), _http_good()]),
    Case("grpc_infer_input_byte_size_small",
         [_grpc_infer(_grpc_shm_inputs(byte_size=60)), _grpc_good()]),
    Case("http_infer_input_byte_size_small_with_id",
         [Http("POST", "/v2/models/simple/infer",
               json={"id": "req-7", "inputs": _http_shm_inputs(byte_size=60)})],
         note="the request's id in the error's prefix"),
    Case("grpc_infer_input_byte_size_small_with_id",
         [Grpc("ModelInfer", {**_grpc_infer_request(_grpc_shm_inputs(byte_size=60)),
                              "id": "req-8"})]),
    Case("http_infer_input_shape_not_the_model_s",
         [_http_infer([_http_input("INPUT0", byte_size=32, shape=(1, 8)),
                       _http_input("INPUT1", "in", 64, 64)]), _http_good()]),
    Case("http_infer_input_name_unknown",
         [_http_infer([_http_input("INPUTX"), _http_input("INPUT1", "in", 64, 64)]),
          _http_good()]),
    Case("grpc_infer_input_missing", [_grpc_infer([_grpc_input("INPUT0")]), _grpc_good()]),
    Case("http_infer_input_byte_size_zero",
         [_http_infer(_http_shm_inputs(byte_size=0)), _http_good()]),
    Case("http_infer_input_no_byte_size",
         [_http_infer(_http_shm_inputs(byte_size=None)), _http_good()]),
    Case("grpc_infer_input_no_byte_size",
         [_grpc_infer(_grpc_shm_inputs(byte_size=None)), _grpc_good()]),
    Case("http_infer_input_datatype_of_other_width",
         [_http_infer([_http_input("INPUT0", datatype="INT64"),
                       _http_input("INPUT1", "in", 64, 64)]), _http_good()],
         note="INT64 [1,16] is 128 bytes, the region placement gives 64"),
    Case("http_infer_input_datatype_not_the_model_s",
         [_http_infer([_http_input("INPUT0", datatype="FP32"),
                       _http_input("INPUT1", "in", 64, 64)]), _http_good()],
         note="FP32 of the right size, but the model takes INT32"),
    Case("grpc_infer_input_datatype_of_other_width",
         [_grpc_infer([_grpc_input("INPUT0", datatype="INT16"),
                       _grpc_input("INPUT1", "in", 64, 64)]), _grpc_good()]),
    Case("http_infer_input_shape_of_region",
         [_http_infer([_http_input("INPUT0", byte_size=128, shape=(2, 16)),
                       _http_input("INPUT1", byte_size=128, shape=(2, 16))])],
         note="a batch of two read from the whole region"),
    Case("http_infer_input_region_and_data",
         [_http_infer([{**_http_data_input("INPUT0", IN0), "parameters": _shm_params("in")},
                       _http_input("INPUT1", "in", 64, 64)]), _http_good()]),
    Case("http_infer_input_offset_without_region",
         [_http_infer([{**_http_data_input("INPUT0", IN0),
                        "parameters": {"shared_memory_offset": 0}},
                       _http_data_input("INPUT1", IN1)]), _http_good()]),
    Case("http_infer_input_region_not_string",
         [_http_infer(_http_shm_inputs(region=5)), _http_good()]),
    Case("http_infer_input_offset_string",
         [_http_infer(_http_shm_inputs(offset="0")), _http_good()]),
    Case("http_infer_input_byte_size_negative",
         [_http_infer(_http_shm_inputs(byte_size=-64)), _http_good()]),
    Case("grpc_infer_input_region_and_contents",
         [_grpc_infer([{**_grpc_input("INPUT0"),
                        "contents": {"int_contents": IN0.tolist()}},
                       _grpc_input("INPUT1", "in", 64, 64)]), _grpc_good()]),
    Case("grpc_infer_input_region_and_raw",
         [_grpc_infer(_grpc_shm_inputs(), raw=(raw_tensor(IN0),)), _grpc_good()],
         note="raw_input_contents for an input that names a region"),
    Case("grpc_infer_input_offset_without_region",
         [_grpc_infer([{"name": "INPUT0", "datatype": "INT32", "shape": ["1", "16"],
                        "parameters": {"shared_memory_offset": {"int64_param": "0"}}},
                       _grpc_input("INPUT1", "in", 64, 64)]), _grpc_good()]),
    Case("grpc_infer_input_byte_size_string",
         [_grpc_infer(_grpc_shm_inputs(byte_size="64")), _grpc_good()]),
    Case("grpc_infer_input_region_int",
         [_grpc_infer(_grpc_shm_inputs(region=3)), _grpc_good()]),
    # outputs placed wrongly
    Case("http_infer_output_region_too_small",
         [Shm("create", KEY_SMALL, 32), _http_register("small", KEY_SMALL, 32),
          _http_infer(_http_shm_inputs(), [_http_output("OUTPUT0", "small", 32)]),
          _http_good()]),
    Case("grpc_infer_output_region_too_small",
         [_grpc_infer(_grpc_shm_inputs(), [_grpc_output("OUTPUT0", "small", 32)]),
          _grpc_good()]),
    Case("http_infer_output_byte_size_small",
         [_http_infer(_http_shm_inputs(), [_http_output("OUTPUT0", byte_size=16)]),
          _http_good()],
         note="a large region, a byte size too small for the output"),
    Case("http_infer_output_region_unknown",
         [_http_infer(_http_shm_inputs(), [_http_output("OUTPUT0", "nope")]), _http_good()]),
    Case("grpc_infer_output_region_unknown",
         [_grpc_infer(_grpc_shm_inputs(), [_grpc_output("OUTPUT0", "nope")]), _grpc_good()]),
    Case("http_infer_output_past_region",
         [_http_infer(_http_shm_inputs(), [_http_output("OUTPUT0", offset=100)]),
          _http_good()]),
    Case("grpc_infer_output_past_region",
         [_grpc_infer(_grpc_shm_inputs(), [_grpc_output("OUTPUT0", offset=100)]),
          _grpc_good()]),
    Case("http_infer_output_no_byte_size",
         [_http_infer(_http_shm_inputs(), [_http_output("OUTPUT0", byte_size=None)]),
          _http_good()]),
    Case("http_infer_output_region_and_binary",
         [_http_infer(_http_shm_inputs(), [_http_output("OUTPUT0", binary_data=True)]),
          _http_good()]),
    Case("http_infer_output_region_and_classification",
         [_http_infer(_http_shm_inputs(), [_http_output("OUTPUT0", classification=2)]),
          _http_good()]),
    Case("http_infer_output_region_not_string",
         [_http_infer(_http_shm_inputs(), [_http_output("OUTPUT0", 7)]), _http_good()]),
    Case("http_infer_after_unregister",
         [_http_unregister("in_hi"), _http_infer(_http_shm_inputs(region="in_hi")),
          _http_infer(_http_shm_inputs())]),
]

# -- unregister --------------------------------------------------------------------------------
_UNREGISTER = [
    Case("http_unregister_unknown", [_http_unregister("nope"), _http_status()]),
    Case("grpc_unregister_unknown", [_grpc_unregister("nope"), _grpc_status()]),
    Case("http_unregister_one", [_http_unregister("small"), _http_status()]),
    Case("grpc_unregister_one", [_grpc_unregister("gout"), _grpc_status()]),
    Case("grpc_register_name_empty",
         [_grpc_register("", KEY_B, 64), _grpc_status(), _http_status()],
         note="the empty name asks for every region's status, and unregisters them all"),
    Case("http_unregister_all", [_http_unregister(), _http_status(), _grpc_status()]),
    Case("http_unregister_all_when_none", [_http_unregister(), _http_status()]),
    Case("grpc_unregister_all",
         [_grpc_register("in", KEY_IN, 128), _grpc_register("in_hi", KEY_HI, 64, PAGE),
          _grpc_unregister(), _grpc_status()]),
    Case("http_register_after_unregister_all",
         [_http_register("in", KEY_IN, 128), _http_infer(_http_shm_inputs()),
          _http_unregister()] + [Shm("unlink", key) for key in (KEY_IN, KEY_HI, KEY_B, KEY_OUT,
                                                                KEY_SMALL, KEY_GOUT)],
         note="the key opens again; the objects are removed at the end"),
]

# -- CUDA shared memory on this host without GPUs ----------------------------------------------
_HANDLE = b64(bytes(64))
_CUDA = [
    Case("http_cuda_status_empty", [Http("GET", "/v2/cudasharedmemory/status")]),
    Case("grpc_cuda_status_empty", [Grpc("CudaSharedMemoryStatus")]),
    Case("http_cuda_status_region_unknown",
         [Http("GET", "/v2/cudasharedmemory/region/nope/status")]),
    Case("grpc_cuda_status_region_unknown", [Grpc("CudaSharedMemoryStatus", {"name": "nope"})]),
    Case("http_cuda_register",
         [Http("POST", "/v2/cudasharedmemory/region/gpu/register",
               json={"raw_handle": {"b64": _HANDLE}, "device_id": 0, "byte_size": 64}),
          Http("GET", "/v2/cudasharedmemory/status"), _http_good()]),
    Case("grpc_cuda_register",
         [Grpc("CudaSharedMemoryRegister",
               {"name": "gpu", "raw_handle": _HANDLE, "device_id": 0, "byte_size": 64}),
          Grpc("CudaSharedMemoryStatus"), _grpc_good()]),
    Case("http_cuda_register_no_handle",
         [Http("POST", "/v2/cudasharedmemory/region/gpu/register",
               json={"device_id": 0, "byte_size": 64})]),
    Case("http_cuda_register_no_region_name",
         [Http("POST", "/v2/cudasharedmemory/register",
               json={"raw_handle": {"b64": _HANDLE}, "device_id": 0, "byte_size": 64})]),
    Case("http_cuda_register_get", [Http("GET", "/v2/cudasharedmemory/region/gpu/register"),
                                    Http("POST", "/v2/cudasharedmemory/status")]),
    Case("http_cuda_unregister_unknown",
         [Http("POST", "/v2/cudasharedmemory/region/nope/unregister")]),
    Case("http_cuda_unregister_all", [Http("POST", "/v2/cudasharedmemory/unregister")]),
    Case("grpc_cuda_unregister_unknown", [Grpc("CudaSharedMemoryUnregister", {"name": "nope"})]),
    Case("grpc_cuda_unregister_all", [Grpc("CudaSharedMemoryUnregister")]),
    Case("cuda_calls_on_a_system_region",
         [Shm("create", KEY_IN, 128, IN_BYTES), _http_register("sys", KEY_IN, 128),
          Http("GET", "/v2/cudasharedmemory/region/sys/status"),
          Grpc("CudaSharedMemoryStatus", {"name": "sys"}),
          Http("GET", "/v2/cudasharedmemory/status"),
          Http("POST", "/v2/cudasharedmemory/region/sys/unregister"),
          Grpc("CudaSharedMemoryUnregister", {"name": "sys"}),
          Http("POST", "/v2/cudasharedmemory/unregister"),
          _http_status("sys")],
         note="the names are shared; CUDA calls leave a system region alone"),
    Case("cuda_register_name_of_system_region",
         [Http("POST", "/v2/cudasharedmemory/region/sys/register",
               json={"raw_handle": {"b64": _HANDLE}, "device_id": 0, "byte_size": 64}),
          _http_status(), _http_unregister(), Shm("unlink", KEY_IN)]),
]

# -- --allow-client-shm: current Triton refuses clients' shared memory by default ---------------
_NEWER = ("current Triton has --allow-client-shm, default false: 'Client "
          "registration/unregistration and use of shared-memory regions require the server to "
          "be started with `--allow-client-shm=true`. The default value is `false`.' "
          "(docs/protocol/extension_shared_memory.md, triton-inference-server/server main; "
          "added by PR #8721/#8739). Triton 2.51 has no such flag and serves them")
# Triton's own text for the refusal is not in the sources at hand (the code, issue and
# documentation corpora searched for it: the flag's PR #8739 shows no diff there). The code
# is UNAVAILABLE, as current Triton answers shared-memory calls that a frontend cannot serve
# (PR #8936: a frontend with no shared-memory manager answers TRITONSERVER_ERROR_UNAVAILABLE,
# HTTP 503 / gRPC UNAVAILABLE) and a feature the server was built without ("the server does
# not suppport tracing", http_server.cc HandleTrace).
_REFUSAL = ("Client shared memory is disabled: start the server with "
            "--allow-client-shm=true to use shared-memory regions")
_REFUSED_HTTP = {"status": 503, "body": {"error": _REFUSAL}}
_REFUSED_GRPC = {"code": "UNAVAILABLE", "details": _REFUSAL}
# on a stream the error travels in-band, and the stream ends OK
_REFUSED_STREAM = {"code": "OK", "stream": [{"error_message": _REFUSAL}]}
_NOT_ALLOWED = [
    Case("http_status_refused", [_http_status(), _http_status("in")], newer=_NEWER,
         expect=[_REFUSED_HTTP, _REFUSED_HTTP]),
    Case("http_register_refused",
         [Shm("create", KEY_IN, 128, IN_BYTES), _http_register("in", KEY_IN, 128)],
         newer=_NEWER, expect=[{"shm": "created"}, _REFUSED_HTTP]),
    Case("grpc_register_refused",
         [Shm("create", KEY_B, 128), _grpc_register("gin", KEY_B, 128), _grpc_status()],
         newer=_NEWER, expect=[{"shm": "created"}, _REFUSED_GRPC, _REFUSED_GRPC]),
    Case("http_infer_input_refused", [_http_infer(_http_shm_inputs()), _http_good()],
         newer=_NEWER, expect=[_REFUSED_HTTP, {"status": 200}]),
    Case("grpc_infer_input_refused", [_grpc_infer(_grpc_shm_inputs()), _grpc_good()],
         newer=_NEWER, expect=[_REFUSED_GRPC, {"code": "OK"}]),
    Case("http_infer_output_refused",
         [_http_infer([_http_data_input("INPUT0", IN0), _http_data_input("INPUT1", IN1)],
                      [_http_output("OUTPUT0", "in")])],
         newer=_NEWER, expect=[_REFUSED_HTTP]),
    Case("http_cuda_refused",
         [Http("GET", "/v2/cudasharedmemory/status"),
          Http("POST", "/v2/cudasharedmemory/region/gpu/register",
               json={"raw_handle": {"b64": _HANDLE}, "device_id": 0, "byte_size": 64}),
          Http("POST", "/v2/cudasharedmemory/unregister")],
         newer=_NEWER, expect=[_REFUSED_HTTP] * 3),
    Case("grpc_cuda_refused", [Grpc("CudaSharedMemoryStatus"), Grpc("CudaSharedMemoryUnregister")],
         newer=_NEWER, expect=[_REFUSED_GRPC] * 2),
    Case("http_unregister_refused",
         [_http_unregister("in"), _grpc_unregister(), Shm("unlink", KEY_IN),
          Shm("unlink", KEY_B)],
         newer=_NEWER,
         expect=[_REFUSED_HTTP, _REFUSED_GRPC, {"shm": "unlinked"}, {"shm": "unlinked"}]),
    Case("grpc_cuda_register_refused",
         [Grpc("CudaSharedMemoryRegister", {"name": "gpu", "raw_handle": _HANDLE,
                                            "device_id": 0, "byte_size": 64})],
         newer=_NEWER, expect=[_REFUSED_GRPC]),
    Case("grpc_status_of_one_refused", [_grpc_status("gin")], newer=_NEWER,
         expect=[_REFUSED_GRPC]),
    Case("http_unregister_all_refused", [_http_unregister()], newer=_NEWER,
         expect=[_REFUSED_HTTP]),
    Case("http_cuda_region_refused",
         [Http("GET", "/v2/cudasharedmemory/region/gpu/status"),
          Http("POST", "/v2/cudasharedmemory/region/gpu/unregister")],
         newer=_NEWER, expect=[_REFUSED_HTTP] * 2),
    Case("grpc_infer_output_refused",
         [_grpc_infer([{"name": n, "datatype": "INT32", "shape": ["1", "16"]}
                       for n in ("INPUT0", "INPUT1")], [_grpc_output("OUTPUT0")],
                      raw=(raw_tensor(IN0), raw_tensor(IN1)))],
         newer=_NEWER, expect=[_REFUSED_GRPC]),
    Case("grpc_stream_infer_input_refused",
         [GrpcStream([_grpc_infer_request(_grpc_shm_inputs())]), _grpc_good()],
         newer=_NEWER, expect=[_REFUSED_STREAM, {"code": "OK"}]),
    Case("plain_inference_served", [_http_good(), _grpc_good()]),
]

# -- a region whose object shrinks after registration ------------------------------------------
_TRUNCATED = ("Triton maps the object once and never looks at its size again: reading a "
              "region whose object was truncated after registration faults (SIGBUS) and the "
              "server dies, taking every client's requests with it. infercore checks the "
              "object's size before each use and answers an error instead (issue #22)")


def _truncated_error(region: str, key: str, size: int, needed: int) -> str:
    return (f"shared memory region '{region}' is no longer valid: its object '{key}' holds "
            f"{size} bytes, the region needs {needed}")


_TRUNCATED_INPUT = [
    Case("http_infer_from_shrunk_region",
         [Shm("create", KEY_IN, 128, IN_BYTES), _http_register("in", KEY_IN, 128),
          _http_infer(_http_shm_inputs()), Shm("truncate", KEY_IN, 32),
          _http_infer(_http_shm_inputs()), _http_status("in")],
         departure=_TRUNCATED + "; an object cut inside its last page reads as zeros in Triton",
         expect=[{"shm": "created"}, {"status": 200}, {"status": 200}, {"shm": "truncated"},
                 {"status": 400, "body": {"error": _truncated_error("in", KEY_IN, 32, 128)}},
                 {"status": 200, "body": [{"name": "in", "key": KEY_IN, "offset": 0,
                                           "byte_size": 128}]}]),
    Case("http_infer_from_truncated_region",
         [Shm("truncate", KEY_IN, 0), _http_infer(_http_shm_inputs()),
          Grpc("ServerLive"), _grpc_good(), _grpc_status()],
         departure=_TRUNCATED,
         expect=[{"shm": "truncated"},
                 {"status": 400, "body": {"error": _truncated_error("in", KEY_IN, 0, 128)}},
                 {"code": "OK", "response": {"live": True}}, {"code": "OK"},
                 {"code": "OK", "response": {"regions": {"in": {"name": "in", "key": KEY_IN,
                                                               "byte_size": "128"}}}}]),
    Case("grpc_infer_from_regrown_region",
         [Shm("truncate", KEY_IN, 128), _grpc_infer(_grpc_shm_inputs()),
          _grpc_unregister(), Shm("unlink", KEY_IN)],
         departure=_TRUNCATED,
         expect=[{"shm": "truncated"}, {"code": "OK"}, {"code": "OK"}, {"shm": "unlinked"}],
         note="the object grown back to its size serves again (zeros where it was cut)"),
]

_TRUNCATED_OUTPUT = [
    Case("grpc_infer_into_truncated_region",
         [Shm("create", KEY_GOUT, 128), _grpc_register("gout", KEY_GOUT, 128),
          Shm("truncate", KEY_GOUT, 0),
          _grpc_infer([{"name": n, "datatype": "INT32", "shape": ["1", "16"]}
                       for n in ("INPUT0", "INPUT1")], [_grpc_output("OUTPUT0")],
                      raw=(raw_tensor(IN0), raw_tensor(IN1))),
          Grpc("ServerLive"), _grpc_good(), _grpc_unregister(), Shm("unlink", KEY_GOUT)],
         departure=_TRUNCATED,
         expect=[{"shm": "created"}, {"code": "OK"}, {"shm": "truncated"},
                 {"code": "INVALID_ARGUMENT",
                  "details": _truncated_error("gout", KEY_GOUT, 0, 128)},
                 {"code": "OK", "response": {"live": True}}, {"code": "OK"}, {"code": "OK"},
                 {"shm": "unlinked"}]),
]

SUITES = [
    Suite("shm_system", "shared_memory", models=[add_sub()], infercore_flags=ALLOW,
          cases=_STATUS + _REGISTER + _INFER + _UNREGISTER + _CUDA),
    Suite("shm_not_allowed", "shared_memory", models=[add_sub()], cases=_NOT_ALLOWED),
    Suite("shm_truncated_input", "shared_memory", models=[add_sub()], infercore_flags=ALLOW,
          cases=_TRUNCATED_INPUT),
    Suite("shm_truncated_output", "shared_memory", models=[add_sub()], infercore_flags=ALLOW,
          cases=_TRUNCATED_OUTPUT),
]
