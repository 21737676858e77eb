"""Fixtures of the route tests: this test's own session id and its messages URL."""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture
def session_id() -> str:
    return f"v-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def url(session_id: str) -> str:
    """The messages URL of this test's own session."""
    return f"/v1/sessions/{session_id}/messages"
