"""All server settings, read from the environment (and an optional `.env`), validated at start."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from functools import cache
from typing import Annotated, Any, Literal, Self, get_args

from pydantic import (
    BeforeValidator,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict, SettingsError

from api.db.urls import checked_database_url
from api.session_settings import (
    SESSION_KEYS,
    SUMMARIZER_KEYS,
    ModelName,
    NonNegativeInt,
    PositiveInt,
    SummaryInstructions,
    SummaryOverrides,
    SummaryPolicy,
    Temperature,
)
from summarizer import SummarizerSettings
from summarizer.local import LOCAL_MODEL

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./data/precis.db"
"""The embedded default: one SQLite file under ./data/, created on first migration."""

DEFAULT_DATABASE_RETRY_SECONDS = 10.0
"""How long a request or job waits for a database that went away (DATABASE_RETRY_SECONDS):
a restart or a failover takes a few seconds; longer, and a client is better told (503)."""


def _comma_list(value: Any) -> Any:
    """A list setting given in the environment as `a,b,c` (or as a JSON list)."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                return json.loads(text)
            except json.JSONDecodeError:
                raise ValueError("must be names separated by commas, or a JSON list") from None
        return [name.strip() for name in text.split(",") if name.strip()]
    return value


class Settings(BaseSettings):
    """Server-wide settings; names as in docs/design.md section 4."""

    model_config = SettingsConfigDict(env_file=".env", extra="ignore", case_sensitive=False)

    database_url: str = DEFAULT_DATABASE_URL
    database_retry_seconds: Annotated[float, Field(gt=0, le=3600)] = DEFAULT_DATABASE_RETRY_SECONDS
    """How long, from its first lost connection, a request or a background job retries on a
    fresh connection while the database is unreachable (a restart, a failover); past it a
    request answers 503 with Retry-After."""
    database_pool_size: Annotated[int, Field(ge=1, le=1000)] = 15
    """Connections the request side keeps open to the database, and uses at most. Kept open
    rather than opened on demand: under concurrent traffic, connections opened and closed per
    burst (SQLAlchemy's overflow) cost a connect and a server process each."""
    api_keys: SecretStr = SecretStr("")
    operator_key: SecretStr | None = None
    """The operator's key (OPERATOR_KEY): the only key `/metrics` answers when API_KEYS is set,
    since its counters are server-wide (every tenant's traffic). Not a tenant's key."""
    console_login_ttl_seconds: Annotated[float, Field(gt=0, le=30 * 86_400)] = 43_200.0
    """How long a console login holds before the key is asked for again (12 hours)."""

    dynamic_summary_enabled: bool = True
    summary_message_limit: PositiveInt = 80
    summary_max_context_tokens: PositiveInt = 16_000
    summary_keep_last_n: NonNegativeInt = 10
    summary_target_tokens: PositiveInt = 800
    summary_merge_target_tokens: PositiveInt = 1_200
    summary_bisect_enabled: bool = True
    summary_bisect_max_depth: Annotated[int, Field(ge=0, le=32)] = 6
    summary_bisect_min_messages: PositiveInt = 2
    summary_retry_on_context_overflow: bool = True
    summary_limit: Annotated[int, Field(ge=1, le=100)] = 3
    summary_model: ModelName = "local"
    summary_allowed_models: str = ""
    """Other litellm models a session's `settings.model` may name (comma-separated), besides
    SUMMARY_MODEL and `local`. A session naming any other is summarized with SUMMARY_MODEL:
    a client must not send the server's API key to a provider (or a local port) it picks."""
    summary_api_base: str | None = None
    summary_api_key: SecretStr | None = None
    summary_model_context_tokens: PositiveInt | None = None
    summary_temperature: Temperature = 0.3
    summary_pin_system: bool = True
    """Leading system/developer messages are never summarized and head every context."""

    summary_instructions: SummaryInstructions | None = None
    """What every summary must keep, unless a session says otherwise (none by default)."""
    summary_outage_backlog_factor: Annotated[float, Field(ge=1, le=100)] = 2.0
    """While the summarizer model is unavailable, a background summary is put off (nothing
    stored, retried with backoff) until the backlog reaches this many times the size the
    proactive trigger keeps a context at (`max_context_tokens` tokens with the token trigger
    on, else `message_limit` messages); only then is a fallback summary stored. 1: at once."""

    clear_tool_results_trigger_tokens: NonNegativeInt = 0
    """Unsummarized tokens past which old tool results load as placeholders (0: off)."""
    clear_tool_results_keep: NonNegativeInt = 3
    clear_tool_results_at_least_tokens: NonNegativeInt = 0
    clear_tool_results_exclude_tools: Annotated[
        list[str], NoDecode, BeforeValidator(_comma_list)
    ] = []
    clear_tool_inputs: bool = False
    clear_file_parts_keep: NonNegativeInt | None = None

    summary_llm_timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = 60.0
    """Timeout of one summarizer LLM call."""
    summary_llm_max_attempts: Annotated[int, Field(ge=1, le=20)] = 4
    """Attempts per LLM call on transient errors (timeouts, 429, 5xx) before giving up."""
    summary_llm_backoff_seconds: Annotated[float, Field(gt=0, le=60)] = 0.5
    """First retry delay of a failed LLM call; it grows exponentially, with jitter."""
    summary_llm_max_retry_seconds: Annotated[float, Field(gt=0, le=3600)] = 120.0
    """Longest time one LLM call may spend retrying, whatever attempts are left."""
    summary_llm_concurrency: Annotated[int, Field(ge=1, le=64)] = 4
    """LLM calls one summarization makes at once (the bisect's halves run concurrently)."""
    summary_tool_result_preview_chars: Annotated[int, Field(ge=1, le=1_000_000)] = 1500
    """Characters of a tool result shown to the summarizer."""
    summary_tool_args_preview_chars: Annotated[int, Field(ge=1, le=1_000_000)] = 200
    """Characters of a tool call's arguments shown to the summarizer."""

    summary_workers: Annotated[int, Field(ge=0, le=64)] = 2
    """Background summarization jobs run at once by this process (0: this replica runs none)."""
    background_response_workers: Annotated[int, Field(ge=0, le=256)] = 8
    """Background responses (`POST /v1/responses` with `background: true`) this process runs
    at once, when it runs the summarization worker (`summary_workers` above 0)."""
    summary_concurrency: Annotated[int, Field(ge=1, le=64)] = 4
    """Summarizations (background jobs and inline summarizations) this process runs at once.

    They use a pool of their own, twice this size, apart from the requests' pool: an inline
    summarization runs while its request holds a connection, so one shared pool could deadlock.
    """

    summary_repair_interval_seconds: Annotated[float, Field(gt=0, le=86_400)] = 60.0
    """How often the worker looks for live fallback summaries to re-make with the model."""
    summary_inline_deadline_seconds: Annotated[float, Field(gt=0, le=3600)] = 10.0
    """Longest summarization a history load runs inline; past it the load answers the truncated
    context at once and the summarization is left to a background job."""
    summary_compact_deadline_seconds: Annotated[float, Field(gt=0, le=3600)] = 300.0
    """Longest `POST /compact` (waiting for a running summarization included); past it the
    answer is 504 `SummarizationTimeout` and nothing of the cut-short run is stored."""

    session_idle_ttl_days: Annotated[float, Field(gt=0, le=36_500)] | None = None
    """Days without an append or a change after which a session expires (None: never)."""
    retention_sweep_interval_seconds: Annotated[float, Field(gt=0, le=86_400)] = 60.0
    """How often the worker deletes expired sessions (in small batches)."""

    max_message_bytes: PositiveInt = 1_000_000
    """Largest accepted message (its JSON encoding); larger ones get 413."""
    max_request_bytes: Annotated[int, Field(ge=1)] = 32_000_000
    """Largest accepted request body; larger ones get 413."""
    max_metadata_bytes: PositiveInt = 65_536
    """Largest `metadata` object (its JSON encoding) of a session or a message; larger get 413."""
    max_import_bytes: Annotated[int, Field(ge=1)] = 256_000_000
    """Largest import body (`POST /v1/sessions/import`), counted while it streams in; 413 beyond."""
    max_import_lines: Annotated[int, Field(ge=1)] = 1_000_000
    """Most lines an import body may hold, counted while it streams in; 413 beyond."""

    model_allowed: str = ""
    """litellm models `POST /v1/responses`, `/v1/chat/completions` and `/v1/messages` may name
    (comma-separated; `*`: any). Empty: the endpoints refuse every model, so that no client
    spends the server's key unasked."""
    model_api_base: str | None = None
    """The API base of the models `/v1/responses` calls (none: litellm's default for each)."""
    model_api_key: SecretStr | None = None
    """The API key sent to those models; never shown, logged or stored."""
    model_allow_any_provider: bool = False
    """With MODEL_ALLOWED=`*` and no MODEL_API_BASE, a client could name any provider litellm
    knows and have MODEL_API_KEY sent there: the server refuses to start unless this is true."""
    model_context_tokens: str = ""
    """Windows of models litellm does not know (or to override it): `model=tokens,...`."""
    model_default_output_tokens: PositiveInt = 4_096
    """Tokens kept free for the answer when a request gives no `max_output_tokens` (at most a
    quarter of the model's window)."""
    model_timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = 600.0
    """Timeout of one call to the model (a long answer streams for minutes)."""
    model_token_margin: Annotated[float, Field(ge=0, le=1)] = 0.05
    """Safety margin on a model's learned token ratio (`api.model_tokens`): a context is fitted
    into the window divided by ratio times (1 + this)."""
    memory_identify: Literal["named", "prefix"] = "named"
    """How `/v1/chat/completions` and `/v1/messages` find a request's session: `named`, by the
    X-Precis-Session header or the wire's own field only; `prefix`, else by a fingerprint of
    the tenant, the system prompt and the first user message."""

    _default_policy: SummaryPolicy | None = PrivateAttr(default=None)

    @field_validator("database_url")
    @classmethod
    def _async_driver(cls, value: str) -> str:
        return checked_database_url(value)

    @field_validator("api_keys")
    @classmethod
    def _keys_parse(cls, value: SecretStr) -> SecretStr:
        parse_tenant_keys(value.get_secret_value())
        return value

    @field_validator("summary_api_base", "model_api_base", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return value or None

    @field_validator("operator_key", mode="before")
    @classmethod
    def _no_empty_key(cls, value: Any) -> Any:
        return value or None

    @model_validator(mode="after")
    def _key_stays_with_its_provider(self) -> Self:
        if "*" in self.responses_models() and not (
            self.model_api_base or self.model_allow_any_provider
        ):
            raise ValueError(
                "MODEL_ALLOWED=* without MODEL_API_BASE would let a client send MODEL_API_KEY to "
                "any provider litellm knows: set MODEL_API_BASE, list the models, or set "
                "MODEL_ALLOW_ANY_PROVIDER=true"
            )
        return self

    def policy(self, overrides: SummaryOverrides | dict[str, Any] | None = None) -> SummaryPolicy:
        """The summary settings in force for a session with these overrides."""
        if not overrides:
            # most sessions override nothing: their policy is resolved once (settings are
            # never changed after start)
            if self._default_policy is None:
                self._default_policy = self._resolve(None)
            return self._default_policy
        return self._resolve(overrides)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        copy = super().model_copy(update=update, deep=deep)
        copy._default_policy = None  # resolved from the copy's own values when asked
        return copy

    def effective(self, overrides: SummaryOverrides | dict[str, Any] | None) -> dict[str, Any]:
        """Every per-session key's value in force: the server's, overlaid by `overrides` (a
        model the server does not allow is replaced by SUMMARY_MODEL)."""
        if isinstance(overrides, dict):
            overrides = SummaryOverrides.model_validate(overrides)
        values = {key: getattr(self, name) for key, name in SESSION_KEYS.items()}
        if overrides is not None:
            values.update(overrides.model_dump(exclude_none=True))
        if values["model"] not in self.allowed_models():
            values["model"] = self.summary_model
        return values

    def _resolve(self, overrides: SummaryOverrides | dict[str, Any] | None) -> SummaryPolicy:
        values = self.effective(overrides)
        summarizer = {key: values.pop(key) for key in SUMMARIZER_KEYS & values.keys()}
        return SummaryPolicy(summarizer=replace(self.summarizer_defaults(), **summarizer), **values)

    def summarizer_defaults(self) -> SummarizerSettings:
        """The summarizer's server-only settings (API, retries, previews) and its defaults."""
        api_key = self.summary_api_key
        return SummarizerSettings(
            api_base=self.summary_api_base,
            api_key=api_key.get_secret_value() if api_key else None,
            timeout_seconds=self.summary_llm_timeout_seconds,
            max_attempts=self.summary_llm_max_attempts,
            backoff_initial_seconds=self.summary_llm_backoff_seconds,
            max_retry_seconds=self.summary_llm_max_retry_seconds,
            max_concurrency=self.summary_llm_concurrency,
            tool_result_preview_chars=self.summary_tool_result_preview_chars,
            tool_args_preview_chars=self.summary_tool_args_preview_chars,
        )

    def allowed_models(self) -> frozenset[str]:
        """The models a session may choose: SUMMARY_MODEL, `local` and SUMMARY_ALLOWED_MODELS."""
        extra = {name.strip() for name in self.summary_allowed_models.split(",") if name.strip()}
        return frozenset({self.summary_model, LOCAL_MODEL, *extra})

    def responses_models(self) -> frozenset[str]:
        """MODEL_ALLOWED as a set (`*` admits any model)."""
        return frozenset(name.strip() for name in self.model_allowed.split(",") if name.strip())

    def model_windows(self) -> dict[str, int]:
        """MODEL_CONTEXT_TOKENS: model -> window in tokens."""
        return parse_model_windows(self.model_context_tokens)

    @field_validator("model_context_tokens")
    @classmethod
    def _windows_parse(cls, value: str) -> str:
        parse_model_windows(value)
        return value

    def tenant_keys(self) -> dict[str, str]:
        """API key -> tenant, parsed from `API_KEYS="tenant_a:key_a,tenant_b:key_b"`."""
        return parse_tenant_keys(self.api_keys.get_secret_value())


def parse_tenant_keys(text: str) -> dict[str, str]:
    """API_KEYS as key -> tenant; ValueError naming API_KEYS (never a key) when malformed."""
    keys: dict[str, str] = {}
    for entry in text.split(","):
        entry = entry.strip()
        if not entry:
            continue
        tenant, sep, key = entry.partition(":")
        if not sep or not tenant.strip() or not key.strip():
            raise ValueError("API_KEYS entries must look like tenant:key")
        if keys.get(key.strip(), tenant.strip()) != tenant.strip():
            raise ValueError("API_KEYS gives one key to two tenants")
        keys[key.strip()] = tenant.strip()
    return keys


def parse_model_windows(text: str) -> dict[str, int]:
    """`model=tokens,...` as a dict; ValueError naming MODEL_CONTEXT_TOKENS when malformed."""
    windows: dict[str, int] = {}
    for entry in text.split(","):
        if not entry.strip():
            continue
        model, sep, tokens = entry.rpartition("=")
        if not sep or not model.strip() or not tokens.strip().isdigit() or int(tokens) < 1:
            raise ValueError(f"MODEL_CONTEXT_TOKENS entries look like model=tokens, not {entry!r}")
        windows[model.strip()] = int(tokens)
    return windows


class InvalidSettings(ValueError):
    """Settings that do not validate, in words: one line per problem, each naming the
    environment variable at fault (`setting_problems`)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


SETTING_WORDS = {
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "bool_parsing": "must be true or false",
}
"""pydantic's commonest complaints about a value read from the environment, in words."""

MAX_VALUE_SHOWN = 60
"""Characters of a refused value quoted back: enough to spot the typo."""


def setting_problems(error: ValidationError) -> list[str]:
    """One line per invalid setting: its environment variable, what is wrong and (but for
    secrets and DATABASE_URL, which may hold a password) the value refused."""
    problems = [_problem(each) for each in error.errors(include_url=False)]
    return list(dict.fromkeys(problems))


def _problem(error: ErrorDetails) -> str:
    context = error.get("ctx") or {}
    if error["type"] == "value_error" and "error" in context:
        message = str(context["error"])  # our validators' own sentences
    else:
        message = SETTING_WORDS.get(error["type"]) or error["msg"].replace(
            "Input should be", "must be", 1
        )
        if error["loc"] and not _is_secret(str(error["loc"][0])):
            value = str(error["input"])
            if len(value) > MAX_VALUE_SHOWN:
                value = value[:MAX_VALUE_SHOWN] + "..."
            message += f", not {value!r}"
    if not error["loc"]:
        return message  # a rule across settings names them itself
    name = str(error["loc"][0]).upper()
    return message if message.startswith(name) else f"{name}: {message}"


def _is_secret(field_name: str) -> bool:
    field = Settings.model_fields.get(field_name)
    annotation = field.annotation if field is not None else None
    return (
        field_name == "database_url" or annotation is SecretStr or SecretStr in get_args(annotation)
    )


@cache
def get_settings() -> Settings:
    """The process-wide settings, read once; InvalidSettings (one line per problem) when
    they do not validate."""
    try:
        return Settings()
    except ValidationError as exc:
        raise InvalidSettings(setting_problems(exc)) from None
    except SettingsError as exc:  # a value pydantic-settings could not even decode
        raise InvalidSettings([str(exc)]) from None
