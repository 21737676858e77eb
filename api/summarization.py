"""The service's side of summarization: a `Summarization` summarizes a session's backlog,
rolls up old summaries and repairs fallbacks; the functions below decide when a proactive
summary is due and record its job (`schedule_summary`, `schedule_summary_if_due`).

The summarizer runs outside any transaction; each summary, its links and any superseding update
are then written in one short transaction under the session's summarization lock. Every read and
write goes through the `Database` (`api.db.transactions`) the `Summarization` is given: the unit of
work on the summarization's own pool, which the worker and the lease (`api.locks`) share.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from api import metrics, store
from api.context import edited_tokens
from api.context_edits import ContextEdits
from api.db.transactions import Database
from api.errors import SessionGone, SummarizationInProgress, SummaryRangeConflict
from api.items import joins_next
from api.locks import SessionLocks
from api.settings import Settings, SummaryPolicy
from summarizer import SummaryResult, merge_summaries, summarize
from summarizer.cuts import JOINS_NEXT
from summarizer.summarize import FALLBACK_MODEL
from summarizer.triggers import ProactiveReason, Reason, Trigger

logger = logging.getLogger("precis.summarization")


def summarizer_input(messages: list[store.MessageRow]) -> list[dict[str, Any]]:
    """Stored messages as the summarizer takes them: OpenAI shape, with their seqs; a Responses
    `reasoning` item marked to stay with the item after it (`summarizer.cuts.JOINS_NEXT`)."""
    return [
        {
            **message.openai(),
            "seq": message.seq,
            **({JOINS_NEXT: True} if message.item and joins_next(message.item) else {}),
        }
        for message in messages
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


@dataclass
class Summarization:
    """Makes and stores summaries for sessions (with `summarizer/`); shared by the worker and
    the inline paths."""

    settings: Settings
    database: Database
    """The unit of work every read and write of summarization runs in."""
    locks: SessionLocks

    async def run(
        self,
        session_key: int,
        trigger: Trigger,
        reason: Reason,
        keep_last_n: int | None = None,
        wait_seconds: float = 0.0,
        keep_pending_turn: bool = False,
    ) -> store.SummaryRow | None:
        """Summarize what follows the newest live summary, then roll up if over the limit.

        With `keep_pending_turn` (an inline summarization before the backend's LLM call), a
        newest message from the user is the question being answered: it is never summarized.

        Raises `SummarizationInProgress` when another summarization holds the session longer than
        `wait_seconds`. Returns the new summary, or None when nothing was left to summarize,
        the session included: a session deleted meanwhile is normal use, not a failure.
        """
        try:
            async with self.locks.hold(session_key, wait_seconds):
                try:
                    return await self._run_held(
                        session_key, trigger, reason, keep_last_n, keep_pending_turn
                    )
                except SummaryRangeConflict as exc:
                    # A message was removed while the model worked: what it read is stale, and
                    # the removal erased what it had reached. Read again and make it once more.
                    logger.info("summarizing session %s again: %s", session_key, exc.detail)
                    return await self._run_held(
                        session_key, trigger, reason, keep_last_n, keep_pending_turn
                    )
        except SessionGone:  # deleted before its lease could be taken
            return None

    async def _run_held(
        self,
        session_key: int,
        trigger: Trigger,
        reason: Reason,
        keep_last_n: int | None,
        keep_pending_turn: bool,
    ) -> store.SummaryRow | None:
        """One run under the session's summarization lock (see `run`)."""
        started = time.perf_counter()
        async with self.database.reading() as db:
            session = await store.get_session_by_key(db, session_key)
            if session is None:
                return None
            policy = self.settings.policy(session.settings)
            live = await store.live_summaries(db, session_key)
            # the first summary starts after the pinned prefix, which is never summarized
            after_seq = live[-1].last_seq if live else pinned_floor(session, policy)
            messages = await store.messages_in_range(db, session_key, after_seq)
        keep = policy.keep_last_n if keep_last_n is None else keep_last_n
        if keep_pending_turn and messages and messages[-1].role == "user":
            keep = max(keep, 1)
        try:
            summary = await self._summarize(
                session_key, policy, messages, live, trigger, reason, keep, after_seq
            )
            if summary is not None:
                metrics.SUMMARIZATION_SECONDS.observe(time.perf_counter() - started)
            rolled_up = await self._roll_up(session_key, policy, trigger)
        except SessionGone:
            return None
        if summary is not None and rolled_up:
            # The new summary may have been absorbed: answer with its `superseded_by`.
            async with self.database.reading() as db:
                summary = await store.get_summary_by_id(db, summary.id) or summary
        return summary

    async def _summarize(
        self,
        session_key: int,
        policy: SummaryPolicy,
        messages: list[store.MessageRow],
        live: list[store.SummaryRow],
        trigger: Trigger,
        reason: Reason,
        keep: int,
        after_seq: int,
    ) -> store.SummaryRow | None:
        """Summarize `messages` (those after `after_seq`, the newest live summary's end) but the
        last `keep`."""
        previous = live[-1].summary_text if live else None
        result = await summarize(
            summarizer_input(messages),
            replace(policy.summarizer, keep_last_n=keep, previous_summary=previous),
            trigger=trigger,
            trigger_reason=reason,
        )
        if result is None:
            return None
        self._count_llm(result.metadata)
        if not result.summary_text.strip():
            return None
        draft = summary_draft(result, policy, keep, after_seq + 1, messages)
        summary = await self._save(session_key, draft)
        metrics.SUMMARIES.labels(trigger, reason).inc()
        return summary

    async def _roll_up(self, session_key: int, policy: SummaryPolicy, trigger: Trigger) -> bool:
        """Merge the oldest live summaries into one of the next level while over the limit.

        Returns whether any roll-up was stored.
        """
        rolled_up = False
        while True:
            async with self.database.reading() as db:
                live = await store.live_summaries(db, session_key)
            if len(live) <= policy.summary_limit:
                return rolled_up
            absorbed = live[: max(2, len(live) - policy.summary_limit + 1)]
            merged = await merge_summaries(
                [summary.summary_text for summary in absorbed],
                policy.summarizer,
                trigger=trigger,
                trigger_reason="rollup",
            )
            if not merged.summary_text.strip():
                logger.warning("roll-up of session %s gave an empty text; not stored", session_key)
                return rolled_up
            self._count_llm(merged.metadata)
            model, metadata = inherit_fallback(absorbed, merged.model, merged.metadata)
            draft = store.SummaryDraft(
                first_seq=absorbed[0].first_seq,
                last_seq=absorbed[-1].last_seq,
                summary_text=merged.summary_text,
                summary_prompt=merged.prompt,
                model=model,
                temperature=policy.summarizer.temperature,
                target_summary_tokens=policy.summarizer.merge_target_tokens,
                keep_last_n=0,
                approx_tokens=merged.summary_tokens,
                metadata=metadata,
                level=max(summary.level for summary in absorbed) + 1,
                absorbs=tuple(summary.id for summary in absorbed),
            )
            await self._save(session_key, draft)
            metrics.SUMMARIES.labels(trigger, "rollup").inc()
            rolled_up = True

    async def repair(self, fallback_id: int) -> store.SummaryRow | None:
        """Re-make a live fallback summary from its source messages with the model.

        The repair covers the same seqs and supersedes the fallback one level above it (so
        the superseded chain stays upward), with `metadata.repair_of` naming it. Returns None,
        storing nothing, when the model still fails, the session is busy, or the fallback is
        gone (superseded meanwhile, or its session deleted).
        """
        async with self.database.reading() as db:
            fallback = await store.get_summary_by_id(db, fallback_id)
        if fallback is None or fallback.superseded_by is not None:
            return None
        session_key = fallback.session_id
        try:
            async with self.locks.hold(session_key, 0.0):
                async with self.database.reading() as db:
                    session = await store.get_session_by_key(db, session_key)
                    if session is None:
                        return None
                    before = await store.summary_before(db, session_key, fallback.first_seq)
                    messages = await store.messages_in_range(
                        db, session_key, fallback.first_seq - 1, fallback.last_seq
                    )
                policy = self.settings.policy(session.settings)
                result = await summarize(
                    summarizer_input(messages),
                    replace(
                        policy.summarizer,
                        keep_last_n=0,
                        previous_summary=before.summary_text if before else None,
                    ),
                    trigger=fallback.metadata.get("trigger", "proactive"),
                    trigger_reason=fallback.metadata.get("trigger_reason", "manual"),
                )
                if result is not None:
                    self._count_llm(result.metadata)
                if (
                    result is None
                    or result.metadata["fallback"]
                    or result.last_seq != fallback.last_seq
                    or not result.summary_text.strip()
                ):
                    return None
                draft = replace(
                    summary_draft(result, policy, 0, fallback.first_seq, messages),
                    metadata={**result.metadata, "repair_of": fallback.id},
                    level=fallback.level + 1,
                    absorbs=(fallback.id,),
                )
                repaired = await self._save(session_key, draft)
        except (SummarizationInProgress, SessionGone, SummaryRangeConflict):
            return None
        metrics.REPAIRED_SUMMARIES.inc()
        logger.info("fallback summary %s repaired as summary %s", fallback.id, repaired.id)
        return repaired

    async def _save(self, session_key: int, draft: store.SummaryDraft) -> store.SummaryRow:
        """Store `draft` while this summarizer still holds the session's lease (`LeaseLost`
        otherwise: another took the session over)."""
        async with self.locks.fenced(session_key) as db:
            return await store.save_summary(db, session_key, draft)

    @staticmethod
    def _count_llm(metadata: dict[str, Any]) -> None:
        metrics.LLM_CALLS.inc(int(metadata.get("llm_calls", 0)))
        for reason, count in metadata.get("failed_llm_calls_by_reason", {}).items():
            metrics.LLM_FAILURES.labels(reason).inc(count)
        if metadata.get("fallback_reason"):
            metrics.FALLBACK_SUMMARIES.labels(metadata["fallback_reason"]).inc()


async def schedule_summary(db: AsyncSession, session_key: int, reason: Reason) -> None:
    """Leave the session's summarization to a background job, recorded in the caller's
    transaction (durable once it commits); a job already pending or running stays."""
    await store.enqueue_job(db, session_key, "proactive", reason)


async def due_reason(
    db: AsyncSession, session: store.SessionRow, policy: SummaryPolicy
) -> ProactiveReason | None:
    """`proactive_reason` of the session's backlog, read from `db`; None with summarization
    off."""
    if not policy.dynamic_summary_enabled:
        return None
    floor = pinned_floor(session, policy)
    backlog = await store.backlog(db, session.id, session.last_seq, floor, policy.message_limit)
    reason = proactive_reason(policy, backlog)
    edits = ContextEdits.of(policy)
    if reason == "token_limit" and edits.active:
        # the trigger reads the tail as a history load shows it, old tool results cleared
        tail = await store.messages_in_range(db, session.id, backlog.after_seq)
        shown = replace(backlog, token_count=edited_tokens(tail, edits))
        reason = proactive_reason(policy, shown)
    return reason


async def schedule_summary_if_due(
    db: AsyncSession, session: store.SessionRow, policy: SummaryPolicy
) -> ProactiveReason | None:
    """Record a summarization job when the session's backlog reaches a limit, in the caller's
    transaction; returns the reason."""
    reason = await due_reason(db, session, policy)
    if reason is not None:
        await schedule_summary(db, session.id, reason)
    return reason
