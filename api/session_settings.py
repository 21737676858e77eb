"""Per-session summary settings: the keys a session's `settings` may override, their types,
and the `SummaryPolicy` they resolve to with the server's defaults (`api.settings.Settings`)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, Strict

from summarizer import SummarizerSettings

PositiveInt = Annotated[int, Field(ge=1, le=10_000_000)]
NonNegativeInt = Annotated[int, Field(ge=0, le=10_000_000)]
Temperature = Annotated[float, Field(ge=0.0, le=2.0)]


def _printable(value: str) -> str:
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in value):
        raise ValueError("control characters (NUL included) are not accepted")
    return value


SummaryInstructions = Annotated[
    str,
    Field(
        min_length=1,
        max_length=4000,
        json_schema_extra={"pattern": r"^[^\x00-\x08\x0b-\x1f\x7f]*$"},
    ),
    AfterValidator(lambda text: _printable_text(text)),
]
"""Guidance for the summarizer: printable text, newlines and tabs allowed."""

ToolName = Annotated[
    str,
    Field(min_length=1, max_length=128, json_schema_extra={"pattern": r"^[^\x00-\x1f\x7f]*$"}),
    AfterValidator(_printable),
]
ToolNames = Annotated[list[ToolName], Field(max_length=100)]
"""Names of tools, as the calls name them."""


def _printable_text(value: str) -> str:
    if any((ord(char) < 0x20 and char not in "\n\t") or ord(char) == 0x7F for char in value):
        raise ValueError("control characters (NUL included) are not accepted")
    return value


ModelName = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_printable)]
"""A litellm model string: printable (PostgreSQL stores no NUL; a name has no control chars)."""


def _json_integer(value: Any) -> Any:
    if isinstance(value, (bool, str)):
        raise ValueError("must be a JSON integer, not a boolean or a string")
    return value


JSON_INTEGER = (Strict(False), BeforeValidator(_json_integer))
"""Metadata for an int of a strict request model: `3` or `3.0` (both JSON Schema integers),
never `true` or `"3"`. It follows the bounds in `Annotated`, so the schema keeps them."""

OverrideCount = Annotated[int, Field(ge=1, le=10_000_000), *JSON_INTEGER]
OverrideNonNegative = Annotated[int, Field(ge=0, le=10_000_000), *JSON_INTEGER]


class SummaryOverrides(BaseModel):
    """Per-session summary settings: the keys a session's `settings` object may carry."""

    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True)

    dynamic_summary_enabled: bool | None = None
    """Proactive and inline summarization."""
    message_limit: OverrideCount | None = None
    """Unsummarized messages that start a proactive summary."""
    max_context_tokens: OverrideCount | None = None
    """Unsummarized tokens that start a proactive summary."""
    keep_last_n: OverrideNonNegative | None = None
    """Newest messages a proactive summary leaves out."""
    target_tokens: OverrideCount | None = None
    """Target length of a summary."""
    merge_target_tokens: OverrideCount | None = None
    """Target length of a merged summary."""
    bisect_enabled: bool | None = None
    """Split an input that does not fit the summarizer's window."""
    bisect_max_depth: Annotated[int, Field(ge=0, le=32), *JSON_INTEGER] | None = None
    """Deepest split before forced truncation."""
    bisect_min_messages: OverrideCount | None = None
    """Smallest chunk that is still split."""
    retry_on_context_overflow: bool | None = None
    """The history loader compacts inline when over `max_tokens`."""
    summary_limit: Annotated[int, Field(ge=1, le=100), *JSON_INTEGER] | None = None
    """Live summaries loaded; older ones are rolled up."""
    model: ModelName | None = None
    """The summarizer model (one the server allows)."""
    model_context_tokens: OverrideCount | None = None
    """The summarizer's window, in tokens."""
    temperature: Temperature | None = None
    """Temperature of the summarizer's calls."""
    pin_system: bool | None = None
    """Leading system/developer messages are never summarized."""
    summary_instructions: SummaryInstructions | None = None
    """What every summary of the session must keep (for example "every file path and error
    message"), given to the summarizer with its task."""
    clear_tool_results_trigger_tokens: OverrideNonNegative | None = None
    """Unsummarized tokens past which old tool results load as placeholders (0: never)."""
    clear_tool_results_keep: OverrideNonNegative | None = None
    """Newest tool results never cleared."""
    clear_tool_results_at_least_tokens: OverrideNonNegative | None = None
    """Tokens cleared at once, at least: the cleared part grows in steps this large."""
    clear_tool_results_exclude_tools: ToolNames | None = None
    """Tools whose results are never cleared."""
    clear_tool_inputs: bool | None = None
    """A cleared result's call loads with its arguments cleared too."""
    clear_file_parts_keep: OverrideNonNegative | None = None
    """Newest image and file parts loaded as sent; older ones load as placeholders."""


@dataclass(frozen=True)
class SummaryPolicy:
    """The summary settings in force for one session: server defaults overlaid by its overrides,
    resolved once per request or job (`Settings.policy`)."""

    dynamic_summary_enabled: bool
    message_limit: int
    max_context_tokens: int
    keep_last_n: int
    retry_on_context_overflow: bool
    summary_limit: int
    """Live summaries loaded; older ones are rolled up."""
    pin_system: bool
    summary_instructions: str | None
    clear_tool_results_trigger_tokens: int
    """0: tool results are never cleared."""
    clear_tool_results_keep: int
    clear_tool_results_at_least_tokens: int
    clear_tool_results_exclude_tools: list[str]
    clear_tool_inputs: bool
    clear_file_parts_keep: int | None
    """None: every image and file part loads as sent."""
    summarizer: SummarizerSettings
    """What the summarizer takes; a run sets its own `keep_last_n` and `previous_summary`."""


SESSION_KEYS: dict[str, str] = {
    "dynamic_summary_enabled": "dynamic_summary_enabled",
    "message_limit": "summary_message_limit",
    "max_context_tokens": "summary_max_context_tokens",
    "keep_last_n": "summary_keep_last_n",
    "target_tokens": "summary_target_tokens",
    "merge_target_tokens": "summary_merge_target_tokens",
    "bisect_enabled": "summary_bisect_enabled",
    "bisect_max_depth": "summary_bisect_max_depth",
    "bisect_min_messages": "summary_bisect_min_messages",
    "retry_on_context_overflow": "summary_retry_on_context_overflow",
    "summary_limit": "summary_limit",
    "model": "summary_model",
    "model_context_tokens": "summary_model_context_tokens",
    "temperature": "summary_temperature",
    "pin_system": "summary_pin_system",
    "summary_instructions": "summary_instructions",
    "clear_tool_results_trigger_tokens": "clear_tool_results_trigger_tokens",
    "clear_tool_results_keep": "clear_tool_results_keep",
    "clear_tool_results_at_least_tokens": "clear_tool_results_at_least_tokens",
    "clear_tool_results_exclude_tools": "clear_tool_results_exclude_tools",
    "clear_tool_inputs": "clear_tool_inputs",
    "clear_file_parts_keep": "clear_file_parts_keep",
}
"""Each per-session key (`SummaryOverrides`) and the server setting it overrides."""

SUMMARIZER_KEYS = frozenset(field.name for field in fields(SummarizerSettings)) - {"keep_last_n"}
"""Per-session keys the summarizer reads; its `keep_last_n` is each run's own."""

_POLICY_KEYS = frozenset(field.name for field in fields(SummaryPolicy)) - {"summarizer"}
if SESSION_KEYS.keys() != SummaryOverrides.model_fields.keys() or not (
    set(SESSION_KEYS) - SUMMARIZER_KEYS == _POLICY_KEYS
):
    raise RuntimeError("SESSION_KEYS, SummaryOverrides and SummaryPolicy name different keys")


def model_not_allowed(model: str, allowed: frozenset[str]) -> str:
    """Why a session may not name `model`: the server allows only `allowed`."""
    return (
        f"settings.model: {model!r} is not allowed on this server "
        f"(allowed: {', '.join(sorted(allowed))}; see SUMMARY_ALLOWED_MODELS)"
    )
