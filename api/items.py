"""OpenAI Responses API items: checks, the chat projection, and the two format conversions.

A Responses session stores each item verbatim. The summarizer, the cut rules and the tool
pair logic read chat messages, so every item has a `projection` in chat shape; it may
abbreviate, but it never shows opaque fields. The format conversions (`item_to_chat`,
`chat_to_items`) are exact or refused: a conversion that would lose or invent data raises
`Unfaithful`. Pure functions over JSON values: no database, no HTTP.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeGuard

from api.compaction_items import compacted_summary
from api.json_values import check_json_value

JSON = dict[str, Any]

MESSAGE_ROLES = ("user", "assistant", "system", "developer")
"""Roles of a Responses message item: tool results are items of their own, not a role."""

BOOKKEEPING_KEYS = frozenset({"type", "id", "status"})
"""Keys the API adds to an item; they carry no conversation content, so conversions may drop
them."""

OPAQUE_KEYS = frozenset({"encrypted_content", "file_data"})
"""Fields only the API can read: a summarizer would pay tokens for them and learn nothing."""

BASE64_MIN_CHARS = 256
"""A string this long of base64 characters (or a base64 data URL) is a payload, not text: a
projection shows its size instead. Shorter ids and hashes stay readable."""

IMAGE_DETAILS = ("auto", "low", "high")
"""The `detail` values both APIs share."""

_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
_BASE64 = re.compile(r"[A-Za-z0-9+/=_-]+")


class Unfaithful(ValueError):
    """A format conversion that cannot be made without losing or inventing data."""


def _typed(kind: str) -> JSON:
    return {"required": ["type"], "properties": {"type": {"const": kind}}}


_NON_EMPTY: JSON = {"type": "string", "minLength": 1}
_MESSAGE: JSON = {
    "required": ["role", "content"],
    "properties": {
        "role": {"enum": list(MESSAGE_ROLES)},
        "content": {
            "anyOf": [
                {"type": "string"},
                {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["type"],
                        "properties": {"type": _NON_EMPTY},
                    },
                },
            ]
        },
    },
}
ITEM_SCHEMA: JSON = {
    "properties": {"type": _NON_EMPTY},
    "anyOf": [{"required": ["type"]}, {"required": ["role"]}],
    "allOf": [
        {"if": _typed("message"), "then": _MESSAGE},
        {"if": {"not": {"required": ["type"]}}, "then": _MESSAGE},
        {
            "if": _typed("function_call"),
            "then": {
                "required": ["call_id", "name", "arguments"],
                "properties": {
                    "call_id": _NON_EMPTY,
                    "name": _NON_EMPTY,
                    "arguments": {"type": "string"},
                },
            },
        },
        {
            "if": _typed("function_call_output"),
            "then": {
                "required": ["call_id", "output"],
                "properties": {
                    "call_id": _NON_EMPTY,
                    "output": {"anyOf": [{"type": "string"}, {"type": "array"}]},
                },
            },
        },
        {
            "if": _typed("reasoning"),
            "then": {"properties": {"summary": {"type": "array", "items": {"type": "object"}}}},
        },
    ],
}
"""`check_item`'s rules as JSON Schema, for the OpenAPI document."""


def check_item(item: Any, where: str) -> None:
    """Refuse what the Responses API could not take back as an input item, before storing it."""
    if not isinstance(item, dict):
        raise ValueError(f"{where}: an item must be a JSON object")
    kind = item.get("type")
    if "type" in item and not _filled(kind):
        raise ValueError(f"{where}: type must be a non-empty string")
    if kind == "message" or (kind is None and "role" in item):
        _check_message(item, where)
    elif kind is None:
        raise ValueError(f"{where}: an item needs a type or a role")
    elif kind == "function_call":
        for key in ("call_id", "name"):
            if not _filled(item.get(key)):
                raise ValueError(f"{where}: a function_call needs a non-empty string {key}")
        if not isinstance(item.get("arguments"), str):
            raise ValueError(f"{where}: a function_call needs arguments as a JSON string")
    elif kind == "function_call_output":
        if not _filled(item.get("call_id")):
            raise ValueError(f"{where}: a function_call_output needs a non-empty string call_id")
        if not isinstance(item.get("output"), str | list):
            raise ValueError(f"{where}: a function_call_output needs output as a string or list")
    elif kind == "reasoning" and "summary" in item:
        summary = item["summary"]
        if not (isinstance(summary, list) and all(isinstance(p, dict) for p in summary)):
            raise ValueError(f"{where}: a reasoning summary must be a list of objects")
    check_json_value(item, where)


def _check_message(item: JSON, where: str) -> None:
    if item.get("role") not in MESSAGE_ROLES:
        raise ValueError(f"{where}: role must be one of {', '.join(MESSAGE_ROLES)}")
    content = item.get("content")
    if not isinstance(content, str | list):
        raise ValueError(f"{where}: content must be a string or a list of parts")
    for index, part in enumerate(content if isinstance(content, list) else ()):
        if not (isinstance(part, dict) and _filled(part.get("type"))):
            raise ValueError(f"{where}.content[{index}]: a part must be an object with a type")


def projection(item: JSON) -> JSON:
    """The (checked) item as the chat message the summarizer, cuts and tool pairing read."""
    kind = item.get("type")
    if kind in (None, "message"):
        content = item.get("content")
        if isinstance(content, list):
            content = [_chat_part(part) for part in content]
        return {"role": item.get("role"), "content": content}
    if kind == "function_call":
        return _tool_call(str(item.get("call_id")), str(item.get("name")), item.get("arguments"))
    if kind == "function_call_output":
        return _tool_result(str(item.get("call_id")), _output_text(item.get("output")))
    if kind == "reasoning":
        return {"role": "assistant", "content": _reasoning_text(item)}
    compacted = compacted_summary(item) if kind == "compaction" else None
    if compacted is not None:
        return {"role": "system", "content": compacted.heading}
    call_id = item.get("call_id")
    if isinstance(kind, str) and _filled(call_id):
        if kind.endswith("_call_output"):
            output = item["output"] if "output" in item else _without(item, {"call_id"})
            text = output if isinstance(output, str) else _compact(_readable(output))
            return _tool_result(call_id, text)
        if kind.endswith("_call"):
            name = item.get("name")
            arguments = _without(item, {"call_id", "name"} if _filled(name) else {"call_id"})
            return _tool_call(
                call_id, name if _filled(name) else kind, _compact(_readable(arguments))
            )
    return {"role": "assistant", "content": _tagged(item)}


def _chat_part(part: JSON) -> JSON:
    kind = part.get("type")
    if kind in _TEXT_PARTS:
        return {"type": "text", "text": _as_text(part.get("text"))}
    if kind == "refusal":
        return {"type": "text", "text": f"[refusal] {_as_text(part.get('refusal'))}"}
    if kind == "input_image" and isinstance(part.get("image_url"), str):
        image = {"url": part["image_url"]}
        if part.get("detail") is not None:
            image["detail"] = part["detail"]  # the token count reads it
        return {"type": "image_url", "image_url": image}
    return {"type": "text", "text": _tagged(part)}


def _output_text(output: Any) -> str:
    """A tool output as text: text parts as their text, any other part tagged."""
    if isinstance(output, list):
        return "\n".join(_output_text(part) for part in output)
    if isinstance(output, dict):
        text = output.get("text")
        return _as_text(text) if output.get("type") in _TEXT_PARTS else _tagged(output)
    return output if isinstance(output, str) else _compact(_readable(output))


def _reasoning_text(item: JSON) -> str:
    """Only the summary: `content` and `encrypted_content` are the model's, not the reader's."""
    summary = item.get("summary")
    parts = summary if isinstance(summary, list) else []
    texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return "[reasoning] " + "\n".join(texts) if texts else "[reasoning, no readable summary]"


def _tagged(value: JSON) -> str:
    """`[<type>] <compact JSON of the rest>`: how a projection shows what chat has no shape for."""
    return f"[{value.get('type')}] {_compact(_readable(_without(value, set())))}"


def _readable(value: Any) -> Any:
    """`value` without opaque fields, base64 payloads replaced by their size."""
    if isinstance(value, dict):
        return {key: _readable(item) for key, item in value.items() if key not in OPAQUE_KEYS}
    if isinstance(value, list):
        return [_readable(item) for item in value]
    if isinstance(value, str) and len(value) >= BASE64_MIN_CHARS:
        data_url = value.startswith("data:") and ";base64," in value[:200]
        if data_url or _BASE64.fullmatch(value):
            return f"[base64 data, {len(value)} characters]"
    return value


def item_to_chat(item: JSON, where: str) -> JSON:
    """The item as an OpenAI chat message (for `format=openai`), or `Unfaithful`. A compaction
    item Precis made is the summary it carries, as a context shows a summary."""
    kind = item.get("type")
    compacted = compacted_summary(item) if kind == "compaction" else None
    if compacted is not None:
        return {"role": "system", "content": compacted.heading}
    if kind in (None, "message"):
        _only(item, {"role", "content"} | BOOKKEEPING_KEYS, where)
        role, content = item.get("role"), item.get("content")
        if role not in MESSAGE_ROLES:
            raise Unfaithful(f"{where}: role {role!r} has no chat-completions shape")
        if isinstance(content, list) and content:
            parts = [
                _exact_chat_part(p, role, f"{where}.content[{i}]") for i, p in enumerate(content)
            ]
            return {"role": role, "content": parts}
        if not isinstance(content, str):
            raise Unfaithful(f"{where}: content must be a string or a non-empty list of parts")
        return {"role": role, "content": content}
    if kind == "function_call":
        _only(item, {"call_id", "name", "arguments"} | BOOKKEEPING_KEYS, where)
        call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
        if not (_filled(call_id) and _filled(name) and isinstance(arguments, str)):
            raise Unfaithful(f"{where}: a function_call needs string call_id, name, arguments")
        return _tool_call(call_id, name, arguments)
    if kind == "function_call_output":
        _only(item, {"call_id", "output"} | BOOKKEEPING_KEYS, where)
        call_id, output = item.get("call_id"), item.get("output")
        if not _filled(call_id):
            raise Unfaithful(f"{where}: a function_call_output needs a string call_id")
        if isinstance(output, list) and output:
            # A chat tool message takes text parts: kept as parts, so no boundary is lost.
            kinds = ("input_text",)
            output = [_exact_text(p, kinds, f"{where}.output[{i}]") for i, p in enumerate(output)]
        elif not isinstance(output, str):
            raise Unfaithful(f"{where}: output must be a string or a non-empty list of text parts")
        return _tool_result(call_id, output)
    raise Unfaithful(f"{where}: a {kind} item has no chat-completions shape")


def _exact_chat_part(part: Any, role: str, where: str) -> JSON:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in ("input_text", "output_text"):
        return _exact_text(part, ("input_text", "output_text"), where)
    if kind != "input_image":
        raise Unfaithful(f"{where}: a {kind} part has no chat-completions shape")
    if role != "user":
        raise Unfaithful(f"{where}: chat-completions takes images in user messages only")
    _only(part, {"type", "image_url", "detail"}, where)
    url, detail = part.get("image_url"), part.get("detail")
    if not _filled(url) or detail not in (None, *IMAGE_DETAILS):
        raise Unfaithful(f"{where}: an image needs an image_url and a detail chat-completions has")
    image = {"url": url} if detail is None else {"url": url, "detail": detail}
    return {"type": "image_url", "image_url": image}


def _exact_text(part: Any, kinds: tuple[str, ...], where: str) -> JSON:
    """A text part as a chat text part; only empty annotations and logprobs may go."""
    kind = part.get("type") if isinstance(part, dict) else None
    if kind not in kinds or not isinstance(part.get("text"), str):
        raise Unfaithful(f"{where}: a {kind} part has no chat-completions shape here")
    _only(part, {"type", "text", "annotations", "logprobs"}, where)
    if part.get("annotations"):
        raise Unfaithful(f"{where}: chat-completions has no field for annotations")
    return {"type": "text", "text": part["text"]}


def chat_to_items(message: JSON, where: str) -> list[JSON]:
    """The stored chat message as Responses input items (for `format=responses`)."""
    if message.get("name") is not None:
        raise Unfaithful(f"{where}: a message with a name; Responses input has no names")
    present = {key: value for key, value in message.items() if value is not None}
    _only(present, {"role", "content", "tool_calls", "tool_call_id"}, where)
    role, content = message.get("role"), message.get("content")
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not _filled(call_id) or message.get("tool_calls"):
            raise Unfaithful(f"{where}: a tool message needs a tool_call_id and no tool_calls")
        output = _item_content(content, "tool", where)
        return [{"type": "function_call_output", "call_id": call_id, "output": output}]
    if role not in MESSAGE_ROLES or message.get("tool_call_id") is not None:
        raise Unfaithful(f"{where}: role {role!r} with these fields has no Responses shape")
    calls = message.get("tool_calls") or []
    if calls and role != "assistant":
        raise Unfaithful(f"{where}: only an assistant message may carry tool_calls")
    items: list[JSON] = []
    if not calls or content not in (None, "", []):
        items.append(
            {"type": "message", "role": role, "content": _item_content(content, role, where)}
        )
    for index, call in enumerate(calls):
        items.append(_function_call_item(call, f"{where}.tool_calls[{index}]"))
    return items


def _item_content(content: Any, role: str, where: str) -> str | list[JSON]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise Unfaithful(f"{where}: content must be a string or a list of parts")
    parts: list[JSON] = []
    for index, part in enumerate(content):
        here = f"{where}.content[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            _only(part, {"type", "text"}, here)
            if role == "assistant":
                parts.append({"type": "output_text", "text": part["text"], "annotations": []})
            else:
                parts.append({"type": "input_text", "text": part["text"]})
        elif kind == "image_url" and role == "user" and isinstance(part.get("image_url"), dict):
            _only(part, {"type", "image_url"}, here)
            _only(part["image_url"], {"url", "detail"}, here)
            url, detail = part["image_url"].get("url"), part["image_url"].get("detail")
            if not _filled(url):
                raise Unfaithful(f"{here}: an image part needs a url")
            parts.append({"type": "input_image", "image_url": url, "detail": detail or "auto"})
        else:
            raise Unfaithful(f"{here}: a {kind} part in a {role} message has no Responses shape")
    return parts


def _function_call_item(call: Any, where: str) -> JSON:
    function = call.get("function") if isinstance(call, dict) else None
    if not (isinstance(function, dict) and call.get("type", "function") == "function"):
        raise Unfaithful(f"{where}: only function tool calls have a Responses shape")
    _only(call, {"id", "type", "function"}, where)
    _only(function, {"name", "arguments"}, where)
    name, arguments = function.get("name"), function.get("arguments")
    if not (_filled(call.get("id")) and _filled(name) and isinstance(arguments, str)):
        raise Unfaithful(f"{where}: a tool call needs a string id, name and arguments")
    return {"type": "function_call", "call_id": call["id"], "name": name, "arguments": arguments}


def developer_item(text: str) -> JSON:
    """How a summary or the truncation marker appears in the `responses` format."""
    return {"type": "message", "role": "developer", "content": text}


def missing_output(call_id: str, text: str, call_type: str = "function_call") -> JSON:
    """The placeholder output of a call whose output is not in the window: a `<type>_output`
    item answering a `<type>` call (`function_call_output`, `custom_tool_call_output`, ...)."""
    kind = call_type if call_type.endswith("_call") else "function_call"
    return {"type": f"{kind}_output", "call_id": call_id, "output": text}


def joins_next(text: str) -> bool:
    """Whether a stored item (its JSON text) must stay with the item after it: a `reasoning`
    item, which the Responses API refuses without the item it led to."""
    return parse_item(text).get("type") == "reasoning"


def item_text(item: JSON) -> str:
    """The item as stored: compact JSON, key order and non-ASCII text kept as given."""
    return json.dumps(item, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def parse_item(text: str) -> JSON:
    """The item `item_text` stored (json keeps key order, so the round trip is exact)."""
    item = json.loads(text)
    if not isinstance(item, dict):
        raise ValueError("a stored item must be a JSON object")
    return item


def _tool_call(call_id: str, name: str, arguments: Any) -> JSON:
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def _tool_result(call_id: str, content: Any) -> JSON:
    return {"role": "tool", "content": content, "tool_call_id": call_id}


def _only(value: JSON, allowed: set[str] | frozenset[str], where: str) -> None:
    """Refuse a key the target format has no field for: dropping it would lose data."""
    for key in value:
        if key not in allowed:
            raise Unfaithful(f"{where}: the field {key!r} has no place in the target format")


def _without(value: JSON, keys: set[str]) -> JSON:
    return {key: item for key, item in value.items() if key not in keys | BOOKKEEPING_KEYS}


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else _compact(_readable(value))


def _filled(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and bool(value)
