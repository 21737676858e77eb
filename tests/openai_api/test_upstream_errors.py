"""What a client learns when the model's provider fails: the status, the provider's `param` and
`code`, and a message of Precis's own; the provider's words go to the server log only (they may
quote the server's key in any encoding, or the provider's account)."""

from __future__ import annotations

import base64
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
import openai
import pytest
from fastapi import FastAPI
from openai import AsyncOpenAI

from api.main import create_app
from tests.conftest import make_settings
from tests.support.fake_llm import FakeLLM, running_fake_llm

UPSTREAM_KEY = "sk-upstream-secret-7f3a9c"
ENCODED_KEY = base64.b64encode(UPSTREAM_KEY.encode()).decode()
LEAKY = f"Incorrect API key provided: {UPSTREAM_KEY[:12]}**** ({ENCODED_KEY}) for org-acme-42."
"""What a provider's error may say: a prefix and an encoding of the key, the account's name."""


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeLLM]:
    with running_fake_llm() as fake:
        yield fake


@pytest.fixture(autouse=True)
def fresh_upstream(upstream: FakeLLM) -> None:
    upstream.reset()


def model_settings(api_base: str) -> dict[str, Any]:
    return {
        "summary_workers": 0,
        "dynamic_summary_enabled": False,
        "model_allowed": "openai/fake",
        "model_api_base": api_base,
        "model_api_key": UPSTREAM_KEY,
        "model_context_tokens": "openai/fake=8000",
    }


@pytest.fixture(scope="module")
def module_settings(upstream: FakeLLM) -> dict[str, Any]:
    return model_settings(upstream.base_url)


async def openai_client(app: FastAPI) -> AsyncIterator[AsyncOpenAI]:
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://localhost") as http:
        yield AsyncOpenAI(
            base_url="http://localhost/v1", api_key="dev", http_client=http, max_retries=0
        )


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[AsyncOpenAI]:
    async for made in openai_client(app):
        yield made


def assert_nothing_of_the_provider(error: openai.APIStatusError) -> None:
    shown = f"{error.message} {error.body}"
    for secret in (UPSTREAM_KEY[:12], ENCODED_KEY, "org-acme-42", "Incorrect API key"):
        assert secret not in shown


@pytest.mark.parametrize(
    ("status", "error", "client_status", "code"),
    [
        (400, openai.BadRequestError, 400, "invalid_request_error"),
        (401, openai.APIStatusError, 502, "upstream_error"),
        (429, openai.RateLimitError, 429, "rate_limit_exceeded"),
        (500, openai.InternalServerError, 502, "upstream_error"),
    ],
)
async def test_the_providers_words_stay_in_the_server_log(
    client: AsyncOpenAI,
    upstream: FakeLLM,
    caplog: pytest.LogCaptureFixture,
    status: int,
    error: type[openai.APIStatusError],
    client_status: int,
    code: str,
) -> None:
    caplog.set_level(logging.WARNING, logger="precis.upstream")
    upstream.fail_next(status, message=LEAKY, param="temperature")
    with pytest.raises(error) as failed:
        await client.responses.create(model="openai/fake", input="hi")
    assert failed.value.status_code == client_status
    assert_nothing_of_the_provider(failed.value)
    body: Any = failed.value.body
    assert body["code"] == code
    if client_status < 500:
        assert body["param"] == "temperature"
        assert f"HTTP {status}" in body["message"] or "rate limiting" in body["message"]
    assert ENCODED_KEY in caplog.text and "org-acme-42" in caplog.text
    assert UPSTREAM_KEY not in caplog.text


async def test_a_param_that_is_not_an_identifier_is_not_shown(
    client: AsyncOpenAI, upstream: FakeLLM
) -> None:
    upstream.fail_next(400, message=LEAKY, param=f"key {UPSTREAM_KEY[:12]} of org-acme-42")
    with pytest.raises(openai.BadRequestError) as failed:
        await client.responses.create(model="openai/fake", input="hi")
    assert_nothing_of_the_provider(failed.value)
    assert failed.value.body["param"] is None  # type: ignore[index]


async def test_a_model_that_refuses_connections_is_named_as_what_is_unavailable(
    database_url: str,
) -> None:
    app = create_app(make_settings(database_url, **model_settings(FakeLLM.closed_port_url())))
    async with app.router.lifespan_context(app):
        async for client in openai_client(app):
            with pytest.raises(openai.APIStatusError) as failed:
                await client.responses.create(model="openai/fake", input="hi")
    message = failed.value.message
    assert failed.value.status_code == 502, message
    assert "could not be reached" in message and "database" not in message


async def test_a_plain_proxy_call_sends_parts_precis_does_not_store_as_they_came(
    client: AsyncOpenAI, upstream: FakeLLM
) -> None:
    """No session named: the messages are the model's to judge, audio and file parts too
    (a session would refuse them as content it does not keep)."""
    parts: Any = [
        {"type": "text", "text": "MARKER-listen"},
        {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
        {"type": "file", "file": {"file_id": "file-abc"}},
    ]
    answer = await client.chat.completions.create(
        model="openai/fake", messages=[{"role": "user", "content": parts}]
    )
    assert answer.choices[0].message.content is not None
    sent = upstream.calls[-1].messages
    assert [part["type"] for part in sent[-1]["content"]] == ["text", "input_audio", "file"]
