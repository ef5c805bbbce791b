"""The command line: ``infercore serve`` with tritonserver's flag names.

``serve`` starts a Server on the given repositories (the bundled examples when none is
given), prints Triton's table of models and their states, and runs until SIGINT/SIGTERM,
then shuts down in order (in-flight requests get ``--exit-timeout-secs``).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .backends.base import load_backend_directory, parse_backend_config
from .errors import TritonError
from .frontends import metrics as metrics_frontend
from .logs import LOG_FORMATS
from .options import ModelControlMode, Options, RateLimiterResource, RateLimitMode
from .repository.states import ModelIndexEntry
from .server import Server
from .tracing import parse_trace_config

__all__ = ["main"]

logger = logging.getLogger("infercore")



def examples_repository() -> Path:
    """The bundled example repository: shipped in the package, or in a source checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_examples" / "models", here.parents[1] / "examples" / "models"):
        if candidate.is_dir():
            return candidate
    return here.parents[1] / "examples" / "models"


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean value '{text}'")


def _rate_limit_resource(text: str) -> RateLimiterResource:
    parts = text.split(":")
    try:
        if len(parts) not in (2, 3) or not parts[0]:
            raise ValueError
        count = int(parts[1])
        device = int(parts[2]) if len(parts) == 3 else -1
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid rate limit resource '{text}', expected <name>:<count>[:<device>]"
        ) from None
    return RateLimiterResource(parts[0], count, device)


def _host_policy(text: str) -> tuple[str, str, str]:
    name, _, setting = text.partition(",")
    key, _, value = setting.partition("=")
    if not name or not key or not value:
        raise argparse.ArgumentTypeError(
            f"invalid host policy '{text}', expected <name>,<setting>=<value>")
    return name, key, value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="infercore", description="A Triton-compatible inference server in Python."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="serve a model repository",
        description="Serve one or more Triton model repositories until interrupted.",
    )
    serve.add_argument(
        "--model-repository", "--model-store", dest="model_repository", action="append",
        metavar="DIR", help="a model repository folder (repeatable); default: the bundled "
        "examples",
    )
    serve.add_argument(
        "--model-control-mode", choices=[m.value for m in ModelControlMode], default="none",
        help="none: load all at start; explicit: load only --load-model models",
    )
    serve.add_argument("--load-model", action="append", default=[], metavar="NAME",
                       help="model to load at start in explicit mode ('*' for all)")
    serve.add_argument("--strict-model-config", type=_bool, default=False, metavar="BOOL",
                       help="require a complete config.pbtxt (no auto-complete)")
    serve.add_argument("--disable-auto-complete-config", action="store_true",
                       help="same as --strict-model-config=true")
    serve.add_argument("--model-config-name", default="", metavar="NAME",
                       help="use configs/NAME.pbtxt in each model folder when present")
    serve.add_argument("--exit-on-error", type=_bool, default=True, metavar="BOOL",
                       help="exit when a model fails to load (default true)")
    serve.add_argument("--strict-readiness", type=_bool, default=True, metavar="BOOL")
    serve.add_argument("--exit-timeout-secs", type=int, default=30, metavar="SECONDS",
                       help="how long in-flight requests may take at shutdown")
    serve.add_argument("--id", dest="server_id", default="triton", help="server identifier")
    serve.add_argument("--model-load-thread-count", type=int, default=4, metavar="N")
    serve.add_argument("--log-verbose", type=int, default=0, metavar="LEVEL")
    serve.add_argument("--log-info", type=_bool, default=True, metavar="BOOL")
    serve.add_argument("--log-warning", type=_bool, default=True, metavar="BOOL")
    serve.add_argument("--log-error", type=_bool, default=True, metavar="BOOL")
    serve.add_argument("--rate-limit", choices=[m.value for m in RateLimitMode],
                       default="off", help="execution_count: run instances only while the "
                       "resources they declare are free")
    serve.add_argument("--rate-limit-resource", action="append", default=[],
                       type=_rate_limit_resource, metavar="NAME:COUNT[:DEVICE]",
                       help="size a rate-limiter resource (repeatable); without a device it "
                       "applies to every device and to global resources")
    serve.add_argument("--host-policy", action="append", default=[], type=_host_policy,
                       metavar="NAME,SETTING=VALUE",
                       help="a host policy setting (repeatable), e.g. pinned,cpu-cores=0-1")
    serve.add_argument("--backend-directory", action="append", default=[], metavar="DIR",
                       help="a folder of backend plugin modules (repeatable)")
    serve.add_argument("--backend-config", action="append", default=[],
                       metavar="NAME,SETTING=VALUE",
                       help="a backend setting (repeatable); SETTING=VALUE for all backends")
    serve.add_argument("--trace-config", action="append", default=[],
                       metavar="[MODE,]SETTING=VALUE",
                       help="trace settings as tritonserver takes them (repeatable), e.g. "
                       "level=TIMESTAMPS, rate=100, triton,file=/tmp/trace.json, "
                       "mode=opentelemetry")
    serve.add_argument("--log-file", default="", metavar="PATH",
                       help="write the log to this file instead of standard error")
    serve.add_argument("--log-format", default="default", choices=["default", "ISO8601"])
    for frontend in _frontend_modules():
        frontend.add_arguments(serve)
    return parser


def _frontend_modules() -> list[Any]:
    """Each frontend module adds its flags and builds its frontend from the parsed args."""
    from .frontends import grpc, http, metrics

    return [http, grpc, metrics]


def options_from_args(args: argparse.Namespace) -> Options:
    repositories = args.model_repository or [str(examples_repository())]
    return Options(
        model_repository=repositories,
        server_id=args.server_id,
        model_control_mode=ModelControlMode(args.model_control_mode),
        startup_models=tuple(args.load_model),
        strict_model_config=args.strict_model_config or args.disable_auto_complete_config,
        model_config_name=args.model_config_name,
        exit_on_error=args.exit_on_error,
        strict_readiness=args.strict_readiness,
        exit_timeout=args.exit_timeout_secs,
        model_load_thread_count=args.model_load_thread_count,
        log_verbose=args.log_verbose,
        log_info=args.log_info,
        log_warn=args.log_warning,
        log_error=args.log_error,
        log_file=args.log_file,
        log_format=args.log_format,
        rate_limiter_mode=RateLimitMode(args.rate_limit),
        rate_limiter_resources=tuple(args.rate_limit_resource),
        host_policies=_host_policies(args.host_policy),
        backend_configuration=parse_backend_config(args.backend_config),
        trace_config=parse_trace_config(args.trace_config),
        **metrics_frontend.options_from_args(args),
    )


def _host_policies(settings: list[tuple[str, str, str]]) -> dict[str, dict[str, str]]:
    policies: dict[str, dict[str, str]] = {}
    for name, key, value in settings:
        policies.setdefault(name, {})[key] = value
    return policies


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A table framed as Triton frames its startup tables."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=False)]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(cells: Sequence[str]) -> str:
        return "|" + "|".join(f" {c:<{w}} " for c, w in zip(cells, widths, strict=False)) + "|"

    return "\n".join([rule, line(headers), rule, *(line(r) for r in rows), rule])


def model_table(index: Sequence[ModelIndexEntry]) -> str:
    rows = []
    for entry in index:
        status = entry.state.value if not entry.reason else f"{entry.state.value}: {entry.reason}"
        rows.append([entry.name, entry.version or "-", status])
    return format_table(["Model", "Version", "Status"], rows)


def serve(options: Options, args: argparse.Namespace | None = None) -> int:
    stop_requested = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        logger.info("received %s, shutting down", signal.Signals(signum).name)
        stop_requested.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    server = Server(options)
    try:
        try:
            server.start()
        except TritonError as exc:
            print(model_table(server.repository_index()), file=sys.stderr)
            logger.error("%s", exc.message)
            return 1
        print(model_table(server.repository_index()), file=sys.stderr)
        frontends: list[Any] = []
        try:
            for module in _frontend_modules() if args is not None else []:
                frontend = module.from_args(server, args)
                if frontend is not None:
                    frontend.start()
                    frontends.append(frontend)
        except (OSError, TritonError) as exc:
            logger.error("failed to start a frontend: %s", exc)
            _stop_frontends(frontends, float(options.exit_timeout))
            return 1
        logger.info("infercore is serving %d model version(s); press Ctrl-C to stop",
                    sum(1 for e in server.repository_index() if e.state.value == "READY"))
        stop_requested.wait()
        # Stop admitting at the edges first; in-flight requests finish within the timeout.
        _stop_frontends(frontends, float(options.exit_timeout))
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def _stop_frontends(frontends: list[Any], timeout: float) -> None:
    for frontend in reversed(frontends):
        try:
            frontend.stop(timeout)
        except Exception:
            logger.exception("failed to stop a frontend cleanly")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "serve":
        try:
            options = options_from_args(args)
            for directory in args.backend_directory:
                load_backend_directory(directory)
        except TritonError as exc:
            parser.error(exc.message)
        fmt, datefmt = LOG_FORMATS[options.log_format]
        # Records propagate from the "infercore" logger (whose level the server sets) to
        # this handler; other libraries stay at WARNING.
        logging.basicConfig(level=logging.WARNING, format=fmt, datefmt=datefmt,
                            stream=sys.stderr)
        return serve(options, args)
    return 2  # argparse already rejected unknown commands


if __name__ == "__main__":
    sys.exit(main())
