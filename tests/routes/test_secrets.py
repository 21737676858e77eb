"""Secrets stay secret: API keys and the LLM key are never logged, shown or stored, and a
database error carries none of the user data bound into its statement.

Keys are long, distinctive strings so that finding one in a log cannot be a coincidence.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from api.main import create_app
from tests.conftest import QUIET, make_settings
from tests.helpers import user
from tests.support.fake_llm import FakeLLM

KEY_A = "sekret-A-6f1d9c"
KEY_B = "sekret-B-0b7e44"
KEYS = f"tenant_a:{KEY_A},tenant_b:{KEY_B}"
A = {"Authorization": f"Bearer {KEY_A}"}
LLM_KEY = "sk-llm-secret-4d2a91"


@pytest.fixture(scope="module")
def module_settings() -> dict[str, Any]:
    return {**QUIET, "api_keys": KEYS}


async def test_api_keys_are_never_logged(
    api: httpx.AsyncClient, sid: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    near_miss = KEY_A[:-1] + "X"
    for headers in (A, {"Authorization": f"Bearer {near_miss}"}, {"Authorization": KEY_B}):
        batch = {"messages": [user("hi")]}
        await api.post(f"/v1/sessions/{sid}/messages", json=batch, headers=headers)
        await api.get(f"/v1/sessions/{sid}/history", headers=headers)
        await api.get("/metrics", headers=headers)
    logged = "\n".join(f"{record.getMessage()} {record.args!r}" for record in caplog.records)
    for secret in (KEY_A, KEY_B, near_miss):
        assert secret not in logged
        assert secret not in caplog.text


def test_settings_never_show_the_keys_in_their_repr(database_url: str) -> None:
    settings = make_settings(database_url, api_keys=KEYS, summary_api_key="sk-llm-secret")
    shown = f"{settings!r} {settings}"
    assert KEY_A not in shown and "sk-llm-secret" not in shown


@pytest.mark.parametrize("failing", [False, True], ids=["answering", "failing"])
async def test_the_llm_key_is_never_logged_nor_stored(
    database_url: str,
    engine: Any,
    fake_llm: FakeLLM,
    caplog: pytest.LogCaptureFixture,
    failing: bool,
) -> None:
    caplog.set_level(logging.DEBUG)
    if failing:
        fake_llm.fail_always(500)
    settings = make_settings(
        database_url,
        summary_model="openai/fake",
        summary_api_base=fake_llm.base_url,
        summary_api_key=LLM_KEY,
        summary_llm_max_attempts=2,
        summary_llm_backoff_seconds=0.01,
        summary_workers=0,
    )
    app = create_app(settings)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://localhost"
        ) as http,
    ):
        batch = {"messages": [user(f"question {i}") for i in range(4)]}
        await http.post("/v1/sessions/k/messages", json=batch)
        answer = await http.post("/v1/sessions/k/compact", json={"trigger": "overflow_retry"})
        assert answer.status_code == 200, answer.text
        summary_id = answer.json()["summary"]["id"]
        stored = (await http.get(f"/v1/summaries/{summary_id}")).text
    async with engine.connect() as connection:
        for table in ("session_summaries", "summary_jobs"):
            rows = (await connection.execute(text(f"SELECT * FROM {table}"))).all()
            stored += repr(rows)
    assert LLM_KEY not in stored
    assert LLM_KEY not in caplog.text
    assert all(LLM_KEY not in f"{record.getMessage()} {record.args!r}" for record in caplog.records)


async def test_database_errors_carry_no_statement_parameters(engine: Any) -> None:
    """Errors get logged: the user data bound into a failing statement must not be in them."""
    with pytest.raises(DBAPIError) as failure:
        async with engine.connect() as connection:
            await connection.execute(
                text("SELECT * FROM no_such_table WHERE x = :v"), {"v": "user-secret-5f1c"}
            )
    assert "no_such_table" in str(failure.value)
    assert "user-secret-5f1c" not in str(failure.value)
