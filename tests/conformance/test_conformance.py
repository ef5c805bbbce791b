"""Replay: infercore must answer every conformance case as real Triton did.

One ``infercore serve`` per suite, started when the suite's first case runs and stopped
when the next suite begins (cases run in their declared order: a case may rely on what
the earlier cases of its suite did). A failure lists each differing field.
"""

from __future__ import annotations

import pytest

from . import golden
from .case import Case, Suite
from .cases import all_suites
from .runner import run_case, startup_answers
from .servers import RunningServer, infercore_kind, start_server

SUITES = all_suites()
PARAMS = [pytest.param(suite, case, id=f"{suite.name}::{case.name}")
          for suite in SUITES if not suite.startup for case in suite.cases]
STARTUP = [pytest.param(suite, id=suite.name) for suite in SUITES if suite.startup]


class _OneServer:
    """The server of the suite now replaying; another suite's case replaces it."""

    def __init__(self) -> None:
        self.current: RunningServer | None = None

    def for_suite(self, suite: Suite) -> RunningServer:
        if self.current is not None and self.current.suite is suite:
            if self.current.process.poll() is None:
                return self.current
        self.close()
        self.current = start_server(suite, infercore_kind())
        return self.current

    def close(self) -> None:
        if self.current is not None:
            self.current.stop()
            self.current = None


@pytest.fixture(scope="module")
def servers():
    one = _OneServer()
    yield one
    one.close()


def _check(suite: Suite, case: Case | None, answers: list, log: str) -> None:
    expected, partial = golden.expected_answers(suite, case)
    problems = golden.compare(expected, answers, partial)
    if problems:
        name = "startup" if case is None else case.name
        pytest.fail(f"{suite.name}::{name} differs from Triton:\n  " + "\n  ".join(problems)
                    + f"\n--- server log (end) ---\n{log[-2500:]}", pytrace=False)


@pytest.mark.parametrize(("suite", "case"), PARAMS)
def test_case(servers: _OneServer, suite: Suite, case: Case) -> None:
    server = servers.for_suite(suite)
    _check(suite, case, run_case(server, case), server.output())


@pytest.mark.parametrize("suite", STARTUP)
def test_startup(suite: Suite) -> None:
    server = start_server(suite, infercore_kind())
    try:
        answers = startup_answers(server)
        log = server.output()
    finally:
        server.stop()
    _check(suite, None, answers, log)


def test_every_case_has_golden_answers() -> None:
    missing = [f"{s.name}::{c.name}" for s in SUITES for c in s.cases
               if c.expect is None and c.name not in golden.load(s).get("cases", {})]
    missing += [s.name for s in SUITES if s.startup and s.startup_expect is None
                and golden.STARTUP not in golden.load(s).get("cases", {})]
    assert not missing, f"cases never recorded: {missing}"


def test_docs_list_every_case_and_departure() -> None:
    from .summary import DOC, render, section_in

    assert section_in(DOC.read_text()) == render(), (
        "docs/conformance.md is out of date: python -m tests.conformance.summary --write")
