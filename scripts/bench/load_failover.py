"""`python -m scripts.bench.load --failover`: the run's database on a primary and a streaming
standby of the run's own (`tests/support/pg_replication.py`), the service given both in a
multi-host `DATABASE_URL` (`target_session_attrs=primary`). `--failover-after` seconds into the
turns the primary is lost (`pg_ctl stop -m immediate`), `--promote-after` seconds later the
standby is promoted (`pg_ctl promote`), as a managed database's failover does.

With `--replication sync` every acknowledged message must survive; with `async` the standby
is cut off from the primary's WAL `--async-lag` seconds before the loss (as a lagging standby
is), so what was acknowledged in those moments is lost: the report counts it, and verify must
pass all the same. The timeline gives when the primary was lost, when the standby took writes, the
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

ASYNC_LAG_SECONDS = 1.0
"""`--replication async`: seconds before the loss when the standby stops receiving WAL, so the
writes of the run's last moments are lost as a lagging standby loses them."""

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
    lag: float = 0.0
    """Asynchronous replication: the standby stops streaming this many seconds before the
    loss."""

    @property
    def replication(self) -> str:
        return "synchronous" if self.pair.synchronous else "asynchronous"


@dataclass(frozen=True)
class FailedOver:
    """When the primary was lost and the standby took writes (monotonic clock), and what the
    clients saw meanwhile."""

    lost: float
    """`pg_ctl stop -m immediate` on the primary returned: it is gone."""
    promoted: float
    """`pg_ctl promote -w` returned: the standby takes writes."""
    started_at: float
    """Seconds into the turns when the primary was lost."""
    replication: str
    lag: float = 0.0
    first_append: float | None = None
    """The end of the first append answered 201 of those sent after the loss."""
    spanning: tuple[float, ...] = ()
    """Latencies (seconds) of the answered requests whose time overlapped the gap."""


async def fail_over(failover: Failover, turns_started: float) -> FailedOver:
    """Lose the primary `failover.after` seconds after `turns_started`, promote the standby
    `failover.promote_after` seconds later."""
    loss_at = turns_started + failover.after
    if failover.lag > 0:
        await asyncio.sleep(max(0.0, loss_at - failover.lag - time.monotonic()))
        await asyncio.to_thread(failover.pair.stop_streaming)
    await asyncio.sleep(max(0.0, loss_at - time.monotonic()))
    await asyncio.to_thread(failover.pair.lose_primary)
    lost = time.monotonic()
    await asyncio.sleep(max(0.0, lost + failover.promote_after - time.monotonic()))
    await asyncio.to_thread(failover.pair.promote)
    return FailedOver(
        lost, time.monotonic(), lost - turns_started, failover.replication, failover.lag
    )


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


def report_lines(failed: FailedOver, database_retries: float, read_only_refusals: int) -> list[str]:
    """The failover's timeline, for the load test's report."""
    first = (
        f"{failed.first_append - failed.lost:.2f} s after the loss"
        if failed.first_append is not None
        else "none answered after the loss"
    )
    lines = [
        f"  failover ({failed.replication} replication"
        + (f", the standby cut off {failed.lag:.1f} s before the loss" if failed.lag else "")
        + f"): primary lost (pg_ctl stop -m immediate) {failed.started_at:.1f} s into the "
        "turns; standby promoted "
        f"{failed.promoted - failed.lost:.2f} s after the loss; first append answered "
        f"{first}; {database_retries:.0f} database retries; {read_only_refusals} requests or "
        "jobs first retried after a write refused as read-only",
    ]
    if failed.spanning:
        spanning = list(failed.spanning)
        p50, p99 = (percentile(spanning, q) * 1000 for q in (50, 99))
        lines.append(
            f"    {len(spanning)} requests spanned the failover: p50 {p50:.1f} ms, "
            f"p99 {p99:.1f} ms, max {max(spanning) * 1000:.1f} ms"
        )
    return lines
