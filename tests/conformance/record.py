"""Record real Triton's answers to the conformance cases as golden files.

    python -m tests.conformance.record --bench /tmp/bench            # every suite
    python -m tests.conformance.record --bench /tmp/bench --suite http_health --area infer

``--bench`` is a copy of ``../shared/bench`` on which ``setup.sh`` has run (it installs
tritonserver 2.51 from the nvidia-pytriton wheel). Each suite gets a fresh Triton with
its flags and repository; its answers, normalised, are written to ``golden/<suite>.json``.
``--check`` compares instead of writing, and ``--infercore`` runs the suites against
infercore and prints what differs (the replay, outside pytest).
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from pathlib import Path

from . import golden
from .cases import all_suites
from .runner import run_case, startup_answers
from .servers import infercore_kind, start_server, triton_paths

DEFAULT_BENCH = Path(__file__).resolve().parents[3] / "shared" / "bench"


# what setup.sh installs; the recorder refuses a Triton that says otherwise (_check_release)
RELEASE = "2.51.0"


def _check_release(server) -> None:
    """Stop if the server recording is not Triton RELEASE (its /v2 metadata says)."""
    import json
    import urllib.request
    if not server.suite.ports or "--allow-http=false" in server.suite.flags:
        return
    url = f"http://127.0.0.1:{server.endpoint.http_port}/v2"
    with urllib.request.urlopen(url, timeout=5) as answer:
        version = json.loads(answer.read()).get("version")
    if version != RELEASE:
        raise SystemExit(f"recording from tritonserver {version}, expected {RELEASE}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.conformance.record")
    parser.add_argument("--bench", type=Path, default=DEFAULT_BENCH)
    parser.add_argument("--suite", action="append", default=[],
                        help="suite name or glob (repeatable); default: all")
    parser.add_argument("--area", action="append", default=[])
    parser.add_argument("--missing", action="store_true",
                        help="only suites with no golden file, or with cases not recorded")
    parser.add_argument("--check", action="store_true",
                        help="compare Triton with the goldens instead of writing them")
    parser.add_argument("--infercore", action="store_true",
                        help="run infercore instead of Triton and print what differs")
    args = parser.parse_args(argv)

    suites = [s for s in all_suites()
              if (not args.suite or any(fnmatch.fnmatch(s.name, p) for p in args.suite))
              and (not args.area or s.area in args.area)]
    if args.missing:
        suites = [s for s in suites if _missing(s)]
    kind = infercore_kind() if args.infercore else triton_paths(args.bench)
    release = f"tritonserver {RELEASE} (nvidia-pytriton 0.7.0)"
    failures = 0
    for suite in suites:
        server = start_server(suite, kind)
        recorded: dict[str, list] = {}
        try:
            if not args.infercore and server.exit_code is None:
                _check_release(server)
            if suite.startup:
                recorded[golden.STARTUP] = startup_answers(server)
            for case in suite.cases:
                recorded[case.name] = run_case(server, case)
        finally:
            server.stop()
        if args.infercore or args.check:
            failures += _report(suite, recorded)
        else:
            path = golden.save(suite, recorded, release)
            print(f"recorded {suite.name}: {len(recorded)} cases -> {path}")
    return 1 if failures else 0


def _missing(suite) -> bool:
    document = golden.load(suite)
    cases = document.get("cases", {})
    if suite.startup:
        return golden.STARTUP not in cases
    return any(case.name not in cases for case in suite.cases)


def _report(suite, recorded: dict[str, list]) -> int:
    failures = 0
    cases = [None] if suite.startup else list(suite.cases)
    for case in cases:
        name = golden.STARTUP if case is None else case.name
        try:
            expected, partial = golden.expected_answers(suite, case)
        except LookupError as error:
            print(f"MISSING {suite.name}::{name}: {error}")
            failures += 1
            continue
        problems = golden.compare(expected, recorded[name], partial)
        if problems:
            failures += 1
            print(f"DIFF {suite.name}::{name}")
            for problem in problems:
                print(f"    {problem}")
        else:
            print(f"ok   {suite.name}::{name}")
    return failures


if __name__ == "__main__":
    sys.exit(main())
