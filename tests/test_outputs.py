"""Output files replace only what zc wrote: receipts over receipts, reports over reports, artifacts
over artifacts. A stranger's file at the output path (any bytes, a chat log, a policy, notes) is
refused, exit 1, and left byte for byte as it was; an empty file or an earlier output is replaced."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from zcompile.cli import main

ROOT = Path(__file__).resolve().parents[1]
POLICY = ROOT / "policies" / "airline_chat.zc"
SPECIALIST = ROOT / "specialists" / "airline_chat"
RECEIPTS = ROOT / "receipts" / "tau-airline-gpt4o.jsonl.gz"


def zc(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def strangers(seed: int, n: int = 6) -> list[bytes]:
    """Seeded foreign contents: text, JSON that is not ours, a chat line, binary, a policy."""
    rng = random.Random(seed)
    fixed = [b"my notes\n", b'{"messages": [{"role": "user", "content": "hi"}]}\n', b'{"n": 1}\n',
             POLICY.read_bytes()[:400], b"<html><body>mine</body></html>", b"\x00\xff\x13" * 40]
    noise = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300))) for _ in range(n)]
    return fixed + noise


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Outputs each command wrote once, to rewrite."""
    d = tmp_path_factory.mktemp("made")
    small = d / "small.jsonl"
    res = zc("receipts", "convert", RECEIPTS, "-o", small)
    assert res.exit_code == 0, res.output
    return d, small


def commands(out: Path, small: Path) -> dict[str, list]:
    base = ["eval", "--policy", POLICY, "--specialists", SPECIALIST, "--receipts", small]
    return {
        "receipts convert": ["receipts", "convert", small, "-o", out.with_suffix(".jsonl")],
        "receipts convert parquet": ["receipts", "convert", small, "-o", out.with_suffix(".parquet")],
        "eval --json": [*base, "--json", out.with_suffix(".json")],
        "eval --html": [*base, "--html", out.with_suffix(".html")],
        "compile": ["compile", POLICY, "-o", out.parent],
    }


def target(args: list) -> Path:
    return Path(args[-1]) / "airline_chat.zcp" if args[0] == "compile" else Path(args[-1])


@pytest.mark.parametrize("name", ["receipts convert", "receipts convert parquet", "eval --json",
                                  "eval --html", "compile"])
def test_a_strangers_file_is_refused_and_kept(made, tmp_path, name):
    _, small = made
    args = commands(tmp_path / "out", small)[name]
    path = target(args)
    for i, data in enumerate(strangers(len(name))):
        path.write_bytes(data)
        res = zc(*args)
        assert res.exit_code == 1 and "refusing to overwrite it" in res.output, (name, i, res.output[-300:])
        assert "Traceback" not in res.output
        assert path.read_bytes() == data, (name, i)
    path.write_bytes(b"")  # an empty file is nobody's work
    assert zc(*args).exit_code == 0 and path.stat().st_size > 0
    first = path.read_bytes()
    res = zc(*args)  # an earlier output of the same command is replaced
    assert res.exit_code == 0, res.output
    if not name.startswith("eval"):  # reports carry timings
        assert path.read_bytes() == first


def test_an_import_never_overwrites_its_own_source(tmp_path):
    """`zc receipts import --format chat log -o log` used to replace the chat log with its receipts."""
    log = tmp_path / "chat.jsonl"
    log.write_text('{"id": "c", "messages": [{"role": "system", "content": "s"}, '
                   '{"role": "assistant", "content": "Hello"}]}\n')
    before = log.read_bytes()
    res = zc("receipts", "import", "--format", "chat", log, "-o", log)
    assert res.exit_code == 1 and "is not a receipts file" in res.output
    assert log.read_bytes() == before
    out = tmp_path / "r.jsonl"
    assert zc("receipts", "import", "--format", "chat", log, "-o", out).exit_code == 0
    assert zc("receipts", "import", "--format", "chat", log, "-o", out).exit_code == 0  # ours: replaced


def test_a_report_written_before_the_generator_tag_is_still_ours(made, tmp_path):
    _, small = made
    old = tmp_path / "eval.html"
    old.write_text('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n<title>zc eval: '
                   'airline_chat</title>')
    args = ["eval", "--policy", POLICY, "--specialists", SPECIALIST, "--receipts", small, "--html", old]
    assert zc(*args).exit_code == 0 and b'content="zc eval"' in old.read_bytes()
