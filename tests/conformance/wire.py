"""Sending a case's steps to a running server and writing down what it answered.

Every HTTP step goes over a new TCP connection as exactly the bytes the case gives (so
chunked bodies, odd framing and pipelined requests reach the server as a client sent
them), and http.client parses what comes back. gRPC steps are generic calls on one
channel, built from service_pb2's messages. An answer is plain JSON-able data; what in it
is volatile is masked afterwards, in normalize.py, not here.
"""

from __future__ import annotations

import hashlib
import http.client
import io
import json
import os
import shutil
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format
from tritonclient.grpc import service_pb2

from .case import Grpc, GrpcStream, Http, LogFile, RepoFile, Settled, Shm, Step, TraceFile

__all__ = ["Endpoint", "run_step"]

STEP_TIMEOUT_S = 15.0
# The headers a client reads; everything else (Date, Server, Content-Length) is framing.
READ_HEADERS = ("content-type", "content-encoding", "inference-header-content-length",
                "transfer-encoding")
SHM_DIR = "/dev/shm"
SETTLE_POLL_S = 0.1
_SERVICE = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]


@dataclass
class Endpoint:
    """Where one server run listens, and the per-run values placeholders stand for."""

    http_port: int
    grpc_port: int
    metrics_port: int
    tmp: str
    run: str  # a token unique to this run, so runs side by side never share a region
    _channel: grpc.Channel | None = None

    def substitutions(self) -> dict[str, str]:
        return {"{http_port}": str(self.http_port), "{grpc_port}": str(self.grpc_port),
                "{metrics_port}": str(self.metrics_port), "{tmp}": self.tmp,
                "{run}": self.run}

    def fill(self, value: Any) -> Any:
        """``value`` with the placeholders replaced, through strings, bytes and containers."""
        if isinstance(value, str):
            for key, real in self.substitutions().items():
                value = value.replace(key, real)
            return value
        if isinstance(value, bytes):
            for key, real in self.substitutions().items():
                value = value.replace(key.encode(), real.encode())
            return value
        if isinstance(value, Mapping):
            return {self.fill(k): self.fill(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.fill(v) for v in value)
        return value

    def channel(self) -> grpc.Channel:
        if self._channel is None:
            self._channel = grpc.insecure_channel(
                f"127.0.0.1:{self.grpc_port}",
                options=[("grpc.max_receive_message_length", -1),
                         ("grpc.max_send_message_length", -1)])
        return self._channel

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None


def run_step(endpoint: Endpoint, step: Step) -> dict[str, Any]:
    if isinstance(step, Http):
        return _http(endpoint, step)
    if isinstance(step, Grpc):
        return _grpc(endpoint, step)
    if isinstance(step, GrpcStream):
        return _grpc_stream(endpoint, step)
    if isinstance(step, Shm):
        return _shm(endpoint, step)
    if isinstance(step, Settled):
        return _settled(endpoint, step)
    if isinstance(step, LogFile):
        return _log_file(endpoint, step)
    if isinstance(step, TraceFile):
        return _trace_file(endpoint, step)
    if isinstance(step, RepoFile):
        return _repo_file(endpoint, step)
    raise TypeError(f"not a step: {step!r}")


# -- HTTP ----------------------------------------------------------------------------------
def _request_bytes(endpoint: Endpoint, step: Http) -> bytes:
    if step.raw is not None:
        return endpoint.fill(step.raw)
    body = endpoint.fill(step.payload())
    headers = [(k, endpoint.fill(v)) for k, v in step.headers]
    names = {k.lower() for k, _ in headers}
    if "host" not in names:
        headers.insert(0, ("Host", f"127.0.0.1:{endpoint.http_port}"))
    if step.chunks is not None:
        if "transfer-encoding" not in names:
            headers.append(("Transfer-Encoding", "chunked"))
        chunks = [endpoint.fill(c) for c in step.chunks]
        framed = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks)
        trailer = b"".join(f"{k}: {endpoint.fill(v)}\r\n".encode() for k, v in step.trailers)
        body = framed + b"0\r\n" + trailer + b"\r\n"
    elif body is not None and "content-length" not in names:
        headers.append(("Content-Length", str(len(body))))
    elif body is None and step.method in ("POST", "PUT") and "content-length" not in names:
        headers.append(("Content-Length", "0"))
    head = f"{step.method} {endpoint.fill(step.path)} HTTP/1.1\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
    return head.encode("latin-1") + (body or b"")


def _http(endpoint: Endpoint, step: Http) -> dict[str, Any]:
    data = _request_bytes(endpoint, step)
    answers: list[dict[str, Any]] = []
    try:
        with socket.create_connection(("127.0.0.1", endpoint.http_port),
                                      timeout=STEP_TIMEOUT_S) as sock:
            sock.sendall(data)
            if step.half_close:
                sock.shutdown(socket.SHUT_WR)
            reader = _ConnectionReader(sock)
            for _ in range(step.responses):
                answers.append(_read_response(reader, step.method))
                if answers[-1].get("status") is None:
                    break
    except ConnectionRefusedError:  # nothing listens there (--allow-http=false, ...)
        answers.append({"status": None, "refused": True})
    except (ConnectionResetError, BrokenPipeError):
        answers.append({"status": None, "closed": True})
    except TimeoutError:
        answers.append({"status": None, "timeout": True})
    return answers[0] if step.responses == 1 else {"responses": answers}


class _ConnectionReader:
    """What http.client reads responses from: one buffer for the whole connection, so a
    response that arrived together with the previous one is not lost with that one's
    buffer, and closing one response does not close the stream."""

    def __init__(self, sock: socket.socket) -> None:
        self._file = _Unclosable(socket.SocketIO(sock, "rb"))

    def makefile(self, *args: Any, **kwargs: Any) -> io.BufferedReader:
        return self._file


class _Unclosable(io.BufferedReader):
    def close(self) -> None:  # the socket is closed by its owner, after the last answer
        pass


def _read_response(reader: _ConnectionReader, method: str) -> dict[str, Any]:
    response = http.client.HTTPResponse(reader, method=method)  # type: ignore[arg-type]
    try:
        response.begin()
        body = response.read()
    except (http.client.RemoteDisconnected, ConnectionResetError, http.client.IncompleteRead):
        return {"status": None, "closed": True}
    except TimeoutError:
        return {"status": None, "timeout": True}
    except http.client.HTTPException as error:  # not an HTTP/1.x answer: what came back
        return {"status": None, "unreadable": f"{type(error).__name__}: {error}"}
    headers = {k.lower(): v for k, v in response.getheaders() if k.lower() in READ_HEADERS}
    answer: dict[str, Any] = {"status": response.status, "headers": headers}
    header_length = headers.get("inference-header-content-length")
    if header_length is not None and header_length.isdigit():
        split = int(header_length)
        answer["body"] = _decoded(body[:split])
        answer["binary"] = _bytes_digest(body[split:])
    elif headers.get("content-encoding") in ("gzip", "deflate"):
        answer["body"] = _bytes_digest(body)
    else:
        answer["body"] = _decoded(body)
    return answer


def _decoded(body: bytes) -> Any:
    if not body:
        return ""
    try:
        return json.loads(body)
    except ValueError:
        try:
            return body.decode()
        except UnicodeDecodeError:
            return _bytes_digest(body)


def _bytes_digest(data: bytes) -> Any:
    if len(data) <= 256:
        return {"hex": data.hex()}
    return {"len": len(data), "sha256": hashlib.sha256(data).hexdigest()}


# -- gRPC ----------------------------------------------------------------------------------
def _types(method: str) -> tuple[type, type]:
    descriptor = _SERVICE.methods_by_name[method]
    return (getattr(service_pb2, descriptor.input_type.name),
            getattr(service_pb2, descriptor.output_type.name))


def _message(endpoint: Endpoint, cls: type, request: Mapping[str, Any],
             raw: Any) -> Any:
    message = json_format.ParseDict(endpoint.fill(dict(request)), cls())
    for contents in raw:
        message.raw_input_contents.append(endpoint.fill(contents))
    return message


def _as_dict(message: Any) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


_COMPRESSION = {None: None, "gzip": grpc.Compression.Gzip, "deflate": grpc.Compression.Deflate}


def _grpc(endpoint: Endpoint, step: Grpc) -> dict[str, Any]:
    metadata = [(k, endpoint.fill(v)) for k, v in step.metadata] or None
    compression = _COMPRESSION[step.compression]
    if step.method.startswith("/") or step.method not in _SERVICE.methods_by_name:
        return _grpc_unknown(endpoint, step, metadata, compression)
    request_cls, response_cls = _types(step.method)
    call = endpoint.channel().unary_unary(
        f"/inference.GRPCInferenceService/{step.method}",
        request_serializer=request_cls.SerializeToString,
        response_deserializer=response_cls.FromString)
    request = _message(endpoint, request_cls, step.request, step.raw)
    try:
        response = call(request, timeout=STEP_TIMEOUT_S, metadata=metadata,
                        compression=compression)
    except grpc.RpcError as error:
        return {"code": error.code().name, "details": error.details()}
    return {"code": "OK", "response": _as_dict(response)}


def _grpc_unknown(endpoint: Endpoint, step: Grpc, metadata: Any, compression: Any
                  ) -> dict[str, Any]:
    """A method the service does not declare: an empty message, and the status."""
    path = step.method if step.method.startswith("/") else (
        f"/inference.GRPCInferenceService/{step.method}")
    call = endpoint.channel().unary_unary(path)  # bytes in, bytes out
    try:
        response = call(b"", timeout=STEP_TIMEOUT_S, metadata=metadata,
                        compression=compression)
    except grpc.RpcError as error:
        return {"code": error.code().name, "details": error.details()}
    return {"code": "OK", "response": _bytes_digest(response)}


def _grpc_stream(endpoint: Endpoint, step: GrpcStream) -> dict[str, Any]:
    request_cls, response_cls = _types("ModelStreamInfer")
    call = endpoint.channel().stream_stream(
        "/inference.GRPCInferenceService/ModelStreamInfer",
        request_serializer=request_cls.SerializeToString,
        response_deserializer=response_cls.FromString)
    raws = list(step.raw) + [()] * (len(step.requests) - len(step.raw))
    requests = [_message(endpoint, request_cls, r, raw)
                for r, raw in zip(step.requests, raws, strict=True)]
    messages: list[dict[str, Any]] = []
    try:
        for response in call(iter(requests), timeout=STEP_TIMEOUT_S,
                             metadata=[(k, endpoint.fill(v)) for k, v in step.metadata] or None,
                             compression=_COMPRESSION[step.compression]):
            messages.append(_as_dict(response))
    except grpc.RpcError as error:
        return {"code": error.code().name, "details": error.details(), "stream": messages}
    return {"code": "OK", "stream": messages}


def _settled(endpoint: Endpoint, step: Settled) -> dict[str, Any]:
    deadline = time.monotonic() + step.timeout_s
    while True:
        answer = run_step(endpoint, step.step)
        text = json.dumps(answer)
        settled = (step.until in text) if step.until is not None else True
        if (settled and step.pending not in text) or time.monotonic() > deadline:
            return answer
        time.sleep(SETTLE_POLL_S)


def _repo_file(endpoint: Endpoint, step: RepoFile) -> dict[str, Any]:
    path = Path(endpoint.fill(step.path))
    if not str(path).startswith(endpoint.tmp):
        raise ValueError(f"RepoFile {step.path!r} is not under {{tmp}}")
    if step.op == "write":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(endpoint.fill(step.text))
        return {"file": "written"}
    if step.op == "remove":
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
        return {"file": "removed"}
    raise ValueError(f"unknown RepoFile op {step.op!r}")


# -- shared memory ---------------------------------------------------------------------------
def _shm(endpoint: Endpoint, step: Shm) -> dict[str, Any]:
    path = os.path.join(SHM_DIR, endpoint.fill(step.key).lstrip("/"))
    if step.op == "create":
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, step.size)
            os.pwrite(fd, step.data, step.offset)
        finally:
            os.close(fd)
        return {"shm": "created"}
    if step.op == "read":
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return {"shm": "missing"}
        try:
            return {"shm": _bytes_digest(os.pread(fd, step.size, step.offset))}
        finally:
            os.close(fd)
    if step.op == "unlink":
        try:
            os.unlink(path)
        except FileNotFoundError:
            return {"shm": "missing"}
        return {"shm": "unlinked"}
    if step.op == "truncate":
        os.truncate(path, step.size)
        return {"shm": "truncated"}
    if step.op == "symlink":
        target = endpoint.fill(step.target)
        if step.data:
            with open(target, "wb") as file:
                file.write(step.data)
        os.symlink(target, path)
        return {"shm": "linked"}
    raise ValueError(f"unknown shm op {step.op!r}")


# -- log files -------------------------------------------------------------------------------
LOG_WAIT_S = 5.0


def _log_file(endpoint: Endpoint, step: LogFile) -> dict[str, Any]:
    path = endpoint.fill(step.path)
    contains = endpoint.fill(step.contains)
    until = endpoint.fill(step.until if step.until is not None else step.contains)
    deadline = time.monotonic() + LOG_WAIT_S
    while True:
        try:
            with open(path, encoding="utf-8", errors="replace") as file:
                lines: list[str] | None = file.read().splitlines()
        except FileNotFoundError:
            lines = None
        if (lines is not None and any(until in line for line in lines)) \
                or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    if lines is None:
        return {"log_file": "missing"}
    found = [line for line in lines if contains in line]
    if step.sort:
        found.sort(key=lambda line: line.split("] ", 1)[-1])
    return {"log_messages" if step.messages else "log_lines": found}


def _trace_file(endpoint: Endpoint, step: TraceFile) -> dict[str, Any]:
    path = endpoint.fill(step.path)
    deadline = time.monotonic() + LOG_WAIT_S
    records: list[dict[str, Any]] | None = None
    while records is None and time.monotonic() < deadline:
        try:
            with open(path, encoding="utf-8") as file:
                records = json.load(file)
        except (FileNotFoundError, ValueError):  # not there yet, or still being written
            time.sleep(0.05)
    if records is None:
        return {"trace_file": "missing"}
    traces: dict[str, set[int]] = {}
    timestamps: dict[str, int] = {}
    for record in records:
        if "model_name" in record:
            traces.setdefault(record["model_name"], set()).add(record["id"])
        for stamp in record.get("timestamps", ()):
            if not step.names or stamp["name"] in step.names:
                timestamps[stamp["name"]] = timestamps.get(stamp["name"], 0) + 1
    answer: dict[str, Any] = {
        "traces": {model: len(ids) for model, ids in sorted(traces.items())},
        "timestamps": dict(sorted(timestamps.items()))}
    if step.summary:
        answer["summary"] = _trace_summary(records)
    return answer


# A trace's frontend: the timestamp its root trace has (trace_summary.py's filter).
_FRONTEND_MARKS = {"http": "HTTP_RECV_START", "grpc": "GRPC_WAITREAD_START"}
# The spans the QA summary measures: (start, end), each measured when both are there.
_SPANS = [("HTTP_RECV_START", "HTTP_SEND_END"), ("HTTP_RECV_START", "HTTP_RECV_END"),
          ("HTTP_SEND_START", "HTTP_SEND_END"), ("GRPC_WAITREAD_START", "GRPC_SEND_END"),
          ("GRPC_WAITREAD_START", "GRPC_WAITREAD_END"), ("GRPC_SEND_START", "GRPC_SEND_END"),
          ("REQUEST_START", "REQUEST_END"), ("QUEUE_START", "COMPUTE_START"),
          ("COMPUTE_START", "COMPUTE_END"), ("COMPUTE_START", "COMPUTE_INPUT_END"),
          ("COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START"), ("COMPUTE_OUTPUT_START", "COMPUTE_END")]


def _trace_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per frontend, the traces per model the QA summary counts; spans out of order."""
    models: dict[int, str] = {}
    parents: dict[int, int] = {}
    stamps: dict[int, dict[str, int]] = {}
    for record in records:
        trace_id = record.get("id")
        if trace_id is None:
            continue
        if "model_name" in record:
            models[trace_id] = record["model_name"]
        if "parent_id" in record:
            parents[trace_id] = record["parent_id"]
        for stamp in record.get("timestamps", ()):
            stamps.setdefault(trace_id, {})[stamp["name"]] = stamp["ns"]
    summary: dict[str, Any] = {}
    disorder: list[str] = []
    for frontend, mark in _FRONTEND_MARKS.items():
        counted: dict[str, int] = {}
        for trace_id in sorted(models):
            root = trace_id
            while root in parents:
                root = parents[root]
            if root in parents or mark not in stamps.get(root, {}):
                continue
            own = stamps.get(trace_id, {})
            if "REQUEST_START" not in own or "REQUEST_END" not in own:
                continue
            model = models[trace_id]
            counted[model] = counted.get(model, 0) + 1
            for start, end in _SPANS:
                if start in own and end in own and own[end] < own[start]:
                    disorder.append(f"{model}: {end} < {start}")
        if counted:
            summary[frontend] = dict(sorted(counted.items()))
    if disorder:
        summary["out_of_order"] = sorted(set(disorder))
    return summary
