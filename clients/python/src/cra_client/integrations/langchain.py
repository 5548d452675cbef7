"""Governed tools for LangChain (``pip install langchain``; the tools need only
``langchain-core``).

:func:`governed_tools` turns the allowed actions of a cra resolution into ``StructuredTool``\\ s:
the model sees each action's name, description and parameter schema; each call it makes is a
CARP execute. A result is the tool's output; a refusal or a failure (cra's token and message)
is a ``ToolException`` the tool hands back as its error message (``status="error"``), so the
agent goes on and the model reads why; a pending approval is an output that says a human must
approve (``on_pending="wait"`` waits for the decision and runs the call once granted).
``create_agent(model, governed_tools(...))`` of ``langchain.agents`` runs them in LangChain's
own agent loop (the README shows it whole).
"""

from __future__ import annotations

from typing import Any

from langchain_core.tools import BaseTool, StructuredTool, ToolException

from ..client import Client
from ..errors import CraError
from ..models import Json
from . import GovernedCall, OnPending, describe, offered_action, tool_name

#: The statuses the model reads as the tool's output; any other is a tool error.
ANSWERED = ("success", "pending_approval")


def governed_tool(
    client: Client,
    session_id: str,
    resolution: Json,
    action_id: str,
    *,
    on_pending: OnPending = "report",
    wait_seconds: float = 300.0,
) -> StructuredTool:
    """One allowed action of ``resolution`` as a tool."""
    action = offered_action(resolution, action_id)
    call = GovernedCall.of(
        client, session_id, resolution, action_id, on_pending=on_pending, wait_seconds=wait_seconds
    )

    def invoke(**arguments: Any) -> str:
        try:
            answer = call.answer(arguments)
        except CraError as refused:
            raise ToolException(
                f"cra refused {action_id} ({refused.status}, {refused.token}): {refused.message}"
            ) from refused
        if answer.get("status") not in ANSWERED:
            raise ToolException(describe(action_id, answer))
        return describe(action_id, answer)

    return StructuredTool(
        name=tool_name(action_id),
        description=str(action.get("description") or action.get("name") or action_id),
        args_schema=dict(action.get("parameters_schema") or {"type": "object"}),
        func=invoke,
        handle_tool_error=True,
    )


def governed_tools(
    client: Client, session_id: str, resolution: Json, **options: Any
) -> list[BaseTool]:
    """Every allowed action of ``resolution`` as a tool (what ``create_agent(model, tools)`` and
    ``model.bind_tools`` take)."""
    return [
        governed_tool(client, session_id, resolution, a["action_id"], **options)
        for a in resolution.get("allowed_actions", [])
    ]
