"""The log's checks without a server: a verifier key whose base64 holds ``+`` (the separator),
and a note signed here and changed."""

from __future__ import annotations

import base64
import hashlib
import unittest

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from cra_client.log import LogError, VerifierKey, open_checkpoint


def key_with_a_plus() -> tuple[Ed25519PrivateKey, str]:
    """A signer (fixed seeds, first that fits) whose verifier key's base64 contains ``+``."""
    for seed in range(256):
        signer = Ed25519PrivateKey.from_private_bytes(bytes([seed]) * 32)
        raw = b"\x01" + signer.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        encoded = base64.b64encode(raw).decode()
        if "+" in encoded:
            key_id = hashlib.sha256(b"example.com/log\n" + raw).digest()[:4]
            return signer, f"example.com/log+{key_id.hex()}+{encoded}"
    raise AssertionError("no seed gave a + in the key")


class Offline(unittest.TestCase):
    def test_a_key_with_a_plus_in_its_base64_parses_and_opens_its_notes(self) -> None:
        signer, text = key_with_a_plus()
        key = VerifierKey.parse(text)
        root = bytes(range(32))
        body = f"example.com/log\n7\n{base64.b64encode(root).decode()}\n"
        signature = base64.b64encode(key.key_id + signer.sign(body.encode())).decode()
        note = f"{body}\n\u2014 example.com/log {signature}\n"
        checkpoint = open_checkpoint(note, key)
        self.assertEqual((checkpoint.size, checkpoint.root), (7, root))
        with self.assertRaises(LogError):
            open_checkpoint(note.replace("\n7\n", "\n8\n"), key)


if __name__ == "__main__":
    unittest.main()
