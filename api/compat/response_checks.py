"""What every `POST /v1/responses` request is checked for before anything is read, called or
stored: the model, the conversation id's shape, the parameters that exclude each other, and
what Precis does not offer (a 400 naming the parameter)."""

from __future__ import annotations

from typing import Any

from api.compat.model_limits import check_model
from api.conversations import CONVERSATION_ID_PREFIX
from api.openai_errors import OpenAIError
from api.schemas.responses import ResponseRequest
from api.settings import Settings

Input = str | list[dict[str, Any]] | None


def check_context(conversation_id: str | None, previous_id: str | None) -> None:
    """What `/v1/responses` and its `input_tokens` and `compact` refuse alike: a conversation
    id of another shape, both a conversation and a previous response."""
    if conversation_id is not None and not conversation_id.startswith(CONVERSATION_ID_PREFIX):
        raise OpenAIError(
            400,
            f"invalid conversation id {conversation_id!r}: expected an id that begins with "
            f"'{CONVERSATION_ID_PREFIX}'",
            param="conversation",
            code="invalid_conversation_id",
        )
    if previous_id is not None and conversation_id is not None:
        raise OpenAIError(
            400,
            "Mutually exclusive parameters: Ensure you are only providing one of: "
            "'previous_response_id' or 'conversation'.",
            param="previous_response_id",
            code="mutually_exclusive_parameters",
        )


def check_input_given(given: Input, conversation_id: str | None, previous_id: str | None) -> None:
    """An input, unless a conversation or a previous response gives the context (an empty
    input is none)."""
    if not given and conversation_id is None and not previous_id:
        raise OpenAIError(
            400,
            "input is required unless conversation or previous_response_id gives the context",
            param="input",
            code="missing_required_parameter",
        )


def checked_model(settings: Settings, request: ResponseRequest) -> str:
    """Refuse what Precis does not offer; the model as the server calls it."""
    model = check_model(settings, request.model)
    conversation_id, previous_id = request.conversation_id(), request.previous_response_id
    check_context(conversation_id, previous_id)
    check_input_given(request.input, conversation_id, previous_id)
    refused = {
        "prompt": (
            request.prompt is not None,
            "'prompt' is not supported here: a Precis conversation keeps the state "
            "(give `conversation`)",
        ),
        "store": (
            request.store is False and request.conversation is not None,
            "a conversation stores every turn; `store: false` needs no `conversation`",
        ),
    }
    if request.background:
        refused["store"] = (
            request.store is False,
            "a background response is stored: `store: false` cannot be background",
        )
    for name, (present, message) in refused.items():
        if present:
            raise OpenAIError(400, message, param=name, code="unsupported_parameter")
    return model
