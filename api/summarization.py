"""The service's side of summarization: a `Summarization` summarizes a session's backlog,
rolls up old summaries and repairs fallbacks, on the pure plans of `api.summary_plans`; the
functions below decide when a proactive summary is due and record its job (`schedule_summary`,
`schedule_summary_if_due`).

The summarizer runs outside any transaction; each summary, its links and any superseding update
are then written in one short transaction under the session's summarization lock. Every read and
write goes through the `Database` (`api.db.transactions`) the `Summarization` is given: the unit of
work on the summarization's own pool, which the worker and the lease (`api.locks`) share.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from api import metrics, store
from api.db.transactions import Database
from api.errors import (
    SessionGone,
    SummarizationDeferred,
    SummarizationInProgress,
    SummaryRangeConflict,
)
from api.locks import SessionLocks
from api.session_settings import SummaryPolicy
from api.settings import Settings
from api.summary_forest import (
    MAX_FOREST_STEPS,
    Cover,
    Forest,
    Kind,
    Merge,
    Uncover,
    after,
    forest_metadata,
    kind_of,
    leaf_count,
    leaves_of,
    next_step,
    read_forest,
    shown,
)
from api.summary_plans import (
    Plan,
    Preview,
    inherit_fallback,
    joined_instructions,
    outage_defers,
    pinned_floor,
    summarizer_input,
    summary_draft,
    unsaved_row,
)
from summarizer import merge_summaries, summarize
from summarizer.triggers import Reason, Trigger

logger = logging.getLogger("precis.summarization")


@dataclass
class Summarization:
    """Makes and stores summaries for sessions (with `summarizer/`); shared by the worker and
    the inline paths. A run and a preview decide what to summarize (`_plan`) and make their
    drafts (`_draft`, `_rollup_draft`) alike; only a run stores them."""

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
        instructions: str | None = None,
        defer_outage: bool = False,
    ) -> store.SummaryRow | None:
        """Summarize what follows the newest live summary, then roll up if over the limit.

        With `keep_pending_turn` (an inline summarization before the backend's LLM call), a
        newest message from the user is the question being answered: it is never summarized.
        `instructions` (a caller's) follow the session's `summary_instructions`. With
        `defer_outage` (a background job), a summary the model was unavailable for is not
        stored while `outage_defers` says so (`SummarizationDeferred`), and one leaf's worth
        of messages is read at most (`Plan.leaf_sized`).

        Raises `SummarizationInProgress` when another summarization holds the session longer than
        `wait_seconds`. Returns the new summary, or None when nothing was left to summarize,
        the session included: a session deleted meanwhile is normal use, not a failure.
        """
        held = partial(
            self._run_held,
            session_key,
            trigger,
            reason,
            keep_last_n,
            keep_pending_turn,
            instructions,
            defer_outage,
        )
        try:
            async with self.locks.hold(session_key, wait_seconds):
                try:
                    return await held()
                except SummaryRangeConflict as exc:
                    # A message was removed while the model worked: what it read is stale, and
                    # the removal erased what it had reached. Read again and make it once more.
                    logger.info("summarizing session %s again: %s", session_key, exc.detail)
                    return await held()
        except SessionGone:  # deleted before its lease could be taken
            return None

    async def preview(
        self,
        session_key: int,
        trigger: Trigger,
        reason: Reason,
        keep_last_n: int | None = None,
        keep_pending_turn: bool = False,
        instructions: str | None = None,
    ) -> Preview | None:
        """What `run` would store now, made as `run` makes it and not stored (no summary, no
        link, no job); None when the session is gone.

        It takes no lock: it reads the stored state as it is, and a summarization running
        meanwhile is neither waited for nor hindered.
        """
        plan = await self._plan(session_key, keep_last_n, keep_pending_turn, instructions)
        if plan is None:
            return None
        draft = await self._draft(plan, trigger, reason)
        forest = plan.forest
        summary = None
        if draft is not None:
            summary = unsaved_row(draft, session_key, plan.messages)
            roots = sorted((*forest.roots, summary), key=lambda root: root.first_seq)
            forest = replace(forest, roots=tuple(roots))
        rollups: list[store.SummaryRow] = []
        for _ in range(MAX_FOREST_STEPS):
            step = next_step(forest, plan.policy.summary_limit)
            if step is None:
                break
            if isinstance(step, Uncover):
                forest = Forest(forest.roots)
                continue
            made = await self._merge_draft(plan.policy, step, trigger)
            if made is None:
                break
            row = unsaved_row(made, session_key, step.sources)
            rollups.append(row)
            forest = after(forest, step, row)
        return Preview(plan, summary, rollups, shown(forest))

    async def _plan(
        self,
        session_key: int,
        keep_last_n: int | None,
        keep_pending_turn: bool,
        instructions: str | None,
        fill_holes: bool = True,
    ) -> Plan | None:
        """What a run of the session summarizes now; None when the session is gone. A hole a
        removal left between live summaries comes first (`Plan.hole_end`) unless `fill_holes`
        is off: its leaf is made again from all of its messages."""
        async with self.database.reading() as db:
            session = await store.get_session_by_key(db, session_key)
            if session is None:
                return None
            policy = self.settings.policy(session.settings)
            live = await store.live_summaries(db, session_key)
            forest = await read_forest(db, live)
            # the first summary starts after the pinned prefix, which is never summarized
            floor = pinned_floor(session, policy)
            ranges = store.holes(live, floor) if fill_holes else []
            opened = await store.open_holes(db, session_key, ranges)
            hole_end = opened[0][1] if opened else None
            after_seq = opened[0][0] - 1 if opened else (live[-1].last_seq if live else floor)
            within = {} if hole_end is None else {"last_seq": hole_end}
            messages = await store.messages_in_range(db, session_key, after_seq, **within)
        keep = policy.keep_last_n if keep_last_n is None else keep_last_n
        if keep_pending_turn and messages and messages[-1].role == "user":
            keep = max(keep, 1)
        if hole_end is not None:
            keep = 0
        guided = joined_instructions(policy.summary_instructions, instructions)
        return Plan(session, policy, live, after_seq, messages, keep, guided, forest, hole_end)

    async def _run_held(
        self,
        session_key: int,
        trigger: Trigger,
        reason: Reason,
        keep_last_n: int | None,
        keep_pending_turn: bool,
        instructions: str | None,
        defer_outage: bool,
    ) -> store.SummaryRow | None:
        """One run under the session's summarization lock (see `run`)."""
        started = time.perf_counter()
        summary = None
        try:
            # the holes removals left first, one leaf each, then what follows the newest
            fill_holes, put_off = True, None
            for _ in range(MAX_FOREST_STEPS):
                planned = await self._plan(
                    session_key, keep_last_n, keep_pending_turn, instructions, fill_holes
                )
                if planned is None:
                    return None
                plan = replace(planned, leaf_sized=defer_outage)
                draft = await self._draft(plan, trigger, reason)
                if draft is not None and defer_outage and self._deferred(plan, draft):
                    put_off = SummarizationDeferred(
                        "the summarizer model is unavailable "
                        f"({draft.metadata.get('fallback_detail')}); nothing was stored"
                    )
                    if plan.hole_end is None:
                        raise put_off
                    draft = None
                if draft is not None:
                    summary = await self._store(session_key, draft, trigger, reason)
                    metrics.SUMMARIZATION_SECONDS.observe(time.perf_counter() - started)
                if plan.hole_end is None:
                    break
                # a hole whose leaf is put off, or that the model gave nothing for, waits:
                # the tail goes on
                fill_holes = draft is not None
            floor = pinned_floor(plan.session, plan.policy)
            rolled_up = await self._complete_forest(session_key, plan.policy, trigger, floor)
            if put_off is not None:
                raise put_off  # the job runs again for the hole
        except SessionGone:
            return None
        if summary is not None and rolled_up:
            # The new summary may have been absorbed: answer with its `superseded_by`.
            async with self.database.reading() as db:
                summary = (
                    await store.get_summary_by_id(db, summary.session_id, summary.id) or summary
                )
        return summary

    def _deferred(self, plan: Plan, draft: store.SummaryDraft) -> bool:
        """Whether a background run's draft is a fallback the outage bound puts off: always
        for a hole's leaf (a leaf's worth of messages loads raw meanwhile)."""
        if draft.metadata.get("fallback_reason") != "llm_unavailable":
            return False
        if plan.hole_end is not None:
            return True
        factor = self.settings.summary_outage_backlog_factor
        return outage_defers(plan.policy, plan.backlog, factor)

    async def _draft(
        self, plan: Plan, trigger: Trigger, reason: Reason
    ) -> store.SummaryDraft | None:
        """The leaf summary of `plan`'s messages but the last `plan.keep`, ready to store over
        the seqs after `plan.after_seq`; None when nothing may be summarized.

        Made from its messages alone, without the previous summary as context: no fact of an
        earlier message travels into it, so removing a message reaches only the summaries
        that cover it."""
        result = await summarize(
            summarizer_input(plan.summarized, ends_range=plan.hole_end is not None),
            replace(
                plan.policy.summarizer,
                keep_last_n=plan.keep,
                previous_summary=None,
                instructions=plan.instructions,
            ),
            trigger=trigger,
            trigger_reason=reason,
        )
        if result is None:
            return None
        self._count_llm(result.metadata)
        if not result.summary_text.strip():
            return None
        draft = summary_draft(result, plan.policy, plan.keep, plan.after_seq + 1, plan.summarized)
        if plan.hole_end is not None:
            if draft.last_seq != plan.summarized[-1].seq:
                return None  # a hole's leaf is made of all of its messages, or not at all
            draft = replace(draft, last_seq=plan.hole_end)
        sources = sum(1 for message in plan.summarized if message.seq <= draft.last_seq)
        leaves = leaf_count(sources, plan.policy.message_limit)
        place = forest_metadata("leaf", leaves, (), 1 + int(result.metadata.get("max_depth", 0)))
        return replace(draft, metadata={**draft.metadata, **place})

    async def _complete_forest(
        self, session_key: int, policy: SummaryPolicy, trigger: Trigger, floor: int
    ) -> bool:
        """Store the nodes and the cover the forest owes (`api.summary_forest.next_step`), one
        step at a time, each read again from the database.

        Returns whether anything was stored or deleted.
        """
        changed = False
        for _ in range(MAX_FOREST_STEPS):
            async with self.database.reading() as db:
                live = await store.live_summaries(db, session_key)
                if await store.open_holes(db, session_key, store.holes(live, floor)):
                    return changed  # no node is made across a hole before its leaf is
                forest = await read_forest(db, live)
            step = next_step(forest, policy.summary_limit)
            if step is None:
                return changed
            if isinstance(step, Uncover):
                async with self.locks.fenced(session_key) as db:
                    await store.delete_covers(db, session_key, [s.id for s in step.covers])
            else:
                draft = await self._merge_draft(policy, step, trigger)
                if draft is None:
                    return changed
                await self._store(session_key, draft, trigger, "rollup")
            changed = True
        logger.warning("session %s: the forest still owes steps after %s", session_key, changed)
        return changed

    async def _merge_draft(
        self, policy: SummaryPolicy, step: Merge | Cover, trigger: Trigger
    ) -> store.SummaryDraft | None:
        """The node or cover `step` makes of its sources, with the session's instructions;
        None when the merge gave no text."""
        absorbed = list(step.sources)
        merged = await merge_summaries(
            [summary.summary_text for summary in absorbed],
            replace(policy.summarizer, instructions=policy.summary_instructions),
            trigger=trigger,
            trigger_reason="rollup",
        )
        self._count_llm(merged.metadata)
        if not merged.summary_text.strip():
            session_key = absorbed[0].session_id
            logger.warning("roll-up of session %s gave an empty text; not stored", session_key)
            return None
        model, metadata = inherit_fallback(absorbed, merged.model, merged.metadata)
        kind: Kind = "node" if isinstance(step, Merge) else "cover"
        leaves = sum(map(leaves_of, absorbed))
        depth = int(merged.metadata.get("max_depth", 1))
        metadata = {**metadata, **forest_metadata(kind, leaves, absorbed, depth)}
        return store.SummaryDraft(
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

    async def repair(self, session_key: int, fallback_id: int) -> store.SummaryRow | None:
        """Re-make a live fallback summary from its source messages with the model.

        The repair covers the same seqs and supersedes the fallback one level above it (so
        the superseded chain stays upward), with `metadata.repair_of` naming it; it follows
        the instructions the fallback recorded, else the session's. Returns None, storing
        nothing, when the model still fails, the session is busy, or the fallback is gone
        (superseded meanwhile, or its session deleted).
        """
        async with self.database.reading() as db:
            fallback = await store.get_summary_by_id(db, session_key, fallback_id)
        if fallback is None or fallback.superseded_by is not None:
            return None
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
                asked = fallback.metadata.get("instructions") or policy.summary_instructions
                plan = Plan(
                    session,
                    policy,
                    [before] if before else [],
                    fallback.first_seq - 1,
                    messages,
                    0,
                    asked,
                )
                draft = await self._draft(
                    plan,
                    fallback.metadata.get("trigger", "proactive"),
                    fallback.metadata.get("trigger_reason", "manual"),
                )
                if (
                    draft is None
                    or draft.metadata["fallback"]
                    or draft.last_seq != fallback.last_seq
                ):
                    return None
                # the repair takes the fallback's place in the forest
                place = {"kind": kind_of(fallback), "leaves": leaves_of(fallback)}
                draft = replace(
                    draft,
                    metadata={**draft.metadata, **place, "repair_of": fallback.id},
                    level=fallback.level + 1,
                    absorbs=(fallback.id,),
                )
                repaired = await self._save(session_key, draft)
        except (SummarizationInProgress, SessionGone, SummaryRangeConflict):
            return None
        metrics.REPAIRED_SUMMARIES.inc()
        logger.info("fallback summary %s repaired as summary %s", fallback.id, repaired.id)
        return repaired

    async def _store(
        self, session_key: int, draft: store.SummaryDraft, trigger: Trigger, reason: Reason
    ) -> store.SummaryRow:
        """Save `draft` and count it."""
        summary = await self._save(session_key, draft)
        metrics.SUMMARIES.labels(trigger, reason).inc()
        if draft.metadata.get("fallback_reason"):
            metrics.FALLBACK_SUMMARIES.labels(draft.metadata["fallback_reason"]).inc()
        return summary

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
