"""All SQL of the service but the append's (`api.append`), one module per aggregate; functions
take the caller's AsyncSession and never commit (the caller owns the transaction: see
`api.db.transactions`).

- `sessions`: create, read, update, delete.
- `messages`: the listings and single lookups (the append, one statement on the driver, is
  in `api.append`).
- `loader`: the history loader's reads (two round trips per load).
- `summaries`: live summaries, saving one with its links, the backlog a trigger reads.
- `jobs`: background summarization jobs.
- `removal`: a message removed as a tombstone, and the summaries it reached erased.
- `rows`: one frozen row type per record (`SessionRow`, `MessageRow`, `SummaryRow`, `JobRow`),
  returned by every read, and `NewMessage`, what an append takes.
- `audit`: the operator tools' read-only engine, session lookup and tracing reads.
- `integrity`: the integrity queries of `scripts/verify`.
- `readiness`: the readiness probe's read (the database's schema revision).

The service calls them as `store.<function>`; the names below are that surface.
"""

from api.store.jobs import (
    claim_job,
    enqueue_job,
    finish_job,
    pending_job_count,
    release_job,
    renew_job_lease,
)
from api.store.loader import (
    EVERY_LIVE_SUMMARY,
    HistoryStart,
    LoadedRows,
    load_rows,
    session_for_history,
)
from api.store.messages import (
    message_by_client_id,
    message_by_id,
    messages_before,
    messages_in_range,
)
from api.store.removal import (
    Removal,
    RemovalPreview,
    message_exists,
    remake_owed,
    removal_preview,
    remove,
)
from api.store.rows import JobRow, MessageRow, NewMessage, SessionRow, SummaryRow
from api.store.sessions import (
    SessionPosition,
    create_session,
    delete_session,
    get_session,
    get_session_by_key,
    list_sessions,
    update_session,
)
from api.store.summaries import (
    Backlog,
    SourceSpan,
    SummaryDraft,
    absorbed_by,
    backlog,
    delete_covers,
    get_summary,
    get_summary_by_id,
    holes,
    list_summaries,
    live_fallback_summaries,
    live_summaries,
    live_summary_counts,
    open_holes,
    save_summary,
    summary_before,
    summary_message_ids,
    summary_values,
)

__all__ = [
    "EVERY_LIVE_SUMMARY",
    "Backlog",
    "HistoryStart",
    "JobRow",
    "LoadedRows",
    "MessageRow",
    "NewMessage",
    "Removal",
    "RemovalPreview",
    "SessionPosition",
    "SessionRow",
    "SourceSpan",
    "SummaryDraft",
    "SummaryRow",
    "absorbed_by",
    "backlog",
    "claim_job",
    "create_session",
    "delete_covers",
    "delete_session",
    "enqueue_job",
    "finish_job",
    "get_session",
    "get_session_by_key",
    "get_summary",
    "get_summary_by_id",
    "holes",
    "list_sessions",
    "list_summaries",
    "live_fallback_summaries",
    "live_summaries",
    "live_summary_counts",
    "load_rows",
    "message_by_client_id",
    "message_by_id",
    "message_exists",
    "messages_before",
    "messages_in_range",
    "open_holes",
    "pending_job_count",
    "release_job",
    "remake_owed",
    "removal_preview",
    "remove",
    "renew_job_lease",
    "save_summary",
    "session_for_history",
    "summary_before",
    "summary_message_ids",
    "summary_values",
    "update_session",
]
