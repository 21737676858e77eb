"""Stored responses: every response `POST /v1/responses` answers is kept (unless `store` is
false) with the seqs its items hold in its session, and a later turn that names it as
`previous_response_id` goes on from it.

A chain of responses is a Precis session: the first response of a chain (no `conversation`,
no `previous_response_id`) creates it, under the response's own id; its context is loaded and
summarized like any other. A turn that names the newest response of its session continues
that session; one that names an earlier response (two turns naming the same previous one, or
a conversation that went on) branches it: a fork at the named response's last item, under
the new response's id (messages and summaries reused, as `fork` does).
"""

from __future__ import annotations

import json
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from api import forks, store
from api.append.batch import AppendOutcome
from api.conversation_items import served_item
from api.db.transactions import Database
from api.errors import SessionExists
from api.items import parse_item
from api.openai_errors import OpenAIError
from api.schemas.forks import ForkRequest
from api.settings import Settings
from api.store.background import ENDED, get_background
from api.store.responses import (
    NewResponse,
    ResponseRow,
    get_response,
    insert_response,
)


@dataclass(frozen=True)
class Continuation:
    """The session a turn naming a previous response runs in."""

    session_id: str
    previous: ResponseRow
    branched: bool


def not_found(response_id: str, param: str | None = None) -> OpenAIError:
    return OpenAIError(
        404,
        f"Response with id '{response_id}' not found.",
        param=param,
        code="response_not_found",
    )


async def continuation(
    database: Database, settings: Settings, tenant: str, previous_id: str, new_session_id: str
) -> Continuation:
    """Where a turn after `previous_id` runs: that response's session when it is the newest
    there, else a fork of it at the response's last item, named `new_session_id`."""
    async with database.reading() as db:
        previous = await get_response(db, tenant, previous_id)
    if previous is None:
        raise not_found(previous_id, "previous_response_id")
    if previous.session_last_seq == previous.last_seq:
        return Continuation(previous.session_id, previous, branched=False)
    fork = ForkRequest(seq=previous.last_seq, id=new_session_id)
    # the new response's id is random: only an earlier run of this response (a background
    # one run again) made a session of that name, as this fork
    with suppress(SessionExists):
        await forks.fork_session(database, settings, tenant, previous.session_id, fork)
    return Continuation(new_session_id, previous, branched=True)


async def record(
    database: Database,
    tenant: str,
    outcome: AppendOutcome,
    input_count: int,
    previous_response_id: str | None,
    response: dict[str, Any],
) -> None:
    """Keep the response, after its turn was stored (`outcome`: that append). A crash between
    the two leaves the turn stored and no response: the client, which never got the answer,
    never got its id either."""
    seqs = [message.seq for message in outcome.messages]
    row = NewResponse(
        id=str(response["id"]),
        tenant=tenant,
        session_key=outcome.session.id,
        first_seq=min(seqs),
        last_seq=max(seqs),
        input_count=input_count,
        previous_response_id=previous_response_id,
        body=json.dumps(response),
    )
    await insert_response(database, row)


async def input_items(
    database: Database, tenant: str, response_id: str, after: str | None, limit: int, order: str
) -> dict[str, Any]:
    """A page of the response's input items, as `conversations.items.list` pages items."""
    async with database.reading() as db:
        # the background row first: a run stores its response, then deletes the row
        pending = await get_background(db, tenant, response_id)
        row = await get_response(db, tenant, response_id)
        if row is None:
            if pending is None:
                raise not_found(response_id)
            ended = pending.status in ENDED
            raise OpenAIError(
                409,
                f"response {response_id!r} is {pending.status.replace('_', ' ')}: its input "
                "items are stored with its turn, "
                + ("never were" if ended else "once it has completed"),
                param="response_id",
                code="response_not_stored",
                headers={} if ended else {"retry-after": "1"},
            )
        last_input = row.first_seq + row.input_count - 1
        rows = await store.messages_in_range(db, row.session_key, row.first_seq - 1, last_input)
    items = [served_item(parse_item(m.item or "{}"), m.client_id, m.id) for m in rows]
    if order == "desc":
        items.reverse()
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise OpenAIError(
                404,
                f"item {after!r} is not an input item of response {response_id!r}",
                param="after",
            )
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(items) > limit,
    }
