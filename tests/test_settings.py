"""Settings resolve a session's summary policy: the server's values under its overrides."""

from __future__ import annotations

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
