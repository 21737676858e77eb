"""`POST /v1/responses/compact`: OpenAI's compaction endpoint, answered with Precis summaries.

With a conversation or a `previous_response_id` chain named (the newest response of its
chain), its stored history is compacted as `POST /v1/sessions/{id}/compact` does with
`keep_last_n` 0 (everything summarized but what may not be cut, such as a call whose output
is not stored yet; the summary stored and linked to its source messages), and the answer is
the context as it now loads: the pinned prefix, one compaction item carrying the live
summaries (`api.compaction_items`) and the items after them. The next turn continues with the
same conversation or `previous_response_id`, which loads that context itself. Without either,
the `input` items are summarized inline with the summary model and nothing is stored: one
compaction item carrying the summary, then the items it left out; the client sends that
output back as the input of its next turn (OpenAI's usage), and a compaction item Precis made
reaches the model as the summary it carries.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import replace
from typing import Any

from api import compact as compact_use_case
from api.compaction_items import CompactedSummary, compaction_item
from api.compat import stored_responses
from api.compat.model_limits import check_model
from api.compat.response_checks import check_context, check_input_given
from api.conversation_items import served_item
from api.conversations import ConversationNotFound
from api.db.transactions import Database
from api.errors import SessionNotFound
from api.items import check_item, projection
from api.openai_errors import OpenAIError
from api.schemas import CompactRequest, CompactResult, MessageOut
from api.schemas.responses import CompactionRequest
from api.settings import Settings
from api.store import session_for_history
from api.store.responses import get_response
from api.summarization import Summarization
from summarizer import summarize

COMPACTION_ID_PREFIX = "cmp_"
"""The prefix of a compaction item's id, as OpenAI writes them."""

RESPONSE_ID_HEX = 48
"""Hex digits of a compacted response's id (192 random bits)."""

JSON = dict[str, Any]


async def compact(
    database: Database,
    summarization: Summarization,
    settings: Settings,
    tenant: str,
    request: CompactionRequest,
) -> JSON:
    """The compacted response (`object: response.compaction`)."""
    check_model(settings, request.model)
    session_id = await _named_session(database, tenant, request)
    if session_id is None:
        output, usage = await _compacted_input(settings, _input_items(request))
    else:
        if request.input:
            raise OpenAIError(
                400,
                "with a conversation or previous_response_id, compact summarizes what is "
                "stored: send new input with the next turn",
                param="input",
            )
        output, usage = await _compacted_session(database, summarization, tenant, session_id)
    return {
        "id": "resp_" + secrets.token_hex(RESPONSE_ID_HEX // 2),
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": output,
        "usage": usage,
    }


async def _named_session(database: Database, tenant: str, request: CompactionRequest) -> str | None:
    session_id = request.conversation_id()
    check_context(session_id, request.previous_response_id)
    check_input_given(request.input, session_id, request.previous_response_id)
    if request.previous_response_id is None:
        return session_id
    async with database.reading() as db:
        previous = await get_response(db, tenant, request.previous_response_id)
    if previous is None:
        raise stored_responses.not_found(request.previous_response_id, "previous_response_id")
    if previous.session_last_seq != previous.last_seq:
        # its session went on past it (another turn named it, or one after it): compacting
        # the session would summarize turns that are not this chain's
        raise OpenAIError(
            400,
            f"response {request.previous_response_id!r} has been continued since: compact "
            "the newest response of its chain",
            param="previous_response_id",
        )
    return previous.session_id


def _input_items(request: CompactionRequest) -> list[JSON]:
    given = request.input
    items = [{"role": "user", "content": given}] if isinstance(given, str) else list(given or [])
    for index, item in enumerate(items):
        try:
            check_item(item, f"input[{index}]")
        except ValueError as exc:
            raise OpenAIError(400, str(exc), param=f"input[{index}]") from None
    return items


async def _compacted_input(settings: Settings, items: list[JSON]) -> tuple[list[JSON], JSON]:
    """The input summarized inline (nothing stored): its compaction item, then what it left
    out (a pending question, a call whose output is not there yet)."""
    messages = [{**projection(item), "seq": seq} for seq, item in enumerate(items, start=1)]
    summarizer = replace(settings.policy().summarizer, keep_last_n=0)
    made = await summarize(messages, summarizer) if messages else None
    if made is None:
        return items, _usage(0, 0)
    carried = CompactedSummary(made.summary_text, made.first_seq, made.last_seq, ())
    output = [_item(carried), *items[made.message_count :]]
    return output, _usage(made.source_tokens, made.summary_tokens)


async def _compacted_session(
    database: Database, summarization: Summarization, tenant: str, session_id: str
) -> tuple[list[JSON], JSON]:
    """The conversation or chain compacted and stored: its context as it now loads."""
    try:
        async with database.reading() as db:
            start = await session_for_history(db, tenant, session_id)
            if start.session.format not in (None, "responses"):
                raise SessionNotFound(session_id)  # a session of chat messages
            body = CompactRequest(keep_last_n=0)
            result = await compact_use_case.compact(db, summarization, tenant, session_id, body)
    except SessionNotFound:
        raise ConversationNotFound(session_id) from None
    assert isinstance(result, CompactResult)  # not a dry run
    history = result.history
    output = [_served(message) for message in history.pinned]
    summaries = history.summaries
    if summaries:
        text = "\n\n".join(summary.summary_text for summary in summaries)
        ids = tuple(summary.id for summary in summaries)
        first, last = summaries[0].first_seq, summaries[-1].last_seq
        output.append(_item(CompactedSummary(text, first, last, ids)))
    output += [_served(message) for message in history.messages]
    made = result.summary
    if made is None:
        return output, _usage(0, 0)
    return output, _usage(int(made.metadata.get("input_tokens") or 0), made.approx_tokens)


def _item(summary: CompactedSummary) -> JSON:
    return compaction_item(summary, COMPACTION_ID_PREFIX + secrets.token_hex(RESPONSE_ID_HEX // 2))


def _served(message: MessageOut) -> JSON:
    """A stored item as the Conversations API serves it (its id included)."""
    return served_item(dict(message.item or {}), message.client_id, message.id)


def _usage(input_tokens: int, output_tokens: int) -> JSON:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }
