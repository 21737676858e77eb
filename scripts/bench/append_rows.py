"""The append rows: one message per commit on one session and on eight at once, batches of 50;
Precis at the store layer and through HTTP against the raw drivers, the same statements on a
bare connection, the minimal app and the peer libraries, in interleaved rounds."""

from __future__ import annotations

import itertools

from api import store
from scripts.bench.baselines import AgentsPeer, LangchainPeer, RawPostgres
from scripts.bench.lib import RoundFn, concurrent, interleaved, sequential
from scripts.bench.plan import (
    CONCURRENT_SESSIONS,
    MINIMAL_APP,
    ROUNDS,
    SAME_STATEMENTS,
    Bench,
    Http,
    Peers,
    Raw,
)
from scripts.bench.precis import PrecisStore, post
from scripts.bench.results import RowOut, ms, per_s

APPEND_BATCH = 50
"""Messages per append in the batch case."""


def contestants(
    bench: Bench, precis: PrecisStore, raw: Raw, servers: Http, peers: Peers
) -> dict[str, dict[str, RoundFn]]:
    """Per append case, every contestant's round function."""
    p, news, b, w = bench.payloads, bench.news, APPEND_BATCH, CONCURRENT_SESSIONS
    http, minimal = servers.precis, servers.minimal

    def batch_of(i: int) -> list[store.NewMessage]:
        return [news[(i * b + j) % len(news)] for j in range(b)]

    def messages_of(i: int) -> list[dict[str, str]]:
        return [p.message((i * b + j) % len(p)) for j in range(b)]

    cases: dict[str, dict[str, RoundFn]] = {
        "single": {
            "raw": raw.single(bench.raw_rows),
            "store": sequential(lambda i: precis.append("a-single", [news[i % len(news)]])),
            "http": sequential(lambda i: post(http, "h-single", [p.message(i % len(p))])),
            "minimal": sequential(lambda i: post(minimal, "m-single", [p.message(i % len(p))])),
        },
        "concurrent": {
            "raw": raw.concurrent(bench.raw_rows, w),
            "store": concurrent(
                lambda s, i: precis.append(f"a-conc-{s}", [news[(s * 31 + i) % len(news)]]), w
            ),
            "http": concurrent(
                lambda s, i: post(http, f"h-conc-{s}", [p.message((s * 31 + i) % len(p))]), w
            ),
        },
        "batch": {
            "raw": raw.batches(bench.raw_rows, b),
            "store": sequential(lambda i: precis.append("a-batch", batch_of(i))),
            "http": sequential(lambda i: post(http, "h-batch", messages_of(i))),
        },
    }
    if bench.driver is not None:
        cases["single"]["aiosqlite"] = bench.driver.single(bench.raw_rows)
        cases["single"]["statement"] = bench.driver.store_statements(news, "a-single")
    if isinstance(raw, RawPostgres):
        cases["single"]["statement"] = raw.store_statement(news)
        cases["concurrent"]["statement"] = raw.store_statement_concurrent(news, w)
        # what the Python client's integrations send: every message with a client_id
        keys = itertools.count()

        def keyed(i: int) -> list[store.NewMessage]:
            return [news[i % len(news)]._replace(client_id=f"bench-{next(keys)}")]

        cases["single"]["keyed"] = sequential(lambda i: precis.append("a-keyed", keyed(i)))
        cases["single"]["keyed statement"] = raw.store_statement(news, keyed=True)
    if peers.agents is not None:
        agents = peers.agents
        one = agents.session("agents-single")
        many = [agents.session(f"agents-conc-{s}") for s in range(w)]
        batched = agents.session("agents-batch")
        item = agents.item
        cases["single"]["agents"] = sequential(
            lambda i: one.add_items([item(p.message(i % len(p)))])
        )
        cases["concurrent"]["agents"] = concurrent(
            lambda s, i: many[s].add_items([item(p.message((s * 31 + i) % len(p)))]), w
        )
        cases["batch"]["agents"] = sequential(
            lambda i: batched.add_items([item(m) for m in messages_of(i)])
        )
    if peers.langchain is not None:
        chain = peers.langchain
        histories = [chain.history(s, chain.new_session()) for s in range(w)]
        single, batch = (chain.history(s, chain.new_session()) for s in (0, 1))
        msg = chain.message
        cases["single"]["langchain"] = sequential(
            lambda i: single.aadd_messages([msg(p.message(i % len(p)))])
        )
        cases["concurrent"]["langchain"] = concurrent(
            lambda s, i: histories[s].aadd_messages([msg(p.message((s * 31 + i) % len(p)))]),
            w,
        )
        cases["batch"]["langchain"] = sequential(
            lambda i: batch.aadd_messages([msg(m) for m in messages_of(i)])
        )
    return cases


async def appends(
    bench: Bench, backend: str, precis: PrecisStore, raw: Raw, servers: Http, peers: Peers
) -> None:
    plan, res = bench.plan, bench.results
    print(f"[{backend}] append", flush=True)
    await precis.append("a-single", bench.news[:1])  # the raw statements need the session
    cases = contestants(bench, precis, raw, servers, peers)
    rounds = ROUNDS
    stats = {
        "single": await interleaved(cases["single"], plan.appends // rounds, rounds),
        "concurrent": await interleaved(cases["concurrent"], plan.per_session // rounds, rounds),
        "batch": await interleaved(cases["batch"], plan.batches // rounds, rounds, APPEND_BATCH),
    }
    for case, by_name in stats.items():
        for name, measured in by_name.items():
            res.record(f"{backend}/append/{case}/{name}", measured)

    single, conc, batch = stats["single"], stats["concurrent"], stats["batch"]
    ref = f"{raw.label} insert+commit"
    held = backend == "PostgreSQL"  # SQLite's targets are against the same statements
    for case, what in (("single", "1 session"), ("concurrent", "8 sessions")):
        ours, floor = stats[case]["store"], stats[case]["raw"]
        ratio = ours.p50_ms / floor.p50_ms
        res.row(
            RowOut(
                backend,
                "append",
                f"append 1 msg/commit, {what}, store p50",
                ms(ours),
                f"{ref} {ms(floor)}",
                ratio,
                "<= 1.5x" if held else "",
                ratio <= 1.5 if held else None,
            )
        )
    if "keyed" in single:
        ours, same, floor = single["keyed"], single["keyed statement"], single["raw"]
        ratio = ours.p50_ms / floor.p50_ms
        what = "append 1 msg/commit with a client_id, 1 session"
        res.row(
            RowOut(
                backend,
                "append",
                f"{what}, store p50",
                ms(ours),
                f"{ref} {ms(floor)}",
                ratio,
                "<= 1.5x",
                ratio <= 1.5,
            )
        )
        res.row(
            RowOut(
                backend,
                "append",
                f"{what}, the store's statement alone p50",
                ms(same),
                f"{ref} {ms(floor)}",
                same.p50_ms / floor.p50_ms,
                "",
                None,
            )
        )
    for case, what in (("single", "1 session"), ("concurrent", "8 sessions")):
        ours, floor = stats[case]["http"], stats[case]["raw"]
        res.row(
            RowOut(
                backend,
                "append",
                f"append 1 msg/commit, {what}, HTTP p50",
                ms(ours),
                f"{ref} {ms(floor)}",
                ours.p50_ms / floor.p50_ms,
                "",
                None,
            )
        )
    ours, floor = single["http"], single["minimal"]
    ratio = ours.p50_ms / floor.p50_ms
    res.row(
        RowOut(
            backend,
            "append",
            "append 1 msg/commit, 1 session, HTTP p50 (vs the minimal app)",
            ms(ours),
            f"{MINIMAL_APP} {ms(floor)}",
            ratio,
            "<= 1.5x",
            ratio <= 1.5,
        )
    )
    for case, what in (("single", "1 session"), ("concurrent", "8 sessions")):
        if "statement" not in stats[case]:
            continue
        ours, same = stats[case]["store"], stats[case]["statement"]
        ratio = ours.p50_ms / same.p50_ms
        res.row(
            RowOut(
                backend,
                "append",
                f"append 1 msg/commit, {what}, store p50 (vs the same statements)",
                ms(ours),
                f"{SAME_STATEMENTS[backend]} {ms(same)}",
                ratio,
                "" if held else "<= 1.5x",
                None if held else ratio <= 1.5,
            )
        )
        if held:
            # what no code around the statement can go below: the statement itself
            raw_stats = stats[case]["raw"]
            res.row(
                RowOut(
                    backend,
                    "append",
                    f"append 1 msg/commit, {what}, the store's statement alone p50",
                    ms(same),
                    f"{ref} {ms(raw_stats)}",
                    same.p50_ms / raw_stats.p50_ms,
                    "",
                    None,
                )
            )
    if "aiosqlite" in single:
        ours, driver = single["store"], single["aiosqlite"]
        res.row(
            RowOut(
                backend,
                "append",
                "append 1 msg/commit, 1 session, store p50 (vs the async driver)",
                ms(ours),
                f"raw aiosqlite insert+commit {ms(driver)}",
                ours.p50_ms / driver.p50_ms,
                "",
                None,
            )
        )
    res.row(
        RowOut(
            backend,
            "append",
            "append 1 msg/commit, 8 sessions, store rate",
            per_s(conc["store"]),
            f"{raw.label} {per_s(conc['raw'])}",
            conc["store"].rate / conc["raw"].rate,
            "",
            None,
        )
    )
    ratio = batch["store"].rate / batch["raw"].rate
    res.row(
        RowOut(
            backend,
            "append",
            "append batches of 50, store rate",
            per_s(batch["store"]),
            f"{raw.label} executemany {per_s(batch['raw'])}",
            ratio,
            ">= 0.5x" if held else "",
            ratio >= 0.5 if held else None,
        )
    )
    res.row(
        RowOut(
            backend,
            "append",
            "append batches of 50, HTTP rate",
            per_s(batch["http"]),
            f"{raw.label} executemany {per_s(batch['raw'])}",
            batch["http"].rate / batch["raw"].rate,
            "",
            None,
        )
    )
    for tag, name in (("agents", AgentsPeer.name), ("langchain", LangchainPeer.name)):
        if tag not in single:
            continue
        for case, what in (("single", "1 session"), ("concurrent", "8 sessions")):
            ours, theirs = stats[case]["store"], stats[case][tag]
            ratio = ours.p50_ms / theirs.p50_ms
            res.row(
                RowOut(
                    backend,
                    "peers",
                    f"append 1 msg/commit, {what}, store p50 vs {tag}",
                    ms(ours),
                    f"{name} {ms(theirs)}",
                    ratio,
                    "< 1x (faster)",
                    ratio < 1,
                )
            )
        ratio = batch["store"].rate / batch[tag].rate
        res.row(
            RowOut(
                backend,
                "peers",
                f"append batches of 50, store rate vs {tag}",
                per_s(batch["store"]),
                f"{name} {per_s(batch[tag])}",
                ratio,
                "> 1x (faster)",
                ratio > 1,
            )
        )
