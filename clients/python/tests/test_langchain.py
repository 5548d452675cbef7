"""LangChain's own agent loop (``create_agent`` of LangChain v1) with its fake chat model,
offline, calling a governed tool: the first run's call waits for approval and the model reads
so; an operator grants; the second run's same call executes and the model reads its result; in
``wait`` mode one run waits for the operator and the call runs once (or, rejected, reads
cra's refusal); a rejected call, and one
in a session that has ended, reach the model as tool errors with their tokens; the session's
chain records it all and verifies."""

from __future__ import annotations

import unittest
from collections.abc import Callable, Sequence
from typing import Any

from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import LanguageModelInput
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from pydantic import Field

from cra_client import verify_chain
from cra_client.integrations.langchain import governed_tools
from test_live import LiveTest


class ScriptedChat(GenericFakeChatModel):
    """LangChain's fake chat model answering its script in turn and keeping what it was given;
    it takes tools as a model that calls them does (the script makes the calls)."""

    given: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.given.append(list(messages))
        return super()._generate(messages, stop, run_manager, **kwargs)


def script(message: str) -> ScriptedChat:
    """A model that calls ``example_echo`` with ``message``, then answers ``done``."""
    call = {"name": "example_echo", "args": {"message": message}, "id": "call-1"}
    return ScriptedChat(messages=iter([AIMessage("", tool_calls=[call]), AIMessage("done")]))


def run(model: ScriptedChat, tools: list[BaseTool], ask: str) -> ToolMessage:
    """Runs the agent to its end; answers the one tool message the model was given."""
    agent = create_agent(model, tools, system_prompt="Echo.")
    state = agent.invoke({"messages": [{"role": "user", "content": ask}]})
    assert state["messages"][-1].content == "done", state
    [given] = [m for m in model.given[-1] if isinstance(m, ToolMessage)]
    return given


class LangChain(LiveTest):
    def test_agent_calls_a_governed_tool_that_waits_then_runs(self) -> None:
        cra = self.cra
        sid = cra.open_session("echo through an agent")["session_id"]
        resolution = cra.resolve(sid, "echo through an agent")
        tools = governed_tools(cra, sid, resolution)
        self.assertEqual([t.name for t in tools], ["example_echo"])  # the action's id, as a name
        self.assertIn("message", tools[0].args)  # the action's parameter schema

        waiting = run(script("hello"), tools, "say hello")
        self.assertIn("waits for a human's approval (approval_pending)", str(waiting.content))
        self.assertEqual(waiting.status, "success")  # news for the model, not a failure

        self.operator.decide(resolution["decision"]["approval_id"], "grant")
        ran = run(script("hello"), tools, "say hello")
        self.assertIn('"hello"', str(ran.content))
        self.assertEqual((ran.status, ran.tool_call_id), ("success", "call-1"))

        chain = cra.trace(sid)
        types = [e["event_type"] for e in chain]
        self.assertIn("action.pending_approval", types)
        self.assertEqual(types.count("action.executed"), 1)
        self.assertIsNone(verify_chain(chain))

    def test_a_waiting_tool_runs_once_an_operator_grants(self) -> None:
        cra = self.cra
        sid = cra.open_session("echo once granted")["session_id"]
        resolution = cra.resolve(sid, "echo once granted")
        approval_id = resolution["decision"]["approval_id"]

        operator = self.decide_when_asked(sid, "grant")
        tools = governed_tools(cra, sid, resolution, on_pending="wait", wait_seconds=20)
        ran = run(script("later"), tools, "say later")
        operator.join(timeout=20)
        self.assertIn('"later"', str(ran.content))
        self.assertEqual(ran.status, "success")
        self.assertEqual(self.operator.approval(approval_id)["status"], "granted")
        chain = cra.trace(sid)
        self.assertEqual([e["event_type"] for e in chain].count("action.executed"), 1)
        self.assertIsNone(verify_chain(chain))

    def test_a_waiting_tool_that_an_operator_rejects_is_a_tool_error(self) -> None:
        cra = self.cra
        sid = cra.open_session("echo, then rejected")["session_id"]
        resolution = cra.resolve(sid, "echo, then rejected")

        operator = self.decide_when_asked(sid, "reject")
        tools = governed_tools(cra, sid, resolution, on_pending="wait", wait_seconds=20)
        refused = run(script("never"), tools, "say never")
        operator.join(timeout=20)
        self.assertEqual(refused.status, "error")
        self.assertIn("(denied, approval_rejected)", str(refused.content))
        chain = cra.trace(sid)
        self.assertNotIn("action.executed", [e["event_type"] for e in chain])
        self.assertIsNone(verify_chain(chain))

    def test_a_rejected_call_reaches_the_model_as_a_tool_error_with_its_token(self) -> None:
        cra = self.cra
        sid = cra.open_session("echo refused")["session_id"]
        resolution = cra.resolve(sid, "echo refused")
        tools = governed_tools(cra, sid, resolution)
        run(script("no"), tools, "say no")  # asks for the approval
        self.operator.decide(resolution["decision"]["approval_id"], "reject")

        refused = run(script("no"), tools, "say no")
        self.assertEqual(refused.status, "error")
        self.assertIn("cra refused or failed example.echo (denied, approval_rejected)",
                      str(refused.content))
        chain = cra.trace(sid)
        types = [e["event_type"] for e in chain]
        self.assertIn("action.denied", types)
        self.assertNotIn("action.executed", types)
        self.assertIsNone(verify_chain(chain))

        # A request the server does not admit (a CraError) is a tool error too.
        cra.end_session(sid)
        ended = run(script("no"), tools, "say no")
        self.assertEqual(ended.status, "error")
        self.assertIn("cra refused example.echo (403, session_inactive)", str(ended.content))


if __name__ == "__main__":
    unittest.main()
