"""The "python" backend: Triton Python-backend models (``TritonPythonModel``) run in-process.

    PythonBackend.auto_complete_config   imports model.py afresh, runs its auto_complete_config
    PythonBackend.create_model           imports model.py once per model version; or, for a
                                         model whose instances run in worker processes
                                         (infercore.execution_mode "process"), returns an
                                         IsolatedModel (isolation/instances.py) and imports nothing
    PythonModel.create_instance          TritonPythonModel() + initialize(args)
    PythonInstance.execute(payload)      execute(requests) on the instance's backend thread
                                         (execute(batch) for batch-assembly models, in
                                         batch_assembly.py)
    PythonInstance.finalize()            the model's finalize(), errors logged
    PythonModel.check_ready()            every instance's is_ready(), where the model has
                                         one (readiness.py): the ReadinessCheck capability

Threads: ``execute`` and ``finalize`` of an instance run on that instance's backend thread;
``create_instance`` runs on the loading thread. A decoupled model may answer from threads of
its own, through ``pb_request.InferenceResponseSender`` (which serialises each request's
sends). Errors reach clients with Triton's wording: "Failed to process the request(s) for
model '<instance>', message: <Type>: <text>" followed by the model's frames.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2

from ...errors import InternalError, InvalidArgumentError
from ...payload import Payload
from ..base import InstanceInfo, ModelContext
from .batch_assembly import BatchAssembly, batch_assembly_from_config, execute_assembled
from .coroutines import CoroutineLoop
from .isolation.instances import IsolatedModel, default_execution_mode, isolation_from_config
from .loader import load_model_class, model_package, unload_model_class
from .pb_utils.error import python_error_text
from .pb_utils.metrics import use_metrics_backend
from .pb_utils.model_config import ModelConfig, config_to_json
from .pb_utils.request import (
    InferenceRequest,
    InferenceResponse,
    _Scope,
    register_package,
    unregister_package,
    use_scope,
)
from .readiness import ReadinessProbe, all_ready

__all__ = ["PythonBackend", "PythonInstance", "PythonModel"]

logger = logging.getLogger(__name__)

DEFAULT_MODEL_FILENAME = "model.py"


def _model_file(config: model_config_pb2.ModelConfig, version_dir: Path) -> Path:
    return Path(version_dir) / (config.default_model_filename or DEFAULT_MODEL_FILENAME)


def _version_of(version_dir: Path) -> int:
    name = Path(version_dir).name
    return int(name) if name.isdigit() else -1


def model_config_json(config: model_config_pb2.ModelConfig) -> str:
    """``args["model_config"]``: the config as Triton renders it in JSON (the server's
    renderer, as the config endpoint shows it)."""
    return config_to_json(config)


_warned_in_thread = threading.Event()


def _warn_in_thread_once(model_name: str) -> None:
    """Say once per process what running Python models in-thread gives up."""
    if _warned_in_thread.is_set():
        return
    _warned_in_thread.set()
    logger.warning(
        "Python model '%s' runs in-thread, the fast default: a model that calls os._exit, "
        "segfaults or aborts stops the whole server, where Triton's stub processes keep it "
        "up. --backend-config=python,execution-mode=process runs every Python model in "
        "worker processes (docs/process_isolation.md); infercore serve --supervise "
        "restarts a server that died.", model_name)


def _type_name(value: Any) -> str:
    """``type(value)`` as Triton's stub prints it: pb_utils classes live in its
    ``c_python_backend_utils`` module."""
    kind = type(value)
    if kind.__module__.startswith("infercore.backends.python."):
        return f"<class 'c_python_backend_utils.{kind.__name__}'>"
    return str(kind)


class PythonBackend:
    """Loads Triton Python-backend models."""

    name = "python"
    supports_batching = True

    def auto_complete_config(
        self, config: model_config_pb2.ModelConfig, model_dir: Path, version_dir: Path
    ) -> None:
        """Run the model class's static ``auto_complete_config`` on ``config`` (in place).

        As Triton runs it in a throwaway stub, the module imported here is discarded.
        """
        model_dir = Path(model_dir)
        name = config.name or model_dir.name
        try:
            model_class = load_model_class(
                _model_file(config, version_dir),
                repository=model_dir.parent,
                module_key=f"{name}_{Path(version_dir).name}_autocomplete",
                model_name=name,
            )
        except InvalidArgumentError as exc:
            # create_model runs the same import for every version and fails each with this
            # reason, as Triton fails the version's load; the config is left as written.
            logger.debug("auto-complete of model '%s' skipped: %s", name, exc.message)
            return
        try:
            hook = getattr(model_class, "auto_complete_config", None)
            if hook is None:
                return
            scope = _Scope(name, _version_of(version_dir), Path(version_dir))
            wrapper = ModelConfig(config)
            with use_scope(scope):
                try:
                    result = hook(wrapper)
                except (Exception, SystemExit) as exc:
                    raise InternalError(
                        f"auto_complete_config function in model '{name}' failed: "
                        f"{python_error_text(exc)}"
                    ) from exc
            if not isinstance(result, ModelConfig):
                raise InternalError(
                    f"auto_complete_config function in model '{name}' must return a valid "
                    "pb.ModelConfig object."
                )
            try:
                result._sync()  # edits made through as_dict() land in the message too
            except ValueError as exc:
                raise InternalError(str(exc)) from exc
            if result._proto is not config:
                config.CopyFrom(result._proto)
        finally:
            unload_model_class(model_class)

    def create_model(self, context: ModelContext) -> PythonModel | IsolatedModel:
        # Checked before the import, so a bad parameter fails the load without running model.py.
        isolation = isolation_from_config(
            context.config, context.name, default_execution_mode(context.backend_config))
        if isolation is not None:
            # Only the workers import model.py (each runs create_in_thread_model).
            batch_assembly_from_config(context.config, context.name)
            return IsolatedModel(context, isolation)
        _warn_in_thread_once(context.name)
        return self.create_in_thread_model(context)

    def create_in_thread_model(self, context: ModelContext) -> PythonModel:
        """Import model.py here; its instances run in this process."""
        assembly = batch_assembly_from_config(context.config, context.name)
        if context.metrics is not None:
            # pb_utils metrics are process-wide (Triton's are): made from now on, at the
            # model's import too, they live in the registry the server handed over. A
            # worker installed its own (worker/runtime.py) and hands none.
            use_metrics_backend(context.metrics)
        model_class = load_model_class(
            _model_file(context.config, context.version_dir),
            repository=context.repository,
            module_key=f"{context.name}_{context.version}",
            model_name=context.name,
        )
        return PythonModel(context, model_class, assembly)


class PythonModel:
    """One loaded version of a Python model: its class, and what every instance shares."""

    def __init__(
        self, context: ModelContext, model_class: type, assembly: BatchAssembly | None = None
    ) -> None:
        self._context = context
        self._class = model_class
        self._package = model_package(model_class)
        self._decoupled = context.decoupled
        self._assembly = assembly  # None unless the model opts in to batch assembly
        self._output_names = tuple(output.name for output in context.config.output)
        self._config_json = model_config_json(context.config)
        self._scope = _Scope(
            context.name, context.version, Path(context.version_dir), infer=context.infer,
            control=context.control,
        )
        # Calls from threads the model starts find the model through its module.
        register_package(self._package, self._scope)
        # the is_ready() probes of the instances whose model object has one
        self._probes_lock = threading.Lock()
        self._probes: dict[str, ReadinessProbe] = {}

    @property
    def context(self) -> ModelContext:
        return self._context

    def create_instance(self, info: InstanceInfo) -> PythonInstance:
        """Instantiate ``TritonPythonModel`` and call its ``initialize(args)``.

        Raises:
            InternalError: the constructor or ``initialize`` raised; the message is the
                exception's type, text and frames, as Triton reports it.
        """
        context = self._context
        scope = replace(self._scope, instance_name=info.name)
        args = {
            "model_config": self._config_json,
            "model_instance_kind": info.kind_name,
            "model_instance_name": info.name,
            "model_instance_device_id": str(info.device_id),
            "model_repository": str(context.model_dir),
            "model_version": str(context.version),
            "model_name": context.name,
        }
        with use_scope(scope):
            try:
                model = self._class()
                initialize = getattr(model, "initialize", None)
                if initialize is not None:
                    initialize(args)
            except (Exception, SystemExit) as exc:
                raise InternalError(python_error_text(exc)) from exc
        instance = PythonInstance(self, model, info, scope)
        probe = instance.readiness_probe()
        if probe is not None:
            with self._probes_lock:
                self._probes[info.name] = probe
        return instance

    @property
    def checks_readiness(self) -> bool:
        """ReadinessCheck: whether an instance's model object has ``is_ready``."""
        return bool(self._probes)

    def check_ready(self) -> bool:
        """ReadinessCheck: ready when every instance's ``is_ready()`` answers True, within
        readiness.READY_TIMEOUT_S in all (the checks run at once)."""
        with self._probes_lock:
            probes = list(self._probes.values())
        return all_ready([probe.start() for probe in probes], self._context.name)

    def _forget_probe(self, instance_name: str) -> None:
        with self._probes_lock:
            self._probes.pop(instance_name, None)

    def finalize(self) -> None:
        unregister_package(self._package)
        unload_model_class(self._class)


class PythonInstance:
    """One ``TritonPythonModel`` object, driven by its instance's backend thread.

    Its public members beside ``execute``/``finalize`` are what batch assembly
    (``batch_assembly.AssemblyHost``) runs an assembled batch with: the model's scope and
    ``execute``, its coroutine loop, and the ways a request is answered or failed with
    Triton's texts. All of them run on the instance's backend thread.
    """

    def __init__(
        self, model: PythonModel, model_object: Any, info: InstanceInfo, scope: _Scope
    ) -> None:
        self._model = model
        self._object = model_object
        self._name = info.name
        self._scope = scope
        self._decoupled = model._decoupled
        self._assembly = model._assembly
        self._output_names = model._output_names
        # where the model's class lives, as Triton names it in "does not implement" errors
        self.model_file = str(_model_file(model.context.config, model.context.version_dir))
        self._loop: CoroutineLoop | None = None  # for `async def execute`, made at first use
        self._loop_lock = threading.Lock()  # the loop is made once (is_ready() needs it too)
        is_ready = getattr(model_object, "is_ready", None)  # the model's, as Triton looks
        self._probe = (None if not callable(is_ready) else ReadinessProbe(
            info.name, is_ready, self.scope, self.run_coroutine))

    def execute(self, payload: Payload) -> None:
        if self._assembly is not None:
            execute_assembled(self, self._assembly, payload)
            return
        requests = [
            InferenceRequest._wrap(core, self._output_names, self._decoupled)
            for core in payload.requests
        ]
        payload.mark_compute_input_end()
        with use_scope(self._scope):
            execute = getattr(self._object, "execute", None)
            if execute is None:
                payload.mark_compute_output_start()
                self.fail_all(
                    requests,
                    f"Python model {self.model_file} does not implement `execute` method.",
                )
                return
            try:
                result = execute(requests)
                if inspect.iscoroutine(result):
                    if self._decoupled:
                        # As Triton: left running; it answers through response senders.
                        self._coroutine_loop().run_in_background(result)
                        payload.mark_compute_output_start()
                        return
                    result = self.run_coroutine(result)
            except (Exception, SystemExit) as exc:
                payload.mark_compute_output_start()
                self.fail_all(requests, python_error_text(exc))
                return
            payload.mark_compute_output_start()
            if self._decoupled:
                if result is not None:
                    self.fail_all(
                        requests,
                        f"Python model '{self._name}' is using the decoupled mode and the "
                        "execute function must return None.",
                    )
                    return
            elif not self.send_returned(requests, result):
                return  # every request failed: none is rescheduled
            for request in requests:
                if request._reschedule:
                    self._reschedule(request)

    def _reschedule(self, request: InferenceRequest) -> None:
        """The model released ``request`` with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
        hand it back to its scheduler (``InferRequest.rescheduler``) to run again."""
        core = request._core
        if core is None or core.sender is None:
            return
        if core.rescheduler is None:
            # Triton logs this and never releases the request, so its client waits for
            # good; here it is answered with the same text instead.
            text = ("Failed to release request: Request is released with "
                    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not "
                    "configured to handle such a flag.")
            logger.error(text)
            if not core.sender.closed:
                # counted as Triton counts it: a success of the backend's
                core.sender.send(error=InternalError(text), fails=False)
            return
        core.rescheduler(core)

    def model_execute(self) -> Callable[[Any], Any] | None:
        """The model object's ``execute``; None when the model has none."""
        return getattr(self._object, "execute", None)

    def scope(self) -> AbstractContextManager[None]:
        """Enter the model's scope: pb_utils calls made inside find their model."""
        return use_scope(self._scope)

    def send_returned(self, requests: list[InferenceRequest], result: Any) -> bool:
        """Send what a non-decoupled ``execute`` returned: one response per request.
        False when the result was refused (every request failed)."""
        if result is None:
            # Triton accepts None when the model answers through response senders, now or
            # from its own threads later; a request whose sender the model never took
            # would wait forever, so it fails.
            for request in requests:
                if request._reschedule:
                    continue  # answered by a later execution
                if request._response_sender is None:
                    self.fail(
                        request,
                        "Expected a list in the execute return, found type "
                        f"'{type(result)}'.",
                    )
                else:
                    self._answer_later(request)
            return True
        if not isinstance(result, (list, tuple)):
            self.fail_all(
                requests,
                f"Expected a list in the execute return, found type '{_type_name(result)}'.",
            )
            return False
        if len(result) != len(requests):
            self.fail_all(
                requests,
                "Number of InferenceResponse objects do not match the number of "
                f"InferenceRequest objects. InferenceRequest(s) size is:{len(requests)}, and "
                f"InferenceResponse(s) size is:{len(result)}",
            )
            return False
        for request, response in zip(requests, result, strict=True):
            if request._reschedule and response is not None:
                # Triton's text, its typo included
                self.fail_all(
                    requests,
                    "Expected a None object in the execute function return list for "
                    f"reschduled request, found type '{_type_name(response)}'.",
                )
                return False
            if response is None:
                continue
            if not isinstance(response, InferenceResponse):
                self.fail_all(
                    requests,
                    "Expected an 'InferenceResponse' object in the execute function return "
                    f"list, found type '{_type_name(response)}'.",
                )
                return False
            sender = request._response_sender
            if sender is not None and sender._used:
                self.fail_all(
                    requests,
                    "Unable to send response. Non-decoupled model cannot send more than one "
                    "response.",
                )
                return False
        for request, response in zip(requests, result, strict=True):
            if response is None:
                if request._reschedule:
                    continue  # answered by a later execution
                if request._response_sender is None:
                    self.fail(
                        request,
                        "Expected an 'InferenceResponse' object in the execute function return "
                        "list, found type '<class 'NoneType'>'.",
                    )
                else:
                    self._answer_later(request)
                continue
            try:
                response._send(request._core.sender, final=True)  # type: ignore[union-attr]
            except Exception as exc:  # noqa: BLE001 - one bad response fails its request only
                self.fail(request, python_error_text(exc, skip_frames=0))
        return True

    @staticmethod
    def _answer_later(request: InferenceRequest) -> None:
        """The model kept the request's response sender: it may answer after returning."""
        core = request._core
        if core is not None and core.sender is not None:
            core.sender.answer_later()

    def _error(self, text: str) -> InternalError:
        return InternalError(
            f"Failed to process the request(s) for model '{self._name}', message: {text}"
        )

    def fail_all(self, requests: list[InferenceRequest], text: str) -> None:
        """Fail every request with Triton's "Failed to process the request(s)" error."""
        logger.error(
            "Failed to process the request(s) for model '%s', message: %s", self._name, text
        )
        for request in requests:
            # One error object per request: each may be raised on a different thread.
            request.get_response_sender()._fail(self._error(text))

    def fail(self, request: InferenceRequest, text: str) -> None:
        """Fail one request with Triton's "Failed to process the request(s)" error."""
        logger.error(
            "Failed to process the request(s) for model '%s', message: %s", self._name, text
        )
        request.get_response_sender()._fail(self._error(text))

    def readiness_probe(self) -> ReadinessProbe | None:
        """The probe of the model's ``is_ready()``; None when it has none."""
        return self._probe

    def _coroutine_loop(self) -> CoroutineLoop:
        with self._loop_lock:
            if self._loop is None:
                self._loop = CoroutineLoop(f"{self._name}-asyncio")
            return self._loop

    def run_coroutine(self, coroutine: Any) -> Any:
        """Run an ``async def execute`` of a model that is not decoupled to its end."""
        return self._coroutine_loop().run(coroutine)

    def finalize(self) -> None:
        if self._probe is not None:
            self._model._forget_probe(self._name)
            self._probe.stop()
        # As Triton's stub: the coroutines' loop stops before the model's finalize runs.
        with self._loop_lock:
            loop, self._loop = self._loop, None
        if loop is not None:
            loop.stop()
        finalize = getattr(self._object, "finalize", None)
        if finalize is not None:
            with use_scope(self._scope):
                try:
                    finalize()
                except (Exception, SystemExit) as exc:
                    logger.error(
                        "finalize of model instance '%s' failed: %s",
                        self._name,
                        python_error_text(exc),
                    )
