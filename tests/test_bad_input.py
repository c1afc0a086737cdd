"""Bad input of every kind: a clear error naming the place, exit code 1, no traceback, no hang."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from zcompile.cli import main

POLICY = """\
policy shop

state {
  user.role:     enum(customer, agent, admin)
  user.verified: bool
  order.status:  enum(pending, processed)?
  retries:       int = 0
  amount:        float = 0.0
  confirmed:     set[action] = {}
}

action get_order     tags(read)
action cancel_order  tags(write, destructive)  cost 2
action retry         tags(control)
action escalate      tags(control)

fallback escalate

rule pending_only: cancel_order requires order.status == pending and user.verified
rule admins:       forbid tags(destructive) unless user.role == admin and self in confirmed
rule bounded:      retry requires retries < 3 and amount < 100.0
"""

GOOD_STATE = {"user": {"role": "admin", "verified": True}, "order": {"status": "pending"}}


def run(*args: str):
    """Invoke `zc` in-process; assert it failed cleanly (no traceback, no stray exception)."""
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


def assert_refused(result, *needles: str) -> None:
    assert result.exit_code == 1, result.output
    assert "error" in result.output
    for needle in needles:
        assert needle in result.output, f"{needle!r} not in:\n{result.output}"


# ---- policy files -------------------------------------------------------------------------
def _check_file(tmp_path: Path, name: str, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return path, run("check", path)


def test_empty_file(tmp_path):
    path, result = _check_file(tmp_path, "empty.zc", b"")
    assert_refused(result, str(path), "ZC0004", "empty policy file")


@pytest.mark.parametrize("text", [b"   \n\t\n\r\n  ", b"# just a comment\n\n   # another\n", b"\n" * 1000])
def test_whitespace_or_comment_only(tmp_path, text):
    path, result = _check_file(tmp_path, "blank.zc", text)
    assert_refused(result, str(path), "ZC0004")


def test_binary_garbage_with_nul(tmp_path):
    rng = random.Random(1234)
    data = bytes(rng.randrange(256) for _ in range(4096)) + b"\x00"
    path, result = _check_file(tmp_path, "garbage.zc", data)
    assert_refused(result, str(path), "ZC0005")


def test_nul_byte_in_utf8_text(tmp_path):
    data = POLICY.encode().replace(b"action retry", b"action re\x00try")
    path, result = _check_file(tmp_path, "nul.zc", data)
    assert_refused(result, str(path), "ZC0005", "NUL byte at offset")


def test_not_utf8(tmp_path):
    data = ("# r\u00e8gles\n" + POLICY).encode("latin-1")
    path, result = _check_file(tmp_path, "latin1.zc", data)
    assert_refused(result, str(path), "ZC0005", "not UTF-8", "line 1, column 4")


def test_utf16_file(tmp_path):
    path, result = _check_file(tmp_path, "utf16.zc", POLICY.encode("utf-16"))
    assert_refused(result, str(path), "ZC0005")


def test_utf8_bom_is_not_a_crash(tmp_path):
    path, result = _check_file(tmp_path, "bom.zc", b"\xef\xbb\xbf" + POLICY.encode())
    assert result.exit_code in (0, 1), result.output  # accepted, or refused with a diagnostic
    if result.exit_code == 1:
        assert str(path) in result.output


def _nested(kind: str, depth: int) -> str:
    if kind == "not":
        body = "not " * depth + "user.verified"
    elif kind == "and_or":
        body = "".join(f"(user.verified {'and' if i % 2 else 'or'} " for i in range(depth)) \
            + "retries < 3" + ")" * depth
    elif kind == "neg":
        body = "-" * depth + "retries < 3"
    else:
        body = "retries" + " + 1" * depth + " > 3"
    return POLICY + f"rule generated: get_order requires {body}\n"


@pytest.mark.parametrize("kind", ["not", "and_or", "neg", "sum"])
@pytest.mark.parametrize("depth", [250, 5_000, 100_000])
def test_deeply_nested_expression(tmp_path, kind, depth):
    path, result = _check_file(tmp_path, "deep.zc", _nested(kind, depth).encode())
    assert_refused(result, f"{path}:22:", "ZC0006", "nested more than")


@pytest.mark.parametrize("kind", ["not", "and_or"])
def test_nesting_below_the_limit_compiles_and_runs(tmp_path, kind):
    path = tmp_path / "deep.zc"
    path.write_text(_nested(kind, 150))
    state = tmp_path / "s.json"
    state.write_text(json.dumps(GOOD_STATE))
    result = run("legal", path, "--state", state)
    assert result.exit_code == 0, result.output


def test_redundant_parentheses_are_not_nesting(tmp_path):
    body = "(" * 10_000 + "user.verified" + ")" * 10_000
    path, result = _check_file(tmp_path, "parens.zc", (POLICY + "rule p: get_order requires "
                                                                f"{body}\n").encode())
    assert result.exit_code == 0, result.output


def test_directory_without_policies(tmp_path):
    (tmp_path / "notes.txt").write_text("nothing here")
    result = run("check", tmp_path)
    assert_refused(result, str(tmp_path), "no `.zc` policy files")


def test_missing_path(tmp_path):
    missing = tmp_path / "nope" / "support.zc"
    result = run("check", missing)
    assert_refused(result, str(missing), "no such file or directory")
    result = run("compile", missing, "-o", tmp_path / "build")
    assert_refused(result, str(missing))


def test_unreadable_policy_is_an_error_not_a_crash(tmp_path):
    path = tmp_path / "p.zc"
    path.write_text(POLICY)
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("running as a user who can read anything")
        assert_refused(run("check", path), str(path), "cannot read")
    finally:
        path.chmod(0o644)


def test_one_bad_file_among_good_ones(tmp_path):
    (tmp_path / "a.zc").write_text(POLICY)
    (tmp_path / "b.zc").write_bytes(b"\xff\xfe garbage")
    result = run("check", tmp_path)
    assert_refused(result, str(tmp_path / "b.zc"), "ZC0005")


# ---- a large policy -----------------------------------------------------------------------
def big_policy(n_actions: int, n_rules: int) -> str:
    """A generated policy: `n_actions` actions with tags and costs, `n_rules` rules of every kind."""
    out = ["policy big", "", "state {", "  user.role:     enum(customer, agent, admin)",
           "  user.verified: bool", "  retries:       int = 0", "  budget.units:  int",
           "  confirmed:     set[action] = {}", "}", ""]
    tags = ["read", "write", "control", "search", "notify"]
    for i in range(n_actions):
        out.append(f"action act_{i:06d}  tags({tags[i % 5]}, group_{i % 50})  cost {i % 7}"
                   f"  \"generated action number {i}\"")
    out += ["action escalate tags(control)", "fallback escalate"]
    for j in range(n_rules):
        a = f"act_{j % n_actions:06d}"
        k = j % 4
        if k == 0:
            out.append(f"rule r_{j:06d}: {a} requires user.role in {{agent, admin}} and retries < "
                       f"{j % 9 + 1}")
        elif k == 1:
            out.append(f"rule r_{j:06d}: forbid {a} when cost > budget.units and not user.verified")
        elif k == 2:
            out.append(f"rule r_{j:06d}: forbid tags(group_{j % 50}) unless user.role != customer "
                       "or self in confirmed")
        else:
            out.append(f"rule r_{j:06d}: {a} after act_{(j + 1) % n_actions:06d}")
    return "\n".join(out) + "\n"


def _zc_subprocess(args, timeout):
    """Run `python -m zcompile` in a child with a hard timeout (a hang fails, it cannot block)."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "zcompile", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)
    return proc, time.perf_counter() - start


BIG_TIMEOUT = 300  # seconds; generous for a loaded CI machine, a quadratic blow-up still trips it
N_OK = 15_000   # 15,000 actions + 15,000 rules, a 2.3 MB file past the lints' budget: about 7 s
N_ERR = 6_600   # about 1 MB, with an error at the end


@pytest.mark.parametrize("n", [N_OK])
def test_large_policy_compiles_or_fails_cleanly(tmp_path, n):
    path = tmp_path / "big.zc"
    path.write_text(big_policy(n, n))
    proc, seconds = _zc_subprocess(["compile", path, "-o", tmp_path / "build"], BIG_TIMEOUT)
    print(f"{path.stat().st_size / 1e6:.1f} MB policy: exit {proc.returncode} in {seconds:.1f} s")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "note[ZC1000]: some ZC1001/ZC1002 lints were left undecided" in proc.stderr


@pytest.mark.parametrize("tail, code", [
    ("rule broken: act_000001 requires retries <\n", "ZC0003"),
    ("rule broken: act_000001 requires user.role > 2\n", "ZC0302"),
])
def test_large_policy_with_an_error_at_the_end(tmp_path, tail, code):
    path = tmp_path / "big_bad.zc"
    text = big_policy(N_ERR, N_ERR) + tail
    path.write_text(text)
    proc, seconds = _zc_subprocess(["check", path], BIG_TIMEOUT)
    print(f"{len(text) / 1e6:.1f} MB policy with {code}: exit {proc.returncode} in {seconds:.1f} s")
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"{path}:{text.count(chr(10))}:" in proc.stderr and code in proc.stderr


# ---- states -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def artifact(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("artifact")
    (d / "shop.zc").write_text(POLICY)
    result = CliRunner().invoke(main, ["compile", str(d / "shop.zc"), "-o", str(d / "build")])
    assert result.exit_code == 0, result.output
    path = d / "build" / "shop.zcp"
    assert path.is_file()
    return path


def _legal(artifact: Path, tmp_path: Path, state_text: str, *extra: str):
    state = tmp_path / "state.json"
    state.write_text(state_text)
    return run("legal", artifact, "--state", state, *extra), state


def test_good_state_is_accepted(artifact, tmp_path):
    result, _ = _legal(artifact, tmp_path, json.dumps(GOOD_STATE))
    assert result.exit_code == 0, result.output
    assert "legal:" in result.output


@pytest.mark.parametrize("state, where, what", [
    ({"user": {"role": "admin", "verified": "yes"}}, "$.user.verified", "bool"),
    ({"user": {"role": "admin", "verified": 1}}, "$.user.verified", "bool"),
    ({"user": {"role": "admin", "verified": True}, "retries": 1.5}, "$.retries", "int"),
    ({"user": {"role": "admin", "verified": True}, "retries": True}, "$.retries", "int"),
    ({"user": {"role": "admin", "verified": True}, "retries": "2"}, "$.retries", "int"),
    ({"user": {"role": "admin", "verified": True}, "amount": "cheap"}, "$.amount", "float"),
    ({"user": {"role": "admin", "verified": True}, "confirmed": "cancel_order"}, "$.confirmed", "array"),
    ({"user": "admin"}, "$.user", "object"),
    ({"user": {"role": 3, "verified": True}}, "$.user.role", ""),
])
def test_state_wrong_type(artifact, tmp_path, state, where, what):
    result, path = _legal(artifact, tmp_path, json.dumps(state))
    assert_refused(result, str(path), where, what)


@pytest.mark.parametrize("state, where", [
    ({"user": {"role": "admin"}}, "$.user.verified"),
    ({"user": {"verified": True}}, "$.user.role"),
    ({}, "$.user"),
])
def test_state_missing_required_field(artifact, tmp_path, state, where):
    result, path = _legal(artifact, tmp_path, json.dumps(state))
    assert_refused(result, str(path), where, "missing")


def test_state_unknown_enum_member(artifact, tmp_path):
    result, path = _legal(artifact, tmp_path, json.dumps({"user": {"role": "root", "verified": True}}))
    assert_refused(result, str(path), "$.user.role", "customer|agent|admin", '"root"')


def test_state_set_with_unknown_action(artifact, tmp_path):
    state = {"user": {"role": "admin", "verified": True}, "confirmed": ["cancel_order", "nuke"]}
    result, path = _legal(artifact, tmp_path, json.dumps(state))
    assert_refused(result, str(path), "$.confirmed[1]", '"nuke"')


def test_history_with_unknown_action(artifact, tmp_path):
    state = {"user": {"role": "admin", "verified": True}, "history": ["get_order", "rm_rf"]}
    result, path = _legal(artifact, tmp_path, json.dumps(state))
    assert_refused(result, str(path), "$.history[1]", '"rm_rf"')


@pytest.mark.parametrize("text, got", [("[1, 2]", "array"), ('"admin"', "str"), ("42", "int"),
                                       ("null", "null"), ("true", "bool")])
def test_state_not_an_object(artifact, tmp_path, text, got):
    result, path = _legal(artifact, tmp_path, text)
    assert_refused(result, str(path), "$", "object", got)


@pytest.mark.parametrize("text, line, col", [
    ('{"user":\n  {"role": "admin",, }}', 2, 20),
    ('{"user": {"role": "admin", "verified": tru}}', 1, 44),
    ('{"user": {"role": "admin"', 1, 26),
])
def test_state_invalid_json(artifact, tmp_path, text, line, col):
    result, path = _legal(artifact, tmp_path, text)
    assert_refused(result, f"{path}:{line}:{col}:", "invalid JSON")


@pytest.mark.parametrize("text", ["", "  \n\n"])
def test_state_empty(artifact, tmp_path, text):
    result, path = _legal(artifact, tmp_path, text)
    assert_refused(result, f"{path}: empty input, expected a JSON object")


def test_state_not_utf8(artifact, tmp_path):
    state = tmp_path / "state.json"
    state.write_bytes(b'{"user": {"role": "adm\xe9n", "verified": true}}')
    result = run("legal", artifact, "--state", state)
    assert_refused(result, str(state))


def test_state_missing_file(artifact, tmp_path):
    missing = tmp_path / "nope.json"
    result = run("legal", artifact, "--state", missing)
    assert_refused(result, str(missing), "cannot read")


@pytest.mark.parametrize("state, where, key", [
    ({"user": {"role": "admin", "verified": True}, "colour": "red"}, "$.colour", "colour"),
    ({"user": {"role": "admin", "verified": True, "extra": 2}}, "$.user.extra", "extra"),
])
def test_state_strict_unknown_key(artifact, tmp_path, state, where, key):
    result, _ = _legal(artifact, tmp_path, json.dumps(state))
    assert result.exit_code == 0, result.output  # unknown keys are ignored by default
    result, path = _legal(artifact, tmp_path, json.dumps(state), "--strict")
    assert_refused(result, str(path), f"{where}: unknown field")


def test_state_from_stdin_names_stdin(artifact):
    result = CliRunner().invoke(main, ["legal", str(artifact), "--state", "-"], input="[1,,2]")
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert "<stdin>:1:" in result.output


def test_unknown_intent(artifact, tmp_path):
    result, _ = _legal(artifact, tmp_path, json.dumps(GOOD_STATE), "--intent", "cancle")
    assert_refused(result, "unknown intent `cancle`")


# ---- artifacts ----------------------------------------------------------------------------
def _state_file(tmp_path: Path) -> Path:
    state = tmp_path / "state.json"
    state.write_text(json.dumps(GOOD_STATE))
    return state


def _legal_with(tmp_path: Path, name: str, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return run("legal", path, "--state", _state_file(tmp_path)), path


def test_artifact_garbage(tmp_path):
    rng = random.Random(99)
    result, path = _legal_with(tmp_path, "garbage.zcp", bytes(rng.randrange(256) for _ in range(2048)))
    assert_refused(result, str(path), "not a zc artifact")


def test_artifact_empty(tmp_path):
    result, path = _legal_with(tmp_path, "empty.zcp", b"")
    assert_refused(result, str(path), "not a zc artifact")


@pytest.mark.parametrize("doc", [{"a": 1}, [1, 2, 3], {"format": "zip", "version": 1}, GOOD_STATE])
def test_artifact_json_but_not_an_artifact(tmp_path, doc):
    result, path = _legal_with(tmp_path, "other.zcp", json.dumps(doc).encode())
    assert_refused(result, str(path), "not a zc artifact")


def test_artifact_tampered(artifact, tmp_path):
    data = artifact.read_bytes()
    start = data.index(b'"policy":') + len(b'"policy":')
    idx = data.index(b'"cost":2', start) + len(b'"cost":')  # cancel_order's cost
    tampered = data[:idx] + b"0" + data[idx + 1:]
    assert len(tampered) == len(data) and tampered != data
    result, path = _legal_with(tmp_path, "tampered.zcp", tampered)
    assert_refused(result, str(path), "sha256", "tampered")


def test_artifact_tampered_name(artifact, tmp_path):
    data = artifact.read_bytes()
    idx = data.index(b'"name":"shop"') + len(b'"name":"')
    tampered = data[:idx] + b"S" + data[idx + 1:]
    result, path = _legal_with(tmp_path, "tampered.zcp", tampered)
    assert_refused(result, str(path), "tampered")


def test_artifact_truncated(artifact, tmp_path):
    data = artifact.read_bytes()
    result, path = _legal_with(tmp_path, "truncated.zcp", data[: len(data) // 2])
    assert_refused(result, str(path))


def test_artifact_version_bumped(artifact, tmp_path):
    data = artifact.read_bytes()
    assert b'"version":2,' in data
    result, path = _legal_with(tmp_path, "future.zcp", data.replace(b'"version":2,', b'"version":99,', 1))
    assert_refused(result, str(path), "version 99", "newer")


def test_artifact_missing_and_directory(tmp_path):
    state = _state_file(tmp_path)
    missing = tmp_path / "nope.zcp"
    assert_refused(run("legal", missing, "--state", state), str(missing), "cannot read")
    assert_refused(run("legal", tmp_path, "--state", state), str(tmp_path), "cannot read")
