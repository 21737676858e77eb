"""Fixtures of the summarizer tests: summarizer settings pointed at the fake LLM server."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from summarizer import SummarizerSettings
from tests.support.fake_llm import FakeLLM

FAST_RETRIES: dict[str, Any] = {
    "max_attempts": 3,
    "max_retry_seconds": 10.0,
    "backoff_initial_seconds": 0.01,
    "backoff_max_seconds": 0.05,
    "timeout_seconds": 5.0,
}
"""Retry settings that keep failure tests fast."""


@pytest.fixture
def llm_settings(fake_llm: FakeLLM) -> Callable[..., SummarizerSettings]:
    """A factory of SummarizerSettings calling the fake server through litellm."""

    def make(**overrides: Any) -> SummarizerSettings:
        base = SummarizerSettings(
            model="openai/fake-summarizer",
            api_base=fake_llm.base_url,
            api_key="test-key",
            **FAST_RETRIES,
        )
        return replace(base, **overrides)

    return make
