"""Log settings (Triton's logging extension) over HTTP and gRPC, the flags that set them,
and the lines a server writes into its log file.

``/v2/logging`` and ``LogSettings``: reading, updating each setting with good and bad
values, unknown keys, wrong JSON types, the log file that the network may not change.
The ``--log-*`` flags in their forms, read back through the endpoints; bad values are
start-up suites. A Python model that logs through ``pb_utils.Logger`` shows the line
format in the log file (default and ISO8601) and which lines each switch lets through.

Cases of one suite run in order against one server and change its settings.
"""

from __future__ import annotations

from typing import Any

from ..case import Case, Grpc, Http, LogFile, Suite
from ..models import python_model

PATH = "/v2/logging"
LOG = "{tmp}/server.log"


def _get() -> Http:
    return Http("GET", PATH)


def _post(body: Any) -> Http:
    return Http("POST", PATH, json=body)


def _grpc(settings: dict[str, dict[str, Any]] | None = None) -> Grpc:
    return Grpc("LogSettings", {"settings": settings} if settings else {})


# -- HTTP -----------------------------------------------------------------------------------------
_HTTP = [
    Case("get", [_get()]),
    Case("info_off", [_post({"log_info": False}), _get()], note="leaves log_info false"),
    Case("info_on", [_post({"log_info": True})]),
    Case("warning_off", [_post({"log_warning": False}), _post({"log_warning": True})]),
    Case("error_off", [_post({"log_error": False}), _post({"log_error": True})]),
    Case("verbose_level", [_post({"log_verbose_level": 2}), _post({"log_verbose_level": 0})]),
    Case("verbose_level_large", [_post({"log_verbose_level": 4294967295}),
                                 _post({"log_verbose_level": 0})]),
    Case("verbose_level_past_uint32", [_post({"log_verbose_level": 4294967296}), _get()],
         note="tritonserver keeps the low 32 bits"),
    Case("format_iso8601", [_post({"log_format": "ISO8601"}), _get()]),
    Case("format_default", [_post({"log_format": "default"})]),
    Case("several", [_post({"log_info": False, "log_warning": False, "log_verbose_level": 1}),
                     _post({"log_info": True, "log_warning": True, "log_verbose_level": 0})]),
    Case("info_not_boolean", [_post({"log_info": "false"}), _get()]),
    Case("info_number", [_post({"log_info": 0}), _get()]),
    Case("warning_not_boolean", [_post({"log_warning": "no"}), _get()]),
    Case("error_not_boolean", [_post({"log_error": [True]}), _get()]),
    Case("verbose_negative", [_post({"log_verbose_level": -1}), _get()]),
    Case("verbose_string", [_post({"log_verbose_level": "1"}), _get()]),
    Case("verbose_fraction", [_post({"log_verbose_level": 1.5}), _get()]),
    Case("verbose_boolean", [_post({"log_verbose_level": True}), _get()]),
    Case("format_unknown", [_post({"log_format": "json"}), _get()]),
    Case("format_lowercase", [_post({"log_format": "iso8601"}), _get()]),
    Case("format_empty", [_post({"log_format": ""}), _get()]),
    Case("format_not_string", [_post({"log_format": 1}), _get()]),
    Case("bad_value_after_good", [_post({"log_info": False, "log_format": "json"}), _get(),
                                  _post({"log_info": True})],
         note="whether the good setting before the bad one was applied"),
    Case("bad_type_after_good", [_post({"log_error": False, "log_verbose_level": "1"}), _get(),
                                 _post({"log_error": True})]),
    Case("file_refused", [_post({"log_file": "{tmp}/other.log"}), _get()]),
    Case("file_empty_refused", [_post({"log_file": ""}), _get()]),
    Case("file_null", [_post({"log_file": None}), _get()]),
    Case("file_with_others", [_post({"log_info": False, "log_file": "{tmp}/x.log"}), _get()]),
    Case("null_values", [_post({"log_info": None, "log_verbose_level": None,
                                "log_format": None})]),
    Case("unknown_key", [_post({"log_colour": "red"})]),
    Case("empty_object", [_post({})]),
    Case("empty_body", [Http("POST", PATH), _get()]),
    Case("bad_json", [Http("POST", PATH, body="{log"), _get()]),
    Case("json_array", [Http("POST", PATH, body="[]")]),
    Case("json_string", [Http("POST", PATH, body='"log_info"')]),
    Case("method_put", [Http("PUT", PATH, json={})]),
    Case("method_delete", [Http("DELETE", PATH)]),
    Case("grpc_sees_http_update", [_post({"log_verbose_level": 3}), _grpc(),
                                   _post({"log_verbose_level": 0})]),
]

# -- gRPC -----------------------------------------------------------------------------------------
_GRPC = [
    Case("get", [_grpc()]),
    Case("info_off", [_grpc({"log_info": {"bool_param": False}}),
                      _grpc({"log_info": {"bool_param": True}})]),
    Case("warning_and_error_off", [_grpc({"log_warning": {"bool_param": False},
                                          "log_error": {"bool_param": False}}),
                                   _grpc({"log_warning": {"bool_param": True},
                                          "log_error": {"bool_param": True}})]),
    Case("verbose_level", [_grpc({"log_verbose_level": {"uint32_param": 3}}),
                           _grpc({"log_verbose_level": {"uint32_param": 0}})]),
    Case("format_iso8601", [_grpc({"log_format": {"string_param": "ISO8601"}}),
                            _grpc({"log_format": {"string_param": "default"}})]),
    Case("info_as_string", [_grpc({"log_info": {"string_param": "true"}}), _grpc()]),
    Case("info_as_number", [_grpc({"log_info": {"uint32_param": 1}}), _grpc()]),
    Case("info_no_value", [_grpc({"log_info": {}}), _grpc()]),
    Case("verbose_as_bool", [_grpc({"log_verbose_level": {"bool_param": True}}), _grpc()]),
    Case("verbose_as_string", [_grpc({"log_verbose_level": {"string_param": "1"}}), _grpc()]),
    Case("format_unknown", [_grpc({"log_format": {"string_param": "json"}}), _grpc()]),
    Case("format_as_number", [_grpc({"log_format": {"uint32_param": 1}}), _grpc()]),
    Case("file_refused", [_grpc({"log_file": {"string_param": "{tmp}/other.log"}}), _grpc()]),
    Case("file_empty_refused", [_grpc({"log_file": {"string_param": ""}}), _grpc()]),
    Case("file_no_value_refused", [_grpc({"log_file": {}}), _grpc()]),
    Case("file_with_others", [_grpc({"log_info": {"bool_param": False},
                                     "log_file": {"string_param": "{tmp}/x.log"}}), _grpc()]),
    Case("unknown_key", [_grpc({"log_colour": {"string_param": "red"}}), _grpc()]),
    Case("bad_value_after_good", [_grpc({"log_info": {"bool_param": False},
                                         "log_format": {"string_param": "json"}}), _grpc(),
                                  _grpc({"log_info": {"bool_param": True}})]),
    Case("bad_type_after_good", [_grpc({"log_warning": {"bool_param": False},
                                        "log_verbose_level": {"string_param": "1"}}), _grpc(),
                                 _grpc({"log_warning": {"bool_param": True}})]),
    Case("http_sees_grpc_update", [_grpc({"log_warning": {"bool_param": False}}), _get(),
                                   _grpc({"log_warning": {"bool_param": True}})]),
]


def _flag_suite(name: str, flags: list[str], note: str = "") -> Suite:
    return Suite(f"logging_flag_{name}", "logging", flags=flags,
                 cases=[Case("readback", [_get(), _grpc()], note=note)])


_FLAG_SUITES = [
    _flag_suite("file", [f"--log-file={LOG}"]),
    _flag_suite("file_space", ["--log-file", LOG]),
    _flag_suite("file_relative", ["--log-file=relative.log"],
                note="relative to the server's working directory, read back as given"),
    _flag_suite("file_is_a_directory", ["--log-file={tmp}"],
                note="a file that cannot be opened: the log stays where it was"),
    _flag_suite("file_in_missing_directory", ["--log-file={tmp}/nowhere/server.log"]),
    _flag_suite("file_proc_mem", ["--log-file=/proc/self/mem"]),
    _flag_suite("format_iso8601", ["--log-format=ISO8601"]),
    _flag_suite("format_default", ["--log-format", "default"]),
    _flag_suite("info_false", ["--log-info=false"]),
    _flag_suite("info_zero", ["--log-info=0"]),
    _flag_suite("info_off_word", ["--log-info=off"]),
    _flag_suite("info_uppercase", ["--log-info=FALSE"]),
    _flag_suite("info_space", ["--log-info", "false"]),
    _flag_suite("warning_false", ["--log-warning=false"]),
    _flag_suite("error_false", ["--log-error=0"]),
    _flag_suite("all_off", ["--log-info=false", "--log-warning=false", "--log-error=false"]),
    _flag_suite("verbose_number", ["--log-verbose=3"]),
    _flag_suite("verbose_space", ["--log-verbose", "2"]),
    _flag_suite("verbose_true", ["--log-verbose=true"]),
    _flag_suite("verbose_false", ["--log-verbose=false"]),
    _flag_suite("verbose_negative", ["--log-verbose=-1"]),
    _flag_suite("verbose_fraction", ["--log-verbose=1.5"]),
    _flag_suite("verbose_repeated", ["--log-verbose=1", "--log-verbose=4"],
                note="the last one wins"),
]


def _startup(name: str, flags: list[str]) -> Suite:
    return Suite(f"logging_startup_{name}", "logging", flags=flags, startup=True)


_STARTUP_SUITES = [
    _startup("format_unknown", ["--log-format=json"]),
    _startup("format_lowercase", ["--log-format=iso8601"]),
    _startup("info_not_boolean", ["--log-info=maybe"]),
    _startup("info_no", ["--log-info=no"]),
    _startup("warning_not_boolean", ["--log-warning=2"]),
    _startup("error_empty", ["--log-error="]),
    _startup("verbose_empty", ["--log-verbose="]),
    _startup("verbose_out_of_range", ["--log-verbose=99999999999"]),
]

# -- what lands in the log file -----------------------------------------------------------------
LOGGER_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        logger = pb_utils.Logger
        responses = []
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            logger.log_info(f"case {n}: info")
            logger.log_warn(f"case {n}: warning")
            logger.log_error(f"case {n}: error")
            logger.log_verbose(f"case {n}: verbose")
            logger.log(f"case {n}: plain")
            logger.log(f"case {n}: warning by level", pb_utils.Logger.WARNING)
            logger.log(f'case {n}: "quoted" and \\\\ backslash')
            logger.log(f"case {n}: two\\nlines")
            logger.log_error(f"case {n}: end")
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", np.array([n], dtype=np.int32))]))
        return responses
'''

LOGGER_CONFIG = '''
name: "logger"
backend: "python"
max_batch_size: 0
input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
'''


def _lines_of(n: int) -> list[Any]:
    """Run the logger model for case ``n``, then the log file's lines of that case."""
    return [Http("POST", "/v2/models/logger/infer",
                 json={"inputs": [{"name": "N", "datatype": "INT32", "shape": [1],
                                   "data": [n]}]}),
            LogFile(LOG, f"case {n}:", until=f"case {n}: end")]


_LINES = [
    Case("default_format", _lines_of(1)),
    Case("iso8601_format", [_post({"log_format": "ISO8601"}), *_lines_of(2),
                            _post({"log_format": "default"})]),
    Case("verbose_on", [_post({"log_verbose_level": 1}), *_lines_of(3),
                        _post({"log_verbose_level": 0})]),
    Case("info_off", [_post({"log_info": False}), *_lines_of(4), _post({"log_info": True})]),
    Case("warning_off", [_post({"log_warning": False}), *_lines_of(5),
                         _post({"log_warning": True})]),
    Case("back_to_default", _lines_of(6)),
]

SUITES = [
    Suite("logging_http", "logging", cases=_HTTP),
    Suite("logging_grpc", "logging", cases=_GRPC),
    *_FLAG_SUITES,
    *_STARTUP_SUITES,
    Suite("logging_file_lines", "logging", [python_model("logger", LOGGER_CONFIG, LOGGER_PY)],
          [f"--log-file={LOG}"], _LINES),
]
