"""cra's approval webhooks, verified by a Standard Webhooks library we did not write.

A live ``cra serve`` (``CRA_BIN``) is configured with a webhook pointing at a receiver in this
process; an approval that opens and is granted reaches it twice, and ``standardwebhooks``
(the reference Python implementation of the Standard Webhooks specification) verifies each
signature over the exact bytes received, and refuses the same body once changed.
"""

from __future__ import annotations

import base64
import http.server
import json
import pathlib
import queue
import tempfile
import threading
import unittest
from typing import Any

import standardwebhooks

from cra_client import Client
from test_live import LiveServer

SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()


class Receiver:
    """An HTTP server on loopback that queues every POST it gets (headers, body)."""

    def __init__(self) -> None:
        self.posts: queue.Queue[tuple[dict[str, str], bytes]] = queue.Queue()
        posts = self.posts

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the standard library's name)
                body = self.rfile.read(int(self.headers["content-length"]))
                posts.put(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def next(self) -> tuple[dict[str, str], bytes]:
        return self.posts.get(timeout=30)

    def close(self) -> None:
        self.server.shutdown()


class Webhooks(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.TemporaryDirectory()
        root = pathlib.Path(self.dir.name)
        self.receiver = Receiver()
        config = root / "cra.toml"
        config.write_text(
            "[[notifications.webhooks]]\n"
            f'url = "{self.receiver.url}"\n'
            f'secret = "{SECRET}"\n'
        )
        self.server = LiveServer(root, ("--config", str(config)))
        self.cra = Client(self.server.url, self.server.agent_token, agent_id="agent-7")
        self.operator = Client(self.server.url, self.server.operator_token)

    def tearDown(self) -> None:
        self.server.stop()
        self.receiver.close()
        self.dir.cleanup()

    def verified(self) -> dict[str, Any]:
        headers, body = self.receiver.next()
        hook = standardwebhooks.Webhook(SECRET)
        payload = hook.verify(body, headers)
        changed = body.replace(b"approval", b"APPROVAL", 1)
        with self.assertRaises(standardwebhooks.WebhookVerificationError):
            hook.verify(changed, headers)
        self.assertEqual(payload, json.loads(body))
        return dict(payload)

    def test_an_opened_and_a_granted_approval_are_signed_as_standard_webhooks_sign(self) -> None:
        sid = self.cra.open_session("say hello")["session_id"]
        resolution = self.cra.resolve(sid, "say hello")
        approval_id = resolution["decision"]["approval_id"]
        pending = self.cra.execute(sid, resolution["resolution_id"], "example.echo",
                                   {"message": "hello"})
        self.assertEqual(pending["status"], "pending_approval", pending)

        opened = self.verified()
        self.assertEqual(opened["type"], "approval.requested")
        self.assertEqual(opened["data"]["approval_id"], approval_id)
        self.assertEqual(opened["data"]["session_id"], sid)

        self.operator.decide(approval_id, "grant", note="fine")
        granted = self.verified()
        self.assertEqual(granted["type"], "approval.granted")
        self.assertEqual(granted["data"]["event"]["payload"]["note"], "fine")


if __name__ == "__main__":
    unittest.main()
