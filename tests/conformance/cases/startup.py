"""Start-up: command lines and repositories that stop the server, answered as Triton."""

from __future__ import annotations

from ..case import Suite
from ..models import add_sub

SUITES = [
    Suite("startup_unknown_flag", "startup", [add_sub()], ["--bogus"], startup=True),
    Suite("startup_log_verbose_not_a_number", "startup", [add_sub()], ["--log-verbose=abc"],
          startup=True),
    Suite("startup_repository_missing", "startup", flags=["--model-repository={tmp}/nowhere"],
          startup=True),
]
