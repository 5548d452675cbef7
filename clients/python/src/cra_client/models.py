"""Typed shapes of what the client sends and reads.

The members, their types and which are required, of every model in :data:`CHECKED` are
compared with ``schemas/openapi.json`` by ``tests/test_openapi.py``, so a schema change the
client does not follow fails its tests. CARP's own bodies (resolutions, execute responses,
approvals) and TRACE events are described by ``schemas/carp-*.schema.json`` and
``schemas/trace-event.schema.json`` and read as JSON objects (:data:`Json`).

Optional members are declared in a ``total=False`` base, which Python 3.10 reads as
``NotRequired`` is read from 3.11 on.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

#: A JSON object as read: a resolution, an execute response, an approval, a TRACE event.
Json = dict[str, Any]


class _CreateSessionOptional(TypedDict, total=False):
    parent_session_id: str | None
    project_id: str | None


class CreateSession(_CreateSessionOptional):
    """``POST /v1/sessions``."""

    agent_id: str
    goal: str


class _SessionViewOptional(TypedDict, total=False):
    ended_at: str | None
    goal: str | None
    parent_session_id: str | None
    project_id: str | None


class SessionView(_SessionViewOptional):
    """A session as the server answers it."""

    session_id: str
    agent_id: str
    callsign: str
    status: str
    started_at: str
    event_count: int
    stored_bytes: int


class _DecideBodyOptional(TypedDict, total=False):
    note: str | None


class DecideBody(_DecideBodyOptional):
    """``POST /v1/approvals/{id}``."""

    decision: Literal["grant", "reject"]


class _HealthOptional(TypedDict, total=False):
    clock_offset_ms: int | None
    store_error: str | None
    problems: list[str]


class Health(_HealthOptional):
    """``GET /v1/health``."""

    status: str
    version: str
    started_at: str
    store: str
    atlases: int
    replica_id: str
    leader: bool


#: The models compared with the OpenAPI document, by its schema names.
CHECKED: dict[str, type] = {
    "CreateSession": CreateSession,
    "SessionView": SessionView,
    "DecideBody": DecideBody,
    "Health": Health,
}
