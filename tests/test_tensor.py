"""DataType tables, Tensor construction and conversions, DLPack, BYTES wire form."""

from __future__ import annotations

import struct

import ml_dtypes
import numpy as np
import pytest

from infercore.errors import InvalidArgumentError, UnsupportedError
from infercore.tensor import (
    DataType,
    MemoryType,
    Tensor,
    deserialize_bytes_tensor,
    serialize_bytes_tensor,
)

NUMERIC = [
    (DataType.BOOL, np.bool_, 1),
    (DataType.INT8, np.int8, 1),
    (DataType.INT16, np.int16, 2),
    (DataType.INT32, np.int32, 4),
    (DataType.INT64, np.int64, 8),
    (DataType.UINT8, np.uint8, 1),
    (DataType.UINT16, np.uint16, 2),
    (DataType.UINT32, np.uint32, 4),
    (DataType.UINT64, np.uint64, 8),
    (DataType.FP16, np.float16, 2),
    (DataType.FP32, np.float32, 4),
    (DataType.FP64, np.float64, 8),
    (DataType.BF16, ml_dtypes.bfloat16, 2),
]
NUMERIC_IDS = [dt.value for dt, _, _ in NUMERIC]


def _wire(*items: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


# -- DataType --------------------------------------------------------------------------


@pytest.mark.parametrize(("data_type", "np_type", "itemsize"), NUMERIC, ids=NUMERIC_IDS)
def test_datatype_maps_to_numpy_dtype_and_back(data_type, np_type, itemsize):
    assert data_type.numpy_dtype == np.dtype(np_type)
    assert DataType.from_numpy(np.dtype(np_type)) is data_type
    assert DataType.from_numpy(np_type) is data_type
    assert data_type.byte_size == itemsize


def test_every_datatype_is_covered_by_the_mapping_tests():
    assert {dt for dt, _, _ in NUMERIC} | {DataType.BYTES} == set(DataType)


def test_bytes_datatype_is_an_object_array_of_variable_size():
    assert DataType.BYTES.numpy_dtype == np.dtype(np.object_)
    assert DataType.BYTES.byte_size == 0
    assert DataType.from_numpy(np.dtype(np.object_)) is DataType.BYTES


@pytest.mark.parametrize("dtype", ["S4", "U3", object])
def test_string_like_numpy_dtypes_map_to_bytes(dtype):
    assert DataType.from_numpy(np.dtype(dtype)) is DataType.BYTES


@pytest.mark.parametrize("dtype", [np.complex64, np.dtype("M8[s]"), np.dtype([("a", "i4")])])
def test_numpy_dtype_without_triton_datatype_is_rejected(dtype):
    with pytest.raises(InvalidArgumentError, match="has no Triton datatype"):
        DataType.from_numpy(dtype)


@pytest.mark.parametrize(("data_type", "np_type", "itemsize"), NUMERIC, ids=NUMERIC_IDS)
def test_numeric_config_names_are_type_prefixed_and_round_trip(data_type, np_type, itemsize):
    assert data_type.config_name == "TYPE_" + data_type.value
    assert DataType.from_config(data_type.config_name) is data_type


def test_bytes_config_name_is_type_string():
    assert DataType.BYTES.config_name == "TYPE_STRING"
    assert DataType.from_config("TYPE_STRING") is DataType.BYTES


def test_from_config_rejects_type_bytes_and_unknown_names():
    # model_config.proto has no TYPE_BYTES: the BYTES datatype is TYPE_STRING there.
    for name in ("TYPE_BYTES", "FP32", "TYPE_FP128", ""):
        with pytest.raises(InvalidArgumentError, match=f"unknown data type '{name}'"):
            DataType.from_config(name)


@pytest.mark.parametrize("data_type", list(DataType), ids=[dt.value for dt in DataType])
def test_from_wire_accepts_every_wire_name(data_type):
    assert DataType.from_wire(data_type.value) is data_type


@pytest.mark.parametrize("name", ["fp32", "FLOAT32", "TYPE_FP32", "STRING", ""])
def test_from_wire_rejects_unknown_names_with_invalid_argument(name):
    with pytest.raises(InvalidArgumentError) as info:
        DataType.from_wire(name)
    assert str(info.value) == f"invalid datatype '{name}'"


def test_datatype_str_is_the_wire_name():
    assert str(DataType.FP32) == "FP32"
    assert f"{DataType.BYTES}" == "BYTES"


# -- Tensor.from_object ----------------------------------------------------------------


@pytest.mark.parametrize(("data_type", "np_type", "itemsize"), NUMERIC, ids=NUMERIC_IDS)
def test_from_object_keeps_numpy_array_without_copy(data_type, np_type, itemsize):
    array = np.zeros((2, 3), dtype=np_type)
    tensor = Tensor.from_object(array)
    assert tensor.data_type is data_type
    assert tensor.shape == (2, 3)
    assert tensor.memory_type is MemoryType.CPU
    assert tensor.to_numpy() is array
    assert np.shares_memory(tensor.to_numpy(), array)


def test_from_object_shares_memory_with_a_non_contiguous_view():
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    view = base[:, 1::2]
    tensor = Tensor.from_object(view)
    assert np.shares_memory(tensor.to_numpy(), base)
    view[0, 0] = 99.0
    assert tensor.to_numpy()[0, 0] == 99.0


def test_from_object_with_matching_forced_datatype_accepts_wire_name_string():
    array = np.ones(3, dtype=np.float32)
    tensor = Tensor.from_object(array, "FP32")
    assert tensor.data_type is DataType.FP32
    assert np.shares_memory(tensor.to_numpy(), array)


def test_from_object_rejects_forced_datatype_that_does_not_match_the_array():
    with pytest.raises(InvalidArgumentError) as info:
        Tensor.from_object(np.ones(3, dtype=np.float64), DataType.FP32)
    assert str(info.value) == (
        "numpy dtype 'float64' does not match datatype FP32 (expected 'float32')"
    )


def test_from_object_rejects_unknown_forced_datatype_name():
    with pytest.raises(InvalidArgumentError, match="invalid datatype 'FLOAT'"):
        Tensor.from_object(np.ones(3, dtype=np.float32), "FLOAT")


def test_from_object_returns_an_existing_tensor_unchanged():
    tensor = Tensor.from_object(np.ones(2, dtype=np.int32))
    assert Tensor.from_object(tensor) is tensor


def test_from_object_builds_numeric_tensor_from_nested_lists():
    tensor = Tensor.from_object([[1, 2, 3], [4, 5, 6]])
    assert tensor.data_type is DataType.from_numpy(np.asarray([1]).dtype)
    assert tensor.shape == (2, 3)
    np.testing.assert_array_equal(tensor.to_numpy(), [[1, 2, 3], [4, 5, 6]])


def test_from_object_builds_float_and_bool_tensors_from_lists():
    assert Tensor.from_object([1.5, 2.5]).data_type is DataType.FP64
    assert Tensor.from_object([True, False]).data_type is DataType.BOOL


def test_from_object_builds_a_scalar_tensor():
    tensor = Tensor.from_object(np.float32(2.0))
    assert tensor.data_type is DataType.FP32
    assert tensor.shape == ()


def test_from_object_turns_str_list_into_object_array_of_utf8_bytes():
    tensor = Tensor.from_object(["abc", "héllo", ""])
    assert tensor.data_type is DataType.BYTES
    array = tensor.to_bytes_array()
    assert array.dtype == np.object_
    assert array.tolist() == [b"abc", "héllo".encode(), b""]
    assert all(type(item) is bytes for item in array.flat)


def test_from_object_turns_bytes_list_into_object_array_of_bytes():
    tensor = Tensor.from_object([[b"a", b"bc"], [b"def", b"\xff\xfe"]])
    assert tensor.data_type is DataType.BYTES
    assert tensor.shape == (2, 2)
    array = tensor.to_bytes_array()
    assert array.dtype == np.object_
    assert array.tolist() == [[b"a", b"bc"], [b"def", b"\xff\xfe"]]


def test_from_object_keeps_trailing_nul_bytes_of_bytes_list_elements():
    tensor = Tensor.from_object([b"ab\x00", b"\x00"])
    assert tensor.to_bytes_array().tolist() == [b"ab\x00", b"\x00"]


def test_from_object_keeps_object_array_of_bytes_without_copy():
    array = np.array([b"x\x00y", b""], dtype=np.object_)
    tensor = Tensor.from_object(array)
    assert tensor.to_bytes_array() is array


def test_from_object_converts_object_array_of_str_to_bytes():
    array = np.array(["a", "ü"], dtype=np.object_)
    tensor = Tensor.from_object(array)
    assert tensor.to_bytes_array().tolist() == [b"a", "ü".encode()]
    assert array.tolist() == ["a", "ü"]  # the caller's array is left alone


def test_from_object_converts_numpy_unicode_array_to_bytes_keeping_shape():
    tensor = Tensor.from_object(np.array([["a", "bb"], ["ccc", "d"]]))
    assert tensor.data_type is DataType.BYTES
    assert tensor.shape == (2, 2)
    assert tensor.to_bytes_array().tolist() == [[b"a", b"bb"], [b"ccc", b"d"]]


def test_from_object_with_bytes_datatype_turns_numbers_into_decimal_text():
    tensor = Tensor.from_object(np.array([1, 22, -3], dtype=np.int32), DataType.BYTES)
    assert tensor.to_bytes_array().tolist() == [b"1", b"22", b"-3"]


def test_from_object_makes_bf16_tensor_from_ml_dtypes_array():
    array = np.array([1.0, 2.5], dtype=ml_dtypes.bfloat16)
    tensor = Tensor.from_object(array)
    assert tensor.data_type is DataType.BF16
    assert tensor.size == 4
    assert tensor.to_numpy() is array


# -- DLPack ----------------------------------------------------------------------------


DLPACK_TYPES = [(dt, np_type) for dt, np_type, _ in NUMERIC if dt is not DataType.BF16]


@pytest.mark.parametrize(
    ("data_type", "np_type"), DLPACK_TYPES, ids=[dt.value for dt, _ in DLPACK_TYPES]
)
def test_numpy_from_dlpack_of_tensor_shares_memory(data_type, np_type):
    array = np.arange(6).astype(np_type).reshape(2, 3)
    tensor = Tensor.from_object(array)
    assert tensor.__dlpack_device__() == (1, 0)
    out = np.from_dlpack(tensor)
    assert out.dtype == array.dtype
    assert out.shape == (2, 3)
    assert np.shares_memory(out, array)


def test_tensor_from_dlpack_of_numpy_array_shares_memory():
    array = np.arange(4, dtype=np.int16)
    tensor = Tensor.from_dlpack(array)
    assert tensor.data_type is DataType.INT16
    assert tensor.memory_type is MemoryType.CPU
    assert np.shares_memory(tensor.to_numpy(), array)


class _DLPackOnly:
    """A DLPack producer that is not a numpy array (as torch or jax tensors are)."""

    def __init__(self, array: np.ndarray, device: tuple[int, int] = (1, 0)) -> None:
        self.array = array
        self.device = device

    def __dlpack__(self, *args, **kwargs):
        return self.array.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self.device


def test_from_object_reads_a_foreign_dlpack_producer_without_copy():
    array = np.arange(5, dtype=np.float32)
    tensor = Tensor.from_object(_DLPackOnly(array))
    assert tensor.data_type is DataType.FP32
    assert tensor.memory_type is MemoryType.CPU
    assert np.shares_memory(tensor.to_numpy(), array)


def test_dlpack_round_trip_through_a_second_tensor_shares_memory():
    array = np.arange(8, dtype=np.int64).reshape(2, 4)
    second = Tensor.from_dlpack(Tensor.from_object(array))
    assert second.data_type is DataType.INT64
    assert np.shares_memory(np.from_dlpack(second), array)


def test_from_dlpack_of_cuda_host_memory_is_cpu_pinned():
    array = np.arange(3, dtype=np.float32)
    tensor = Tensor.from_dlpack(_DLPackOnly(array, device=(3, 0)))
    assert tensor.memory_type is MemoryType.CPU_PINNED


def test_from_dlpack_of_gpu_producer_needs_a_datatype():
    producer = _DLPackOnly(np.zeros(2, dtype=np.float32), device=(2, 1))
    with pytest.raises(InvalidArgumentError, match="needs an explicit datatype"):
        Tensor.from_dlpack(producer)


def test_gpu_tensor_keeps_device_and_refuses_to_numpy():
    producer = _DLPackOnly(np.zeros(2, dtype=np.float32), device=(2, 1))
    tensor = Tensor.from_dlpack(producer, DataType.FP32)
    assert tensor.memory_type is MemoryType.GPU
    assert tensor.memory_type_id == 1
    assert tensor.__dlpack_device__() == (2, 1)
    with pytest.raises(UnsupportedError, match="GPU memory"):
        tensor.to_numpy()


def test_from_dlpack_refuses_unknown_device_types():
    producer = _DLPackOnly(np.zeros(2, dtype=np.float32), device=(4, 0))
    with pytest.raises(UnsupportedError, match="DLPack device type 4"):
        Tensor.from_dlpack(producer, DataType.FP32)


def test_bytes_tensor_refuses_dlpack_export():
    tensor = Tensor.from_object([b"a", b"b"])
    with pytest.raises(UnsupportedError, match="BYTES tensors cannot be exported"):
        tensor.__dlpack__()
    with pytest.raises(UnsupportedError):
        np.from_dlpack(tensor)


# -- conversions, shape, size ----------------------------------------------------------


def test_to_bytes_array_refuses_numeric_tensors():
    tensor = Tensor.from_object(np.zeros(2, dtype=np.float32))
    with pytest.raises(InvalidArgumentError) as info:
        tensor.to_bytes_array()
    assert str(info.value) == "to_bytes_array needs a BYTES tensor, this one is FP32"


def test_to_string_array_decodes_utf8_and_keeps_shape():
    tensor = Tensor.from_object(np.array([[b"ab", "é".encode()], [b"", b"z"]], dtype=object))
    strings = tensor.to_string_array()
    assert strings.dtype == np.object_
    assert strings.shape == (2, 2)
    assert strings.tolist() == [["ab", "é"], ["", "z"]]
    assert all(type(item) is str for item in strings.flat)


def test_to_string_array_refuses_numeric_tensors():
    with pytest.raises(InvalidArgumentError):
        Tensor.from_object(np.zeros(1, dtype=np.int8)).to_string_array()


def test_numpy_array_protocol_returns_the_data():
    array = np.arange(3, dtype=np.int32)
    tensor = Tensor.from_object(array)
    assert np.asarray(tensor) is array
    np.testing.assert_array_equal(np.asarray(tensor, dtype=np.float64), [0.0, 1.0, 2.0])


def test_numpy_array_of_tensor_is_a_copy():
    array = np.arange(3, dtype=np.int32)
    copied = np.array(Tensor.from_object(array))  # np.array copies by default
    assert not np.shares_memory(copied, array)


def test_numpy_array_without_copy_shares_the_data():
    array = np.arange(3, dtype=np.int32)
    assert np.array(Tensor.from_object(array), copy=False) is array


def test_reshape_returns_a_view_with_the_same_datatype_and_memory():
    array = np.arange(6, dtype=np.float32)
    tensor = Tensor.from_object(array)
    reshaped = tensor.reshape([2, 3])
    assert reshaped is not tensor
    assert reshaped.shape == (2, 3)
    assert reshaped.data_type is DataType.FP32
    assert reshaped.memory_type is MemoryType.CPU
    assert tensor.shape == (6,)
    assert np.shares_memory(reshaped.to_numpy(), array)


def test_reshape_resolves_a_single_variable_dim():
    tensor = Tensor.from_object(np.arange(6, dtype=np.int8))
    assert tensor.reshape((-1, 2)).shape == (3, 2)


def test_reshape_of_bytes_tensor_keeps_elements():
    tensor = Tensor.from_object([b"a", b"b", b"c", b"d"]).reshape((2, 2))
    assert tensor.data_type is DataType.BYTES
    assert tensor.to_bytes_array().tolist() == [[b"a", b"b"], [b"c", b"d"]]


@pytest.mark.parametrize(("data_type", "np_type", "itemsize"), NUMERIC, ids=NUMERIC_IDS)
def test_size_is_bytes_and_element_count_is_elements(data_type, np_type, itemsize):
    tensor = Tensor.from_object(np.zeros((2, 3, 4), dtype=np_type))
    assert tensor.element_count == 24
    assert tensor.size == 24 * itemsize


def test_size_of_empty_tensor_is_zero():
    tensor = Tensor.from_object(np.zeros((0, 4), dtype=np.float32))
    assert tensor.element_count == 0
    assert tensor.size == 0


def test_scalar_tensor_has_one_element():
    tensor = Tensor.from_object(np.int64(7))
    assert tensor.element_count == 1
    assert tensor.size == 8


def test_bytes_tensor_size_is_its_serialized_size():
    tensor = Tensor.from_object([b"abc", b"", "é"])
    assert tensor.element_count == 3
    assert tensor.size == (4 + 3) + (4 + 0) + (4 + 2)
    assert tensor.size == len(serialize_bytes_tensor(tensor.to_bytes_array()))


def test_repr_shows_type_shape_and_memory_but_no_data():
    tensor = Tensor.from_object(np.array([[123456, 654321]], dtype=np.int32))
    text = repr(tensor)
    assert text == "Tensor(data_type=INT32, shape=[1, 2], memory_type=CPU)"
    assert "123456" not in text


def test_repr_of_bytes_tensor_has_no_data():
    text = repr(Tensor.from_object([b"secret-payload"]))
    assert "secret" not in text
    assert "BYTES" in text


# -- BYTES wire form -------------------------------------------------------------------


def test_serialize_bytes_tensor_writes_little_endian_length_prefixes():
    assert serialize_bytes_tensor([b"ab", b"", b"xyz"]) == (
        b"\x02\x00\x00\x00ab\x00\x00\x00\x00\x03\x00\x00\x00xyz"
    )


def test_serialize_bytes_tensor_encodes_str_as_utf8_in_row_major_order():
    array = np.array([["a", "é"], ["日本", ""]], dtype=object)
    assert serialize_bytes_tensor(array) == _wire(b"a", "é".encode(), "日本".encode(), b"")


@pytest.mark.parametrize(
    "items",
    [
        [b"hello", b"world"],
        [b"", b"", b""],
        ["héllo wörld".encode(), "日本語".encode(), "🙂".encode()],
        [b"\x00", b"a\x00b", b"\x00\x00\x00\x00", b"\xff" * 300],
        [b"x" * 70000],
        [],
    ],
    ids=["ascii", "empty-strings", "utf8", "binary-with-nuls", "long", "zero-elements"],
)
def test_bytes_wire_form_round_trips(items):
    array = np.empty(len(items), dtype=object)
    array[:] = items
    wire = serialize_bytes_tensor(array)
    assert len(wire) == sum(4 + len(item) for item in items)
    out = deserialize_bytes_tensor(wire, count=len(items))
    assert out.dtype == np.object_
    assert out.shape == (len(items),)
    assert out.tolist() == items
    assert all(type(item) is bytes for item in out)


def test_deserialize_accepts_memoryview_and_bytearray():
    wire = _wire(b"ab", b"c")
    assert deserialize_bytes_tensor(memoryview(wire)).tolist() == [b"ab", b"c"]
    assert deserialize_bytes_tensor(bytearray(wire)).tolist() == [b"ab", b"c"]


def test_deserialized_elements_do_not_alias_the_buffer():
    buffer = bytearray(_wire(b"abc"))
    out = deserialize_bytes_tensor(buffer)
    buffer[4:7] = b"xyz"
    assert out[0] == b"abc"


def test_deserialize_of_empty_buffer_is_zero_elements():
    out = deserialize_bytes_tensor(b"", count=0)
    assert out.shape == (0,)
    assert out.dtype == np.object_


@pytest.mark.parametrize("tail", [b"\x01", b"\x01\x00", b"\x01\x00\x00"])
def test_deserialize_rejects_truncated_length_prefix(tail):
    with pytest.raises(InvalidArgumentError) as info:
        deserialize_bytes_tensor(_wire(b"ok") + tail)
    assert str(info.value) == (
        "BYTES tensor data is truncated: an element length prefix is incomplete"
    )


def test_deserialize_rejects_element_running_past_the_end():
    wire = struct.pack("<I", 10) + b"short"
    with pytest.raises(InvalidArgumentError) as info:
        deserialize_bytes_tensor(wire)
    assert str(info.value) == "BYTES tensor element of 10 bytes runs past the end of the data"


def test_deserialize_rejects_huge_length_prefix():
    with pytest.raises(InvalidArgumentError, match="4294967295 bytes runs past the end"):
        deserialize_bytes_tensor(b"\xff\xff\xff\xff" + b"abc")


@pytest.mark.parametrize(("items", "count"), [([b"a", b"b"], 3), ([], 1)])
def test_deserialize_rejects_element_count_mismatch(items, count):
    with pytest.raises(InvalidArgumentError) as info:
        deserialize_bytes_tensor(_wire(*items), count=count)
    assert str(info.value) == (
        f"BYTES tensor data holds {len(items)} elements, but the shape needs {count}"
    )


@pytest.mark.parametrize("count", [0, 1])
def test_deserialize_stops_past_the_count_the_shape_needs(count):
    with pytest.raises(InvalidArgumentError) as info:
        deserialize_bytes_tensor(_wire(b"a", b"b") + b"\xff", count=count)  # not read
    assert str(info.value) == (
        f"BYTES tensor data holds more than the {count} elements the shape needs")


def test_deserialize_without_count_accepts_any_number_of_elements():
    assert deserialize_bytes_tensor(_wire(b"a", b"b", b"c")).tolist() == [b"a", b"b", b"c"]
