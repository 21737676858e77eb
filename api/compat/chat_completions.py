"""`POST /v1/chat/completions`: OpenAI's Chat Completions wire, with Precis keeping the session.

The wire's request is already chat messages: it names the session (`X-Precis-Session`, then
`metadata.session_id`, then the prefix fingerprint when MEMORY_IDENTIFY=prefix), and its
answer, whole or streamed as `chat.completion.chunk` events, is the model's as litellm
returns it. The turn is `api.compat.turn`'s.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Annotated, Any

from pydantic import Field, StrictBool

from api.compat import identify
from api.compat.turn import ChatTurn, ChatTurns, model_call
from api.openai_errors import error_type
from api.schemas.common import WireRequest
from api.upstream import UpstreamFailed

WIRE = "chat_completions"

STORED_FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "function_call"})
"""Answers that are a turn of the session: finished, cut at the answer's length, or calling
tools. A refused one (`content_filter`) or a failed one stores nothing."""

SESSION_METADATA_KEY = "session_id"
"""The key of `metadata` that names the session (taken out before the model is called)."""


class ChatCompletionRequest(WireRequest):
    """A Chat Completions request, as far as Precis reads it; every other field is kept as
    sent and passed to the model."""

    model: Annotated[str, Field(min_length=1, max_length=256)]
    """A litellm model string the server allows (MODEL_ALLOWED)."""
    messages: Annotated[list[dict[str, Any]], Field(min_length=1, max_length=100_000)]
    """The chat messages: the whole history (resent) or only the new ones."""
    stream: StrictBool = False
    """Relay the model's chunks as server-sent events."""
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    """Longest answer (older name)."""
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    """Longest answer; kept free of the window when the context is fitted."""
    stream_options: dict[str, Any] | None = None
    """`{"include_usage": true}`: a last chunk with the usage (Precis asks for it anyway)."""
    metadata: dict[str, Any] | None = None
    """`metadata.session_id` names the session (unless the header does)."""

    def session_fields(self) -> list[tuple[str, object]]:
        return [
            (f"metadata.{SESSION_METADATA_KEY}", (self.metadata or {}).get(SESSION_METADATA_KEY))
        ]

    def upstream_request(self) -> dict[str, Any]:
        """The request's parameters for the model: without the messages, `stream` and the
        session's name."""
        request = self.model_dump(exclude={"messages", "stream", "metadata"}, exclude_none=True)
        metadata = {
            key: value
            for key, value in (self.metadata or {}).items()
            if key != SESSION_METADATA_KEY
        }
        return request | ({"metadata": metadata} if metadata else {})


async def prepare(
    turns: ChatTurns, tenant: str, header: str | None, body: ChatCompletionRequest
) -> ChatTurn:
    session_id = identify.session_id(
        tenant,
        header,
        body.session_fields(),
        body.messages,
        turns.settings.memory_identify == "prefix",
    )
    answer_tokens = body.max_completion_tokens or body.max_tokens
    request = body.upstream_request()
    # only a header names one conversation for sure: a body field may name a user
    stateful = bool(header)
    return await turns.prepare(
        WIRE, tenant, session_id, body.messages, request, answer_tokens, stateful
    )


async def complete(turns: ChatTurns, turn: ChatTurn) -> dict[str, Any]:
    """The `chat.completion` of a non-streamed request; the turn stored when it is one."""
    completion: dict[str, Any] = await turns.call(turn, model_call(turn, streamed=False))
    choice = (completion.get("choices") or [{}])[0]
    if choice.get("finish_reason") in STORED_FINISH_REASONS:
        await turns.store(turn, choice.get("message") or {})
    await turns.learn(turn, completion.get("usage"))
    return completion


async def open_stream(turns: ChatTurns, turn: ChatTurn) -> AsyncIterator[dict[str, Any]]:
    """The chunks of a streamed request, opened (errors before the first chunk are raised
    here, so the client gets a plain error answer)."""
    chunks = await turns.call(turn, model_call(turn, streamed=True))
    return _stored_when_done(turns, turn, chunks)


async def _stored_when_done(
    turns: ChatTurns, turn: ChatTurn, chunks: AsyncIterator[dict[str, Any]]
) -> AsyncIterator[dict[str, Any]]:
    answer = AssembledAnswer()
    stored = False
    # Precis asks for the usage (it learns from it); a client that did not gets no usage chunk
    usage_asked = bool((turn.upstream_request.get("stream_options") or {}).get("include_usage"))
    try:
        async for chunk in chunks:
            answer.add(chunk)
            if not chunk.get("choices") and not usage_asked:
                continue
            if not stored and answer.finish_reason in STORED_FINISH_REASONS:
                # stored before the client hears the answer end: a client that reads the
                # session next sees the turn, and one that leaves right then loses nothing
                await turns.store(turn, answer.message())
                stored = True
            yield chunk
    except UpstreamFailed as exc:
        turns.count(turn, "model_failed")
        yield {"error": {"message": exc.message, "type": error_type(exc.status), "code": exc.code}}
        return
    await turns.learn(turn, answer.usage)


class AssembledAnswer:
    """The first choice's message, assembled from a stream's chunks."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: Mapping[str, Any] | None = None

    def add(self, chunk: Mapping[str, Any]) -> None:
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.content.append(delta["content"])
            for call in delta.get("tool_calls") or ():
                kept = self.calls.setdefault(
                    call.get("index", 0), {"id": None, "name": "", "arguments": []}
                )
                function = call.get("function") or {}
                kept["id"] = call.get("id") or kept["id"]
                kept["name"] += function.get("name") or ""
                kept["arguments"].append(function.get("arguments") or "")
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": "".join(call["arguments"])},
                }
                for _, call in sorted(self.calls.items())
            ]
        return message
