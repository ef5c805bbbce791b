"""One handle class and one server surface: ``Model`` for both servers, and ``ServerAPI``.

These need no running server: handles are made without touching the network or the
engine, and signatures are read from the classes.
"""

from __future__ import annotations

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
