"""The README's walk-through through the client, against a live ``cra serve`` this test starts.

``CRA_BIN`` names the ``cra`` binary (CI passes the one it built). The atlas is made with
``cra atlas init`` and given a policy that makes its one action wait for a human, so the walk
goes session, resolve, execute (pending), grant, execute (success), and the exported chain
verifies offline; then a changed byte fails it, and refusals arrive as ``CraError`` with
their tokens and pointers.
"""

from __future__ import annotations

import copy
import json
import os
import pathlib
import queue
import subprocess
import tempfile
import threading
import unittest
from typing import IO, Any, Literal

from cra_client import Client, CraError, verify_chain


def cra_binary() -> str:
    path = os.environ.get("CRA_BIN")
    if not path:
        raise unittest.SkipTest("set CRA_BIN to the cra binary to run the live tests")
    return path


class LiveServer:
    """``cra serve`` on loopback over a fresh data directory, with one atlas."""

    def __init__(self, root: pathlib.Path, extra: tuple[str, ...] = ()) -> None:
        cra = cra_binary()
        atlas = root / "atlas"
        subprocess.run(
            [cra, "atlas", "init", str(atlas), "--id", "com.example.pyclient"],
            check=True,
            capture_output=True,
        )
        gate = [
            {
                "policy_id": "approve-echo",
                "type": "require_approval",
                "description": "A human confirms every echo.",
                "actions": ["example.echo"],
            }
        ]
        (atlas / "policies" / "approve.json").write_text(json.dumps(gate))
        # An agent acts and an operator decides: nobody decides an approval they asked for.
        self.agent_token = "cra_test_agent_" + "a" * 40
        self.operator_token = "cra_test_operator_" + "b" * 40
        keys = root / "api-keys.toml"
        keys.write_text(
            "[[keys]]\n"
            f'token = "{self.agent_token}"\nactor_id = "agent-7"\nactor_type = "agent"\n'
            'roles = ["agent"]\n'
            "[[keys]]\n"
            f'token = "{self.operator_token}"\nactor_id = "ops"\nactor_type = "human"\n'
            'roles = ["operator"]\n'
        )
        self.args = [cra, "serve", "--data", str(root / "data"), "--atlas", str(atlas),
                     "--api-keys", str(keys), *extra]
        self.url = self.start("127.0.0.1:0")

    def start(self, addr: str) -> str:
        """Starts the server on ``addr``; answers its URL once it listens."""
        self.process = subprocess.Popen(
            [*self.args, "--addr", addr],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        out: IO[str] | None = self.process.stdout
        assert out is not None
        prefix = "cra serve: listening on "
        for line in out:
            if line.startswith(prefix):
                return line[len(prefix):].strip()
        raise AssertionError(f"cra serve stopped: {self.stop()}")

    def restart(self) -> None:
        """Stops the server and starts it again on the same port and data."""
        self.stop()
        url = self.start(self.url.split("://", 1)[1])
        assert url == self.url, (url, self.url)

    def stop(self) -> str:
        self.process.terminate()
        _, err = self.process.communicate(timeout=30)
        return err


class LiveTest(unittest.TestCase):
    """A fresh server per test, with an agent's client and an operator's."""

    def setUp(self) -> None:
        self.dir = tempfile.TemporaryDirectory()
        self.server = LiveServer(pathlib.Path(self.dir.name))
        self.cra = Client(self.server.url, self.server.agent_token, agent_id="agent-7")
        self.operator = Client(self.server.url, self.server.operator_token)

    def tearDown(self) -> None:
        self.server.stop()
        self.dir.cleanup()

    def decide_when_asked(
        self, session_id: str, decision: Literal["grant", "reject"]
    ) -> threading.Thread:
        """An operator, on a thread already following the session's stream, who decides the
        first approval asked for (join the thread when the call is done)."""

        def decide() -> None:
            for event in self.operator.stream(session_id, event_type="approval.requested"):
                self.operator.decide(event["payload"]["approval_id"], decision)
                return

        operator = threading.Thread(target=decide, daemon=True)
        operator.start()
        return operator


class WalkThrough(LiveTest):
    def test_session_resolve_approval_execute_and_a_chain_that_verifies(self) -> None:
        cra = self.cra
        self.assertEqual(cra.health()["status"], "ok")
        session = cra.open_session("say hello")
        sid = session["session_id"]
        resolution = cra.resolve(sid, "say hello")
        self.assertEqual(resolution["decision"]["type"], "requires_approval")
        approval_id = resolution["decision"]["approval_id"]

        call: dict[str, Any] = {"message": "hello"}
        pending = cra.execute(sid, resolution["resolution_id"], "example.echo", call)
        self.assertEqual(pending["status"], "pending_approval", pending)
        self.assertEqual(pending["error"]["code"], "approval_pending")
        listed = [a["approval_id"] for a in self.operator.approvals()]
        self.assertIn(approval_id, listed)

        self.operator.decide(approval_id, "grant", note="fine")
        decided = cra.wait_for_decision(approval_id, seconds=10)
        self.assertEqual(decided["status"], "granted")
        done = cra.execute(sid, resolution["resolution_id"], "example.echo", call)
        self.assertEqual(done["status"], "success", done)

        cra.end_session(sid)
        chain = cra.trace(sid)
        self.assertGreater(len(chain), 5)
        self.assertIsNone(verify_chain(chain))
        self.assertEqual(chain[-1]["event_type"], "session.ended")

        changed = copy.deepcopy(chain)
        changed[2]["payload"]["x"] = 1
        finding = verify_chain(changed)
        assert finding is not None
        self.assertEqual((finding.index, finding.code), (2, "hash_mismatch"))
        self.assertEqual(verify_chain(chain[1:]).code, "sequence_gap")  # type: ignore[union-attr]

    def test_refusals_are_exceptions_with_tokens_and_pointers(self) -> None:
        with self.assertRaises(CraError) as bad:
            self.cra.request("POST", "/v1/sessions", {"agent_id": "agent-7"})
        self.assertEqual((bad.exception.status, bad.exception.token), (400, "invalid_request"))
        self.assertIn("/goal", bad.exception.pointers)

        stranger = Client(self.server.url, "not-a-key", agent_id="agent-7")
        with self.assertRaises(CraError) as denied:
            stranger.open_session("anything")
        self.assertEqual((denied.exception.status, denied.exception.token), (401, "unauthenticated"))

        with self.assertRaises(CraError) as missing:
            self.cra.session("0190a000-0000-7000-8000-00000000dead")
        self.assertEqual(missing.exception.status, 404)


class Streams(LiveTest):
    def test_a_stream_resumes_after_the_server_restarts_with_every_event_once(self) -> None:
        cra = self.cra
        sid = cra.open_session("watch me")["session_id"]
        cra.resolve(sid, "first")
        received: queue.Queue[dict[str, Any] | BaseException | None] = queue.Queue()

        def read() -> None:
            try:
                for event in cra.stream(sid):
                    received.put(event)
                received.put(None)
            except BaseException as failed:  # reported to the test thread
                received.put(failed)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        seen: list[dict[str, Any]] = []

        def take(count: int) -> None:
            while len(seen) < count:
                item = received.get(timeout=20)
                if isinstance(item, BaseException):
                    raise item
                assert item is not None, "the stream ended early"
                seen.append(item)

        take(len(cra.trace(sid)))
        self.server.restart()
        cra.resolve(sid, "second")
        cra.end_session(sid)
        chain = cra.trace(sid)
        take(len(chain))
        self.assertIsNone(received.get(timeout=20), "the stream ends after session.ended")
        reader.join(timeout=20)
        self.assertEqual([e["sequence"] for e in seen], list(range(len(chain))))
        self.assertEqual(seen, chain)


if __name__ == "__main__":
    unittest.main()
