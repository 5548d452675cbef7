"""Governed tools for the OpenAI Agents SDK (``pip install openai-agents``).

:func:`governed_tools` turns the allowed actions of a cra resolution into ``FunctionTool``\\ s:
the model sees each action's name, description and parameter schema; each call it makes is a
CARP execute, and what cra answers (a result, a refusal with its token, a pending approval) is
what the model reads back.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agents import FunctionTool, RunContextWrapper, Tool

from ..client import Client
from ..models import Json
from . import GovernedCall, OnPending, offered_action, tool_name


def governed_tool(
    client: Client,
    session_id: str,
    resolution: Json,
    action_id: str,
    *,
    on_pending: OnPending = "report",
    wait_seconds: float = 300.0,
) -> FunctionTool:
    """One allowed action of ``resolution`` as a tool."""
    action = offered_action(resolution, action_id)
    call = GovernedCall.of(
        client, session_id, resolution, action_id, on_pending=on_pending, wait_seconds=wait_seconds
    )

    async def invoke(_context: RunContextWrapper[Any], arguments: str) -> str:
        parsed = json.loads(arguments) if arguments.strip() else {}
        return await asyncio.to_thread(call, parsed)

    return FunctionTool(
        name=tool_name(action_id),
        description=str(action.get("description") or action.get("name") or action_id),
        params_json_schema=dict(action.get("parameters_schema") or {"type": "object"}),
        on_invoke_tool=invoke,
        strict_json_schema=False,
    )


def governed_tools(
    client: Client, session_id: str, resolution: Json, **options: Any
) -> list[Tool]:
    """Every allowed action of ``resolution`` as a tool (the type ``Agent(tools=...)`` takes)."""
    return [
        governed_tool(client, session_id, resolution, a["action_id"], **options)
        for a in resolution.get("allowed_actions", [])
    ]
