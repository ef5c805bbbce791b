"""A request body read as Triton's JSON reader (TritonJson over rapidjson) reads it.

What differs from a plain ``json.loads`` and matters to clients:

- Objects keep every member in document order, duplicates included (``JsonObject``):
  Triton walks an object's members one by one but looks each value up by name, so a
  duplicated key is visited twice with its first value.
- ``NaN``, ``Inf`` and ``Infinity`` are numbers (rapidjson's kParseNanAndInfFlag); an
  integer beyond 64 bits is a double; a number too large for a double is refused.
- Strings are bytes: they need not be valid UTF-8 (rapidjson does not check), and come
  back decoded with ``surrogateescape`` so that ``utf8(text)`` restores the exact bytes.
- A body that does not parse is refused with rapidjson's message and byte offset, as
  Triton words it: ``failed to parse the request JSON buffer: Invalid value. at 15``.
  A NUL byte ends the body, as it ends rapidjson's input stream.

The C scanner of the ``json`` module reads well-formed bodies; only when it refuses one
does ``_Reader``, a byte-by-byte transcription of rapidjson's reader, say what rapidjson
makes of it (a value after all, or which error at which offset). Runs on the caller's
thread; nothing here is shared.

The ``as_*`` / ``member_*`` accessors read one field of a parsed document as TritonJson's
accessors do, failing with their INTERNAL errors ("attempt to access JSON non-<kind> as
<kind>", prefixed by what was being read: "Unable to parse 'shape': ..."); they take
plain dicts (``plain``), the form the infer endpoint's decoder reads.
"""

from __future__ import annotations

import json
import math
import re
import struct
from typing import Any

from ...errors import InternalError

__all__ = ["JsonObject", "as_bool", "as_double", "as_int", "as_string", "as_uint", "is_int64",
           "is_uint64", "json_double", "json_string", "member_as_array", "member_as_string",
           "members", "parse_json", "plain", "utf8"]

_INT64_MIN = -(1 << 63)
_UINT64_MAX = (1 << 64) - 1
_WHITESPACE = b" \n\r\t"
_BOM = b"\xef\xbb\xbf"
_ESCAPES = {ord('"'): '"', ord("\\"): "\\", ord("/"): "/", ord("b"): "\b",
            ord("f"): "\f", ord("n"): "\n", ord("r"): "\r", ord("t"): "\t"}
_HEX = frozenset(b"0123456789abcdefABCDEF")
_DIGITS = frozenset(b"0123456789")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")

# rapidjson's GetParseError_En texts
_EMPTY = "The document is empty."
_NOT_SINGULAR = "The document root must not be followed by other values."
_INVALID = "Invalid value."
_MISS_NAME = "Missing a name for object member."
_MISS_COLON = "Missing a colon after a name of object member."
_MISS_COMMA_CURLY = "Missing a comma or '}' after an object member."
_MISS_COMMA_SQUARE = "Missing a comma or ']' after an array element."
_BAD_HEX = "Incorrect hex digit after \\u escape in string."
_BAD_SURROGATE = "The surrogate pair in string is invalid."
_BAD_ESCAPE = "Invalid escape character in string."
_MISS_QUOTE = "Missing a closing quotation mark in string."
_TOO_BIG = "Number too big to be stored in double."
_MISS_FRACTION = "Miss fraction part in number."
_MISS_EXPONENT = "Miss exponent in number."


class JsonObject:
    """A JSON object: its (name, value) members in document order, duplicates kept."""

    __slots__ = ("members",)

    def __init__(self, members: list[tuple[str, Any]]) -> None:
        self.members = members

    def first(self, name: str, default: Any = None) -> Any:
        """The value of the first member called ``name`` (what rapidjson's Find gives)."""
        for key, value in self.members:
            if key == name:
                return value
        return default

    def __repr__(self) -> str:
        return f"JsonObject({self.members!r})"


def utf8(text: str) -> bytes:
    """The bytes a JSON string of the request held."""
    return text.encode("utf-8", "surrogateescape")


class _ParseError(Exception):
    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message, offset)
        self.message = message
        self.offset = offset


class _Refer(Exception):
    """The fast reader met something only rapidjson's rules decide."""


def parse_json(body: bytes) -> Any:
    """The document in ``body``; InternalError with Triton's text when it does not parse
    (TritonJson reports parse errors as INTERNAL). A NUL byte ends the input, as it ends
    rapidjson's memory stream (a binary body sent without its header length parses)."""
    end = body.find(b"\0")
    if end >= 0:
        body = body[:end]
    try:
        if body.startswith(b"\xef") or _SURROGATE_ESCAPE.search(body):
            raise _Refer  # a BOM is skipped; surrogates are rapidjson's to judge
        return json.loads(body.decode("utf-8", "surrogateescape"),
                          object_pairs_hook=JsonObject, parse_int=_integer,
                          parse_float=_double)
    except (ValueError, _Refer):
        pass
    except RecursionError:
        raise InternalError(
            "failed to parse the request JSON buffer: the document nests too deeply") from None
    try:
        return _Reader(body).document()
    except _ParseError as exc:
        raise InternalError(f"failed to parse the request JSON buffer: {exc.message} at "
                            f"{exc.offset}") from None
    except RecursionError:
        raise InternalError(
            "failed to parse the request JSON buffer: the document nests too deeply") from None


def _integer(text: str) -> int | float:
    value = int(text)
    if _INT64_MIN <= value <= _UINT64_MAX:
        return value
    raise _Refer  # rapidjson: a double, or too big for one


def _double(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _Refer  # rapidjson may refuse the exponent
    return value


def _big_integer(text: bytes, offset: int) -> float:
    """An integer past 64 bits as rapidjson reads it: the digits that fit in 64 bits,
    then each further digit in double arithmetic (so not always the nearest double)."""
    minus = text.startswith(b"-")
    digits = text[1:] if minus else text
    limit = (1 << 63) if minus else _UINT64_MAX
    value, index = 0, 0
    while index < len(digits) and value * 10 + digits[index] - 48 <= limit:
        value = value * 10 + digits[index] - 48
        index += 1
    number = float(value)
    for char in digits[index:]:
        if number >= 1.7976931348623157e307:
            raise _ParseError(_TOO_BIG, offset)
        number = number * 10.0 + (char - 48)
    return -number if minus else number


class _Reader:
    """rapidjson's GenericReader with kParseNanAndInfFlag, over the body's bytes."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0
        for char in _BOM:  # EncodedInputStream<UTF8> takes a BOM's bytes while they match
            if not self.consume(char):
                break

    def peek(self) -> int:
        return self.data[self.pos] if self.pos < len(self.data) else 0

    def consume(self, char: int) -> bool:
        if self.peek() == char and self.pos < len(self.data):
            self.pos += 1
            return True
        return False

    def skip_whitespace(self) -> None:
        data, pos = self.data, self.pos
        while pos < len(data) and data[pos] in _WHITESPACE:
            pos += 1
        self.pos = pos

    def document(self) -> Any:
        self.skip_whitespace()
        if self.pos >= len(self.data):
            raise _ParseError(_EMPTY, self.pos)
        value = self.value()
        self.skip_whitespace()
        if self.pos < len(self.data):
            raise _ParseError(_NOT_SINGULAR, self.pos)
        return value

    def value(self) -> Any:
        char = self.peek()
        if char == ord("n"):
            return self.literal(b"null", None)
        if char == ord("t"):
            return self.literal(b"true", True)
        if char == ord("f"):
            return self.literal(b"false", False)
        if char == ord('"'):
            return self.string()
        if char == ord("{"):
            return self.object()
        if char == ord("["):
            return self.array()
        return self.number()

    def literal(self, word: bytes, value: Any) -> Any:
        self.pos += 1
        for char in word[1:]:
            if not self.consume(char):
                raise _ParseError(_INVALID, self.pos)
        return value

    def object(self) -> JsonObject:
        self.pos += 1
        members: list[tuple[str, Any]] = []
        self.skip_whitespace()
        if self.consume(ord("}")):
            return JsonObject(members)
        while True:
            if self.peek() != ord('"'):
                raise _ParseError(_MISS_NAME, self.pos)
            name = self.string()
            self.skip_whitespace()
            if not self.consume(ord(":")):
                raise _ParseError(_MISS_COLON, self.pos)
            self.skip_whitespace()
            members.append((name, self.value()))
            self.skip_whitespace()
            if self.consume(ord(",")):
                self.skip_whitespace()
            elif self.consume(ord("}")):
                return JsonObject(members)
            else:
                raise _ParseError(_MISS_COMMA_CURLY, self.pos)

    def array(self) -> list[Any]:
        self.pos += 1
        items: list[Any] = []
        self.skip_whitespace()
        if self.consume(ord("]")):
            return items
        while True:
            items.append(self.value())
            self.skip_whitespace()
            if self.consume(ord(",")):
                self.skip_whitespace()
            elif self.consume(ord("]")):
                return items
            else:
                raise _ParseError(_MISS_COMMA_SQUARE, self.pos)

    def string(self) -> str:
        self.pos += 1
        out = bytearray()
        data = self.data
        while True:
            char = self.peek()
            if char == ord("\\"):
                escape = self.pos
                self.pos += 1
                kind = self.peek()
                if kind in _ESCAPES and self.pos < len(data):
                    self.pos += 1
                    out += _ESCAPES[kind].encode()
                elif kind == ord("u"):
                    self.pos += 1
                    code = self.hex4(escape)
                    if 0xD800 <= code <= 0xDBFF:  # a high surrogate needs its low half
                        if not (self.consume(ord("\\")) and self.consume(ord("u"))):
                            raise _ParseError(_BAD_SURROGATE, escape)
                        low = self.hex4(escape)
                        if not 0xDC00 <= low <= 0xDFFF:
                            raise _ParseError(_BAD_SURROGATE, escape)
                        code = (((code - 0xD800) << 10) | (low - 0xDC00)) + 0x10000
                    out += chr(code).encode("utf-8", "surrogatepass")
                else:
                    raise _ParseError(_BAD_ESCAPE, escape)
            elif char == ord('"') and self.pos < len(data):
                self.pos += 1
                return out.decode("utf-8", "surrogateescape")
            elif char < 0x20:
                if char == 0:
                    raise _ParseError(_MISS_QUOTE, self.pos)
                raise _ParseError(_BAD_ESCAPE, self.pos)  # rapidjson 1.1's code for it
            else:
                out.append(char)
                self.pos += 1

    def hex4(self, escape: int) -> int:
        code = 0
        for _ in range(4):
            char = self.peek()
            if char not in _HEX or self.pos >= len(self.data):
                raise _ParseError(_BAD_HEX, escape)
            code = code * 16 + int(chr(char), 16)
            self.pos += 1
        return code

    def digits(self) -> None:
        while self.peek() in _DIGITS and self.pos < len(self.data):
            self.pos += 1

    def number(self) -> int | float:
        start = self.pos
        minus = self.consume(ord("-"))
        char = self.peek()
        if char == ord("0"):
            self.pos += 1
        elif ord("1") <= char <= ord("9"):
            self.digits()
        elif char in (ord("N"), ord("I")):
            return self.nan_or_inf(minus)
        else:
            raise _ParseError(_INVALID, self.pos)
        integer = self.data[start:self.pos]
        fraction_digits = 0
        is_double = False
        if self.consume(ord(".")):
            if self.peek() not in _DIGITS or self.pos >= len(self.data):
                raise _ParseError(_MISS_FRACTION, self.pos)
            begin = self.pos
            self.digits()
            fraction_digits = self.pos - begin
            is_double = True
        if self.consume(ord("e")) or self.consume(ord("E")):
            exponent_minus = False
            if not self.consume(ord("+")):
                exponent_minus = self.consume(ord("-"))
            if self.peek() not in _DIGITS or self.pos >= len(self.data):
                raise _ParseError(_MISS_EXPONENT, self.pos)
            begin = self.pos
            self.digits()
            # rapidjson stops at an exponent past what a double holds
            if not exponent_minus and int(self.data[begin:self.pos]) > 308 + fraction_digits:
                raise _ParseError(_TOO_BIG, start)
            is_double = True
        if not is_double:
            value = int(integer)
            if _INT64_MIN <= value <= _UINT64_MAX:
                return value
            return _big_integer(integer, start)
        return float(self.data[start:self.pos].decode())

    def nan_or_inf(self, minus: bool) -> float:
        if self.consume(ord("N")):
            if self.consume(ord("a")) and self.consume(ord("N")):
                return math.nan
            raise _ParseError(_INVALID, self.pos)
        self.pos += 1  # "I"
        if not (self.consume(ord("n")) and self.consume(ord("f"))):
            raise _ParseError(_INVALID, self.pos)
        if self.peek() == ord("i"):
            for char in b"inity":
                if not self.consume(char):
                    raise _ParseError(_INVALID, self.pos)
        return -math.inf if minus else math.inf


# -- writing: numbers and strings as rapidjson's Writer puts them ----------------------------

def _cached_power(k: int) -> tuple[int, int]:
    """10**k as rapidjson's table holds it: a 64-bit significand (bit 63 set, rounded to
    nearest) and a binary exponent."""
    if k >= 0:
        numerator, denominator = 10 ** k, 1
    else:
        numerator, denominator = 1, 10 ** -k
    exponent = numerator.bit_length() - denominator.bit_length() - 64
    while True:
        scaled_num = numerator << -exponent if exponent < 0 else numerator
        scaled_den = denominator << exponent if exponent > 0 else denominator
        significand = (2 * scaled_num + scaled_den) // (2 * scaled_den)
        if significand >= 1 << 64:
            exponent += 1
        elif significand < 1 << 63:
            exponent -= 1
        else:
            return significand, exponent


# rapidjson's kCachedPowers: 10^-348, 10^-340, ..., 10^340
_CACHED_POWERS = [_cached_power(-348 + 8 * index) for index in range(87)]
_MASK64 = (1 << 64) - 1
_POW10 = [10 ** i for i in range(10)]


def _multiply(f1: int, e1: int, f2: int, e2: int) -> tuple[int, int]:
    product = f1 * f2
    high = product >> 64
    if product & (1 << 63):  # rounds half up, as DiyFp's operator*
        high += 1
    return high, e1 + e2 + 64


def _round_last(digits: list[int], delta: int, rest: int, ten_kappa: int, wp_w: int) -> None:
    while (rest < wp_w and delta - rest >= ten_kappa
           and (rest + ten_kappa < wp_w or wp_w - rest > rest + ten_kappa - wp_w)):
        digits[-1] -= 1
        rest += ten_kappa


def _grisu2(value: float) -> tuple[list[int], int]:
    """rapidjson's Grisu2 (not always the shortest digits, which is why it is copied):
    the digits of a positive finite ``value`` and the decimal exponent of the last."""
    bits = int.from_bytes(struct.pack(">d", value), "big")
    biased = (bits >> 52) & 0x7FF
    fraction = bits & ((1 << 52) - 1)
    if biased:
        f, e = fraction + (1 << 52), biased - 1075
    else:
        f, e = fraction, -1074
    # the boundaries m+ and m-, normalised to m+'s exponent
    plus_f, plus_e = (f << 1) + 1, e - 1
    while not plus_f & (1 << 53):
        plus_f <<= 1
        plus_e -= 1
    plus_f <<= 10
    plus_e -= 10
    if f == 1 << 52:
        minus_f, minus_e = (f << 2) - 1, e - 2
    else:
        minus_f, minus_e = (f << 1) - 1, e - 1
    minus_f <<= minus_e - plus_e
    # v normalised
    shift = 64 - f.bit_length()
    w_f, w_e = f << shift, e - shift
    dk = (-61 - plus_e) * 0.30102999566398114 + 347
    k = int(dk)
    if dk - k > 0.0:
        k += 1
    index = (k >> 3) + 1
    exponent10 = -(-348 + (index << 3))
    c_f, c_e = _CACHED_POWERS[index]
    big_w_f, _ = _multiply(w_f, w_e, c_f, c_e)
    wp_f, wp_e = _multiply(plus_f, plus_e, c_f, c_e)
    wm_f, _ = _multiply(minus_f, plus_e, c_f, c_e)
    wm_f += 1
    wp_f -= 1
    delta = wp_f - wm_f
    # DigitGen
    one_shift = -wp_e
    one_f = 1 << one_shift
    wp_w = wp_f - big_w_f
    p1 = wp_f >> one_shift
    p2 = wp_f & (one_f - 1)
    kappa = len(str(p1)) if p1 else 1
    digits: list[int] = []
    while kappa > 0:
        divisor = _POW10[kappa - 1]
        d, p1 = divmod(p1, divisor)
        if d or digits:
            digits.append(d)
        kappa -= 1
        rest = (p1 << one_shift) + p2
        if rest <= delta:
            exponent10 += kappa
            _round_last(digits, delta, rest, _POW10[kappa] << one_shift, wp_w)
            return digits, exponent10
    while True:
        p2 = (p2 * 10) & _MASK64
        delta = (delta * 10) & _MASK64
        d = p2 >> one_shift
        if d or digits:
            digits.append(d)
        p2 &= one_f - 1
        kappa -= 1
        if p2 < delta:
            exponent10 += kappa
            scale = _POW10[-kappa] if -kappa < 9 else 0
            _round_last(digits, delta, p2, one_f, (wp_w * scale) & _MASK64)
            return digits, exponent10


def _exponent(k: int) -> str:
    return str(k)  # rapidjson: "-" then the digits, no "+" and no padding


def json_double(value: float) -> str:
    """``value`` as rapidjson's Writer writes a double (kWriteNanAndInfFlag)."""
    if value != value:
        return "NaN"
    if math.isinf(value):
        return "-Infinity" if value < 0 else "Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    digits, k = _grisu2(abs(value))
    text = "".join(map(str, digits))
    length = len(text)
    kk = length + k  # 10^(kk-1) <= v < 10^kk
    if 0 <= k and kk <= 21:
        return f"{sign}{text}{'0' * k}.0"
    if 0 < kk <= 21:
        return f"{sign}{text[:kk]}.{text[kk:]}"
    if -6 < kk <= 0:
        return f"{sign}0.{'0' * -kk}{text}"
    if length == 1:
        return f"{sign}{text}e{_exponent(kk - 1)}"
    return f"{sign}{text[0]}.{text[1:]}e{_exponent(kk - 1)}"


_SHORT_ESCAPES = {0x08: b"\\b", 0x09: b"\\t", 0x0A: b"\\n", 0x0C: b"\\f", 0x0D: b"\\r",
                  0x22: b'\\"', 0x5C: b"\\\\"}
_ESCAPED = [_SHORT_ESCAPES.get(c, b"\\u%04X" % c if c < 0x20 else bytes([c]))
            for c in range(256)]


def json_string(data: bytes) -> bytes:
    """``data`` as rapidjson's Writer writes a string: quoted, control characters escaped
    (upper-case hex), every other byte as it is, valid UTF-8 or not."""
    return b'"' + b"".join(_ESCAPED[c] for c in data) + b'"'


# -- TritonJson's accessors, over plain values ------------------------------------------------
_NOT_STRING = "attempt to access JSON non-string as string"
_NOT_BOOL = "attempt to access JSON non-boolean as boolean"
_NOT_INT = "attempt to access JSON non-signed-integer as signed-integer"
_NOT_UINT = "attempt to access JSON non-unsigned-integer as unsigned-integer"
_NOT_NUMBER = "attempt to access JSON non-number as double"
_NOT_ARRAY = "attempt to access JSON non-array as array"


def plain(value: Any) -> Any:
    """``value`` with each JsonObject a dict of its first members (rapidjson's Find)."""
    if isinstance(value, JsonObject):
        out: dict[str, Any] = {}
        for key, item in value.members:
            if key not in out:
                out[key] = plain(item)
        return out
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def _failed(context: str, message: str) -> InternalError:
    return InternalError(f"{context}: {message}")


def is_int64(value: object) -> bool:
    return type(value) is int and _INT64_MIN <= value < -_INT64_MIN


def is_uint64(value: object) -> bool:
    return type(value) is int and 0 <= value <= _UINT64_MAX


def as_string(value: object, context: str) -> str:
    if not isinstance(value, str):
        raise _failed(context, _NOT_STRING)
    return value


def as_bool(value: object, context: str) -> bool:
    if not isinstance(value, bool):
        raise _failed(context, _NOT_BOOL)
    return value


def as_int(value: object, context: str) -> int:
    if not is_int64(value):
        raise _failed(context, _NOT_INT)
    return value  # type: ignore[return-value]


def as_uint(value: object, context: str) -> int:
    if not is_uint64(value):
        raise _failed(context, _NOT_UINT)
    return value  # type: ignore[return-value]


def as_double(value: object, context: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _failed(context, _NOT_NUMBER)
    return float(value)


def _member(document: object, key: str, context: str) -> Any:
    if not isinstance(document, dict) or key not in document:
        raise _failed(context, f"attempt to access non-existing object member '{key}'")
    return document[key]


def member_as_array(document: object, key: str, context: str) -> list[Any]:
    value = _member(document, key, context)
    if not isinstance(value, list):
        raise _failed(context, _NOT_ARRAY)
    return value


def member_as_string(document: object, key: str, context: str) -> str:
    return as_string(_member(document, key, context), context)


def members(document: object, context: str) -> list[str]:
    if not isinstance(document, dict):
        raise _failed(context, "attempt to get members for non-object")
    return list(document)
