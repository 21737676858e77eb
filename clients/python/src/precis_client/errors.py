"""The service's errors as exceptions: one class per `error` name it answers.

Every 4xx/5xx answer of Precis has the body `{"error": "<Name>", "detail": "..."}`; the name
picks the class here (the same hierarchy as the service's), an unknown name gives the base.
"""

from __future__ import annotations

from typing import Any

import httpx


class PrecisError(Exception):
    """An error answer of the service: its HTTP `status`, `error` name and `detail`."""

    def __init__(self, status: int, error: str, detail: str) -> None:
        super().__init__(f"{status} {error}: {detail}")
        self.status = status
        self.error = error
        self.detail = detail


class BadRequest(PrecisError):
    """400: a cursor this server did not hand out, or a malformed request line."""


class Unauthorized(PrecisError):
    """401: a missing or wrong API key."""


class Forbidden(PrecisError):
    """403: not allowed (without API keys, a client that is not on loopback)."""


class NotFound(PrecisError):
    """404: no such resource (also the tenant's view of another tenant's session)."""


class SessionNotFound(NotFound):
    """404: no session with this id."""


class SessionGone(NotFound):
    """404: the session was deleted while a summary of it was being made."""


class SummaryNotFound(NotFound):
    """404: no summary with this id."""


class MessageNotFound(NotFound):
    """404: no such message in the session, or none left to pop."""


class MethodNotAllowed(PrecisError):
    """405: the path does not take this method."""


class Conflict(PrecisError):
    """409 `Conflict`: a transient race inside the service; the client retries it."""


class ConcurrentChange(Conflict):
    """409: a concurrent request changed what this one relied on, nothing of it stored; the
    client retries it."""


class SessionExists(Conflict):
    """409: a session with this id exists already."""


class IdempotencyConflict(Conflict):
    """409: the `client_id` is already stored with another message."""


class FormatConflict(Conflict):
    """409: a batch in the other message format than the session holds."""


class SummaryRangeConflict(Conflict):
    """409: a summary's range does not continue the live summaries."""


class SummarizationInProgress(Conflict):
    """409: another summarization holds the session; the client retries it."""


class PayloadTooLarge(PrecisError):
    """413: a message, metadata object or request body over the server's limit."""


class UnsupportedMediaType(PrecisError):
    """415: a request body that is not JSON."""


class ValidationFailed(PrecisError):
    """422: bad input; `detail` names the field."""


class UnfaithfulView(PrecisError):
    """422: the history cannot be shown in the asked `format` exactly; `detail` names the
    message."""


class ServiceUnavailable(PrecisError):
    """503: the database is unreachable; the client retries it."""


class SummarizationTimeout(PrecisError):
    """504: an explicit `compact` ran past its deadline; nothing of it was stored."""


def _named(base: type[PrecisError]) -> dict[str, type[PrecisError]]:
    found = {base.__name__: base}
    for subclass in base.__subclasses__():
        found |= _named(subclass)
    return found


ERRORS: dict[str, type[PrecisError]] = _named(PrecisError)
"""Every error class by the name the service answers."""


def error_from(response: httpx.Response) -> PrecisError:
    """The exception for an error answer: by its `error` name, else the base class (also for
    a body that is not Precis' own, such as a proxy's error page)."""
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        name: str = body["error"]
        detail = body.get("detail")
        kind = ERRORS.get(name, PrecisError)
        return kind(response.status_code, name, detail if isinstance(detail, str) else str(detail))
    return PrecisError(response.status_code, response.reason_phrase or "HTTPError", response.text)
