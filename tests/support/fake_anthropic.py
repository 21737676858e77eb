"""Anthropic's Messages API for the fake model server (`tests/support/fake_llm.py`): a request
read as the chat messages the answer modes read, and the answer, its event stream and its
errors as Anthropic sends them."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

MESSAGES_PATH = "/messages"
COUNT_TOKENS_PATH = "/messages/count_tokens"

WORD_PATTERN = re.compile(r"\S+\s*|\s+")
"""How a streamed answer is cut into deltas: one word with the spaces after it."""

Event = tuple[str | None, dict[str, Any] | str]
"""One server-sent event: its name (None for none) and its data."""

_ERROR_TYPES = {
    400: ("invalid_request_error", "Invalid request."),
    401: ("authentication_error", "invalid x-api-key"),
    403: ("permission_error", "Your API key does not have permission to use this resource."),
    404: ("not_found_error", "Not found."),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "Number of requests has exceeded your rate limit."),
    500: ("api_error", "Internal server error"),
    # not "overloaded": litellm maps any error whose text says so to InternalServerError
    503: ("api_error", "Service unavailable."),
    504: ("timeout_error", "Request timed out."),
    529: ("overloaded_error", "Overloaded"),
}


def chat_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A Messages request read as chat messages: each system text block a system message first,
    then each message, its `tool_use` blocks an assistant's `tool_calls` and its `tool_result`
    blocks `tool` messages in place; `thinking` blocks and `cache_control` are left out, an
    image becomes a chat `image_url` part (a base64 source as a data URL)."""
    system = body.get("system")
    blocks = [{"type": "text", "text": system}] if isinstance(system, str) else system or []
    chat = [
        {"role": "system", "content": str(block.get("text") or "")}
        for block in blocks
        if block.get("type", "text") == "text"
    ]
    for message in body.get("messages") or []:
        chat.extend(_chat_message(str(message.get("role") or "user"), message.get("content")))
    return chat


def _chat_message(role: str, content: Any) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        return [{"role": role, "content": "" if content is None else str(content)}]
    chat: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    tool_calls: list[dict[str, Any]] = []

    def flush() -> None:
        if parts or tool_calls:
            message: dict[str, Any] = {"role": role, "content": _content(parts)}
            if tool_calls:
                message["tool_calls"] = list(tool_calls)
            chat.append(message)
        parts.clear()
        tool_calls.clear()

    for block in content:
        kind = block.get("type")
        if kind == "tool_use":
            tool_calls.append(
                {
                    "id": block.get("id"),
                    "type": "function",
                    "function": {
                        "name": block.get("name"),
                        "arguments": json.dumps(block.get("input") or {}, ensure_ascii=False),
                    },
                }
            )
        elif kind == "tool_result":
            flush()
            result = block.get("content")
            chat.append(
                {
                    "role": "tool",
                    "tool_call_id": block.get("tool_use_id"),
                    "content": _content([_part(b) for b in result])
                    if isinstance(result, list)
                    else str(result or ""),
                }
            )
        elif kind not in ("thinking", "redacted_thinking"):
            parts.append(_part(block))
    flush()
    return chat


def _part(block: dict[str, Any]) -> dict[str, Any]:
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": str(block.get("text") or "")}
    if kind == "image":
        source = block.get("source") or {}
        if source.get("type") == "base64":
            url = f"data:{source.get('media_type')};base64,{source.get('data')}"
        else:
            url = str(source.get("url") or "")
        return {"type": "image_url", "image_url": {"url": url}}
    return {key: value for key, value in block.items() if key != "cache_control"}


def _content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]] | None:
    """One text block as a plain string (as a chat client sends it), several parts as a list."""
    if not parts:
        return None
    if len(parts) == 1 and parts[0]["type"] == "text":
        return str(parts[0]["text"])
    return list(parts)


def message(
    body: dict[str, Any],
    answer: str | None,
    tool_call: tuple[str, str] | None,
    prompt_tokens: int,
    output_tokens: int,
    stop_reason: str,
) -> dict[str, Any]:
    """The answer to a Messages request: one text block, or one `tool_use` block (the tool's
    arguments, a JSON object, as its `input`)."""
    if tool_call is not None:
        block: dict[str, Any] = {
            "type": "tool_use",
            "id": f"toolu_{uuid.uuid4().hex}",
            "name": tool_call[0],
            "input": json.loads(tool_call[1] or "{}"),
        }
    else:
        block = {"type": "text", "text": answer or ""}
    return {
        "id": f"msg_{uuid.uuid4().hex}",
        "type": "message",
        "role": "assistant",
        "model": str(body.get("model") or "fake"),
        "content": [block],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": _usage(prompt_tokens, output_tokens),
    }


def _usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def message_events(answer: dict[str, Any]) -> list[Event]:
    """An answer as the event stream Anthropic sends: `message_start` (no content yet), `ping`,
    each block started, its text (or its input's JSON) in word deltas and stopped,
    `message_delta` with the stop reason and output tokens, `message_stop`."""
    usage = answer["usage"]
    started = {
        **answer,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1},
    }
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": started},
        {"type": "ping"},
    ]
    for index, block in enumerate(answer["content"]):
        if block["type"] == "tool_use":
            opened = {**block, "input": {}}
            pieces = WORD_PATTERN.findall(json.dumps(block["input"], ensure_ascii=False))
            deltas = [{"type": "input_json_delta", "partial_json": piece} for piece in pieces]
        else:
            opened = {"type": "text", "text": ""}
            words = WORD_PATTERN.findall(block["text"])
            deltas = [{"type": "text_delta", "text": word} for word in words]
        events.append({"type": "content_block_start", "index": index, "content_block": opened})
        events.extend({"type": "content_block_delta", "index": index, "delta": d} for d in deltas)
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": answer["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": usage["output_tokens"]},
        }
    )
    events.append({"type": "message_stop"})
    return [(event["type"], event) for event in events]


def error_body(status: int, message: str | None = None) -> dict[str, Any]:
    """Anthropic's error body for `status` (`overloaded_error` for 529, `rate_limit_error` for
    429, ...), with `message` instead of the status's usual one when given."""
    kind, usual = _ERROR_TYPES.get(status, ("api_error", f"Injected error {status}."))
    return {"type": "error", "error": {"type": kind, "message": message or usual}}


def context_error(
    window: int, prompt_tokens: int, max_tokens: int | None, detailed: bool
) -> dict[str, Any]:
    """The 400 Anthropic answers a request over the window: the prompt alone too long, or the
    prompt fitting but not with `max_tokens` more (both messages litellm maps to
    `ContextWindowExceededError`)."""
    if not detailed:
        text = "prompt is too long"
    elif prompt_tokens > window or not max_tokens:
        text = f"prompt is too long: {prompt_tokens} tokens > {window} maximum"
    else:
        text = (
            f"input length and `max_tokens` exceed context limit: {prompt_tokens} + "
            f"{max_tokens} > {window}, decrease input length or `max_tokens` and try again"
        )
    return error_body(400, text)
