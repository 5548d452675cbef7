"""A LangChain agent (``create_agent``) whose tools are governed by cra, run offline.

LangChain's own agent loop drives its fake chat model scripted to call the atlas's
``example.echo``; each call is a CARP execute, so cra's policies decide it and the session's
chain records it. Swap the fake model for a real chat model to run it online. Needs a server
and an agent key::

    CRA_URL=http://127.0.0.1:8421 CRA_TOKEN=... python examples/langchain_echo.py
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import LanguageModelInput
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool

from cra_client import Client, verify_chain
from cra_client.integrations.langchain import governed_tools


class ScriptedChat(GenericFakeChatModel):
    """LangChain's fake chat model, taking tools as a model that calls them does."""

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self


def main() -> None:
    agent_id = os.environ.get("CRA_AGENT", "admin")
    cra = Client(os.environ["CRA_URL"], os.environ["CRA_TOKEN"], agent_id=agent_id)
    session = cra.open_session("echo through a LangChain agent")["session_id"]
    tools = governed_tools(cra, session, cra.resolve(session, "echo through a LangChain agent"))
    call = {"name": "example_echo", "args": {"message": "hello from the agent"}, "id": "call-1"}
    script = [AIMessage("", tool_calls=[call]), AIMessage("I echoed it.")]
    model = ScriptedChat(messages=iter(script))
    agent = create_agent(model, tools, system_prompt="Echo what you are asked to.")
    state = agent.invoke({"messages": [{"role": "user", "content": "echo 'hello from the agent'"}]})
    cra.end_session(session)
    chain = cra.trace(session)
    print("agent:", state["messages"][-1].content)
    print("events:", " ".join(event["event_type"] for event in chain))
    print("chain verifies:", verify_chain(chain) is None)


if __name__ == "__main__":
    main()
