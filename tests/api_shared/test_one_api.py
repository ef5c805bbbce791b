"""One handle class and one server surface: ``Model`` for both servers, and ``ServerAPI``.

These need no running server: handles are made without touching the network or the
engine, and signatures are read from the classes.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from infercore import (
    InvalidArgumentError,
    Model,
    RemoteModel,
    RemoteServer,
    Server,
    Trace,
    UnsupportedError,
)
from infercore.lifecycle import REMOTE_ONLY, SERVER_ONLY, ServerAPI


@pytest.fixture
def embedded(tmp_path: Path) -> Server:
    return Server(model_repository=tmp_path)  # never started: handles need no engine


@pytest.fixture
def remote() -> RemoteServer:
    return RemoteServer("127.0.0.1:9", "grpc")  # never connected: handles are local


# -- one Model class ------------------------------------------------------------------------

def test_both_servers_hand_out_the_one_model_class(embedded: Server,
                                                   remote: RemoteServer) -> None:
    local, far = embedded.model("m", 2), remote.model("m", 2)
    assert type(local) is Model
    assert isinstance(far, Model) and isinstance(far, RemoteModel)
    assert not isinstance(local, RemoteModel)
    # RemoteModel only names the class: every attribute is Model's
    assert RemoteModel.__mro__[1] is Model
    own = set(vars(RemoteModel)) - {"__module__", "__qualname__", "__doc__", "__slots__",
                                     "__firstlineno__", "__static_attributes__"}
    assert own == set()
    for name in ("infer", "async_infer", "ready", "aready", "metadata", "ametadata",
                 "config", "aconfig", "config_proto", "aconfig_proto", "statistics",
                 "astatistics", "labels", "create_request"):
        assert getattr(RemoteModel, name) is getattr(Model, name)


def test_handles_have_short_reprs_and_compare_by_server_name_and_version(
        embedded: Server, remote: RemoteServer, tmp_path: Path) -> None:
    assert repr(embedded.model("m")) == "Model(name='m', version=-1)"
    assert repr(remote.model("m", 3)) == "RemoteModel(name='m', version=3)"
    assert embedded.model("m") == embedded.model("m", -1)
    assert hash(embedded.model("m")) == hash(embedded.model("m"))
    assert embedded.model("m") != embedded.model("m", 1)
    assert embedded.model("m") != embedded.model("n")
    assert remote.model("m") == remote.model("m")
    # the same name on another server is another model
    assert embedded.model("m") != remote.model("m")
    assert remote.model("m") != RemoteServer("127.0.0.1:9").model("m")
    assert embedded.model("m") != Server(model_repository=tmp_path).model("m")
    assert embedded.model("m") != ("m", -1)


def test_what_is_in_process_only_is_refused_by_a_remote_server_before_sending(
        remote: RemoteServer) -> None:
    model = remote.model("m")
    with pytest.raises(UnsupportedError, match="in-process only"):
        model.infer(inputs={"X": [1]}, trace=Trace())
    with pytest.raises(UnsupportedError, match="in-process only"):
        model.create_request()
    with pytest.raises(UnsupportedError, match="in-process only"):
        model.labels("OUT")
    with pytest.raises(UnsupportedError, match="in-process only"):
        model.infer(object())  # not a mapping: taken as a request object


def test_inputs_that_are_neither_a_mapping_nor_a_request_raise_in_process(
        embedded: Server) -> None:
    with pytest.raises(InvalidArgumentError, match="InferenceRequest; got list"):
        embedded.model("m").infer([("X", 1)])  # type: ignore[arg-type]


# -- one server surface -----------------------------------------------------------------------

# Parameters a server adds to a ServerAPI method (keyword-only, with a default).
EXTRA_PARAMETERS = {
    (RemoteServer, "start"): {"timeout"},  # how long wait_until_ready waits for a network
    (RemoteServer, "astart"): {"timeout"},
}
# Sync members with no a-twin: they never block (a handle; a request handed on).
NO_TWIN = {"model", "infer"}


def _api_members() -> list[str]:
    return sorted(name for name in vars(ServerAPI)
                  if not name.startswith("_") and callable(getattr(ServerAPI, name)))


def _parameters(function: object) -> list[tuple[str, object, object]]:
    signature = inspect.signature(function)  # type: ignore[arg-type]
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]


def test_both_servers_are_a_server_api(embedded: Server, remote: RemoteServer) -> None:
    assert isinstance(embedded, ServerAPI) and isinstance(remote, ServerAPI)


@pytest.mark.parametrize("cls", [Server, RemoteServer], ids=lambda c: c.__name__)
def test_each_server_method_has_the_protocols_parameters(cls: type) -> None:
    for name in _api_members():
        expected = _parameters(getattr(ServerAPI, name))
        implemented = getattr(cls, name)
        extra = EXTRA_PARAMETERS.get((cls, name), set())
        got = _parameters(implemented)
        assert [p for p in got if p[0] not in extra] == expected, f"{cls.__name__}.{name}"
        for parameter in inspect.signature(implemented).parameters.values():
            if parameter.name in extra:
                assert parameter.kind is inspect.Parameter.KEYWORD_ONLY
                assert parameter.default is not inspect.Parameter.empty
        assert (inspect.iscoroutinefunction(implemented)
                == inspect.iscoroutinefunction(getattr(ServerAPI, name))), name


def test_every_blocking_call_has_an_async_twin_with_the_same_parameters() -> None:
    members = set(_api_members())
    sync = {name for name in members
            if not inspect.iscoroutinefunction(getattr(ServerAPI, name))}
    assert {"start", "stop", "live", "ready", "metadata", "models", "repository_index",
            "statistics", "load", "unload", "log_settings", "update_log_settings",
            "trace_settings", "update_trace_settings", "model", "infer"} <= sync
    for name in sync - NO_TWIN:
        twin = "a" + name
        assert twin in members, f"{name} has no a-twin"
        assert inspect.iscoroutinefunction(getattr(ServerAPI, twin)), twin
        assert _parameters(getattr(ServerAPI, twin)) == _parameters(getattr(ServerAPI, name))
    # and no twin lacks its blocking call
    assert {name for name in members - sync} == {"a" + name for name in sync - NO_TWIN}


def test_what_only_one_server_has_is_named_with_its_reason(embedded: Server,
                                                           remote: RemoteServer) -> None:
    def public(server: object) -> set[str]:
        return {name for name in dir(server) if not name.startswith("_")}

    shared = set(_api_members())
    assert public(embedded) - shared == set(SERVER_ONLY)
    assert public(remote) - shared == set(REMOTE_ONLY)
    assert all(reason for reason in (*SERVER_ONLY.values(), *REMOTE_ONLY.values()))
