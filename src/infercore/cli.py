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

from .errors import TritonError
from .options import ModelControlMode, Options
from .repository.states import ModelIndexEntry
from .server import Server

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
    return parser


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
    )


def _configure_logging(options: Options) -> None:
    if options.log_verbose > 0:
        level = logging.DEBUG
    elif options.log_info:
        level = logging.INFO
    elif options.log_warn:
        level = logging.WARNING
    elif options.log_error:
        level = logging.ERROR
    else:
        level = logging.CRITICAL + 1
    logging.basicConfig(
        level=level,
        format="%(levelname).1s%(asctime)s.%(msecs)03d %(process)d %(name)s] %(message)s",
        datefmt="%m%d %H:%M:%S",
        stream=sys.stderr,
    )


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


def serve(options: Options) -> int:
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
        logger.info("infercore is serving %d model version(s); press Ctrl-C to stop",
                    sum(1 for e in server.repository_index() if e.state.value == "READY"))
        stop_requested.wait()
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        options = options_from_args(args)
        _configure_logging(options)
        return serve(options)
    return 2  # argparse already rejected unknown commands


if __name__ == "__main__":
    sys.exit(main())
