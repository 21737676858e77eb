"""The trigger vocabulary: why a summary was made, as stored in every summary's metadata.

The one home of these names: the summarizer checks them, the service and its schemas type with
them. When a proactive summary is due is decided in `api.summary_plans.proactive_reason`.
"""

from __future__ import annotations

from typing import Literal, get_args

Trigger = Literal["proactive", "overflow_retry", "manual"]
"""Who asked: the service after an append (`proactive`), or a client's `compact`."""

ProactiveReason = Literal["message_limit", "token_limit"]
"""Which limit of the backlog after the newest live summary a proactive summary reached."""

CompactTrigger = Literal["overflow_retry", "manual"]
"""The triggers a client's `compact` may give."""

Reason = Literal["message_limit", "token_limit", "overflow_retry", "manual", "rollup", "erasure"]
"""`trigger_reason` of a summary: a proactive limit, a compact trigger, a roll-up, or the
re-make of a range whose summaries a removed message had reached (`erasure`)."""

TRIGGERS: frozenset[str] = frozenset(get_args(Trigger))
REASONS: frozenset[str] = frozenset(get_args(Reason))
