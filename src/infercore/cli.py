"""The command line: ``infercore serve`` with tritonserver's flags, names and meanings.

A launch script written for tritonserver runs with ``tritonserver`` replaced by
``infercore serve`` (or by bare ``infercore``: a command line that starts with a flag is
a ``serve`` command line). Flags take ``--flag=value`` or ``--flag value``; booleans take
true/false, on/off, 1/0; repeatable flags repeat as in tritonserver. Flags that tune GPU
memory (``--pinned-memory-pool-byte-size``, ``--cuda-memory-pool-byte-size``, ...) are
accepted and shown in the options table, without effect on a CPU host. A bad command line
is answered as tritonserver answers it: the usage, then the error ("unrecognized option
'--x'", 'Bad option: "--x". ...') last, exit status 1.

``serve`` itself (frontends, model loading, tables, signals, shutdown) is in launch.py.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from ._version import __version__
from .backends.base import load_backend_directory, parse_backend_config
from .errors import InvalidArgumentError, TritonError
from .frontends import metrics as metrics_frontend
from .frontends import shm
from .launch import ServeExtras
from .launch import serve as _serve
from .logs import LOG_FORMATS, triton_formatter, triton_handler
from .options import ModelControlMode, Options, RateLimiterResource, RateLimitMode
from .supervisor import SupervisorPolicy, serve_command, supervise
from .trace_settings import option_int, parse_trace_config, parse_trace_item, parse_trace_level

__all__ = ["build_parser", "main", "options_from_args", "serve_extras"]

logger = logging.getLogger("infercore")

USAGE_EXIT = 1  # tritonserver's exit status for a bad command line


def examples_repository() -> Path:
    """The bundled example repository: shipped in the package, or in a source checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_examples" / "models", here.parents[1] / "examples" / "models"):
        if candidate.is_dir():
            return candidate
    return here.parents[1] / "examples" / "models"


# -- the parser ------------------------------------------------------------------------------
class TritonArgumentParser(argparse.ArgumentParser):
    """argparse answering bad command lines in tritonserver's words, with its exit status."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        if message.startswith("Error: "):  # tritonserver's own checks: said as they are
            self.exit(USAGE_EXIT, f"{message}\n")
        self.exit(USAGE_EXIT, f"{self.prog}: {_triton_wording(message)}\n")


_ARGUMENT = re.compile(r"argument ([^:]+): (.*)", re.DOTALL)


def _triton_wording(message: str) -> str:
    if message.startswith("unrecognized arguments: "):
        first = message.removeprefix("unrecognized arguments: ").split()[0]
        if first.startswith("-"):
            return f"unrecognized option '{first}'"
        return f"Unexpected argument: {first}"
    match = _ARGUMENT.fullmatch(message)
    if match is None:
        return message
    flag = match.group(1).split("/")[0]
    detail = match.group(2)
    if detail.startswith("expected one argument"):
        return f"option '{flag}' requires an argument"
    if detail.startswith("ignored explicit argument"):
        return f"option '{flag}' doesn't allow an argument"
    return f'Bad option: "{flag}".\n{detail}'


def _type(name: str, parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type: ``parse`` with its ValueError turned into a usage error."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except (ValueError, InvalidArgumentError) as exc:
            detail = exc.message if isinstance(exc, InvalidArgumentError) else str(exc)
            raise argparse.ArgumentTypeError(detail) from None

    convert.__name__ = name
    return convert


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "on"):
        return True
    if lowered in ("0", "false", "off"):
        return False
    raise ValueError(f"invalid value for bool option: {text}")


def _parse_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"Invalid option value. Got {text}") from None


def _parse_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"Invalid option value. Got {text}") from None


def _parse_verbose(text: str) -> int:
    lowered = text.strip().lower()  # tritonserver takes true/false for 1/0 here
    value = {"true": 1, "false": 0}.get(lowered)
    # read by std::stoi ("1.5" is 1); a negative level is 0
    return max(0, option_int(text)) if value is None else value


def _check_trace_item(text: str) -> str:
    parse_trace_item(text)  # raises InvalidArgumentError with tritonserver's wording
    return text


def _lowered_choice(flag: str, choices: Sequence[str]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        lowered = text.strip().lower()
        if lowered not in choices:
            raise ValueError(f"invalid argument for --{flag}: '{text}' (choose from "
                             + ", ".join(choices) + ")")
        return lowered
    return parse


def _parse_log_format(text: str) -> str:
    if text not in LOG_FORMATS:
        raise ValueError("invalid argument for --log-format")
    return text


def _parse_rate_limit_resource(text: str) -> RateLimiterResource:
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0]:
        raise ValueError("--rate-limit-resource option format is "
                         "'<resource_name>:<count>:<device>' or '<resource_name>:<count>'. "
                         f"Got {text}")
    count = _parse_int(parts[1])
    device = _parse_int(parts[2]) if len(parts) == 3 else -1
    return RateLimiterResource(parts[0], count, device)


def _named_setting(flag: str, config_name: str) -> Callable[[str], tuple[str, str, str]]:
    """``<name>,<setting>=<value>`` (host policy, cache config) -> (name, setting, value)."""

    def parse(text: str) -> tuple[str, str, str]:
        name, comma, setting = text.partition(",")
        key, equals, value = setting.partition("=")
        if not comma or not name:
            raise ValueError(f"No {config_name} specified. --{flag} option format is "
                             f"<{config_name}>,<setting>=<value>. Got {text}")
        if not equals or not key or not value:
            raise ValueError(f"--{flag} option format is '<{config_name}>,<setting>=<value>'. "
                             f"Got {text}")
        return name, key, value
    return parse


def _parse_backend_config(text: str) -> str:
    parse_backend_config([text])  # raises InvalidArgumentError with tritonserver's wording
    return text


def _device_pair(flag: str, convert: Callable[[str], Any]) -> Callable[[str], tuple[int, Any]]:
    def parse(text: str) -> tuple[int, Any]:
        device, colon, value = text.partition(":")
        if not colon:
            raise ValueError("Cannot parse pair option due to incorrect number of inputs. "
                             f"--{flag} argument requires format <first>:<second>. "
                             f"Found: {text}")
        return _parse_int(device), convert(value)
    return parse


BOOL = _type("boolean", _parse_bool)
INT = _type("integer", _parse_int)
FLOAT = _type("float", _parse_float)
STOI = _type("integer", option_int)  # tritonserver's int options read by std::stoi


def build_parser() -> argparse.ArgumentParser:
    parser = TritonArgumentParser(
        prog="infercore", description="A Triton-compatible inference server in Python.",
        epilog="`infercore --flag ...` (starting with a flag) is `infercore serve --flag ...`.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser(
        "serve", help="serve model repositories (tritonserver's command line)",
        usage="%(prog)s [options]",
        description="Serve Triton model repositories over KServe v2 HTTP/REST and gRPC, "
                    "with tritonserver's flags, until SIGINT or SIGTERM.")
    add_serve_arguments(serve)
    return parser


def add_serve_arguments(serve: argparse.ArgumentParser) -> None:
    """tritonserver's flags, in its groups; the frontends add theirs (HTTP, gRPC, metrics)."""
    group = serve.add_argument_group("Server")
    group.add_argument("--id", dest="server_id", default="triton", metavar="ID",
                       help="identifier of this server (default triton)")
    group.add_argument("--exit-timeout-secs", type=INT, default=30, metavar="SECONDS",
                       help="at shutdown, how long in-flight requests may take before they "
                            "are failed and the server exits (default 30)")

    group = serve.add_argument_group("Logging")
    group.add_argument("--log-verbose", type=_type("integer", _parse_verbose), default=0,
                       metavar="LEVEL", help="verbose logging level; 0 disables (default 0)")
    group.add_argument("--log-info", type=BOOL, default=True, metavar="BOOL")
    group.add_argument("--log-warning", type=BOOL, default=True, metavar="BOOL")
    group.add_argument("--log-error", type=BOOL, default=True, metavar="BOOL")
    group.add_argument("--log-format", type=_type("format", _parse_log_format),
                       default="default", metavar="FORMAT",
                       help="default (glog-like) or ISO8601")
    group.add_argument("--log-file", default="", metavar="PATH",
                       help="write the log to this file instead of standard error")

    group = serve.add_argument_group("Model Repository")
    group.add_argument("--model-repository", "--model-store", dest="model_repository",
                       action="append", metavar="PATH",
                       help="a model repository folder (repeatable); default: the bundled "
                            "examples")
    group.add_argument("--exit-on-error", type=BOOL, default=True, metavar="BOOL",
                       help="exit when a model fails to load at startup (default true)")
    group.add_argument("--disable-auto-complete-config", action="store_true",
                       help="require complete config.pbtxt files (no auto-complete)")
    group.add_argument("--strict-readiness", type=BOOL, default=True, metavar="BOOL",
                       help="true: /v2/health/ready only when every model is ready; false: "
                            "once the startup loads are done (default true)")
    group.add_argument("--model-control-mode", default="none", metavar="MODE",
                       type=_type("mode", _lowered_choice(
                           "model-control-mode", [m.value for m in ModelControlMode])),
                       help="none: load every model at start; poll: also follow repository "
                            "changes; explicit: load --load-model models, then only through "
                            "the model repository API (default none)")
    group.add_argument("--repository-poll-secs", type=FLOAT, default=15.0, metavar="SECONDS",
                       help="interval between repository polls in poll mode (default 15)")
    group.add_argument("--load-model", action="append", default=[], metavar="NAME",
                       help="model to load at start in explicit mode (repeatable; '*' alone "
                            "loads every model)")
    group.add_argument("--model-config-name", default="", metavar="NAME",
                       help="use configs/NAME.pbtxt in each model folder when present")
    group.add_argument("--model-load-thread-count", type=INT, default=4, metavar="N",
                       help="models loaded at once (default 4)")
    group.add_argument("--model-load-retry-count", type=INT, default=0, metavar="N",
                       help="retries of a failed model load (default 0)")
    group.add_argument("--model-namespacing", type=BOOL, default=False, metavar="BOOL",
                       help="serve same-named models of different repositories apart")

    for module in _frontend_modules():
        module.add_arguments(serve)
    shm.add_arguments(serve)  # one flag for the HTTP and gRPC frontends

    group = serve.add_argument_group("Tracing")
    group.add_argument("--trace-config", action="append", default=[],
                       type=_type("setting", _check_trace_item),
                       metavar="[MODE,]SETTING=VALUE",
                       help="a trace setting (repeatable): level=TIMESTAMPS, rate=1000, "
                            "count=-1, mode=triton|opentelemetry, triton,file=PATH, "
                            "triton,log-frequency=N, opentelemetry,url=URL")

    group = serve.add_argument_group("Backend")
    group.add_argument("--backend-directory", action="append", default=[], metavar="DIR",
                       help="a folder of backend plugin modules (repeatable); tritonserver's "
                            "shared-library folders are skipped")
    group.add_argument("--backend-config", action="append", default=[],
                       type=_type("setting", _parse_backend_config),
                       metavar="BACKEND,SETTING=VALUE",
                       help="a backend setting (repeatable); SETTING=VALUE for every backend")

    group = serve.add_argument_group(
        "Supervisor", "infercore's own: restart a server that died (docs/operations.md).")
    group.add_argument("--supervise", action="store_true",
                       help="run the server as a child process and restart it when it dies "
                            "after it started serving (a crashing in-thread model)")
    group.add_argument("--supervise-max-restarts", type=INT, default=5, metavar="N",
                       help="restarts allowed within --supervise-window-secs before giving "
                            "up (default 5)")
    group.add_argument("--supervise-window-secs", type=FLOAT, default=60.0, metavar="SECONDS",
                       help="the window the restart bound counts in (default 60)")

    group = serve.add_argument_group("Ray")
    group.add_argument("--ray-address", default="", metavar="ADDRESS",
                       help="the Ray cluster for instance groups placed on Ray: auto, "
                            "<host>:<port>, ray://<host>:<port> or local (default: the "
                            "RAY_ADDRESS environment variable; docs/ray.md)")

    group = serve.add_argument_group("Repository Agent")
    group.add_argument("--repoagent-directory", default=None, metavar="DIR",
                       help="accepted for compatibility; no effect")

    group = serve.add_argument_group("Response Cache")
    group.add_argument("--cache-config", action="append", default=[], metavar="CACHE,KEY=VALUE",
                       type=_type("setting", _named_setting("cache-config", "cache name")),
                       help="a cache setting (repeatable), e.g. local,size=1048576 for a "
                            "1 MiB local response cache")
    group.add_argument("--cache-directory", default=None, metavar="DIR",
                       help="accepted for compatibility (the local cache is built in)")

    group = serve.add_argument_group("Rate Limiter")
    group.add_argument("--rate-limit", default="off", metavar="MODE",
                       type=_type("mode", _lowered_choice(
                           "rate-limit", [m.value for m in RateLimitMode])),
                       help="execution_count: run instances only while the resources they "
                            "declare are free; off (default)")
    group.add_argument("--rate-limit-resource", action="append", default=[],
                       type=_type("resource", _parse_rate_limit_resource),
                       metavar="NAME:COUNT[:DEVICE]",
                       help="size a rate-limiter resource (repeatable); without a device it "
                            "applies to every device and to global resources")

    group = serve.add_argument_group(
        "Memory/Device Management", "GPU settings are accepted and shown in the options "
        "table; they have no effect on a CPU host.")
    group.add_argument("--host-policy", action="append", default=[], metavar="NAME,SETTING=VALUE",
                       type=_type("policy", _named_setting("host-policy", "policy name")),
                       help="a host policy setting (repeatable), e.g. pinned,cpu-cores=0-1")
    group.add_argument("--pinned-memory-pool-byte-size", type=INT, default=1 << 28,
                       metavar="BYTES")
    group.add_argument("--cuda-memory-pool-byte-size", action="append", default=[],
                       type=_type("pool", _device_pair("cuda-memory-pool-byte-size",
                                                       _parse_int)),
                       metavar="DEVICE:BYTES")
    group.add_argument("--cuda-virtual-address-size", action="append", default=[],
                       type=_type("size", _device_pair("cuda-virtual-address-size",
                                                       _parse_int)),
                       metavar="DEVICE:BYTES")
    group.add_argument("--min-supported-compute-capability", type=FLOAT, default=0.0,
                       metavar="VERSION")
    group.add_argument("--buffer-manager-thread-count", type=INT, default=0, metavar="N")
    group.add_argument("--model-load-gpu-limit", action="append", default=[],
                       type=_type("limit", _device_pair("model-load-gpu-limit", _parse_float)),
                       metavar="DEVICE:FRACTION")

    group = serve.add_argument_group("DEPRECATED", "tritonserver's deprecated spellings.")
    group.add_argument("--strict-model-config", type=BOOL, default=None, metavar="BOOL",
                       help="use --disable-auto-complete-config")
    group.add_argument("--response-cache-byte-size", type=INT, default=None, metavar="BYTES",
                       help="use --cache-config=local,size=BYTES")
    group.add_argument("--trace-file", default=None, metavar="PATH",
                       help="use --trace-config triton,file=PATH")
    group.add_argument("--trace-level", action="append", default=[],
                       type=_type("level", parse_trace_level), metavar="LEVEL",
                       help="use --trace-config level=LEVEL")
    group.add_argument("--trace-rate", type=STOI, default=None, metavar="N",
                       help="use --trace-config rate=N")
    group.add_argument("--trace-count", type=STOI, default=None, metavar="N",
                       help="use --trace-config count=N")
    group.add_argument("--trace-log-frequency", type=STOI, default=None, metavar="N",
                       help="use --trace-config triton,log-frequency=N")


def _frontend_modules() -> list[Any]:
    """Each frontend module adds its flags and builds its frontend from the parsed args."""
    from .frontends import grpc, http, metrics

    return [http, grpc, metrics]


# -- parsed flags -> Options -----------------------------------------------------------------
def options_from_args(args: argparse.Namespace) -> Options:
    """The Options the flags ask for; InvalidArgumentError for inconsistent flags."""
    _check_consistency(args)
    repositories = _unique(args.model_repository or [str(examples_repository())])
    strict = args.disable_auto_complete_config or bool(args.strict_model_config)
    return Options(
        model_repository=repositories,
        server_id=args.server_id,
        model_control_mode=ModelControlMode(args.model_control_mode),
        startup_models=tuple(_unique(args.load_model)),
        repository_poll_secs=args.repository_poll_secs,
        strict_model_config=strict,
        model_config_name=args.model_config_name,
        exit_on_error=args.exit_on_error,
        strict_readiness=args.strict_readiness,
        exit_timeout=max(0, args.exit_timeout_secs),  # tritonserver clamps negatives to 0
        model_load_thread_count=args.model_load_thread_count,
        model_load_retry_count=args.model_load_retry_count,
        model_namespacing=args.model_namespacing,
        log_verbose=args.log_verbose,
        log_info=args.log_info,
        log_warn=args.log_warning,
        log_error=args.log_error,
        log_file=args.log_file,
        log_format=args.log_format,
        rate_limiter_mode=RateLimitMode(args.rate_limit),
        rate_limiter_resources=tuple(args.rate_limit_resource),
        host_policies=_nested(args.host_policy),
        backend_configuration=parse_backend_config(args.backend_config),
        trace_config=parse_trace_config(_trace_items(args)),
        cache_config=_cache_config(args),
        ray_address=args.ray_address,
        **metrics_frontend.options_from_args(args),
    )


def serve_extras(args: argparse.Namespace) -> ServeExtras:
    """The flags without effect here that the options table still shows."""
    return ServeExtras(pinned_memory_pool_byte_size=args.pinned_memory_pool_byte_size,
                       cuda_memory_pool_byte_size=tuple(args.cuda_memory_pool_byte_size),
                       min_supported_compute_capability=args.min_supported_compute_capability)


def deprecation_warnings(args: argparse.Namespace) -> list[str]:
    """tritonserver's warnings for its deprecated flags."""
    warnings = []
    if args.strict_model_config is not None:
        warnings.append("Warning: '--strict-model-config' has been deprecated! Please use "
                        "'--disable-auto-complete-config' instead.")
        if args.disable_auto_complete_config and not args.strict_model_config:
            warnings.append("Warning: Overriding deprecated '--strict-model-config' from False "
                            "to True in favor of '--disable-auto-complete-config'!")
    if args.response_cache_byte_size is not None:
        size = args.response_cache_byte_size
        warnings.append("Warning: '--response-cache-byte-size' has been deprecated! This will "
                        "default to the 'local' cache implementation with the provided byte "
                        "size for its config. Please use '--cache-config' instead. The "
                        f"equivalent --cache-config CLI args would be: "
                        f"'--cache-config=local,size={size}'")
    for flag, replacement in (("trace_file", "--trace-config triton,file=<path>"),
                              ("trace_level", "--trace-config level=<level>"),
                              ("trace_rate", "--trace-config rate=<rate>"),
                              ("trace_count", "--trace-config count=<count>"),
                              ("trace_log_frequency",
                               "--trace-config triton,log-frequency=<value>")):
        if getattr(args, flag) not in (None, []):
            name = "--" + flag.replace("_", "-")
            warnings.append(f"Warning: '{name}' has been deprecated and will be removed in "
                            f"future releases. Please use '{replacement}' instead.")
    return warnings


def _check_consistency(args: argparse.Namespace) -> None:
    if args.response_cache_byte_size is not None and args.cache_config:
        raise InvalidArgumentError(
            "Error: Incompatible flags --response-cache-byte-size and --cache-config both "
            "provided. Please provide one or the other.")
    # ('*' with other names is refused by the server's start, as tritonserver's)
    if args.load_model and args.model_control_mode != ModelControlMode.EXPLICIT.value:
        raise InvalidArgumentError(
            "Error: Use of '--load-model' requires setting '--model-control-mode=explicit' "
            "as well.")
    if args.repository_poll_secs < 0:
        raise InvalidArgumentError("--repository-poll-secs must be >= 0")
    _check_ports(args)


def _check_ports(args: argparse.Namespace) -> None:
    """Two enabled services may not listen at one address and port (tritonserver's check)."""
    services = []
    if getattr(args, "allow_http", False):
        services.append(("HTTP", args.http_address, args.http_port))
    if getattr(args, "allow_grpc", False):
        services.append(("GRPC", args.grpc_address, args.grpc_port))
    if getattr(args, "allow_metrics", False):
        address = args.metrics_address or getattr(args, "http_address", "0.0.0.0")
        services.append(("metrics", address, args.metrics_port))
    for i, (name, address, port) in enumerate(services):
        for other, other_address, other_port in services[i + 1:]:
            if port and port == other_port and address == other_address:
                raise InvalidArgumentError(
                    f"The server cannot listen to {name} requests and {other} requests at "
                    f"the same address and port {address}:{port}")


def _unique(values: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(values))  # tritonserver keeps these in sets


def _nested(settings: Sequence[tuple[str, str, str]]) -> dict[str, dict[str, str]]:
    nested: dict[str, dict[str, str]] = {}
    for name, key, value in settings:
        nested.setdefault(name, {})[key] = value
    return nested


def _cache_config(args: argparse.Namespace) -> dict[str, dict[str, str]]:
    if args.response_cache_byte_size is not None:
        return {"local": {"size": str(args.response_cache_byte_size)}}
    return _nested(args.cache_config)


def _trace_items(args: argparse.Namespace) -> list[str]:
    """The deprecated trace flags as --trace-config items, before the real ones (which win)."""
    items = [f"level={level}" for level in args.trace_level]
    if args.trace_rate is not None:
        items.append(f"rate={args.trace_rate}")
    if args.trace_count is not None:
        items.append(f"count={args.trace_count}")
    if args.trace_file is not None:
        items.append(f"triton,file={args.trace_file}")
    if args.trace_log_frequency is not None:
        items.append(f"triton,log-frequency={args.trace_log_frequency}")
    return items + list(args.trace_config)


# -- entry point -----------------------------------------------------------------------------
def normalize_argv(argv: Sequence[str]) -> list[str]:
    """A tritonserver-style command line (flags first) becomes a ``serve`` command line."""
    argv = list(argv)
    if argv and argv[0].startswith("--") and argv[0] not in ("--help", "--version"):
        return ["serve", *argv]
    return argv


_SUPERVISOR_VALUED = ("--supervise-max-restarts", "--supervise-window-secs")


def _without_supervisor_flags(argv: Sequence[str]) -> list[str]:
    """A serve command line without the supervisor's own flags (the child's)."""
    out: list[str] = []
    skip = False
    for item in argv:
        if skip:
            skip = False
        elif item == "--supervise":
            pass
        elif item in _SUPERVISOR_VALUED:
            skip = True
        elif not item.startswith(tuple(f"{flag}=" for flag in _SUPERVISOR_VALUED)):
            out.append(item)
    return out


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    for action in parser._subparsers._group_actions if parser._subparsers else ():
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[command]  # type: ignore[no-any-return]
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = normalize_argv(sys.argv[1:] if argv is None else argv)
    args, unknown = parser.parse_known_args(argv)
    serve = _subparser(parser, args.command)
    if unknown:
        serve.error("unrecognized arguments: " + " ".join(unknown))
    for warning in deprecation_warnings(args):
        print(warning, file=sys.stderr)
    try:
        options = options_from_args(args)
    except TritonError as exc:
        serve.error(exc.message)
    # Records propagate from the "infercore" logger (whose level the server sets) to this
    # handler, in Triton's line format; other libraries stay at WARNING.
    triton_formatter().log_format = options.log_format
    logging.basicConfig(level=logging.WARNING,
                        handlers=[triton_handler(logging.StreamHandler(sys.stderr))])
    if args.supervise:
        logging.getLogger("infercore.supervisor").setLevel(logging.INFO)
        policy = SupervisorPolicy(args.supervise_max_restarts, args.supervise_window_secs)
        return supervise(serve_command(_without_supervisor_flags(argv[1:])), policy)
    for directory in args.backend_directory:
        if not Path(directory).is_dir():
            # tritonserver checks the folder only when a model needs a backend from it.
            logger.warning("backend directory '%s' does not exist; using the built-in "
                           "backends", directory)
            continue
        try:
            load_backend_directory(directory)
        except TritonError as exc:
            serve.error(exc.message)
    return _serve(options, args, frontend_modules=_frontend_modules(), extras=serve_extras(args))


if __name__ == "__main__":
    sys.exit(main())
