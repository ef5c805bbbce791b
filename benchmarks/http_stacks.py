"""Compare HTTP stacks for the HTTP frontend: same router, same engine, different transport.

Every stack serves the same ``HttpRouter`` (the frontend's endpoints, codec and engine
calls), so the figures differ only by what carries the bytes:

- ``infercore``: the frontend as shipped: an asyncio Protocol on httptools, on uvloop.
- ``infercore-task``: the same, but every inference runs in a Task (no eager start).
- ``infercore-asyncio``: the same Protocol on asyncio's default event loop.
- ``uvicorn``: uvicorn (httptools + uvloop) with a raw ASGI adapter, no framework.
- ``granian``: granian's embedded server (Rust HTTP stack) with a raw RSGI adapter.

The driver runs the bench harness (``<bench>/run.sh``: real perf_analyzer, ports checked,
quiet-machine waits, stabilisation) with one ``--server`` entry per stack:

    python benchmarks/http_stacks.py --bench /tmp/bench --concurrency 4,16

``--serve STACK`` is the server side, started by the harness. ``--inprocess`` measures,
without sockets, what the frontend adds per request to the engine's own cost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

STACKS = ("infercore", "infercore-task", "infercore-asyncio", "uvicorn", "granian")
HERE = Path(__file__).resolve()


# -- server side -----------------------------------------------------------------------------
def _router(server: Any, executor: Any) -> Any:
    from infercore.frontends.http.routes import HttpRouter
    from infercore.frontends.shm import SystemSharedMemory

    return HttpRouter(server, SystemSharedMemory(), executor, max_input_size=64 << 20)


def _extra_headers(raw: bytes) -> list[tuple[bytes, bytes]]:
    headers = []
    for line in raw.split(b"\r\n"):
        if line:
            name, _, value = line.partition(b": ")
            headers.append((name, value))
    return headers


class AsgiAdapter:
    """A raw ASGI app over the router (what uvicorn runs)."""

    def __init__(self, router: Any) -> None:
        self.router = router

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        from infercore.frontends.http.messages import HttpRequest, HttpResponse
        from infercore.frontends.http.protocol import WANTED_HEADERS

        if scope["type"] != "http":
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        headers = {k: v for k, v in scope["headers"] if k in WANTED_HEADERS}
        request = HttpRequest(scope["method"], scope["path"], b"".join(chunks), headers)
        result = self.router.handle(request)
        if not isinstance(result, HttpResponse):
            result = await result
        body = b"".join(bytes(p) for p in result.parts)
        await send({"type": "http.response.start", "status": result.status, "headers": [
            (b"content-length", str(len(body)).encode()),
            (b"content-type", result.content_type),
            *_extra_headers(result.extra_headers)]})
        await send({"type": "http.response.body", "body": body})


class RsgiAdapter:
    """A raw RSGI app over the router (what granian runs)."""

    def __init__(self, router: Any) -> None:
        self.router = router

    async def __rsgi__(self, scope: Any, protocol: Any) -> None:
        from infercore.frontends.http.messages import HttpRequest, HttpResponse
        from infercore.frontends.http.protocol import WANTED_HEADERS

        body = await protocol()
        headers = {}
        for name in WANTED_HEADERS:
            value = scope.headers.get(name.decode())
            if value is not None:
                headers[name] = value.encode("latin-1")
        request = HttpRequest(scope.method, scope.path, body, headers)
        result = self.router.handle(request)
        if not isinstance(result, HttpResponse):
            result = await result
        out = b"".join(bytes(p) for p in result.parts)
        extra = [(k.decode(), v.decode()) for k, v in _extra_headers(result.extra_headers)]
        protocol.response_bytes(result.status, [
            ("content-type", result.content_type.decode()), *extra], out)


def serve(stack: str, repository: str, host: str, port: int) -> None:
    from concurrent.futures import ThreadPoolExecutor

    import infercore
    from infercore.frontends.http import server as http_frontend

    server = infercore.Server(model_repository=repository, log_info=False)
    server.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    executor = ThreadPoolExecutor(2)
    try:
        if stack.startswith("infercore"):
            # benchmark-only switches of the shipped frontend
            if stack == "infercore-asyncio":
                from infercore.frontends import loop_frontend

                loop_frontend.new_event_loop = asyncio.new_event_loop
            from infercore.frontends.http import protocol as http_protocol

            if stack == "infercore-task":
                http_protocol.start_eagerly = lambda coro: coro
            frontend = http_frontend.HttpFrontend(
                server, http_frontend.HttpOptions(address=host, port=port))
            frontend.start()
            stop.wait()
            frontend.stop(5.0)
        elif stack == "uvicorn":
            import uvicorn

            config = uvicorn.Config(AsgiAdapter(_router(server, executor)), host=host,
                                    port=port, loop="uvloop", http="httptools",
                                    lifespan="off", access_log=False, log_level="warning")
            uvicorn.Server(config).run()  # installs its own SIGTERM handling
        elif stack == "granian":
            import uvloop
            from granian.server.embed import Server as Granian

            async def run() -> None:
                granian = Granian(RsgiAdapter(_router(server, executor)), address=host,
                                  port=port, interface="rsgi", log_enabled=False)
                loop = asyncio.get_running_loop()
                loop.add_signal_handler(signal.SIGTERM, granian.stop)
                await granian.serve()

            uvloop.run(run())
        else:
            raise SystemExit(f"unknown stack {stack!r}")
    finally:
        executor.shutdown()
        server.stop()


# -- driver ----------------------------------------------------------------------------------
def drive(args: argparse.Namespace) -> int:
    bench = Path(args.bench).resolve()
    out = Path(args.out or tempfile.mkstemp(prefix="http-stacks-", suffix=".json")[1])
    command = [str(bench / "run.sh"), "--servers", "", "--models", "add_sub",
               "--protocols", "http", "--concurrency", args.concurrency,
               "--rounds", str(args.rounds), "--out", str(out),
               "--quiet-wait", str(args.quiet_wait)]
    if args.quick:
        command += ["--interval-ms", "1000"]
    for stack in args.stacks.split(","):
        serve_cmd = (f"{shlex.quote(sys.executable)} {shlex.quote(str(HERE))} --serve {stack} "
                     "--model-repository {repo} --http-address {host} --http-port {http_port}")
        command += ["--server", f"{stack}[http]={serve_cmd}"]
    print("+", " ".join(shlex.quote(c) for c in command), flush=True)
    result = subprocess.run(command, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if result.returncode != 0:
        return result.returncode
    print_table(json.loads(out.read_text()))
    return 0


def print_table(results: dict[str, Any]) -> None:
    from perf_compare import QUIET_CORES, summarize  # this folder is on sys.path

    summary = summarize(results["rows"])
    print("\n| stack | conc | infer/s | p50 µs | p99 µs | server cores | rounds used |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for (server, _, conc), row in sorted(summary.items()):
        mark = "*" if row["noisy"] else ""
        print(f"| {server} | {conc} | {mark}{row['throughput_infer_s']:,.0f} | "
              f"{row['p50_us']:,} | {row['p99_us']:,} | {row.get('server_cpu_cores', '')} | "
              f"{row['rounds_used']} of {row['rounds']} |")
    print(f"\n(quiet rounds: other processes used at most {QUIET_CORES} core; "
          "* = no quiet round)")


def inprocess(repository: str, calls: int) -> None:
    """µs per add_sub request: the engine alone, and through the frontend's router."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import uvloop

    import infercore
    from infercore.frontends.http.eager import Suspended
    from infercore.frontends.http.messages import HttpRequest, serialize_head
    from infercore.frontends.http.protocol import start_eagerly

    server = infercore.Server(model_repository=repository, log_info=False)
    server.start()
    router = _router(server, ThreadPoolExecutor(1))
    data = np.random.default_rng(0).random((1, 16), dtype=np.float32)
    header = json.dumps({
        "inputs": [{"name": n, "shape": [1, 16], "datatype": "FP32",
                    "parameters": {"binary_data_size": 64}} for n in ("INPUT0", "INPUT1")],
        "outputs": [{"name": n, "parameters": {"binary_data": True}}
                    for n in ("OUTPUT0", "OUTPUT1")]}).encode()
    body = header + data.tobytes() * 2
    headers = {b"inference-header-content-length": str(len(header)).encode()}

    async def engine() -> None:
        model = server.model("add_sub")
        await model.async_infer(inputs={"INPUT0": data, "INPUT1": data})

    async def frontend(eager: bool) -> None:
        request = HttpRequest("POST", "/v2/models/add_sub/infer", body, headers)
        result = router.handle(request)
        result = start_eagerly(result) if eager else asyncio.ensure_future(result)
        if isinstance(result, Suspended):  # it waits: stepped by its future's callbacks
            done = asyncio.get_running_loop().create_future()
            result.finish(lambda value, error: done.set_exception(error) if error
                          else done.set_result(value))
            result = await done
        elif not hasattr(result, "status"):
            result = await result
        serialize_head(result, result.body_length, True)

    async def measure() -> None:
        cases = {"engine only (await model.async_infer)": engine,
                 "router, eager start (as shipped)": lambda: frontend(True),
                 "router, one Task per request": lambda: frontend(False)}
        for name, call in cases.items():
            best = float("inf")
            for _ in range(5):
                start = time.perf_counter()
                for _ in range(calls):
                    await call()
                best = min(best, (time.perf_counter() - start) / calls * 1e6)
            print(f"| {name} | {best:.1f} |")

    print("| path | µs per request (best of 5) |\n|---|---:|")
    try:
        uvloop.run(measure())
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--serve", choices=STACKS, help="run one stack's server (harness side)")
    parser.add_argument("--model-repository")
    parser.add_argument("--http-address", default="127.0.0.1")
    parser.add_argument("--http-port", type=int, default=8000)
    parser.add_argument("--bench", default=str(HERE.parents[2] / "shared" / "bench"),
                        help="the bench harness folder (with its .venv set up)")
    parser.add_argument("--stacks", default=",".join(STACKS))
    parser.add_argument("--concurrency", default="4,16")
    parser.add_argument("--quiet-wait", type=int, default=60,
                        help="before each cell, wait up to this many seconds for other "
                             "processes to leave the CPUs (the machine is shared)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="1 s measurement windows")
    parser.add_argument("--out", help="the harness's result JSON")
    parser.add_argument("--inprocess", action="store_true",
                        help="measure the router without sockets instead")
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.model_repository, args.http_address, args.http_port)
        return 0
    if args.inprocess:
        inprocess(args.model_repository or str(Path(args.bench) / "models" / "triton"),
                  args.calls)
        return 0
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
