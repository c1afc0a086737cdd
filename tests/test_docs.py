"""The documentation site: `mkdocs build --strict` passes, and every code block of the docs and the
README runs or compiles (the markers are documented in docs/index.md, "How these pages are tested")."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from zcompile.cli import main

ROOT = Path(__file__).parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
# the pages, the README, and the repository files the pages include whole (`--8<-- "FILE"`)
PAGES = DOCS + [ROOT / "README.md"] + sorted({ROOT / f for p in DOCS
                                              for f in re.findall(r'^--8<-- "(.+)"$', p.read_text(), re.M)})
# what a block runs against: a copy of these, so that blocks may write (build/, specialists/…)
TREE = ("policies", "examples", "specialists", "receipts", "tests/golden")
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M
                   | re.S)
MARKER = re.compile(r"<!-- test: (?P<verb>skip|inside|file)\b(?P<arg>.*)-->\s*\Z", re.S)
NOT_CODE = {"text"}  # output shown, command synopses, grammar: documented as never run
LANGS = {"zc", "sh", "python", "json", "toml", "yaml"} | NOT_CODE


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    body: str
    verb: str | None  # skip, inside, file, or None
    arg: str

    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(path: Path) -> list[Block]:
    text = path.read_text()
    out = []
    for m in FENCE.finditer(text):
        before = text[: m.start()]
        marker = MARKER.match(before[before.rfind("<!--"):]) if before.rstrip().endswith("-->") else None
        indent = len(m["indent"])
        body = "".join(line[indent:] + "\n" for line in m["body"].splitlines())
        out.append(Block(path.relative_to(ROOT).as_posix(), before.count("\n") + 1, m["lang"], body,
                         marker["verb"] if marker else None, marker["arg"].strip() if marker else ""))
    return out


def test_every_block_says_what_it_is():
    bad = [f"{b.where()}: ```{b.lang}" for p in PAGES for b in blocks(p)
           if b.lang not in LANGS and b.verb != "skip" or b.verb == "skip" and not b.arg]
    assert not bad, "blocks without a known language (or a skip without its reason): " + ", ".join(bad)
    inside = [b.where() for p in PAGES for b in blocks(p) if b.verb == "inside" and b.lang != "zc"]
    assert not inside, f"`inside` completes zc fragments only: {inside}"
    files = [b.where() for p in PAGES for b in blocks(p) if b.verb == "file"
             and (not b.arg or b.lang in NOT_CODE)]
    assert not files, f"`file` needs a name and a block of code: {files}"


@pytest.fixture
def tree(tmp_path, monkeypatch):
    for name in TREE:
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _zc(args: list[str], stdin: str | None, where: str) -> str:
    res = CliRunner().invoke(main, args, input=stdin)
    assert res.exit_code == 0, f"{where}: zc {' '.join(args)} -> exit {res.exit_code}\n{res.output}"
    return res.output


def _command(line: str, where: str) -> str:
    """Run one shell command line of a block: `zc …` in process, `python …` in a child."""
    stdin = None
    if "|" in line:
        echo, line = (s.strip() for s in line.split("|", 1))
        stdin = shlex.split(echo)[1]
    argv = shlex.split(line)
    if argv[0] == "zc":
        return _zc(argv[1:], stdin, where)
    assert argv[0] == "python", f"{where}: a sh block runs `zc` and `python` only, not `{argv[0]}`"
    run = subprocess.run([sys.executable, *argv[1:]], input=stdin, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, f"{where}: {line}\n{run.stderr[-2000:]}"
    return run.stdout


def run_sh(b: Block) -> None:
    """`$ cmd` lines are a session (each output follows its command, compared exactly); other lines are
    commands run for their effect. `\\` continues a line; `#` starts a comment."""
    text = re.sub(r"\\\n\s*", " ", b.body)
    if text.lstrip().startswith("$ "):
        commands = re.findall(r"^\$ (.*)$", text, re.M)
        outputs = re.split(r"^\$ .*\n", text, flags=re.M)[1:]
        for command, expected in zip(commands, outputs):
            assert _command(command, b.where()) == expected, f"{b.where()}: output of `{command}`"
        return
    for line in text.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if line:
            _command(line, b.where())


def run_zc(b: Block, tmp: Path) -> None:
    source = (b.arg + "\n" if b.verb == "inside" else "") + b.body
    f = tmp / (b.arg if b.verb == "file" else f"block_{b.line}.zc")
    f.write_text(source)
    _zc(["check", str(f)], None, b.where())


def run_block(b: Block, namespace: dict, tmp: Path) -> None:
    if b.verb == "file":  # the block is a file the next blocks use: written, then checked as its language
        (tmp / b.arg).parent.mkdir(parents=True, exist_ok=True)
        (tmp / b.arg).write_text(b.body)
    if b.lang == "zc":
        run_zc(b, tmp)
    elif b.lang == "sh":
        run_sh(b)
    elif b.lang == "python":
        exec(compile(b.body, b.where(), "exec"), namespace)
    elif b.lang == "json":
        json.loads(b.body)
    elif b.lang == "toml":
        tomllib.loads(b.body)
    elif b.lang == "yaml":
        yaml.safe_load(b.body)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_code_blocks_run(page, tree):
    """A page's blocks run in order in one namespace, against a fresh copy of the repository's data."""
    namespace: dict = {"__name__": "__docs__"}
    for b in blocks(page):
        if b.verb == "skip" or b.lang in NOT_CODE:
            continue
        run_block(b, namespace, tree)


def test_mkdocs_build_strict(tmp_path):
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    assert mkdocs, "mkdocs is not installed beside this interpreter (the `docs` extra, part of `test`)"
    run = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert run.returncode == 0, run.stderr[-4000:]
    assert (tmp_path / "site" / "api" / "index.html").exists()


LANGUAGE = (ROOT / "docs" / "language.md").read_text()


def _section_block(heading: str) -> str:
    return re.search(rf"## {heading}\n\n(?:<!--.*?-->\n)?```zc\n(.*?)```", LANGUAGE, re.S).group(1)


def test_language_state_snippet_behaves_as_described():
    """The state block of the language reference: a required enum field missing leaves only the fallback."""
    import zcompile

    policy = zcompile.compile_text(
        "policy snippet\n" + _section_block("State") + "action cancel_order\naction escalate\nfallback "
                                                       "escalate\nrule r: cancel_order requires "
                                                       "user.verified and order.status == pending\n")
    assert policy.legal({"user": {"role": "admin", "verified": True}}).actions == ("escalate",)


def test_language_action_arguments_snippet_behaves_as_described():
    """The snippet of "Action arguments" behaves as the text around it says."""
    import zcompile

    policy = zcompile.compile_text("policy snippet\nstate { order.items: int = 0 }\n"
                                   + _section_block("Action arguments")
                                   + "action escalate\nfallback escalate\n")
    assert "add_bags" in policy.legal({}).actions  # argument rules are not evaluated by legal()
    v = policy.check({}, "add_bags", {"order_id": "#W1", "bags": 1})
    assert [r.rule for r in v.reasons] == []  # no rule reads `express` in the snippet
    v = policy.check({}, "add_bags", {"order_id": "#W1", "bags": 0})
    assert [r.rule for r in v.reasons] == ["add_only"]
    v = policy.check({}, "cancel_pending_order", {"order_id": "#W1", "reason": "no longer needed"})
    assert [r.kind for r in v.reasons] == ["schema", "requires"]  # the value is not a member: unknown
    assert not policy.check({}, "list_all_airports", {"x": 1}).allowed
    assert policy.check({}, "think", {"x": 1}).allowed


def test_the_runner_runs_blocks(tmp_path, monkeypatch):
    """The block runner fails on a broken block of each kind (it is not a check that cannot fail)."""
    monkeypatch.chdir(tmp_path)
    bad = [Block("x.md", 1, "zc", "policy p\naction a\n", None, ""),  # no fallback
           Block("x.md", 2, "zc", "rule r: nope requires x\n", "inside", "policy p\naction a\nfallback a"),
           Block("x.md", 3, "sh", "$ zc check missing.zc\n0 errors\n", None, ""),
           Block("x.md", 4, "python", "assert 1 == 2\n", None, ""),
           Block("x.md", 5, "json", "{'a': 1}\n", None, ""),
           Block("x.md", 6, "toml", "a = \n", None, "")]
    for b in bad:
        with pytest.raises(Exception):  # noqa: B017 (each bad block fails its own way)
            run_block(b, {}, tmp_path)
    run_block(Block("x.md", 7, "yaml", "a: [1, 2]\n", "file", "sub/f.yaml"), {}, tmp_path)
    assert (tmp_path / "sub" / "f.yaml").read_text() == "a: [1, 2]\n"


def test_cli_reference_names_every_command_and_option():
    """docs/cli.md's synopsis gives every `zc` command a line (with its indented continuations)
    naming each of its options, short and long, and each value of a choice."""
    import click

    synopsis = (ROOT / "docs" / "cli.md").read_text().split("```text\n", 1)[1].split("```", 1)[0]
    entries: list[str] = []
    for line in synopsis.splitlines():
        if line.startswith("zc "):
            entries.append(line)
        elif line.startswith(" ") and entries:
            entries[-1] += "\n" + line

    def commands(cmd, prefix):
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                yield from commands(sub, prefix + [name])
        else:
            yield " ".join(["zc", *prefix]), cmd

    found = list(commands(main, []))
    assert len(found) >= 16  # every command `zc --help` and its groups list
    missing = []
    for name, cmd in found:
        text = "\n".join(e for e in entries if re.match(re.escape(name) + r"(\s|$)", e))
        if not text:
            missing.append(name)
        for p in cmd.params:
            words = [o for o in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ()))
                     if o.startswith("-") and o not in ("-h", "--help")]
            if isinstance(p.type, click.Choice):
                words += list(p.type.choices)
            missing += [f"{name} {w}" for w in words
                        if not re.search(r"(?<![\w-])" + re.escape(w) + r"(?![\w-])", text)]
    assert "zc --version" in synopsis and "-h|--help" in synopsis
    assert missing == [], missing
