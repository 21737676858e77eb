"""Trace a summary back to its source messages, a session's summary tree, or a message's summaries.

    python -m scripts.trace_summary SUMMARY_ID [--full] [--json]
    python -m scripts.trace_summary --session ID [--tenant T] [--full] [--json]
    python -m scripts.trace_summary --message MESSAGE_ID [--json]

`--session` is looked up in every tenant unless `--tenant` names one; an id that several
tenants have must be given with `--tenant`. It prints the session's forest of summaries as a
tree that fits the terminal (80 columns when piped; `scripts.summary_tree`), with `--json` a
flat list of the summaries that rebuilds it.

Removals show as they are stored: a removed message is a tombstone, `[removed at <time>]`
without content; a summary a removal reached is erased, its state `erased at <time>` and its
text gone; the session's tree lists the erased summaries after the live ones, one group per
erasure, folded unless `--full`, and marks the summaries made again after them.

Reads DATABASE_URL (or --database-url) and never writes: the database is opened read-only.
Exit status: 0 on success, 2 when the id is unknown or ambiguous or the database cannot be
read (one line on stderr).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as `python scripts/trace_summary.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import json
import shutil
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession

from api import store
from api.db.engine import create_sessionmaker
from api.settings import Settings
from api.store import audit
from api.store.rows import MessageRow, SessionRow, SummaryRow
from scripts import summary_tree
from scripts.cli import run_command
from scripts.summary_tree import SummaryTree
from scripts.terminal import (
    clip,
    display_width,
    optional_time,
    pad,
    short_time,
    timestamp,
)
from summarizer import METADATA_KEYS

PROG = "trace_summary"

DEFAULT_WIDTH = 120
"""Line width when stdout is not a terminal: one-line contents are clipped to fit it."""

TREE_WIDTH = 80
"""Line width of a session's tree when stdout is not a terminal: the narrowest terminal in
common use, so a tree pasted or paged anywhere keeps its shape."""

METADATA_ORDER = METADATA_KEYS
"""Summary metadata keys in the order docs/design.md lists them; other keys follow, sorted."""


class NotFound(Exception):
    """The id named on the command line does not exist."""


# --- text helpers (also used by scripts.demo) -----------------------------------------------


def format_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], width: int, full_last: bool = False
) -> list[str]:
    """Aligned columns; the last column is clipped to the line (or kept whole, wrapped below)."""
    widths = [display_width(header) for header in headers[:-1]]
    for row in rows:
        for index, cell in enumerate(row[:-1]):
            widths[index] = max(widths[index], display_width(cell))
    indent = sum(widths) + 2 * len(widths)
    last_width = max(20, width - indent)
    lines = [_table_line(headers, widths, headers[-1]).rstrip()]
    for row in rows:
        if not full_last:
            lines.append(_table_line(row, widths, clip(row[-1], last_width)).rstrip())
            continue
        first, *rest = row[-1].splitlines() or [""]
        lines.append(_table_line(row, widths, first).rstrip())
        lines.extend((" " * indent + line).rstrip() for line in rest)
    return lines


def _table_line(row: Sequence[str], widths: Sequence[int], last: str) -> str:
    cells = [pad(cell, cell_width) for cell, cell_width in zip(row, widths, strict=False)]
    return "  ".join([*cells, last])


def line_width(out: TextIO, default: int = DEFAULT_WIDTH) -> int:
    if out.isatty():
        return shutil.get_terminal_size((default, 24)).columns
    return default


def describe_content(
    content: str | list[Any] | None,
    tool_calls: list[Any] | None,
    tool_call_id: str | None,
) -> str:
    """A message's content as text: text parts joined, images and tool calls named."""
    pieces: list[str] = []
    if tool_call_id is not None:
        pieces.append(f"[result of {tool_call_id}]")
    if isinstance(content, str):
        pieces.append(content)
    elif content:
        pieces.extend(_part_text(part) for part in content)
    for call in tool_calls or ():
        function = call.get("function", {}) if isinstance(call, dict) else {}
        pieces.append(f"-> {function.get('name', '?')}({function.get('arguments', '')})")
    return " ".join(piece for piece in pieces if piece)


def _part_text(part: Any) -> str:
    if isinstance(part, dict) and part.get("type") == "text":
        return str(part.get("text", ""))
    return "[image]"


# --- collecting -----------------------------------------------------------------------------


@dataclass
class Node:
    """A summary with what it came from: the summaries it absorbed, or its messages.

    `children` and `messages` are None where this view does not expand them.
    """

    summary: SummaryRow
    children: list[Node] | None
    messages: list[MessageRow] | None


@dataclass
class SummaryTrace:
    session: SessionRow
    root: Node


@dataclass
class SessionTrace:
    session: SessionRow
    tree: SummaryTree


@dataclass
class MessageTrace:
    session: SessionRow
    message: MessageRow
    summaries: list[SummaryRow]


Trace = SummaryTrace | SessionTrace | MessageTrace


async def trace_summary(db: AsyncSession, summary_id: int) -> SummaryTrace:
    summary = await audit.summary_by_id(db, summary_id)
    if summary is None:
        raise NotFound(f"no summary with id {summary_id}")
    session = await _session_of(db, summary.session_id)
    return SummaryTrace(session=session, root=await _expand(db, summary, set()))


async def _expand(db: AsyncSession, summary: SummaryRow, seen: set[int]) -> Node:
    """The summary down to its messages; `seen` stops a corrupted, cyclic chain."""
    seen.add(summary.id)
    absorbed = [s for s in await audit.absorbed_summaries(db, summary) if s.id not in seen]
    if not absorbed:
        return Node(summary, children=[], messages=await audit.linked_messages(db, summary))
    children = [await _expand(db, child, seen) for child in absorbed]
    return Node(summary, children=children, messages=None)


async def trace_session(db: AsyncSession, external_id: str, tenant: str | None) -> SessionTrace:
    """The summary tree of a session; raises audit.SessionLookupError (see audit.find_session)."""
    session = await audit.find_session(db, external_id, tenant)
    summaries = await audit.session_summaries(db, session.id)
    return SessionTrace(session=session, tree=summary_tree.build(summaries))


async def trace_message(db: AsyncSession, message_id: int) -> MessageTrace:
    message = await audit.message_by_id(db, message_id)
    if message is None:
        raise NotFound(f"no message with id {message_id}")
    session = await _session_of(db, message.session_id)
    summaries = await audit.summaries_covering(db, message)
    return MessageTrace(session=session, message=message, summaries=summaries)


async def _session_of(db: AsyncSession, session_key: int) -> SessionRow:
    session = await store.get_session_by_key(db, session_key)
    assert session is not None, "a foreign key keeps every row's session"
    return session


# --- JSON -----------------------------------------------------------------------------------


def session_json(session: SessionRow) -> dict[str, Any]:
    return {
        "id": session.external_id,
        "tenant": session.tenant,
        "internal_id": session.id,
        "last_seq": session.last_seq,
    }


def message_json(message: MessageRow) -> dict[str, Any]:
    return {
        "id": message.id,
        "seq": message.seq,
        "role": message.role,
        "created_at": timestamp(message.created_at).isoformat(),
        "removed_at": optional_time(message.removed_at),
        "orphaned_at": optional_time(message.orphaned_at),
        "content": message.body,
        "tool_calls": message.tool_calls,
        "tool_call_id": message.tool_call_id,
    }


def summary_json(
    summary: SummaryRow,
    children: list[dict[str, Any]] | None = None,
    messages: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "id": summary.id,
        "level": summary.level,
        "first_seq": summary.first_seq,
        "last_seq": summary.last_seq,
        "message_count": summary.message_count,
        "superseded_by": summary.superseded_by,
        "erased_at": optional_time(summary.erased_at),
        "model": summary.model,
        "created_at": timestamp(summary.created_at).isoformat(),
        "metadata": summary.metadata,
        "summary_text": summary.summary_text,
        "children": children,
        "messages": messages,
    }


def node_json(node: Node) -> dict[str, Any]:
    return summary_json(
        node.summary,
        None if node.children is None else [node_json(child) for child in node.children],
        None if node.messages is None else [message_json(m) for m in node.messages],
    )


def trace_json(trace: Trace) -> dict[str, Any]:
    if isinstance(trace, SummaryTrace):
        return {"session": session_json(trace.session), "summary": node_json(trace.root)}
    if isinstance(trace, SessionTrace):
        return {
            "session": session_json(trace.session),
            "summaries": summary_tree.flat_json(trace.tree),
        }
    return {
        "session": session_json(trace.session),
        "message": message_json(trace.message),
        "summaries": [summary_json(summary) for summary in trace.summaries],
    }


# --- text -----------------------------------------------------------------------------------


def metadata_value(metadata: dict[str, Any], key: str) -> str:
    """One metadata value for a table cell; a missing key shows as '-'."""
    value = metadata.get(key)
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def metadata_line(metadata: dict[str, Any]) -> str:
    keys = [key for key in METADATA_ORDER if key in metadata]
    keys += sorted(key for key in metadata if key not in METADATA_ORDER)
    return "  ".join(f"{key}={metadata_value(metadata, key)}" for key in keys) or "(none)"


def wrapped(label: str, text: str, margin: str, width: int) -> list[str]:
    """`label text` wrapped to `width`, continuation lines indented under the text."""
    indent = margin + " " * len(label)
    lines = textwrap.wrap(
        text,
        width=max(40, width),
        initial_indent=margin + label,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return lines or [margin + label]


def status(summary: SummaryRow) -> str:
    if summary.erased_at is not None:
        return f"erased at {short_time(summary.erased_at)}"
    return "live" if summary.superseded_by is None else f"superseded by {summary.superseded_by}"


def summary_heading(summary: SummaryRow) -> str:
    seqs = f"{summary.first_seq}..{summary.last_seq}"
    return (
        f"Summary {summary.id} · level {summary.level} · seqs {seqs}"
        f" · {summary.message_count} messages · {status(summary)}"
    )


def message_text(message: MessageRow) -> str:
    if message.removed_at is not None:
        return f"[removed at {short_time(message.removed_at)}]"
    described = describe_content(message.body, message.tool_calls, message.tool_call_id)
    if message.orphaned_at is not None:
        # the other half of its tool exchange was removed: stored, shown in no view
        return f"[hidden since {short_time(message.orphaned_at)}] {described}"
    return described


def message_rows(messages: Sequence[MessageRow]) -> list[list[str]]:
    return [
        [str(m.seq), str(m.id), m.role, short_time(m.created_at), message_text(m)] for m in messages
    ]


MESSAGE_HEADERS = ("seq", "id", "role", "created_at", "content")


def render_node(node: Node, depth: int, width: int, full: bool) -> list[str]:
    summary = node.summary
    margin = "  " * depth
    lines = [
        margin + summary_heading(summary),
        f"{margin}  model {summary.model} · created {short_time(summary.created_at)} UTC",
        *wrapped("metadata: ", metadata_line(summary.metadata), margin + "  ", width),
    ]
    if summary.erased_at is None:  # an erased summary has no text left
        lines.append(f"{margin}  text:")
        lines.extend(f"{margin}    {line}".rstrip() for line in summary.summary_text.splitlines())
    if node.children:
        count = len(node.children)
        absorbed = f"absorbed {count} {'summary' if count == 1 else 'summaries'}"
        given_back = node.children[0].summary.first_seq - 1
        if summary.erased_at is not None and given_back >= summary.first_seq:
            # its erasure made the summaries it had absorbed before the removal live again
            back = f"seqs {summary.first_seq}..{given_back}"
            absorbed += f" ({back}: made live again when it was erased)"
        lines.append(f"{margin}  {absorbed}:")
        for child in node.children:
            lines.append("")
            lines.extend(render_node(child, depth + 2, width, full))
    elif node.messages is not None:
        lines.append(f"{margin}  source messages ({len(node.messages)}):")
        table = format_table(
            MESSAGE_HEADERS, message_rows(node.messages), width - len(margin) - 4, full
        )
        lines.extend(f"{margin}    {line}" for line in table)
    return lines


SUMMARY_HEADERS = (
    "id",
    "level",
    "seqs",
    "messages",
    "status",
    "trigger",
    "reason",
    "chunks",
    "truncated",
    "ratio",
    "created_at",
)


def summary_row(summary: SummaryRow, indent: str = "") -> list[str]:
    metadata = summary.metadata or {}
    return [
        f"{indent}{summary.id}",
        str(summary.level),
        f"{summary.first_seq}..{summary.last_seq}",
        str(summary.message_count),
        status(summary),
        metadata_value(metadata, "trigger"),
        metadata_value(metadata, "trigger_reason"),
        metadata_value(metadata, "chunk_count"),
        metadata_value(metadata, "truncated"),
        metadata_value(metadata, "compression_ratio"),
        short_time(summary.created_at),
    ]


def session_title(session: SessionRow) -> str:
    return f"session {session.external_id} (tenant {session.tenant}, session key {session.id})"


def render(trace: Trace, width: int, full: bool) -> list[str]:
    if isinstance(trace, SummaryTrace):
        return [session_title(trace.session), "", *render_node(trace.root, 0, width, full)]
    if isinstance(trace, SessionTrace):
        return render_session(trace, width, full)
    return render_message(trace, width, full)


def render_session(trace: SessionTrace, width: int, full: bool) -> list[str]:
    """The title, what a load shows, and the tree; `full` unfolds the erased summaries."""
    session, tree = trace.session, trace.tree
    statuses = [summary_tree.status_of(summary) for summary in tree.summaries.values()]
    removed = f" ({session.removed_count} removed)" if session.removed_count else ""
    erased = statuses.count("erased")
    live = f"{statuses.count('live')} live" + (f", {erased} erased" if erased else "")
    lines = [
        *summary_tree.wrap(session_title(session).capitalize(), width),
        *summary_tree.wrap(
            f"{session.last_seq} messages{removed}, {len(statuses)} summaries ({live})", width
        ),
    ]
    if not statuses:
        return [*lines, "No summaries yet."]
    return [
        *lines,
        *summary_tree.wrap(summary_tree.overview(tree), width),
        "",
        *summary_tree.render(tree, width, unfold_erased=full),
    ]


def render_message(trace: MessageTrace, width: int, full: bool) -> list[str]:
    message = trace.message
    lines = [
        f"Message {message.id} · seq {message.seq} · {message.role} · "
        f"{short_time(message.created_at)} UTC · {session_title(trace.session)}",
    ]
    text = message_text(message)
    body = text.splitlines() if full else [clip(text, width - 2)]
    lines.extend(f"  {line}".rstrip() for line in body)
    lines.append("")
    count = len(trace.summaries)
    summaries = f"{count} {'summary' if count == 1 else 'summaries'}"
    if message.removed_at is not None:
        removed = f"Removed at {short_time(message.removed_at)} UTC"
        if not trace.summaries:
            lines.append(f"{removed}; no summary had covered it.")
            return lines
        erased = all(summary.erased_at is not None for summary in trace.summaries)
        lines.append(
            f"{removed}; it was covered by {summaries}{', all now erased' if erased else ''}:"
        )
    elif not trace.summaries:
        lines.append("No summary covers this message yet.")
        return lines
    else:
        lines.append(f"Covered by {summaries}, live first:")
    rows = [summary_row(summary) for summary in trace.summaries]
    lines.extend(format_table(SUMMARY_HEADERS, rows, width))
    return lines


# --- command line ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    database_url: str
    summary_id: int | None = None
    session: str | None = None
    tenant: str | None = None
    message_id: int | None = None
    json: bool = False
    full: bool = False


def parse_args(argv: Sequence[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(
        prog=f"python -m scripts.{PROG}",
        description="Trace summaries to their source messages (read-only).",
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("summary_id", nargs="?", type=int, help="the summary to trace")
    target.add_argument("--session", metavar="ID", help="print the summary tree of a session")
    target.add_argument(
        "--message", metavar="ID", type=int, dest="message_id", help="summaries covering a message"
    )
    parser.add_argument(
        "--tenant", help="tenant of --session (default: whichever tenant has that session id)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--full",
        action="store_true",
        help="whole message contents; with --session, erased summaries unfolded",
    )
    parser.add_argument("--database-url", help="default: DATABASE_URL (or .env)")
    args = parser.parse_args(argv)
    return Options(
        database_url=args.database_url or Settings().database_url,
        summary_id=args.summary_id,
        session=args.session,
        tenant=args.tenant,
        message_id=args.message_id,
        json=args.json,
        full=args.full,
    )


async def collect(db: AsyncSession, options: Options) -> Trace:
    if options.session is not None:
        return await trace_session(db, options.session, options.tenant)
    if options.message_id is not None:
        return await trace_message(db, options.message_id)
    assert options.summary_id is not None, "argparse requires one target"
    return await trace_summary(db, options.summary_id)


async def run(options: Options, out: TextIO, err: TextIO) -> int:
    """The command without the event loop: tests await it with their own streams."""
    try:
        engine = audit.read_only_engine(options.database_url)
    except OSError as exc:
        err.write(f"{PROG}: {exc}\n")
        return 2
    try:
        async with create_sessionmaker(engine)() as db, db.begin():
            trace = await collect(db, options)
    except (NotFound, audit.SessionLookupError) as exc:
        err.write(f"{PROG}: {exc}\n")
        return 2
    except (SQLAlchemyError, OSError) as exc:
        err.write(f"{PROG}: cannot read the database: {clip(str(exc), 300)}\n")
        return 2
    finally:
        await engine.dispose()
    if options.json:
        json.dump(trace_json(trace), out, ensure_ascii=False, indent=2)
        out.write("\n")
    else:
        width = line_width(out, TREE_WIDTH if isinstance(trace, SessionTrace) else DEFAULT_WIDTH)
        out.write("\n".join(render(trace, width, options.full)) + "\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(run, parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
