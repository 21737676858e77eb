"""The health page: summarization jobs, fallback summaries waiting for repair, and (without
API_KEYS only) this process's counts of LLM failures and fallbacks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from api.console.html import attr, esc, link, session_path, when
from api.console.labels import fallback_reason
from api.store.console import TenantJob, TenantSummary


@dataclass(frozen=True)
class ProcessCounts:
    """This process's counters since it started, every tenant's traffic together."""

    llm_failures: dict[str, float]
    """Failed LLM calls by reason."""
    fallbacks_made: dict[str, float]
    """Fallback summaries by reason."""
    repaired: float
    """Fallback summaries repaired."""


def body(
    counts: dict[str, int],
    jobs: Sequence[TenantJob],
    fallbacks: Sequence[TenantSummary],
    process: ProcessCounts | None,
) -> str:
    """The health page: job counts, the jobs and the fallbacks waiting for repair, and this
    process's LLM failures, fallbacks and repairs (`process`; None with API_KEYS: they count
    every tenant's traffic, so a line says where the operator reads them instead)."""
    summary = (
        f'<p id="job-counts">jobs queued <b id="jobs-pending">{counts.get("pending", 0)}</b> · '
        f'running <b id="jobs-running">{counts.get("running", 0)}</b> · whose last attempt '
        f'failed <b id="jobs-failing">{counts.get("failing", 0)}</b></p>'
    )
    job_rows = "".join(
        f'<tr class="{"failing" if j.job.last_error else j.job.status}">'
        f'<td><a href="{link("/sessions/" + session_path(j.session_id))}">'
        f"{esc(j.session_id)}</a></td>"
        f"<td>{esc(j.job.status)}</td><td>{esc(j.job.trigger)}/{esc(j.job.reason)}</td>"
        f'<td class="n">{j.job.attempts}</td><td>{when(j.job.run_after)}</td>'
        f"<td>{esc(j.job.last_error or '')}</td></tr>"
        for j in jobs
    )
    waiting = "".join(
        f'<li data-summary-id="{f.summary.id}"><a href="{link("/summaries/" + str(f.summary.id))}">'
        f"summary {f.summary.id}</a> of {esc(f.session_id)} · seqs {f.summary.first_seq}.."
        f"{f.summary.last_seq} · "
        f"{esc(fallback_reason(f.summary))}"
        "</li>"
        for f in fallbacks
    )
    return (
        f"<section><h2>Summarization jobs</h2>{summary}"
        '<table id="jobs"><thead><tr><th>session</th><th>status</th><th>trigger/reason</th>'
        "<th>attempts</th><th>run after (UTC)</th><th>last error</th></tr></thead>"
        f"<tbody>{job_rows}</tbody></table></section>"
        f'<section><h2>Fallback summaries waiting for repair</h2><ul id="fallbacks">'
        f"{waiting or '<li>none</li>'}</ul></section>{_process_section(process)}"
    )


def _process_section(process: ProcessCounts | None) -> str:
    if process is None:
        return (
            '<p id="process-counters-withheld">This process\'s counters of LLM failures, '
            "fallbacks and repairs count every tenant's traffic, so they are not shown here: "
            "the operator reads them on /metrics.</p>"
        )
    return (
        '<section id="process-counters"><h2>This process since it started (all tenants)</h2>'
        + _counter_table("llm-failures", "failed LLM calls by reason", process.llm_failures)
        + _counter_table("fallbacks-made", "fallback summaries by reason", process.fallbacks_made)
        + f'<p>repaired summaries <b id="repaired">{process.repaired:g}</b></p></section>'
    )


def _counter_table(element_id: str, caption: str, values: dict[str, float]) -> str:
    rows = "".join(
        f'<tr data-reason="{attr(k)}"><td>{esc(k)}</td><td class="n">{v:g}</td></tr>'
        for k, v in sorted(values.items())
    )
    return (
        f'<table id="{element_id}"><caption>{esc(caption)}</caption>'
        f"<tbody>{rows or '<tr><td>none</td></tr>'}</tbody></table>"
    )
