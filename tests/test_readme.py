"""The README's examples are real: its first policy and its `zc legal` session are replayed."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

import zcompile
from zcompile.cli import main

README = (Path(__file__).parents[1] / "README.md").read_text()


def test_readme_session_matches(tmp_path, monkeypatch):
    src = re.search(r"```\n(policy support_desk\n.*?)```", README, re.S).group(1)
    session = re.search(r"```sh\n(\$ zc compile.*?)```", README, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    Path("support.zc").write_text(src)
    runner = CliRunner()
    commands = re.findall(r"^\$ (.*)$", session, re.M)
    outputs = re.split(r"^\$ .*\n", session, flags=re.M)[1:]
    for command, expected in zip(commands, outputs):
        stdin = None
        if "|" in command:
            echo, command = command.split("|", 1)
            stdin = re.search(r"'(.*)'", echo).group(1)
        args = command.split()[1:]
        res = runner.invoke(main, args, input=stdin)
        assert res.exit_code == 0, res.output
        assert res.output == expected


def test_readme_language_snippets_compile():
    """Every state/rule snippet of the language reference compiles inside a small policy."""
    state = re.search(r"### State\n\n```\n(state \{.*?\n\})\n```", README, re.S).group(1)
    policy = zcompile.compile_text(
        "policy snippet\n" + state + "\naction cancel_order\naction escalate\nfallback escalate\n"
        "rule r: cancel_order requires user.verified and order.status == pending\n")
    assert policy.legal({"user": {"role": "admin", "verified": True}}).actions == ("escalate",)
