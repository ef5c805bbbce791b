"""Golden files: what real Triton answered, one JSON file per suite, and the comparison.

``golden/<suite>.json`` holds, per case, the normalised answers of each step as recorded
from Triton (``answers``), the Triton release they came from, and, for the cases that do
not compare with them, why: ``newer`` (current Triton's behaviour, with its citation) or
``departure`` (why infercore answers otherwise), with ``expect``, the answers infercore
is held to instead. A start-up suite's single answer is under the case name ``startup``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .case import Case, Suite

__all__ = ["GOLDEN_DIR", "compare", "expected_answers", "load", "save"]

GOLDEN_DIR = Path(__file__).parent / "golden"
STARTUP = "startup"


def path_of(suite: Suite) -> Path:
    return GOLDEN_DIR / f"{suite.name}.json"


def load(suite: Suite) -> dict[str, Any]:
    path = path_of(suite)
    if not path.exists():
        return {}
    return json.loads(path.read_text())


def save(suite: Suite, recorded: Mapping[str, Sequence[Any]], release: str) -> Path:
    """Write ``recorded`` (case name -> answers) with each case's newer/departure note."""
    cases: dict[str, Any] = {}
    for case in suite.cases:
        if case.name in recorded:
            cases[case.name] = _entry(recorded[case.name], case.newer, case.departure,
                                      case.expect, case.note)
    if suite.startup and STARTUP in recorded:
        cases[STARTUP] = _entry(recorded[STARTUP], suite.startup_newer,
                                suite.startup_departure,
                                None if suite.startup_expect is None else [suite.startup_expect],
                                suite.startup_note)
    document = {"suite": suite.name, "area": suite.area, "recorded_with": release,
                "flags": list(suite.flags), "cases": cases}
    path = path_of(suite)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1, sort_keys=False, ensure_ascii=False) + "\n")
    return path


def _entry(answers: Sequence[Any], newer: str | None, departure: str | None,
           expect: Sequence[Any] | None, note: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"answers": list(answers)}
    if note:
        entry["note"] = note
    if newer:
        entry["newer_than_2.51"] = newer
    if departure:
        entry["departure"] = departure
    if expect is not None:
        entry["expect"] = list(expect)
    return entry


def expected_answers(suite: Suite, case: Case | None) -> tuple[list[Any], bool]:
    """(answers infercore must give, partial): Triton's recorded ones, or the case's
    ``expect`` (partial: only the fields it gives are compared)."""
    document = load(suite)
    name = STARTUP if case is None else case.name
    expect = suite.startup_expect if case is None else None
    if case is not None and case.expect is not None:
        return list(case.expect), True
    if case is None and expect is not None:
        return [expect], True
    entry = document.get("cases", {}).get(name)
    if entry is None:
        raise LookupError(f"no golden answers for {suite.name}::{name}: record them with "
                          f"python -m tests.conformance.record --suite {suite.name}")
    return list(entry["answers"]), False


def compare(expected: Sequence[Any], actual: Sequence[Any], partial: bool) -> list[str]:
    """Differences between answer lists, as readable lines ('' when they agree)."""
    problems: list[str] = []
    if len(expected) != len(actual):
        problems.append(f"{len(actual)} answers, expected {len(expected)}")
    for index, (want, got) in enumerate(zip(expected, actual, strict=False)):
        if want is None:  # an expect entry of None: this step is not compared
            continue
        _diff(want, got, f"step {index}", partial, problems)
    return problems


def _diff(want: Any, got: Any, where: str, partial: bool, problems: list[str]) -> None:
    if isinstance(want, Mapping) and isinstance(got, Mapping):
        keys = list(want) if partial else sorted(set(want) | set(got), key=str)
        for key in keys:
            if key not in got:
                problems.append(f"{where}.{key}: missing, expected {_short(want[key])}")
            elif key not in want:
                problems.append(f"{where}.{key}: unexpected {_short(got[key])}")
            else:
                _diff(want[key], got[key], f"{where}.{key}", partial, problems)
        return
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        for index, (w, g) in enumerate(zip(want, got, strict=True)):
            _diff(w, g, f"{where}[{index}]", partial, problems)
        return
    if want != got and not (_is_nan(want) and _is_nan(got)):  # NaN data answers NaN
        problems.append(f"{where}: got {_short(got)}, expected {_short(want)}")


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 400 else text[:400] + "..."
