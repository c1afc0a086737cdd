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


def test_readme_action_arguments_snippet():
    """The snippet of "Action arguments" compiles, and behaves as the text around it says."""
    block = re.search(r"### Action arguments\n\n```\n(.*?)```", README, re.S).group(1)
    policy = zcompile.compile_text(
        "policy snippet\nstate { order.items: int = 0 }\n" + block + "action escalate\nfallback escalate\n")
    assert "add_bags" in policy.legal({}).actions  # argument rules are not evaluated by legal()
    v = policy.check({}, "add_bags", {"order_id": "#W1", "bags": 1})
    assert [r.rule for r in v.reasons] == []  # no rule reads `express` in the snippet
    v = policy.check({}, "add_bags", {"order_id": "#W1", "bags": 0})
    assert [r.rule for r in v.reasons] == ["add_only"]
    v = policy.check({}, "cancel_pending_order", {"order_id": "#W1", "reason": "no longer needed"})
    assert [r.kind for r in v.reasons] == ["schema", "requires"]  # the value is not a member: unknown
    assert not policy.check({}, "list_all_airports", {"x": 1}).allowed
    assert policy.check({}, "think", {"x": 1}).allowed
