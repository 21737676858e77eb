"""Prove the invariants of docs/design.md section 2 for one session or for all of them.

    python -m scripts.verify [--session ID [--tenant T]] [--database-url URL]

`--session` is looked up in every tenant unless `--tenant` names one; an id that several
tenants have must be given with `--tenant`.

Checks, per session: seqs are contiguous from 1 and `sessions.last_seq` is the newest seq;
token counts are present; every summary's `first_message_id` and `last_message_id` are the
messages at its first and last seq, and it links exactly the messages of its seq range;
live summaries (neither superseded nor erased) are contiguous but for the holes removals
opened (each holds a removed message), non-overlapping and start at seq 1 (invariant 2);
every message up to the newest live summary, unless removed or in such a hole, is linked to
exactly one live summary, and no removed one is (invariant 1); superseded chains point to
a higher-level summary of the same session containing the range, without cycles, and a
roll-up's absorbed summaries tile its range.

Removals: a removed message is a tombstone holding nothing but its seq, role and times, and
`sessions.removed_count` counts them; an erased summary keeps no text and no prompt, keeps
the links it was made with, and what it had absorbed is either erased too or live again. The
last line counts the tombstones and erased summaries found.

Reads DATABASE_URL (or --database-url) and never writes: the database is opened read-only.
Each session is checked in one read snapshot, so a running server does not cause false
alarms. Exit status: 0 when clean, 1 when any violation is found, 2 when the check could not
run (an unknown or ambiguous --session included).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as `python scripts/verify.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from typing import TextIO

from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api import store
from api.db.engine import create_sessionmaker
from api.settings import Settings
from api.store import audit, integrity
from api.store.rows import SessionRow, SummaryRow
from scripts.cli import run_command

PROG = "verify"

BATCH_SIZE = 500
"""Session keys read per page while streaming: memory stays bounded by one page and one session."""

PROGRESS_INTERVAL_SECONDS = 0.2
"""Least time between two progress updates on a terminal."""

SEQS = "seqs"
TOKENS = "token_count"
RANGE = "summary_range"
MESSAGE_IDS = "message_ids"
LINKS = "links"
LIVE = "live_ranges"
COVERAGE = "coverage"
CHAIN = "chain"
TOMBSTONE = "tombstone"
ERASED = "erased"
REMOVED_COUNT = "removed_count"


@dataclass(frozen=True)
class Violation:
    kind: str
    detail: str


@dataclass
class SessionCheck:
    """What one session's check found."""

    label: str
    violations: list[Violation] = field(default_factory=list)
    message_count: int = 0
    summary_count: int = 0
    removed_count: int = 0
    """Tombstones among `message_count`."""
    erased_count: int = 0
    """Erased summaries among `summary_count`."""


def label(session: SessionRow) -> str:
    return f"{session.tenant}/{session.external_id}"


def span(summary: SummaryRow) -> str:
    return f"summary {summary.id} (seqs {summary.first_seq}..{summary.last_seq})"


def is_live(summary: SummaryRow) -> bool:
    return summary.superseded_by is None and summary.erased_at is None


def seq_range(first: int, last: int) -> str:
    return f"seq {first}" if first == last else f"seqs {first}..{last}"


def refs(sample: integrity.Sample) -> str:
    shown = ", ".join(f"seq {ref.seq} (message {ref.id})" for ref in sample.examples)
    more = sample.total - len(sample.examples)
    return shown + (f" and {more} more" if more > 0 else "")


# --- checks ---------------------------------------------------------------------------------


async def check_session(db: AsyncSession, session: SessionRow) -> SessionCheck:
    """Every check of one session, inside the caller's read snapshot."""
    stats = await integrity.message_stats(db, session.id)
    summaries = await audit.session_summaries(db, session.id)
    violations = [
        *await check_seqs(db, session, stats),
        *await check_token_counts(db, session),
        *await check_tombstones(db, session),
        *check_removed_count(session, stats),
        *check_summary_ranges(summaries),
        *check_erased(summaries),
        *await check_message_ids(db, session, summaries),
        *await check_links(db, session, summaries),
        *await check_live_ranges(db, session, summaries),
        *await check_coverage(db, session, summaries),
        *await check_chains(db, summaries),
    ]
    erased = sum(1 for summary in summaries if summary.erased_at is not None)
    return SessionCheck(
        label(session), violations, stats.count, len(summaries), stats.removed, erased
    )


async def check_seqs(
    db: AsyncSession, session: SessionRow, stats: integrity.MessageStats
) -> list[Violation]:
    """Seqs are 1..last_seq without gaps, and `sessions.last_seq` is the newest seq."""
    if stats.max_seq is None:
        if session.last_seq == 0:
            return []
        return [Violation(SEQS, f"sessions.last_seq is {session.last_seq} but it has no messages")]
    found: list[Violation] = []
    if stats.min_seq is not None and stats.min_seq < 1:
        found.append(Violation(SEQS, f"seq {stats.min_seq} exists; seqs start at 1"))
    gaps = await integrity.seq_gaps(db, session.id)
    found.extend(Violation(SEQS, f"{seq_range(g.first, g.last)} missing") for g in gaps)
    missing = stats.max_seq - stats.count
    shown = sum(gap.last - gap.first + 1 for gap in gaps)
    if gaps and missing > shown:
        found.append(Violation(SEQS, f"{missing - shown} more seqs missing"))
    if stats.max_seq != session.last_seq:
        found.append(
            Violation(
                SEQS,
                f"sessions.last_seq is {session.last_seq} "
                f"but the newest message has seq {stats.max_seq}",
            )
        )
    return found


async def check_token_counts(db: AsyncSession, session: SessionRow) -> list[Violation]:
    sample = await integrity.bad_token_counts(db, session.id)
    if sample.total == 0:
        return []
    return [Violation(TOKENS, f"token_count missing or negative: {refs(sample)}")]


async def check_tombstones(db: AsyncSession, session: SessionRow) -> list[Violation]:
    """A removed message keeps nothing of what was appended."""
    sample = await integrity.tombstones_with_content(db, session.id)
    if sample.total == 0:
        return []
    return [Violation(TOMBSTONE, f"removed messages still hold content: {refs(sample)}")]


def check_removed_count(session: SessionRow, stats: integrity.MessageStats) -> list[Violation]:
    if session.removed_count == stats.removed:
        return []
    return [
        Violation(
            REMOVED_COUNT,
            f"sessions.removed_count is {session.removed_count} "
            f"but the session has {stats.removed} removed {plural(stats.removed, 'message')}",
        )
    ]


def check_erased(summaries: Sequence[SummaryRow]) -> list[Violation]:
    """An erased summary keeps neither its text nor its prompt."""
    found: list[Violation] = []
    for summary in summaries:
        if summary.erased_at is None:
            continue
        kept = " and ".join(
            name
            for name, value in (
                ("summary_text", summary.summary_text),
                ("summary_prompt", summary.summary_prompt),
            )
            if value
        )
        if kept:
            found.append(Violation(ERASED, f"erased {span(summary)} still holds its {kept}"))
    return found


def check_summary_ranges(summaries: Sequence[SummaryRow]) -> list[Violation]:
    return [
        Violation(RANGE, f"{span(summary)} is not a valid seq range")
        for summary in summaries
        if summary.first_seq < 1 or summary.last_seq < summary.first_seq
    ]


async def check_message_ids(
    db: AsyncSession, session: SessionRow, summaries: Sequence[SummaryRow]
) -> list[Violation]:
    """A summary's first and last message ids name the messages at its first and last seq."""
    by_id = {summary.id: summary for summary in summaries}
    return [
        Violation(MESSAGE_IDS, end_mismatch_detail(by_id[mismatch.summary_id], mismatch))
        for mismatch in await integrity.end_mismatches(db, session.id)
    ]


def end_mismatch_detail(summary: SummaryRow, mismatch: integrity.EndMismatch) -> str:
    if mismatch.actual_id is None:
        actual = "its range holds no message it can have been made from"
    elif mismatch.actual_seq == mismatch.seq:
        actual = f"seq {mismatch.seq} is message {mismatch.actual_id}"
    else:
        # the end seq is a tombstone removed before the summary was made, or missing
        at_end = f"seq {mismatch.actual_seq} (message {mismatch.actual_id})"
        actual = f"its {mismatch.end} message is {at_end}"
    recorded = f"message {mismatch.recorded_id}"
    if mismatch.recorded_session_key is None:
        points = f"no message has id {mismatch.recorded_id}"
    elif mismatch.recorded_session_key != summary.session_id:
        points = f"{recorded} is in another session (session key {mismatch.recorded_session_key})"
    else:
        points = f"{recorded} is seq {mismatch.recorded_seq}"
    return (
        f"{span(summary)} records {mismatch.end}_message_id {mismatch.recorded_id}, "
        f"but {actual}; {points}"
    )


async def check_links(
    db: AsyncSession, session: SessionRow, summaries: Sequence[SummaryRow]
) -> list[Violation]:
    """Each summary links exactly the messages of its range (a roll-up: all of them) that
    are not removed; an erased summary keeps its links, so it may also link messages removed
    after it was made, and its `message_count` is the number of its links."""
    by_id = {summary.id: summary for summary in summaries}
    found: list[Violation] = []
    for stats in await integrity.link_stats(db, session.id):
        summary = by_id[stats.summary_id]
        if stats.kept_in_range < stats.range_messages:
            sample = await integrity.unlinked_in_range(db, summary)
            found.append(
                Violation(
                    LINKS,
                    f"{span(summary)} does not link {sample.total} of its "
                    f"{stats.range_messages} messages: {refs(sample)}",
                )
            )
        if stats.linked > stats.in_range:
            sample = await integrity.linked_outside_range(db, summary)
            found.append(
                Violation(LINKS, f"{span(summary)} links messages outside it: {refs(sample)}")
            )
        if summary.erased_at is not None:
            if summary.message_count != stats.linked:
                found.append(
                    Violation(
                        LINKS,
                        f"erased {span(summary)} records message_count {summary.message_count} "
                        f"but links {stats.linked} messages",
                    )
                )
            continue
        if stats.removed_linked:
            sample = await integrity.removed_linked(db, summary)
            found.append(
                Violation(
                    LINKS,
                    f"{span(summary)} is not erased but links removed messages: {refs(sample)}",
                )
            )
        if summary.message_count != stats.range_messages:
            found.append(
                Violation(
                    LINKS,
                    f"{span(summary)} records message_count {summary.message_count} "
                    f"but its range holds {stats.range_messages} messages",
                )
            )
    return found


def live_of(summaries: Sequence[SummaryRow]) -> list[SummaryRow]:
    live = [summary for summary in summaries if is_live(summary)]
    return sorted(live, key=lambda summary: (summary.first_seq, summary.last_seq))


async def check_live_ranges(
    db: AsyncSession, session: SessionRow, summaries: Sequence[SummaryRow]
) -> list[Violation]:
    """Invariant 2: live summaries are contiguous (but for a hole a removal opened: one that
    holds a removed message), non-overlapping and start at seq 1 or right after the pinned
    prefix."""
    live = live_of(summaries)
    if not live:
        return []
    found: list[Violation] = []
    first = live[0].first_seq
    if first not in (1, session.pinned_seq + 1) and not await integrity.removed_between(
        db, session.id, session.pinned_seq + 1, first - 1
    ):
        found.append(
            Violation(
                LIVE,
                f"the oldest live summary, {span(live[0])}, starts neither at 1 nor after "
                f"the pinned prefix (seq {session.pinned_seq})",
            )
        )
    for previous, current in pairwise(live):
        if current.first_seq <= previous.last_seq:
            overlap = seq_range(current.first_seq, min(previous.last_seq, current.last_seq))
            found.append(
                Violation(LIVE, f"live {span(previous)} and {span(current)} overlap on {overlap}")
            )
        elif current.first_seq > previous.last_seq + 1 and not await integrity.removed_between(
            db, session.id, previous.last_seq + 1, current.first_seq - 1
        ):
            hole = seq_range(previous.last_seq + 1, current.first_seq - 1)
            found.append(
                Violation(
                    LIVE, f"{hole} between live {span(previous)} and {span(current)} is in neither"
                )
            )
    newest = max(summary.last_seq for summary in live)
    if newest > session.last_seq:
        found.append(
            Violation(
                LIVE,
                f"live summaries reach seq {newest}, past sessions.last_seq {session.last_seq}",
            )
        )
    return found


def _covered_runs(session: SessionRow, live: Sequence[SummaryRow]) -> list[tuple[int, int]]:
    """The seq runs live summaries cover without a break, as (after_seq, last_seq)."""
    runs = [(live[0].first_seq - 1, live[0].last_seq)]
    for previous, current in pairwise(live):
        if current.first_seq > previous.last_seq + 1:
            runs.append((current.first_seq - 1, current.last_seq))
        else:
            runs[-1] = (runs[-1][0], current.last_seq)
    return runs


async def check_coverage(
    db: AsyncSession, session: SessionRow, summaries: Sequence[SummaryRow]
) -> list[Violation]:
    """Invariant 1: every message up to the newest live summary's end, unless removed, is in
    exactly one; a removed message is in none."""
    live = live_of(summaries)
    if not live:
        return []
    found: list[Violation] = []
    through = max(summary.last_seq for summary in live)
    # the pinned prefix before the oldest live summary is never summarized, and the messages
    # of a hole a removal opened are in none until its leaf is made again
    total, problems = 0, list[integrity.CoverageProblem]()
    for after_seq, run_end in _covered_runs(session, live):
        count, some = await integrity.coverage_problems(
            db, session.id, run_end, after_seq=after_seq
        )
        total += count
        problems += some[: integrity.EXAMPLE_LIMIT - len(problems)]
    if total:
        shown = ", ".join(
            f"seq {p.message.seq} (message {p.message.id}) is in {p.live_links}" for p in problems
        )
        more = f" and {total - len(problems)} more" if total > len(problems) else ""
        detail = (
            f"{total} {plural(total, 'message')} up to seq {through} (the newest live summary's "
            f"end) {'is' if total == 1 else 'are'} not in exactly one live summary: {shown}{more}"
        )
        found.append(Violation(COVERAGE, detail))
    removed = await integrity.removed_in_live(db, session.id)
    if removed.total:
        found.append(
            Violation(
                COVERAGE,
                f"{removed.total} removed {plural(removed.total, 'message')} "
                f"{'is' if removed.total == 1 else 'are'} in a live summary: {refs(removed)}",
            )
        )
    return found


async def check_chains(db: AsyncSession, summaries: Sequence[SummaryRow]) -> list[Violation]:
    """A superseded summary points to a higher-level summary of its session containing it."""
    by_id = {summary.id: summary for summary in summaries}
    found: list[Violation] = []
    for summary in summaries:
        if summary.superseded_by is None:
            continue
        parent = by_id.get(summary.superseded_by) or await store.get_summary_by_id(
            db, summary.session_id, summary.superseded_by
        )
        found.extend(chain_link_problems(summary, parent))
    found.extend(cycles(summaries))
    found.extend(rollup_tiling(summaries))
    return found


def chain_link_problems(summary: SummaryRow, parent: SummaryRow | None) -> list[Violation]:
    head = f"{span(summary)} is superseded by summary {summary.superseded_by}"
    if parent is None:  # of the session: its key is part of the foreign key
        return [Violation(CHAIN, f"{head}, which does not exist")]
    found: list[Violation] = []
    if parent.erased_at is not None and summary.erased_at is None:
        # the erasure of a roll-up makes what it absorbed live again, unless it erased that too
        found.append(Violation(CHAIN, f"{head}, which is erased, but is neither erased nor live"))
    if parent.level <= summary.level:
        found.append(
            Violation(
                CHAIN, f"{head} of level {parent.level}, not above its own level {summary.level}"
            )
        )
    if not parent.first_seq <= summary.first_seq <= summary.last_seq <= parent.last_seq:
        found.append(
            Violation(CHAIN, f"{head}, whose seqs {parent.first_seq}..{parent.last_seq} omit it")
        )
    return found


def cycles(summaries: Sequence[SummaryRow]) -> list[Violation]:
    """Superseded chains that loop back on themselves, each reported once."""
    parent_of = {s.id: s.superseded_by for s in summaries if s.superseded_by is not None}
    reported: set[frozenset[int]] = set()
    found: list[Violation] = []
    for start in parent_of:
        path: list[int] = []
        current: int | None = start
        while current is not None and current not in path:
            path.append(current)
            current = parent_of.get(current)
        if current is None:
            continue
        loop = path[path.index(current) :]
        if frozenset(loop) not in reported:
            reported.add(frozenset(loop))
            chain = " -> ".join(str(summary_id) for summary_id in [*loop, current])
            found.append(Violation(CHAIN, f"superseded chain loops: {chain}"))
    return found


def rollup_tiling(summaries: Sequence[SummaryRow]) -> list[Violation]:
    """A roll-up absorbed summaries that together cover exactly its range. An erased roll-up
    keeps only those its removal reached: they tile the end of its range, from some seq on
    (the ones before are live again)."""
    absorbed: dict[int, list[SummaryRow]] = {}
    for summary in summaries:
        if summary.superseded_by is not None:
            absorbed.setdefault(summary.superseded_by, []).append(summary)
    found: list[Violation] = []
    for rollup in summaries:
        if rollup.level == 0:
            continue
        children = sorted(absorbed.get(rollup.id, []), key=lambda s: s.first_seq)
        if not children:
            found.append(Violation(CHAIN, f"roll-up {span(rollup)} absorbed no summary"))
            continue
        covered = [(child.first_seq, child.last_seq) for child in children]
        contiguous = all(b[0] == a[1] + 1 for a, b in pairwise(covered))
        ends = (rollup.first_seq, rollup.last_seq)
        if rollup.erased_at is not None:
            # the removal reached a run of what it absorbed; the rest is live again
            tiled = ends[0] <= covered[0][0] and covered[-1][1] <= ends[1]
        else:
            tiled = (covered[0][0], covered[-1][1]) == ends
        if not contiguous or not tiled:
            ranges = ", ".join(f"{first}..{last}" for first, last in covered)
            found.append(
                Violation(CHAIN, f"roll-up {span(rollup)} absorbed summaries covering {ranges}")
            )
    return found


# --- streaming and reporting ----------------------------------------------------------------


class Progress:
    """A one-line counter on stderr, only when stderr is a terminal."""

    def __init__(self, err: TextIO, total: int) -> None:
        self._err = err
        self._total = total
        self._enabled = err.isatty()
        self._last = 0.0

    def update(self, done: int, violations: int) -> None:
        now = time.monotonic()
        if not self._enabled or now - self._last < PROGRESS_INTERVAL_SECONDS:
            return
        self._last = now
        self._err.write(f"\r{PROG}: {done}/{self._total} sessions, {violations} violations")
        self._err.flush()

    def clear(self) -> None:
        if self._enabled:
            self._err.write("\r\033[K")
            self._err.flush()


@dataclass
class Totals:
    sessions: int = 0
    messages: int = 0
    summaries: int = 0
    violations: int = 0
    bad_sessions: int = 0
    removed: int = 0
    erased: int = 0


class Report:
    """Prints each violation as it is found; memory does not grow with the database."""

    def __init__(self, out: TextIO, progress: Progress) -> None:
        self.out = out
        self.progress = progress
        self.totals = Totals()

    def add(self, check: SessionCheck) -> None:
        totals = self.totals
        totals.sessions += 1
        totals.messages += check.message_count
        totals.summaries += check.summary_count
        totals.removed += check.removed_count
        totals.erased += check.erased_count
        if check.violations:
            totals.violations += len(check.violations)
            totals.bad_sessions += 1
            self.show(check)
        self.progress.update(totals.sessions, totals.violations)

    def show(self, check: SessionCheck) -> None:
        self.progress.clear()
        for violation in check.violations:
            self.out.write(f"{check.label}  {violation.kind:<13}  {violation.detail}\n")
        self.out.flush()

    def finish(self) -> None:
        self.progress.clear()
        t = self.totals
        messages = f"{t.messages} {plural(t.messages, 'message')}"
        summaries = f"{t.summaries} {plural(t.summaries, 'summary', 'summaries')}"
        if t.removed or t.erased:
            counted = f"{messages}, {t.removed} removed; {summaries}, {t.erased} erased"
        else:
            counted = f"{messages}, {summaries}"
        checked = f"Checked {t.sessions} {plural(t.sessions, 'session')} ({counted})"
        if t.violations == 0:
            self.out.write(f"{checked}: no violations.\n")
        else:
            self.out.write(
                f"{checked}: {t.violations} {plural(t.violations, 'violation')} "
                f"in {t.bad_sessions} {plural(t.bad_sessions, 'session')}.\n"
            )


class JsonReport(Report):
    """The same check as one JSON document at the end: the totals and every violation."""

    def __init__(self, out: TextIO, progress: Progress) -> None:
        super().__init__(out, progress)
        self.violations: list[dict[str, str]] = []

    def show(self, check: SessionCheck) -> None:
        self.violations += [
            {"session": check.label, "kind": violation.kind, "detail": violation.detail}
            for violation in check.violations
        ]

    def finish(self) -> None:
        self.progress.clear()
        document = {**asdict(self.totals), "violations": self.violations}
        self.out.write(json.dumps(document, indent=2) + "\n")


def plural(count: int, one: str, many: str | None = None) -> str:
    return one if count == 1 else (many or f"{one}s")


async def verify_session(
    sessionmaker: async_sessionmaker[AsyncSession], session_key: int
) -> SessionCheck | None:
    """Check one session in its own snapshot; None if it was deleted meanwhile."""
    async with sessionmaker() as db, db.begin():
        session = await store.get_session_by_key(db, session_key)
        return None if session is None else await check_session(db, session)


async def verify_all(
    sessionmaker: async_sessionmaker[AsyncSession], report: Report, batch_size: int
) -> None:
    after = 0
    while True:
        async with sessionmaker() as db, db.begin():
            keys = await audit.session_keys_after(db, after, batch_size)
        if not keys:
            return
        for session_key in keys:
            check = await verify_session(sessionmaker, session_key)
            if check is not None:
                report.add(check)
        after = keys[-1]


async def find_session(
    sessionmaker: async_sessionmaker[AsyncSession], external_id: str, tenant: str | None
) -> int:
    """The session key of a session; raises audit.SessionLookupError (see audit.find_session)."""
    async with sessionmaker() as db, db.begin():
        session = await audit.find_session(db, external_id, tenant)
    return session.id


async def session_total(sessionmaker: async_sessionmaker[AsyncSession]) -> int:
    async with sessionmaker() as db, db.begin():
        return await audit.count_sessions(db)


# --- command line ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    database_url: str
    session: str | None = None
    tenant: str | None = None
    batch_size: int = BATCH_SIZE
    as_json: bool = False


def parse_args(argv: Sequence[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(
        prog=f"python -m scripts.{PROG}",
        description="Check the stored data against the invariants of docs/design.md section 2.",
    )
    parser.add_argument("--session", metavar="ID", help="check one session (default: all)")
    parser.add_argument(
        "--tenant", help="tenant of --session (default: whichever tenant has that session id)"
    )
    parser.add_argument("--database-url", help="default: DATABASE_URL (or .env)")
    parser.add_argument(
        "--json", action="store_true", help="one JSON document: the totals and every violation"
    )
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.batch_size < 1:
        parser.error("--batch-size must be at least 1")
    return Options(
        database_url=args.database_url or Settings().database_url,
        session=args.session,
        tenant=args.tenant,
        batch_size=args.batch_size,
        as_json=args.json,
    )


async def run(options: Options, out: TextIO, err: TextIO) -> int:
    """The command without the event loop: tests await it with their own streams."""
    shown_url = make_url(options.database_url).render_as_string(hide_password=True)
    try:
        engine = audit.read_only_engine(options.database_url)
    except OSError as exc:
        err.write(f"{PROG}: {exc}\n")
        return 2
    sessionmaker = create_sessionmaker(engine)
    try:
        report = await _verify(sessionmaker, options, out, err)
    except audit.SessionLookupError as exc:
        err.write(f"{PROG}: {exc}\n")
        return 2
    except (SQLAlchemyError, OSError) as exc:
        err.write(f"{PROG}: cannot read {shown_url}: {' '.join(str(exc).split())[:300]}\n")
        return 2
    finally:
        await engine.dispose()
    return 1 if report.totals.violations else 0


async def _verify(
    sessionmaker: async_sessionmaker[AsyncSession], options: Options, out: TextIO, err: TextIO
) -> Report:
    kind = JsonReport if options.as_json else Report
    if options.session is not None:
        session_key = await find_session(sessionmaker, options.session, options.tenant)
        report = kind(out, Progress(err, 1))
        check = await verify_session(sessionmaker, session_key)
        if check is not None:
            report.add(check)
    else:
        report = kind(out, Progress(err, await session_total(sessionmaker)))
        await verify_all(sessionmaker, report, options.batch_size)
    report.finish()
    return report


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(run, parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
