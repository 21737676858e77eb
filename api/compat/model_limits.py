"""The model a turn calls, whatever the API: allowed or not, its window, the answer's room."""

from __future__ import annotations

from api import offline_model
from api.openai_errors import OpenAIError
from api.settings import Settings
from summarizer.llm import model_context_window

DEFAULT_OUTPUT_SHARE = 4
"""Without a request's answer length, the answer's room is MODEL_DEFAULT_OUTPUT_TOKENS, but
never more than a quarter of the window (a small model keeps room for its context)."""


def check_model(settings: Settings, model: str) -> str:
    """The model as the server calls it: one of MODEL_ALLOWED (a name without its provider,
    as the Agents SDK sends `openai/gpt-4o-mini`, is the one allowed entry that ends with
    `/<name>`), or Precis's offline model in development mode; else 400."""
    if model == offline_model.OFFLINE_MODEL:
        if settings.tenant_keys():
            raise OpenAIError(
                400,
                f"model {model!r} is Precis's offline model, for development mode only (no "
                "API_KEYS configured): name a model of MODEL_ALLOWED",
                param="model",
                code="model_not_allowed",
            )
        return model
    allowed = settings.responses_models()
    if "*" in allowed or model in allowed:
        return model
    with_provider = [name for name in allowed if name.endswith(f"/{model}")]
    if len(with_provider) == 1:
        return with_provider[0]
    offline = (
        ""
        if settings.tenant_keys()
        else f"; in development mode {offline_model.OFFLINE_MODEL!r} answers without a provider"
    )
    raise OpenAIError(
        400,
        f"model {model!r} is not allowed on this server (MODEL_ALLOWED){offline}",
        param="model",
        code="model_not_allowed",
    )


async def model_window(settings: Settings, model: str) -> int:
    """The model's context window: MODEL_CONTEXT_TOKENS, else what litellm knows."""
    window = settings.model_windows().get(model)
    if window is None and model == offline_model.OFFLINE_MODEL:
        window = offline_model.OFFLINE_WINDOW
    window = window or await model_context_window(model)
    if window is None:
        raise OpenAIError(
            400,
            f"the context window of model {model!r} is unknown: set it in MODEL_CONTEXT_TOKENS",
            param="model",
            code="unknown_window",
        )
    return window


def answer_room(settings: Settings, window: int, requested: int | None) -> int:
    """Tokens kept free for the answer."""
    return requested or min(settings.model_default_output_tokens, window // DEFAULT_OUTPUT_SHARE)


def too_long(param: str = "messages") -> OpenAIError:
    return OpenAIError(
        400,
        "the conversation does not fit the model's context window, even summarized",
        param=param,
        code="context_length_exceeded",
    )
