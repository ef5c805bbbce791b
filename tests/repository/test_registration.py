"""Repositories registered while serving (Triton's repository registration): mapped
folders load under their mapped names, conflicts and unknown paths are refused."""

from __future__ import annotations

import numpy as np
import pytest
from control_models import add_echo, shared_state

from infercore import InvalidArgumentError, Server
from infercore.errors import AlreadyExistsError, UnsupportedError
from infercore.testing import RepositoryBuilder

X = {"X": np.array([7], np.int32)}


@pytest.fixture
def state(tmp_path, monkeypatch):
    yield from shared_state(tmp_path, monkeypatch)


def _tag(server: Server, name: str) -> int:
    return int(server.model(name).infer(inputs=X).result(timeout=30).outputs["TAG"]
               .to_numpy()[0])


def test_a_mapped_folder_loads_under_its_mapped_name(repo, tmp_path, state):
    add_echo(repo, "main", 1)
    archive = RepositoryBuilder(tmp_path / "archive")
    add_echo(archive, "echo", 2)  # its config says name: "echo"
    with Server(model_repository=repo.path, model_control_mode="explicit") as server:
        server.register_model_repository(archive.path, {"echo": "served"})
        server.load("served")
        assert _tag(server, "served") == 2
        assert server.model("served").config()["name"] == "served"
        names = {entry.name for entry in server.repository_index()}
        assert "served" in names and "echo" not in names  # listed under the mapping
        with pytest.raises(Exception, match="failed to poll"):
            server.load("echo")  # the folder is not a model under its own name


def test_an_unmapped_registered_folder_loads_under_its_name(repo, tmp_path, state):
    archive = RepositoryBuilder(tmp_path / "archive")
    add_echo(archive, "plain", 3)
    with Server(model_repository=repo.path, model_control_mode="explicit") as server:
        server.register_model_repository(str(archive.path))
        server.load("plain")
        assert _tag(server, "plain") == 3


def test_unregistering_keeps_loaded_models_and_forgets_the_folders(repo, tmp_path, state):
    archive = RepositoryBuilder(tmp_path / "archive")
    add_echo(archive, "echo", 4)
    with Server(model_repository=repo.path, model_control_mode="explicit") as server:
        server.register_model_repository(archive.path, {"echo": "m"})
        server.load("m")
        server.unregister_model_repository(archive.path)
        assert _tag(server, "m") == 4  # still loaded
        assert "m" not in {e.name for e in server.repository_index() if not e.version}
        with pytest.raises(InvalidArgumentError,
                           match=f"failed to unregister '{archive.path}', repository not "
                                 "found"):
            server.unregister_model_repository(archive.path)
        server.register_model_repository(archive.path, {"echo": "m"})  # registrable again


def test_registration_conflicts_are_refused_as_triton_refuses_them(repo, tmp_path, state):
    first = RepositoryBuilder(tmp_path / "first")
    second = RepositoryBuilder(tmp_path / "second")
    add_echo(first, "echo", 1)
    add_echo(second, "echo", 2)
    with Server(model_repository=repo.path, model_control_mode="explicit") as server:
        server.register_model_repository(first.path, {"echo": "m"})
        with pytest.raises(AlreadyExistsError,
                           match=f"model repository '{first.path}' has already been "
                                 "registered"):
            server.register_model_repository(first.path, {"echo": "other"})
        with pytest.raises(AlreadyExistsError,
                           match="failed to register 'm', there is a conflicting mapping "
                                 "for 'm'"):
            server.register_model_repository(second.path, {"echo": "m"})
        with pytest.raises(InvalidArgumentError, match="repository not found"):
            server.register_model_repository(tmp_path / "nowhere")
        with pytest.raises(InvalidArgumentError,
                           match="failed to register '', repository not found"):
            server.register_model_repository("")
        server.register_model_repository(second.path, {"echo": "n"})
        server.load("n")
        assert _tag(server, "n") == 2


@pytest.mark.parametrize("mode", ["none", "poll"])
def test_registration_needs_explicit_mode(repo, tmp_path, mode):
    with Server(model_repository=repo.path, model_control_mode=mode,
                repository_poll_secs=0) as server:
        with pytest.raises(UnsupportedError, match="repository registration is not "
                                                   "allowed if model control mode is not "
                                                   "EXPLICIT"):
            server.register_model_repository(tmp_path)
        with pytest.raises(UnsupportedError, match="unregistration is not allowed"):
            server.unregister_model_repository(tmp_path)
