"""Trace settings (Triton's trace extension) over HTTP and gRPC, and the flags that set them.

Global and per-model settings: reading them, updating each one, clearing a model's
setting (null over HTTP, an empty value list over gRPC) so it follows the global one
again, global updates seen through the models that inherit them, invalid values, unknown
models and keys. Then ``--trace-config`` in every form tritonserver takes, and its
deprecated ``--trace-*`` flags, each a server started with the flags and read back; bad
forms are start-up suites.

Cases of one suite run in order against one server and change its settings: each case
says what state it leaves when a later case relies on it.
"""

from __future__ import annotations

from typing import Any

from ..case import Case, Grpc, Http, Suite
from ..models import ADD_SUB_JSON, add_sub

GLOBAL = "/v2/trace/setting"
MODEL = "/v2/models/simple/trace/setting"


def _get(path: str = GLOBAL) -> Http:
    return Http("GET", path)


def _post(body: Any, path: str = GLOBAL) -> Http:
    return Http("POST", path, json=body)


def _grpc(settings: dict[str, list[str]] | None = None, model: str = "") -> Grpc:
    request: dict[str, Any] = {}
    if model:
        request["model_name"] = model
    if settings:
        request["settings"] = {key: {"value": values} for key, values in settings.items()}
    return Grpc("TraceSetting", request)




def _infer() -> Http:
    return Http("POST", "/v2/models/simple/infer", json=ADD_SUB_JSON)


# -- HTTP, no trace file: the level cannot be turned on ----------------------------------------
_HTTP = [
    Case("get_global", [_get()]),
    Case("get_model", [_get(MODEL)], note="a model without settings of its own shows the "
                                          "global ones"),
    Case("update_rate", [_post({"trace_rate": "5"}), _get(), _get(MODEL)],
         note="leaves trace_rate 5"),
    Case("update_count", [_post({"trace_count": "3"}), _get(MODEL)],
         note="leaves trace_count 3"),
    Case("update_log_frequency", [_post({"log_frequency": "4"}), _get(MODEL)],
         note="leaves log_frequency 4"),
    Case("update_several", [_post({"trace_rate": "6", "trace_count": "7",
                                   "log_frequency": "8"}), _get()]),
    Case("rate_not_a_string", [_post({"trace_rate": 5}), _get()]),
    Case("rate_not_a_number", [_post({"trace_rate": "abc"}), _get()]),
    Case("rate_with_suffix", [_post({"trace_rate": "12abc"}), _get()]),
    Case("rate_negative", [_post({"trace_rate": "-1"}), _get(), _post({"trace_rate": "6"})],
         note="tritonserver reads the rate as an unsigned 32-bit number"),
    Case("rate_too_large", [_post({"trace_rate": "4294967296"}), _get()]),
    Case("rate_zero", [_post({"trace_rate": "0"}), _get(), _post({"trace_rate": "6"})]),
    Case("count_below_minus_one", [_post({"trace_count": "-2"}), _get()]),
    Case("count_minus_one", [_post({"trace_count": "-1"}), _get(), _post({"trace_count": "7"})]),
    Case("count_not_a_number", [_post({"trace_count": "many"}), _get()]),
    Case("count_not_a_string", [_post({"trace_count": 3}), _get()]),
    Case("log_frequency_not_a_number", [_post({"log_frequency": "often"}), _get()]),
    Case("log_frequency_negative", [_post({"log_frequency": "-1"}), _get(),
                                    _post({"log_frequency": "8"})]),
    Case("log_frequency_not_a_string", [_post({"log_frequency": True}), _get()]),
    Case("level_without_file", [_post({"trace_level": ["TIMESTAMPS"]}), _get()],
         note="no trace file: a level other than OFF is an invalid setting"),
    Case("level_rate_zero", [_post({"trace_rate": "0", "trace_level": ["TENSORS"]}), _get()],
         note="the rate is checked before the file"),
    Case("level_off", [_post({"trace_level": ["OFF"]}), _get()]),
    Case("level_off_and_other", [_post({"trace_level": ["OFF", "TIMESTAMPS"]}), _get()]),
    Case("level_not_a_list", [_post({"trace_level": "TIMESTAMPS"}), _get()]),
    Case("level_not_strings", [_post({"trace_level": [1]}), _get()]),
    Case("level_unknown_name", [_post({"trace_level": ["LOUD"]}), _get()]),
    Case("level_empty_list", [_post({"trace_level": []}), _get()]),
    Case("trace_file_refused", [_post({"trace_file": "{tmp}/elsewhere.json"}), _get()]),
    Case("trace_file_null_refused", [_post({"trace_file": None}), _get()]),
    Case("trace_file_with_others", [_post({"trace_rate": "9", "trace_file": "x.json"}), _get()],
         note="the refusal comes before any other setting is applied"),
    Case("trace_mode_ignored", [_post({"trace_mode": "opentelemetry"}), _get()]),
    Case("unknown_key_ignored", [_post({"trace_speed": "fast"}), _get()]),
    Case("empty_object", [_post({})]),
    Case("empty_body", [Http("POST", GLOBAL), _get()]),
    Case("bad_json", [Http("POST", GLOBAL, body="{trace"), _get()]),
    Case("json_array", [Http("POST", GLOBAL, body="[1, 2]")]),
    Case("json_string", [Http("POST", GLOBAL, body='"trace_rate"')]),
    Case("method_put", [Http("PUT", GLOBAL, json={"trace_rate": "1"})]),
    Case("method_delete", [Http("DELETE", GLOBAL)]),
    Case("clear_global_rate", [_post({"trace_rate": None}), _get()],
         note="a cleared global setting goes back to the server's start-up value"),
    Case("clear_global_all", [_post({"trace_count": None, "log_frequency": None,
                                     "trace_level": None}), _get()]),
    # per model
    Case("model_update_rate", [_post({"trace_rate": "7"}, MODEL), _get(MODEL), _get()],
         note="leaves simple with its own trace_rate 7"),
    Case("model_sees_global_update", [_post({"trace_count": "11"}), _get(MODEL)],
         note="the model's rate stays its own, the count comes from the global setting"),
    Case("model_keeps_own_on_global_update", [_post({"trace_rate": "13"}), _get(MODEL), _get()]),
    Case("model_update_count", [_post({"trace_count": "2"}, MODEL),
                                _post({"trace_count": "12"}), _get(MODEL)]),
    Case("model_clear_rate", [_post({"trace_rate": None}, MODEL), _get(MODEL)],
         note="the count is still the model's own"),
    Case("model_clear_all", [_post({"trace_count": None}, MODEL), _get(MODEL),
                             _post({"log_frequency": "21"}), _get(MODEL)],
         note="nothing of its own left: the model follows every global setting again"),
    Case("model_invalid_rate", [_post({"trace_rate": "x"}, MODEL), _get(MODEL)]),
    Case("model_invalid_count", [_post({"trace_count": "-3"}, MODEL), _get(MODEL)]),
    Case("model_level_without_file", [_post({"trace_level": ["TIMESTAMPS"]}, MODEL),
                                      _get(MODEL)]),
    Case("model_trace_file_refused", [_post({"trace_file": "{tmp}/m.json"}, MODEL),
                                      _get(MODEL)]),
    Case("model_unknown_get", [_get("/v2/models/nope/trace/setting")]),
    Case("model_unknown_post", [_post({"trace_rate": "2"}, "/v2/models/nope/trace/setting"),
                                _get()]),
    Case("model_version_path", [_get("/v2/models/simple/versions/1/trace/setting")]),
    Case("model_bad_json", [Http("POST", MODEL, body="{"), _get(MODEL)]),
    Case("model_method_put", [Http("PUT", MODEL, json={})]),
]

# -- gRPC, no trace file --------------------------------------------------------------------------
_GRPC = [
    Case("get_global", [_grpc()]),
    Case("get_model", [_grpc(model="simple")]),
    Case("update_rate", [_grpc({"trace_rate": ["5"]}), _grpc(model="simple")]),
    Case("update_count", [_grpc({"trace_count": ["3"]}), _grpc()]),
    Case("update_log_frequency", [_grpc({"log_frequency": ["4"]}), _grpc()]),
    Case("two_values", [_grpc({"trace_rate": ["5", "6"]}), _grpc()]),
    Case("rate_not_a_number", [_grpc({"trace_rate": ["abc"]}), _grpc()]),
    Case("rate_negative", [_grpc({"trace_rate": ["-1"]}), _grpc(),
                           _grpc({"trace_rate": ["5"]})]),
    Case("count_below_minus_one", [_grpc({"trace_count": ["-5"]}), _grpc()]),
    Case("log_frequency_not_a_number", [_grpc({"log_frequency": ["x"]}), _grpc()]),
    Case("level_without_file", [_grpc({"trace_level": ["TIMESTAMPS", "TENSORS"]}), _grpc()]),
    Case("level_off_and_other", [_grpc({"trace_level": ["OFF", "TENSORS"]}), _grpc()]),
    Case("level_unknown_name", [_grpc({"trace_level": ["LOUD"]}), _grpc()]),
    Case("trace_file_refused", [_grpc({"trace_file": ["{tmp}/elsewhere.json"]}), _grpc()]),
    Case("trace_file_clear_refused", [_grpc({"trace_file": []}), _grpc()]),
    Case("trace_mode_ignored", [_grpc({"trace_mode": ["opentelemetry"]}), _grpc()]),
    Case("unknown_key_ignored", [_grpc({"trace_speed": ["fast"]}), _grpc()]),
    Case("clear_global_rate", [_grpc({"trace_rate": []}), _grpc()]),
    Case("model_update_rate", [_grpc({"trace_rate": ["9"]}, "simple"), _grpc(model="simple")]),
    Case("model_sees_global_update", [_grpc({"trace_count": ["8"]}), _grpc(model="simple")]),
    Case("model_clear_rate", [_grpc({"trace_rate": []}, "simple"), _grpc(model="simple"),
                              _grpc({"trace_rate": ["17"]}), _grpc(model="simple")]),
    Case("model_unknown_get", [_grpc(model="nope")]),
    Case("model_unknown_update", [_grpc({"trace_rate": ["9"]}, "nope"), _grpc()]),
    Case("model_invalid_value", [_grpc({"trace_count": ["-9"]}, "simple"),
                                 _grpc(model="simple")]),
    Case("http_sees_grpc_update", [_grpc({"log_frequency": ["31"]}), _get(), _get(MODEL)]),
]

# -- with a trace file: the level can be set -------------------------------------------------------
_FILE = [
    Case("get_global", [_get(), _grpc()]),
    Case("level_timestamps", [_post({"trace_level": ["TIMESTAMPS"]}), _get(MODEL)]),
    Case("level_both", [_post({"trace_level": ["TENSORS", "TIMESTAMPS"]}), _get()],
         note="the levels read back in Triton's order"),
    Case("level_repeated", [_post({"trace_level": ["TENSORS", "TENSORS"]}), _get()]),
    Case("level_unknown_when_on", [_post({"trace_level": ["LOUD"]}), _get()]),
    Case("level_lowercase_when_on", [_post({"trace_level": ["timestamps"]}), _get()]),
    Case("level_empty_when_on", [_post({"trace_level": ["TIMESTAMPS"]}),
                                 _post({"trace_level": []}), _get()]),
    Case("rate_zero_when_on", [_post({"trace_level": ["TIMESTAMPS"]}),
                               _post({"trace_rate": "0"}), _get()]),
    Case("count_zero_when_on", [_post({"trace_count": "0"}), _get()]),
    Case("clear_level", [_post({"trace_level": None}), _get()]),
    Case("model_level_on", [_post({"trace_level": ["TIMESTAMPS"], "trace_rate": "1"}, MODEL),
                            _get(MODEL), _get()]),
    Case("model_level_off", [_post({"trace_level": ["OFF"]}, MODEL), _get(MODEL)]),
    Case("grpc_level_on", [_grpc({"trace_level": ["TIMESTAMPS"], "trace_rate": ["1"]}),
                           _grpc({"trace_level": ["TENSORS", "TIMESTAMPS"]}, "simple")]),
    Case("grpc_clear_level", [_grpc({"trace_level": []}), _grpc()]),
    Case("count_after_inference", [
        _post({"trace_level": None, "trace_rate": None, "trace_count": None}, MODEL),
        _post({"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": "2"}),
        _infer(), _get(), _infer(), _infer(), _get(), _get(MODEL)],
         note="trace_count reads back what remains of it"),
    Case("count_after_inference_model", [
        _post({"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": "3"}, MODEL),
        _infer(), _get(MODEL), _get()]),
]


def _flag_suite(name: str, flags: list[str], note: str = "") -> Suite:
    return Suite(f"trace_flag_{name}", "trace", [add_sub()], flags,
                 [Case("readback", [_get(), _get(MODEL), _grpc()], note=note)])


_FLAG_SUITES = [
    _flag_suite("level", ["--trace-config=level=TIMESTAMPS"],
                note="a level without a file is accepted at start-up"),
    _flag_suite("file_level_rate", ["--trace-config=triton,file={tmp}/trace.json",
                                    "--trace-config=level=TIMESTAMPS",
                                    "--trace-config=rate=5"]),
    _flag_suite("space_separated", ["--trace-config", "triton,file={tmp}/trace.json",
                                    "--trace-config", "level=TENSORS",
                                    "--trace-config", "count=3"]),
    _flag_suite("levels_repeated", ["--trace-config=triton,file={tmp}/trace.json",
                                    "--trace-config=level=TENSORS",
                                    "--trace-config=level=TIMESTAMPS",
                                    "--trace-config=triton,log-frequency=2"]),
    _flag_suite("level_off_after_on", ["--trace-config=triton,file={tmp}/trace.json",
                                       "--trace-config=level=TIMESTAMPS",
                                       "--trace-config=level=OFF"]),
    _flag_suite("level_lowercase", ["--trace-config=triton,file={tmp}/trace.json",
                                    "--trace-config=level=timestamps"]),
    _flag_suite("rate_twice", ["--trace-config=rate=5", "--trace-config=rate=9"],
                note="the last one wins"),
    _flag_suite("count_log_frequency", ["--trace-config=count=0",
                                        "--trace-config=triton,log-frequency=10"]),
    _flag_suite("mode_triton", ["--trace-config=mode=triton",
                                "--trace-config=triton,file={tmp}/trace.json"]),
    _flag_suite("mode_opentelemetry", ["--trace-config=mode=opentelemetry",
                                       "--trace-config=level=TIMESTAMPS"]),
    _flag_suite("opentelemetry_url", ["--trace-config=mode=opentelemetry",
                                      "--trace-config=opentelemetry,url=127.0.0.1:9/v1/traces",
                                      "--trace-config=level=TIMESTAMPS",
                                      "--trace-config=rate=1"]),
    _flag_suite("opentelemetry_batch", ["--trace-config=mode=opentelemetry",
                                        "--trace-config=opentelemetry,bsp_max_queue_size=7",
                                        "--trace-config=opentelemetry,bsp_schedule_delay=8",
                                        "--trace-config=opentelemetry,"
                                        "bsp_max_export_batch_size=9"]),
    _flag_suite("opentelemetry_settings_in_triton_mode",
                ["--trace-config=opentelemetry,url=127.0.0.1:9/v1/traces",
                 "--trace-config=triton,file={tmp}/trace.json"]),
    _flag_suite("triton_file_in_opentelemetry_mode",
                ["--trace-config=mode=opentelemetry",
                 "--trace-config=triton,file={tmp}/trace.json"]),
    _flag_suite("opentelemetry_resource", ["--trace-config=mode=opentelemetry",
                                           "--trace-config=opentelemetry,resource=team=ml",
                                           "--trace-config=opentelemetry,resource=zone=b"]),
    _flag_suite("deprecated", ["--trace-file={tmp}/old.json", "--trace-level=TIMESTAMPS",
                               "--trace-rate=7", "--trace-count=4",
                               "--trace-log-frequency=9"]),
    _flag_suite("deprecated_space", ["--trace-file", "{tmp}/old.json", "--trace-level",
                                     "TENSORS", "--trace-rate", "3"]),
    _flag_suite("deprecated_level_max", ["--trace-file={tmp}/old.json", "--trace-level=MAX"]),
    _flag_suite("deprecated_level_min", ["--trace-file={tmp}/old.json", "--trace-level=MIN"]),
    _flag_suite("deprecated_levels_repeated", ["--trace-file={tmp}/old.json",
                                               "--trace-level=TIMESTAMPS",
                                               "--trace-level=TENSORS"]),
    _flag_suite("deprecated_and_config", ["--trace-rate=7", "--trace-config=rate=70",
                                          "--trace-file={tmp}/old.json",
                                          "--trace-config=triton,file={tmp}/new.json"],
                note="which of the two spellings wins"),
    _flag_suite("count_below_minus_one", ["--trace-config=count=-2"]),
    _flag_suite("file_as_global_setting", ["--trace-config=file={tmp}/trace.json"]),
    _flag_suite("rate_negative", ["--trace-config=rate=-3"]),
    _flag_suite("unknown_global_setting", ["--trace-config=speed=3"]),
    _flag_suite("unknown_triton_setting", ["--trace-config=triton,speed=3"],
                note="tritonserver keeps and shows a triton-mode setting it does not use"),
    _flag_suite("mode_uppercase", ["--trace-config=mode=TRITON"]),
]


def _startup(name: str, flags: list[str]) -> Suite:
    return Suite(f"trace_startup_{name}", "trace", flags=flags, startup=True)


_STARTUP_SUITES = [
    _startup("level_unknown", ["--trace-config=level=LOUD"]),
    _startup("rate_not_a_number", ["--trace-config=rate=often"]),
    _startup("count_not_a_number", ["--trace-config=count=x"]),
    _startup("log_frequency_not_a_number", ["--trace-config=triton,log-frequency=x"]),
    _startup("mode_unknown", ["--trace-config=mode=jaeger"]),
    _startup("unknown_mode_prefix", ["--trace-config=jaeger,url=x"]),
    _startup("no_equals", ["--trace-config=level"]),
    _startup("empty_value", ["--trace-config=rate="]),
    _startup("rate_out_of_range", ["--trace-config=rate=99999999999"]),
    _startup("opentelemetry_batch_not_a_number",
             ["--trace-config=mode=opentelemetry",
              "--trace-config=opentelemetry,bsp_max_queue_size=lots"]),
    _startup("deprecated_level_unknown", ["--trace-level=LOUD"]),
    _startup("deprecated_rate_not_a_number", ["--trace-rate=often"]),
    _startup("deprecated_count_not_a_number", ["--trace-count=x"]),
    _startup("deprecated_log_frequency_not_a_number", ["--trace-log-frequency=x"]),
]

SUITES = [
    Suite("trace_http", "trace", [add_sub()], cases=_HTTP),
    Suite("trace_grpc", "trace", [add_sub()], cases=_GRPC),
    Suite("trace_with_file", "trace", [add_sub()],
          ["--trace-config=triton,file={tmp}/trace.json"], _FILE),
    *_FLAG_SUITES,
    *_STARTUP_SUITES,
]
