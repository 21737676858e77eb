"""What the sync and async clients share: each endpoint as a `Call` (the request and how to
read its answer), the retry policy and the reading of answers. Nothing here does I/O."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Generic, TypeVar, cast
from urllib.parse import quote

import httpx

from precis_client.errors import error_from
from precis_client.types import (
    Appended,
    Compacted,
    CompactTrigger,
    Format,
    History,
    ItemEntry,
    MessagePage,
    Popped,
    Session,
    SessionPage,
    SummaryDetail,
    SummaryPage,
)

T = TypeVar("T")

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
"""Where `make run` serves."""

DEFAULT_TIMEOUT_SECONDS = 30.0
"""Per request: far above a history load or an append, short enough to notice a dead server."""

COMPACT_TIMEOUT_SECONDS = 330.0
"""`compact` runs a summarization inline: wait past the server's own deadline
(SUMMARY_COMPACT_DEADLINE_SECONDS, 300 by default), so its 504 arrives rather than a client
timeout while the server goes on."""

MAX_BATCH = 500
"""Most messages or items one append request may carry."""

RETRIED_CONFLICTS = frozenset({"Conflict", "ConcurrentChange", "SummarizationInProgress"})
"""409s that pass by themselves; the others (`FormatConflict`, `SessionExists`,
`IdempotencyConflict`) would answer the same again."""


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of 503 and of the transient 409s, with exponential backoff.

    An append without `client_id`s that got a 503 may have been stored (the service says so
    only when it cannot tell); give `client_id`s to make its retry exactly-once.
    """

    attempts: int = 4
    """Tries in all, the first one included; 1 turns retries off."""
    backoff_seconds: float = 0.25
    """Wait before the second try; doubled before each next one, with jitter."""
    max_delay_seconds: float = 5.0
    """Longest single wait, `Retry-After` included."""

    def delay(self, failed_attempt: int, retry_after: float | None) -> float:
        """Seconds to wait after try number `failed_attempt` (1-based) failed: the exponential
        backoff with equal jitter, at least the server's `Retry-After`, at most the cap."""
        exponential = self.backoff_seconds * 2.0 ** (failed_attempt - 1)
        jittered = exponential * random.uniform(0.5, 1.0)
        return min(max(jittered, retry_after or 0.0), self.max_delay_seconds)


def retry_delay(
    policy: RetryPolicy, attempt: int, response: httpx.Response, repeatable: bool = True
) -> float | None:
    """How long to wait before trying again, or None when `response` is final (a call that
    is not `repeatable` is never sent twice)."""
    if attempt >= policy.attempts or not repeatable or not retryable(response):
        return None
    return policy.delay(attempt, retry_after(response))


def retryable(response: httpx.Response) -> bool:
    """503, or a 409 that names a transient race."""
    if response.status_code == 503:
        return True
    if response.status_code != 409:
        return False
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("error") in RETRIED_CONFLICTS


def retry_after(response: httpx.Response) -> float | None:
    """The `Retry-After` header in seconds (delta-seconds or an HTTP date), if any."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # "-0000": UTC, with nothing said about the sender's zone
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request of the API and how to read its successful answer."""

    method: str
    path: str
    decode: Callable[[httpx.Response], T]
    params: Mapping[str, str | int | bool] = field(default_factory=dict)
    body: Any = None
    timeout: float | None = None
    """Overrides the client's timeout for this call."""
    repeatable: bool = True
    """Whether sending it again after a 503 is safe: a pop that got a 503 may have removed its
    message already, and a second pop would remove the next one."""

    def request(self, http: httpx.Client | httpx.AsyncClient) -> httpx.Request:
        """The request, built by the client that sends it (base URL, headers, timeout)."""
        extra: dict[str, Any] = {} if self.timeout is None else {"timeout": self.timeout}
        return http.build_request(
            self.method, self.path, params=self.params or None, json=self.body, **extra
        )


def outcome(call: Call[T], response: httpx.Response) -> T:
    """The decoded answer, or the service's error raised as its exception."""
    if response.is_success:
        return call.decode(response)
    raise error_from(response)


def headers(api_key: str | None) -> dict[str, str]:
    """Headers of every request."""
    sent = {"accept": "application/json", "user-agent": "precis-client/0.1"}
    if api_key:
        sent["authorization"] = f"Bearer {api_key}"
    return sent


def _json(kind: type[T]) -> Callable[[httpx.Response], T]:
    def decode(response: httpx.Response) -> T:
        return cast(T, response.json())

    return decode


def _nothing(_response: httpx.Response) -> None:
    return None


def _session(session_id: str) -> str:
    # Ids are [A-Za-z0-9._:-]; quoting keeps any other string inside its path segment, where
    # the service refuses it, instead of letting it name another path.
    return f"/v1/sessions/{quote(session_id, safe='')}"


def _given(**values: Any) -> dict[str, Any]:
    """The keyword arguments that were given (not None): absent fields keep their default."""
    return {key: value for key, value in values.items() if value is not None}


# --- the endpoints --------------------------------------------------------------------------


def create_session(
    session_id: str | None,
    metadata: Mapping[str, Any] | None,
    settings: Mapping[str, Any] | None,
    format: Format | None,
) -> Call[Session]:
    body = _given(id=session_id, metadata=metadata, settings=settings, format=format)
    return Call("POST", "/v1/sessions", _json(Session), body=body)


def list_sessions(limit: int | None, cursor: str | None) -> Call[SessionPage]:
    return Call("GET", "/v1/sessions", _json(SessionPage), _given(limit=limit, cursor=cursor))


def get_session(session_id: str) -> Call[Session]:
    return Call("GET", _session(session_id), _json(Session))


def update_session(
    session_id: str, metadata: Mapping[str, Any] | None, settings: Mapping[str, Any] | None
) -> Call[Session]:
    body = _given(metadata=metadata, settings=settings)
    return Call("PATCH", _session(session_id), _json(Session), body=body)


def delete_session(session_id: str) -> Call[None]:
    return Call("DELETE", _session(session_id), _nothing)


def append_messages(session_id: str, messages: Sequence[Mapping[str, Any]]) -> Call[Appended]:
    body = {"messages": list(messages)}
    return Call("POST", f"{_session(session_id)}/messages", _json(Appended), body=body)


def append_items(session_id: str, items: Sequence[ItemEntry]) -> Call[Appended]:
    body = {"items": list(items)}
    return Call("POST", f"{_session(session_id)}/messages", _json(Appended), body=body)


def list_messages(session_id: str, after_seq: int | None, limit: int | None) -> Call[MessagePage]:
    params = _given(after_seq=after_seq, limit=limit)
    return Call("GET", f"{_session(session_id)}/messages", _json(MessagePage), params)


def remove_message(session_id: str, message_id: int) -> Call[None]:
    return Call("DELETE", f"{_session(session_id)}/messages/{int(message_id)}", _nothing)


def pop_message(session_id: str) -> Call[Popped]:
    return Call("POST", f"{_session(session_id)}/messages/pop", _json(Popped), repeatable=False)


def history(
    session_id: str, summary_limit: int | None, max_tokens: int | None, format: Format | None
) -> Call[History]:
    params = _given(summary_limit=summary_limit, max_tokens=max_tokens, format=format)
    return Call("GET", f"{_session(session_id)}/history", _json(History), params)


def compact(
    session_id: str, trigger: CompactTrigger | None, keep_last_n: int | None
) -> Call[Compacted]:
    body = _given(trigger=trigger, keep_last_n=keep_last_n)
    path = f"{_session(session_id)}/compact"
    return Call("POST", path, _json(Compacted), body=body, timeout=COMPACT_TIMEOUT_SECONDS)


def list_summaries(
    session_id: str, include_superseded: bool, limit: int | None, cursor: str | None
) -> Call[SummaryPage]:
    params = _given(include_superseded=include_superseded or None, limit=limit, cursor=cursor)
    return Call("GET", f"{_session(session_id)}/summaries", _json(SummaryPage), params)


def get_summary(summary_id: int) -> Call[SummaryDetail]:
    return Call("GET", f"/v1/summaries/{int(summary_id)}", _json(SummaryDetail))
