"""What every schema shares: the base class, the ids and names clients choose, and the words
an error uses for a pattern."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from api.errors import ValidationFailed
from api.json_values import check_finite
from api.schemas.stored import NO_NUL_PATTERN

SESSION_ID_PATTERN = r"^([A-Za-z0-9._:-]{3,128}|[A-Za-z0-9_:-][A-Za-z0-9._:-]?|\.[A-Za-z0-9_:-])$"
"""1-128 characters of `[A-Za-z0-9._:-]`, except `.` and `..`: clients and proxies resolve
those as path segments, so a session with such an id could not be addressed."""

PATTERN_WORDS: dict[str, str] = {}
"""What each pattern of the schemas allows, in words: an error names that, not a regex."""

PATTERN_WORDS[SESSION_ID_PATTERN] = (
    "a session id is 1 to 128 characters, each a letter (A-Z, a-z), a digit or one of "
    "`.` `_` `:` `-`, and is not `.` or `..`"
)

SessionId = Annotated[str, Field(pattern=SESSION_ID_PATTERN, min_length=1, max_length=128)]
"""Client-chosen session id: see `SESSION_ID_PATTERN`."""

ClientId = Annotated[
    str, Field(min_length=1, max_length=256, json_schema_extra={"pattern": NO_NUL_PATTERN})
]
"""Idempotency key of a message, unique per session."""

ToolCallId = Annotated[
    str, Field(min_length=1, max_length=256, json_schema_extra={"pattern": NO_NUL_PATTERN})
]
"""Id linking a tool call to its result."""

PARTICIPANT_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
PATTERN_WORDS[PARTICIPANT_NAME_PATTERN] = (
    "a name is 1 to 64 characters, each a letter (A-Z, a-z), a digit, `_` or `-`"
)
ParticipantName = Annotated[str, Field(pattern=PARTICIPANT_NAME_PATTERN)]
"""Optional participant name, as OpenAI accepts it."""

Role = Literal["system", "developer", "user", "assistant", "tool"]
"""`developer` is OpenAI's newer name for `system`; both are accepted and kept as given."""

ROLES: frozenset[str] = frozenset(get_args(Role))


class Schema(BaseModel):
    """Every REST schema: a field's docstring is its description in the OpenAPI document."""

    model_config = ConfigDict(use_attribute_docstrings=True)


class WireRequest(BaseModel):
    """A request of another API's wire (OpenAI's, Anthropic's): fields Precis does not read
    are kept as sent. No number of it may be NaN or Infinity (JSON has neither: a response
    echoing one could not be answered or read back); the messages and input items, checked
    as they are stored, are not walked here. Refused as `ValidationFailed` naming the field
    (an error pydantic does not wrap, so the field keeps its place in `param`)."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)

    @model_validator(mode="before")
    @classmethod
    def _finite_numbers(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key, value in data.items():
                if key in ("messages", "input"):
                    continue
                try:
                    check_finite(value, str(key))
                except ValueError as exc:
                    raise ValidationFailed(f"body.{exc}") from None
        return data


MessageFormat = Literal["openai", "responses"]
"""How a session's messages are written: OpenAI chat messages, or Responses API items."""


class Health(Schema):
    status: Literal["ok"]
    """Always `ok`."""
