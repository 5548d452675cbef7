"""The transparency log through the client against a live server: every event of a session is
a leaf of a signed checkpoint, a later checkpoint extends it, and a changed proof byte, another
key or a changed checkpoint line fails."""

from __future__ import annotations

import base64
import dataclasses
import unittest

from cra_client.client import Client
from cra_client.log import LogError, VerifierKey, open_checkpoint, verify_inclusion
from test_live import LiveTest


class Log(LiveTest):
    def test_a_sessions_events_are_in_a_signed_checkpoint_that_later_ones_extend(self) -> None:
        cra = self.cra
        sid = cra.open_session("audited")["session_id"]
        cra.resolve(sid, "audited")
        key = self.operator.log_key()
        first = self.operator.checkpoint(key, cut=True)
        chain = cra.trace(sid)
        indexes = [cra.verify_in_log(event, first) for event in chain]
        self.assertEqual(len(set(indexes)), len(chain))

        cra.resolve(sid, "again")
        second = self.operator.checkpoint(key, cut=True)
        self.assertGreater(second.size, first.size)
        cra.verify_extends(first, second)

        # Tampering, each caught.
        event = chain[-1]
        proof = cra.request(
            "GET",
            "/v1/log/proof/inclusion",
            query={"event_hash": event["event_hash"], "tree_size": str(second.size)},
        )
        hashes = [bytes.fromhex(h) for h in proof["hashes"]]
        data = bytes.fromhex(event["event_hash"])
        verify_inclusion(data, proof["leaf_index"], second.size, hashes, second.root)
        flipped = [bytes([hashes[0][0] ^ 1]) + hashes[0][1:], *hashes[1:]]
        with self.assertRaises(LogError):
            verify_inclusion(data, proof["leaf_index"], second.size, flipped, second.root)
        rewritten = dataclasses.replace(second, root=bytes([second.root[0] ^ 1]) + second.root[1:])
        with self.assertRaises(LogError):
            cra.verify_extends(first, rewritten)

        note = self.operator.request("GET", "/v1/log/checkpoint")
        origin, size, rest = note.split("\n", 2)
        with self.assertRaises(LogError):
            open_checkpoint(f"{origin}\n{int(size) + 1}\n{rest}", key)
        other = VerifierKey(key.name, key.key_id, base64.b64decode("A" * 43 + "="))
        with self.assertRaises(LogError):
            open_checkpoint(note, other)

    def test_a_verifier_key_with_a_wrong_id_is_refused(self) -> None:
        text = Client(self.server.url, self.server.agent_token).request("GET", "/v1/log/key")
        name, key_id, key = text.strip().split("+", 2)
        wrong = f"{name}+{'00000000' if key_id != '00000000' else '11111111'}+{key}"
        with self.assertRaises(LogError):
            VerifierKey.parse(wrong)


if __name__ == "__main__":
    unittest.main()
