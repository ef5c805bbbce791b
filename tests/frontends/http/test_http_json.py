"""Request bodies read as Triton's TritonJson (rapidjson) reads them, and numbers and
strings written as its Writer writes them; texts as recorded from Triton 2.51 in
tests/conformance/golden/generate_bodies.json."""

from __future__ import annotations

import math
import random
import struct

import pytest

from infercore import InternalError
from infercore.frontends.http.json import (
    JsonObject,
    as_bool,
    as_double,
    as_int,
    as_uint,
    json_double,
    json_string,
    member_as_array,
    parse_json,
    plain,
)


@pytest.mark.parametrize("body, message", [
    (b"", "The document is empty. at 0"),
    (b" \n\t ", "The document is empty. at 4"),
    (b'{"text_input": ', "Invalid value. at 15"),
    (b'{"text_input": "a"} x', "The document root must not be followed by other values. at 20"),
    (b"{", "Missing a name for object member. at 1"),
    (b'{"text_input" "a"}', "Missing a colon after a name of object member. at 14"),
    (b'{"text_input": ["a" "b"]}', "Missing a comma or ']' after an array element. at 20"),
    (b'{"text_input": "a\\x"}', "Invalid escape character in string. at 17"),
    (b'{"text_input": "a\x01b"}', "Invalid escape character in string. at 17"),
    (b'{"text_input": "\\ud800x"}', "The surrogate pair in string is invalid. at 16"),
    (b'{"text_input": "abc', "Missing a closing quotation mark in string. at 19"),
    (b'{"text_input": "a", "t": 1e400}', "Number too big to be stored in double. at 25"),
    (b'{"text_input": "a", "t": 1.}', "Miss fraction part in number. at 27"),
])
def test_a_body_that_does_not_parse_gets_rapidjsons_text_and_offset(body, message):
    with pytest.raises(InternalError) as raised:
        parse_json(body)
    assert raised.value.message == f"failed to parse the request JSON buffer: {message}"


def test_objects_keep_duplicates_and_first_finds_the_first():
    document = parse_json(b'{"a": 1, "b": {"c": [true]}, "a": 2}')
    assert isinstance(document, JsonObject)
    assert [key for key, _ in document.members] == ["a", "b", "a"]
    assert document.first("a") == 1
    assert document.first("b").first("c") == [True]


def test_what_rapidjson_reads_that_json_loads_does_not():
    document = parse_json(b'\xef\xbb\xbf{"t": Inf, "u": -NaN, "s": "\xff", '
                          b'"big": 1000000000000000000000000000000}')
    assert document.first("t") == math.inf and math.isnan(document.first("u"))
    assert document.first("s").encode("utf-8", "surrogateescape") == b"\xff"
    assert document.first("big") == 9.999999999999999e29  # rapidjson's digit-by-digit sum


@pytest.mark.parametrize("value, text", [
    (0.1, "0.1"), (1e21, "1e21"), (1e-7, "1e-7"), (123.0, "123.0"), (1e20,
     "100000000000000000000.0"), (0.000001, "0.000001"), (-2.25, "-2.25"), (0.0, "0.0"),
    (3.0000000054977558e38, "3.0000000054977559e38"),  # Grisu2, not the shortest digits
    (math.nan, "NaN"), (-math.inf, "-Infinity"),
])
def test_doubles_are_written_as_rapidjson_writes_them(value, text):
    assert json_double(value) == text


def test_written_doubles_read_back_to_the_same_value():
    rng = random.Random(7)
    for _ in range(2000):
        value = struct.unpack(">d", rng.getrandbits(64).to_bytes(8, "big"))[0]
        if math.isfinite(value):
            assert float(json_double(value)) == value


def test_strings_are_written_byte_for_byte_with_control_characters_escaped():
    assert json_string(b'a"\\\n\x1f\xff') == b'"a\\"\\\\\\n\\u001F\xff"'


def test_a_nul_byte_ends_the_body_as_it_ends_rapidjsons_stream():
    document = parse_json(b'{"a": [1]}\0\x01binary')
    assert isinstance(document, JsonObject) and document.first("a") == [1]
    with pytest.raises(InternalError, match="Missing a closing quotation mark in string. at 8"):
        parse_json(b'{"a": "x\0y"}')


def test_the_accessors_fail_as_tritonjsons_do():
    assert plain(parse_json(b'{"a": 1, "a": 2, "b": [{"c": 3}]}')) == {"a": 1,
                                                                         "b": [{"c": 3}]}
    with pytest.raises(InternalError, match="^Unable to parse 'x': attempt to access JSON "
                                            "non-unsigned-integer as unsigned-integer$"):
        as_uint(-1, "Unable to parse 'x'")
    with pytest.raises(InternalError, match="attempt to access JSON non-signed-integer"):
        as_int(1 << 63, "x")
    with pytest.raises(InternalError, match="attempt to access JSON non-boolean as boolean"):
        as_bool(1, "x")
    with pytest.raises(InternalError, match="attempt to access JSON non-number as double"):
        as_double(True, "x")
    with pytest.raises(InternalError, match="non-existing object member 'shape'"):
        member_as_array({}, "shape", "x")
    with pytest.raises(InternalError, match="attempt to access JSON non-array as array"):
        member_as_array({"shape": 1}, "shape", "x")
