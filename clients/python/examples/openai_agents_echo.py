"""An OpenAI Agents SDK agent whose tools are governed by cra, run offline.

The SDK's own loop (``Runner.run``) drives a scripted model (``agents.testing.ScriptedModel``)
that calls the atlas's ``example.echo``; each call is a CARP execute, so cra's policies decide
it and the session's chain records it. Swap the scripted model for a real one (``model=
"gpt-..."``) to run it online. Needs a server and an agent key::

    CRA_URL=http://127.0.0.1:8421 CRA_TOKEN=... python examples/openai_agents_echo.py
"""

from __future__ import annotations

import asyncio
import os

from agents import Agent, Runner, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from cra_client import Client, verify_chain
from cra_client.integrations.openai_agents import governed_tools


async def main() -> None:
    set_tracing_disabled(True)  # offline: the SDK sends no traces of its own
    agent_id = os.environ.get("CRA_AGENT", "admin")
    cra = Client(os.environ["CRA_URL"], os.environ["CRA_TOKEN"], agent_id=agent_id)
    session = cra.open_session("echo through an OpenAI agent")["session_id"]
    tools = governed_tools(cra, session, cra.resolve(session, "echo through an OpenAI agent"))
    model = ScriptedModel(
        [
            [function_call("example_echo", {"message": "hello from the agent"}, call_id="call-1")],
            [assistant_message("I echoed it.")],
        ]
    )
    instructions = "Echo what you are asked to."
    agent = Agent(name="echoer", instructions=instructions, model=model, tools=tools)
    result = await Runner.run(agent, "echo 'hello from the agent'")
    cra.end_session(session)
    chain = cra.trace(session)
    print("agent:", result.final_output)
    print("events:", " ".join(event["event_type"] for event in chain))
    print("chain verifies:", verify_chain(chain) is None)


if __name__ == "__main__":
    asyncio.run(main())
