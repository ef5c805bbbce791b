"""The one place that says what in an answer may differ between two correct runs.

Only what is volatile by nature is masked; everything else in an answer (status, error
text, every field of a body) is compared exactly. Each rule has a name, used in
docs/conformance.md and in a replay's failure message:

- ``run_values``: the run's ports, temporary directory and run token (in bodies, error
  texts and log lines) become ``{http_port}``, ``{grpc_port}``, ``{metrics_port}``,
  ``{tmp}``, ``{run}``, the placeholders the cases are written with.
- ``durations``: statistics' cumulative durations (``ns`` and ``*_ns`` fields) are
  timings; a non-zero one becomes ``"<ns>"`` (zero stays zero: "never happened" is not
  volatile).
- ``timestamps``: ``last_inference`` (milliseconds since the epoch) becomes ``"<ms>"``
  when non-zero.
- ``server_version``: the ``version`` of the server metadata (Triton's release, or
  infercore's) becomes ``"<version>"``; the same value in a server's start-up table too.
- ``log_line_stamps``: in the lines read from a log file (``log_lines``), the date, time
  and process id of Triton's two line formats (``I1201 21:25:48.949297 6502 model.py:8]
  "text"`` and ``2024-12-01T21:25:48Z I 6502 model.py:8] "text"``) become placeholders;
  the level letter, the location, the message and the layout itself are compared.
- ``log_prefix``: a log line's level letter, date, time, thread id and source location
  (``E1201 21:25:48.949297 6502 server.cc:302] ``) and the quotes Triton puts around the
  message are dropped, leaving the message (a start-up error line, ``log_messages``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .wire import Endpoint

__all__ = ["RULES", "error_line", "normalize"]

RULES = ("run_values", "durations", "timestamps", "server_version", "log_line_stamps",
         "log_prefix", "program_name")

_DURATION_KEYS = re.compile(r"(^|_)ns$")
# bytes written as hex or a hash (wire._bytes_digest): no run value is spelled out there
_DIGESTS = frozenset({"hex", "sha256"})
_PROGRAM = re.compile(r"^(\S*tritonserver|infercore serve|infercore): ")
_STAMP_DEFAULT = re.compile(r"^([IWEV])\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ ")
_STAMP_ISO8601 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ([IWEV]) \d+ ")
# getopt_long's complaints, as "<program>: " starts them once program_name has run
_GETOPT = re.compile(r"<program>: (unrecognized option |option '[^']*' (requires an argument"
                     r"|doesn't allow an argument|is ambiguous)|invalid option -- )")
_LOG_PREFIX = re.compile(r"^[IWEV]\d{4} \d\d:\d\d:\d\d(\.\d+)? +\d+ [^\]]+\] ?")


def normalize(answer: Any, endpoint: Endpoint) -> Any:
    """``answer`` with every volatile part masked by the rules above."""
    substitutions = sorted(((real, key) for key, real in endpoint.substitutions().items()),
                           key=lambda pair: -len(pair[0]))
    return _walk(answer, substitutions, key=None)


def _walk(value: Any, substitutions: list[tuple[str, str]], key: str | None) -> Any:
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            out[k] = _walk(v, substitutions, k)
        if "extensions" in out and "version" in out and "name" in out:
            out["version"] = "<version>"  # server_version (HTTP body or gRPC message)
        return out
    if isinstance(value, list):
        return [_walk(v, substitutions, key) for v in value]
    if key is not None and _DURATION_KEYS.search(key) and _nonzero(value):
        return "<ns>"  # durations
    if key == "last_inference" and _nonzero(value):
        return "<ms>"  # timestamps
    if isinstance(value, str) and key == "log_lines":  # log_line_stamps
        value = _STAMP_DEFAULT.sub(r"\1<mmdd> <hh:mm:ss.us> <pid> ", value)
        value = _STAMP_ISO8601.sub(r"<iso8601> \1 <pid> ", value)
    if isinstance(value, str) and key == "log_messages":  # log_prefix
        value = _message(value)
    if isinstance(value, str) and key not in _DIGESTS:
        for real, placeholder in substitutions:  # run_values
            if not real:
                continue
            if real.isdigit():  # a port: a whole number only, never digits of another
                value = re.sub(rf"(?<!\d){real}(?!\d)", placeholder, value)
            else:
                value = value.replace(real, placeholder)
        return value
    return value


def _nonzero(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return value != 0
    if isinstance(value, str):
        return value.isdigit() and int(value) != 0
    return False


def error_line(output: str) -> str | None:
    """The line a user reads when a server stops at start-up: tritonserver's
    ``error: ...`` line or getopt's complaint about the command line (printed before
    the usage), else the last line of the output; the log prefix dropped (log_prefix)."""
    lines = [_message(line) for line in output.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("error: ") or _GETOPT.match(line):
            return line
    return lines[-1] if lines else None


def _message(line: str) -> str:
    text = _LOG_PREFIX.sub("", line.rstrip())
    if text.startswith('"') and text.endswith('"') and len(text) > 1:
        text = text[1:-1]
    return _PROGRAM.sub("<program>: ", text)
