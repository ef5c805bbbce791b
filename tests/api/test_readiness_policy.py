"""--readiness-policy (infercore's own): which models strict readiness waits for."""

from __future__ import annotations

import pytest
from sample_models import ADD_SUB_CONFIG, ADD_SUB_PY

from infercore import InvalidArgumentError, Options, Server
from infercore.cli import build_parser, options_from_args

BROKEN_PY = """
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("never loads")
"""


@pytest.fixture
def mixed(repo):
    """add_sub loads, broken does not."""
    repo.add_model("add_sub", config=ADD_SUB_CONFIG, model_py=ADD_SUB_PY)
    repo.add_model("broken", config=ADD_SUB_CONFIG.replace('"add_sub"', '"broken"'),
                   model_py=BROKEN_PY)
    return repo.path


@pytest.mark.parametrize(("policy", "ready"), [
    ("all", False), ("any", True), ("listed:add_sub", True), ("listed:broken", False),
    ("listed:add_sub,broken", False), ("listed:nope", False)])
def test_the_policy_names_the_models_readiness_waits_for(mixed, policy: str, ready: bool):
    options = Options(model_repository=mixed, exit_on_error=False, readiness_policy=policy)
    with Server(options) as server:
        assert server.live() and server.started_up()
        assert server.ready() is ready


def test_without_strict_readiness_the_policy_has_nothing_to_wait_for(mixed):
    options = Options(model_repository=mixed, exit_on_error=False, strict_readiness=False,
                      readiness_policy="listed:broken")
    with Server(options) as server:
        assert server.ready() is True


def test_any_with_no_ready_model_is_not_ready(repo):
    repo.add_model("broken", config=ADD_SUB_CONFIG.replace('"add_sub"', '"broken"'),
                   model_py=BROKEN_PY)
    options = Options(model_repository=repo.path, exit_on_error=False, readiness_policy="any")
    with Server(options) as server:
        assert server.ready() is False


@pytest.mark.parametrize("policy", ["", "some", "listed", "listed:", "listed:a,,b", "any:x",
                                    "all:"])
def test_a_bad_policy_is_refused_and_a_good_one_then_taken(repo, policy: str):
    with pytest.raises(InvalidArgumentError, match=f"invalid readiness policy '{policy}'"):
        Options(model_repository=repo.path, readiness_policy=policy)
    assert Options(model_repository=repo.path, readiness_policy="any").readiness_policy == "any"


def test_the_flag_reaches_the_options(repo):
    args = build_parser().parse_args(["serve", f"--model-repository={repo.path}",
                                      "--readiness-policy=listed:a,b"])
    assert options_from_args(args).readiness_policy == "listed:a,b"
