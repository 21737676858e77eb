"""A Precis server that requires API keys, for the tests of the official OpenAI SDKs.

The SDKs always send `Authorization: Bearer <api_key>`, so these tests serve Precis with keys
(two tenants) rather than in development mode: the key they send is the one that must work.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.support.fake_llm import FakeLLM, running_fake_llm
from tests.support.live_server import LiveServer

TENANT_KEY = "sdk-key-of-tenant-a"
"""The Precis key the SDK clients of a test send (tenant `a`)."""

OTHER_TENANT_KEY = "sdk-key-of-tenant-b"
"""A key of another tenant (`b`), which must not see tenant `a`'s conversations."""

QUIET_KEYED_SERVICE = {
    "api_keys": f"a:{TENANT_KEY},b:{OTHER_TENANT_KEY}",
    "summary_workers": 1,
    "dynamic_summary_enabled": False,
}
"""Keys for both tenants and no proactive summaries: what a test stores is what it reads."""

UPSTREAM_KEY = "sk-upstream-key-of-the-fake"
"""The server's key of the model (`MODEL_API_KEY`); the fake accepts any."""

FAKE_MODEL_WINDOW = 16_000
"""The window the server is told the fake's models have (`MODEL_CONTEXT_TOKENS`): room for a
few turns without summaries."""


AGENT_MODEL = "anthropic/claude-opus-4-5"
AGENT_MODEL_WINDOW = 200_000
"""A model with the window of Anthropic's: an agent CLI's own system prompt and tools take more
than `FAKE_MODEL_WINDOW` before the first turn."""


def read_all(precis_url: str, path: str) -> Any:
    """The JSON of `GET {precis_url}{path}` as tenant `a`, every item on one page."""
    answer = httpx.get(
        f"{precis_url}{path}",
        params={"limit": 1000},
        headers={"Authorization": f"Bearer {TENANT_KEY}"},
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def stored(precis_url: str, session: str) -> list[dict[str, Any]]:
    """The session's messages as Precis keeps them: role, content, tool calls and results."""
    messages = read_all(precis_url, f"/v1/sessions/{session}/messages")["messages"]
    keys = ("role", "content", "tool_calls", "tool_call_id")
    return [{key: m[key] for key in keys if m.get(key) is not None} for m in messages]


def model_settings(api_base: str, models: Sequence[str]) -> dict[str, Any]:
    """The MODEL_* settings of a server whose `/v1/responses` calls the model at `api_base`
    (a fake's `base_url`), allowing `models`, each with `FAKE_MODEL_WINDOW` but
    `AGENT_MODEL`."""
    windows = {model: FAKE_MODEL_WINDOW for model in models} | {AGENT_MODEL: AGENT_MODEL_WINDOW}
    return {
        "model_allowed": ",".join(models),
        "model_api_base": api_base,
        "model_api_key": UPSTREAM_KEY,
        "model_context_tokens": ",".join(f"{model}={windows[model]}" for model in models),
    }


@contextmanager
def keyed_server(
    database_url: str, log_path: Path, settings: Mapping[str, Any] | None = None
) -> Iterator[str]:
    """`python -m api` on a loopback port over the migrated `database_url`; yields its base
    URL (without `/v1`). `settings` (api.settings names) are added to `QUIET_KEYED_SERVICE`.
    Its log goes to `log_path`, shown if it fails to start."""
    with LiveServer(database_url, log_path, {**QUIET_KEYED_SERVICE, **(settings or {})}) as server:
        yield server.base_url


KEYED_MODELS = ("openai/fake", "openai/gpt-4o", "anthropic/claude-sonnet-4-5", AGENT_MODEL)
"""The models the shared keyed server allows (each module checks that its own are among them):
`openai/fake` (litellm speaks the Responses or chat wire to the fake, or fakes a stream from a
whole answer), `openai/gpt-4o` (a model litellm streams event by event) and two `anthropic/`
ones (the Messages wire; `AGENT_MODEL` for an agent CLI)."""


@dataclass(frozen=True)
class KeyedService:
    """The keyed server the SDK test modules share on one database (`keyed_service` in
    `tests/client/conftest.py`), the fake model behind it, and its log."""

    url: str
    fake: FakeLLM
    log: Path

    def fake_for_module(self, **knobs: Any) -> FakeLLM:
        """The fake, as new to the module: every knob back to its default, the call log empty,
        then `knobs` (attribute names) set."""
        self.fake.reset()
        for name, value in knobs.items():
            setattr(self.fake, name, value)
        return self.fake

    def url_allowing(self, *models: str) -> str:
        """The base URL, once `models` are known to be allowed."""
        assert set(models) <= set(KEYED_MODELS), f"add {models} to KEYED_MODELS"
        return self.url


@contextmanager
def keyed_service(database_url: str, log_path: Path) -> Iterator[KeyedService]:
    """A fake model on loopback and a keyed server whose model calls go to it, allowing
    `KEYED_MODELS`."""
    with running_fake_llm() as fake:
        settings = model_settings(fake.base_url, KEYED_MODELS)
        with keyed_server(database_url, log_path, settings) as url:
            yield KeyedService(url, fake, log_path)
