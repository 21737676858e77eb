"""The litellm client: the only module that imports litellm, and only when first used.

Importing litellm costs seconds, so it happens lazily, in a worker thread, the first
time a real model is called or looked up. litellm's own retries are off: the summarizer
retries with tenacity, and this module only maps litellm's exceptions to ours.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import re
import threading
from types import ModuleType
from typing import Any

from summarizer.client import Completion, CompletionRequest
from summarizer.errors import ContextWindowError, LLMError, LLMRequestError, TransientLLMError
from summarizer.tokens import count_messages, count_text

TIMEOUT_GRACE_SECONDS = 5.0
"""Extra time before our own timeout fires, in case the HTTP client's timeout does not."""

TRANSIENT_STATUSES = frozenset({408, 409, 425, 429})
"""4xx statuses worth retrying (besides every 5xx): timeouts, conflicts, rate limits."""

_WINDOW = re.compile(r"maximum context length is (\d+) tokens")
_REQUESTED = re.compile(r"\((\d+) in the messages|messages resulted in (\d+) tokens")
_CONTEXT_HINTS = ("context_length_exceeded", "maximum context length", "context window")

_import_lock = threading.Lock()
_litellm: ModuleType | None = None


def _import_litellm() -> ModuleType:
    global _litellm
    with _import_lock:
        if _litellm is None:
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            # Precis registers no litellm logging callback: the copy litellm's success
            # logging makes of every request's messages (to shorten base64 images in the
            # log) is read by nobody, and at 2,000 messages it cost a few milliseconds
            os.environ.setdefault("MAX_BASE64_LENGTH_FOR_LOGGING", "0")
            module = importlib.import_module("litellm")
            setattr(module, "suppress_debug_info", True)  # noqa: B010 (untyped module)
            _litellm = module
        return _litellm


async def load_litellm() -> ModuleType:
    """The litellm module, imported off the event loop the first time."""
    if _litellm is not None:
        return _litellm
    return await asyncio.to_thread(_import_litellm)


async def model_context_window(model: str) -> int | None:
    """The input window litellm's model map knows for `model`, or None."""
    litellm = await load_litellm()
    try:
        info = litellm.get_model_info(model)
    except Exception:  # litellm raises several types for unmapped models
        return None
    window = info.get("max_input_tokens") or info.get("max_tokens")
    return int(window) if window else None


def _retry_after(exc: BaseException) -> float | None:
    headers: Any = getattr(exc, "litellm_response_headers", None)
    if headers is None:
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None)
    if headers is None:
        return None
    value = headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _context_error(message: str) -> ContextWindowError:
    window = _WINDOW.search(message)
    requested = _REQUESTED.search(message)
    prompt = (
        next((int(group) for group in requested.groups() if group), None) if requested else None
    )
    return ContextWindowError(
        message, window_tokens=int(window.group(1)) if window else None, prompt_tokens=prompt
    )


def classify_error(exc: BaseException, litellm: ModuleType) -> LLMError:
    """Our error for an exception litellm (or the transport below it) raised."""
    message = str(exc)
    if isinstance(exc, litellm.ContextWindowExceededError) or (
        isinstance(exc, litellm.BadRequestError)
        and any(hint in message.lower() for hint in _CONTEXT_HINTS)
    ):
        return _context_error(message)
    if isinstance(exc, litellm.Timeout | litellm.APIConnectionError | TimeoutError | OSError):
        return TransientLLMError(message, retry_after=_retry_after(exc))
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and (status >= 500 or status in TRANSIENT_STATUSES):
        return TransientLLMError(message, retry_after=_retry_after(exc))
    return LLMRequestError(message)


class LiteLLMClient:
    """An `LLMClient` calling `litellm.acompletion` once per `complete`."""

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        temperature: float = 0.3,
        timeout_seconds: float = 60.0,
    ) -> None:
        self.model = model
        self.api_base = api_base
        self.api_key = api_key
        self.temperature = temperature
        self.timeout_seconds = timeout_seconds

    async def complete(self, request: CompletionRequest) -> Completion:
        """One chat completion of `request.messages`; errors come out as `summarizer.errors`."""
        litellm = await load_litellm()
        try:
            async with asyncio.timeout(self.timeout_seconds + TIMEOUT_GRACE_SECONDS):
                response = await litellm.acompletion(
                    model=self.model,
                    messages=request.messages,
                    max_tokens=request.max_tokens,
                    temperature=self.temperature,
                    api_base=self.api_base,
                    api_key=self.api_key,
                    timeout=self.timeout_seconds,
                    num_retries=0,
                    max_retries=0,
                )
        except Exception as exc:
            raise classify_error(exc, litellm) from exc
        text = response.choices[0].message.content or ""
        usage = getattr(response, "usage", None)
        return Completion(
            text=text,
            input_tokens=int(
                getattr(usage, "prompt_tokens", 0) or count_messages(request.messages)
            ),
            output_tokens=int(getattr(usage, "completion_tokens", 0) or count_text(text)),
        )
