"""Domain errors: one base class carrying its status code, rendered as `{"error", "detail"}`."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict


class ErrorBody(BaseModel):
    """The body of every 4xx and 5xx answer."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    error: str
    """The error's name, e.g. `SessionNotFound`."""
    detail: str
    """What is wrong, in words."""


class PrecisError(Exception):
    status_code: ClassVar[int] = 500
    retry_after_seconds: ClassVar[int | None] = None
    """Sent as `Retry-After` when set: the condition is expected to pass by then."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class BadRequest(PrecisError):
    status_code = 400


class Unauthorized(PrecisError):
    status_code = 401


class Forbidden(PrecisError):
    status_code = 403


class NotFound(PrecisError):
    status_code = 404


class SessionNotFound(NotFound):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} not found")


class SessionGone(NotFound):
    """The session was deleted while a summary of it was being made."""


class SummaryNotFound(NotFound):
    def __init__(self, summary_id: int) -> None:
        super().__init__(f"summary {summary_id} not found")


class MessageNotFound(NotFound):
    """No message of the session is left to remove."""


class Conflict(PrecisError):
    status_code = 409


class ConcurrentChange(Conflict):
    """A concurrent request changed what this one relied on, and nothing of this one was
    stored: a retry sees the other's outcome."""

    retry_after_seconds = 1


class SessionExists(Conflict):
    def __init__(self, session_id: str, expired: bool = False) -> None:
        if expired:
            super().__init__(
                f"session {session_id!r} has expired; its id is free again once the retention "
                "sweep has removed it (within RETENTION_SWEEP_INTERVAL_SECONDS)"
            )
        else:
            super().__init__(f"session {session_id!r} already exists")


class IdempotencyConflict(Conflict):
    """A `client_id` already stored with another message."""


class FormatConflict(Conflict):
    """A batch in another message format than the session holds."""


class SummaryRangeConflict(Conflict):
    """A summary's range does not continue the live summaries (a concurrent writer won)."""


class SummarizationInProgress(Conflict):
    """A summarization of the session holds it longer than the caller may wait."""

    retry_after_seconds = 5


class SummarizationTimeout(PrecisError):
    """An explicit `compact` ran past its deadline; nothing of it was stored."""

    status_code = 504


class SummarizationDeferred(PrecisError):
    """A background summarization found the summarizer model unavailable and stored nothing;
    its job runs again later (the worker's alone: no route answers it)."""

    status_code = 503


class PayloadTooLarge(PrecisError):
    status_code = 413


class UnsupportedMediaType(PrecisError):
    status_code = 415


class ValidationFailed(PrecisError):
    status_code = 422


class UnfaithfulView(PrecisError):
    """The history cannot be shown in the asked format without losing or inventing data."""

    status_code = 422


class ServiceUnavailable(PrecisError):
    status_code = 503
    retry_after_seconds = 1


def responses(*errors: type[PrecisError]) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for a route, so the document lists the errors it can answer."""
    return {error.status_code: {"model": ErrorBody} for error in errors}
