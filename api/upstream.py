"""The model a `/v1/responses` request calls: one Responses API request through litellm.

litellm reaches any provider it knows: natively where the provider speaks the Responses API,
through chat completions for the others. Its errors come out as `ContextTooLong` (the one a
turn can recover from, by summarizing) or `UpstreamFailed` carrying the status the client
sees; neither ever holds the API key. A streamed call first mends litellm's own logging of
streams (`_keep_stream_usage_typed`), which otherwise warns on every streamed response.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from summarizer.errors import ContextWindowError, LLMRequestError
from summarizer.llm import TIMEOUT_GRACE_SECONDS, classify_error, load_litellm

LITELLM_PARAMETERS = frozenset(
    {
        "include",
        "instructions",
        "max_output_tokens",
        "metadata",
        "parallel_tool_calls",
        "reasoning",
        "service_tier",
        "store",
        "temperature",
        "text",
        "tool_choice",
        "tools",
        "top_p",
        "truncation",
        "user",
        "safety_identifier",
    }
)
"""Request fields litellm takes by name; any other field the client sent goes in the body as
it came (`extra_body`), so a provider's newer parameters pass through."""

CHAT_PARAMETERS = frozenset(
    {
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "max_completion_tokens",
        "max_tokens",
        "n",
        "parallel_tool_calls",
        "presence_penalty",
        "reasoning_effort",
        "response_format",
        "seed",
        "stop",
        "stream_options",
        "temperature",
        "tool_choice",
        "tools",
        "top_k",
        "top_logprobs",
        "top_p",
        "user",
    }
)
"""The same for a chat completion (`create_completion`)."""

RATE_LIMITED = 429
BAD_GATEWAY = 502
REFUSED_STATUSES = frozenset({400, 404, 422})
"""The model's answers that say the request was wrong: the client's own 400."""
KEY_REFUSED_STATUSES = frozenset({401, 403})
REDACTED = "[redacted]"

_IDENTIFIER = re.compile(r"[A-Za-z0-9_.\[\]-]{1,64}")
"""A provider's `param` or `code` the client is shown: an identifier, never free text."""

STREAM_USAGE_MENDED = "_precis_keeps_usage_typed"
"""Marks litellm's stream logging as mended by `_keep_stream_usage_typed` (mended once)."""

logger = logging.getLogger("precis.upstream")


@dataclass(frozen=True)
class Upstream:
    """Where the model is and how long a call may take (from the MODEL_* settings)."""

    api_base: str | None
    api_key: str | None
    timeout_seconds: float

    def redact(self, text: str) -> str:
        """`text` with the API key taken out (an error message may quote the request)."""
        return text.replace(self.api_key, REDACTED) if self.api_key else text


class ContextTooLong(Exception):
    """The model answered that the request does not fit its context window."""


class UpstreamFailed(Exception):
    """The model call failed; `status` is what the client is answered."""

    def __init__(
        self, status: int, message: str, code: str | None, param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param


def _arguments(
    upstream: Upstream,
    request: Mapping[str, Any],
    named_parameters: frozenset[str] = LITELLM_PARAMETERS,
    body: str = "input",
) -> dict[str, Any]:
    named = {key: value for key, value in request.items() if key in named_parameters}
    extra = {
        key: value
        for key, value in request.items()
        if key not in named_parameters and key not in ("model", body, "stream")
    }
    return {
        "model": request["model"],
        body: request[body],
        **named,
        **({"extra_body": extra} if extra else {}),
        "api_base": upstream.api_base,
        "api_key": upstream.api_key,
        "timeout": upstream.timeout_seconds,
        "num_retries": 0,
    }


def _identifier(value: object) -> str | None:
    return value if isinstance(value, str) and _IDENTIFIER.fullmatch(value) else None


def _unreachable(exc: BaseException, litellm: Any) -> bool:
    """No connection to the provider: litellm reports a refused one as a 500 of its own, with
    the transport's error below it."""
    current: BaseException | None = exc
    for _ in range(8):
        if current is None:
            return False
        if isinstance(current, litellm.APIConnectionError | OSError):
            return True
        current = current.__cause__ or current.__context__
    return False


def _provider_error(exc: BaseException) -> dict[str, Any]:
    """The provider's `error` object: litellm keeps the answer's body only in its message
    (`litellm.BadRequestError: OpenAIException - {"error": {...}}`)."""
    text = str(exc)
    start = text.find("{")
    try:
        body = json.loads(text[start:]) if start >= 0 else None
    except ValueError:
        return {}
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) else {}


def _failure(upstream: Upstream, exc: BaseException, litellm: Any) -> Exception:
    """Our exception for what litellm raised: the client's status, the provider's `param` and
    `code` when they are identifiers, and a message of Precis's own.

    The provider's words stay in the server log: they may quote the request, the server's
    key in any encoding, or the provider's account details."""
    error = classify_error(exc, litellm)
    status = getattr(exc, "status_code", None)
    logger.warning(
        "the model call failed (%s, status %s): %s",
        type(exc).__name__,
        status,
        upstream.redact(str(error)),
    )
    if isinstance(error, ContextWindowError):
        return ContextTooLong("the model's context window is too small for the request")
    provider = _provider_error(exc)
    param, code = _identifier(provider.get("param")), _identifier(provider.get("code"))
    if status == RATE_LIMITED:
        message = "the model's provider is rate limiting this server: retry later"
        return UpstreamFailed(RATE_LIMITED, message, code or "rate_limit", param)
    if isinstance(error, LLMRequestError) and status in REFUSED_STATUSES:
        message = f"the model's provider refused the request (HTTP {status})"
        return UpstreamFailed(400, message, code or "model_error", param)
    if isinstance(exc, litellm.Timeout | TimeoutError):
        message = "the model did not answer within MODEL_TIMEOUT_SECONDS"
    elif _unreachable(exc, litellm):
        message = "the model's provider could not be reached"
    elif status in KEY_REFUSED_STATUSES:
        message = f"the model's provider refused the server's key (HTTP {status})"
    elif isinstance(status, int):
        message = f"the model's provider failed (HTTP {status})"
    else:
        message = "the model call failed"
    return UpstreamFailed(BAD_GATEWAY, message, "upstream_error")


async def create_response(upstream: Upstream, request: Mapping[str, Any]) -> dict[str, Any]:
    """One Responses API call; the response object as JSON."""
    litellm = await load_litellm()
    try:
        async with asyncio.timeout(upstream.timeout_seconds + TIMEOUT_GRACE_SECONDS):
            response = await litellm.aresponses(**_arguments(upstream, request))
    except Exception as exc:
        raise _failure(upstream, exc, litellm) from None
    answer: dict[str, Any] = response.model_dump(mode="json", exclude_none=True)
    return answer


async def open_stream(
    upstream: Upstream, request: Mapping[str, Any]
) -> AsyncIterator[dict[str, Any]]:
    """A streamed Responses API call, opened: its events as JSON, as they come.

    Opening raises what `create_response` raises (a context that does not fit is refused
    before the first event); a failure after that ends the iteration with `UpstreamFailed`.
    """
    litellm = await load_litellm()
    _keep_stream_usage_typed(litellm)
    try:
        async with asyncio.timeout(upstream.timeout_seconds + TIMEOUT_GRACE_SECONDS):
            stream = await litellm.aresponses(**_arguments(upstream, request), stream=True)
    except Exception as exc:
        raise _failure(upstream, exc, litellm) from None
    return _events(upstream, stream, litellm)


async def _events(upstream: Upstream, stream: Any, litellm: Any) -> AsyncIterator[dict[str, Any]]:
    try:
        async for event in stream:
            data: dict[str, Any] = event.model_dump(mode="json", exclude_none=True)
            yield data
    except Exception as exc:
        raise _failure(upstream, exc, litellm) from None


async def create_completion(upstream: Upstream, request: Mapping[str, Any]) -> dict[str, Any]:
    """One chat completion (`messages` in), through litellm to any model it reaches; the
    `chat.completion` object as JSON."""
    litellm = await load_litellm()
    try:
        async with asyncio.timeout(upstream.timeout_seconds + TIMEOUT_GRACE_SECONDS):
            response = await litellm.acompletion(**_chat_arguments(upstream, request))
    except Exception as exc:
        raise _failure(upstream, exc, litellm) from None
    answer: dict[str, Any] = response.model_dump(mode="json", exclude_none=True)
    return answer


async def open_completion_stream(
    upstream: Upstream, request: Mapping[str, Any]
) -> AsyncIterator[dict[str, Any]]:
    """A streamed chat completion, opened: its `chat.completion.chunk` objects as JSON, the
    last one carrying the usage. Raises as `open_stream` does."""
    litellm = await load_litellm()
    arguments = _chat_arguments(upstream, request)
    arguments["stream_options"] = {**(arguments.get("stream_options") or {}), "include_usage": True}
    try:
        async with asyncio.timeout(upstream.timeout_seconds + TIMEOUT_GRACE_SECONDS):
            stream = await litellm.acompletion(**arguments, stream=True)
    except Exception as exc:
        raise _failure(upstream, exc, litellm) from None
    return _events(upstream, stream, litellm)


def _chat_arguments(upstream: Upstream, request: Mapping[str, Any]) -> dict[str, Any]:
    return _arguments(upstream, request, CHAT_PARAMETERS, body="messages")


def _keep_stream_usage_typed(litellm: Any) -> None:
    """Mend litellm's own logging of a streamed Responses API call (BerriAI/litellm#26784).

    When a stream completes, litellm's success logging (run for every call, callbacks or none)
    replaces the `usage` of its copy of the response, a `ResponseAPIUsage`, by a chat-completions
    dict, then `model_dump`s that response: pydantic warns on every streamed response
    (`PydanticSerializationUnexpectedValue(Expected ResponseAPIUsage ...)`). The mended step puts
    a `ResponseAPIUsage` back, holding the chat keys besides its own (the type allows extra
    fields), so the logging reads the keys it wrote and the field holds its type. A litellm
    whose step is gone (moved, or fixed) is left as it is."""
    logging_module = getattr(getattr(litellm, "litellm_core_utils", None), "litellm_logging", None)
    logging_class: Any = getattr(logging_module, "Logging", None)
    usage_type = getattr(litellm, "ResponseAPIUsage", None)
    assemble = getattr(logging_class, "_get_assembled_streaming_response", None)
    if usage_type is None or assemble is None or getattr(assemble, STREAM_USAGE_MENDED, False):
        return

    @functools.wraps(assemble)
    def assembled(self: Any, result: Any, *args: Any, **kwargs: Any) -> Any:
        usage = getattr(getattr(result, "response", None), "usage", None)
        response = assemble(self, result, *args, **kwargs)
        rewritten = getattr(response, "usage", None)
        if isinstance(usage, usage_type) and isinstance(rewritten, dict):
            typed = {**rewritten, **usage.model_dump(exclude_none=True)}
            response.usage = usage_type.model_validate(typed)
        return response

    setattr(assembled, STREAM_USAGE_MENDED, True)
    logging_class._get_assembled_streaming_response = assembled
