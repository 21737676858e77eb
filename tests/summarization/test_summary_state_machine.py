"""A hypothesis state machine over appends, compacts and roll-ups; invariants 1 and 2 hold."""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from api.append import new_messages
from api.db.engine import create_database, create_engine, create_sessionmaker
from api.locks import SessionLocks
from api.schemas import AppendRequest
from api.summarization import Summarization
from tests.conftest import make_settings
from tests.helpers import append_batch
from tests.invariants import invariant_violations


def _message(kind: str, index: int) -> list[dict[str, Any]]:
    if kind == "tool":
        call = f"call-{index}"
        return [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": call, "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": call, "content": f"result {index}"},
        ]
    return [{"role": kind, "content": f"{kind} message {index} about order {index * 7}"}]


def make_machine(database_url: str) -> type[RuleBasedStateMachine]:
    class SummaryMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.loop = asyncio.new_event_loop()
            self.engine = create_engine(database_url)
            self.sessionmaker = create_sessionmaker(self.engine)
            app_settings = make_settings(database_url, summary_limit=2, summary_workers=0)
            database = create_database(self.engine)
            self.summarization = Summarization(app_settings, database, SessionLocks(database))
            self.external_id = f"sm-{uuid.uuid4().hex[:10]}"
            self.session_key: int | None = None
            self.count = 0

        def run(self, coroutine: Any) -> Any:
            return self.loop.run_until_complete(coroutine)

        @rule(
            kinds=st.lists(st.sampled_from(["user", "assistant", "tool"]), min_size=1, max_size=6)
        )
        def append(self, kinds: list[str]) -> None:
            raw = [m for kind in kinds for m in _message(kind, self.count + len(kinds))]
            self.count += len(raw)
            request = AppendRequest.model_validate({"messages": raw})
            batch = new_messages(request.batch, 1_000_000)

            async def go() -> None:
                async with self.sessionmaker() as db:
                    outcome = await append_batch(db, "default", self.external_id, batch)
                    self.session_key = outcome.session.id

            self.run(go())

        @rule(
            trigger=st.sampled_from(["manual", "overflow_retry"]),
            keep=st.integers(min_value=0, max_value=4),
        )
        def compact(self, trigger: str, keep: int) -> None:
            if self.session_key is None:
                return
            self.run(self.summarization.run(self.session_key, trigger, trigger, keep))  # type: ignore[arg-type]

        @invariant()
        def no_message_lost_and_live_summaries_contiguous(self) -> None:
            if self.session_key is None:
                return

            async def check() -> list[str]:
                async with self.sessionmaker() as db:
                    assert self.session_key is not None
                    return await invariant_violations(db, self.session_key)

            assert self.run(check()) == []

        def teardown(self) -> None:
            self.run(self.engine.dispose())
            self.loop.close()

    return SummaryMachine


def test_invariants_hold_over_random_appends_compacts_and_rollups(
    database_url: str, engine: object
) -> None:
    """`engine` empties the tables afterwards."""
    machine = make_machine(database_url)
    machine.TestCase.settings = settings(
        max_examples=12,
        stateful_step_count=12,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    # Own thread, own event loop: the test suite's loop is not disturbed.
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(machine.TestCase().runTest).result()
