"""The asynchronous client against a live server: an allowed call and its stream."""

from __future__ import annotations

import json
import unittest

from cra_client import AsyncClient, verify_chain
from test_live import LiveTest


class Async(LiveTest, unittest.IsolatedAsyncioTestCase):
    async def test_resolve_execute_and_stream_as_coroutines(self) -> None:
        # The atlas gates example.echo: the pending answer is the governed outcome returned.
        cra = AsyncClient(self.server.url, self.server.agent_token, agent_id="agent-7")
        self.assertEqual((await cra.health())["status"], "ok")
        sid = (await cra.open_session("async"))["session_id"]
        resolution = await cra.resolve(sid, "async")
        answer = await cra.execute(sid, resolution["resolution_id"], "example.echo", {"message": "hi"})
        self.assertEqual(answer["status"], "pending_approval", json.dumps(answer))
        await cra.end_session(sid)
        streamed = [event async for event in cra.stream(sid)]
        self.assertEqual(streamed, await cra.trace(sid))
        self.assertIsNone(verify_chain(streamed))


if __name__ == "__main__":
    unittest.main()
