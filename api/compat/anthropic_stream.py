"""Anthropic's streamed Message from a stream of OpenAI `chat.completion.chunk` dicts.

The events come in Anthropic's order: `message_start`, then for each content block its
`content_block_start`, deltas and `content_block_stop`, then `message_delta` (the stop reason
and the usage) and `message_stop`. A block opens when the kind of output changes: text, or a
tool call with a new `index`. OpenAI streams a call's argument fragments before the next call
starts; a fragment for an earlier call (no known provider sends one) is still sent, as a delta
at that call's block after its stop, so that the client's input is whole. Reasoning deltas are
dropped, as thinking blocks are from the stored conversation.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from typing import Any

from api.compat.anthropic_shapes import (
    JSON,
    anthropic_message,
    message_id,
    new_tool_use_id,
)

TEXT = "text"
"""The key of an open text block; a tool call's block is keyed by the call's index."""


class AnthropicStream:
    """One streamed reply: `feed` each chunk, then `finish` (or iterate `events(chunks)`).

    `message()` after the end is the Message `anthropic_message` gives for the same reply
    (`completion()`), the one to store. `input_tokens` is sent in `message_start` until the
    last chunk's usage says it.
    """

    def __init__(self, model: str, input_tokens: int = 0) -> None:
        self.model = model
        self.input_tokens = input_tokens
        self._id: str | None = None
        self._text: list[str] = []
        self._calls: dict[int, JSON] = {}
        self._call_blocks: dict[int, int] = {}
        self._open: str | int | None = None
        self._blocks = 0
        self._finish_reason: str | None = None
        self._usage: JSON | None = None
        self._finished = False

    async def events(self, chunks: AsyncIterable[Mapping[str, Any]]) -> AsyncIterator[JSON]:
        """Every event of the reply, the last `message_stop`."""
        async for chunk in chunks:
            for event in self.feed(chunk):
                yield event
        for event in self.finish():
            yield event

    def feed(self, chunk: Mapping[str, Any]) -> list[JSON]:
        """The events one chunk makes (`message_start` with the first)."""
        if self._finished:
            raise RuntimeError("the stream has finished")
        events = self._start(chunk.get("id"))
        if chunk.get("usage"):
            self._usage = dict(chunk["usage"])
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if isinstance(text, str) and text:
                events += self._text_delta(text)
            for call in delta.get("tool_calls") or ():
                events += self._call_delta(call)
            if choice.get("finish_reason"):
                self._finish_reason = choice["finish_reason"]
        return events

    def finish(self) -> list[JSON]:
        """The closing events: the open block's stop, `message_delta`, `message_stop`."""
        if self._finished:
            return []
        events = self._start(None) + self._close()
        self._finished = True
        message = self.message()
        delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
        events.append({"type": "message_delta", "delta": delta, "usage": message["usage"]})
        events.append({"type": "message_stop"})
        return events

    def completion(self) -> JSON:
        """The reply so far as one OpenAI `chat.completion`."""
        if self._id is None:
            self._id = message_id(None)
        message: JSON = {"role": "assistant", "content": "".join(self._text) or None}
        if self._calls:
            message["tool_calls"] = [copy.deepcopy(self._calls[i]) for i in sorted(self._calls)]
        usage = self._usage or {
            "prompt_tokens": self.input_tokens,
            "completion_tokens": 0,
            "total_tokens": self.input_tokens,
        }
        return {
            "id": self._id,
            "object": "chat.completion",
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish_reason}],
            "usage": usage,
        }

    def message(self) -> JSON:
        """The reply as Anthropic's Message."""
        return anthropic_message(self.completion(), self.model)

    def _start(self, chunk_id: Any) -> list[JSON]:
        if self._id is not None:
            return []
        self._id = message_id(chunk_id)
        usage = {
            "input_tokens": self.input_tokens,
            "output_tokens": 0,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        message: JSON = {
            "id": self._id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        return [{"type": "message_start", "message": message}]

    def _open_block(self, key: str | int, block: JSON) -> list[JSON]:
        if self._open == key:
            return []
        events = self._close()
        self._open = key
        self._blocks += 1
        return [
            *events,
            {"type": "content_block_start", "index": self._index, "content_block": block},
        ]

    @property
    def _index(self) -> int:
        return self._blocks - 1

    def _close(self) -> list[JSON]:
        if self._open is None:
            return []
        self._open = None
        return [{"type": "content_block_stop", "index": self._index}]

    def _text_delta(self, text: str) -> list[JSON]:
        events = self._open_block(TEXT, {"type": "text", "text": ""})
        self._text.append(text)
        delta = {"type": "text_delta", "text": text}
        return [*events, {"type": "content_block_delta", "index": self._index, "delta": delta}]

    def _call_delta(self, call: Mapping[str, Any]) -> list[JSON]:
        position = call.get("index")
        if not isinstance(position, int):
            # no index: a chunk with an id starts the next call, one without continues the last
            position = max(self._calls, default=-1) + (0 if call.get("id") is None else 1)
        function = call.get("function") or {}
        events: list[JSON] = []
        if position not in self._calls:
            call_id, name = call.get("id") or new_tool_use_id(), function.get("name") or ""
            self._calls[position] = {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
            block: JSON = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
            events += self._open_block(position, block)
            self._call_blocks[position] = self._index
        fragment = function.get("arguments")
        if isinstance(fragment, str) and fragment:
            self._calls[position]["function"]["arguments"] += fragment
            delta = {"type": "input_json_delta", "partial_json": fragment}
            index = self._call_blocks[position]
            events.append({"type": "content_block_delta", "index": index, "delta": delta})
        return events


def sse_event(event: Mapping[str, Any]) -> str:
    """One event as Anthropic frames it on the wire: its type, then its JSON."""
    data = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
    return f"event: {event['type']}\ndata: {data}\n\n"
