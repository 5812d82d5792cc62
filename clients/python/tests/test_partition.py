"""The partition function against Kafka's vectors and the golden data."""

from __future__ import annotations

import pytest

from outbox_consumer import murmur2, partition_for_key

from .golden import golden_partition_vectors

KAFKA_MURMUR2 = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
    (b"kafka", -798503068),
    (b"1", -1993445489),
    (b"12", 126087238),
    (b"123", -267702483),
    (b"1234", -1614185708),
    (b"12345", -1188365604),
]


@pytest.mark.parametrize(("data", "want"), KAFKA_MURMUR2)
def test_murmur2_matches_kafka(data: bytes, want: int) -> None:
    assert murmur2(data) == want


def test_the_contracts_vectors_over_1000_partitions() -> None:
    assert [partition_for_key(k, 1000) for k in ("", "a", "abc", "123456789")] == [
        681,
        524,
        107,
        566,
    ]


def test_a_count_of_zero_is_one_and_partitions_are_in_range() -> None:
    assert partition_for_key("abc", 0) == 0
    for n in (2, 3, 8, 1024):
        assert 0 <= partition_for_key("customer-42", n) < n


def test_golden_partition_vectors() -> None:
    vectors = golden_partition_vectors()
    assert vectors, "no partition vectors in the golden data"
    for v in vectors:
        assert partition_for_key(v.key, v.partitions) == v.partition, v
        if v.murmur2 is not None:
            assert murmur2(v.key.encode("utf-8")) == v.murmur2, v
