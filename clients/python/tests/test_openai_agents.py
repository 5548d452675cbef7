"""The OpenAI Agents SDK's own loop (``Runner.run``) with its scripted model, offline, calling
a governed tool: the first run's call waits for approval and the model reads so; an operator
grants; the second run's same call executes; the session's chain records both and verifies."""

from __future__ import annotations

import unittest

from agents import Agent, Runner, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from cra_client import verify_chain
from cra_client.integrations.openai_agents import governed_tools
from test_live import LiveTest


def tool_outputs(model: ScriptedModel) -> list[str]:
    """The tool outputs the model was given, in order."""
    found: list[str] = []
    for call in model.calls:
        items = call.input if isinstance(call.input, list) else []
        for item in items:
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                found.append(str(item.get("output")))
    return found


# Offline: the SDK exports no traces of its own.
set_tracing_disabled(True)


class OpenAIAgents(LiveTest, unittest.IsolatedAsyncioTestCase):
    async def test_runner_calls_a_governed_tool_that_waits_then_runs(self) -> None:
        cra = self.cra
        sid = cra.open_session("echo through an agent")["session_id"]
        resolution = cra.resolve(sid, "echo through an agent")
        tools = governed_tools(cra, sid, resolution)
        self.assertEqual([t.name for t in tools], ["example_echo"])  # the action's id, as a name

        def script() -> ScriptedModel:
            return ScriptedModel(
                [
                    [function_call("example_echo", {"message": "hello"}, call_id="call-1")],
                    [assistant_message("done")],
                ]
            )

        first = script()
        agent = Agent(name="echoer", instructions="Echo.", model=first, tools=tools)
        result = await Runner.run(agent, "say hello")
        self.assertEqual(result.final_output, "done")
        [waiting] = tool_outputs(first)
        self.assertIn("waits for a human's approval (approval_pending)", waiting)

        approval_id = resolution["decision"]["approval_id"]
        self.operator.decide(approval_id, "grant")
        second = script()
        agent = Agent(name="echoer", instructions="Echo.", model=second, tools=tools)
        result = await Runner.run(agent, "say hello")
        [ran] = tool_outputs(second)
        self.assertIn('"hello"', ran)

        chain = cra.trace(sid)
        types = [e["event_type"] for e in chain]
        self.assertIn("action.pending_approval", types)
        self.assertIn("action.executed", types)
        self.assertIsNone(verify_chain(chain))


    async def test_a_waiting_tool_runs_once_an_operator_grants(self) -> None:
        cra = self.cra
        sid = cra.open_session("echo once granted")["session_id"]
        resolution = cra.resolve(sid, "echo once granted")
        approval_id = resolution["decision"]["approval_id"]

        operator = self.decide_when_asked(sid, "grant")
        model = ScriptedModel(
            [
                [function_call("example_echo", {"message": "later"}, call_id="call-1")],
                [assistant_message("done")],
            ]
        )
        tools = governed_tools(cra, sid, resolution, on_pending="wait", wait_seconds=20)
        agent = Agent(name="echoer", instructions="Echo.", model=model, tools=tools)
        await Runner.run(agent, "say later")
        operator.join(timeout=20)
        [ran] = tool_outputs(model)
        self.assertIn('"later"', ran)
        self.assertEqual(self.operator.approval(approval_id)["status"], "granted")


if __name__ == "__main__":
    unittest.main()
