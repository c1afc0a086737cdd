"""Receipts: reading and appending JSONL(.gz), bad lines with `file:line: $.path`, chat import, CLI."""

from __future__ import annotations

import gzip
import json
import threading
import tracemalloc
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner

import zcompile
from zcompile import ZcError
from zcompile.cli import main
from zcompile.receipts import (
    EXTRACT_VERSION,
    SHAPES,
    ReadStats,
    Receipt,
    ReceiptError,
    ReceiptWriter,
    default_extract,
    import_chat,
    load_extractor,
    read,
    write_file,
)

ROOT = Path(__file__).parents[1]
AIRLINE = ROOT / "policies" / "airline_chat.zc"
BUNDLED = ROOT / "receipts" / "tau-airline-gpt4o.jsonl.gz"
SUPPORT = Path(__file__).parent / "golden" / "ok" / "support_desk.zc"
SUPPORT_STATE = {"user": {"role": "customer", "verified": True}, "budget": {"units": 3}}


def receipt(i: int = 0, **kw) -> Receipt:
    base = dict(id=f"r{i}", task=f"t{i % 7}", state={"user": {"role": "customer"}, "budget": {"units": 3}},
                tier="remote", action="get_order")
    base.update(kw)
    return Receipt(**base)


@pytest.fixture(scope="module")
def airline():
    return zcompile.compile_file(AIRLINE)


@pytest.fixture(scope="module")
def support():
    return zcompile.compile_file(SUPPORT)


@pytest.fixture
def runner():
    return CliRunner()


# ---- reading and writing ------------------------------------------------------------------------

def test_round_trip_write_then_read(tmp_path):
    path = tmp_path / "r.jsonl"
    rs = [receipt(0), receipt(1, ts=1.5, policy="ab" * 32, intent="cancel", legal=("get_order", "escalate"),
                               model="gpt-4o", confidence=0.75, latency_ms=12.0, cost=3.0, verified=True,
                               gold="get_order", meta={"k": [1, 2]}),
          receipt(2, action=None, verified=False)]
    with ReceiptWriter(path) as w:
        for r in rs:
            w.append(r)
    assert list(read(path)) == rs
    lines = path.read_bytes().split(b"\n")
    assert len(lines) == 4 and lines[-1] == b""
    assert b"\"ts\"" not in lines[0] and b"\"meta\"" not in lines[0]  # defaults are omitted


def test_gzip_is_detected_by_magic_bytes_not_name(tmp_path):
    rs = [receipt(i) for i in range(5)]
    gz = tmp_path / "r.jsonl.gz"
    assert write_file(gz, rs) == 5
    assert gz.read_bytes()[:2] == b"\x1f\x8b"
    assert list(read(gz)) == rs
    disguised = tmp_path / "plain-name.jsonl"
    disguised.write_bytes(gz.read_bytes())
    assert list(read(disguised)) == rs


def test_write_file_is_deterministic_and_leaves_nothing_on_error(tmp_path):
    a, b = tmp_path / "a.jsonl.gz", tmp_path / "b.jsonl.gz"
    write_file(a, [receipt(i) for i in range(3)])
    write_file(b, [receipt(i) for i in range(3)])
    assert a.read_bytes() == b.read_bytes()

    def boom():
        yield receipt(0)
        raise ReceiptError("stop")

    with pytest.raises(ReceiptError):
        write_file(tmp_path / "c.jsonl", boom())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl.gz", "b.jsonl.gz"]


def test_directory_reads_every_receipt_file_sorted(tmp_path):
    write_file(tmp_path / "b.jsonl", [receipt(2)])
    write_file(tmp_path / "a.jsonl.gz", [receipt(1)])
    (tmp_path / "README.md").write_text("not receipts")
    assert [r.id for r in read(tmp_path)] == ["r1", "r2"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReceiptError, match="no receipt files"):
        read(tmp_path / "empty")


def test_blank_lines_are_skipped_and_line_numbers_kept(tmp_path):
    path = tmp_path / "r.jsonl"
    line = msgspec.json.encode(receipt(0)).decode()
    path.write_text(f"\n{line}\n\n   \n{{\"id\": \"x\"}}\n")
    stats = ReadStats()
    with pytest.raises(ReceiptError, match=r"r\.jsonl:5: \$\.task: required field is missing"):
        list(read(path, stats=stats))
    assert stats.read == 2 and stats.valid == 1


def test_torn_last_line_is_reported_with_its_line_number(tmp_path):
    path = tmp_path / "r.jsonl"
    good = [msgspec.json.encode(receipt(i)).decode() for i in range(3)]
    path.write_text("\n".join(good) + "\n" + good[0][:25])
    with pytest.raises(ReceiptError) as exc:
        list(read(path))
    assert str(exc.value) == f"{path}:4: $: torn last line (the writer stopped mid-line)"
    stats = ReadStats()
    assert len(list(read(path, skip_invalid=True, stats=stats))) == 3
    assert (stats.read, stats.valid, stats.skipped) == (4, 3, 1)
    assert stats.problems == [f"{path}:4: $: torn last line (the writer stopped mid-line)"]


def test_complete_last_line_without_newline_is_valid(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(msgspec.json.encode(receipt(0)))
    assert [r.id for r in read(path)] == ["r0"]


def test_crash_mid_append_then_a_new_writer_loses_nothing(tmp_path):
    path = tmp_path / "live.jsonl"
    with ReceiptWriter(path) as w:
        for i in range(3):
            w.append(receipt(i))
    with open(path, "ab") as fh:  # a writer that died halfway through its line
        fh.write(msgspec.json.encode(receipt(3))[:30])
    with pytest.raises(ReceiptError, match=r"live\.jsonl:4: \$: torn last line"):
        list(read(path))
    with ReceiptWriter(path) as w:  # the next writer must not merge its line into the torn one
        w.append(receipt(4))
    stats = ReadStats()
    assert [r.id for r in read(path, skip_invalid=True, stats=stats)] == ["r0", "r1", "r2", "r4"]
    assert stats.skipped == 1 and stats.problems[0].startswith(f"{path}:4: $: torn line (a writer stopped")


def test_truncated_gzip_is_an_error(tmp_path):
    gz = tmp_path / "r.jsonl.gz"
    write_file(gz, [receipt(i) for i in range(200)])
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gz.read_bytes()[:-40])
    with pytest.raises(ReceiptError, match="gzip stream ends early"):
        list(read(cut))
    stats = ReadStats()
    list(read(cut, skip_invalid=True, stats=stats))
    assert stats.skipped == 1 and "gzip stream ends early" in stats.problems[0]


@pytest.mark.parametrize(("line", "problem"), [
    ('{"id": 1, "task": "t", "state": {}, "tier": "remote"}', "$.id: expected `str`, got `int`"),
    ('{"id": "a", "task": "t", "state": [], "tier": "remote"}', "$.state: expected `object`, got `array`"),
    ('{"id": "a", "task": "t", "state": {}}', "$.tier: required field is missing"),
    ('{"id": "a", "task": "t", "state": {}, "tier": "x", "legal": ["a", 2]}',
     "$.legal[1]: expected `str`, got `int`"),
    ('{"id": "a", "task": "t", "state": {}, "tier": "x", "confidence": 1.5}',
     "$.confidence: expected `float` <= 1"),
    ('{"id": "a", "task": "t", "state": {}, "tier": "x", "latency_ms": -1}',
     "$.latency_ms: expected `float` >= 0"),
    ('{"id": "a", "task": "t", "state": {}, "tier": "x", "verified": "yes"}',
     "$.verified: expected `bool | null`, got `str`"),
    ('{"id": "a", "task": "t", "state": {}, "tier": "x", "version": "1"}',
     "$.version: expected `str` matching"),
    ('{"version": "2.0", "id": "a", "task": "t", "state": {}, "tier": "x"}',
     "$.version: receipt format 2.0 is newer than this zc reads (1.x): upgrade zcompile"),
    ('{"version": "9.3", "id": 5, "shape": "new"}', "$.version: receipt format 9.3 is newer than this zc "
                                                    "reads"),
    ('["not", "an", "object"]', "$: expected `object`, got `array`"),
    ('{"id": "a",, }', "$: invalid JSON"),
])
def test_wrong_types_name_their_path(tmp_path, line, problem):
    path = tmp_path / "bad.jsonl"
    path.write_text(receipt_line() + "\n" + line + "\n")
    with pytest.raises(ReceiptError) as exc:
        list(read(path))
    assert str(exc.value).startswith(f"{path}:2: {problem}")


def receipt_line() -> str:
    return msgspec.json.encode(receipt(0)).decode()


def test_skip_invalid_counts_and_caps_problems(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(["{}"] * 150 + [receipt_line()]) + "\n")
    stats = ReadStats()
    assert len(list(read(path, skip_invalid=True, stats=stats))) == 1
    assert (stats.read, stats.valid, stats.skipped, len(stats.problems)) == (151, 1, 150, 100)


def test_against_a_policy_unknown_actions_and_bad_states(tmp_path, support):
    rows = [
        (receipt(0, state=SUPPORT_STATE), None),
        (receipt(1, state=SUPPORT_STATE, action="cancel_ordr"), '$.action: unknown action "cancel_ordr"'),
        (receipt(2, state=SUPPORT_STATE, gold="nope"), '$.gold: unknown action "nope"'),
        (receipt(3, state=SUPPORT_STATE, legal=("get_order", "x")), '$.legal[1]: unknown action "x"'),
        (receipt(4, state={"user": {"role": "root"}, "budget": {"units": 1}}),
         '$.state.user.role: expected one of customer|agent|admin, got "root"'),
        (receipt(5, state={"user": {"role": "agent", "verified": True}}),
         "$.state.budget: required field is missing"),
        (receipt(6, state=SUPPORT_STATE, intent="nope"), "$.intent: unknown intent `nope`"),
    ]
    path = tmp_path / "r.jsonl"
    write_file(path, [r for r, _ in rows])
    stats = ReadStats()
    got = list(read(path, policy=support, skip_invalid=True, stats=stats))
    assert [r.id for r in got] == ["r0"]
    for (_, want), problem in zip(rows[1:], stats.problems):
        assert problem.startswith(f"{path}:{int(problem.split(':')[1])}: {want}")
    assert [int(p.split(":")[1]) for p in stats.problems] == [2, 3, 4, 5, 6, 7]
    with pytest.raises(ReceiptError, match=r":2: \$\.action: unknown action"):
        list(read(path, policy=support))
    assert len(list(read(path))) == 7  # without a policy, names are not checked


def test_empty_file_is_zero_receipts_and_no_paths_is_an_error(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    stats = ReadStats()
    assert list(read(empty, stats=stats)) == [] and stats.files == 1 and stats.read == 0
    gz = tmp_path / "empty.jsonl.gz"
    write_file(gz, [])
    assert list(read(gz)) == []
    with pytest.raises(ReceiptError, match="no receipt files given"):
        read([])
    with pytest.raises(ReceiptError, match="cannot read"):
        list(read(tmp_path / "missing.jsonl"))


def test_100k_lines_are_streamed_not_loaded(tmp_path):
    path = tmp_path / "big.jsonl"
    line = msgspec.json.encode(receipt(0, meta={"pad": "x" * 200})) + b"\n"
    with open(path, "wb") as fh:
        for _ in range(100):
            fh.write(line * 1000)
    size = path.stat().st_size
    assert size > 25_000_000
    tracemalloc.start()
    try:
        n = 0
        for _ in read(path):
            n += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert n == 100_000
    assert peak < size / 5, (peak, size)
    assert peak < 2_000_000


def test_threads_append_without_losing_or_corrupting_lines(tmp_path):
    path = tmp_path / "live.jsonl"
    writer = ReceiptWriter(path)
    barrier = threading.Barrier(8)

    def work(t: int) -> None:
        barrier.wait()
        for i in range(500):
            writer.append(receipt(i, id=f"{t}:{i}", meta={"pad": "y" * (i % 97)}))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    writer.close()
    ids = [r.id for r in read(path)]
    assert len(ids) == 4000 and set(ids) == {f"{t}:{i}" for t in range(8) for i in range(500)}
    with pytest.raises(ReceiptError, match="closed"):
        writer.append(receipt(0))


def test_writer_refuses_gzip(tmp_path):
    with pytest.raises(ReceiptError, match="cannot append to a gzip file"):
        ReceiptWriter(tmp_path / "r.jsonl.gz")


def test_fsync_writer(tmp_path):
    with ReceiptWriter(tmp_path / "r.jsonl", fsync=True) as w:
        w.append(receipt(0))
    assert [r.id for r in read(tmp_path / "r.jsonl")] == ["r0"]


# ---- chat import --------------------------------------------------------------------------------

def call(name: str) -> dict:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": name, "arguments": "{}"}}]}


CONVERSATION = {
    "id": "conv-1", "task": "airline-9", "trial": 2, "reward": 1.0, "model": "gpt-4o",
    "messages": [
        {"role": "system", "content": "policy text"},                                     # 0
        {"role": "user", "content": "I want to cancel."},                                 # 1
        {"role": "assistant", "content": "Your user id?"},                                # 2
        {"role": "user", "content": "mia_1"},                                             # 3
        call("get_user_details"),                                                         # 4
        {"role": "tool", "name": "get_user_details", "content": "Error: user not found"},  # 5
        call("get_user_details"),                                                         # 6
        {"role": "tool", "name": "get_user_details", "content": "{\"name\": \"Mia\"}"},   # 7
        call("get_reservation_details"),                                                  # 8
        {"role": "tool", "name": "get_reservation_details", "content": "{\"error\": \"x\"}"},  # 9
        {"role": "assistant", "content": "Cancel ABC, yes?"},                             # 10
        {"role": "user", "content": "yes"},                                               # 11
        call("cancel_reservation"),                                                       # 12
        {"role": "tool", "name": "cancel_reservation", "content": "z" * 2500},            # 13
        {"role": "assistant", "content": "Done."},                                        # 14
    ],
}


NO_SHAPES = {"mentioned": dict.fromkeys(SHAPES, False), "reused": dict.fromkeys(SHAPES, False),
             "unused": dict.fromkeys(SHAPES, False)}
NO_CUES = dict.fromkeys(("create", "change", "cancel", "existing", "lookup", "question", "affirm"), False)


def test_default_extract_every_field():
    msgs = CONVERSATION["messages"]
    assert default_extract(msgs, 2, CONVERSATION) == {
        "prev": {"role": "user"},
        "last": {"tool_error": False, "user_text": "I want to cancel."}, "recent": {}, **NO_SHAPES,
        "request": {**NO_CUES, "cancel": True},
        "turn": 0, "user_turns": 1, "tool_calls": 0, "calls_since_user": 0, "history": []}
    assert default_extract(msgs, 6, CONVERSATION) == {
        "prev": {"role": "tool"},
        "last": {"tool": "get_user_details", "tool_error": True, "user_text": "mia_1", "result": "error",
                 "tool_text": "Error: user not found", "assistant_text": "Your user id?"},
        "recent": {"action1": "get_user_details", "action2": "respond"}, **NO_SHAPES, "request": NO_CUES,
        "turn": 2, "user_turns": 2, "tool_calls": 1, "calls_since_user": 1, "history": ["get_user_details"]}
    assert default_extract(msgs, 10, CONVERSATION) == {
        "prev": {"role": "tool"},
        "last": {"tool": "get_reservation_details", "tool_error": True, "user_text": "mia_1",
                 "result": "error", "tool_text": "{\"error\": \"x\"}", "assistant_text": "Your user id?"},
        "recent": {"action1": "get_reservation_details", "action2": "get_user_details"}, **NO_SHAPES,
        "request": NO_CUES,
        "turn": 4, "user_turns": 2, "tool_calls": 3, "calls_since_user": 3,
        "history": ["get_user_details", "get_reservation_details"]}
    assert default_extract(msgs, 14, CONVERSATION) == {
        "prev": {"role": "tool"},
        "last": {"tool": "cancel_reservation", "tool_error": False, "user_text": "yes", "result": "text",
                 "tool_text": "z" * 2000, "assistant_text": "Cancel ABC, yes?"},
        "recent": {"action1": "cancel_reservation", "action2": "respond"}, **NO_SHAPES,
        "request": {**NO_CUES, "affirm": True},
        "turn": 6, "user_turns": 3, "tool_calls": 4, "calls_since_user": 1,
        "history": ["get_user_details", "get_reservation_details", "cancel_reservation"]}


def test_extractor_never_looks_at_the_current_or_later_messages():
    msgs = CONVERSATION["messages"]
    for i, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        whole = default_extract(msgs, i, CONVERSATION)
        assert default_extract(msgs[:i], i, CONVERSATION) == whole
        altered = msgs[:i] + [call("book_reservation"), {"role": "user", "content": "other"}]
        assert default_extract(altered, i, {**CONVERSATION, "messages": altered}) == whole


def test_extractor_on_the_bundled_source_is_blind_to_the_future():
    src = ROOT.parent / "shared" / "data" / "receipts" / "tau-airline-gpt4o.chat.jsonl"
    if not src.exists():
        pytest.skip(f"{src} is not available")
    with open(src) as fh:
        for _, line in zip(range(10), fh):
            conv = json.loads(line)
            msgs = conv["messages"]
            for i, m in enumerate(msgs):
                if m["role"] == "assistant":
                    assert default_extract(msgs[:i], i, conv) == default_extract(msgs, i, conv)


def write_chat(tmp_path: Path, *convs: dict, name: str = "chat.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(c) + "\n" for c in convs))
    return path


def test_import_chat_receipts(tmp_path, airline):
    path = write_chat(tmp_path, CONVERSATION, {**CONVERSATION, "id": "conv-2", "reward": 0.0,
                                               "messages": CONVERSATION["messages"][:3]},
                      {k: v for k, v in CONVERSATION.items() if k not in ("task", "reward")})
    rs = list(import_chat(path, policy=airline))
    assert [r.action for r in rs[:6]] == ["respond", "get_user_details", "get_user_details",
                                          "get_reservation_details", "respond", "cancel_reservation"]
    first = rs[0]
    assert first.id == "conv-1:2" and first.task == "airline-9" and first.tier == "remote"
    assert first.ts is None and first.model == "gpt-4o" and first.verified is True and first.gold is None
    assert first.meta == {"conversation": "conv-1", "trial": 2, "reward": 1.0, "turn": 2,
                          "extractor": f"zcompile.receipts:default_extract@{EXTRACT_VERSION}"}
    assert first.policy == airline.sha256
    assert first.legal == airline.legal(first.state).actions
    assert first.state == default_extract(CONVERSATION["messages"], 2, CONVERSATION)
    assert rs[5].id == "conv-1:12" and "cancel_reservation" in rs[5].legal
    assert rs[7].id == "conv-2:2" and rs[7].verified is None and rs[7].meta["reward"] == 0.0
    assert rs[8].task == "conv-1" and rs[8].verified is None  # no task: the id; no reward: None
    plain = list(import_chat(path))
    assert plain[0].legal is None and plain[0].policy == ""


@pytest.mark.parametrize("role, problem", [
    ("wizard", 'unknown role "wizard": expected one of system|developer|user|assistant|tool'),
    ("Assistant", 'unknown role "Assistant": expected one of system|developer|user|assistant|tool '
                  "(did you mean `assistant`?)"),
    ("ro'b\"ot", 'unknown role "ro\'b\\"ot": expected one of system|developer|user|assistant|tool'),
    (5, "expected a role (one of system|developer|user|assistant|tool), got `int`"),
    (None, "expected a role (one of system|developer|user|assistant|tool), got `null`"),
])
def test_import_chat_refuses_an_unknown_role_naming_the_roles(tmp_path, role, problem):
    """`zc receipts import --format chat`: a message of a role the importer does not know is refused
    at `FILE:LINE: $.messages[i].role`, naming the roles it knows; nothing is written."""
    conv = {**CONVERSATION, "messages": CONVERSATION["messages"][:2] + [{"role": role, "content": "x"}]
            + CONVERSATION["messages"][2:3]}
    path = write_chat(tmp_path, CONVERSATION, conv)
    out = tmp_path / "out.jsonl"
    res = CliRunner().invoke(main, ["receipts", "import", "--format", "chat", str(path), "-o", str(out)])
    assert res.exit_code == 1, res.output
    assert res.stderr.strip() == f"error: {path}:2: $.messages[2].role: {problem}"
    assert not out.exists()


@pytest.mark.parametrize("conv, problem", [
    ({"id": "c", "messages": [{"role": "assistant", "tool_calls": [{"function": {"name": ""}}]}]},
     "$.messages[0].tool_calls[0].function.name: expected `str` of length >= 1"),
    ({"id": "", "messages": [{"role": "assistant", "content": "x"}]}, "$.id: expected `str` of length >= 1"),
])
def test_import_chat_refuses_an_empty_tool_name_or_conversation_id(tmp_path, conv, problem):
    """A call without a name is no decision, and a conversation without an id gives receipts no
    task to split by: both are refused where they are, not written as action "" or task ""."""
    path = write_chat(tmp_path, CONVERSATION, conv)
    with pytest.raises(ReceiptError) as exc:
        list(import_chat(path))
    assert str(exc.value) == f"{path}:2: {problem}"


def test_import_chat_malformed_conversations(tmp_path, airline):
    bad_role = {**CONVERSATION, "messages": CONVERSATION["messages"][:3]
                + [{"role": "robot", "content": "x"}]}
    path = write_chat(tmp_path, CONVERSATION, bad_role)
    with pytest.raises(ReceiptError) as exc:
        list(import_chat(path))
    assert str(exc.value) == (f"{path}:2: $.messages[3].role: unknown role \"robot\": expected one of "
                              "system|developer|user|assistant|tool")
    path = write_chat(tmp_path, {"id": "x"}, name="b.jsonl")
    with pytest.raises(ReceiptError, match=r"b\.jsonl:1: \$\.messages: required field is missing"):
        list(import_chat(path))
    unknown = {**CONVERSATION, "messages": CONVERSATION["messages"][:4] + [call("get_flight_status")]}
    path = write_chat(tmp_path, unknown, name="c.jsonl")
    with pytest.raises(ReceiptError, match=r'c\.jsonl:1: \$\.messages\[4\]\.tool_calls\[0\]\.function\.name: '
                                           r'unknown action "get_flight_status"'):
        list(import_chat(path, policy=airline))
    torn = tmp_path / "d.jsonl"
    torn.write_text(json.dumps(CONVERSATION) + "\n" + json.dumps(CONVERSATION)[:50])
    with pytest.raises(ReceiptError, match=r"d\.jsonl:2: \$: torn last line"):
        list(import_chat(torn))


def test_import_chat_with_a_custom_extractor(tmp_path, airline):
    path = write_chat(tmp_path, CONVERSATION)
    rs = list(import_chat(path, extract=lambda m, i, c: {"n": i}))
    assert rs[0].state == {"n": 2}
    with pytest.raises(ReceiptError, match=r"chat\.jsonl:1: \$\.messages\[2\]: extracted state does not "
                                           r"match policy `airline_chat`: \$\.prev: required field is "
                                           r"missing"):
        list(import_chat(path, extract=lambda m, i, c: {"n": i}, policy=airline))
    with pytest.raises(ReceiptError, match=r"\$\.messages\[2\]: the state extractor failed: "
                                           r"ZeroDivisionError"):
        list(import_chat(path, extract=lambda m, i, c: 1 / 0))
    with pytest.raises(ReceiptError, match="returned list, expected a dict"):
        list(import_chat(path, extract=lambda m, i, c: []))


def test_load_extractor(tmp_path, monkeypatch):
    assert load_extractor("zcompile.receipts:default_extract") is default_extract
    for spec, message in [("nocolon", "not of the form `module:function`"),
                          ("no_such_module_zc:f", "cannot import module `no_such_module_zc`"),
                          ("zcompile.receipts:nope", "has no attribute `nope`"),
                          ("zcompile.receipts:TOOL_TEXT_LIMIT", "is not callable")]:
        with pytest.raises(ZcError, match=message):
            load_extractor(spec)
    (tmp_path / "myextract.py").write_text("def f(messages, index, conversation):\n    return {'i': index}\n")
    (tmp_path / "broken_ext.py").write_text("raise RuntimeError('nope')\n")
    monkeypatch.chdir(tmp_path)
    assert load_extractor("myextract:f")([], 3, {}) == {"i": 3}
    with pytest.raises(ZcError, match="importing `broken_ext` failed: RuntimeError: nope"):
        load_extractor("broken_ext:f")


# ---- the CLI ------------------------------------------------------------------------------------

def test_cli_check_counts(runner, tmp_path):
    path = tmp_path / "r.jsonl"
    write_file(path, [receipt(0), receipt(1, action="escalate", verified=True), receipt(2, tier="small")])
    res = runner.invoke(main, ["receipts", "check", str(path)])
    assert res.exit_code == 0, res.output
    assert res.output == ("files: 1\nreceipts: 3 (valid 3, skipped 0)\ntiers: remote 2, small 1\n"
                          "actions (top 10): get_order 2, escalate 1\nverified: true 1, false 0, none 2\n"
                          "tasks: 3\n")


def test_cli_check_invalid_lines(runner, tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(receipt_line() + '\n{"id": "x"}\n' + receipt_line()[:20])
    res = runner.invoke(main, ["receipts", "check", str(path)])
    assert res.exit_code == 1
    assert f"{path}:2: $.task: required field is missing" in res.output
    assert f"{path}:3: $: torn last line (the writer stopped mid-line)" in res.output
    assert "receipts: 3 (valid 1, skipped 2)" in res.output and "Traceback" not in res.output
    res = runner.invoke(main, ["receipts", "check", "--skip-invalid", str(path)])
    assert res.exit_code == 0 and "receipts: 3 (valid 1, skipped 2)" in res.output
    only_bad = tmp_path / "bad.jsonl"
    only_bad.write_text('{"id": 5}\n')
    assert runner.invoke(main, ["receipts", "check", "--skip-invalid", str(only_bad)]).exit_code == 1


def test_cli_check_with_policy(runner, tmp_path):
    path = tmp_path / "r.jsonl"
    write_file(path, [receipt(0, state=SUPPORT_STATE), receipt(1, state=SUPPORT_STATE, action="x")])
    res = runner.invoke(main, ["receipts", "check", str(path), "--policy", str(SUPPORT)])
    assert res.exit_code == 1 and f'{path}:2: $.action: unknown action "x"' in res.output


def test_cli_check_empty_and_usage(runner, tmp_path):
    empty = tmp_path / "e.jsonl"
    empty.write_text("")
    res = runner.invoke(main, ["receipts", "check", str(empty)])
    assert res.exit_code == 0 and "receipts: 0 (valid 0, skipped 0)" in res.output
    assert runner.invoke(main, ["receipts", "check"]).exit_code == 2
    res = runner.invoke(main, ["receipts", "check", str(tmp_path / "missing.jsonl")])
    assert res.exit_code == 1 and "cannot read" in res.output and "Traceback" not in res.output


def test_cli_import(runner, tmp_path):
    src = write_chat(tmp_path, CONVERSATION)
    out = tmp_path / "out" / "r.jsonl.gz"
    res = runner.invoke(main, ["receipts", "import", "--format", "chat", str(src), "-o", str(out),
                               "--policy", str(AIRLINE)])
    assert res.exit_code == 0, res.output
    assert f"imported 1 conversation from {src} -> 7 receipts in {out}" in res.output
    assert ("actions: respond 3, get_user_details 2, get_reservation_details 1, cancel_reservation "
            "1") in res.output
    assert "policy airline_chat: 0 of 7 logged actions are outside the legal set" in res.output
    assert out.read_bytes()[:2] == b"\x1f\x8b" and gzip.decompress(out.read_bytes()).count(b"\n") == 7
    assert len(list(read(out, policy=zcompile.compile_file(AIRLINE)))) == 7


def test_cli_import_counts_actions_the_policy_removes(runner, tmp_path):
    msgs = CONVERSATION["messages"][:4] + [call("cancel_reservation")]  # no lookup first
    src = write_chat(tmp_path, {**CONVERSATION, "messages": msgs})
    res = runner.invoke(main, ["receipts", "import", "--format", "chat", str(src), "-o",
                               str(tmp_path / "r.jsonl"), "--policy", str(AIRLINE)])
    assert res.exit_code == 0, res.output
    assert ("policy airline_chat: 1 of 2 logged actions are outside the legal set "
            "(lookup_before_change 1)") in res.output


def test_cli_import_malformed_writes_nothing(runner, tmp_path):
    bad = {**CONVERSATION, "messages": CONVERSATION["messages"][:3] + [{"role": 7}]}
    src = write_chat(tmp_path, CONVERSATION, bad)
    out = tmp_path / "r.jsonl"
    res = runner.invoke(main, ["receipts", "import", "--format", "chat", str(src), "-o", str(out)])
    assert res.exit_code == 1
    assert f"{src}:2: $.messages[3].role:" in res.output and "Traceback" not in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chat.jsonl"]


def test_cli_import_unwritable_output(runner, tmp_path):
    """Both import formats report an output that cannot be written by its file name, without a traceback."""
    src = write_chat(tmp_path, CONVERSATION)
    (tmp_path / "plain").write_text("a file, not a folder")
    out = tmp_path / "plain" / "r.jsonl"
    res = runner.invoke(main, ["receipts", "import", "--format", "chat", str(src), "-o", str(out)])
    assert res.exit_code == 1 and f"error: {tmp_path / 'plain'}: File exists" in res.output
    bfcl = tmp_path / "q.json"
    bfcl.write_text(json.dumps({"id": "q_0", "question": [[{"role": "user", "content": "hi"}]], "function": [
        {"name": "f", "description": "d", "parameters": {"type": "dict", "properties": {}}}]}) + "\n")
    res = runner.invoke(main, ["receipts", "import", "--format", "bfcl", str(bfcl), "--answers", "none",
                               "-o", str(out)])
    assert res.exit_code == 1 and f"error: {tmp_path / 'plain'}: File exists" in res.output
    assert "Traceback" not in res.output


def test_cli_import_bad_extractor_and_usage(runner, tmp_path):
    src = str(write_chat(tmp_path, CONVERSATION))
    out = str(tmp_path / "r.jsonl")
    res = runner.invoke(main, ["receipts", "import", "--format", "chat", src, "-o", out,
                               "--extract", "no_such_pkg_zc.mod:extract"])
    assert res.exit_code == 1
    assert ("error: extractor `no_such_pkg_zc.mod:extract`: cannot import module "
            "`no_such_pkg_zc.mod`") in res.output
    res = runner.invoke(main, ["receipts", "import", "--format", "chat", src, "-o", out,
                               "--extract", "zcompile.receipts:default_extract"])
    assert res.exit_code == 0, res.output
    assert runner.invoke(main, ["receipts", "import", src, "-o", out]).exit_code == 2
    assert runner.invoke(main, ["receipts", "import", "--format", "csv", src, "-o", out]).exit_code == 2
    assert runner.invoke(main, ["receipts", "import", "--format", "chat", src]).exit_code == 2


# ---- the bundled receipts -----------------------------------------------------------------------

def test_bundled_receipts_match_the_policy(airline):
    stats = ReadStats()
    rs = list(read(BUNDLED, policy=airline, stats=stats))
    assert stats.valid == len(rs) == 1518
    assert len({r.meta["conversation"] for r in rs}) == 120
    assert len({r.task for r in rs}) == 30
    assert {r.policy for r in rs} == {airline.sha256}, (
        "policies/airline_chat.zc changed: regenerate the bundle (receipts/README.md has the command)")
    assert all(r.legal == airline.legal(r.state).actions for r in rs)
    outside = [r.id for r in rs if r.action not in r.legal]
    assert len(outside) == 2  # both by lookup_before_change; see README, Receipts
    assert sum(r.action == "respond" for r in rs) == 807
    for r in rs[:50]:
        assert r.tier == "remote" and r.model == "gpt-4o" and r.ts is None
        assert r.verified is {1.0: True, 0.0: None}[r.meta["reward"]]
    assert (ROOT / "receipts" / "LICENSE.tau-bench").read_text().startswith("MIT License")
