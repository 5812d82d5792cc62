"""What a user of a client generated from the relay's OpenAPI document does: list the dead
events page by page, retry one, and see it pending. Run by api::outside with the generated
package `relay_client` on PYTHONPATH; arguments: the relay's base URL, an admin token and the
id of a dead event. Prints one JSON line of what it saw; exits non-zero on any surprise."""

import json
import sys
from uuid import UUID

from relay_client import AuthenticatedClient
from relay_client.api.events import get_event, list_events, retry_event
from relay_client.models import EventPage, Steering, StatusParam
from relay_client.types import UNSET


def main(base, token, dead_id):
    client = AuthenticatedClient(base_url=base, token=token, raise_on_unexpected_status=True)
    with client as c:
        dead, pages, after = [], 0, UNSET
        while True:
            page = list_events.sync(client=c, status=StatusParam.DEAD, limit=2, after=after)
            if not isinstance(page, EventPage):
                raise SystemExit(f"listing dead events answered {page!r}")
            dead += [str(e.id) for e in page.events]
            pages += 1
            if not page.next_:
                break
            after = page.next_
        if dead_id not in dead:
            raise SystemExit(f"{dead_id} not among the dead events {dead}")
        steered = retry_event.sync(UUID(dead_id), client=c)
        if not isinstance(steered, Steering) or steered.status != StatusParam.PENDING:
            raise SystemExit(f"retry answered {steered!r}")
        event = get_event.sync(UUID(dead_id), client=c)
        again = retry_event.sync_detailed(UUID(dead_id), client=c)
        print(json.dumps({
            "dead_listed": len(dead),
            "pages": pages,
            "retried": str(steered.id),
            "status_after": event.status.value,
            "attempts_after": event.attempts,
            "retry_again_status": again.status_code,
            "retry_again_error": getattr(again.parsed, "error", None),
        }))


if __name__ == "__main__":
    main(*sys.argv[1:4])
