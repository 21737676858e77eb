"""`PrecisSession.session_settings` held to the Agents SDK session contract, side by side with
the SDK's own `SQLiteSession`: the same input gives the same outcome in both.

The contract (`SQLiteSession`, `OpenAIConversationsSession`): no settings give
`SessionSettings()`, a dict is normalized into `SessionSettings`, an instance is kept as given,
an unknown field or another type raises `TypeError`, and the settings' `limit` applies to
`get_items()` and to the runner's history, under any `RunConfig.session_settings` override.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest
from agents.items import TResponseInputItem
from agents.memory import Session, SessionSettings, SQLiteSession
from agents.run_internal.session_persistence import prepare_input_with_session
from precis_client.agents import PrecisSession

from tests.helpers import contents, easy_message

SESSION_KINDS = ("SQLiteSession", "PrecisSession")
"""The SDK's reference session and ours; every test runs on both."""


def make_session(kind: str, session_id: str, base_url: str, settings: Any) -> Session:
    """A session of `kind` given `settings` exactly as the caller passed them."""
    if kind == "SQLiteSession":
        return SQLiteSession(session_id, session_settings=settings)
    return PrecisSession(session_id, base_url=base_url, session_settings=settings)


def outcome(kind: str, settings: Any) -> Any:
    """What constructing a session of `kind` with `settings` gives: its settings or the error."""
    try:
        return make_session(kind, "unused", "http://127.0.0.1:9", settings).session_settings
    except TypeError as error:
        return TypeError(str(error))


@pytest.fixture(params=SESSION_KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return cast(str, request.param)


@pytest.fixture
def sessions() -> Iterator[list[Session]]:
    """The sessions a test opens; the SQLite ones are closed afterwards."""
    opened: list[Session] = []
    yield opened
    for session in opened:
        if isinstance(session, SQLiteSession):
            session.close()


def test_without_settings_the_default_is_session_settings(kind: str) -> None:
    settings = outcome(kind, None)
    assert type(settings) is SessionSettings
    assert settings == SessionSettings()
    assert settings == outcome("SQLiteSession", None)


def test_a_dict_is_normalized_into_session_settings(kind: str) -> None:
    settings = outcome(kind, {"limit": 3})
    assert type(settings) is SessionSettings
    assert settings == SessionSettings(limit=3)
    assert settings == outcome("SQLiteSession", {"limit": 3})


def test_an_empty_dict_is_the_default_settings(kind: str) -> None:
    assert outcome(kind, {}) == SessionSettings() == outcome("SQLiteSession", {})


def test_a_session_settings_instance_is_kept_as_given(kind: str) -> None:
    given = SessionSettings(limit=2)
    assert outcome(kind, given) is given


def test_an_unknown_field_raises_type_error(kind: str) -> None:
    with pytest.raises(TypeError, match="Unknown session settings: limt") as raised:
        make_session(kind, "unused", "http://127.0.0.1:9", {"limit": 1, "limt": 2})
    assert str(raised.value) == str(outcome("SQLiteSession", {"limit": 1, "limt": 2}))


def test_settings_of_another_type_raise_type_error(kind: str) -> None:
    with pytest.raises(TypeError, match="must be a SessionSettings instance or a dict") as raised:
        make_session(kind, "unused", "http://127.0.0.1:9", [("limit", 1)])
    assert str(raised.value) == str(outcome("SQLiteSession", [("limit", 1)]))


async def test_a_dict_limit_applies_to_get_items_without_an_explicit_limit(
    kind: str, service_url: str, sid: str, sessions: list[Session]
) -> None:
    session = make_session(kind, sid, service_url, {"limit": 2})
    sessions.append(session)
    await session.add_items([easy_message(f"item {n}") for n in range(4)])
    assert contents(await session.get_items()) == ["item 2", "item 3"]
    assert contents(await session.get_items(limit=3)) == ["item 1", "item 2", "item 3"]


async def test_the_runner_s_history_honours_dict_settings_and_their_override(
    kind: str, service_url: str, sid: str, sessions: list[Session]
) -> None:
    """The runner overlays `RunConfig.session_settings` on the session's own: that needs a
    `SessionSettings` on the session, never the raw dict it was given."""
    session = make_session(kind, sid, service_url, {"limit": 1})
    sessions.append(session)
    await session.add_items([easy_message(f"item {n}") for n in range(4)])

    own_limit, _ = await prepare_input_with_session("next", session, None)
    overridden, _ = await prepare_input_with_session(
        "next", session, None, SessionSettings(limit=3)
    )
    assert contents(cast(list[TResponseInputItem], own_limit)) == ["item 3", "next"]
    assert contents(cast(list[TResponseInputItem], overridden)) == [
        "item 1",
        "item 2",
        "item 3",
        "next",
    ]
