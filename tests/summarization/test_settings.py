"""Settings resolve a session's summary policy: the server's values under its overrides."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from api.settings import Settings


def settings(**values: object) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[arg-type]


def test_a_session_without_overrides_gets_the_servers_values() -> None:
    policy = settings(summary_message_limit=12, summary_pin_system=False).policy({})
    assert (policy.message_limit, policy.pin_system) == (12, False)


def test_overrides_win_over_the_servers_values_and_leave_the_rest() -> None:
    server = settings(summary_message_limit=12, summary_keep_last_n=4)
    policy = server.policy({"message_limit": 5})
    assert (policy.message_limit, policy.keep_last_n) == (5, 4)
    assert server.policy().message_limit == 12


def test_a_copy_with_other_values_resolves_its_own_policy() -> None:
    server = settings(summary_message_limit=12)
    assert server.policy().message_limit == 12
    copy = server.model_copy(update={"summary_message_limit": 7})
    assert copy.policy().message_limit == 7
    assert server.policy().message_limit == 12


def test_model_windows_are_read_from_model_context_tokens() -> None:
    settings = Settings(_env_file=None, model_context_tokens="openai/gpt-4o=128000, my/model=8192")
    assert settings.model_windows() == {"openai/gpt-4o": 128_000, "my/model": 8_192}


def test_a_malformed_model_window_stops_the_server_naming_the_setting() -> None:
    with pytest.raises(ValidationError, match="MODEL_CONTEXT_TOKENS"):
        Settings(_env_file=None, model_context_tokens="openai/gpt-4o=lots")


def test_any_model_without_an_api_base_stops_the_server_unless_opted_in() -> None:
    """A client could name any provider litellm knows, and MODEL_API_KEY would go there."""
    with pytest.raises(ValidationError, match="MODEL_ALLOW_ANY_PROVIDER"):
        settings(model_allowed="openai/gpt-4o, *", model_api_key="sk-x")
    assert settings(model_allowed="*", model_api_base="http://127.0.0.1:4000").model_allowed
    assert settings(model_allowed="*", model_allow_any_provider=True).model_allowed
    assert settings(model_allowed="openai/gpt-4o").model_allowed


def test_an_empty_operator_key_is_none() -> None:
    assert settings(operator_key="").operator_key is None
