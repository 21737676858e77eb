"""`POST /v1/messages`: Anthropic's Messages wire, with Precis keeping the session.

The request is translated to chat messages (`api.compat.anthropic_shapes`), names its
session (`X-Precis-Session`, then `metadata.user_id`, then the prefix fingerprint when
MEMORY_IDENTIFY=prefix), and runs the shared turn (`api.compat.turn`) against any model
litellm reaches; the answer is translated back to a Message, or to Anthropic's stream events
(`api.compat.anthropic_stream`). `count_tokens` counts the request as the model counts it
(`api.model_tokens`).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Annotated, Any

from pydantic import BaseModel, Field, StrictBool

from api.compat import anthropic_shapes, identify
from api.compat.anthropic_stream import AnthropicStream
from api.compat.turn import ChatTurn, ChatTurns, model_call, prompt_tokens
from api.context_edits import EditOverrides
from api.errors import PayloadTooLarge
from api.model_tokens import TokenRatios, count_for_model, model_encoding
from api.openai_errors import OpenAIError
from api.schemas.common import WireRequest
from api.upstream import UpstreamFailed
from summarizer.tokens import count_text
from summarizer.transcript import content_text

WIRE = "messages"

CLEAR_TOOL_USES = "clear_tool_uses_"
"""The prefix of the `context_management` edit Precis applies (its version follows)."""

CLEAR_THINKING = "clear_thinking_"
"""The prefix of the edit that clears earlier thinking blocks, which Precis never sends: it
asks the model for no thinking and drops the blocks a client resends (`anthropic_shapes`), so
the edit is accepted with nothing to clear (Claude Code sends it with every request)."""

CLEAR_TOOL_USES_VERSION = "20250919"
"""The version an answer reports its applied edits under."""

DEFAULT_CLEAR_TRIGGER = 100_000
DEFAULT_CLEAR_KEEP = 3
"""Anthropic's defaults: clear past 100,000 input tokens, keeping the newest 3 tool uses."""

_TRANSLATED_MESSAGE = re.compile(r"messages\[(\d+)\]")

STORED_STOP_REASONS = frozenset({"end_turn", "max_tokens", "tool_use", "stop_sequence"})
"""Answers that are a turn of the session; a refusal, or a failed answer, stores nothing."""


class MessagesRequest(WireRequest):
    """A Messages API request, as far as Precis reads it; the rest is translated by
    `anthropic_shapes` (unknown fields are kept, and not sent to the model)."""

    model: Annotated[str, Field(min_length=1, max_length=256)]
    """A litellm model string the server allows (MODEL_ALLOWED)."""
    max_tokens: Annotated[int, Field(ge=1)]
    """Longest answer; kept free of the window when the context is fitted."""
    messages: Annotated[list[dict[str, Any]], Field(min_length=1, max_length=100_000)]
    """The turns: the whole history (resent) or only the new ones."""
    system: str | list[dict[str, Any]] | None = None
    """The system prompt: text, or text blocks."""
    stream: StrictBool = False
    """Answer as server-sent events."""
    metadata: dict[str, Any] | None = None
    """`metadata.user_id` names the session (unless the header does)."""
    tools: list[dict[str, Any]] | None = None
    """Tool definitions (`name`, `description`, `input_schema`)."""


class CountTokensRequest(WireRequest):
    """`POST /v1/messages/count_tokens`: a Messages request without `max_tokens`."""

    model: Annotated[str, Field(min_length=1, max_length=256)]
    """The model the count is for."""
    messages: Annotated[list[dict[str, Any]], Field(min_length=1, max_length=100_000)]
    """The turns."""
    system: str | list[dict[str, Any]] | None = None
    """The system prompt."""
    tools: list[dict[str, Any]] | None = None
    """Tool definitions."""


def translated(body: BaseModel) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The request's chat messages and litellm parameters; a 400 naming what cannot be."""
    given = body.model_dump(exclude_none=True)
    try:
        return anthropic_shapes.request_messages(given), anthropic_shapes.completion_params(given)
    except ValueError as exc:
        raise OpenAIError(400, str(exc), param="messages") from None


async def prepare(
    turns: ChatTurns, tenant: str, header: str | None, body: MessagesRequest
) -> ChatTurn:
    messages, params = translated(body)
    params.pop("stream", None)
    params.pop("stream_options", None)
    session_id = identify.session_id(
        tenant,
        header,
        [("metadata.user_id", (body.metadata or {}).get("user_id"))],
        messages,
        turns.settings.memory_identify == "prefix",
    )
    request = {"model": body.model, **params}
    edits = context_edits((body.model_extra or {}).get("context_management"))
    # `metadata.user_id` names a user, who may start another conversation: only the header
    # names one conversation for sure
    stateful = bool(header)
    try:
        turn = await turns.prepare(
            WIRE, tenant, session_id, messages, request, body.max_tokens, stateful
        )
    except OpenAIError as exc:
        raise _in_request_terms(exc, body) from None
    except PayloadTooLarge as exc:
        place = _request_place(exc.detail, body)
        if place is None:
            raise
        raise PayloadTooLarge(f"{place}{exc.detail.partition(']')[2]}") from None
    turn.edits = edits
    return turn


def _in_request_terms(error: OpenAIError, body: MessagesRequest) -> OpenAIError:
    """An error naming a translated chat message (`messages[4].content`), naming the request's
    turn it came from instead (`messages[2]`): `system` and tool results are messages of their
    own once translated."""
    place = _request_place(error.param or "", body)
    if place is None:
        return error
    words = error.message.partition(": ")[2] or error.message
    return OpenAIError(error.status_code, f"{place}: {words}", param=place, code=error.code)


def _request_place(named: str, body: MessagesRequest) -> str | None:
    """The request's turn (or `system`) of the translated message `named` starts with."""
    found = _TRANSLATED_MESSAGE.match(named)
    if found is None:
        return None
    places = anthropic_shapes.message_places(body.model_dump(exclude_none=True))
    index = int(found.group(1))
    return places[index] if index < len(places) else None


def context_edits(management: object) -> EditOverrides | None:
    """Anthropic's `context_management.edits` as Precis's context editing: a
    `clear_tool_uses_*` edit sets the tool-result clearing of this request (Anthropic's
    defaults where a field is absent); a `clear_thinking_*` edit has nothing to clear; any
    other edit is a 400."""
    if management is None:
        return None
    edits = management.get("edits") if isinstance(management, dict) else None
    if not isinstance(edits, list):
        raise OpenAIError(
            400, "context_management.edits must be a list", param="context_management"
        )
    overrides = None
    for index, edit in enumerate(edits):
        kind = edit.get("type") if isinstance(edit, dict) else None
        if isinstance(kind, str) and kind.startswith(CLEAR_THINKING):
            continue
        if not (isinstance(kind, str) and kind.startswith(CLEAR_TOOL_USES)):
            raise OpenAIError(
                400,
                f"context_management.edits[{index}]: only `{CLEAR_TOOL_USES}*` and "
                f"`{CLEAR_THINKING}*` edits are applied",
                param="context_management",
            )
        assert isinstance(edit, dict)
        overrides = EditOverrides(
            tool_results_trigger_tokens=_value(edit.get("trigger"), DEFAULT_CLEAR_TRIGGER),
            tool_results_keep=_value(edit.get("keep"), DEFAULT_CLEAR_KEEP),
            tool_results_at_least_tokens=_value(edit.get("clear_at_least"), 0),
            exclude_tools=frozenset(edit.get("exclude_tools") or ()),
            clear_tool_inputs=bool(edit.get("clear_tool_inputs")),
        )
    return overrides


def _value(setting: object, default: int) -> int:
    value = setting.get("value") if isinstance(setting, dict) else None
    return value if isinstance(value, int) and value >= 0 else default


def applied_edits(turn: ChatTurn) -> dict[str, Any] | None:
    """The answer's `context_management`, as Anthropic reports the edits it applied."""
    if turn.edits is None:
        return None
    results = [part for part in turn.cleared if part.kind == "tool_result"]
    applied = []
    if turn.cleared:
        applied.append(
            {
                "type": CLEAR_TOOL_USES + CLEAR_TOOL_USES_VERSION,
                "cleared_tool_uses": len(results),
                "cleared_input_tokens": sum(part.tokens for part in turn.cleared),
            }
        )
    return {"applied_edits": applied}


async def complete(turns: ChatTurns, turn: ChatTurn, model: str) -> dict[str, Any]:
    """The Message of a non-streamed request; the turn stored when it is one."""
    completion = await turns.call(turn, model_call(turn, streamed=False))
    message = anthropic_shapes.anthropic_message(completion, model)
    if message["stop_reason"] in STORED_STOP_REASONS:
        await turns.store(turn, anthropic_shapes.assistant_chat_message(message))
    await turns.learn(turn, completion.get("usage"))
    management = applied_edits(turn)
    return message if management is None else {**message, "context_management": management}


async def open_stream(
    turns: ChatTurns, turn: ChatTurn, model: str
) -> AsyncIterator[dict[str, Any]]:
    """The events of a streamed request, opened (errors before the first event are raised
    here, so the client gets a plain error answer)."""
    chunks = await turns.call(turn, model_call(turn, streamed=True))
    stream = AnthropicStream(model, prompt_tokens(turn.new_messages))
    return _stored_when_done(turns, turn, stream, chunks)


async def _stored_when_done(
    turns: ChatTurns,
    turn: ChatTurn,
    stream: AnthropicStream,
    chunks: AsyncIterator[dict[str, Any]],
) -> AsyncIterator[dict[str, Any]]:
    try:
        async for event in stream.events(chunks):
            if event.get("type") == "message_delta":
                message = stream.message()
                if message["stop_reason"] in STORED_STOP_REASONS:
                    # stored before the client hears the stop reason: a client that reads
                    # the session next sees the turn, one that leaves then loses nothing
                    await turns.store(turn, anthropic_shapes.assistant_chat_message(message))
            if event.get("type") == "message_stop":
                await turns.learn(turn, stream.completion().get("usage"))
            management = applied_edits(turn)
            if event.get("type") == "message_delta" and management is not None:
                event = {**event, "context_management": management}
            yield event
    except UpstreamFailed as exc:
        turns.count(turn, "model_failed")
        yield anthropic_shapes.error_body(exc.status, exc.message)


async def count_tokens(body: CountTokensRequest, ratios: TokenRatios) -> dict[str, int]:
    """`{"input_tokens": N}`: the request's messages, system prompt and tools as the model
    counts them (`api.model_tokens.count_for_model`)."""
    messages, params = translated(body)
    tokens = prompt_tokens(messages)
    texts = [content_text(message.get("content")) for message in messages]
    if params.get("tools"):
        tools = json.dumps(params["tools"])
        tokens += count_text(tools)
        texts.append(tools)
    ratio = 1.0 if model_encoding(body.model) else await ratios.ratio(body.model)
    return {"input_tokens": count_for_model(body.model, tokens, texts, ratio)}
