"""Receipts under generated bad input: nesting, huge conversations, foreign formats and policies,
versions, arguments; every failure is a named `FILE:LINE: $.path` error, never a traceback."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zcompile
from zcompile.cli import main
from zcompile.receipts import (
    FORMAT_VERSION,
    SHAPES,
    ChatSummary,
    ReadStats,
    Receipt,
    ReceiptError,
    call_arguments,
    candidates,
    default_extract,
    encode,
    extract_candidates,
    import_bfcl,
    import_chat,
    read,
    write_file,
)
from zcompile.receipts.candidates import WINDOW

ROOT = Path(__file__).parents[1]
AIRLINE = ROOT / "policies" / "airline_chat.zc"
SUPPORT = ROOT / "tests" / "golden" / "ok" / "support_desk.zc"
SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def airline():
    return zcompile.compile_file(AIRLINE)


def nested(depth: int, leaf: str = "1") -> str:
    """JSON text of `depth` arrays and objects inside each other (seeded mix)."""
    rng = random.Random(depth)
    kinds = [rng.random() < 0.5 for _ in range(depth)]
    return "".join('{"k":' if k else "[" for k in kinds) + leaf + "".join("}" if k else "]" for k in reversed(
        kinds))


def tool_call(name: str, args: object = "{}") -> dict:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": name, "arguments": args}}]}


def conversation(messages: list[dict], cid: str = "c1") -> dict:
    return {"id": cid, "task": "t", "reward": 1.0, "model": "m", "messages": messages}


def chat_file(tmp_path: Path, *convs: dict, name: str = "chat.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(c) + "\n" for c in convs))
    return path


# ---- nesting ------------------------------------------------------------------------------------

DEPTHS = [1_100, 3_000, 50_000]


@pytest.mark.parametrize("depth", DEPTHS)
def test_deeply_nested_receipt_line_is_a_named_error(tmp_path, depth):
    path = tmp_path / "r.jsonl"
    good = encode(Receipt(id="a", task="t", state={}, tier="x"))
    path.write_bytes(good + b'{"id": "b", "task": "t", "tier": "x", "state": {"s": ' + nested(depth).encode()
                     + b"}}\n")
    with pytest.raises(ReceiptError, match=r"r\.jsonl:2: \$: invalid JSON: nested too deeply"):
        list(read(path))
    stats = ReadStats()
    assert [r.id for r in read(path, skip_invalid=True, stats=stats)] == ["a"] and stats.skipped == 1
    res = CliRunner().invoke(main, ["receipts", "check", str(path)])
    assert res.exit_code == 1 and "nested too deeply" in res.output and "Traceback" not in res.output


@pytest.mark.parametrize("depth", DEPTHS)
def test_deeply_nested_chat_and_bfcl_lines_are_named_errors(tmp_path, depth):
    chat = tmp_path / "chat.jsonl"
    chat.write_text('{"id": "c", "messages": [], "extra": ' + nested(depth) + "}\n")
    with pytest.raises(ReceiptError, match=r"chat\.jsonl:1: \$: invalid JSON: nested too deeply"):
        list(import_chat(chat))
    q = tmp_path / "q.json"
    q.write_text('{"id": "q", "question": [[{"role": "user", "content": "hi"}]], "function": '
                 '[{"name": "f", "parameters": {"p": ' + nested(depth) + "}}]}\n")
    with pytest.raises(ReceiptError, match=r"q\.json:1: \$: invalid JSON: nested too deeply"):
        list(import_bfcl(q, None))
    answers = tmp_path / "a.json"
    answers.write_text('{"id": "q", "ground_truth": [{"f": ' + nested(depth) + "}]}\n")
    with pytest.raises(ReceiptError, match=r"a\.json:1: \$: invalid JSON: nested too deeply"):
        list(import_bfcl(q, answers))
    for args in (["receipts", "import", "--format", "chat", str(chat), "-o", str(tmp_path / "o.jsonl")],
                 ["receipts", "import", "--format", "bfcl", str(q), "--answers", "none", "-o",
                  str(tmp_path / "o.jsonl")]):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 1 and "nested too deeply" in res.output and "Traceback" not in res.output


@pytest.mark.parametrize("depth", [2, 70, 1_100, 20_000])
def test_deeply_nested_tool_output_and_arguments_keep_the_log_importable(tmp_path, airline, depth):
    deep = nested(depth)
    msgs = [{"role": "system", "content": "p"}, {"role": "user", "content": "hi, I am mia_li_3668"},
            tool_call("get_user_details", deep),
            {"role": "tool", "content": deep}, {"role": "assistant", "content": "ok"}]
    rs = list(import_chat(chat_file(tmp_path, conversation(msgs)), policy=airline))
    assert [r.action for r in rs] == ["get_user_details", "respond"]
    assert rs[1].state["last"]["result"] in ("record", "list")
    if depth <= 64:
        assert rs[0].arguments == json.loads(deep) if deep.startswith("{") else rs[0].arguments is None
    else:  # too deep to keep: the call is counted as malformed, the log still imports
        assert rs[0].arguments is None and "arguments_error" in rs[0].meta
    out = tmp_path / "r.jsonl"
    write_file(out, rs)
    assert len(list(read(out, policy=airline))) == 2  # what was written reads back


# ---- the extractor: linear and incremental ------------------------------------------------------

ROLES = st.sampled_from(["user", "assistant", "tool", "system"])
TEXT = st.one_of(st.sampled_from(["", "Error: no", '{"error": "x"}', "[]", "{}", "null", "[1, 2]",
                                  '{"a": 1}', "plain", "my id is mia_li_3668", "ABC123 and XYZ789",
                                  "from JFK to LAX on 2024-05-20", "pay with credit_card_123"]),
                 st.text(max_size=30))
TOOLS = st.sampled_from(["get_user_details", "get_reservation_details", "search_direct_flight", "think"])
ARGS = st.one_of(st.sampled_from(['{"user_id": "mia_li_3668"}', '{"reservation_id": "ABC123"}',
                                  '{"origin": "JFK", "destination": "LAX", "date": "2024-05-20"}',
                                  "not json", "[1]", "", '{"flights": [{"date": "2024-05-20"}]}']),
                 st.dictionaries(st.sampled_from(list(SHAPES)), st.text(max_size=8), max_size=3))


@st.composite
def messages(draw):
    out = []
    for _ in range(draw(st.integers(0, 25))):
        role = draw(ROLES)
        if role == "assistant" and draw(st.booleans()):
            out.append(tool_call(draw(TOOLS), draw(ARGS)))
        else:
            out.append({"role": role, "content": draw(TEXT)})
    return out


@SETTINGS
@given(messages())
def test_incremental_summary_equals_the_extractor_at_every_index(msgs):
    summary = ChatSummary()
    for i, m in enumerate(msgs):
        assert summary.state() == default_extract(msgs, i, {})
        assert default_extract(msgs[:i], i, {}) == default_extract(msgs, i, {})  # blind to the future
        summary.add(m)


def test_extractor_v2_fields():
    msgs = [{"role": "system", "content": "p"},
            {"role": "user", "content": "I am mia_li_3668, reservation ABC123"},   # 1
            tool_call("get_user_details", '{"user_id": "mia_li_3668"}'),           # 2
            {"role": "tool", "content": '{"name": "Mia"}'},                        # 3
            {"role": "assistant", "content": "Which reservation?"},                # 4
            {"role": "user", "content": "ABC123, from JFK to LAX on 2024-05-20"},  # 5
            tool_call("search_direct_flight", {"origin": "JFK", "destination": "SFO", "date": "2024-05-20"}),
            {"role": "tool", "content": "[]"},                                     # 7
            {"role": "assistant", "content": "none"}]                              # 8
    s = default_extract(msgs, 2, {})
    assert s["mentioned"] == {**dict.fromkeys(SHAPES, False), "user_id": True, "reservation_id": True}
    assert s["reused"] == dict.fromkeys(SHAPES, False) and s["recent"] == {} and "result" not in s["last"]
    s = default_extract(msgs, 4, {})
    assert s["reused"]["user_id"] is True and s["last"]["result"] == "record"
    assert s["recent"] == {"action1": "get_user_details"}
    s = default_extract(msgs, 6, {})
    assert s["mentioned"] == {**dict.fromkeys(SHAPES, True), "user_id": False, "payment_id": False}
    assert s["reused"] == dict.fromkeys(SHAPES, False)  # the user id is no longer in the last user message
    assert s["recent"] == {"action1": "respond", "action2": "get_user_details"}
    s = default_extract(msgs, 8, {})
    assert s["last"]["result"] == "empty"
    # origin and date were passed to the search; LAX was not (SFO was)
    assert s["reused"] == {**dict.fromkeys(SHAPES, False), "origin": True, "date": True}


def test_extractor_v3_fields():
    """`unused.<argument>`: an identifier the user gave (in any message so far) that no call passed yet;
    `calls_since_user`: tool calls since the last user message."""
    msgs = [{"role": "system", "content": "p"},
            {"role": "user", "content": "I am mia_li_3668, reservation ABC123"},   # 1
            tool_call("get_user_details", '{"user_id": "mia_li_3668"}'),           # 2
            {"role": "tool", "content": '{"name": "Mia"}'},                        # 3
            tool_call("think", '{"thought": "t"}'),                                # 4
            {"role": "tool", "content": ""},                                       # 5
            {"role": "assistant", "content": "Which flight?"},                     # 6
            {"role": "user", "content": "the one on 2024-05-20"},                  # 7
            tool_call("get_reservation_details", '{"reservation_id": "ABC123"}'),  # 8
            {"role": "tool", "content": "{}"},                                     # 9
            {"role": "assistant", "content": "done"}]                              # 10
    s = default_extract(msgs, 2, {})
    assert s["unused"] == {**dict.fromkeys(SHAPES, False), "user_id": True, "reservation_id": True}
    assert s["calls_since_user"] == 0
    s = default_extract(msgs, 4, {})
    assert s["unused"]["user_id"] is False and s["unused"]["reservation_id"] is True  # the id was looked up
    assert s["calls_since_user"] == 1
    s = default_extract(msgs, 6, {})
    assert s["calls_since_user"] == 2 and s["mentioned"]["reservation_id"] is True
    s = default_extract(msgs, 8, {})
    # ABC123 is no longer in the last user message, but still given and unused; the date is new
    assert s["mentioned"]["reservation_id"] is False and s["unused"]["reservation_id"] is True
    assert s["unused"]["date"] is True and s["calls_since_user"] == 0
    s = default_extract(msgs, 10, {})
    assert s["unused"] == {**dict.fromkeys(SHAPES, False), "date": True} and s["calls_since_user"] == 1


def test_result_kinds():
    kinds = {"Error: x": "error", '{"error": 1}': "error", "": "empty", "  ": "empty", "[]": "empty",
             "{}": "empty", "null": "empty", '""': "empty", "[1]": "list", '{"a": 1}': "record",
             "42.0": "text", "no flights": "text", "[broken": "text", "[" + nested(5000) + "]": "list",
             '{"a": ' + nested(5000) + "}": "record"}
    for content, kind in kinds.items():
        s = default_extract([{"role": "tool", "content": content}], 1, {})
        assert s["last"]["result"] == kind, content
        assert s["last"]["tool_error"] is (kind == "error")


def test_a_40000_message_conversation_imports(tmp_path, airline):
    msgs = [{"role": "system", "content": "p"}]
    for i in range(10_000):
        msgs += [{"role": "user", "content": f"reservation ABC{i % 1000:03d}"},
                 tool_call("get_reservation_details", json.dumps({"reservation_id": f"ABC{i % 1000:03d}"})),
                 {"role": "tool", "content": '{"ok": true}'}, {"role": "assistant", "content": "done"}]
    path = chat_file(tmp_path, conversation(msgs))
    n = sum(1 for _ in import_chat(path, policy=airline))  # linear: a few seconds (O(n²) took > 30 s)
    assert n == 20_000


def test_candidates_read_each_message_once_and_the_same(monkeypatch):
    """The import's memo: every decision of a conversation gets the candidates a fresh read gives,
    and each message in the window is read once (by `id`), however many decisions come after it."""
    rng = random.Random(7)
    msgs = [{"role": "system", "content": "p"}]
    for i in range(200):
        msgs.append(rng.choice([
            {"role": "user", "content": f"my code is ABC{rng.randrange(30):03d} and 4{i}"},
            tool_call("get_reservation_details",
                      json.dumps({"reservation_id": f"ABC{rng.randrange(30):03d}"})),
            {"role": "tool", "content": json.dumps({"id": f"ABC{i % 7}", "n": [i, i + 1]})},
            {"role": "tool", "content": "not json, ref XYZ9"},
            {"role": "assistant", "content": "done"}]))
    memo: dict = {}
    wants = [extract_candidates(msgs[:k]) for k in range(len(msgs) + 1)]
    reads = []
    monkeypatch.setattr(candidates, "_found", lambda m, read=candidates._found: reads.append(id(m))
                        or read(m))
    for k, want in enumerate(wants):
        assert extract_candidates(msgs[max(0, k - WINDOW):k], memo=memo) == want, k
    assert sorted(reads) == sorted(memo) == sorted(id(m) for m in msgs)


# ---- foreign formats and policies ---------------------------------------------------------------

def test_a_chat_log_given_to_check_says_to_import_it(tmp_path):
    path = chat_file(tmp_path, *(conversation([{"role": "user", "content": "hi"}], f"c{i}")
                                 for i in range(50)))
    res = CliRunner().invoke(main, ["receipts", "check", str(path)])
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert res.output.count("this line is a chat log") == 1
    assert "zc receipts import --format chat" in res.output
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"id": "q", "question": [[{"role": "user", "content": "x"}]], "function": []})
                 + "\n")
    with pytest.raises(ReceiptError, match=r"q\.jsonl:1: \$: this line is a function-calling question .* "
                                           r"`zc receipts import --format bfcl"):
        list(read(q))


def test_receipts_of_another_policy_are_reported_once(tmp_path, airline):
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    path = tmp_path / "r.jsonl"
    write_file(path, import_chat(chat_file(tmp_path, *(conversation(msgs, f"c{i}") for i in range(120))),
                                 policy=airline))
    support = zcompile.compile_file(SUPPORT)
    stats = ReadStats()
    assert list(read(path, policy=support, skip_invalid=True, stats=stats)) == []
    assert stats.skipped == 120 and len(stats.problems) == 1
    assert stats.foreign == {airline.sha256: 120}
    assert "$.policy: this receipt was written for another policy" in stats.problems[0]
    res = CliRunner().invoke(main, ["receipts", "check", str(path), "--policy", str(SUPPORT)])
    assert res.exit_code == 1 and res.output.count("written for another policy") == 2  # the line, the count
    assert "120 receipts written for another policy (1 identity) do not match `support_desk`" in res.output
    assert "more problems" not in res.output


# ---- versions -----------------------------------------------------------------------------------

def test_version_is_written_first_and_old_lines_still_read(tmp_path):
    r = Receipt(id="a", task="t", state={}, tier="x")
    line = encode(r)
    assert line.startswith(b'{"version":"' + FORMAT_VERSION.encode() + b'","id":"a"')
    assert msgspec.json.decode(line, type=Receipt) == r
    path = tmp_path / "old.jsonl"
    path.write_text('{"id": "a", "task": "t", "state": {}, "tier": "x"}\n')  # format 1.0: no version
    assert list(read(path)) == [r]


@SETTINGS
@given(st.integers(1, 999), st.dictionaries(st.text(min_size=1, max_size=8).filter(
    lambda k: k not in Receipt.__struct_fields__), st.integers() | st.text(max_size=5), max_size=4))
def test_a_newer_minor_version_is_read_and_a_newer_major_refused(tmp_path, minor, extra):
    line = {"id": "a", "task": "t", "state": {}, "tier": "x", **extra}
    path = tmp_path / "v.jsonl"
    path.write_text(json.dumps({**line, "version": f"1.{minor}"}) + "\n")
    assert [r.id for r in read(path)] == ["a"]  # unknown fields of a newer minor version are ignored
    path.write_text(json.dumps({**line, "version": f"{1 + minor}.0"}) + "\n")
    with pytest.raises(ReceiptError, match=rf"v\.jsonl:1: \$\.version: receipt format {1 + minor}\.0 is "
                                           r"newer"):
        list(read(path))


# ---- arguments ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("raw", "want", "problem"), [
    ('{"a": 1}', {"a": 1}, None), ({"a": [1]}, {"a": [1]}, None), ("", {}, None), ("  ", {}, None),
    (None, None, None), ("{bad", None, "not valid JSON"), ("[1, 2]", None, "a JSON list, not an object"),
    (7, None, "a JSON int, not an object"), (nested(3000), None,
                                             "not valid JSON (invalid JSON: nested too deeply"),
])
def test_call_arguments(raw, want, problem):
    got, why = call_arguments(raw)
    assert got == want
    assert (why is None) if problem is None else problem in why


def test_chat_import_keeps_arguments_and_counts_malformed_ones(tmp_path, airline):
    msgs = [{"role": "user", "content": "I am mia_li_3668"},
            tool_call("get_user_details", '{"user_id": "mia_li_3668"}'),
            {"role": "tool", "content": "{}"},
            tool_call("get_user_details", '{"user_id": '),
            {"role": "tool", "content": "{}"},
            tool_call("get_user_details", '{"user_id": 5}'),
            {"role": "assistant", "content": "done"}]
    src = chat_file(tmp_path, conversation(msgs))
    rs = list(import_chat(src, policy=airline))
    assert [r.arguments for r in rs] == [{"user_id": "mia_li_3668"}, None, {"user_id": 5}, None]
    assert "not valid JSON" in rs[1].meta["arguments_error"] and "arguments_error" not in rs[3].meta
    out = tmp_path / "r.jsonl.gz"
    res = CliRunner().invoke(main, ["receipts", "import", "--format", "chat", str(src), "-o", str(out),
                                    "--policy", str(AIRLINE)])
    assert res.exit_code == 0, res.output
    assert "tool calls with malformed arguments: 1 of 3" in res.output
    assert "the arguments of 1 of 3 tool calls do not fit the action's signature" in res.output
    assert [r.arguments for r in read(out)] == [r.arguments for r in rs]
    assert gzip.decompress(out.read_bytes()).startswith(b'{"version":')


def test_bfcl_import_keeps_the_answer_arguments(tmp_path):
    q = tmp_path / "q.json"
    q.write_text(json.dumps({"id": "q_0", "question": [[{"role": "user", "content": "area?"}]],
                             "function": [{"name": "area", "parameters": {}}]}) + "\n")
    a = tmp_path / "a.json"
    a.write_text(json.dumps({"id": "q_0", "ground_truth": [{"area": {"base": [10], "unit": ["units", ""],
                                                                    "z": ["", 0]}}]}) + "\n")
    (r,) = import_bfcl(q, a)
    assert r.action == "area" and r.arguments == {"base": 10}  # what may be left out is left out
    assert r.meta["possible_arguments"] == {"base": [10], "unit": ["units", ""], "z": ["", 0]}
    a.write_text(json.dumps({"id": "q_0", "ground_truth": [{"area": "not a dict"}]}) + "\n")
    (r,) = import_bfcl(q, a)
    assert r.action == "area" and r.arguments is None


# ---- generated garbage --------------------------------------------------------------------------

JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                       | st.text(max_size=6), lambda c: st.lists(c, max_size=3)
                       | st.dictionaries(st.text(max_size=6), c, max_size=3), max_leaves=12)
FIELDS = st.fixed_dictionaries({}, optional={
    "id": JSONISH, "task": JSONISH, "state": JSONISH, "tier": JSONISH, "version": JSONISH,
    "messages": JSONISH, "legal": JSONISH, "confidence": JSONISH, "arguments": JSONISH})


@SETTINGS
@given(st.lists(FIELDS.map(json.dumps).map(str.encode) | st.binary(max_size=40), min_size=1, max_size=6))
def test_generated_lines_give_receipts_or_named_errors(tmp_path, lines):
    path = tmp_path / "g.jsonl"
    path.write_bytes(b"\n".join(lines))
    stats = ReadStats()
    got = list(read(path, skip_invalid=True, stats=stats))
    assert stats.valid == len(got) and stats.skipped == len(stats.problems)
    assert stats.valid + stats.skipped - stats.read in (0, 1)  # (1: a corrupt gzip stream, not a line)
    assert all(p.startswith(f"{path}:") and ": $" in p for p in stats.problems)


@SETTINGS
@given(st.lists(st.fixed_dictionaries({"id": st.text(max_size=4), "messages": st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool", "robot"])},
                          optional={"content": JSONISH, "tool_calls": JSONISH}), max_size=5)}), min_size=1,
                max_size=3))
def test_generated_chat_logs_import_or_give_named_errors(tmp_path, convs):
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in convs))
    try:
        rs = list(import_chat(path))
    except ReceiptError as exc:
        assert str(exc).startswith(f"{path}:")
    else:
        write_file(tmp_path / "out.jsonl", rs)
        assert len(list(read(tmp_path / "out.jsonl"))) == len(rs)


# ---- the airline policy declares exactly what the extractor computes ------------------------------

def _leaves(obj: dict, prefix: str = "") -> set[str]:
    out = set()
    for k, v in obj.items():
        out |= _leaves(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k}
    return out


def test_airline_chat_state_is_exactly_the_extractor_state(airline):
    msgs = [{"role": "system", "content": "p"}, {"role": "user", "content": "I am mia_li_3668"},
            tool_call("get_user_details", '{"user_id": "mia_li_3668"}'), {"role": "tool", "content": "{}"},
            {"role": "assistant", "content": "ok"}, {"role": "user", "content": "bye"}]
    state = default_extract(msgs, 6, {})
    airline.legal(state, strict=True)  # every key the extractor writes is declared
    declared = {f.path for f in airline.ir.fields} - {"history"}
    assert _leaves(state) - {"history"} == declared  # and every declared field is written
    text_args = {p.name for a in airline.ir.actions for p in (a.params or ()) if p.kind == "text"}
    assert set(SHAPES) <= text_args  # each shape belongs to an argument the signatures declare
    assert "reply" in next(a.tags for a in airline.ir.actions if a.name == "respond")


# ---- the one msgspec-error translation ----------------------------------------------------------

class _Shape(msgspec.Struct, forbid_unknown_fields=True):
    a: int
    b: dict[str, int] = {}


@pytest.mark.parametrize(("data", "text", "kind"), [
    (b'{"b": {}}', "$.a: required field is missing", "missing"),
    (b'{"a": 1, "c": 2}', "$.c: unknown field", "unknown"),
    (b'{"a": 1, "c.d": 2}', '$["c.d"]: unknown field', "unknown"),  # a flat key never reads as nested
    (b'{"a": 1, "": 2}', '$[""]: unknown field', "unknown"),
    (b'{"a": "x"}', "$.a: expected `int`, got `str`", "invalid"),
    (b'{"a": 1, "b": {"k": []}}', "$.b[...]: expected `int`, got `array`", "invalid"),
    (b'{"a": 1', "$: invalid JSON: the input ends before the JSON value is complete", "truncated"),
    (b'{"a": 1,, }', "$: invalid JSON: ", "json"),
    (b'[' + nested(5000).encode() + b']', "$: invalid JSON: nested too deeply", "depth"),
])
def test_json_problem(data, text, kind):
    from zcompile.errors import json_problem

    with pytest.raises((msgspec.DecodeError, RecursionError)) as exc:  # untyped: nesting is reached
        msgspec.json.decode(data, type=_Shape) if kind != "depth" else msgspec.json.decode(data)
    p = json_problem(exc.value)
    assert str(p).startswith(text) and p.kind == kind
    if kind in ("missing", "unknown"):
        assert p.path.endswith(("." + p.field, f"[{json.dumps(p.field)}]"))


def test_json_problem_non_string_key():
    from zcompile.errors import json_problem

    with pytest.raises(msgspec.ValidationError) as exc:
        msgspec.convert({"a": 1, "b": {1: 2}}, _Shape, strict=True)
    assert str(json_problem(exc.value)) == "$.b: object keys must be strings"


def test_receipts_given_to_the_chat_importer_say_so(tmp_path):
    path = tmp_path / "r.jsonl"
    write_file(path, [Receipt(id="a", task="t", state={}, tier="x")])
    with pytest.raises(ReceiptError, match=r"r\.jsonl:1: \$: this line is a receipt already, not a chat log: "
                                           r"check the file with `zc receipts check`"):
        list(import_chat(path))
    path.write_text('{"id": "c", "messages": [{"role": "robot"}]}\n')  # other problems are unchanged
    with pytest.raises(ReceiptError, match=r'\$\.messages\[0\]\.role: unknown role "robot"'):
        list(import_chat(path))


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".parquet"])
def test_an_output_of_no_receipts_is_ours_to_replace(tmp_path, suffix):
    """`write_file` of zero receipts writes a gzip stream or a Parquet file with no rows: a later
    `convert` or `import` to the same name replaces it (only a stranger's file is refused)."""
    pytest.importorskip("pyarrow")
    (tmp_path / "none.jsonl").write_text("")
    one = tmp_path / "one.jsonl"
    write_file(one, [Receipt(id="a", task="t", state={}, tier="x")])
    out = tmp_path / f"out{suffix}"
    for src, n in (("none.jsonl", 0), ("one.jsonl", 1)):
        res = CliRunner().invoke(main, ["receipts", "convert", str(tmp_path / src), "-o", str(out)])
        assert res.exit_code == 0, res.output
        assert [r.id for r in read(out)] == ["a"] * n
    notes = tmp_path / "notes.jsonl.gz"
    notes.write_bytes(gzip.compress(b"my notes\n"))
    res = CliRunner().invoke(main, ["receipts", "convert", str(one), "-o", str(notes)])
    assert res.exit_code == 1 and "exists and is not a receipts file; refusing to overwrite it" in res.output
    assert gzip.decompress(notes.read_bytes()) == b"my notes\n"


def test_a_utf8_byte_order_mark_is_ignored(tmp_path, airline):
    """Editors on Windows start UTF-8 files with a byte-order mark; JSON readers may ignore it (RFC
    8259 §8.1), and every receipt, chat-log and function-calling reader does."""
    bom = b"\xef\xbb\xbf"
    path = tmp_path / "r.jsonl"
    path.write_bytes(bom + encode(Receipt(id="a", task="t", state={}, tier="x")))
    res = CliRunner().invoke(main, ["receipts", "check", str(path)])
    assert res.exit_code == 0 and "receipts: 1 (valid 1, skipped 0)" in res.output, res.output
    chat = tmp_path / "c.jsonl"
    chat.write_bytes(bom + json.dumps(conversation([{"role": "user", "content": "hi"},
                                                    {"role": "assistant", "content": "hello"}])).encode()
                     + b"\n")
    assert [r.action for r in import_chat(chat, policy=airline)] == ["respond"]
    # only at the start
    path.write_bytes(encode(Receipt(id="a", task="t", state={}, tier="x")) + bom + b"{}\n")
    with pytest.raises(ReceiptError, match=r"r\.jsonl:2: \$: invalid JSON"):
        list(read(path))


@pytest.mark.parametrize("where", ["line", "meta"])
def test_a_receipt_nested_2000_deep_is_reported_once(tmp_path, where):
    """`zc receipts check` names the line once on stderr, with its newline (issue 40, part 9)."""
    import subprocess
    import sys

    deep = "[" * 2000 + "]" * 2000
    line = ('{"a":' * 2000 + "1" + "}" * 2000 if where == "line"
            else '{"id":"a","task":"t","state":{},"tier":"x","ts":1,"meta":{"x":' + deep + "}}")
    f = tmp_path / "deep.jsonl"
    f.write_text(line + "\n")
    run = subprocess.run([sys.executable, "-m", "zcompile", "receipts", "check", str(f)], capture_output=True,
                         text=True, cwd=ROOT, timeout=60)
    assert run.returncode == 1
    assert run.stderr.count("nested too deeply") == 1 and run.stderr.endswith("levels)\n"), run.stderr
    assert "Traceback" not in run.stderr
