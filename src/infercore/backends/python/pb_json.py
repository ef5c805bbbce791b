"""``request.parameters()`` as Triton's Python backend writes it: the JSON text of TritonJson
(rapidjson's ``Writer``), so a model that compares or hashes the text sees Triton's bytes.

rapidjson writes compactly (no spaces), keeps non-ASCII characters as UTF-8, escapes
control characters as ``\\u00XX`` in upper-case hex (``\\b \\f \\n \\r \\t`` by name), and
writes doubles with its Grisu2 digits and ``Prettify`` layout: ``2.0``, ``0.001``,
``1e-7``, ``1.5e300``, ``18446744073709553000.0`` (an integer part of up to 21 digits is
written out). Python's ``repr`` lays digits out otherwise (``1e-07``, ``1.5e+300``), and
its digits are the closest shortest ones, where Grisu2's last digit may differ.

Pure functions: any thread.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping

from ...request import ParameterValue

__all__ = ["triton_json"]

_ESCAPES = {code: f"\\u{code:04X}" for code in range(0x20)}
_ESCAPES.update(
    {
        ord('"'): '\\"',
        ord("\\"): "\\\\",
        0x08: "\\b",
        0x0C: "\\f",
        0x0A: "\\n",
        0x0D: "\\r",
        0x09: "\\t",
    }
)


def triton_json(parameters: Mapping[str, ParameterValue]) -> str:
    """The parameters as one JSON object, in their order, written as rapidjson writes it."""
    return (
        "{" + ",".join(f"{_string(key)}:{_value(value)}" for key, value in parameters.items()) + "}"
    )


def _string(text: str) -> str:
    return '"' + text.translate(_ESCAPES) + '"'


def _value(value: ParameterValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _double(value)
    return _string(value)


def _double(value: float) -> str:
    """rapidjson's Writer::WriteDouble: its dtoa (Grisu2) and Prettify."""
    if math.isnan(value):
        # TritonJson's writer takes NaN and infinities (rapidjson's kWriteNanAndInfFlag);
        # the generate endpoint passes them on from a body that has them
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0.0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    digits, k = _grisu2(abs(value))
    length = len(digits)
    point = length + k  # 10^(point-1) <= value < 10^point
    if 0 <= k and point <= 21:
        text = digits + "0" * k + ".0"
    elif 0 < point <= 21:
        text = digits[:point] + "." + digits[point:]
    elif -6 < point <= 0:
        text = "0." + "0" * -point + digits
    elif length == 1:
        text = digits + "e" + str(point - 1)
    else:
        text = digits[0] + "." + digits[1:] + "e" + str(point - 1)
    return sign + text


# -- Grisu2, as rapidjson's internal/dtoa.h has it (its digits are not always the shortest
# or closest that round-trip, so Python's repr cannot stand in for it) ----------------------
_MASK = (1 << 64) - 1
_HIDDEN = 1 << 52


def _multiply(f1: int, e1: int, f2: int, e2: int) -> tuple[int, int]:
    """DiyFp's product: the high 64 bits of the 128-bit product, rounded half up."""
    return (f1 * f2 + (1 << 63)) >> 64, e1 + e2 + 64


def _cached_power(e: int) -> tuple[int, int, int]:
    """GetCachedPower: (f, e) of 10^-K from rapidjson's table (10^-348 .. 10^340 by 8,
    each rounded to a 64-bit significand), and K."""
    dk = (-61 - e) * 0.30102999566398114 + 347
    k = int(dk)
    if dk - k > 0.0:
        k += 1
    index = (k >> 3) + 1
    decimal = -348 + index * 8
    # 10^decimal = f * 2^binary with 2^63 <= f < 2^64, f rounded to nearest
    num, den = (10**decimal, 1) if decimal >= 0 else (1, 10**-decimal)
    binary = num.bit_length() - den.bit_length() - 64
    while True:
        scaled_num, scaled_den = (num, den << binary) if binary >= 0 else (num << -binary, den)
        f = (2 * scaled_num + scaled_den) // (2 * scaled_den)
        if f >= 1 << 64:
            binary += 1
        elif f < 1 << 63:
            binary -= 1
        else:
            return f, binary, -decimal


def _grisu2(value: float) -> tuple[str, int]:
    """Grisu2 of a positive finite double: its digits and K (value ~ digits * 10^K)."""
    bits = struct.unpack("<Q", struct.pack("<d", value))[0]
    biased = (bits >> 52) & 0x7FF
    significand = bits & (_HIDDEN - 1)
    if biased:
        f, e = significand + _HIDDEN, biased - 1075
    else:
        f, e = significand, -1074
    # NormalizedBoundaries
    plus_f, plus_e = (f << 1) + 1, e - 1
    while not plus_f & (_HIDDEN << 1):
        plus_f, plus_e = plus_f << 1, plus_e - 1
    plus_f, plus_e = plus_f << 10, plus_e - 10
    minus_f, minus_e = ((f << 2) - 1, e - 2) if f == _HIDDEN else ((f << 1) - 1, e - 1)
    minus_f <<= minus_e - plus_e
    # Normalize
    shift = 64 - f.bit_length()
    w_f, w_e = f << shift, e - shift
    c_f, c_e, K = _cached_power(plus_e)
    w_f, w_e = _multiply(w_f, w_e, c_f, c_e)
    wp_f, wp_e = _multiply(plus_f, plus_e, c_f, c_e)
    wm_f, _ = _multiply(minus_f, plus_e, c_f, c_e)
    wm_f += 1
    wp_f -= 1
    digits, K = _digit_gen(w_f, wp_f, wp_e, wp_f - wm_f, K)
    return digits, K


def _digit_gen(w_f: int, mp_f: int, mp_e: int, delta: int, K: int) -> tuple[str, int]:
    one_shift = -mp_e
    one_f = 1 << one_shift
    wp_w = mp_f - w_f
    p1 = mp_f >> one_shift
    p2 = mp_f & (one_f - 1)
    kappa = len(str(p1)) if p1 < 10**8 else 9  # CountDecimalDigit32 stops at 9
    buffer: list[int] = []
    while kappa > 0:
        divisor = 10 ** (kappa - 1)
        d, p1 = divmod(p1, divisor)
        if d or buffer:
            buffer.append(d)
        kappa -= 1
        rest = (p1 << one_shift) + p2
        if rest <= delta:
            _round(buffer, delta, rest, ((10**kappa) << one_shift) & _MASK, wp_w)
            return "".join(map(str, buffer)), K + kappa
    while True:
        p2 = (p2 * 10) & _MASK
        delta = (delta * 10) & _MASK
        d = p2 >> one_shift
        if d or buffer:
            buffer.append(d)
        p2 &= one_f - 1
        kappa -= 1
        if p2 < delta:
            index = -kappa
            scale = 10**index if index < 20 else 0
            _round(buffer, delta, p2, one_f, (wp_w * scale) & _MASK)
            return "".join(map(str, buffer)), K + kappa


def _round(buffer: list[int], delta: int, rest: int, ten_kappa: int, wp_w: int) -> None:
    """GrisuRound: move the last digit down while that stays closer to the value."""
    while (
        rest < wp_w
        and delta - rest >= ten_kappa
        and (rest + ten_kappa < wp_w or wp_w - rest > rest + ten_kappa - wp_w)
    ):
        buffer[-1] -= 1
        rest += ten_kappa
