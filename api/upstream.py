"""The model a `/v1/responses` request calls: one Responses API request through litellm.

litellm reaches any provider it knows: natively where the provider speaks the Responses API,
through chat completions for the others. Its errors come out as `ContextTooLong` (the one a
turn can recover from, by summarizing) or `UpstreamFailed` carrying the status the client
sees; neither ever holds the API key.
"""

from __future__ import annotations

import asyncio
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

RATE_LIMITED = 429
BAD_GATEWAY = 502
REDACTED = "[redacted]"


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

    def __init__(self, status: int, message: str, code: str | None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code


def _arguments(upstream: Upstream, request: Mapping[str, Any]) -> dict[str, Any]:
    named = {key: value for key, value in request.items() if key in LITELLM_PARAMETERS}
    extra = {
        key: value
        for key, value in request.items()
        if key not in LITELLM_PARAMETERS and key not in ("model", "input", "stream")
    }
    return {
        "model": request["model"],
        "input": request["input"],
        **named,
        **({"extra_body": extra} if extra else {}),
        "api_base": upstream.api_base,
        "api_key": upstream.api_key,
        "timeout": upstream.timeout_seconds,
        "num_retries": 0,
    }


def _failure(upstream: Upstream, exc: BaseException, litellm: Any) -> Exception:
    """Our exception for what litellm raised: the client's status and a key-free message."""
    error = classify_error(exc, litellm)
    message = upstream.redact(str(error))
    if isinstance(error, ContextWindowError):
        return ContextTooLong(message)
    status = getattr(exc, "status_code", None)
    if status == RATE_LIMITED:
        return UpstreamFailed(RATE_LIMITED, f"the model is rate limited: {message}", "rate_limit")
    if isinstance(error, LLMRequestError) and status in (400, 404, 422):
        return UpstreamFailed(400, f"the model refused the request: {message}", "model_error")
    return UpstreamFailed(BAD_GATEWAY, f"the model call failed: {message}", "upstream_error")


async def create_response(upstream: Upstream, request: Mapping[str, Any]) -> dict[str, Any]:
    """One Responses API call; the response object as JSON."""
    litellm = await load_litellm()
    try:
        async with asyncio.timeout(upstream.timeout_seconds + TIMEOUT_GRACE_SECONDS):
            response = await litellm.aresponses(**_arguments(upstream, request))
    except Exception as exc:
        raise _failure(upstream, exc, litellm) from None
    answer: dict[str, Any] = response.model_dump(mode="json", exclude_none=True, warnings=False)
    return answer


async def open_stream(
    upstream: Upstream, request: Mapping[str, Any]
) -> AsyncIterator[dict[str, Any]]:
    """A streamed Responses API call, opened: its events as JSON, as they come.

    Opening raises what `create_response` raises (a context that does not fit is refused
    before the first event); a failure after that ends the iteration with `UpstreamFailed`.
    """
    litellm = await load_litellm()
    try:
        async with asyncio.timeout(upstream.timeout_seconds + TIMEOUT_GRACE_SECONDS):
            stream = await litellm.aresponses(**_arguments(upstream, request), stream=True)
    except Exception as exc:
        raise _failure(upstream, exc, litellm) from None
    return _events(upstream, stream, litellm)


async def _events(upstream: Upstream, stream: Any, litellm: Any) -> AsyncIterator[dict[str, Any]]:
    try:
        async for event in stream:
            data: dict[str, Any] = event.model_dump(mode="json", exclude_none=True, warnings=False)
            yield data
    except Exception as exc:
        raise _failure(upstream, exc, litellm) from None
