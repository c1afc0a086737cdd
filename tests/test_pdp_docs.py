"""docs/authzen.md's curl session, run against a live `zc pdp` (the page's policy and mapping),
every output compared byte for byte; and the page's copies of those files are the shipped ones."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from zcompile.authzen import PDP, create_app, load_mapping
from zcompile.cli.common import load_policy
from zcompile.gateway.server import Running

ROOT = Path(__file__).parents[1]
PAGE = ROOT / "docs" / "authzen.md"
DOCS_ORIGIN = "http://127.0.0.1:8089"


def session(text: str) -> list[tuple[str, str]]:
    """(command, expected output) of every `$ curl` of the page's sh blocks. A command goes on over
    lines ending in `\\` and while a quote is open (the JSON bodies span lines)."""
    out = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            if not lines[i].startswith("$ "):
                i += 1
                continue
            command = lines[i][2:]
            while command.endswith("\\") or command.count("'") % 2:
                i += 1
                command = (command[:-1] if command.endswith("\\") else command + "\n") + lines[i].strip()
            i += 1
            expected = []
            while i < len(lines) and not lines[i].startswith("$ "):
                expected.append(lines[i])
                i += 1
            out.append((command, "".join(x + "\n" for x in expected)))
    return out


def test_the_page_shows_the_shipped_files():
    text = PAGE.read_text()
    for name in ("desk.zc", "desk.mapping.yaml"):
        shown = re.search(rf"<!-- test: file examples/authzen/{re.escape(name)} -->\n```\w+\n(.*?)```", text,
                          re.S)
        assert shown and shown.group(1) == (ROOT / "examples" / "authzen" / name).read_text(), name


@pytest.mark.skipif(shutil.which("curl") is None, reason="the session is a curl session")
def test_curl_session(monkeypatch):
    monkeypatch.chdir(ROOT)  # the policy's spans name the file as the page's server loaded it
    policy = load_policy("examples/authzen/desk.zc")
    pdp = PDP(policy, load_mapping("examples/authzen/desk.mapping.yaml", policy))
    commands = session(PAGE.read_text())
    assert len(commands) == 8 and all(c.startswith("curl ") for c, _ in commands)
    with Running(create_app(pdp)) as srv:
        for command, expected in commands:
            line = command.replace(DOCS_ORIGIN, srv.origin).replace("| python ", f"| {sys.executable} ")
            run = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=60)
            assert run.returncode == 0, (command, run.stderr)
            assert run.stdout == expected.replace(DOCS_ORIGIN, srv.origin), command
