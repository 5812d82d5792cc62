"""Every case of the protocol's golden entries (consumer/protocol/golden/entries.json, as
shipped in the package): what each entry parses to, or the error it gives."""

from __future__ import annotations

from typing import Any

import pytest

from outbox_consumer import EntryError, parse_fields
from outbox_consumer.entry import created_at_text

from .golden import field_value, golden_entries

CASES = golden_entries()


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_golden_entry(case: dict[str, Any]) -> None:
    fields = [(name, field_value(value)) for name, value in case["fields"]]
    if "error" in case:
        want = case["error"]
        with pytest.raises(EntryError) as raised:
            parse_fields(case["stream_id"], fields, topic=case["stream_topic"])
        error = raised.value
        assert error.code == want["code"]
        assert error.field == want["field"]
        assert error.attribute == want.get("attribute")
        assert str(error).startswith(want["message_prefix"]), (str(error), want["message"])
        return
    want = case["expect"]
    entry = parse_fields(case["stream_id"], fields, topic=case["stream_topic"])
    assert entry.stream_id == case["stream_id"]
    assert str(entry.id) == want["id"]
    assert entry.topic == want["topic"]
    assert entry.key == want["key"]
    assert entry.payload == want["payload"]
    assert entry.headers == want["headers"]
    assert created_at_text(entry.created_at) == want["created_at"]
    assert entry.traceparent == want["traceparent"]
    if want["cloudevent"] is None:
        assert entry.cloudevent is None
    else:
        ce = entry.cloudevent
        assert ce is not None
        got = {name: getattr(ce, name) for name in want["cloudevent"]}
        assert got == want["cloudevent"]
        assert ce.time == entry.created_at


def test_the_golden_data_has_both_kinds() -> None:
    assert any("error" in c for c in CASES) and any("expect" in c for c in CASES)
