"""The README's tour is real: its first policy and its `zc legal` session are replayed exactly
(tests/test_docs.py runs every other block of the README and the docs)."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from zcompile.cli import main

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text()


def test_readme_session_matches(tmp_path, monkeypatch):
    src = re.search(r"```zc\n(policy support_desk\n.*?)```", README, re.S).group(1)
    session = re.search(r"```sh\n(\$ zc compile.*?)```", README, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    Path("support.zc").write_text(src)
    runner = CliRunner()
    commands = re.findall(r"^\$ (.*)$", session, re.M)
    outputs = re.split(r"^\$ .*\n", session, flags=re.M)[1:]
    assert len(commands) == 2
    for command, expected in zip(commands, outputs):
        stdin = None
        if "|" in command:
            echo, command = command.split("|", 1)
            stdin = re.search(r"'(.*)'", echo).group(1)
        args = command.split()[1:]
        res = runner.invoke(main, args, input=stdin)
        assert res.exit_code == 0, res.output
        assert res.output == expected


def test_readme_is_a_front_door():
    """At most ~300 lines, the two commands kept exactly, and every docs page it links exists."""
    assert len(README.splitlines()) <= 300
    assert "make demo   #" in README and "make test   #" in README
    links = re.findall(r"\]\((docs/[^)#]+)", README)
    assert links and all((ROOT / link).exists() for link in links), links


def test_readme_figures_match_benchmarks():
    """The figures the README quotes at a glance are those of BENCHMARKS.md."""
    bench = (ROOT / "BENCHMARKS.md").read_text()
    for figure in ("| 0.017 |", "| 0.0013 |", "| 0.00016 |", "| 0.0073 |", "| 0.29 |", "| 0.043 |",
                   "| 0.27 |", "| 5.7 |", "| 6.6 |", "| 5.5 |",
                   "| 0.71 |", "| 0.77 |", "376×", "measured 59 µs", "measured 142 µs",
                   "0.904 [0.794, 0.958]", "0.615 [0.480, 0.735]", "0.231 [0.137, 0.361]", "| 0.147 |"):
        assert figure in bench, figure
        assert figure.strip("| ").removeprefix("measured ").removesuffix("×") in README, figure
    # the ONNX / scikit-learn ratio of one model call: a sentence there, a table cell here
    assert "predict_proba`: 0.031 (p50)" in bench and "| 0.031 |" in README
