"""Anthropic's Messages API in OpenAI chat shapes and back: pure translations for the
`/v1/messages` wire (the model is called elsewhere, in OpenAI's shape, through litellm).

What a client can notice:

- a `system` given as blocks is one system message, their texts joined by a blank line (they
  are separate sections: instructions, a document);
- an assistant turn's text blocks are joined with nothing between them (they are pieces of one
  reply, split around citations or tool calls); its `thinking` and `redacted_thinking` blocks
  are dropped, as the stored conversation keeps no reasoning;
- a `tool_result` is a `tool` message placed before the rest of its user turn (OpenAI wants a
  call's result right after the call); its content is text: text blocks joined by a blank line,
  an image as `[image]`, the whole prefixed with `Error: ` when `is_error` is true;
- `cache_control`, `citations` and other per-block options are not kept;
- a tool call's arguments that are not a JSON object come back as `{"_raw": arguments}`;
- a reply with tool calls stops for `tool_use` unless it was cut short (`length`) or filtered;
- `input_tokens` leaves out the cached tokens, which OpenAI's `prompt_tokens` includes and
  Anthropic counts apart (`cache_read_input_tokens`, `cache_creation_input_tokens`).

Anything a client sent that has no OpenAI shape raises `ValueError` naming where it is.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from typing import Any

JSON = dict[str, Any]

SECTION_SEPARATOR = "\n\n"
"""Between the texts of a list `system` and of a `tool_result`'s blocks."""

IMAGE_NOTE = "[image]"
"""An image in a `tool_result`: a `tool` message holds text only."""

ERROR_PREFIX = "Error: "
"""Before the text of a `tool_result` whose `is_error` is true."""

DROPPED_BLOCKS = frozenset({"thinking", "redacted_thinking"})
"""Assistant blocks the stored conversation does not keep."""

PASSED_THROUGH = ("max_tokens", "temperature", "top_p", "top_k")
"""Request fields litellm takes under the same name."""

STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
"""OpenAI's `finish_reason` as Anthropic's `stop_reason`; any other is `end_turn`."""

TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
"""Anthropic's `tool_choice` types as OpenAI's (`tool` names a function)."""

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
"""Anthropic's error `type` by status (its errors page; 402 and 504 from its SDK's types). Any
other 4xx is `invalid_request_error` and any other 5xx `api_error`, as Anthropic answers."""

MESSAGE_ID_PREFIX = "msg_"
TOOL_USE_ID_PREFIX = "toolu_"

_ID_PREFIX = re.compile(r"^[A-Za-z]+[-_]")
"""The kind an id starts with: `chatcmpl-`, `msg_`, `gen-`."""
_NOT_ID = re.compile(r"[^A-Za-z0-9]")


def request_messages(body: Mapping[str, Any]) -> list[JSON]:
    """The request's `system` and `messages` as OpenAI chat messages, in order."""
    messages: list[JSON] = []
    system = _system_text(body.get("system"))
    if system:
        messages.append({"role": "system", "content": system})
    turns = body.get("messages")
    if not isinstance(turns, list):
        raise ValueError("messages: expected a list of messages")
    for index, turn in enumerate(turns):
        where = f"messages[{index}]"
        role = turn.get("role") if isinstance(turn, Mapping) else None
        if role == "user":
            messages.extend(_user_turn(turn.get("content"), where))
        elif role == "assistant":
            messages.append(_assistant_turn(turn.get("content"), where))
        elif role == "system":
            # a system turn between the others, as newer clients send one
            messages.append({"role": "system", "content": _system_text(turn.get("content")) or ""})
        else:
            raise ValueError(
                f"{where}.role: expected 'user', 'assistant' or 'system', got {role!r}"
            )
    return messages


def message_places(body: Mapping[str, Any]) -> list[str]:
    """Where each of `request_messages`'s chat messages comes from in the request (`system`,
    `messages[3]`): a turn may become several (its tool results one each)."""
    places = ["system"] if _system_text(body.get("system")) else []
    for index, turn in enumerate(body.get("messages") or ()):
        places += [f"messages[{index}]"] * len(request_messages({"messages": [turn]}))
    return places


def assistant_chat_message(message: Mapping[str, Any]) -> JSON:
    """The OpenAI chat message stored for an Anthropic assistant Message: what
    `request_messages` makes of the same content resent as an assistant turn."""
    return _assistant_turn(message.get("content"), "message")


def request_tools(tools: Any) -> list[JSON] | None:
    """Anthropic's custom tools as OpenAI function tools; None when there are none."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise ValueError("tools: expected a list of tools")
    return [_function_tool(tool, f"tools[{index}]") for index, tool in enumerate(tools)] or None


def request_tool_choice(choice: Any) -> str | JSON | None:
    """Anthropic's `tool_choice` as OpenAI's."""
    if choice is None:
        return None
    kind = choice.get("type") if isinstance(choice, Mapping) else None
    if kind == "tool":
        return {"type": "function", "function": {"name": _string(choice, "name", "tool_choice")}}
    if isinstance(kind, str) and kind in TOOL_CHOICES:
        return TOOL_CHOICES[kind]
    if not isinstance(choice, Mapping):
        raise ValueError('tool_choice: must be an object such as {"type": "auto"}')
    raise ValueError(f"tool_choice: type {kind!r} is not one of auto, any, tool, none")


def completion_params(body: Mapping[str, Any]) -> JSON:
    """The litellm parameters of an Anthropic request, but `model` and `messages`.

    A streamed request asks for usage in the last chunk (`stream_options.include_usage`);
    `tool_choice.disable_parallel_tool_use` is `parallel_tool_calls: false`. Other fields
    (`thinking`, `service_tier`, ...) are not translated.
    """
    params: JSON = {key: body[key] for key in PASSED_THROUGH if body.get(key) is not None}
    if body.get("stop_sequences"):
        params["stop"] = list(body["stop_sequences"])
    metadata = body.get("metadata")
    if isinstance(metadata, Mapping) and metadata.get("user_id") is not None:
        params["user"] = metadata["user_id"]
    tools = request_tools(body.get("tools"))
    if tools is not None:
        params["tools"] = tools
    choice = body.get("tool_choice")
    openai_choice = request_tool_choice(choice)
    if openai_choice is not None:
        params["tool_choice"] = openai_choice
    if tools and isinstance(choice, Mapping) and choice.get("disable_parallel_tool_use") is True:
        params["parallel_tool_calls"] = False
    params["stream"] = body.get("stream") is True
    if params["stream"]:
        params["stream_options"] = {"include_usage": True}
    return params


def anthropic_message(completion: Mapping[str, Any], model: str) -> JSON:
    """An OpenAI `chat.completion` (its first choice) as Anthropic's Message."""
    choices = completion.get("choices") or [{}]
    choice = choices[0]
    message = choice.get("message") or {}
    content: list[JSON] = []
    text = message.get("content")
    if isinstance(text, str) and text:
        content.append({"type": "text", "text": text})
    calls = message.get("tool_calls") or []
    content.extend(_tool_use(call) for call in calls)
    return {
        "id": message_id(completion.get("id")),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason(choice.get("finish_reason"), bool(calls)),
        "stop_sequence": None,
        "usage": anthropic_usage(completion.get("usage")),
    }


def message_id(completion_id: Any) -> str:
    """`msg_` and the letters and digits of the completion's id after its kind; a new id when
    that leaves nothing (a `msg_` id stays as it is)."""
    tail = ""
    if isinstance(completion_id, str):
        tail = _NOT_ID.sub("", _ID_PREFIX.sub("", completion_id))
    return MESSAGE_ID_PREFIX + (tail or uuid.uuid4().hex)


def new_tool_use_id() -> str:
    """The id of a tool call the model gave none."""
    return TOOL_USE_ID_PREFIX + uuid.uuid4().hex


def stop_reason(finish_reason: Any, has_tool_calls: bool) -> str:
    """Anthropic's `stop_reason` for OpenAI's `finish_reason`."""
    if has_tool_calls and finish_reason not in ("length", "content_filter"):
        return "tool_use"
    if not isinstance(finish_reason, str):
        return "end_turn"
    return STOP_REASONS.get(finish_reason, "end_turn")


def anthropic_usage(usage: Mapping[str, Any] | None) -> JSON:
    """OpenAI's `usage` as Anthropic's: cache reads from `cache_read_input_tokens` (litellm)
    or `prompt_tokens_details.cached_tokens`, cache writes from `cache_creation_input_tokens`
    or `prompt_tokens_details.cache_write_tokens`; 0 for what is not reported."""
    usage = usage or {}
    details = usage.get("prompt_tokens_details") or {}
    read = _count(usage.get("cache_read_input_tokens"), details.get("cached_tokens"))
    written = _count(usage.get("cache_creation_input_tokens"), details.get("cache_write_tokens"))
    return {
        "input_tokens": max(_count(usage.get("prompt_tokens")) - read - written, 0),
        "output_tokens": _count(usage.get("completion_tokens")),
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": read,
    }


def tool_input(arguments: Any) -> JSON:
    """A tool call's arguments as a tool_use `input`: `{}` when empty, `{"_raw": arguments}`
    when they are not a JSON object."""
    if not isinstance(arguments, str) or not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        return {"_raw": arguments}
    return value if isinstance(value, dict) else {"_raw": arguments}


def error_body(status: int, message: str) -> JSON:
    """Anthropic's error shape (also its stream's `error` event) for an answer's status."""
    kind = ERROR_TYPES.get(status) or ("api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def _count(*values: Any) -> int:
    return next((v for v in values if isinstance(v, int) and not isinstance(v, bool)), 0)


def _string(value: Mapping[str, Any], key: str, where: str) -> str:
    found = value.get(key)
    if not isinstance(found, str):
        raise ValueError(f"{where}.{key}: expected a string")
    return found


def _blocks(content: Any, where: str) -> list[tuple[str, Mapping[str, Any]]]:
    """The content's blocks, each with where it is; each must have a type."""
    if not isinstance(content, list):
        raise ValueError(f"{where}: expected a string or a list of content blocks")
    found: list[tuple[str, Mapping[str, Any]]] = []
    for index, block in enumerate(content):
        here = f"{where}[{index}]"
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            raise ValueError(f"{here}: expected a content block with a type")
        found.append((here, block))
    return found


def _unsupported(where: str, kind: str, inside: str) -> ValueError:
    return ValueError(f"{where}: a {kind!r} block is not supported in {inside}")


def _system_text(system: Any) -> str | None:
    if system is None or isinstance(system, str):
        return system or None
    texts = []
    for here, block in _blocks(system, "system"):
        if block["type"] != "text":
            raise _unsupported(here, block["type"], "system")
        texts.append(_string(block, "text", here))
    return SECTION_SEPARATOR.join(texts) or None


def _user_turn(content: Any, where: str) -> list[JSON]:
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    results: list[JSON] = []
    parts: list[JSON] = []
    for here, block in _blocks(content, f"{where}.content"):
        kind = block["type"]
        if kind == "tool_result":
            results.append(_tool_message(block, here))
        elif kind == "text":
            parts.append({"type": "text", "text": _string(block, "text", here)})
        elif kind == "image":
            parts.append(_image_part(block, here))
        else:
            raise _unsupported(here, kind, "a user message")
    if not results and not parts:
        raise ValueError(f"{where}.content: expected at least one content block")
    if not parts:
        return results
    if len(parts) == 1 and parts[0]["type"] == "text":
        return [*results, {"role": "user", "content": parts[0]["text"]}]
    return [*results, {"role": "user", "content": parts}]


def _image_part(block: Mapping[str, Any], where: str) -> JSON:
    source = block.get("source")
    kind = source.get("type") if isinstance(source, Mapping) else None
    here = f"{where}.source"
    if isinstance(source, Mapping) and kind == "base64":
        media_type, data = _string(source, "media_type", here), _string(source, "data", here)
        url = f"data:{media_type};base64,{data}"
    elif isinstance(source, Mapping) and kind == "url":
        url = _string(source, "url", here)
    else:
        raise ValueError(f"{here}: an image source of type {kind!r} is not supported")
    return {"type": "image_url", "image_url": {"url": url}}


def _tool_message(block: Mapping[str, Any], where: str) -> JSON:
    call_id = _string(block, "tool_use_id", where)
    content = block.get("content")
    if content is None or isinstance(content, str):
        text = content or ""
    else:
        texts = []
        for here, inner in _blocks(content, f"{where}.content"):
            if inner["type"] == "text":
                texts.append(_string(inner, "text", here))
            elif inner["type"] == "image":
                texts.append(IMAGE_NOTE)
            else:
                raise _unsupported(here, inner["type"], "a tool_result")
        text = SECTION_SEPARATOR.join(texts)
    if block.get("is_error") is True:
        text = ERROR_PREFIX + text
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _assistant_turn(content: Any, where: str) -> JSON:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts: list[str] = []
    calls: list[JSON] = []
    for here, block in _blocks(content, f"{where}.content"):
        kind = block["type"]
        if kind == "text":
            texts.append(_string(block, "text", here))
        elif kind == "tool_use":
            calls.append(_tool_call(block, here))
        elif kind not in DROPPED_BLOCKS:
            raise _unsupported(here, kind, "an assistant message")
    message: JSON = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if calls:
        message["tool_calls"] = calls
    return message


def _tool_call(block: Mapping[str, Any], where: str) -> JSON:
    arguments = block.get("input")
    if not isinstance(arguments, Mapping):
        raise ValueError(f"{where}.input: expected an object")
    return {
        "id": _string(block, "id", where),
        "type": "function",
        "function": {
            "name": _string(block, "name", where),
            "arguments": json.dumps(dict(arguments), separators=(",", ":"), sort_keys=True),
        },
    }


def _tool_use(call: Mapping[str, Any]) -> JSON:
    function = call.get("function") or {}
    return {
        "type": "tool_use",
        "id": call.get("id") or new_tool_use_id(),
        "name": function.get("name") or "",
        "input": tool_input(function.get("arguments")),
    }


def _function_tool(tool: Any, where: str) -> JSON:
    if not isinstance(tool, Mapping):
        raise ValueError(f"{where}: expected a tool object")
    kind = tool.get("type")
    if kind not in (None, "custom"):
        raise ValueError(
            f"{where}: the server tool {tool.get('name')!r} (type {kind!r}) is not supported; "
            "only custom tools are"
        )
    schema = tool.get("input_schema")
    if not isinstance(schema, Mapping):
        raise ValueError(f"{where}.input_schema: expected a JSON schema object")
    function: JSON = {"name": _string(tool, "name", where)}
    if tool.get("description") is not None:
        function["description"] = _string(tool, "description", where)
    function["parameters"] = dict(schema)
    if isinstance(tool.get("strict"), bool):
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}
