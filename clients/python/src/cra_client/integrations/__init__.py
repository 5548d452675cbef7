"""Governed tools for agent frameworks: each tool call is a CARP execute under a resolution, so
cra's policies decide it and its chain records it. The framework-neutral core is
:class:`GovernedCall`; :mod:`cra_client.integrations.openai_agents` adapts it to the OpenAI
Agents SDK and :mod:`cra_client.integrations.langchain` to LangChain."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from ..client import Client
from ..models import Json

#: What a call does when its action waits for a human: answer the model that it waits
#: (``report``), or wait for the decision and run the call once granted (``wait``).
OnPending = Literal["report", "wait"]


@dataclass
class GovernedCall:
    """Runs ``action_id`` of a resolution for a tool call and answers the text the model reads."""

    client: Client
    session_id: str
    resolution_id: str
    action_id: str
    approval_id: str | None = None
    """The resolution's ``decision.approval_id``: a gated call's approval opens under it."""
    on_pending: OnPending = "report"
    wait_seconds: float = 300.0

    @classmethod
    def of(cls, client: Client, session_id: str, resolution: Json, action_id: str, **options: Any) -> GovernedCall:
        """The call of ``action_id`` under ``resolution`` (which it must allow)."""
        offered_action(resolution, action_id)
        decision = resolution.get("decision") or {}
        approval_id = decision.get("approval_id")
        return cls(
            client,
            session_id,
            resolution["resolution_id"],
            action_id,
            approval_id if isinstance(approval_id, str) else None,
            **options,
        )

    def __call__(self, arguments: Json) -> str:
        return describe(self.action_id, self.answer(arguments))

    def answer(self, arguments: Json) -> Json:
        """cra's execute response to the call; in ``wait`` mode, the one after the decision
        (the call runs once granted, and a rejection reads as cra's refusal of it)."""
        answer = self.client.execute(self.session_id, self.resolution_id, self.action_id, arguments)
        waiting = answer.get("status") == "pending_approval"
        if waiting and self.on_pending == "wait" and self.approval_id is not None:
            decided = self.client.wait_for_decision(self.approval_id, seconds=self.wait_seconds)
            if decided.get("status") != "pending":
                answer = self.client.execute(
                    self.session_id, self.resolution_id, self.action_id, arguments
                )
        return answer


def describe(action_id: str, answer: Json) -> str:
    """The text a model reads for an execute response: the result on success, else what cra
    decided (token and message) so the model can tell a refusal from a failure."""
    status = answer.get("status")
    if status == "success":
        return json.dumps(answer.get("result"), sort_keys=True)
    error: dict[str, Any] = answer.get("error") or {}
    code = error.get("code", status)
    message = error.get("message", "")
    if status == "pending_approval":
        return f"{action_id} waits for a human's approval ({code}): {message}"
    return f"cra refused or failed {action_id} ({status}, {code}): {message}"


def tool_name(action_id: str) -> str:
    """An action id as a tool name frameworks accept (letters, digits, ``_`` and ``-``)."""
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in action_id)


def offered_action(resolution: Json, action_id: str) -> Json:
    """The allowed action ``action_id`` of ``resolution`` (its schema is the tool's)."""
    for action in resolution.get("allowed_actions", []):
        if action.get("action_id") == action_id:
            return dict(action)
    raise LookupError(f"the resolution does not allow {action_id}: resolve again or pick another")
