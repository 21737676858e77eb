"""Python client of Precis, the persistent chat-session service.

`PrecisClient` and `AsyncPrecisClient` speak the REST API; `precis_client.agents.PrecisSession`
is an OpenAI Agents SDK session (extra `agents`) and `precis_client.langchain.
PrecisChatMessageHistory` a LangChain chat history (extra `langchain`).
"""

from precis_client._core import DEFAULT_BASE_URL, RetryPolicy
from precis_client.client import AsyncPrecisClient, PrecisClient
from precis_client.errors import (
    BadRequest,
    ConcurrentChange,
    Conflict,
    Forbidden,
    FormatConflict,
    IdempotencyConflict,
    MessageNotFound,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    PrecisError,
    ServiceUnavailable,
    SessionExists,
    SessionGone,
    SessionNotFound,
    SummarizationInProgress,
    SummarizationTimeout,
    SummaryNotFound,
    SummaryRangeConflict,
    Unauthorized,
    UnfaithfulView,
    UnsupportedMediaType,
    ValidationFailed,
)

__all__ = [
    "DEFAULT_BASE_URL",
    "AsyncPrecisClient",
    "BadRequest",
    "ConcurrentChange",
    "Conflict",
    "Forbidden",
    "FormatConflict",
    "IdempotencyConflict",
    "MessageNotFound",
    "MethodNotAllowed",
    "NotFound",
    "PayloadTooLarge",
    "PrecisClient",
    "PrecisError",
    "RetryPolicy",
    "ServiceUnavailable",
    "SessionExists",
    "SessionGone",
    "SessionNotFound",
    "SummarizationInProgress",
    "SummarizationTimeout",
    "SummaryNotFound",
    "SummaryRangeConflict",
    "Unauthorized",
    "UnfaithfulView",
    "UnsupportedMediaType",
    "ValidationFailed",
]
