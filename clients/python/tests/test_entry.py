"""Entry parsing: the default envelope and CloudEvents, well-formed and malformed."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone

import pytest

from outbox_consumer import EntryError, parse_fields
from outbox_consumer.entry import created_at_text

ID = "6f0c1c52-4c8b-4a53-9a0e-2f3c1a1b2c3d"


def good() -> list[tuple[str, str]]:
    return [
        ("id", ID),
        ("topic", "order.created"),
        ("payload", '{"order_id":42}'),
        ("headers", '{"trace":"t1"}'),
        ("created_at", "2026-12-02T13:57:01.123456Z"),
        ("key", "order-42"),
    ]


def test_parses_a_relay_entry() -> None:
    e = parse_fields("1-0", good())
    assert e.stream_id == "1-0"
    assert e.id == uuid.UUID(ID)
    assert e.topic == "order.created"
    assert e.key == "order-42"
    assert e.payload == {"order_id": 42}
    assert e.headers == {"trace": "t1"}
    assert e.created_at == datetime(2026, 12, 2, 13, 57, 1, 123456, tzinfo=timezone.utc)
    assert e.deliveries == 1
    assert e.to_json()["created_at"] == "2026-12-02T13:57:01.123456Z"


def test_bytes_fields_unknown_fields_and_no_key() -> None:
    fields = [(k.encode(), v.encode()) for k, v in good() if k != "key"]
    fields.append((b"extra", b"\xff"))
    e = parse_fields("1-0", fields)
    assert e.key is None


@pytest.mark.parametrize(
    ("change", "code", "message"),
    [
        ({"payload": None}, "missing_field", "field `payload` is missing"),
        ({"id": None}, "missing_field", "field `id` is missing"),
        ({"id": "not-a-uuid"}, "bad_id", "field `id` is not a uuid: not-a-uuid"),
        ({"payload": "{not json"}, "bad_json", "field `payload` is not JSON: "),
        ({"headers": "NaN"}, "bad_json", "field `headers` is not JSON: "),
        ({"created_at": "yesterday"}, "bad_created_at", "field `created_at` is not an RFC 3339"),
    ],
)
def test_malformed_entries_say_which_field(
    change: dict[str, str | None], code: str, message: str
) -> None:
    fields = [(k, change.get(k, v)) for k, v in good() if change.get(k, v) is not None]
    with pytest.raises(EntryError) as raised:
        parse_fields("1-0", [(k, v) for k, v in fields if v is not None])
    assert raised.value.code == code
    assert str(raised.value).startswith(message)


def test_a_field_that_is_not_utf8() -> None:
    fields: list[tuple[str, str | bytes]] = list(good())
    fields[2] = ("payload", b"\xff\xfe")
    with pytest.raises(EntryError) as raised:
        parse_fields("1-0", fields)
    assert raised.value.code == "not_text"
    assert str(raised.value) == "field `payload` is not UTF-8 text"


def test_created_at_offsets_and_precision() -> None:
    fields = dict(good())
    fields["created_at"] = "2026-12-02T14:57:01.123456789+01:00"
    e = parse_fields("1-0", list(fields.items()))
    assert created_at_text(e.created_at) == "2026-12-02T13:57:01.123456Z"


def cloudevent_fields(event_id: str, **extra: object) -> list[tuple[str, str]]:
    event: dict[str, object] = {
        "specversion": "1.0",
        "id": event_id,
        "source": "/shop",
        "type": "order.created",
        "time": "2026-12-02T13:57:01.123456Z",
        "datacontenttype": "application/json",
        "data": {"order_id": 42},
        "partitionkey": "order-42",
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    }
    event.update(extra)
    return [("id", event_id), ("cloudevent", json.dumps(event))]


def test_a_cloudevents_entry_reads_like_any_other() -> None:
    e = parse_fields("1-0", cloudevent_fields(ID, region="eu"), topic="order.created")
    plain = parse_fields("1-0", good())
    assert e.payload == plain.payload
    assert e.created_at == plain.created_at
    assert e.key == "order-42"
    assert e.topic == "order.created"
    assert e.headers == {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    assert e.traceparent is not None
    assert e.cloudevent is not None
    assert e.cloudevent.source == "/shop"
    assert e.cloudevent.extensions == {"region": "eu"}
    assert e.to_json()["cloudevent"]["region"] == "eu"


def test_a_cloudevents_entry_names_its_type_when_it_is_not_the_topic() -> None:
    e = parse_fields("1-0", cloudevent_fields(ID, type="com.shop.created"), topic="order.created")
    assert e.headers["type"] == "com.shop.created"


@pytest.mark.parametrize(
    ("fields", "topic", "code", "message"),
    [
        (cloudevent_fields(ID), None, "missing_field", "field `topic` is missing"),
        (
            cloudevent_fields(ID, id="00000000-0000-0000-0000-000000000001"),
            "t",
            "cloudevent_id_mismatch",
            "field `cloudevent`: its id",
        ),
        (
            cloudevent_fields(ID, specversion="0.3"),
            "t",
            "cloudevent_bad_specversion",
            'field `cloudevent`: specversion "0.3" is not 1.0',
        ),
        (
            cloudevent_fields(ID, time=None),
            "t",
            "cloudevent_missing_attribute",
            "field `cloudevent`: attribute `time` is missing",
        ),
        (
            cloudevent_fields(ID, source=None),
            "t",
            "cloudevent_missing_attribute",
            "field `cloudevent`: attribute `source` is missing",
        ),
        (
            cloudevent_fields(ID, time="soon"),
            "t",
            "cloudevent_bad_time",
            "field `cloudevent`: attribute `time` is not an RFC 3339 time: soon",
        ),
        (
            cloudevent_fields(ID, data_base64="AAA="),
            "t",
            "cloudevent_binary_data",
            "field `cloudevent`: attribute `data_base64`",
        ),
        (
            cloudevent_fields(ID, type=7),
            "t",
            "cloudevent_not_json",
            "field `cloudevent`: not a CloudEvents JSON object",
        ),
        (
            [("id", ID), ("cloudevent", "{")],
            "t",
            "cloudevent_not_json",
            "field `cloudevent`: not a CloudEvents JSON object",
        ),
    ],
)
def test_malformed_cloudevents_say_why(
    fields: list[tuple[str, str]], topic: str | None, code: str, message: str
) -> None:
    with pytest.raises(EntryError) as raised:
        parse_fields("1-0", fields, topic=topic)
    assert raised.value.code == code
    assert str(raised.value).startswith(message)
