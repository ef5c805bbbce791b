"""tritonserver's command line as ``infercore serve`` takes it: each value form of each
flag, answered as Triton's getopt_long parser and its checks answer it.

Bad forms are start-up suites (the exit status and the line a user reads). Accepted
forms are either start-up suites that keep serving (``{"exit": None}``: the flag and
its value are taken) or suites whose cases read back what the flag changes.

What Triton's parser does, and these suites pin down (src/command_line_parser.cc):
booleans are true/false, on/off, 1/0 in any case, nothing else; integers are read by
std::stoi (leading blanks, a sign and trailing junk are taken: "7s" is 7, "2.5" is 2,
"0x10" is 0); floats by std::stod; a flag's value may be the next argument even when
it starts with "--"; a unique prefix of a flag is the flag; the last of a repeated
single-valued flag wins.
"""

from __future__ import annotations

from ..case import Case, Grpc, Http, Model, Suite
from ..models import add_sub, broken, python_model

AREA = "flags"

def bad(name: str, *flags: str, models: tuple[Model, ...] = (), **options) -> Suite:
    """A start-up suite: ``flags`` added to the usual repository and ports."""
    return Suite(f"flags_{name}", AREA, models, list(flags), startup=True, **options)


def own_ports(*flags: str, repository: str = "--model-repository={tmp}/models") -> list[str]:
    """The repository and gRPC address of a ``ports=False`` suite, then ``flags``."""
    return [repository, "--grpc-port={grpc_port}", "--grpc-address=127.0.0.1", *flags]


# -- requests that read back what a flag changed ------------------------------------------
SERVER_METADATA = Http("GET", "/v2")
GRPC_METADATA = Grpc("ServerMetadata")
READY = Http("GET", "/v2/health/ready")
LIVE = Http("GET", "/v2/health/live")
GRPC_READY = Grpc("ServerReady")
GRPC_LIVE = Grpc("ServerLive")
INDEX = Http("POST", "/v2/repository/index", json={})
GRPC_INDEX = Grpc("RepositoryIndex")
SIMPLE_INFER = Http("POST", "/v2/models/simple/infer", json={"inputs": [
    {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))},
    {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16}]})
GRPC_SIMPLE_INFER = Grpc("ModelInfer", {"model_name": "simple", "inputs": [
    {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16],
     "contents": {"int_contents": list(range(16))}},
    {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16],
     "contents": {"int_contents": [1] * 16}}]})


def stats(model: str) -> Http:
    return Http("GET", f"/v2/models/{model}/stats")


# -- start-up suites: bad values of each kind -----------------------------------------------
BOOLEANS = [
    bad("bool_yes", "--strict-readiness=yes"),
    bad("bool_empty", "--exit-on-error="),
    bad("bool_misspelt", "--allow-grpc=tru"),
    bad("bool_number_two", "--reuse-http-port=2"),
    bad("bool_uppercase_on", "--reuse-grpc-port=ON"),  # taken: case does not matter
    bad("bool_space_form", "--grpc-use-ssl", "false"),  # taken
    bad("enable_peer_access_bad", "--enable-peer-access=maybe"),
    bad("enable_peer_access_false", "--enable-peer-access=false"),  # taken
    bad("enable_peer_access_space", "--enable-peer-access", "0"),  # taken
    bad("model_namespacing_bad", "--model-namespacing=enabled"),
    bad("strict_model_config_bad", "--strict-model-config=strict"),
    bad("keepalive_permit_bad", "--grpc-keepalive-permit-without-calls=always"),
]

INTEGERS = [
    bad("int_word", "--http-thread-count=many"),
    bad("int_empty", "--exit-timeout-secs="),
    bad("int_out_of_bound", "--exit-timeout-secs=99999999999"),
    bad("int_negative_out_of_bound", "--model-load-retry-count=-99999999999"),
    bad("int_fraction", "--model-load-thread-count=2.5"),  # stoi: 2
    bad("int_suffix", "--exit-timeout-secs=7s"),  # stoi: 7
    bad("int_leading_blank", "--exit-timeout-secs= 5"),
    bad("int_plus_sign", "--exit-timeout-secs=+5"),
    bad("int_hex", "--exit-timeout-secs=0x10"),  # stoi: 0
    bad("int_negative_exit_timeout", "--exit-timeout-secs=-5"),  # clamped to 0
    bad("int_zero_model_load_threads", "--model-load-thread-count=0"),  # at least 1
    bad("int_negative_buffer_threads", "--buffer-manager-thread-count=-3"),  # at least 0
    bad("repository_poll_secs_word", "--repository-poll-secs=often"),
    bad("log_verbose_space_flag_value", "--log-verbose", "--strict-readiness=false"),
    bad("pinned_pool_word", "--pinned-memory-pool-byte-size=lots"),
    bad("response_cache_size_word", "--response-cache-byte-size=big"),
    bad("http_thread_count_word", "--http-thread-count", "eight"),
    bad("grpc_keepalive_time_word", "--grpc-keepalive-time=long"),
    bad("grpc_keepalive_timeout_fraction", "--grpc-keepalive-timeout=1.5"),  # taken: 1
    bad("grpc_pings_word", "--grpc-http2-max-pings-without-data=none"),
    bad("grpc_ping_interval_word", "--grpc-http2-min-recv-ping-interval-without-data=x"),
    bad("grpc_ping_strikes_word", "--grpc-http2-max-ping-strikes=x"),
    bad("grpc_connection_age_word", "--grpc-max-connection-age=forever"),
    bad("grpc_connection_age_grace_word", "--grpc-max-connection-age-grace=x"),
    bad("grpc_allocation_pool_word", "--grpc-infer-allocation-pool-size=big"),
    bad("metrics_interval_fraction", "--metrics-interval-ms=1500.5"),  # stoi: 1500
    bad("metrics_interval_word", "--metrics-interval-ms=fast"),
    # values the parser takes that infercore's own checks once refused
    bad("metrics_interval_zero", "--metrics-interval-ms=0"),
    bad("http_thread_count_zero", "--http-thread-count=0"),
    bad("grpc_keepalive_time_zero", "--grpc-keepalive-time=0"),
    bad("grpc_ping_strikes_negative", "--grpc-http2-max-ping-strikes=-1"),
    bad("grpc_allocation_pool_zero", "--grpc-infer-allocation-pool-size=0"),
    bad("repository_poll_secs_negative_unused", "--repository-poll-secs=-1"),
    bad("repository_poll_secs_negative_poll", "--model-control-mode=poll",
        "--repository-poll-secs=-1"),
]

FLOATS = [
    bad("float_word", "--min-supported-compute-capability=high"),
    bad("float_exponent", "--min-supported-compute-capability=0e0"),  # taken
    bad("gpu_limit_word", "--model-load-gpu-limit=0:half"),
    bad("gpu_limit_no_colon", "--model-load-gpu-limit=0.5"),
    bad("cuda_pool_no_colon", "--cuda-memory-pool-byte-size=0"),
    bad("cuda_pool_word", "--cuda-memory-pool-byte-size=0:big"),
    bad("cuda_virtual_address_device_word", "--cuda-virtual-address-size=gpu:1024"),
    bad("cuda_pool_taken", "--cuda-memory-pool-byte-size=0:1024",
        "--cuda-virtual-address-size=0:2048", "--model-load-gpu-limit=0:0.5"),
]

# -- the command line's shape --------------------------------------------------------------
SHAPE = [
    bad("missing_value_at_end", "--http-thread-count"),
    bad("no_argument_allowed", "--disable-auto-complete-config=true"),
    bad("ambiguous_prefix", "--log=1"),
    bad("ambiguous_prefix_grpc", "--grpc-http2-max=1"),
    bad("unique_prefix", "--strict-read=false"),  # taken: --strict-readiness
    bad("unknown_with_value", "--bogus=1"),
    bad("unknown_after_good", "--exit-on-error=true", "--no-such-flag", "x"),
    bad("short_option", "-x"),
    bad("positional_argument", "extra"),
    bad("help", "--help", startup_departure=(
        "infercore's usage text is its own (Triton's is not copied), and asking for help "
        "is not an error: it exits 0 where tritonserver, whose parser throws on --help "
        "('[FIXME] how help is printed?' in command_line_parser.cc), exits 1"),
        startup_expect={"exit": 0}),
    Suite("flags_no_repository", AREA, flags=[
        "--http-address=127.0.0.1", "--http-port={http_port}", "--allow-grpc=false",
        "--allow-metrics=false"], startup=True, ports=False, startup_departure=(
            "without --model-repository infercore serves its bundled example repository "
            "(its documented `infercore serve` quick start); tritonserver refuses to start"),
        startup_expect={"exit": None}),
]

# -- choices and structured values ---------------------------------------------------------
CHOICES = [
    bad("model_control_mode_bad", "--model-control-mode=manual"),
    bad("model_control_mode_uppercase", "--model-control-mode=POLL"),  # taken
    bad("load_model_needs_explicit", "--load-model=simple", models=(add_sub(),)),
    bad("load_model_in_poll_mode", "--model-control-mode=poll", "--load-model=simple",
        models=(add_sub(),)),
    bad("load_model_star_and_other", "--model-control-mode=explicit", "--load-model=*",
        "--load-model=simple", models=(add_sub(),)),
    bad("load_model_unknown", "--model-control-mode=explicit", "--load-model=nowhere",
        models=(add_sub(),)),
    bad("model_config_name_empty", "--model-config-name="),
    bad("log_format_lowercase", "--log-format=iso8601"),
    bad("log_format_bad", "--log-format=json"),
    bad("trace_level_bad", "--trace-level=all"),
    bad("rate_limit_bad", "--rate-limit=on"),
    bad("rate_limit_uppercase", "--rate-limit=EXECUTION_COUNT"),  # taken
    bad("rate_limit_resource_no_colon", "--rate-limit-resource=R"),
    bad("rate_limit_resource_four_parts", "--rate-limit-resource=R:1:0:1"),
    bad("rate_limit_resource_count_word", "--rate-limit-resource=R:many"),
    bad("rate_limit_resource_device_word", "--rate-limit-resource=R:1:gpu"),
    bad("rate_limit_resource_empty_name", "--rate-limit-resource=:2"),
    bad("cache_config_no_cache_name", "--cache-config=size=100"),
    bad("cache_config_no_equals", "--cache-config=local,size"),
    bad("cache_config_empty_value", "--cache-config=local,size="),
    bad("cache_config_and_byte_size", "--response-cache-byte-size=100",
        "--cache-config=local,size=100"),
    bad("cache_config_size_word", "--cache-config=local,size=big"),
    bad("cache_config_unknown_cache", "--cache-config=redis,host=localhost",
        startup_departure=(
            "the same failure at the same point (creating the server): infercore has no "
            "cache libraries to search for, and says it has only the local cache"),
        startup_expect={
            "exit": 1, "error_line": "error: creating server: Invalid argument - unsupported "
                                     "cache implementation 'redis': infercore has only the "
                                     "'local' cache (--cache-config local,size=<bytes>)"}),
    bad("host_policy_no_setting", "--host-policy=pol"),
    bad("host_policy_empty_name", "--host-policy=,numa-node=0"),
    bad("host_policy_empty_value", "--host-policy=pol,cpu-cores="),
    bad("backend_config_leading_comma", "--backend-config=,a=b"),
    bad("backend_config_no_equals", "--backend-config=python,flag"),
    bad("backend_config_empty_value", "--backend-config=python,a="),
    bad("backend_config_taken", "--backend-config=python,shm-default-byte-size=1048576",
        "--backend-config=default-max-batch-size=4"),
    bad("metrics_config_no_equals", "--metrics-config=summary_latencies"),
    bad("http_restricted_unknown", "--http-restricted-api=bogus:k=v"),
    bad("http_restricted_no_key", "--http-restricted-api=health"),
    bad("http_restricted_empty_value", "--http-restricted-api=health:k="),
    bad("http_restricted_twice", "--http-restricted-api=health:a=b",
        "--http-restricted-api=metadata,health:c=d"),
    bad("grpc_restricted_unknown", "--grpc-restricted-protocol=health,bogus:k=v"),
    bad("grpc_restricted_comma_form", "--grpc-restricted-protocol=health,k=v"),
    bad("grpc_compression_bad", "--grpc-infer-response-compression-level=max"),
    bad("grpc_compression_uppercase", "--grpc-infer-response-compression-level=LOW"),
]

# -- flags current Triton has and 2.51 lacks -----------------------------------------------
_INFER_THREADS = ("src/command_line_parser.cc (triton-inference-server/server main): "
                  "--grpc-infer-thread-count <integer>, 'The number of gRPC inference "
                  "handler threads. Default is 2.'; a value outside 2..128 is refused: "
                  "'invalid argument for --grpc_infer_thread_count. Must be in the range 2 "
                  "to 128.'")
_RESPONSE_POOL = ("src/command_line_parser.cc (triton-inference-server/server main): "
                  "--grpc-max-response-pool-size <integer>, the most response objects "
                  "kept per response queue; 0 or less is refused: 'Error: "
                  "--grpc-max-response-pool-size must be greater than 0.'")
NEWER = [
    bad("grpc_infer_thread_count_low", "--grpc-infer-thread-count=1",
        startup_newer=_INFER_THREADS, startup_expect={
            "exit": 1, "error_line": "invalid argument for --grpc_infer_thread_count. Must "
                                     "be in the range 2 to 128."}),
    bad("grpc_infer_thread_count_high", "--grpc-infer-thread-count=129",
        startup_newer=_INFER_THREADS, startup_expect={
            "exit": 1, "error_line": "invalid argument for --grpc_infer_thread_count. Must "
                                     "be in the range 2 to 128."}),
    bad("grpc_infer_thread_count_word", "--grpc-infer-thread-count=two",
        startup_newer=_INFER_THREADS, startup_expect={
            "exit": 1, "error_line": "Invalid option value. Got two"}),
    bad("grpc_infer_thread_count_taken", "--grpc-infer-thread-count=4",
        startup_newer=_INFER_THREADS, startup_expect={"exit": None}),
    bad("grpc_max_response_pool_zero", "--grpc-max-response-pool-size=0",
        startup_newer=_RESPONSE_POOL, startup_expect={
            "exit": 1, "error_line": "Error: --grpc-max-response-pool-size must be greater "
                                     "than 0."}),
    bad("grpc_max_response_pool_taken", "--grpc-max-response-pool-size=16",
        startup_newer=_RESPONSE_POOL, startup_expect={"exit": None}),
]

# -- ports and addresses -------------------------------------------------------------------
PORTS = [
    bad("http_port_word", "--http-port=eighty"),
    bad("grpc_port_out_of_bound", "--grpc-port=4294967296"),
    Suite("flags_port_collision_http_grpc", AREA, flags=[
        "--model-repository={tmp}/models", "--http-address=127.0.0.1",
        "--grpc-address=127.0.0.1", "--http-port={http_port}", "--grpc-port={http_port}",
        "--allow-metrics=false"], startup=True, ports=False),
    Suite("flags_port_collision_metrics_default_address", AREA, flags=[
        "--model-repository={tmp}/models", "--http-address=127.0.0.1",
        "--http-port={http_port}", "--grpc-port={grpc_port}", "--metrics-port={http_port}"],
        startup=True, ports=False),
    Suite("flags_port_collision_grpc_metrics", AREA, flags=[
        "--model-repository={tmp}/models", "--allow-http=false",
        "--grpc-address=0.0.0.0", "--grpc-port={grpc_port}", "--metrics-port={grpc_port}"],
        startup=True, ports=False),
    # the same port at two addresses passes the check (only equal addresses collide)
    Suite("flags_port_same_port_other_address", AREA, flags=[
        "--model-repository={tmp}/models", "--http-address=127.0.0.1",
        "--http-port={http_port}", "--grpc-address=127.0.0.2", "--grpc-port={http_port}",
        "--allow-metrics=false"], startup=True, ports=False),
]

# -- SageMaker and Vertex AI: the flags' values and checks (the frontends: sagemaker.py) ---
_SAGEMAKER_VERTEX_NOTE = ("the SageMaker and Vertex AI flags parsed and checked as "
                          "tritonserver does; their routes are cases/sagemaker.py's")
FRONTENDS = [
    bad("sagemaker_port_word", "--sagemaker-port=abc"),
    bad("sagemaker_thread_count_word", "--sagemaker-thread-count=x"),
    bad("sagemaker_safe_range_no_dash", "--sagemaker-safe-port-range=8000"),
    bad("sagemaker_safe_range_word", "--sagemaker-safe-port-range=a-b"),
    bad("allow_sagemaker_bad", "--allow-sagemaker=sure"),
    bad("sagemaker_taken", "--allow-sagemaker=false", "--sagemaker-port=8080",
        "--sagemaker-safe-port-range=8000-8002", "--sagemaker-thread-count=2"),
    Suite("flags_sagemaker_same_port_as_http", AREA, flags=[
        "--model-repository={tmp}/models", "--http-port={http_port}", "--allow-grpc=false",
        "--allow-metrics=false", "--allow-sagemaker=true", "--sagemaker-port={http_port}"],
        startup=True, ports=False, startup_note=_SAGEMAKER_VERTEX_NOTE),
    Suite("flags_sagemaker_range_excludes_http", AREA, flags=[
        "--model-repository={tmp}/models", "--http-port={http_port}", "--allow-grpc=false",
        "--allow-metrics=false", "--allow-sagemaker=true", "--sagemaker-port={grpc_port}",
        "--sagemaker-safe-port-range=1-2"],
        startup=True, ports=False, startup_note=_SAGEMAKER_VERTEX_NOTE),
    Suite("flags_sagemaker_enabled", AREA, flags=[
        "--allow-metrics=false", "--allow-sagemaker=true", "--sagemaker-port={metrics_port}",
        "--sagemaker-thread-count=2"], startup=True, startup_note=_SAGEMAKER_VERTEX_NOTE),
    bad("vertex_ai_port_word", "--vertex-ai-port=abc"),
    bad("vertex_ai_thread_count_word", "--vertex-ai-thread-count=x"),
    bad("allow_vertex_ai_bad", "--allow-vertex-ai=maybe"),
    bad("vertex_ai_taken", "--allow-vertex-ai=false", "--vertex-ai-port=8080",
        "--vertex-ai-thread-count=2", "--vertex-ai-default-model=simple"),
    Suite("flags_vertex_ai_same_port_as_http", AREA, flags=[
        "--model-repository={tmp}/models", "--http-port={http_port}", "--allow-grpc=false",
        "--allow-metrics=false", "--allow-vertex-ai=true", "--vertex-ai-port={http_port}"],
        startup=True, ports=False, startup_note=_SAGEMAKER_VERTEX_NOTE),
]

# -- start-up with models: --exit-on-error, SSL ---------------------------------------------
MODELS_AT_STARTUP = [
    bad("exit_on_error_default", models=(add_sub(), broken())),
    bad("exit_on_error_true_spelling", "--exit-on-error=1", models=(add_sub(), broken())),
    bad("grpc_ssl_without_files", "--grpc-use-ssl=true", startup_departure=(
        "tritonserver reports any failure to open its gRPC port as 'Socket ... already "
        "in use', here where no certificate or key file was given; infercore says "
        "which flags are missing"), startup_expect={"exit": 1}),
    bad("http_header_pattern_invalid", "--http-header-forward-pattern=(x"),
    bad("grpc_header_pattern_invalid", "--grpc-header-forward-pattern=[a-"),
]


# -- suites whose cases read back what a flag changed ---------------------------------------
def _ready_cases() -> list[Case]:
    return [Case("ready", [READY, GRPC_READY]),
            Case("model_ready", [Http("GET", "/v2/models/simple/ready"),
                                 Http("GET", "/v2/models/broken/ready")])]


def _readiness(name: str, *flags: str, wait_ready: bool = True) -> Suite:
    return Suite(f"flags_{name}", AREA, [add_sub(), broken()],
                 ["--exit-on-error=false", *flags], _ready_cases(), wait_ready=wait_ready)


READINESS = [
    Suite("flags_exit_on_error_false", AREA, [add_sub(), broken()], ["--exit-on-error=false"],
          [Case("index", [INDEX, GRPC_INDEX])], wait_ready=False),
    _readiness("strict_readiness_false", "--strict-readiness=false"),
    _readiness("strict_readiness_off_uppercase", "--strict-readiness=OFF"),
    _readiness("strict_readiness_zero_space", "--strict-readiness", "0"),
    _readiness("strict_readiness_prefix", "--strict-read=false"),
    _readiness("strict_readiness_repeated", "--strict-readiness=true",
               "--strict-readiness=false"),
    _readiness("strict_readiness_default", wait_ready=False),
    _readiness("strict_readiness_on", "--strict-readiness=on", wait_ready=False),
]

IDENTITY = [
    Suite("flags_id", AREA, flags=["--id=my-server"],
          cases=[Case("server_metadata", [SERVER_METADATA, GRPC_METADATA])]),
    Suite("flags_id_space_form", AREA, flags=["--id", "second server"],
          cases=[Case("server_metadata", [SERVER_METADATA, GRPC_METADATA])]),
    Suite("flags_id_takes_next_flag", AREA, flags=["--id", "--strict-readiness=false"],
          cases=[Case("server_metadata", [SERVER_METADATA])],
          ),
    Suite("flags_id_repeated", AREA, flags=["--id=first", "--id=second"],
          cases=[Case("server_metadata", [SERVER_METADATA])]),
    Suite("flags_id_prefix", AREA, flags=["--i=short"],
          cases=[Case("server_metadata", [SERVER_METADATA])]),
]

ENDPOINTS = [
    Suite("flags_allow_http_false", AREA, [add_sub()], ["--allow-http=false"], [
        Case("http_refused", [LIVE]),
        Case("grpc_serves", [GRPC_LIVE, GRPC_SIMPLE_INFER]),
    ]),
    Suite("flags_allow_grpc_false", AREA, [add_sub()], ["--allow-grpc=false"], [
        Case("http_serves", [LIVE, SIMPLE_INFER]),
    ]),
    # metrics served on the port the cases' HTTP steps use, HTTP itself off
    Suite("flags_metrics_port", AREA, flags=own_ports(
        "--allow-http=false", "--metrics-address=127.0.0.1", "--metrics-port={http_port}"),
        ports=False, wait_ports=["{http_port}", "{grpc_port}"],
        cases=[Case("metrics_other_path", [Http("GET", "/v2/health/live"), Http("GET", "/"),
                                           Http("GET", "/metrics/x")]),
               Case("metrics_other_method", [Http("POST", "/metrics"),
                                             Http("PUT", "/v2/health/live")])]),
    Suite("flags_allow_metrics_false", AREA, flags=own_ports(
        "--allow-http=false", "--allow-metrics=false", "--metrics-port={http_port}"),
        ports=False, cases=[Case("metrics_refused", [Http("GET", "/metrics")]),
                            Case("grpc_serves", [GRPC_LIVE])]),
    Suite("flags_http_port_space_form", AREA, flags=[
        "--model-repository", "{tmp}/models", "--http-address", "127.0.0.1",
        "--http-port", "{http_port}", "--grpc-address", "127.0.0.1",
        "--grpc-port", "{grpc_port}", "--metrics-address", "127.0.0.1",
        "--metrics-port", "{metrics_port}"], ports=False,
        wait_ports=["{http_port}", "{grpc_port}", "{metrics_port}"],
        cases=[Case("serves", [LIVE, GRPC_LIVE])]),
    Suite("flags_model_store", AREA, [add_sub()], flags=[
        "--model-store={tmp}/models", "--http-address=127.0.0.1", "--http-port={http_port}",
        "--allow-grpc=false", "--allow-metrics=false"], ports=False,
        cases=[Case("index", [INDEX])]),
    Suite("flags_repository_repeated", AREA, [add_sub()], flags=[
        "--model-repository={tmp}/models", "--model-repository={tmp}/models"],
        cases=[Case("index", [INDEX])]),
]

_RESTRICT_HTTP = Http("POST", "/v2/repository/index", json={},
                      headers=[("admin-key", "admin-value")])
RESTRICTED = [
    Suite("flags_http_restricted_api", AREA, [add_sub()], [
        "--http-restricted-api=model-repository,statistics:admin-key=admin-value",
        # health and metadata stay open: the harness asks /v2/health and /v2 itself
        "--http-restricted-api=model-config:probe=yes"], [
        Case("repository_without_header", [INDEX, _RESTRICT_HTTP]),
        Case("repository_header_case", [Http("POST", "/v2/repository/index", json={},
                                             headers=[("Admin-Key", "admin-value")])]),
        Case("repository_wrong_value", [Http("POST", "/v2/repository/index", json={},
                                             headers=[("admin-key", "Admin-Value")]),
                                        _RESTRICT_HTTP]),
        Case("statistics", [stats("simple"), Http("GET", "/v2/models/simple/stats",
                                                   headers=[("admin-key", "admin-value")])]),
        Case("model_config", [Http("GET", "/v2/models/simple/config"),
                              Http("GET", "/v2/models/simple/config",
                                   headers=[("probe", "yes")])]),
        Case("unrestricted", [SERVER_METADATA, SIMPLE_INFER]),
        Case("grpc_not_restricted", [GRPC_INDEX, GRPC_LIVE]),
    ]),
    Suite("flags_grpc_restricted_protocol", AREA, [add_sub()], [
        "--grpc-restricted-protocol=health:probe=yes",
        "--grpc-restricted-protocol=model-repository,inference:admin-key=admin-value"], [
        Case("health", [GRPC_LIVE, Grpc("ServerLive", metadata=[
            ("triton-grpc-protocol-probe", "yes")])]),
        Case("health_wrong_value", [Grpc("ServerReady", metadata=[
            ("triton-grpc-protocol-probe", "no")]), Grpc("ServerReady", metadata=[
                ("triton-grpc-protocol-probe", "yes")])]),
        Case("plain_key_not_enough", [Grpc("ServerLive", metadata=[("probe", "yes")])]),
        Case("repository", [GRPC_INDEX, Grpc("RepositoryIndex", metadata=[
            ("triton-grpc-protocol-admin-key", "admin-value")])]),
        Case("inference", [GRPC_SIMPLE_INFER, Grpc(
            "ModelInfer", GRPC_SIMPLE_INFER.request,
            metadata=[("triton-grpc-protocol-admin-key", "admin-value")])]),
        Case("unrestricted", [GRPC_METADATA, Grpc("ModelConfig", {"name": "simple"})]),
        Case("http_not_restricted", [LIVE, INDEX]),
    ]),
]

_OTHER = add_sub("other")


def _in_folder(folder: str, model: Model) -> Model:
    """``model`` in ``{tmp}/models/<folder>/``, a repository of its own."""
    return Model(f"{folder}/{model.name}", model.config, model.files)
CONTROL = [
    Suite("flags_explicit_load_model", AREA, [add_sub(), _OTHER],
          ["--model-control-mode=EXPLICIT", "--load-model", "simple"],
          [Case("index", [INDEX, GRPC_INDEX])]),
    Suite("flags_explicit_load_model_repeated", AREA, [add_sub(), _OTHER],
          ["--model-control-mode=explicit", "--load-model=simple", "--load-model=simple",
           "--load-model=other"], [Case("index", [INDEX])]),
    Suite("flags_explicit_load_star", AREA, [add_sub(), _OTHER],
          ["--model-control-mode=explicit", "--load-model=*"], [Case("index", [INDEX])]),
    Suite("flags_explicit_nothing_loaded", AREA, [add_sub(), _OTHER],
          ["--model-control-mode=explicit"], [Case("index", [INDEX, READY])]),
    Suite("flags_model_namespacing", AREA, [
        _in_folder("a", add_sub()), _in_folder("b", add_sub())], own_ports(
            "--model-repository={tmp}/models/b", "--http-address=127.0.0.1",
            "--http-port={http_port}", "--allow-metrics=false", "--model-namespacing=true",
            repository="--model-repository={tmp}/models/a"),
        [Case("index", [INDEX]), Case("infer", [SIMPLE_INFER])], ports=False,
        wait_ports=["{http_port}", "{grpc_port}"]),
]

_RATE_LIMITED = add_sub(extra='''
instance_group [ { count: 1 kind: KIND_CPU rate_limiter { resources [ { name: "R" count: 2 } ] } } ]
''')
_CACHED = add_sub(extra="response_cache { enable: true }")
_PINNED = add_sub(extra='''
instance_group [ { count: 1 kind: KIND_CPU host_policy: "pinned" } ]
''')
ENGINE = [
    Suite("flags_rate_limit_resource_short", AREA, [_RATE_LIMITED], [
        "--rate-limit=execution_count", "--rate-limit-resource=R:1", "--exit-on-error=false"],
        [Case("index", [INDEX])], wait_ready=False),
    Suite("flags_rate_limit_resource_enough", AREA, [_RATE_LIMITED], [
        "--rate-limit=execution_count", "--rate-limit-resource=R:2"],
        [Case("infer", [SIMPLE_INFER, INDEX])]),
    # the name is compared as given: "r" is another resource than "R"
    Suite("flags_rate_limit_resource_name_case", AREA, [_RATE_LIMITED], [
        "--rate-limit=execution_count", "--rate-limit-resource=r:2",
        "--exit-on-error=false"], [Case("index", [INDEX])], wait_ready=False),
    Suite("flags_rate_limit_resource_device", AREA, [_RATE_LIMITED], [
        "--rate-limit=execution_count", "--rate-limit-resource=R:4:0",
        "--exit-on-error=false"], [Case("infer", [SIMPLE_INFER, INDEX])], wait_ready=False),
    Suite("flags_rate_limit_off_ignores_resources", AREA, [_RATE_LIMITED], [
        "--rate-limit=off", "--rate-limit-resource=R:1"], [Case("infer", [SIMPLE_INFER])]),
    Suite("flags_cache_config", AREA, [_CACHED], ["--cache-config=local,size=1048576"],
          [Case("hit", [SIMPLE_INFER, SIMPLE_INFER, stats("simple")])]),
    Suite("flags_response_cache_byte_size", AREA, [_CACHED],
          ["--response-cache-byte-size=1048576"],
          [Case("hit", [SIMPLE_INFER, SIMPLE_INFER, stats("simple")])]),
    Suite("flags_no_cache", AREA, [_CACHED], [],
          [Case("no_hit", [SIMPLE_INFER, SIMPLE_INFER, stats("simple")])]),
    Suite("flags_host_policy", AREA, [_PINNED], ["--host-policy=pinned,cpu-cores=0-1"],
          [Case("config_and_infer", [Http("GET", "/v2/models/simple/config"),
                                     SIMPLE_INFER])]),
    # cpu-cores is a range, checked when an instance is made
    Suite("flags_host_policy_one_core", AREA, [_PINNED], [
        "--host-policy=pinned,cpu-cores=0", "--exit-on-error=false"],
        [Case("index", [INDEX])], wait_ready=False),
    Suite("flags_tuning_taken", AREA, [add_sub()], [
        "--http-thread-count=2", "--reuse-http-port=1", "--model-load-thread-count=1",
        "--model-load-retry-count=2", "--exit-timeout-secs=0", "--pinned-memory-pool-byte-size=0",
        "--buffer-manager-thread-count=1", "--enable-peer-access=false",
        "--min-supported-compute-capability=0", "--repoagent-directory={tmp}/agents"],
        [Case("serves", [READY, SIMPLE_INFER])]),
    Suite("flags_grpc_tuning_taken", AREA, [add_sub()], [
        "--grpc-keepalive-time=10000", "--grpc-keepalive-timeout=5000",
        "--grpc-keepalive-permit-without-calls=true",
        "--grpc-http2-max-pings-without-data=0",
        "--grpc-http2-min-recv-ping-interval-without-data=1000",
        "--grpc-http2-max-ping-strikes=0", "--grpc-max-connection-age=600000",
        "--grpc-max-connection-age-grace=1000", "--grpc-infer-allocation-pool-size=4",
        "--reuse-grpc-port=true"], [Case("serves", [GRPC_LIVE, GRPC_SIMPLE_INFER])]),
    Suite("flags_grpc_compression_high", AREA, [add_sub()],
          ["--grpc-infer-response-compression-level=HIGH"],
          [Case("infer", [GRPC_SIMPLE_INFER, GRPC_METADATA])]),
    Suite("flags_frontends_not_enabled", AREA, [add_sub()], [
        "--allow-sagemaker=false", "--sagemaker-port=8080", "--sagemaker-thread-count=3",
        "--allow-vertex-ai=false", "--vertex-ai-port=8080", "--vertex-ai-thread-count=3",
        "--vertex-ai-default-model=simple"], [Case("serves", [SERVER_METADATA, SIMPLE_INFER])]),
]

_LOGGING = Http("GET", "/v2/logging")
_TRACE = Http("GET", "/v2/trace/setting")
OBSERVABILITY = [
    Suite("flags_logging", AREA, flags=[
        "--log-verbose=true", "--log-warning=0", "--log-error=TRUE",
        "--log-format=ISO8601"], cases=[Case("settings", [_LOGGING])]),
    Suite("flags_log_verbose_number", AREA, flags=["--log-verbose", "2"],
          cases=[Case("settings", [_LOGGING])]),
    Suite("flags_trace_deprecated", AREA, flags=[
        "--trace-level=TIMESTAMPS", "--trace-rate=9", "--trace-count=4",
        "--trace-file={tmp}/trace.json", "--trace-log-frequency=2"],
        cases=[Case("settings", [_TRACE])]),
    Suite("flags_trace_level_off_then_on", AREA, flags=[
        "--trace-level=OFF", "--trace-level=TENSORS"], cases=[Case("settings", [_TRACE])]),
]

_AUTO_PY = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [1]})
        config.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [1]})
        return config

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]
'''
_AUTO = python_model("auto", 'name: "auto"\nbackend: "python"\n', _AUTO_PY)
_AUTO_CONFIG = Http("GET", "/v2/models/auto/config")
_ALT_DEFAULT, _ALT_H100 = add_sub("alt", max_batch_size=2), add_sub("alt", max_batch_size=4)
_ALT = Model("alt", _ALT_DEFAULT.config,
             {**_ALT_DEFAULT.files, "configs/h100.pbtxt": _ALT_H100.config or ""})
CONFIGS = [
    Suite("flags_auto_complete", AREA, [_AUTO], [], [Case("config", [_AUTO_CONFIG])]),
    Suite("flags_disable_auto_complete", AREA, [_AUTO], ["--disable-auto-complete-config"],
          [Case("config", [_AUTO_CONFIG])]),
    Suite("flags_strict_model_config_true", AREA, [_AUTO], ["--strict-model-config=true"],
          [Case("config", [_AUTO_CONFIG])]),
    Suite("flags_strict_model_config_overridden", AREA, [_AUTO], [
        "--strict-model-config=false", "--disable-auto-complete-config"],
        [Case("config", [_AUTO_CONFIG])]),
    Suite("flags_model_config_name", AREA, [_ALT], ["--model-config-name=h100"],
          [Case("config", [Http("GET", "/v2/models/alt/config")])]),
    Suite("flags_model_config_name_absent", AREA, [_ALT], ["--model-config-name=a100"],
          [Case("config", [Http("GET", "/v2/models/alt/config")])]),
]

SUITES = (BOOLEANS + INTEGERS + FLOATS + SHAPE + CHOICES + NEWER + PORTS + FRONTENDS
          + MODELS_AT_STARTUP + READINESS + IDENTITY + ENDPOINTS + RESTRICTED + CONTROL
          + ENGINE + OBSERVABILITY + CONFIGS)
