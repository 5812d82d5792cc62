"""The stream entry (docs/protocol.md, "Entries"): the fields the relay writes, and
:class:`Entry`, one event parsed from them, in either envelope: the default fields (``id``,
``topic``, ``payload``, ``headers``, ``created_at``, ``key``) or CloudEvents (``id`` and
``cloudevent``, the event as CloudEvents 1.0 JSON).

Parsing never raises anything but :class:`EntryError`, which names the field and carries a
stable ``code``: a malformed entry is dead-lettered with the error's text, never handled.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

#: The fields this library reads; any other field is ignored.
ID = "id"
TOPIC = "topic"
PAYLOAD = "payload"
HEADERS = "headers"
CREATED_AT = "created_at"
KEY = "key"
CLOUDEVENT = "cloudevent"
KNOWN_FIELDS = (ID, TOPIC, KEY, PAYLOAD, HEADERS, CREATED_AT, CLOUDEVENT)

#: The fields the dead stream adds to an entry's own.
DEAD_FIELDS = ("error", "group", "deliveries")

SPECVERSION = "1.0"


@dataclass(frozen=True)
class Lease:
    """A consumer's hold on one partition: the partition (0-based) and its fencing epoch."""

    partition: int
    epoch: int


class EntryError(ValueError):
    """Why a stream entry is not a well-formed outbox event. ``code`` is stable (see
    docs/protocol.md and the golden data); ``str(error)`` is the text the dead stream's
    ``error`` field gets (after ``malformed entry: ``)."""

    def __init__(
        self, code: str, message: str, field: str | None = None, attribute: str | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.field = field
        self.attribute = attribute
        self.message = message

    def __str__(self) -> str:
        return self.message


def _missing(name: str) -> EntryError:
    return EntryError("missing_field", f"field `{name}` is missing", name)


def _ce(code: str, message: str, attribute: str | None = None) -> EntryError:
    return EntryError(code, f"field `cloudevent`: {message}", CLOUDEVENT, attribute)


@dataclass
class Entry:
    """An event read from its topic's stream."""

    #: The Redis stream entry id (``1764683821123-0``), what XACK takes.
    stream_id: str
    #: The event's id: the key to deduplicate on.
    id: uuid.UUID
    #: The topic.
    topic: str
    #: The partition key; ``None`` when the event has none.
    key: str | None
    #: The payload, parsed from its JSON text.
    payload: Any
    #: The headers, parsed from their JSON text.
    headers: Any
    #: When the producer wrote the event (UTC).
    created_at: datetime
    #: This delivery's number in the group (1 the first time).
    deliveries: int = 1
    #: The consumer group it was delivered to ("" outside a group).
    group: str = ""
    #: The partition's lease, for an entry of a partition the group's fleet divides.
    lease: Lease | None = None
    #: The CloudEvents attributes (every attribute but ``data``, extensions included) for an
    #: entry of the CloudEvents envelope; ``None`` for the default one.
    cloudevent: CloudEvent | None = None
    #: The stream it was read from ("" when parsed outside a consumer).
    stream: str = field(default="")

    @property
    def traceparent(self) -> str | None:
        """The W3C ``traceparent`` the relay's publish span left, if any."""
        value = self.headers.get("traceparent") if isinstance(self.headers, dict) else None
        return value if isinstance(value, str) else None

    def to_json(self) -> dict[str, Any]:
        """The object ``outbox-relay tail`` prints for this entry."""
        out: dict[str, Any] = {
            "stream_id": self.stream_id,
            "id": str(self.id),
            "topic": self.topic,
            "key": self.key,
            "payload": self.payload,
            "headers": self.headers,
            "created_at": created_at_text(self.created_at),
        }
        if self.cloudevent is not None:
            out["cloudevent"] = self.cloudevent.to_json()
        return out


def created_at_text(at: datetime) -> str:
    """RFC 3339 in UTC with microseconds and ``Z``, as the relay writes ``created_at``."""
    return at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))$"
)


def parse_rfc3339(text: str) -> datetime | None:
    """An RFC 3339 date-time as a UTC ``datetime`` (fractions past microseconds dropped), or
    ``None``."""
    m = _RFC3339.match(text)
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
    frac = m.group(7) or ""
    micro = int((frac + "000000")[:6])
    leap = second == 60
    try:
        at = datetime(year, month, day, hour, minute, 59 if leap else second, micro)
    except ValueError:
        return None
    if m.group(9) is not None:
        oh, om = int(m.group(10)), int(m.group(11))
        if oh > 23 or om > 59:
            return None
        offset = timedelta(hours=oh, minutes=om)
        if m.group(9) == "-":
            offset = -offset
        at = at - offset
    return at.replace(tzinfo=timezone.utc)


_UUID_FORMS = re.compile(
    r"^(?:urn:uuid:)?(?:[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    r"|\{[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\}"
    r"|[0-9a-fA-F]{32})$"
)


def parse_uuid(text: str) -> uuid.UUID | None:
    """A uuid in one of the forms the relay's library reads (hyphenated, simple, braced,
    ``urn:uuid:``), or ``None``."""
    if _UUID_FORMS.match(text) is None:
        return None
    return uuid.UUID(text)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json(text: str) -> Any:
    """Strict JSON (no NaN or Infinity), as the relay's library reads it."""
    return json.loads(text, parse_constant=_reject_constant)


def _text(value: str | bytes, name: str) -> str:
    if isinstance(value, str):
        return value
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise EntryError("not_text", f"field `{name}` is not UTF-8 text", name) from None


def _name(name: str | bytes) -> str:
    return name if isinstance(name, str) else name.decode("utf-8", "replace")


def parse_fields(
    stream_id: str,
    fields: Iterable[tuple[str | bytes, str | bytes]],
    topic: str | None = None,
) -> Entry:
    """Parses an entry from its fields (name, value), in stream order. ``topic`` is the topic
    of the stream it was read from: a CloudEvents entry does not name its own. Unknown fields
    are ignored; a repeated field keeps its last value. Raises :class:`EntryError`."""
    text: dict[str, str] = {}
    for raw_name, raw_value in fields:
        name = _name(raw_name)
        if name not in KNOWN_FIELDS:
            continue
        text[name] = _text(raw_value, name)

    def take(name: str) -> str:
        if name not in text:
            raise _missing(name)
        return text.pop(name)

    id_text = take(ID)
    event_id = parse_uuid(id_text)
    if event_id is None:
        raise EntryError("bad_id", f"field `id` is not a uuid: {id_text}", ID)
    if CLOUDEVENT in text:
        event = text.pop(CLOUDEVENT)
        if TOPIC in text:
            entry_topic = text.pop(TOPIC)
        elif topic is not None:
            entry_topic = topic
        else:
            raise _missing(TOPIC)
        return _read_cloudevent(stream_id, event_id, entry_topic, event)
    entry_topic = take(TOPIC)
    payload = _json_field(take(PAYLOAD), PAYLOAD)
    headers = _json_field(take(HEADERS), HEADERS)
    created_text = take(CREATED_AT)
    created_at = parse_rfc3339(created_text)
    if created_at is None:
        raise EntryError(
            "bad_created_at",
            f"field `created_at` is not an RFC 3339 time: {created_text}",
            CREATED_AT,
        )
    return Entry(
        stream_id=stream_id,
        id=event_id,
        topic=entry_topic,
        key=text.get(KEY),
        payload=payload,
        headers=headers,
        created_at=created_at,
    )


def _json_field(value: str, name: str) -> Any:
    try:
        return parse_json(value)
    except ValueError as e:
        raise EntryError("bad_json", f"field `{name}` is not JSON: {e}", name) from None


_CE_STRINGS = (
    "specversion",
    "id",
    "source",
    "type",
    "time",
    "datacontenttype",
    "subject",
    "partitionkey",
    "traceparent",
    "tracestate",
)


@dataclass
class CloudEvent:
    """A CloudEvent's context attributes (every attribute but ``data``)."""

    specversion: str
    id: str
    source: str
    type: str
    time: datetime | None = None
    datacontenttype: str | None = None
    subject: str | None = None
    partitionkey: str | None = None
    traceparent: str | None = None
    tracestate: str | None = None
    #: Every other extension attribute, as JSON values.
    extensions: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The attributes as a JSON object (absent ones left out, extensions flattened)."""
        out: dict[str, Any] = {}
        for name in _CE_STRINGS:
            value = getattr(self, name)
            if isinstance(value, datetime):
                value = created_at_text(value)
            if value is not None:
                out[name] = value
        out.update(self.extensions)
        return out


def parse_cloudevent(text: str) -> tuple[CloudEvent, Any]:
    """Reads a ``cloudevent`` field: its attributes and its data (``None`` when it has
    none). Raises :class:`EntryError` with a ``cloudevent_*`` code."""
    try:
        wire = parse_json(text)
    except ValueError as e:
        raise _ce("cloudevent_not_json", f"not a CloudEvents JSON object: {e}") from None
    if not isinstance(wire, dict):
        raise _ce(
            "cloudevent_not_json",
            f"not a CloudEvents JSON object: invalid type: {type(wire).__name__}, expected an "
            "object",
        )
    for name in _CE_STRINGS:
        value = wire.get(name)
        if value is not None and not isinstance(value, str):
            raise _ce(
                "cloudevent_not_json",
                f"not a CloudEvents JSON object: invalid type: {json.dumps(value)} for "
                f"attribute `{name}`, expected a string",
            )
    specversion = wire.get("specversion")
    if specversion is None:
        raise _ce(
            "cloudevent_missing_attribute", "attribute `specversion` is missing", "specversion"
        )
    if specversion != SPECVERSION:
        raise _ce(
            "cloudevent_bad_specversion",
            f"specversion {json.dumps(specversion, ensure_ascii=False)} is not 1.0",
        )
    if wire.get("data_base64") is not None:
        raise _ce(
            "cloudevent_binary_data",
            "attribute `data_base64`: binary data is not read, only JSON `data`",
            "data_base64",
        )
    time_text = wire.get("time")
    time: datetime | None = None
    if time_text is not None:
        time = parse_rfc3339(time_text)
        if time is None:
            raise _ce(
                "cloudevent_bad_time",
                f"attribute `time` is not an RFC 3339 time: {time_text}",
                "time",
            )
    for required in ("id", "source", "type"):
        if wire.get(required) is None:
            raise _ce(
                "cloudevent_missing_attribute", f"attribute `{required}` is missing", required
            )
    extensions = {
        k: v for k, v in wire.items() if k not in _CE_STRINGS and k not in ("data", "data_base64")
    }
    event = CloudEvent(
        specversion=specversion,
        id=wire["id"],
        source=wire["source"],
        type=wire["type"],
        time=time,
        datacontenttype=wire.get("datacontenttype"),
        subject=wire.get("subject"),
        partitionkey=wire.get("partitionkey"),
        traceparent=wire.get("traceparent"),
        tracestate=wire.get("tracestate"),
        extensions=extensions,
    )
    return event, wire.get("data")


def _read_cloudevent(stream_id: str, event_id: uuid.UUID, topic: str, text: str) -> Entry:
    event, data = parse_cloudevent(text)
    if parse_uuid(event.id) != event_id:
        raise _ce(
            "cloudevent_id_mismatch",
            f"its id {json.dumps(event.id, ensure_ascii=False)} is not the entry's id {event_id}",
            "id",
        )
    if event.time is None:
        raise _ce("cloudevent_missing_attribute", "attribute `time` is missing", "time")
    headers: dict[str, Any] = {}
    if event.type != topic:
        headers["type"] = event.type
    if event.traceparent is not None:
        headers["traceparent"] = event.traceparent
    if event.tracestate is not None:
        headers["tracestate"] = event.tracestate
    return Entry(
        stream_id=stream_id,
        id=event_id,
        topic=topic,
        key=event.partitionkey,
        payload=data,
        headers=headers,
        created_at=event.time,
        cloudevent=event,
    )
