"""Relay through the client against a live server: a project, a deposit pulled back, the
orientation bundle, and a fact asserted, superseded, read as of a past time, and invalidated."""

from __future__ import annotations

import unittest

from cra_client import CraError
from test_live import LiveTest


class Relay(LiveTest):
    def test_deposit_pull_orient_and_facts_as_of(self) -> None:
        cra = self.cra
        cra.create_project("proj_pyclient", "Python client")
        deposited = cra.deposit(
            "proj_pyclient",
            "Shipped the client",
            handoff_note="streams resume",
            open_questions=["async?"],
        )
        self.assertTrue(deposited["content_hash"].startswith("sha256:"), deposited)
        pulled = cra.pull("proj_pyclient")["packages"]
        self.assertEqual([p["package_id"] for p in pulled], [deposited["package_id"]])
        relevant = cra.pull("proj_pyclient", mode="relevant", query="streams")
        self.assertEqual(relevant["matches"][0]["package_id"], deposited["package_id"])
        bundle = cra.orient("proj_pyclient")
        self.assertIn("async?", bundle["open_questions"])

        first = cra.assert_fact("proj_pyclient", "client", "language", "python")
        cra.assert_fact("proj_pyclient", "client", "language", "python and typescript")
        now = cra.facts("proj_pyclient", "client", "language")
        self.assertEqual([f["value"] for f in now], ["python and typescript"])
        then = cra.facts("proj_pyclient", "client", "language", recorded_as_of=first["created_at"])
        self.assertEqual([f["value"] for f in then], ["python"])
        self.assertEqual(len(cra.facts("proj_pyclient", "client", "language", history=True)), 2)
        self.assertEqual(cra.invalidate_fact("proj_pyclient", "client", "language"), 1)
        self.assertEqual(cra.facts("proj_pyclient", "client", "language"), [])

        with self.assertRaises(CraError) as bad:
            cra.facts("proj_pyclient", "client", "language", as_of="yesterday")
        self.assertEqual((bad.exception.token, bad.exception.pointer), ("invalid_schema", "/as_of"))


if __name__ == "__main__":
    unittest.main()
