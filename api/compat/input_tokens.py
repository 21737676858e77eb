"""`POST /v1/responses/input_tokens`: the input tokens a Responses request would send.

The count covers what the turn would send: with `conversation` or `previous_response_id`, the
stored context as it loads now (pinned prefix, summaries, the messages after them) within the
room the model's window leaves it (what does not fit the turn would summarize first), then the
input, the instructions and the tools, as the model counts them (`api.model_tokens`: its own
encoding where one ships offline, else cl100k times its learned ratio; cl100k without a
model). Nothing is called or stored.
"""

from __future__ import annotations

import json
from typing import Any

from api import history_load
from api.compat import stored_responses
from api.compat.model_limits import answer_room, model_window
from api.compat.response_checks import check_context
from api.compat.turn import REPLY_PRIMING_TOKENS
from api.conversations import ConversationNotFound
from api.db.transactions import Database
from api.errors import SessionNotFound
from api.items import check_item, projection
from api.model_tokens import TokenRatios, count_for_model, fitted_window, model_encoding
from api.offline_model import OFFLINE_MODEL
from api.openai_errors import OpenAIError
from api.schemas.responses import InputTokensRequest
from api.settings import Settings
from api.store import session_for_history
from api.store.responses import get_response
from api.summarization import Summarization
from summarizer.tokens import count_messages, count_text
from summarizer.transcript import content_text


async def count(
    database: Database,
    summarization: Summarization,
    ratios: TokenRatios,
    tenant: str,
    request: InputTokensRequest,
) -> dict[str, Any]:
    session_id = request.conversation_id()
    check_context(session_id, request.previous_response_id)
    if request.previous_response_id is not None:
        async with database.reading() as db:
            previous = await get_response(db, tenant, request.previous_response_id)
        if previous is None:
            raise stored_responses.not_found(request.previous_response_id, "previous_response_id")
        session_id = previous.session_id
    given = request.input
    items = [{"role": "user", "content": given}] if isinstance(given, str) else list(given or [])
    for index, item in enumerate(items):
        try:
            check_item(item, f"input[{index}]")
        except ValueError as exc:
            raise OpenAIError(400, str(exc), param=f"input[{index}]") from None
    own = [projection(item) for item in items]
    if request.instructions:
        own.insert(0, {"role": "system", "content": request.instructions})
    tools = json.dumps(request.tools) if request.tools else ""
    own_tokens = count_messages(own) + REPLY_PRIMING_TOKENS + (count_text(tools) if tools else 0)
    model = request.model or ""
    ratio = 1.0 if not model or model_encoding(model) else await ratios.ratio(model)
    stored: list[dict[str, Any]] = []
    if session_id is not None:
        budget = None
        if request.truncation != "disabled":
            # the room as the turn reckons it: by the ratio learned for the model
            learned = await ratios.ratio(model) if model and model != OFFLINE_MODEL else 1.0
            budget = await _room_left(summarization.settings, model, learned, own_tokens)
        async with database.reading() as db:
            try:
                start = await session_for_history(db, tenant, session_id)
            except SessionNotFound:
                raise ConversationNotFound(session_id) from None
            loaded = await history_load.load_context(
                db, summarization, start, None, budget, "openai"
            )
        stored = [dict(message) for message in loaded.context.messages]
    tokens = count_messages(stored) + own_tokens
    texts = [content_text(message.get("content")) for message in stored + own] + [tools]
    counted = count_for_model(model, tokens, texts, ratio)
    return {"object": "response.input_tokens", "input_tokens": counted}


async def _room_left(settings: Settings, model: str, ratio: float, own_tokens: int) -> int | None:
    """The tokens a turn of `model` leaves its stored context (the turn fits the context to
    it, summarizing what does not fit): None without a model, or one whose window is unknown
    (the context as it loads, as with `truncation: disabled`)."""
    if not model:
        return None
    try:
        window = await model_window(settings, model)
    except OpenAIError:
        return None
    room = fitted_window(
        window - answer_room(settings, window, None), ratio, settings.model_token_margin
    )
    return max(room - own_tokens, 1)
