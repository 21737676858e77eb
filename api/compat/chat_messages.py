"""A wire's chat message as Precis stores it: its stored shape, checked and counted as an
append checks and counts a message."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import TypeAdapter, ValidationError

from api.append.use_case import new_message
from api.openai_errors import VALIDATION_FAILED, OpenAIError
from api.schemas.messages import MessageIn
from api.store import NewMessage

STORED_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id")
"""What a stored chat message keeps of a wire's message: what a model reads of it."""

_MESSAGE = TypeAdapter(MessageIn)


def stored_shape(message: Mapping[str, Any]) -> dict[str, Any]:
    """A wire's chat message as Precis stores it: what a model reads, without the optional
    fields SDKs add (`refusal`, `annotations`, nulls) or cache marks."""
    shape = {key: message[key] for key in STORED_KEYS if message.get(key) is not None}
    if isinstance(shape.get("content"), list):
        shape["content"] = [
            {key: value for key, value in part.items() if key != "cache_control"}
            if isinstance(part, Mapping)
            else part
            for part in shape["content"]
        ]
    if "tool_calls" in shape:
        calls = [
            {"id": call.get("id"), "type": "function", "function": call.get("function")}
            for call in shape["tool_calls"]
            if isinstance(call, Mapping)
        ]
        if calls:
            shape["tool_calls"] = calls
        else:
            del shape["tool_calls"]
    if shape.get("role") == "assistant" and "content" not in shape and "tool_calls" not in shape:
        shape["content"] = ""
    return shape


def checked(
    messages: Sequence[Mapping[str, Any]], max_bytes: int, offset: int = 0
) -> list[NewMessage]:
    """The messages checked as an append checks them (shape, size) and counted: a 400 naming
    the first one at fault (`messages[offset + i]`)."""
    counted: list[NewMessage] = []
    for index, message in enumerate(messages, start=offset):
        try:
            given = _MESSAGE.validate_python(message)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"][1:])
            param = f"messages[{index}]" + (f".{where}" if where else "")
            said = f"{param}: {error['msg']}"
            raise OpenAIError(400, said, param=param, code=VALIDATION_FAILED) from None
        counted.append(new_message(given, max_bytes, index))
    return counted
