"""Shared fixtures: repositories of real Triton Python models, built per test."""

from __future__ import annotations

import pytest
from sample_models import ADD_SUB_CONFIG, ADD_SUB_PY

from infercore.testing import RepositoryBuilder


@pytest.fixture
def repo(tmp_path) -> RepositoryBuilder:
    return RepositoryBuilder(tmp_path / "models")


@pytest.fixture
def add_sub_repo(repo: RepositoryBuilder) -> RepositoryBuilder:
    repo.add_model("add_sub", config=ADD_SUB_CONFIG, model_py=ADD_SUB_PY)
    return repo


@pytest.fixture
def add_sub_source() -> tuple[str, str]:
    """(config.pbtxt, model.py) of the add_sub test model."""
    return ADD_SUB_CONFIG, ADD_SUB_PY
