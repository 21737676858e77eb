"""`python -m scripts.bench.load --failover`: the run's database on a primary and a streaming
standby of the run's own (`tests/support/pg_replication.py`), the service given both in a
multi-host `DATABASE_URL` (`target_session_attrs=primary`). `--failover-after` seconds into the
turns the primary is lost (`pg_ctl stop -m immediate`), `--promote-after` seconds later the
standby is promoted (`pg_ctl promote`), as a managed database's failover does.

With `--replication sync` every acknowledged message must survive; with `async` the last
moments before the loss may be lost, and the report counts what was (verify must pass all
the same). The timeline gives when the primary was lost, when the standby took writes, the
first append answered after the loss (of those sent after it), and the latencies of the
requests that spanned the gap.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from scripts.bench.lib import percentile

if TYPE_CHECKING:
    from tests.support.pg_replication import ReplicatedPair

FAILOVER_AFTER_SECONDS = 2.0
"""`--failover`: seconds into the turns when the primary is lost (the backends are busy)."""

PROMOTE_AFTER_SECONDS = 2.0
"""`--failover`: seconds between the primary's loss and the standby's promotion, about what a
managed service's health checks take to decide."""

APPEND_OPERATIONS = frozenset({"append user", "append assistant"})


@dataclass(frozen=True)
class Failover:
    """Lose the primary `after` seconds into the turns, promote the standby `promote_after`
    seconds later."""

    pair: ReplicatedPair
    after: float
    promote_after: float

    @property
    def replication(self) -> str:
        return "synchronous" if self.pair.synchronous else "asynchronous"


@dataclass(frozen=True)
class FailedOver:
    """When the primary was lost and the standby took writes (monotonic clock), and what the
    clients saw meanwhile."""

    lost: float
    """`pg_ctl stop -m immediate` was run on the primary."""
    promoted: float
    """`pg_ctl promote -w` returned: the standby takes writes."""
    started_at: float
    """Seconds into the turns when the primary was lost."""
    replication: str
    first_append: float | None = None
    """The end of the first append answered 201 of those sent after the loss."""
    spanning: tuple[float, ...] = ()
    """Latencies (seconds) of the answered requests whose time overlapped the gap."""


async def fail_over(failover: Failover, turns_started: float) -> FailedOver:
    """Lose the primary `failover.after` seconds after `turns_started`, promote the standby
    `failover.promote_after` seconds later."""
    await asyncio.sleep(max(0.0, turns_started + failover.after - time.monotonic()))
    lost = time.monotonic()
    await asyncio.to_thread(failover.pair.lose_primary)
    await asyncio.sleep(max(0.0, lost + failover.promote_after - time.monotonic()))
    await asyncio.to_thread(failover.pair.promote)
    return FailedOver(lost, time.monotonic(), lost - turns_started, failover.replication)


def timeline(failed: FailedOver, spans: Sequence[tuple[str, float, float]]) -> FailedOver:
    """`failed` with what the answered requests (`(operation, start, end)`) saw of it."""
    spanning = tuple(
        end - start for _, start, end in spans if start < failed.promoted and end > failed.lost
    )
    appends_after = [
        end
        for operation, start, end in spans
        if operation in APPEND_OPERATIONS and start >= failed.lost
    ]
    return replace(
        failed, spanning=spanning, first_append=min(appends_after) if appends_after else None
    )


def report_lines(failed: FailedOver, database_retries: float) -> list[str]:
    """The failover's timeline, for the load test's report."""
    first = (
        f"{failed.first_append - failed.lost:.2f} s after the loss"
        if failed.first_append is not None
        else "none answered after the loss"
    )
    lines = [
        f"  failover ({failed.replication} replication): primary lost (pg_ctl stop -m "
        f"immediate) {failed.started_at:.1f} s into the turns; standby promoted "
        f"{failed.promoted - failed.lost:.2f} s after the loss; first append answered "
        f"{first}; {database_retries:.0f} database retries",
    ]
    if failed.spanning:
        spanning = list(failed.spanning)
        p50, p99 = (percentile(spanning, q) * 1000 for q in (50, 99))
        lines.append(
            f"    {len(spanning)} requests spanned the failover: p50 {p50:.1f} ms, "
            f"p99 {p99:.1f} ms, max {max(spanning) * 1000:.1f} ms"
        )
    return lines
