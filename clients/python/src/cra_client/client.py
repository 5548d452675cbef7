"""A synchronous client of a cra server's HTTP API (``specs/http.md``), standard library only.

It fills in what CARP asks of every request (``carp_version``, a fresh ``request_id``, the
``timestamp`` and the requester), raises :class:`~cra_client.errors.CraError` for every
refusal, and reads TRACE chains for offline verification (:mod:`cra_client.chain`). Time and
ids come from callables the caller may replace, so tests are deterministic.
"""

from __future__ import annotations

import datetime
import json
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Literal, cast

from .errors import CraError
from .log import Checkpoint, VerifierKey, open_checkpoint, verify_consistency, verify_inclusion
from .models import CreateSession, DecideBody, Health, Json, SessionView
from .stream import WebSocket, follow, stream_url

#: Every route this client calls, with the query parameters it may send: compared with
#: ``schemas/openapi.json`` by ``tests/test_openapi.py``.
OPERATIONS: dict[tuple[str, str], tuple[str, ...]] = {
    ("GET", "/v1/health"): (),
    ("POST", "/v1/sessions"): (),
    ("GET", "/v1/sessions/{session_id}"): (),
    ("DELETE", "/v1/sessions/{session_id}"): (),
    ("POST", "/v1/resolve"): ("receipt",),
    ("POST", "/v1/execute"): ("receipt",),
    ("GET", "/v1/approvals"): ("status",),
    ("GET", "/v1/approvals/{approval_id}"): ("wait",),
    ("POST", "/v1/approvals/{approval_id}"): (),
    ("GET", "/v1/traces/{session_id}"): (),
    ("GET", "/v1/traces/stream"): ("session_id", "since_seq", "type"),
    ("GET", "/v1/log/key"): (),
    ("GET", "/v1/log/checkpoint"): (),
    ("POST", "/v1/log/checkpoint"): (),
    ("GET", "/v1/log/proof/inclusion"): ("event_hash", "tree_size"),
    ("GET", "/v1/log/proof/consistency"): ("from", "to"),
    ("POST", "/v1/projects"): (),
    ("POST", "/v1/projects/{project_id}/packages"): (),
    ("GET", "/v1/projects/{project_id}/packages"): ("mode", "limit", "query"),
    ("GET", "/v1/projects/{project_id}/orient"): ("window_days",),
    ("POST", "/v1/projects/{project_id}/facts"): (),
    ("GET", "/v1/projects/{project_id}/facts"): (
        "subject",
        "predicate",
        "as_of",
        "recorded_as_of",
        "history",
    ),
    ("DELETE", "/v1/projects/{project_id}/facts"): ("subject", "predicate"),
}

CARP_VERSION = "1.0"


def utc_now() -> str:
    """The time now as CARP writes it: UTC, microseconds, ``Z``."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_id() -> str:
    """A fresh request id (a random UUID)."""
    return str(uuid.uuid4())


class Client:
    """One server, one credential.

    ``agent_id`` is the requester CARP requests name (an agent key may only name its own
    agent); ``clock`` and ``ids`` make the envelope's timestamp and request id.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        agent_id: str | None = None,
        timeout: float = 30.0,
        clock: Callable[[], str] = utc_now,
        ids: Callable[[], str] = new_id,
    ) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.agent_id = agent_id
        self.timeout = timeout
        self.clock = clock
        self.ids = ids

    # -- transport ------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, str] | None = None,
        timeout: float | None = None,
        carp_refusals: bool = False,
    ) -> Any:
        """Sends one request; answers the parsed JSON body (``None`` for 204).

        A refusal raises :class:`CraError`, except, with ``carp_refusals``, one answered as a
        CARP execute response (``denied``, ``pending_approval``), which is returned: an
        admitted execute is always answered with one, whatever its HTTP status.
        """
        url = self.url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as answer:
                raw = answer.read()
        except urllib.error.HTTPError as refused:
            raw = refused.read()
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = raw.decode(errors="replace")
            if carp_refusals and isinstance(parsed, dict) and "carp_version" in parsed:
                return parsed
            raise CraError.from_body(refused.code, parsed) from None
        except (urllib.error.URLError, OSError) as failed:
            raise CraError(0, "unavailable", f"{method} {url}: {failed}") from None
        if not raw:
            return None
        return json.loads(raw) if raw[:1] in (b"{", b"[") else raw.decode()

    def envelope(self, session_id: str, operation: str) -> Json:
        """The members CARP asks of every request, filled in."""
        requester: Json = {"session_id": session_id}
        if self.agent_id is not None:
            requester["agent_id"] = self.agent_id
        return {
            "carp_version": CARP_VERSION,
            "request_id": self.ids(),
            "timestamp": self.clock(),
            "operation": operation,
            "requester": requester,
        }

    # -- operations -----------------------------------------------------------------------

    def health(self) -> Health:
        """``GET /v1/health``."""
        return cast(Health, self.request("GET", "/v1/health"))

    def open_session(
        self,
        goal: str,
        *,
        agent_id: str | None = None,
        parent_session_id: str | None = None,
        project_id: str | None = None,
    ) -> SessionView:
        """Opens a session owned by ``agent_id`` (default: the client's)."""
        owner = agent_id or self.agent_id
        if owner is None:
            raise ValueError("name the session's agent: Client(agent_id=...) or agent_id=")
        body: CreateSession = {"agent_id": owner, "goal": goal}
        if parent_session_id is not None:
            body["parent_session_id"] = parent_session_id
        if project_id is not None:
            body["project_id"] = project_id
        return cast(SessionView, self.request("POST", "/v1/sessions", body))

    def session(self, session_id: str) -> SessionView:
        """``GET /v1/sessions/{id}``."""
        return cast(SessionView, self.request("GET", f"/v1/sessions/{_seg(session_id)}"))

    def end_session(self, session_id: str) -> None:
        """Ends the session (idempotent)."""
        self.request("DELETE", f"/v1/sessions/{_seg(session_id)}")

    def resolve(
        self, /, session_id: str, goal: str, *, receipt: bool = False, **task: Any
    ) -> Json:
        """Asks what may be done for ``goal`` (CARP resolve); ``task`` adds members."""
        body = self.envelope(session_id, "resolve")
        body["task"] = {"goal": goal, **task}
        query = {"receipt": "true"} if receipt else None
        return cast(Json, self.request("POST", "/v1/resolve", body, query))

    def execute(
        self,
        session_id: str,
        resolution_id: str,
        action_id: str,
        parameters: Json | None = None,
        *,
        receipt: bool = False,
    ) -> Json:
        """Executes ``action_id`` under a resolution (CARP execute).

        Answers the execute response whatever its status: ``success``, ``error`` (the action
        ran, or its executor failed), ``denied`` or ``pending_approval`` (its ``error.code``
        is the token, and ``approval_id`` names what to wait for: :meth:`wait_for_decision`,
        then execute the same call again). A request the server did not admit raises
        :class:`CraError`.
        """
        body = self.envelope(session_id, "execute")
        body["execution"] = {
            "resolution_id": resolution_id,
            "action_id": action_id,
            "parameters": parameters or {},
        }
        query = {"receipt": "true"} if receipt else None
        return cast(Json, self.request("POST", "/v1/execute", body, query, carp_refusals=True))

    def approvals(self, status: str = "pending") -> list[Json]:
        """Approvals with ``status`` (auditor or operator keys)."""
        answer = self.request("GET", "/v1/approvals", query={"status": status})
        if isinstance(answer, dict) and isinstance(answer.get("approvals"), list):
            return cast(list[Json], answer["approvals"])
        return cast(list[Json], answer)

    def approval(self, approval_id: str, *, wait: int = 0) -> Json:
        """The approval as it stands; with ``wait`` (1-60 s) once it is decided or lapses."""
        query = {"wait": str(wait)} if wait else None
        path = f"/v1/approvals/{_seg(approval_id)}"
        return cast(Json, self.request("GET", path, query=query, timeout=self.timeout + wait))

    def wait_for_decision(self, approval_id: str, *, seconds: float = 300.0) -> Json:
        """Long-polls until the approval is decided or lapses, or ``seconds`` pass."""
        deadline = datetime.datetime.now() + datetime.timedelta(seconds=seconds)
        while True:
            left = (deadline - datetime.datetime.now()).total_seconds()
            answer = self.approval(approval_id, wait=max(1, min(60, int(left))))
            if answer.get("status") != "pending" or answer.get("lapsed") or left <= 1:
                return answer

    def decide(
        self, approval_id: str, decision: Literal["grant", "reject"], note: str | None = None
    ) -> Json:
        """Grants or rejects a pending approval (operator keys)."""
        body: DecideBody = {"decision": decision}
        if note is not None:
            body["note"] = note
        return cast(Json, self.request("POST", f"/v1/approvals/{_seg(approval_id)}", body))

    def trace(self, session_id: str) -> list[Json]:
        """The session's TRACE chain, in order (``GET /v1/traces/{id}``)."""
        return cast(list[Json], self.request("GET", f"/v1/traces/{_seg(session_id)}"))


    def stream(
        self,
        session_id: str,
        *,
        since_seq: int = 0,
        event_type: str | None = None,
        retry_for: float = 30.0,
    ) -> Iterator[Json]:
        """The session's events from ``since_seq`` on, then live, each once and in order, until
        ``session.ended``; a broken connection (a server restart) is resumed where it broke
        (:func:`cra_client.stream.follow`). ``event_type`` keeps events whose type starts so.
        """

        def connect(next_seq: int) -> WebSocket:
            query = {"session_id": session_id, "since_seq": str(next_seq)}
            if event_type is not None:
                query["type"] = event_type
            return WebSocket(stream_url(self.url, query), self.token, self.timeout)

        return follow(connect, since_seq=since_seq, retry_for=retry_for)


    # -- the transparency log --------------------------------------------------------------

    def log_key(self) -> VerifierKey:
        """The log's verifier key as the server names it (pin it out of band to trust it)."""
        return VerifierKey.parse(cast(str, self.request("GET", "/v1/log/key")))

    def checkpoint(self, key: VerifierKey, *, cut: bool = False) -> Checkpoint:
        """The latest signed checkpoint (``cut``: one cut now, operators), opened with ``key``."""
        note = self.request("POST" if cut else "GET", "/v1/log/checkpoint")
        return open_checkpoint(cast(str, note), key)

    def verify_in_log(self, event: Json, checkpoint: Checkpoint) -> int:
        """Checks that ``event`` is a leaf of the tree ``checkpoint`` signs; answers its index."""
        params = {"event_hash": event["event_hash"], "tree_size": str(checkpoint.size)}
        proof = cast(Json, self.request("GET", "/v1/log/proof/inclusion", query=params))
        hashes = [bytes.fromhex(h) for h in proof["hashes"]]
        index = int(proof["leaf_index"])
        verify_inclusion(bytes.fromhex(event["event_hash"]), index, checkpoint.size, hashes, checkpoint.root)
        return index

    def verify_extends(self, old: Checkpoint, new: Checkpoint) -> None:
        """Checks that ``new``'s tree extends ``old``'s (a log never rewrites what it showed)."""
        params = {"from": str(old.size), "to": str(new.size)}
        proof = cast(Json, self.request("GET", "/v1/log/proof/consistency", query=params))
        hashes = [bytes.fromhex(h) for h in proof["hashes"]]
        verify_consistency(old.size, new.size, old.root, new.root, hashes)

    # -- Relay (Agentic Protocol v0.1) -----------------------------------------------------

    def create_project(self, project_id: str, name: str, members: list[Json] | None = None) -> Json:
        """Creates a Relay project (and its audit chain)."""
        body: Json = {"project_id": project_id, "name": name}
        if members is not None:
            body["members"] = members
        return cast(Json, self.request("POST", "/v1/projects", body))

    def deposit(
        self,
        /,
        project_id: str,
        title: str,
        *,
        package_type: str = "standard",
        status: str = "complete",
        review_type: str = "none",
        actor_type: str = "agent",
        session_id: str | None = None,
        **fields: Any,
    ) -> Json:
        """Deposits a context package; the id, version, creation time and creator are filled
        in (the creator is the client's ``agent_id``). ``fields`` adds §6 members
        (``handoff_note``, ``decisions_made``, ``open_questions``, ``tags``, ...)."""
        if self.agent_id is None:
            raise ValueError("name the depositing actor: Client(agent_id=...)")
        package: Json = {
            "package_id": "pkg_" + uuid.UUID(self.ids()).hex,
            "project_id": project_id,
            "relay_version": "0.1",
            "title": title,
            "status": status,
            "package_type": package_type,
            "review_type": review_type,
            "created_at": self.clock(),
            "created_by": {"id": self.agent_id, "type": actor_type, "session_id": session_id},
            **fields,
        }
        path = f"/v1/projects/{_seg(project_id)}/packages"
        return cast(Json, self.request("POST", path, package))

    def pull(
        self, project_id: str, *, mode: str = "latest", limit: int = 20, query: str | None = None
    ) -> Json:
        """Pulls packages, the latest or (``mode="relevant"``) the best for ``query``:
        ``{"packages": [...], "quarantined": [ids]}``, with ``matches`` when relevant."""
        params = {"mode": mode, "limit": str(limit)}
        if query is not None:
            params["query"] = query
        path = f"/v1/projects/{_seg(project_id)}/packages"
        return cast(Json, self.request("GET", path, query=params))

    def orient(self, project_id: str, *, window_days: int | None = None) -> Json:
        """The project's orientation bundle (recent packages, active facts, open questions)."""
        params = None if window_days is None else {"window_days": str(window_days)}
        return cast(Json, self.request("GET", f"/v1/projects/{_seg(project_id)}/orient", query=params))

    def assert_fact(self, /, project_id: str, subject: str, predicate: str, value: Any, **fields: Any) -> Json:
        """Asserts a temporal fact (it supersedes the current one of its subject and predicate)."""
        body: Json = {"subject": subject, "predicate": predicate, "value": value, **fields}
        return cast(Json, self.request("POST", f"/v1/projects/{_seg(project_id)}/facts", body))

    def facts(
        self,
        project_id: str,
        subject: str,
        predicate: str,
        *,
        as_of: str | None = None,
        recorded_as_of: str | None = None,
        history: bool = False,
    ) -> list[Json]:
        """Facts of ``subject`` and ``predicate``: current, valid at ``as_of``, believed at
        ``recorded_as_of``, or every row with ``history`` (at most one of the three)."""
        params = {"subject": subject, "predicate": predicate}
        if as_of is not None:
            params["as_of"] = as_of
        if recorded_as_of is not None:
            params["recorded_as_of"] = recorded_as_of
        if history:
            params["history"] = "true"
        path = f"/v1/projects/{_seg(project_id)}/facts"
        return cast(list[Json], self.request("GET", path, query=params))

    def invalidate_fact(self, project_id: str, subject: str, predicate: str) -> int:
        """Ends the current fact of ``subject`` and ``predicate``; answers how many ended."""
        params = {"subject": subject, "predicate": predicate}
        path = f"/v1/projects/{_seg(project_id)}/facts"
        answer = cast(Json, self.request("DELETE", path, query=params))
        return int(answer["invalidated"])


def _seg(value: str) -> str:
    """One path segment, percent-encoded."""
    return urllib.parse.quote(value, safe="")
