"""Schemathesis hooks for the relay's API: relations between fields that the OpenAPI document
states in words (JSON Schema cannot compare two values). A generated request that breaks one is sent
without the second field: the relay answers such requests 400, which api::validation and
api::replay test.

- the dead-letter filter: `dead_after` before `dead_before`;
- a replay: `until` after `since` (each an RFC 3339 time or a duration that long ago).

And one rule on values of any shape: an event's payload and headers hold no NUL character
(Postgres cannot store one; the document says so in words, since JSON Schema can only say it
of a value of known depth). Generated bodies have their NULs removed before they are sent;
api::validation tests that such bodies are refused with 400 naming the field.
"""

import re
from datetime import datetime, timedelta, timezone

import schemathesis

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
AGO = re.compile(r"([1-9][0-9]{0,3})(s|m|h|d)")


def _time(value, now):
    """The instant a field names, or None when it is not one (then the relay says 400)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        return at if at.tzinfo else None
    except ValueError:
        pass
    parts = value.split(" ")
    seconds = 0
    for part in parts:
        m = AGO.fullmatch(part)
        if not m:
            return None
        seconds += int(m.group(1)) * UNITS[m.group(2)]
    return now - timedelta(seconds=seconds)


def _ordered(first, second):
    now = datetime.now(timezone.utc)
    a, b = _time(first, now), _time(second, now)
    return a is None or b is None or a < b


def _drop_unordered(fields, first, second):
    """Leaves out `second` when it does not come after `first` (both instants)."""
    if isinstance(fields, dict) and not _ordered(fields.get(first), fields.get(second)):
        fields.pop(second, None)


def _without_nul(value):
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, list):
        return [_without_nul(v) for v in value]
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    return value


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    # Every phase passes here (the coverage phase's boundary values skip filter hooks).
    path = case.operation.path
    if path.endswith("/dead/groups"):
        _drop_unordered(case.query, "dead_after", "dead_before")
    elif path.endswith("/dead/retry") or path.endswith("/dead/discard"):
        if isinstance(case.body, dict):
            _drop_unordered(case.body.get("filter"), "dead_after", "dead_before")
    elif path.endswith("/replay"):
        _drop_unordered(case.body, "since", "until")
    elif path == "/api/v1/events" and case.method.upper() == "POST" and isinstance(case.body, dict):
        for field in ("payload", "headers"):
            if field in case.body:
                case.body[field] = _without_nul(case.body[field])
