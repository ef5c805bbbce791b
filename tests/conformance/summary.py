"""The conformance section of docs/conformance.md: cases per area, and every case that is
not held to Triton 2.51's recorded answer (newer than 2.51, or a departure), with why.

    python -m tests.conformance.summary            # print the section
    python -m tests.conformance.summary --write    # write it into docs/conformance.md

``test_conformance.py`` checks that the document holds what this prints, so the counts
and the list of departures stay true.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from .cases import all_suites

DOC = Path(__file__).resolve().parents[2] / "docs" / "conformance.md"
BEGIN = "<!-- conformance-summary: begin (python -m tests.conformance.summary --write) -->"
END = "<!-- conformance-summary: end -->"


def render() -> str:
    suites = all_suites()
    cases: Counter[str] = Counter()
    startup: Counter[str] = Counter()
    notes: list[tuple[str, str, str]] = []  # (kind, where, why)
    for suite in suites:
        if suite.startup:
            startup[suite.area] += 1
            if suite.startup_newer:
                notes.append(("newer than 2.51", f"{suite.name}", suite.startup_newer))
            if suite.startup_departure:
                notes.append(("departure", f"{suite.name}", suite.startup_departure))
        for case in suite.cases:
            cases[suite.area] += 1
            if case.newer:
                notes.append(("newer than 2.51", f"{suite.name}::{case.name}", case.newer))
            if case.departure:
                notes.append(("departure", f"{suite.name}::{case.name}", case.departure))
    areas = sorted(set(cases) | set(startup))
    lines = ["| area | suites | cases | start-up cases |", "|---|---:|---:|---:|"]
    for area in areas:
        count = sum(1 for s in suites if s.area == area)
        lines.append(f"| {area} | {count} | {cases[area]} | {startup[area]} |")
    total = sum(cases.values()) + sum(startup.values())
    lines.append(f"| **all** | {len(suites)} | {sum(cases.values())} | "
                 f"{sum(startup.values())} |")
    lines += ["", f"{total} cases in all.", ""]
    for kind in ("departure", "newer than 2.51"):
        grouped: dict[str, list[str]] = {}  # one entry per reason, with its cases
        for k, where, why in notes:
            if k == kind:
                grouped.setdefault(" ".join(why.split()), []).append(where)
        count = sum(len(wheres) for wheres in grouped.values())
        lines += [f"### {kind[0].upper() + kind[1:]} ({count} cases)", ""]
        for why, wheres in grouped.items():
            lines.append(f"- {why} ({', '.join(f'`{w}`' for w in wheres)})")
        if not grouped:
            lines.append("- none")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def section_in(text: str) -> str | None:
    if BEGIN not in text or END not in text:
        return None
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.conformance.summary")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args(argv)
    section = render()
    if not args.write:
        sys.stdout.write(section)
        return 0
    text = DOC.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    DOC.write_text(f"{head}{BEGIN}\n{section}{END}{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
