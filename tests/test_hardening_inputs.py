"""Generated bad input of every class gets a named error, exit 1, quickly: never a traceback or hang."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zcompile import interp, ir
from zcompile.cli import main
from zcompile.driver import artifact_bytes, check_source, compile_source, compile_text
from zcompile.errors import ZcError
from zcompile.inputs import MAX_JSON_DEPTH, check_depth, decode_json
from zcompile.runtime import Policy
from zcompile.source import Source
from zcompile.state import StateError

HEAD = """\
policy deep
state {
  flag: bool?
  n:    int?
  m:    int = 2
  x:    float?
}
action go(k: int?) cost 3
action stay
fallback stay
"""


def run(*args: str):
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


# ---- nesting: whatever the checker accepts loads and runs; past the limit, ZC0006 ----------------
BOOL_STEPS = ["not ({e})", "({e}) and flag", "(flag) or ({e})", "({e}) == (not flag)"]
NUM_STEPS = ["-({e})", "({e}) + 1", "({e}) * m", "(n) - ({e})", "({e}) - x", "-(-({e}))"]
TO_BOOL = ["({e}) < 3", "({e}) in {{1, 2}}", "({e}) >= cost", "({e}) != n"]


@st.composite
def nested(draw):
    """(a condition, its number of nested operators): a random tower of every operator kind."""
    total = draw(st.one_of(st.integers(1, 230), st.sampled_from([199, 200, 201, 202])))
    numeric = draw(st.integers(0, total - 1))  # operators applied on the number side first
    e, depth = draw(st.sampled_from(["n", "x", "m"])), 0
    while depth < numeric:
        step = draw(st.sampled_from(NUM_STEPS))
        e, depth = step.format(e=e), depth + (2 if step.startswith("-(-") else 1)
    e, depth = draw(st.sampled_from(TO_BOOL)).format(e=e), depth + 1
    while depth < total:
        e, depth = draw(st.sampled_from(BOOL_STEPS)).format(e=e), depth + 1
    return e, depth


def _flat(checked, state):
    return {p: (state.get(p) if state.get(p) is not None else (f.default if f.has_default else None))
            for p, f in checked.fields.items()}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nested(), st.data())
def test_random_deep_nesting_loads_and_agrees_or_is_zc0006(case, data):
    cond, depth = case
    src = HEAD + f"rule deep: forbid go when {cond}\nroute r: when {cond.replace('cost', '1')} use t\n" \
        "tier t\n"
    try:
        checked = check_source(Source("deep.zc", src))
    except ZcError as exc:
        codes = {d.code for d in exc.diagnostics}
        assert depth > ir.MAX_DEPTH and codes == {"ZC0006"}, (depth, exc.render()[:300])
        return
    assert depth <= ir.MAX_DEPTH
    policy, _ = compile_source(Source("deep.zc", src))
    runtime = Policy(ir.loads(artifact_bytes(policy))[0])  # the artifact path: encode, decode, verify
    for _ in range(3):
        state = {"flag": data.draw(st.sampled_from([True, False, None])),
                 "n": data.draw(st.sampled_from([None, 0, 1, 2, -5, 2**62])),
                 "x": data.draw(st.sampled_from([None, 0.5, -1e308, 1e308]))}
        want, _, _ = interp.legal([("go", 3), ("stay", 0)], checked.targets, checked.policy.rules,
                                  _flat(checked, state), ["go", "stay"], "stay")
        assert runtime.legal(state).actions == want, (cond, state)
        assert runtime.check(state, "go", {"k": 1}).allowed == ("go" in want)
        runtime.route(state)


@pytest.mark.parametrize("op", ["not ", "-", "and", "+"])
def test_exactly_the_documented_limit(op):
    """200 nested operators of each kind compile and run; 201 are ZC0006."""
    def build(d: int) -> str:
        if op == "not ":
            return "not " * d + "flag"
        if op == "-":
            return "-" * (d - 1) + "n < 3"
        if op == "and":
            return "(flag and " * d + "flag" + ")" * d
        return "n" + " + 1" * (d - 1) + " > 3"
    compile_text(HEAD + f"rule deep: forbid go when {build(200)}\n").legal({"n": 1, "flag": True})
    with pytest.raises(ZcError) as exc:
        compile_text(HEAD + f"rule deep: forbid go when {build(201)}\n")
    assert [d.code for d in exc.value.diagnostics] == ["ZC0006"]


@pytest.mark.parametrize("depth", [201, 260, 20_000])
def test_zc0006_points_at_the_operator_past_the_limit_from_the_outside(depth):
    """The span is the 201st operator counted from the outside in, however deep the expression goes
    (found on the parsed AST: no second parse); of two rules too deep, the first."""
    levels = [f"(flag {'and' if i % 2 else 'or'} " for i in range(depth)]
    head = HEAD + "rule deep: forbid go when "
    src = head + "".join(levels) + "flag" + ")" * depth + "\n"
    with pytest.raises(ZcError) as exc:
        compile_text(src + "rule deeper: forbid go when " + "not " * 300 + "flag\n")
    (diag,) = exc.value.diagnostics
    start = len(head) + sum(map(len, levels[:ir.MAX_DEPTH])) + 1  # after the 201st `(`
    assert diag.code == "ZC0006" and diag.span.start == start
    # inside its own `)`
    assert src[diag.span.start:diag.span.end].startswith("flag ") and diag.span.end == len(src) - 1 - (
        ir.MAX_DEPTH + 1)


# ---- string literals ---------------------------------------------------------------------------
ESCAPES = st.sampled_from(['\\"', "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t", "\\q", "\\x41",
                           "\\ud800", "\\udc00", "\\ud83d\\ude00", "\\u00e9", "\\u12", "\\0", "\\'",
                           "\x01", "\x7f", "\x1b", "é", "a", " "])


@settings(max_examples=200, deadline=None)
@given(st.lists(ESCAPES, max_size=6).map("".join))
def test_random_string_literals_are_their_json_value_or_zc0007(body):
    """A description compiles to the JSON value of its literal, or is ZC0007; lone surrogates and
    raw control characters are refused, and what compiles also writes and loads an artifact."""
    src = HEAD.replace("action stay", f'action stay "{body}"')
    try:
        want = json.loads(f'"{body}"', strict=True)  # JSON's reading, which zc follows ...
        want.encode("utf-8")
        assert "\x7f" not in body  # ... except that a raw DEL is refused like other controls
    except (ValueError, UnicodeEncodeError, AssertionError):
        want = None
    try:
        policy, _ = compile_source(Source("s.zc", src))
    except ZcError as exc:
        assert want is None, (body, exc.render())
        assert {d.code for d in exc.diagnostics} == {"ZC0007"}, exc.render()
        return
    assert want is not None
    assert policy.actions[1].description == want
    Policy(ir.loads(artifact_bytes(policy))[0])


def test_unpaired_surrogate_in_api_text_is_zc0005():
    with pytest.raises(ZcError) as exc:
        compile_text(HEAD + "# \ud800\n")
    assert [d.code for d in exc.value.diagnostics] == ["ZC0005"]


# ---- JSON nesting: states, calls, artifacts -----------------------------------------------------
TRICKY = st.text(alphabet='[]{}"\\ab\n', max_size=6)


@st.composite
def json_values(draw):
    """(depth, a JSON value exactly `depth` containers deep, with bracket-laden strings around)."""
    depth = draw(st.one_of(st.integers(0, 600), st.sampled_from([199, 200, 201])))
    layers = draw(st.lists(st.tuples(st.booleans(), TRICKY, TRICKY, st.booleans()),
                           min_size=depth, max_size=depth))
    value = draw(st.one_of(st.integers(), TRICKY, st.booleans(), st.none()))
    for is_list, a, b, first in layers:  # built inside out, without recursion
        value = ([a, value, b] if first else [value]) if is_list else {a: b, "k" + a: value}
    return depth, value


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_values())
def test_json_nesting_is_bounded_exactly(case):
    depth, value = case
    text = json.dumps(value).encode()
    if depth > MAX_JSON_DEPTH:
        with pytest.raises(ZcError, match="nested more than 200 levels"):
            decode_json(text)
    else:
        check_depth(text)
        assert decode_json(text) == value


@pytest.mark.parametrize("where", ["state", "call", "arguments"])
@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_deep_json_in_every_cli_input(tmp_path, where, depth):
    (tmp_path / "p.zc").write_text(HEAD)
    deep = "[" * depth + "]" * depth
    state = deep if where == "state" else "{}"
    (tmp_path / "s.json").write_text(state)
    call = {"state": None, "call": deep,
            "arguments": json.dumps({"name": "go", "arguments": deep})}[where]
    args = ["legal", tmp_path / "p.zc", "--state", tmp_path / "s.json"]
    result = run(*args, *(["--call", call] if call else []))
    assert result.exit_code == 1 and "nested more than 200 levels deep" in result.output


def test_deep_artifact_is_refused(tmp_path):
    body = b'{"name":' + b"[" * 5000 + b"]" * 5000 + b"}"
    import hashlib

    env = (b'{"format":"zcp","version":2,"compiler":"x","sha256":"'
           + hashlib.sha256(body).hexdigest().encode() + b'","policy":' + body + b"}")
    (tmp_path / "deep.zcp").write_bytes(env)
    result = run("legal", tmp_path / "deep.zcp", "--state", "-")
    assert result.exit_code == 1 and "corrupt artifact: nested too deeply" in result.output


# ---- files ---------------------------------------------------------------------------------------
def test_fifo_in_a_checked_directory_does_not_block(tmp_path):
    (tmp_path / "ok.zc").write_text(HEAD)
    os.mkfifo(tmp_path / "trap.zc")
    os.mkfifo(tmp_path / "state.json")
    for args in (["check", tmp_path], ["legal", tmp_path / "ok.zc", "--state", tmp_path / "state.json"],
                 ["legal", tmp_path / "trap.zc", "--state", "-"]):
        proc = subprocess.run([sys.executable, "-m", "zcompile", *map(str, args)], capture_output=True,
                              text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert proc.returncode == 1, proc.stderr
        assert "not a regular file" in proc.stderr and "Traceback" not in proc.stderr


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 400), min_size=1, max_size=3), st.sampled_from(["check", "legal"]))
def test_random_path_lengths_are_named_errors(tmp_path_factory, lengths, command):
    base = tmp_path_factory.getbasetemp()
    path = base.joinpath(*("p" * n for n in lengths)).with_suffix(".zc")
    args = ["check", path] if command == "check" else ["legal", path, "--state", path]
    result = run(*args)
    assert result.exit_code == 1
    assert str(path)[:50] in result.output
    assert any(w in result.output for w in ("File name too long", "No such file", "no such file"))


@contextlib.contextmanager
def chain_of_directories(root: Path, levels: int, name: str, files: dict[str, str]):
    """`root/name/name/…/name` (`levels` deep) holding `files` at the bottom, made and removed by
    walking it with relative chdir (the whole path may be past PATH_MAX, and recursive removal
    would exceed the interpreter's recursion limit)."""
    cwd = os.getcwd()
    try:
        os.chdir(root)
        for _ in range(levels):
            os.mkdir(name)
            os.chdir(name)
        for f, text in files.items():
            Path(f).write_text(text)
    finally:
        os.chdir(cwd)
    try:
        yield root / name
    finally:
        try:
            os.chdir(root)
            for _ in range(levels):
                os.chdir(name)
            for f in files:
                os.unlink(f)
            for _ in range(levels):
                os.chdir("..")
                os.rmdir(name)
        finally:
            os.chdir(cwd)


RECEIPT_LINE = '{"id": "a", "task": "t", "tier": "x", "state": {}}\n'
TESTS = "policy: deep\ncases:\n  - name: c\n    state: {flag: true}\n    legal: [go, stay]\n"


@pytest.mark.parametrize("command, files", [
    (["receipts", "check"], {"r.jsonl": RECEIPT_LINE}),
    (["check"], {"p.zc": HEAD}),
    (["test"], {"deep.test.yaml": TESTS, "deep.zc": HEAD}),
])
def test_a_directory_1200_levels_deep_is_read(tmp_path, command, files):
    """Directories are walked without recursion: past the interpreter's recursion limit (about
    1,000), the file at the bottom is found and read."""
    with chain_of_directories(tmp_path, 1200, "d", files) as top:
        result = run(*command, top)
    assert "Traceback" not in result.output and "RecursionError" not in result.output, result.output[-2000:]
    if command == ["receipts", "check"]:
        assert result.exit_code == 0 and "receipts: 1 (valid 1, skipped 0)" in result.output, result.output
    else:
        assert "cannot list" not in result.output and "no `.zc`" not in result.output, result.output


@pytest.mark.parametrize("command, files", [
    (["receipts", "check"], {"r.jsonl": RECEIPT_LINE}),
    (["check"], {"p.zc": HEAD}),
    (["test"], {"deep.test.yaml": TESTS}),
])
def test_a_directory_past_the_path_length_limit_is_a_named_error(tmp_path, command, files):
    """A directory whose path inside the tree is longer than the system allows (PATH_MAX, 4,096
    bytes) is refused naming the directory and the system's reason, never a traceback."""
    with chain_of_directories(tmp_path, 700, "dddddd", files) as top:
        result = run(*command, top)
    assert result.exit_code == 1, result.output[-2000:]
    assert (f"error: {top}/dddddd/" in result.output
            and ": File name too long" in result.output), result.output[-500:]


def test_directory_as_a_state_or_artifact(tmp_path):
    (tmp_path / "p.zc").write_text(HEAD)
    result = run("legal", tmp_path / "p.zc", "--state", tmp_path)
    assert result.exit_code == 1 and "is a directory" in result.output


# ---- sizes ---------------------------------------------------------------------------------------
def test_huge_policy_is_refused_quickly(tmp_path):
    from zcompile.parse import MAX_POLICY_BYTES

    path = tmp_path / "huge.zc"
    with path.open("w") as fh:
        fh.write(HEAD)
        fh.write(("# " + "x" * 1000 + "\n") * (MAX_POLICY_BYTES // 1000 + 10))
    result = run("check", path)
    assert result.exit_code == 1 and "larger than the limit" in result.output
    with pytest.raises(ZcError, match="larger than the limit"):
        compile_text(path.read_text())


def test_fifteen_thousand_actions_and_groups():
    """Masks and group bits past CPython's 4,300-digit int-str limit never become literals."""
    n = 15_000
    src = ("policy big\nstate {\n  n: int = 0\n  flag: bool?\n}\n"
           + "".join(f"action a{i} cost {i}\n" for i in range(n))
           + "fallback a0\nrule by_cost: forbid * when cost > n and flag\nrule all: forbid * when flag\n")
    policy = compile_text(src)
    got = policy.legal({"n": 7000, "flag": False})
    assert len(got) == n
    got = policy.legal({"n": 7000, "flag": True})
    assert got.fallback and got.actions == ("a0",)
    assert [r.rule for r in policy.check({"n": 7000, "flag": True}, "a14999").reasons] == \
        ["by_cost", "all"]
    assert "a14999" not in policy.legal({"n": 7000})  # unknown `flag`: removed (fail closed)


# ---- API gaps ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def policy():
    return compile_text(HEAD)


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.none(), st.integers(), st.floats(), st.lists(st.text(max_size=3), max_size=2),
                 st.dictionaries(st.text(max_size=2), st.integers(), max_size=2), st.binary(max_size=3)))
def test_non_string_action_or_intent_is_a_clear_error(policy, value):
    with pytest.raises(ZcError, match="must be a string"):
        policy.check({}, value)
    with pytest.raises(ZcError, match="must be a string"):
        policy.legal({}, intent=value) if value is not None else policy.legal({}, intent=[value])


@settings(max_examples=60, deadline=None)
@given(st.recursive(st.one_of(st.integers(), st.none(), st.text(max_size=2)),
                    lambda inner: st.dictionaries(st.one_of(st.integers(), st.text(max_size=2),
                                                            st.none(), st.booleans()), inner,
                                                  max_size=3), max_leaves=6))
def test_state_with_any_keys_is_accepted_or_a_state_error(policy, state):
    try:
        policy.legal(state)
    except StateError as exc:
        assert str(exc).startswith("$")


def test_call_that_is_not_text(tmp_path):
    (tmp_path / "p.zc").write_text(HEAD)
    (tmp_path / "s.json").write_text("{}")
    result = run("legal", tmp_path / "p.zc", "--state", tmp_path / "s.json", "--call",
                 b"\xff".decode("utf-8", "surrogateescape"))
    assert result.exit_code == 1 and "--call: not valid text" in result.output
