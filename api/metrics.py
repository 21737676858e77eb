"""Prometheus metrics of the service, served as text at /metrics."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

SUMMARIES = Counter(
    "precis_summaries_total", "Summaries stored, by trigger and reason", ["trigger", "reason"]
)
LLM_CALLS = Counter("precis_llm_calls_total", "Summarizer LLM calls made")
LLM_FAILURES = Counter(
    "precis_llm_failed_calls_total",
    "Summarizer LLM calls that failed, by reason "
    "(transient, rejected, context_window, degenerate_answer)",
    ["reason"],
)
FALLBACK_SUMMARIES = Counter(
    "precis_fallback_summaries_total",
    "Summaries stored with parts written without the model, by fallback_reason",
    ["reason"],
)
SUMMARIZATION_SECONDS = Histogram(
    "precis_summarization_seconds",
    "Time to make and store one summary",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
)
HISTORY_SECONDS = Histogram(
    "precis_history_load_seconds",
    "History load latency",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
)
APPEND_SECONDS = Histogram(
    "precis_append_seconds",
    "Append latency",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
)
REPAIRED_SUMMARIES = Counter(
    "precis_repaired_summaries_total", "Fallback summaries re-made with the model"
)
REMOVED_MESSAGES = Counter(
    "precis_removed_messages_total",
    "Messages removed by clients (delete and pop)",
)
ERASED_SUMMARIES = Counter(
    "precis_erased_summaries_total",
    "Summaries erased because a message they had reached was removed; their range is made "
    'again, counted in precis_summaries_total{reason="erasure"}',
)
DEFERRED_SUMMARIES = Counter(
    "precis_summaries_deferred_total",
    "Background summarizations that found the summarizer model unavailable and stored nothing, "
    "their jobs put off with backoff (until the backlog reaches SUMMARY_OUTAGE_BACKLOG_FACTOR "
    "times the proactive trigger)",
)
PENDING_JOBS = Gauge("precis_pending_summary_jobs", "Summarization jobs queued or running")
JOB_FAILURES = Counter("precis_summary_job_failures_total", "Background jobs that failed")
DATABASE_RETRIES = Counter(
    "precis_database_retries_total",
    "Database work run again on a fresh connection after its connection died or none could "
    "be made, by kind (read: a statement of a read request or a probe; write: a session's "
    "create, patch or delete, a message's removal; append: a whole append; summarization: a "
    "job, its bookkeeping, an inline summarization, a repair)",
    ["kind"],
)
RESPONSES = Counter(
    "precis_responses_total",
    "POST /v1/responses calls that reached the model, by outcome (stored: a conversation's "
    "turn stored; passed_through: no conversation; model_failed: the model failed or refused "
    "the context, nothing stored) and whether an overflow_retry summary was made first",
    ["outcome", "overflow_retry"],
)
WIRE_TURNS = Counter(
    "precis_wire_turns_total",
    "POST /v1/chat/completions and /v1/messages calls that reached the model, by wire and "
    "outcome (stored, passed_through, model_failed) and whether the session branched first",
    ["wire", "outcome", "branched"],
)
EXPIRED_DELETED = Counter(
    "precis_expired_deleted_total",
    "What the retention sweep deleted with expired sessions, by kind (sessions, messages, "
    "summaries, background_responses: ended ones as old as an idle session's expiry)",
    ["kind"],
)
