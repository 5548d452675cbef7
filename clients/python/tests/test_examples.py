"""The integration examples (``examples/``), run as a user runs them against a server started
as the README's walk-through starts it (an atlas from ``cra atlas init``, whose echo needs no
approval, and its first-start admin key): each runs its framework's own agent loop offline,
the governed call executes, and the session's chain verifies."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import tempfile
import unittest

from test_live import cra_binary

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


class Examples(unittest.TestCase):
    def setUp(self) -> None:
        cra = cra_binary()
        self.dir = tempfile.TemporaryDirectory()
        work = self.dir.name
        init = [cra, "atlas", "init", "my-atlas", "--id", "com.example.first"]
        subprocess.run(init, cwd=work, check=True, capture_output=True)
        self.server = subprocess.Popen(
            [cra, "serve", "--atlas", "my-atlas", "--data", "cra-data", "--addr", "127.0.0.1:0"],
            cwd=work,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.server.stdout is not None
        lines = self.server.stdout
        said = next(line for line in lines if "listening on " in line)
        self.url = said.split("listening on ", 1)[1].strip()
        keys = (pathlib.Path(work) / "cra-data" / "api-keys.toml").read_text()
        match = re.search(r'token = "([^"]+)"', keys)
        assert match is not None
        self.token = match[1]

    def tearDown(self) -> None:
        self.server.terminate()
        self.server.communicate(timeout=30)
        self.dir.cleanup()

    def run_example(self, name: str) -> list[str]:
        env = {**os.environ, "CRA_URL": self.url, "CRA_TOKEN": self.token}
        example = [sys.executable, str(EXAMPLES / name)]
        done = subprocess.run(example, env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 0, done.stderr)
        return done.stdout.splitlines()

    def check(self, lines: list[str]) -> None:
        self.assertEqual(lines[0], "agent: I echoed it.")
        events = lines[1].split()
        self.assertIn("action.executed", events)
        self.assertEqual(events[-1], "session.ended")
        self.assertEqual(lines[2], "chain verifies: True")

    def test_the_openai_agents_example(self) -> None:
        self.check(self.run_example("openai_agents_echo.py"))

    def test_the_langchain_example(self) -> None:
        self.check(self.run_example("langchain_echo.py"))


if __name__ == "__main__":
    unittest.main()
