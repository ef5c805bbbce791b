"""A command line read as tritonserver's getopt_long reads it (no short options).

- ``--name=value`` and ``--name value``: an option that takes a value takes the next
  argument whatever it looks like (``--id --log-verbose=1`` names the server
  "--log-verbose=1");
- a unique prefix of a name is that name (``--strict-read=false``); a prefix of several
  is refused with the possibilities in declaration order;
- arguments that are not options are set aside and options after them still read (glibc
  permutes them to the end); ``--`` ends the options;
- reading stops at the first unknown option, missing value, value given to an option
  that takes none, or short option, with getopt's words for it.

``read`` returns the options in a canonical form (``--name=value``, ``--name``) that an
argparse parser of the same options takes unchanged, so the values are converted (and
refused) by the parser's types, in order, as tritonserver converts them.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

__all__ = ["LongOption", "Reading", "read"]


@dataclass(frozen=True, slots=True)
class LongOption:
    """One spelling of an option; spellings with the same ``key`` are one option."""

    name: str  # without the leading "--"
    takes_value: bool
    key: Hashable


@dataclass(slots=True)
class Reading:
    """What ``read`` found, up to ``error`` (getopt's complaint) when there is one."""

    options: list[str] = field(default_factory=list)  # canonical, in order
    given: list[str] = field(default_factory=list)  # the full names, in order
    positionals: list[str] = field(default_factory=list)
    error: str | None = None


def read(argv: Sequence[str], options: Sequence[LongOption]) -> Reading:
    reading = Reading()
    index = 0
    while index < len(argv):
        argument = argv[index]
        index += 1
        if argument == "--":
            reading.positionals.extend(argv[index:])
            break
        if not argument.startswith("-") or argument == "-":
            reading.positionals.append(argument)
            continue
        if not argument.startswith("--"):
            reading.error = f"invalid option -- '{argument[1]}'"
            break
        name, equals, value = argument[2:].partition("=")
        option, reading.error = _lookup(argument, name, options)
        if option is None:
            break
        if option.takes_value:
            if not equals:
                if index == len(argv):
                    reading.error = f"option '--{option.name}' requires an argument"
                    break
                value = argv[index]
                index += 1
            reading.options.append(f"--{option.name}={value}")
        elif equals:
            reading.error = f"option '--{option.name}' doesn't allow an argument"
            break
        else:
            reading.options.append(f"--{option.name}")
        reading.given.append(option.name)
    return reading


def _lookup(argument: str, name: str,
            options: Sequence[LongOption]) -> tuple[LongOption | None, str | None]:
    for option in options:
        if option.name == name:
            return option, None
    candidates: dict[Hashable, LongOption] = {}
    for option in options:
        if option.name.startswith(name):
            candidates.setdefault(option.key, option)
    if not candidates:
        return None, f"unrecognized option '{argument}'"
    if len(candidates) > 1:
        possibilities = " ".join(f"'--{option.name}'" for option in candidates.values())
        return None, f"option '{argument}' is ambiguous; possibilities: {possibilities}"
    return next(iter(candidates.values())), None
