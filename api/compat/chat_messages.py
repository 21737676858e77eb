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
from api.validation_words import located_errors

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
    if shape.get("tool_calls") == []:
        del shape["tool_calls"]
    elif isinstance(shape.get("tool_calls"), list):
        # anything but a call object is left as sent, for the check to refuse
        shape["tool_calls"] = [
            {"id": call.get("id"), "type": "function", "function": call.get("function")}
            if isinstance(call, Mapping)
            else call
            for call in shape["tool_calls"]
        ]
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
            errors = [{**error, "loc": ("body", *error["loc"])} for error in exc.errors()]
            location, words = located_errors(errors, message)[0]
            param = _param(index, location[1:])
            said = f"{param}: {words}"
            raise OpenAIError(400, said, param=param, code=VALIDATION_FAILED) from None
        counted.append(new_message(given, max_bytes, index))
    return counted


def _param(index: int, location: Sequence[str | int]) -> str:
    """`messages[3].content[0].text`: the field at fault, as OpenAI writes a `param`."""
    param = f"messages[{index}]"
    for part in location:
        param += f"[{part}]" if isinstance(part, int) else f".{part}"
    return param
