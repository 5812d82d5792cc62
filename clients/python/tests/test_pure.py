"""The parts of the loop and the fleet that are pure functions."""

from __future__ import annotations

from outbox_consumer._redis import RawEntry
from outbox_consumer.backoff import nominal_delay, retry_delay
from outbox_consumer.consumer import Delivery, dead_fields, lanes
from outbox_consumer.entry import Lease
from outbox_consumer.fleet import RENEW, TAKE, Fleet, Held, asks, beat_every, settle, targets
from outbox_consumer.keys import partition_epoch, partition_owner

from .test_config import config


def raw(stream_id: str, key: str | None, stream: str = "outbox:t") -> RawEntry:
    fields = [
        (b"id", b"6f0c1c52-4c8b-4a53-9a0e-2f3c1a1b2c3d"),
        (b"topic", b"t"),
        (b"payload", b"{}"),
        (b"headers", b"{}"),
        (b"created_at", b"2026-12-02T13:57:01.123456Z"),
    ]
    if key is not None:
        fields.append((b"key", key.encode()))
    return RawEntry(stream, stream_id, fields)


def test_one_lane_per_key_in_stream_order_and_one_per_unkeyed_entry() -> None:
    keys = ["a", None, "b", "a", None, "b", "a"]
    ds = [Delivery(raw(f"{i}-0", k), "t", "g", 1, False) for i, k in enumerate(keys)]
    got = [[d.raw.stream_id for d in lane] for lane in lanes(ds)]
    assert got == [["0-0", "3-0", "6-0"], ["1-0"], ["2-0", "5-0"], ["4-0"]]


def test_a_malformed_entry_keeps_its_lane_by_its_key_field() -> None:
    bad = RawEntry("outbox:t", "9-0", [(b"key", b"a"), (b"id", b"nope")])
    d = Delivery(bad, "t", "g", 1, False)
    assert d.entry is None
    assert d.lane == "outbox:t\na"


def test_dead_fields_are_the_originals_then_error_group_deliveries() -> None:
    r = raw("1-0", "k")
    r.fields.append((b"error", b"old"))
    flat = dead_fields(config(), r, "boom", 5)
    names = flat[0::2]
    assert names == [
        b"id",
        b"topic",
        b"payload",
        b"headers",
        b"created_at",
        b"key",
        b"error",
        b"group",
        b"deliveries",
    ]
    assert flat[-6:] == [b"error", b"boom", b"group", b"billing", b"deliveries", b"5"]


def test_backoff_doubles_with_jitter_below_the_cap() -> None:
    assert nominal_delay(1, 0.2, 10) == 0.2
    assert nominal_delay(3, 0.2, 10) == 0.8
    assert nominal_delay(30, 0.2, 10) == 10
    assert retry_delay(1, 0.2, 10, unit=1.0) == 0.2 * 0.8


def test_targets_divide_partitions_by_sorted_names() -> None:
    for m in range(1, 8):
        for n in range(1, 17):
            members = [f"c-{(i * 7) % 11}" for i in range(m)]
            owners = [0] * n
            counts = []
            for me in members:
                mine = targets(members, me, n)
                counts.append(len(mine))
                for p in mine:
                    owners[p] += 1
            assert all(o == 1 for o in owners)
            assert max(counts) - min(counts) <= 1
    assert targets(["b", "a", "c"], "b", 8) == [1, 4, 7]
    assert targets(["a"], "z", 8) == []


def test_lease_replies_settle_like_the_rust_bookkeeping() -> None:
    streams = ["a", "b"]
    held = {"a": Held(0, 4, 0.0, True, True)}
    assert asks(held, streams, {0, 1}) == [(0, RENEW), (1, TAKE)]
    s = settle(held, streams, {0, 1}, [((0, RENEW), 5), ((1, TAKE), -1)], 10.0)
    assert held == {}
    assert s.waiting
    assert s.changes == [("changed_hands", 0, 5)]
    held = {"a": Held(0, 2, 0.0, True, True)}
    s = settle(held, ["a"], set(), [((0, RENEW), 2)], 10.0)
    assert s.changes == [("giving_up", 0, 2)]
    assert not held["a"].keep and held["a"].valid_until == 10.0
    s = settle(held, ["a"], set(), [((0, RENEW), None)], 20.0)
    assert held["a"].valid_until == 10.0, "a failed call extends nothing"
    s = settle(held, ["a"], {0}, [((0, RENEW), -1)], 20.0)
    assert held == {} and s.changes == [("lost", 0, 0)]


def test_fleet_keys_and_readability() -> None:
    assert partition_owner("o:t:3", "g") == "{o:t:3}:owner:g"
    assert partition_epoch("o:t:3", "g") == "{o:t:3}:epoch:g"
    assert partition_owner("{o}:t:3", "g") == "{o}:t:3:owner:g"
    f = Fleet("me", "g", "o:", 3.0)
    f.configure([("t", ["o:t:0", "o:t:1"]), ("u", ["o:u"])])
    assert f.is_active()
    assert f.readable(["o:t:0", "o:t:1", "o:u"]) == ["o:u"]
    f.held["o:t:0"] = Held(0, 7, 1e18, True, True)
    assert f.readable(["o:t:0", "o:t:1", "o:u"]) == ["o:t:0", "o:u"]
    assert f.lease_in_hand("o:t:0") == Lease(0, 7)
    assert f.lease_in_hand("o:u") is None
    assert beat_every(30) == 1.0 and beat_every(3) == 0.5 and beat_every(0.1) == 0.02
