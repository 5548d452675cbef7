"""The README's Python block ("An agent in Python"), run as written against a live server
started as the README's walk-through starts it (an atlas from ``cra atlas init``, its data in
``cra-data/`` of the working directory); only the server's URL is replaced by the one it
listens on."""

from __future__ import annotations

import contextlib
import io
import os
import pathlib
import subprocess
import tempfile
import unittest

from test_live import cra_binary

README = pathlib.Path(__file__).resolve().parents[3] / "README.md"


def python_block(heading: str) -> str:
    text = README.read_text()
    rest = text[text.index(heading):]
    block = rest.split("```python\n", 1)[1]
    return block[: block.index("```")]


class Readme(unittest.TestCase):
    def test_the_python_block_executes_an_action_and_verifies_its_chain(self) -> None:
        cra = cra_binary()
        block = python_block("## An agent in Python")
        self.assertIn("http://127.0.0.1:8421", block)
        with tempfile.TemporaryDirectory() as work:
            subprocess.run(
                [cra, "atlas", "init", "my-atlas", "--id", "com.example.first"],
                cwd=work,
                check=True,
                capture_output=True,
            )
            server = subprocess.Popen(
                [cra, "serve", "--atlas", "my-atlas", "--data", "cra-data", "--addr", "127.0.0.1:0"],
                cwd=work,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            try:
                assert server.stdout is not None
                url = next(
                    line.split("listening on ", 1)[1].strip()
                    for line in server.stdout
                    if "listening on " in line
                )
                printed = io.StringIO()
                here = os.getcwd()
                os.chdir(work)
                try:
                    with contextlib.redirect_stdout(printed):
                        exec(block.replace("http://127.0.0.1:8421", url), {})
                finally:
                    os.chdir(here)
            finally:
                server.terminate()
                server.communicate(timeout=30)
        self.assertEqual(printed.getvalue().split(), ["success", "None"])


if __name__ == "__main__":
    unittest.main()
