"""The supervisor's reading of its child's "serving" line (supervisor.py)."""

from __future__ import annotations

import sys

from infercore.supervisor import FD_VARIABLE, _Child

_SAY_SERVING_AND_EXIT = (
    "import os, sys; os.write(int(os.environ[sys.argv[1]]), b'serving\\n'); sys.exit(3)")


def test_a_child_that_said_serving_and_exited_before_the_first_poll_counts_as_served() -> None:
    child = _Child([sys.executable, "-c", _SAY_SERVING_AND_EXIT, FD_VARIABLE])
    child.process.wait()  # gone before the supervisor looks: its line waits in the pipe
    assert child.wait() == 3
    assert child.serving


def test_a_child_that_exits_without_serving_is_not_counted_as_served() -> None:
    child = _Child([sys.executable, "-c", "import sys; sys.exit(4)"])
    child.process.wait()
    assert child.wait() == 4
    assert not child.serving
