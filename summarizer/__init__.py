"""Precis summarizer: pure, no database and no HTTP."""

from summarizer.client import Completion, CompletionRequest, LLMClient, MergeTask, SummaryTask
from summarizer.cuts import legal_cuts, summarizable_count
from summarizer.errors import (
    ContextWindowError,
    DegenerateAnswerError,
    LLMError,
    LLMRequestError,
    LLMUnavailableError,
    SummarizerError,
    TransientLLMError,
)
from summarizer.local import LOCAL_MODEL, LocalSummarizer
from summarizer.prompts import PROMPT_VERSION
from summarizer.settings import SummarizerSettings, build_client
from summarizer.summarize import (
    METADATA_KEYS,
    MergeResult,
    SummaryResult,
    merge_summaries,
    summarize,
)

__all__ = [
    "LOCAL_MODEL",
    "METADATA_KEYS",
    "PROMPT_VERSION",
    "Completion",
    "CompletionRequest",
    "ContextWindowError",
    "DegenerateAnswerError",
    "LLMClient",
    "LLMError",
    "LLMRequestError",
    "LLMUnavailableError",
    "LocalSummarizer",
    "MergeResult",
    "MergeTask",
    "SummarizerError",
    "SummarizerSettings",
    "SummaryResult",
    "SummaryTask",
    "TransientLLMError",
    "build_client",
    "legal_cuts",
    "merge_summaries",
    "summarizable_count",
    "summarize",
]
