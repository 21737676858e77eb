"""`precis/offline`: a model Precis serves itself, to try the model endpoints without a key.

Development mode only (no API_KEYS): `api.compat.model_limits.check_model` refuses it. It
calls nothing (no network, no litellm) and answers the request it is given, the conversation's
fitted context then the new input, deterministically: the last user input echoed, and what
the offline summarizer (`summarizer/local`) keeps of everything before it, so a user sees what
the conversation remembers. Its own earlier replies are left out of that memory (they only repeat
what it was told), known by the tag they begin with. It never calls a tool.

`create_response` and `open_stream` take what `api.upstream`'s take and answer the same shapes:
a Responses object with `usage`, or the events a streamed answer relays (created, in progress,
the message and its text part added, the text in word deltas, the done events, completed; or
`response.incomplete` when `max_output_tokens` cut the answer). `create_completion` and
`open_completion_stream` do the same for the chat wires (`api.compat`): a `chat.completion`,
or its chunks.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from api.compat import replayed_events
from api.conversation_items import ID_HEX_DIGITS, new_item_id
from api.items import check_item, projection
from api.upstream import Upstream, UpstreamFailed
from summarizer.client import CompletionRequest, SummaryTask
from summarizer.local import LocalSummarizer
from summarizer.text import clip_tokens
from summarizer.tokens import count_messages, count_text
from summarizer.transcript import TranscriptOptions, content_text, transcript_entries

OFFLINE_MODEL = "precis/offline"
"""The model name that selects this model: `precis` is no provider litellm knows, so the name
never shadows a model of MODEL_ALLOWED."""

OFFLINE_WINDOW = 16_000
"""The window a turn fits the conversation into for this model (MODEL_CONTEXT_TOKENS overrides
it): room for a few dozen turns before the conversation loads summaries."""

MEMORY_TOKENS = 300
"""Longest memory part of a reply: the offline summarizer's target for the earlier context."""

SAID_TOKENS = 200
"""Longest echo of the user's input: a long paste is cut, not repeated whole."""

REPLY_TAG = f"[{OFFLINE_MODEL}]"
"""How each reply begins: says who answered, and marks the replies left out of the memory."""


async def create_response(upstream: Upstream, request: Mapping[str, Any]) -> dict[str, Any]:
    """The whole response to `request` (as `api.upstream.create_response` answers one)."""
    return await _answer(request)


async def open_stream(
    upstream: Upstream, request: Mapping[str, Any]
) -> AsyncIterator[dict[str, Any]]:
    """The response to `request` as stream events (as `api.upstream.open_stream` opens one): the
    answer is made before the first event, so a refused input is a plain error answer."""
    return _events(await _answer(request))


async def create_completion(upstream: Upstream, request: Mapping[str, Any]) -> dict[str, Any]:
    """The whole chat completion of `request` (as `api.upstream.create_completion` answers):
    its messages in the shape Precis stores (`api.compat.turn` checks a plain proxy call's)."""
    messages = list(request.get("messages") or [])
    text = await _text(messages)
    cut = request.get("max_completion_tokens") or request.get("max_tokens")
    finish = "stop"
    if isinstance(cut, int) and count_text(text) > cut:
        text, finish = clip_tokens(text, cut), "length"
    prompt_tokens, completion_tokens = count_messages(messages), count_text(text)
    return {
        "id": f"chatcmpl-{secrets.token_hex(ID_HEX_DIGITS // 2)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": OFFLINE_MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


async def open_completion_stream(
    upstream: Upstream, request: Mapping[str, Any]
) -> AsyncIterator[dict[str, Any]]:
    """The chat completion of `request` as chunks (as `api.upstream.open_completion_stream`
    opens them): the text in word deltas, then the finish reason, then the usage."""
    return _chunks(await create_completion(upstream, request))


async def _chunks(completion: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    head = {key: completion[key] for key in ("id", "created", "model")}
    head["object"] = "chat.completion.chunk"
    choice = completion["choices"][0]
    first = {"role": "assistant", "content": ""}
    yield {**head, "choices": [{"index": 0, "delta": first, "finish_reason": None}]}
    for word in replayed_events.WORDS.findall(choice["message"]["content"]):
        yield {**head, "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]}
    finish = choice["finish_reason"]
    yield {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
    yield {**head, "choices": [], "usage": completion["usage"]}


async def _answer(request: Mapping[str, Any]) -> dict[str, Any]:
    items = _items(request.get("input"))
    text = await _text([projection(item) for item in items])
    cut = request.get("max_output_tokens")
    status = "completed"
    if isinstance(cut, int) and count_text(text) > cut:
        text, status = clip_tokens(text, cut), "incomplete"
    input_tokens = count_messages([projection(item) for item in items])
    return _response(request, text, status, input_tokens)


async def _text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The reply to chat messages: the last user message echoed, and what the offline
    summarizer keeps of the others (this model's own replies left out)."""
    said_at = max(
        (i for i, message in enumerate(messages) if message.get("role") == "user"),
        default=len(messages),
    )
    said = content_text(messages[said_at].get("content")).strip() if said_at < len(messages) else ""
    earlier = [dict(message) for i, message in enumerate(messages) if i != said_at]
    remembered = [message for message in earlier if not _own_reply(message)]
    memory = await _memory(remembered) if remembered else None
    return _reply(said, len(remembered), memory)


def _items(given: Any) -> list[dict[str, Any]]:
    """The input as items, checked as a conversation's are (a request without `conversation`
    reaches here unchecked)."""
    items = [{"role": "user", "content": given}] if isinstance(given, str) else list(given or [])
    for index, item in enumerate(items):
        try:
            check_item(item, f"input[{index}]")
        except ValueError as exc:
            raise UpstreamFailed(400, str(exc), "invalid_input", "input") from None
    return items


def _own_reply(message: Mapping[str, Any]) -> bool:
    return message.get("role") == "assistant" and content_text(message.get("content")).startswith(
        REPLY_TAG
    )


async def _memory(messages: Sequence[dict[str, Any]]) -> str:
    """What the offline summarizer keeps of `messages`, as it would summarize them."""
    numbered = [{**message, "seq": seq} for seq, message in enumerate(messages, start=1)]
    entries = transcript_entries(numbered, TranscriptOptions())
    request = CompletionRequest(
        messages=list(messages),
        max_tokens=MEMORY_TOKENS,
        target_tokens=MEMORY_TOKENS,
        task=SummaryTask(transcript=tuple(entries)),
    )
    return (await LocalSummarizer().complete(request)).text.strip()


def _reply(said: str, remembered: int, memory: str | None) -> str:
    echo = f"You said: {clip_tokens(said, SAID_TOKENS)}" if said else "You said nothing new."
    if memory is None:
        recall = (
            "Nothing came before it in the context Precis loaded: the conversation starts here."
        )
    else:
        items = "item" if remembered == 1 else "items"
        recall = (
            f"What I remember from before it ({remembered} {items}, as Precis's offline "
            f"summarizer keeps them):\n{memory}"
        )
    return f"{REPLY_TAG} {echo}\n{recall}"


def _response(
    request: Mapping[str, Any], text: str, status: str, input_tokens: int
) -> dict[str, Any]:
    output_tokens = count_text(text)
    message = {
        "type": "message",
        "id": new_item_id({"type": "message"}),
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    response = {
        "id": f"resp_{secrets.token_hex(ID_HEX_DIGITS // 2)}",
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": OFFLINE_MODEL,
        "output": [message],
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        },
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "metadata": request.get("metadata") or {},
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "temperature": request.get("temperature"),
        "text": request.get("text") or {"format": {"type": "text"}},
        "tool_choice": request.get("tool_choice") or "auto",
        "tools": request.get("tools") or [],
        "top_p": request.get("top_p"),
    }
    if status == "incomplete":
        response["incomplete_details"] = {"reason": "max_output_tokens"}
    # as the litellm path answers: fields without a value left out
    return {key: value for key, value in response.items() if value is not None}


async def _events(response: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    """`response` as the Responses API streams it, numbered as it does."""
    for event in replayed_events.streamed(response):
        yield event
