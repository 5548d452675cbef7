"""Offline verification of a TRACE/1.0 chain (the spec's Appendix B), standard library only.

An auditor needs no server and no trust in it: each event's hash is recomputed from its fields
(canonical JSON of the payload as Appendix B defines it: sorted keys, no spaces, ASCII
escapes), each event must name its predecessor's hash (the first, 64 zeros), and sequences run
0, 1, 2, ... without a gap. The finding codes are ``cra trace verify``'s.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

GENESIS = "0" * 64

_TEXT_FIELDS = (
    "trace_version",
    "event_id",
    "trace_id",
    "span_id",
    "session_id",
    "timestamp",
    "event_type",
    "event_hash",
    "previous_event_hash",
)


@dataclass(frozen=True)
class Finding:
    """Why a chain does not verify: the first problem, at ``index`` (0-based)."""

    index: int
    code: str
    message: str


def canonical(value: Any) -> str:
    """Appendix B's canonical JSON."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def event_hash(event: dict[str, Any]) -> str:
    """The lowercase hex SHA-256 Appendix B computes for ``event``."""
    parts = [
        event["trace_version"],
        event["event_id"],
        event["trace_id"],
        event["span_id"],
        event.get("parent_span_id") or "",
        event["session_id"],
        str(event["sequence"]),
        event["timestamp"],
        event["event_type"],
        canonical(event["payload"]),
        event["previous_event_hash"],
    ]
    return hashlib.sha256("".join(parts).encode("utf-8")).hexdigest()


def _shape_problem(event: Any) -> str | None:
    if not isinstance(event, dict):
        return "the event is not a JSON object"
    for name in _TEXT_FIELDS:
        if not isinstance(event.get(name), str):
            return f"field `{name}` is missing or not a string"
    parent = event.get("parent_span_id")
    if parent is not None and not isinstance(parent, str):
        return "field `parent_span_id` must be a string or null"
    sequence = event.get("sequence")
    if isinstance(sequence, bool) or not isinstance(sequence, int) or not 0 <= sequence < 2**64:
        return "field `sequence` must be a non-negative integer"
    if not isinstance(event.get("payload"), dict):
        return "field `payload` must be an object"
    return None


def verify_chain(events: Iterable[Any]) -> Finding | None:
    """``None`` when ``events`` (in order) form one valid chain, else the first finding."""
    previous: str | None = GENESIS
    for index, event in enumerate(events):
        problem = _shape_problem(event)
        if problem is not None:
            return Finding(index, "malformed_event", problem)
        if event["sequence"] != index:
            return Finding(index, "sequence_gap", f"sequence is {event['sequence']}, expected {index}")
        if event["previous_event_hash"] != previous:
            code = "invalid_genesis" if index == 0 else "chain_broken"
            return Finding(index, code, "previous_event_hash does not name the event before it")
        computed = event_hash(event)
        if computed != event["event_hash"]:
            return Finding(index, "hash_mismatch", f"event_hash is {event['event_hash']}, computed {computed}")
        previous = computed
    return None


def read_jsonl(text: str) -> list[Any]:
    """The events of a ``.trace.jsonl`` export, one JSON object a line."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]
