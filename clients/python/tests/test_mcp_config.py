"""The Claude Code configuration (``clients/mcp/claude-code.mcp.json``) run as written, with
the official MCP Python SDK as the client: its command serves the atlas's actions as tools, a
call is decided and executed, and the session's chain exports and verifies."""

from __future__ import annotations

import asyncio
import json
import pathlib
import re
import subprocess
import tempfile
import unittest

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from cra_client import read_jsonl, verify_chain
from test_live import cra_binary

CONFIG = pathlib.Path(__file__).resolve().parents[2] / "mcp" / "claude-code.mcp.json"


class ClaudeCodeConfig(unittest.TestCase):
    def test_the_configured_server_governs_a_tool_call_and_records_it(self) -> None:
        cra = cra_binary()
        server = json.loads(CONFIG.read_text())["mcpServers"]["cra"]
        self.assertEqual((server["type"], server["command"]), ("stdio", "cra"))
        with tempfile.TemporaryDirectory() as work:
            root = pathlib.Path(work)
            subprocess.run(
                [cra, "atlas", "init", str(root / "atlas"), "--id", "com.example.claude"],
                check=True,
                capture_output=True,
            )
            places = {"./atlas": str(root / "atlas"), "./cra-data": str(root / "cra-data")}
            args = [places.get(a, a) for a in server["args"]]
            session_id, text = asyncio.run(call_echo(cra, args))
            self.assertIn("hello", text)
            exported = subprocess.run(
                [cra, "trace", "export", "--data", str(root / "cra-data"), "--session", session_id],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            chain = read_jsonl(exported)
            self.assertIn("action.executed", [e["event_type"] for e in chain])
            self.assertIsNone(verify_chain(chain))


async def call_echo(cra: str, args: list[str]) -> tuple[str, str]:
    """Lists the tools, calls the echo action; answers the session id and the call's text."""
    params = StdioServerParameters(command=cra, args=args)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            found = re.search(r"session ([0-9a-f-]{36})", init.instructions or "")
            assert found is not None, init.instructions
            names = [t.name for t in (await session.list_tools()).tools]
            echo = next(n for n in names if "echo" in n)
            result = await session.call_tool(echo, {"message": "hello"})
            assert not result.is_error, result
            text = " ".join(getattr(c, "text", "") for c in result.content)
            return found.group(1), text


if __name__ == "__main__":
    unittest.main()
