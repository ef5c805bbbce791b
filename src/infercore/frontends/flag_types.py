"""tritonserver's flag value types, read as its parser reads them (command_line_parser.cc).

- booleans: true/false, on/off, 1/0 in any case; anything else is "invalid value for bool
  option: <text>";
- integers: std::stoi (``integer``, 32 bits), std::stoll (``integer64``), std::stoull
  (``unsigned64``): leading blanks and a sign are taken, and so is anything after the
  digits ("7s" is 7, "2.5" is 2, "0x10" is 0); no digit is "Invalid option value. Got
  <text>", too large "Provided option value is out of bound. Got <text>";
- floats: std::stod (decimal, hexadecimal, inf and nan, then anything after them);
- pairs ``<first><delim><second>`` of those;
- ``int_at_least``: infercore's own integer flags, read as ``integer``, with bounds.

Each raises ``argparse.ArgumentTypeError`` with tritonserver's words, which the command
line reports as 'Bad option: "--flag".' and that text.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from typing import TypeVar

from ..trace_settings import stoi

__all__ = ["boolean", "int_at_least", "int_bool", "integer", "integer64", "number", "pair",
           "unsigned64"]

T = TypeVar("T")
U = TypeVar("U")

# what C's isspace() skips before a number
_BLANKS = " \t\n\v\f\r"
_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_HEXADECIMAL = re.compile(r"([+-]?)0[xX]((?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)"
                          r"(?:[pP][+-]?[0-9]+)?)")
_SPECIAL = re.compile(r"[+-]?(?:inf(?:inity)?|nan(?:\([0-9A-Za-z_]*\))?)", re.IGNORECASE)


def _invalid(text: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"Invalid option value. Got {text}")


def _out_of_bound(text: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"Provided option value is out of bound. Got {text}")


def boolean(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "on", "1"):
        return True
    if lowered in ("false", "off", "0"):
        return False
    raise argparse.ArgumentTypeError(f"invalid value for bool option: {text}")


def _leading_integer(text: str) -> int:
    """The digits std::stoll / std::stoull read, whatever their size."""
    match = _INTEGER.match(text.lstrip(_BLANKS))
    if match is None:
        raise _invalid(text)
    return int(match.group())


def integer(text: str) -> int:
    """std::stoi (trace_settings.stoi, the one reading of it)."""
    try:
        return stoi(text)
    except ValueError:
        raise _invalid(text) from None
    except OverflowError:
        raise _out_of_bound(text) from None


def integer64(text: str) -> int:
    """std::stoll."""
    value = _leading_integer(text)
    if not -(1 << 63) <= value < 1 << 63:
        raise _out_of_bound(text)
    return value


def unsigned64(text: str) -> int:
    """std::stoull: a minus sign is taken, and wraps the value around 2**64 as strtoull."""
    value = _leading_integer(text)
    if abs(value) >= 1 << 64:
        raise _out_of_bound(text)
    return value % (1 << 64)


def number(text: str) -> float:
    """std::stod: the longest number at the start of ``text``; inf and nan are numbers."""
    stripped = text.lstrip(_BLANKS)
    special = _SPECIAL.match(stripped)
    if special is not None:
        return float(special.group().split("(")[0])
    hexadecimal = _HEXADECIMAL.match(stripped)
    decimal = _DECIMAL.match(stripped)
    try:
        if hexadecimal is not None:
            sign, digits = hexadecimal.groups()
            exponent = "" if "p" in digits.lower() else "p0"
            value = float.fromhex(f"{sign}0x{digits}{exponent}")
        elif decimal is not None:
            value = float(decimal.group())
        else:
            raise _invalid(text)
    except OverflowError:
        raise _out_of_bound(text) from None
    if math.isinf(value):  # a finite number too large for a double: strtod's ERANGE
        raise _out_of_bound(text)
    return value


def int_bool(text: str) -> int:
    """--log-verbose: an integer, or true/false for 1/0."""
    lowered = text.lower()
    if lowered == "true":
        return 1
    if lowered == "false":
        return 0
    return integer(text)


def pair(first: Callable[[str], T], second: Callable[[str], U],
         delimiter: str = ":") -> Callable[[str], tuple[T, U]]:
    """``<first><delimiter><second>``, split at the first delimiter."""

    def parse(text: str) -> tuple[T, U]:
        head, found, tail = text.partition(delimiter)
        if not found:
            raise argparse.ArgumentTypeError(
                "Cannot parse pair option due to incorrect number of inputs.--<pair option> "
                f"argument requires format <first>{delimiter}<second>. Found: {text}")
        return first(head), second(tail)
    return parse


def int_at_least(minimum: int, at_most: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = integer(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        if at_most is not None and value > at_most:
            raise argparse.ArgumentTypeError(f"must be <= {at_most}, got {value}")
        return value
    return parse
