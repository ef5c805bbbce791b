"""triton_order: the iteration order of libstdc++'s unordered_map, as Triton walks inputs.

The expected orders are the ones real Triton 2.51 printed in its "Got input(s) [...]"
errors (recorded in tests/conformance/golden/grpc_infer.json).
"""

from __future__ import annotations

from infercore.triton_order import triton_order


def test_distinct_buckets_come_out_newest_first():
    assert triton_order(["INPUT0", "INPUT1", "INPUT9"]) == ["INPUT9", "INPUT1", "INPUT0"]
    assert triton_order(["INPUT0", "INPUT1", "EXTRA"]) == ["EXTRA", "INPUT1", "INPUT0"]


def test_a_shared_bucket_keeps_its_nodes_together():
    assert triton_order(["ZA", "IN_INT32", "ZB", "ZC"]) == ["ZC", "ZB", "IN_INT32", "ZA"]


def test_the_order_after_a_rehash_past_thirteen_elements():
    names = [f"IN_{t}" for t in ("BOOL", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16",
                                 "UINT32", "UINT64", "FP16", "FP32", "FP64", "BF16", "BYTES")]
    assert triton_order(names + ["EXTRA"]) == [
        "EXTRA", "IN_BYTES", "IN_INT64", "IN_INT32", "IN_UINT8", "IN_INT16", "IN_UINT16",
        "IN_UINT32", "IN_UINT64", "IN_FP16", "IN_BOOL", "IN_FP32", "IN_INT8", "IN_FP64",
        "IN_BF16"]


def test_small_inputs():
    assert triton_order([]) == []
    assert triton_order(["only"]) == ["only"]
    assert sorted(triton_order(str(i) for i in range(200))) == sorted(str(i) for i in range(200))
