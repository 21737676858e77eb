"""Summarization's pure rules and plans: when a proactive summary is due (`proactive_reason`,
`BacklogCounting`, `outage_defers`), what a run summarizes (`Plan`), and what it makes of the
summarizer's result (`summary_draft`, `inherit_fallback`, `unsaved_row`, `Preview`). No I/O:
the `Summarization` (`api.summarization`) reads and stores around them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from api import store
from api.context import edited_tokens
from api.context_edits import ContextEdits
from api.db.models import utcnow
from api.items import joins_next
from api.session_settings import SummaryPolicy
from api.summary_forest import Forest
from summarizer import SummaryResult
from summarizer.cuts import JOINS_NEXT
from summarizer.summarize import FALLBACK_MODEL
from summarizer.triggers import ProactiveReason


def summarizer_input(
    messages: list[store.MessageRow], ends_range: bool = False
) -> list[dict[str, Any]]:
    """Stored messages as the summarizer takes them: OpenAI shape, with their seqs; a Responses
    `reasoning` item marked to stay with the item after it (`summarizer.cuts.JOINS_NEXT`),
    unless it ends a range whose end is fixed (`ends_range`: a hole's, the item after it
    removed)."""
    last = len(messages) - 1
    return [
        {
            **message.openai(),
            "seq": message.seq,
            **(
                {JOINS_NEXT: True}
                if message.item and joins_next(message.item) and not (ends_range and i == last)
                else {}
            ),
        }
        for i, message in enumerate(messages)
    ]


def inherit_fallback(
    absorbed: list[store.SummaryRow], model: str, metadata: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """A roll-up of a fallback summary lacks what the fallback lost: it is a fallback too,
    so the repair re-makes it from the source messages."""
    fallback = next((s for s in absorbed if s.model == FALLBACK_MODEL), None)
    if fallback is None or metadata.get("fallback"):
        return model, metadata
    return FALLBACK_MODEL, {
        **metadata,
        "fallback": True,
        "fallback_reason": fallback.metadata.get("fallback_reason", "llm_unavailable"),
        "fallback_detail": f"absorbs fallback summary {fallback.id}",
    }


def summary_draft(
    result: SummaryResult,
    policy: SummaryPolicy,
    keep: int,
    first_seq: int,
    sources: list[store.MessageRow],
) -> store.SummaryDraft:
    """The summary of `sources` the summarizer made, ready to store over `first_seq` (where the
    range starts, removed messages before the first source included) to its last seq."""
    return store.SummaryDraft(
        first_seq=first_seq,
        last_seq=result.last_seq,
        source_count=sum(1 for message in sources if message.seq <= result.last_seq),
        summary_text=result.summary_text,
        summary_prompt=result.prompt,
        model=result.model,
        temperature=policy.summarizer.temperature,
        target_summary_tokens=policy.summarizer.target_tokens,
        keep_last_n=keep,
        approx_tokens=result.summary_tokens,
        metadata=result.metadata,
    )


def pinned_floor(session: store.SessionRow, policy: SummaryPolicy) -> int:
    """Where a session's first summary may start after: its pinned prefix, when pinned."""
    return session.pinned_seq if policy.pin_system else 0


def proactive_reason(policy: SummaryPolicy, backlog: store.Backlog) -> ProactiveReason | None:
    """Why the backlog after the newest live summary must be summarized now, if it must."""
    if not policy.dynamic_summary_enabled or backlog.message_count <= policy.keep_last_n:
        return None
    if backlog.message_count >= policy.message_limit:
        return "message_limit"
    if backlog.token_count is not None and backlog.token_count >= policy.max_context_tokens:
        return "token_limit"
    return None


@dataclass(frozen=True)
class BacklogCounting:
    """What `proactive_reason` reads of a backlog under one policy, as an append's statement
    counts it (`api.append`): derived from the policy by `of`, so no statement holds a copy
    of the rule or of a session's overrides (`Settings.policy` resolves those)."""

    pinned_floor: bool
    """The backlog starts after the pinned prefix (as `pinned_floor` says)."""
    tokens_below: int
    """The rule reads the backlog's tokens only while it holds fewer messages than this (0:
    never): at the message limit, or with summarization off, tokens cannot change its answer."""

    @classmethod
    def of(cls, policy: SummaryPolicy) -> BacklogCounting:
        reads_tokens = policy.dynamic_summary_enabled
        return cls(policy.pin_system, policy.message_limit if reads_tokens else 0)


@dataclass(frozen=True)
class Plan:
    """What one run summarizes, as read at its start: the messages after `after_seq` but the
    newest `keep`, continuing the newest of `live`."""

    session: store.SessionRow
    policy: SummaryPolicy
    live: list[store.SummaryRow]
    """The live summaries before the range, oldest first (a repair: the one right before)."""
    after_seq: int
    """Where the range starts after: the newest live summary's end, or the pinned prefix's."""
    messages: list[store.MessageRow]
    keep: int
    instructions: str | None
    """What the summary must keep: the session's `summary_instructions`, then the caller's."""
    forest: Forest = field(default_factory=lambda: Forest(()))
    """The session's forest as read with `live` (`api.summary_forest`)."""
    hole_end: int | None = None
    """Set when the run makes a hole's leaf again (a removal erased the one there): the range
    ends at this seq, right before the live summary after it, and holds every message."""
    leaf_sized: bool = False
    """Summarize at most `message_limit` messages (`summarized`): a background job, which
    leaves a larger backlog (after a removal, an outage) to the jobs after it, leaf by leaf,
    so no summary has to squeeze more facts into its target than a leaf does."""

    @property
    def summarized(self) -> list[store.MessageRow]:
        """The messages the summary reads (it leaves out the newest `keep` of them)."""
        if not self.leaf_sized or self.hole_end is not None:
            return self.messages
        return self.messages[: self.policy.message_limit + self.keep]

    @property
    def backlog(self) -> store.Backlog:
        """What follows the newest live summary, counted as the proactive trigger counts it
        (`due_reason`: tokens as a history load shows them, with the session's context
        editing)."""
        edits = ContextEdits.of(self.policy)
        tokens = (
            edited_tokens(self.messages, edits)
            if edits.active
            else sum(message.token_count for message in self.messages)
        )
        return store.Backlog(self.after_seq, self.session.last_seq - self.after_seq, tokens)


def joined_instructions(*given: str | None) -> str | None:
    """Instructions from several places (the session's, then a request's) as one text."""
    return "\n\n".join(text for text in given if text) or None


def outage_defers(policy: SummaryPolicy, backlog: store.Backlog, factor: float) -> bool:
    """Whether a background summary the model could not write is put off rather than stored
    as a fallback: while the backlog stays under `factor` times the size the proactive trigger
    keeps a context at, the raw messages keep every fact and still fit. That size is tokens
    (`max_context_tokens`) when the token trigger is on: many small messages are no reason
    for a summary that loses facts; with it off (or tokens not counted), messages
    (`message_limit`). A factor of 1 puts nothing off: the fallback is stored at once."""
    if factor <= 1:
        return False
    tokens = backlog.token_count
    if policy.dynamic_summary_enabled and tokens is not None:
        return tokens < factor * policy.max_context_tokens
    return backlog.message_count < factor * policy.message_limit


def _covered(source: store.MessageRow | store.SummaryRow) -> tuple[int, store.SourceSpan]:
    """A source's last seq, and what it says of the messages it stands for."""
    if isinstance(source, store.SummaryRow):
        return source.last_seq, store.SourceSpan(
            source.first_message_id,
            source.last_message_id,
            source.message_count,
            source.first_message_at,
            source.last_message_at,
        )
    at = source.created_at
    return source.seq, store.SourceSpan(source.id, source.id, 1, at, at)


def unsaved_row(
    draft: store.SummaryDraft,
    session_key: int,
    sources: Sequence[store.MessageRow | store.SummaryRow],
) -> store.SummaryRow:
    """The row `draft` would be once saved, kept in memory (id 0): what a preview answers and
    assembles its context from. `sources`: the messages its range starts with, or the
    summaries a roll-up absorbs, oldest first."""
    spans = [span for last_seq, span in map(_covered, sources) if last_seq <= draft.last_seq]
    covered = store.SourceSpan(
        spans[0].first_message_id,
        spans[-1].last_message_id,
        sum(span.message_count for span in spans),
        spans[0].first_message_at,
        spans[-1].last_message_at,
    )
    values = store.summary_values(draft, session_key, covered, utcnow())
    return store.SummaryRow(id=0, superseded_by=None, erased_at=None, **values)


@dataclass(frozen=True)
class Preview:
    """What a run would store, made and not stored: its summary, the roll-ups after it (oldest
    first), and the live summaries then, as unsaved rows (`unsaved_row`) among stored ones."""

    plan: Plan
    summary: store.SummaryRow | None
    rollups: list[store.SummaryRow]
    live: list[store.SummaryRow]
