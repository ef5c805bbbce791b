"""The order in which Triton's core walks a request's inputs.

Triton keeps a request's inputs in a ``std::unordered_map<std::string, Input>`` and
validates them in that map's iteration order, so which input an error names first, and
the order of the names in "Got input(s) [...]", follow libstdc++'s hash table rather
than the request. ``triton_order`` reproduces that order: libstdc++'s ``std::hash`` of a
string (``_Hash_bytes``, 64-bit MurmurHash2 with seed 0xc70f6907), its prime bucket
counts (13 buckets at the first insert, then the next prime at least twice as many when
the element count passes the bucket count), and its node list, where an insert or a
rehash puts a node first in the list when its bucket is empty and first in its bucket
otherwise.

Only error paths ask for it: a request that validates is indifferent to the order.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator

__all__ = ["triton_order"]

_MASK = (1 << 64) - 1
_MUL = (0xC6A4A793 << 32) + 0x5BD1E995
_SEED = 0xC70F6907
# libstdc++'s _Prime_rehash_policy: small counts use a table, the rest its prime list
# (only the primes a request's input count can reach are needed; more are cheap).
_FAST_BUCKETS = (2, 2, 2, 3, 5, 5, 7, 7, 11, 11, 11, 11, 13, 13)
_PRIMES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73,
           79, 83, 89, 97, 103, 109, 113, 127, 137, 139, 149, 157, 167, 179, 193, 199, 211,
           227, 241, 257, 277, 293, 313, 337, 359, 383, 409, 439, 467, 503, 541, 577, 619,
           661, 709, 761, 823, 887, 953, 1031, 1109, 1193, 1289, 1381, 1493, 1613, 1741,
           1879, 2029, 2179, 2357, 2549, 2753, 2971, 3209, 3469, 3739, 4027, 4349, 4703,
           5087, 5503, 5953, 6427, 6949, 7517, 8123, 8783, 9497, 10273, 11113, 12011,
           12983, 14033, 15173, 16411, 17749, 19183, 20753, 22447, 24281, 26267, 28411,
           30727, 33223, 35933, 38873, 42043, 45481, 49201, 53201, 57557, 62233, 67307,
           72817, 78779, 85229, 92203, 99733, 107897, 116731, 126271, 136607, 147793,
           159871, 172933, 187091, 202409, 218971, 236897, 256279, 277261, 299951,
           324503, 351061, 379787, 410857, 444487, 480881, 520241, 562841, 608903,
           658753, 712697, 771049, 834181, 902483, 976369)


def _shift_mix(value: int) -> int:
    return value ^ (value >> 47)


def _hash(text: str) -> int:
    """libstdc++'s std::hash<std::string> on a 64-bit platform."""
    data = text.encode("utf-8")
    length = len(data)
    aligned = length & ~7
    value = (_SEED ^ (length * _MUL)) & _MASK
    for offset in range(0, aligned, 8):
        word = int.from_bytes(data[offset:offset + 8], "little")
        value ^= (_shift_mix((word * _MUL) & _MASK) * _MUL) & _MASK
        value = (value * _MUL) & _MASK
    if length & 7:
        value ^= int.from_bytes(data[aligned:], "little")
        value = (value * _MUL) & _MASK
    value = (_shift_mix(value) * _MUL) & _MASK
    return _shift_mix(value)


def _next_buckets(wanted: int) -> int:
    if wanted < len(_FAST_BUCKETS):
        return _FAST_BUCKETS[wanted]
    index = bisect_left(_PRIMES, wanted)
    if index == len(_PRIMES):  # beyond any real request; keep growing past the table
        return wanted | 1
    return _PRIMES[index]


class _NodeList:
    """libstdc++'s singly linked node list with its buckets, each holding the node
    before its first node (``_HEAD``: the list's own start), so that an insert costs
    O(1) as in libstdc++: a linear search per insert made 100k inputs take minutes."""

    def __init__(self, hashes: list[int], buckets: int) -> None:
        self._hashes = hashes
        self._buckets = buckets
        self._next: dict[int, int] = {_HEAD: _END}
        self._before: dict[int, int] = {}  # bucket -> the node before its first node

    def insert(self, node: int) -> None:
        """Link ``node`` first in its bucket, or first in the list when its bucket is
        empty (``_M_insert_bucket_begin``)."""
        following = self._next
        bucket = self._hashes[node] % self._buckets
        before = self._before.get(bucket)
        if before is not None:
            following[node] = following[before]
            following[before] = node
            return
        first = following[_HEAD]
        following[node] = first
        following[_HEAD] = node
        if first != _END:  # the bucket of the old first node now starts after this one
            self._before[self._hashes[first] % self._buckets] = node
        self._before[bucket] = _HEAD

    def __iter__(self) -> Iterator[int]:
        following = self._next
        node = following[_HEAD]
        while node != _END:
            yield node
            node = following[node]


_HEAD = -1
_END = -2


def triton_order(names: Iterable[str]) -> list[str]:
    """``names`` (inserted in this order, no duplicates) in the iteration order of a
    libstdc++ ``std::unordered_map`` they were emplaced into."""
    keys: list[str] = []
    hashes: list[int] = []
    nodes = _NodeList(hashes, 1)
    buckets = 1
    next_resize = 0
    for name in names:
        count = len(keys)
        if count + 1 > next_resize:  # _Prime_rehash_policy::_M_need_rehash
            minimum = max(count + 1, 0 if next_resize else 11)
            if minimum >= buckets:
                buckets = _next_buckets(max(minimum + 1, buckets * 2))
                next_resize = buckets
                rehashed = _NodeList(hashes, buckets)
                for node in nodes:  # a rehash relinks the nodes in list order
                    rehashed.insert(node)
                nodes = rehashed
            else:
                next_resize = buckets
        keys.append(name)
        hashes.append(_hash(name))
        nodes.insert(count)
    return [keys[node] for node in nodes]
