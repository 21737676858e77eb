"""A resent history matched against the stored session: what is new, and where it branches.

Every message a wire stores carries, as its `client_id`, a link of a hash chain: the hash of
the previous message's link and of the message's canonical form (`canonical`: what a model
reads of it, whatever optional fields the client's SDK adds). The link of a resend's k-th
message therefore names its whole prefix, and matching a resend is a lookup by the unique
`(session_id, client_id)` index, not a comparison of messages:

- the session's newest message is a link of the resend: the messages after it are the new tail
  (the common case: one index read, whatever the history's length);
- it holds no assistant message, and what of it is stored is its system prompt, or less than
  the session's newest exchange: the client sends only its new messages (stateful mode, for
  a session named per conversation), appended after the session's newest; a repeat of the
  newest exchange's own messages is a retry, answered again in a branch;
- otherwise the resend diverges from what is stored (an edited or regenerated message) after
  its longest stored prefix, found by a binary search over the links: the session branches
  there (`api.forks.branch_session`) and the turn goes on in the branch.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy.ext.asyncio import AsyncSession

from api import store
from api.errors import SessionNotFound
from api.store import forks as fork_store

LINK_PREFIX = "chain_"
"""The `client_id` of a message a wire stored: the prefix and 32 hex digits of its link."""

LINK_BYTES = 16


def _arguments(text: object) -> object:
    """Tool arguments as a model reads them: the same JSON whatever its key order or spacing."""
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested past what it reads
        return text


def _content(content: object) -> object:
    if content is None:
        return ""
    if isinstance(content, list):
        if (
            len(content) == 1
            and isinstance(content[0], Mapping)
            and content[0].get("type") == "text"
        ):
            return content[0].get("text", "")
        return [
            {key: value for key, value in part.items() if key != "cache_control"}
            if isinstance(part, Mapping)
            else part
            for part in content
        ]
    return content


def canonical(message: Mapping[str, Any]) -> bytes:
    """What identifies a chat message in a resend: role, content, name, tool calls and the call
    it answers, with null, empty and SDK-only fields (`refusal`, `annotations`) left out."""
    role = message.get("role")
    role = "system" if role == "developer" else role
    content = message.get("content")
    calls = message.get("tool_calls")
    if not calls and (content is None or isinstance(content, str)):
        # the common message, as the general form below encodes it
        shape: tuple[Any, ...] = (
            role,
            content or "",
            message.get("name"),
            message.get("tool_call_id"),
            (),
        )
    else:
        shape = (
            role,
            _content(content),
            message.get("name"),
            message.get("tool_call_id"),
            [_call(call) for call in calls if isinstance(call, Mapping)]
            if isinstance(calls, list)
            else calls or (),
        )
    try:
        return orjson.dumps(shape, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        # what orjson cannot encode (an integer past 64 bits): identified all the same; a
        # message of another shape than the wire's is refused once it is checked as new
        try:
            return json.dumps(shape, sort_keys=True, separators=(",", ":"), default=repr).encode()
        except RecursionError:  # nested past what JSON encodes here: its text stands for it
            return repr(shape).encode()


def _call(call: Mapping[str, Any]) -> tuple[Any, ...]:
    function = call.get("function")
    if not isinstance(function, Mapping):
        return (call.get("id"), None, function)
    return (call.get("id"), function.get("name"), _arguments(function.get("arguments")))


def digests(messages: Sequence[Mapping[str, Any]], after: bytes = b"") -> list[bytes]:
    """The chain's digest of every message, the first one chained to `after` (the digest of
    the message before it; b"" at the start of a session)."""
    result: list[bytes] = []
    previous = after
    for message in messages:
        digest = hashlib.blake2b(previous, digest_size=LINK_BYTES)
        digest.update(canonical(message))
        previous = digest.digest()
        result.append(previous)
    return result


def link(digest: bytes) -> str:
    """A digest as the `client_id` it is stored as."""
    return LINK_PREFIX + digest.hex()


def digest_of(client_id: str | None) -> bytes | None:
    """The digest a stored `client_id` holds (None: not a link)."""
    if not client_id or not client_id.startswith(LINK_PREFIX):
        return None
    try:
        return bytes.fromhex(client_id[len(LINK_PREFIX) :])
    except ValueError:
        return None


def links(messages: Sequence[Mapping[str, Any]], after: str = "") -> list[str]:
    """The links of `messages`, the first one chained to the link `after` ("": none)."""
    return [link(digest) for digest in digests(messages, digest_of(after) or b"")]


@dataclass(frozen=True)
class Reconciled:
    """What a turn appends, and to what."""

    new_start: int
    """Where the messages the session does not hold yet begin in the request (they run to
    its end)."""
    new_links: list[str]
    """Their links (their `client_id`s)."""
    previous_link: str = ""
    """The link of the message the new ones follow ("": none)."""
    branch_at: int | None = None
    """The seq after which the session branches before the turn (0: from its start); None:
    the turn goes on in the session as it is."""
    stored: bool = False
    """Whether the session exists (a turn's first answer creates it)."""
    format: str | None = None
    """The session's format (None: it holds nothing yet)."""

    @property
    def last_link(self) -> str:
        """The link the model's answer follows."""
        return self.new_links[-1] if self.new_links else self.previous_link


def _leading_system(messages: Sequence[Mapping[str, Any]]) -> int:
    count = 0
    for message in messages:
        if message.get("role") not in ("system", "developer"):
            break
        count += 1
    return count


async def reconcile(
    db: AsyncSession,
    tenant: str,
    external_id: str,
    messages: Sequence[Mapping[str, Any]],
    stateful: bool = True,
) -> Reconciled:
    """Match `messages` (the request's, in chat shape) against the stored session;
    `stateful`: whether a request of new messages only may be appended (rule 2)."""
    chain = digests(messages)
    try:
        session = await store.get_session(db, tenant, external_id)
    except SessionNotFound:
        return Reconciled(0, [link(digest) for digest in chain])
    kind = session.format
    newest = await fork_store.message_at(db, session.id, session.last_seq)
    if newest is None:
        return Reconciled(0, [link(digest) for digest in chain], stored=True, format=kind)
    newest_link = newest.client_id or ""
    newest_digest = digest_of(newest_link)
    matched = _position_after(chain, newest_digest)
    if matched is not None:
        new = [link(digest) for digest in chain[matched:]]
        return Reconciled(matched, new, newest_link, stored=True, format=kind)
    stored, seq = await _longest_stored_prefix(db, session.id, chain)
    system = _leading_system(messages)
    tail = messages[system:]
    if stateful and _only_new(tail) and (stored == system or stored + 1 < session.last_seq):
        # no answer of the model is resent, and the request's own messages are not the
        # session's newest exchange: the client sends only its new messages
        repeated = await _repeats_newest_exchange(db, session.id, session.last_seq, tail)
        if repeated is not None:
            # a retry of the newest exchange, whose answer the client never got: answered
            # again in a branch after its messages, as a regenerated answer is
            return Reconciled(len(messages), [], repeated, session.last_seq - 1, True, kind)
        chained = links(tail, after=newest_link)
        return Reconciled(system, chained, newest_link, stored=True, format=kind)
    previous = link(chain[stored - 1]) if stored else ""
    new = [link(digest) for digest in chain[stored:]]
    return Reconciled(stored, new, previous, seq, stored=True, format=kind)


def _position_after(chain: Sequence[bytes], digest: bytes | None) -> int | None:
    """How many of the request's messages end with the one whose digest is `digest` (searched
    from the end, where a resend's match is: it adds its new messages after it)."""
    if digest is None:
        return None
    for index in range(len(chain) - 1, -1, -1):
        if chain[index] == digest:
            return index + 1
    return None


async def _repeats_newest_exchange(
    db: AsyncSession, session_key: int, last_seq: int, tail: Sequence[Mapping[str, Any]]
) -> str | None:
    """The link of the last of `tail` when the session ends with `tail` and one answer (a
    stateful client retrying its newest turn), else None."""
    before_seq = last_seq - len(tail) - 1
    if before_seq < 0:
        return None
    before = await fork_store.message_at(db, session_key, before_seq) if before_seq else None
    last = await fork_store.message_at(db, session_key, last_seq - 1)
    chained = links(tail, after=(before.client_id or "") if before is not None else "")
    return chained[-1] if last is not None and last.client_id == chained[-1] else None


def _only_new(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Messages a stateful client sends: some, and none of them the model's (a resend holds
    the model's earlier answers)."""
    return bool(messages) and all(message.get("role") != "assistant" for message in messages)


async def _longest_stored_prefix(
    db: AsyncSession, session_key: int, chain: Sequence[bytes]
) -> tuple[int, int]:
    """How many of the resend's first messages the session holds, and the seq of the last of
    them (0, 0: none): a binary search, each probe one read of the client id index."""
    low, high, seq = 0, len(chain), 0
    while low < high:
        middle = (low + high + 1) // 2
        found = await store.message_by_client_id(db, session_key, link(chain[middle - 1]))
        if found is None:
            high = middle - 1
        else:
            low, seq = middle, found.seq
    return low, seq
