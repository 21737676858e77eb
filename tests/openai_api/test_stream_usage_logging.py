"""A streamed `POST /v1/responses` through litellm's real HTTP path (the loopback fake speaking
the Responses API) leaves no serializer warning: litellm's own logging of a completed stream
used to put a chat-completions dict where its response type holds a `ResponseAPIUsage`, and
pydantic warned on every streamed response (BerriAI/litellm#26784; mended in `api/upstream.py`).
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
import litellm
import pytest
from fastapi import FastAPI
from litellm.integrations.custom_logger import CustomLogger
from openai import AsyncOpenAI

from tests.support.fake_llm import FakeLLM, running_fake_llm

STREAMED_MODEL = "openai/gpt-4o"
"""A model litellm streams event by event over its Responses API client."""

WINDOW = 16_000
"""The window the server is told the model has (MODEL_CONTEXT_TOKENS)."""

LOGGING_WAIT_SECONDS = 30.0
"""Longest wait for litellm's logging of the stream, a task of its own after the stream ends."""

SERIALIZER_WARNING = "PydanticSerializationUnexpectedValue"


class LoggedStreams(CustomLogger):
    """A litellm callback: the standard logging payload of each completed call, as it comes."""

    def __init__(self) -> None:
        super().__init__()
        self.payloads: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def async_log_success_event(
        self, kwargs: dict[str, Any], response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        self.payloads.put_nowait(kwargs.get("standard_logging_object") or {})


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeLLM]:
    with running_fake_llm() as fake:
        yield fake


@pytest.fixture(scope="module")
def module_settings(upstream: FakeLLM) -> dict[str, Any]:
    return {
        "summary_workers": 0,
        "model_allowed": STREAMED_MODEL,
        "model_api_base": upstream.base_url,
        "model_api_key": "sk-fake",
        "model_context_tokens": f"{STREAMED_MODEL}={WINDOW}",
    }


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[AsyncOpenAI]:
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://localhost") as http:
        yield AsyncOpenAI(
            base_url="http://localhost/v1", api_key="dev", http_client=http, max_retries=0
        )


@pytest.fixture
def logged_streams() -> Iterator[LoggedStreams]:
    callback = LoggedStreams()
    litellm.logging_callback_manager.add_litellm_callback(callback)
    try:
        yield callback
    finally:
        # from every list litellm copied it into, so no later call (or test) is logged to it
        litellm.logging_callback_manager.remove_callback_from_all_lists(callback)


async def test_a_streamed_response_is_logged_by_litellm_without_a_serializer_warning(
    client: AsyncOpenAI,
    upstream: FakeLLM,
    logged_streams: LoggedStreams,
    caplog: pytest.LogCaptureFixture,
) -> None:
    upstream.mode = "long"
    upstream.long_words = 12
    conversation = await client.conversations.create()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stream = await client.responses.create(
            model=STREAMED_MODEL, input="tell me", conversation=conversation.id, stream=True
        )
        kinds = [event.type async for event in stream]
        payload = await asyncio.wait_for(logged_streams.payloads.get(), LOGGING_WAIT_SECONDS)
    assert kinds[-1] == "response.completed"
    # litellm's logging ran to its end and still read the usage the fake reported
    assert payload["prompt_tokens"] > 0 and payload["completion_tokens"] > 0
    said = [str(warning.message) for warning in caught]
    assert not [text for text in said if SERIALIZER_WARNING in text], said
    logged = [record.getMessage() for record in caplog.records if record.levelno >= logging.INFO]
    assert not [text for text in logged if SERIALIZER_WARNING in text], logged
