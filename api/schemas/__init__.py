"""Pydantic schemas of the REST API, kept apart from the ORM models.

Request models are strict: a JSON value must have the documented type (`"12"` is not an
integer, `true` is not 1) and unknown fields are refused.

One module per resource (`common`, `messages`, `sessions`, `summaries`); the service and the
routes use them as `schemas.<Name>` or `from api.schemas import <Name>`: the names below are
that surface.
"""

from api.schemas.common import (
    PARTICIPANT_NAME_PATTERN,
    PATTERN_WORDS,
    ROLES,
    SESSION_ID_PATTERN,
    ClientId,
    Health,
    MessageFormat,
    ParticipantName,
    Role,
    Schema,
    SessionId,
    ToolCallId,
)
from api.schemas.messages import (
    AppendRequest,
    AppendResponse,
    AssistantMessageIn,
    ChatMessageIn,
    ContentPart,
    DeveloperMessageIn,
    ImagePart,
    ImageUrl,
    ItemIn,
    MessageIn,
    MessageList,
    MessageOut,
    PoppedMessage,
    SummarizationStatus,
    SystemMessageIn,
    TextPart,
    ToolCall,
    ToolFunction,
    ToolMessageIn,
    UserMessageIn,
)
from api.schemas.sessions import (
    SessionCreate,
    SessionList,
    SessionOut,
    SessionUpdate,
)
from api.schemas.summaries import (
    CompactRequest,
    CompactResponse,
    History,
    SummaryDetail,
    SummaryList,
    SummaryOut,
)

__all__ = [
    "PARTICIPANT_NAME_PATTERN",
    "PATTERN_WORDS",
    "ROLES",
    "SESSION_ID_PATTERN",
    "AppendRequest",
    "AppendResponse",
    "AssistantMessageIn",
    "ChatMessageIn",
    "ClientId",
    "CompactRequest",
    "CompactResponse",
    "ContentPart",
    "DeveloperMessageIn",
    "Health",
    "History",
    "ImagePart",
    "ImageUrl",
    "ItemIn",
    "MessageFormat",
    "MessageIn",
    "MessageList",
    "MessageOut",
    "ParticipantName",
    "PoppedMessage",
    "Role",
    "Schema",
    "SessionCreate",
    "SessionId",
    "SessionList",
    "SessionOut",
    "SessionUpdate",
    "SummarizationStatus",
    "SummaryDetail",
    "SummaryList",
    "SummaryOut",
    "SystemMessageIn",
    "TextPart",
    "ToolCall",
    "ToolCallId",
    "ToolFunction",
    "ToolMessageIn",
    "UserMessageIn",
]
