"""Running a case's steps against a started server, answers normalised."""

from __future__ import annotations

from typing import Any

from .case import Case
from .normalize import normalize
from .servers import RunningServer
from .wire import run_step

__all__ = ["run_case", "startup_answers"]


def run_case(server: RunningServer, case: Case) -> list[Any]:
    return [normalize(run_step(server.endpoint, step), server.endpoint) for step in case.steps]


def startup_answers(server: RunningServer) -> list[Any]:
    return [normalize(server.startup_answer(), server.endpoint)]
