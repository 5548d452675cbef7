"""The WebSocket client's own pieces, without a server."""

from __future__ import annotations

import unittest

from cra_client.stream import accept_for


class Handshake(unittest.TestCase):
    def test_the_accept_value_is_the_rfc_example(self) -> None:
        # RFC 6455 §1.3: this key's accept value.
        self.assertEqual(accept_for("dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")


if __name__ == "__main__":
    unittest.main()
