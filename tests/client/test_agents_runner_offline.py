"""The Agents SDK's `Runner.run(..., conversation_id=...)` against a Precis in development mode
(no API_KEYS, no MODEL_* setting, no provider key) with its offline model `precis/offline`, as
README and docs/api.md show it: any non-empty `api_key`, and the conversation kept by Precis."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from agents import Agent, RunConfig, Runner
from agents.models.openai_responses import OpenAIResponsesModel
from openai import AsyncOpenAI

from api.offline_model import OFFLINE_MODEL, REPLY_TAG
from tests.helpers import text_of

REQUEST_TIMEOUT_SECONDS = 30.0
"""Per request of the SDK's client: generous for a loaded CI machine."""

DEVELOPMENT_KEY = "dev"
"""What the SDK sends: development mode reads no key, but the SDK will not start without one."""


@pytest.fixture
async def openai_client(service_url: str) -> AsyncIterator[AsyncOpenAI]:
    client = AsyncOpenAI(
        base_url=f"{service_url}/v1",
        api_key=DEVELOPMENT_KEY,
        timeout=REQUEST_TIMEOUT_SECONDS,
        max_retries=0,
    )
    yield client
    await client.close()


async def test_an_agent_s_second_run_answers_from_the_first_one_precis_kept(
    openai_client: AsyncOpenAI,
) -> None:
    agent = Agent(
        name="assistant",
        instructions="Answer briefly.",
        model=OpenAIResponsesModel(model=OFFLINE_MODEL, openai_client=openai_client),
    )
    config = RunConfig(tracing_disabled=True)
    conversation = await openai_client.conversations.create()

    first = await Runner.run(
        agent, "My name is Ada.", conversation_id=conversation.id, run_config=config
    )
    second = await Runner.run(
        agent, "What is my name?", conversation_id=conversation.id, run_config=config
    )

    assert str(first.final_output).startswith(f"{REPLY_TAG} You said: My name is Ada.")
    assert str(second.final_output).startswith(f"{REPLY_TAG} You said: What is my name?")
    assert "user: My name is Ada." in str(second.final_output)
    listed = openai_client.conversations.items.list(conversation.id, order="asc")
    stored = [item.model_dump(mode="json") async for item in listed]
    assert [text_of(item) for item in stored] == [
        "My name is Ada.",
        str(first.final_output),
        "What is my name?",
        str(second.final_output),
    ]
