"""What the modules of the OpenAI-compatible surfaces share: the loopback fake model and an
official `openai` client of the module's app (a module may define its own instead)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx2
import pytest
from fastapi import FastAPI
from openai import AsyncOpenAI

from tests.support.fake_llm import FakeLLM, running_fake_llm


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeLLM]:
    """The module's fake model on loopback."""
    with running_fake_llm() as fake:
        yield fake


@pytest.fixture
def echoing_upstream(upstream: FakeLLM) -> FakeLLM:
    """The fake model, reset, repeating every marker it reads."""
    upstream.reset()
    upstream.mode = "marker_echo"
    return upstream


@pytest.fixture
async def openai_client(app: FastAPI) -> AsyncIterator[AsyncOpenAI]:
    """The official `openai` package on the module's app (development mode, no retries)."""
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://localhost") as http:
        yield AsyncOpenAI(
            base_url="http://localhost/v1", api_key="dev", http_client=http, max_retries=0
        )
