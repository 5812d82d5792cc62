"""Reads stream entries' `cloudevent` fields with the CloudEvents Python SDK (`cloudevents`,
from `make api-tools`): one field's text per line on stdin, one JSON object per line on stdout
with the event's attributes (as the SDK validated and typed them; `time` as RFC 3339), its
`data` and its `time` in microseconds since the epoch (`time_us`). A field the SDK refuses ends the script with its error."""

import json
import sys
from datetime import datetime, timedelta, timezone

from cloudevents.core.formats.json import JSONFormat

fmt = JSONFormat()
for line in sys.stdin:
    if not line.strip():
        continue
    event = fmt.read(None, line)
    attributes = dict(event.get_attributes())
    time = event.get_time()
    attributes["time"] = time.isoformat()
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    time_us = (time - epoch) // timedelta(microseconds=1)
    print(json.dumps({"attributes": attributes, "data": event.get_data(), "time_us": time_us}))
