"""The text tier (`tier NAME … text`): the language (parse, check, format, lower, artifact) and the
router's hand-on of replies, over real HTTP against local OpenAI-compatible stubs (no chat model)."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgspec
import pytest
from openai_stub import OpenAIStub, offered

import zcompile
from zcompile import driver, ir
from zcompile.errors import ZcError
from zcompile.fmt import format_text
from zcompile.parse import parse
from zcompile.qroute.specialist import Answer
from zcompile.receipts import read
from zcompile.router import Router
from zcompile.router.router import DEADLINE, TEXT_ASKED, TEXT_ONLY
from zcompile.source import Source

ROOT = Path(__file__).resolve().parent
SOURCE = (ROOT / "fixtures" / "text_tier.zc").read_text()
S = {"prev": {"role": "user"}, "user_turns": 1}
REPLY = "Your flight leaves at 9."


@pytest.fixture(scope="module")
def policy():
    return zcompile.compile_text(SOURCE, "text_tier.zc")


class Picks:
    """A specialist test double: it picks `action` (None: abstains below threshold)."""

    name = "picks"

    def __init__(self, action, arguments=None):
        self.action, self.arguments = action, arguments

    def decide(self, state, legal, candidates=()):
        return Answer(self.action, 0.99 if self.action else 0.3, self.action or legal[0], self.arguments)


@pytest.fixture(scope="module")
def stubs():
    with OpenAIStub() as writer, OpenAIStub() as remote:
        yield writer, remote


@pytest.fixture
def tiers(stubs):
    writer, remote = stubs
    writer.reset()
    remote.reset()
    writer.arguments = {"text": REPLY}
    remote.answer, remote.arguments = "respond", {"text": "the expensive reply"}
    made = {"writer": zcompile.OpenAITier(writer.base_url, "small-writer", timeout_ms=3000),
            "remote": zcompile.OpenAITier(remote.base_url, "big-teacher", timeout_ms=3000)}
    yield made
    for t in made.values():
        t.close()


# ---- the language -----------------------------------------------------------------------------
def test_the_option_parses_checks_and_lowers(policy):
    tree = parse(Source("text_tier.zc", SOURCE))
    writer = next(t for t in tree.tiers if t.name.text == "writer")
    assert writer.text is not None and writer.text.value is True
    assert writer.text.span.line == 19 and SOURCE[writer.text.span.start:writer.text.span.end] == "text"
    assert all(t.text is None for t in tree.tiers if t.name.text != "writer")
    assert [(t.name, t.max_ms, t.cost, t.text) for t in policy.ir.tiers] == [
        ("specialist", 5, None, False), ("writer", 3000, 5, True), ("remote", None, 100, False)]


def test_a_tier_named_text_can_be_the_text_tier():
    src = SOURCE.replace("tier writer", "tier text").replace("specialist, writer,", "specialist, text,")
    p = zcompile.compile_text(src, "t.zc")
    assert [(t.name, t.text) for t in p.ir.tiers][1] == ("text", True)


def test_a_text_tier_in_no_route_is_fine():
    src = SOURCE.replace("use specialist, writer, remote", "use specialist, remote")
    _, diagnostics = driver.compile_source(Source("t.zc", src))
    assert not diagnostics


def test_it_formats_into_its_own_column():
    head = "policy p\naction respond tags(reply)\nfallback respond\n"
    out = format_text(head + "tier a  max_ms 5 cost 100\ntier w cost 5 text\n")
    assert out.splitlines()[-2:] == ["tier a max_ms 5 cost 100", "tier w          cost 5   text"]
    assert format_text(out) == out
    out = format_text(head + "tier a max_ms 5 cost 100\ntier w text cost 5\n")  # options out of order
    assert out.splitlines()[-1] == "tier w                   text cost 5" and format_text(out) == out


def test_the_artifact_keeps_its_bytes_without_a_text_tier(policy):
    plain = zcompile.compile_text(SOURCE.replace(" text  #", "  #"), "t.zc")
    body = msgspec.json.decode(ir.dumps(plain.ir, "x"))["policy"]
    assert [sorted(t) for t in body["tiers"]] == [["cost", "max_ms", "name"]] * 3  # no `text` key at all
    assert ir.identity(plain.ir) != ir.identity(policy.ir)  # the option is part of the meaning
    back, _ = ir.loads(ir.dumps(policy.ir, "x"))
    assert back == policy.ir and back.tiers[1].text is True


def test_the_runtime_refuses_an_artifact_with_two_text_tiers(policy, tmp_path):
    tiers = tuple(msgspec.structs.replace(t, text=t.name != "specialist") for t in policy.ir.tiers)
    path = tmp_path / "bad.zcp"
    path.write_bytes(ir.dumps(msgspec.structs.replace(policy.ir, tiers=tiers), "x"))
    with pytest.raises(ZcError, match="corrupt artifact: text tiers `writer`, `remote`"):
        zcompile.load(path)


# ---- the router ---------------------------------------------------------------------------------
def test_a_handed_on_reply_goes_to_the_text_tier_not_the_remote(policy, stubs, tiers, tmp_path):
    writer, remote = stubs
    path = tmp_path / "r.jsonl"
    with Router(policy, specialists=Picks("respond"), tiers=tiers, receipts=path) as r:
        d = r.decide(S)
    assert (d.tier, d.kind, d.action, d.text) == ("writer", "reply", "respond", REPLY)
    assert remote.requests == []  # the expensive model was not asked
    assert len(writer.requests) == 1 and offered(writer.requests[0]) == ["respond"]  # the reply action only
    assert [(a.rung, a.outcome) for a in d.rungs] == [("specialist", "handed_on"), ("writer", "answered")]
    (got,) = read([path], policy=policy)
    assert (got.tier, got.model, got.cost, got.meta["text"]) == ("writer", "small-writer", 5.0, REPLY)
    assert [x["tier"] for x in got.meta["rungs"]] == ["specialist", "writer"]


def test_after_a_tool_fault_a_conditional_route_sends_the_reply_past_the_text_tier(stubs, tiers):
    """The free signal: `route tool_fault: when last.tool_error use specialist, remote` holds after a
    fault, and a reply the specialist hands on then goes to the remote (the text tier skipped, the route
    named); without the fault the text tier writes it."""
    source = SOURCE.replace("  last.user_text: text?", "  last.user_text: text?\n"
                                                        "  last.tool_error: bool = false")
    fault = "route tool_fault: when last.tool_error use specialist, remote\n"
    source = source.replace("route default:", fault + "route default:")
    policy = zcompile.compile_text(source, "fault.zc")
    writer, remote = stubs
    router = Router(policy, specialists=Picks("respond"), tiers=tiers)
    faulted = router.decide({**S, "last": {"tool_error": True}})
    assert (faulted.tier, faulted.text) == ("remote", "the expensive reply") and writer.requests == []
    assert [(a.rung, a.outcome) for a in faulted.rungs] == [
        ("specialist", "handed_on"), ("writer", "skipped"), ("remote", "answered")]
    assert "route `tool_fault` does not list the text tier" in faulted.rungs[1].detail
    fine = router.decide({**S, "last": {"tool_error": False}})
    assert (fine.tier, fine.text) == ("writer", REPLY)


@pytest.mark.parametrize("behaviour", ["http_error", "garbage", "drop", "malformed", "empty"])
def test_when_the_text_tier_fails_the_remote_writes_the_reply(policy, stubs, tiers, behaviour):
    writer, remote = stubs
    writer.behaviour = behaviour
    d = Router(policy, specialists=Picks("respond"), tiers=tiers).decide(S)
    assert (d.tier, d.kind, d.text) == ("remote", "reply", "the expensive reply")
    assert [(a.rung, a.answered) for a in d.rungs] == [("specialist", False), ("writer", False),
                                                       ("writer", False), ("remote", True)]
    assert d.rungs[1].cause in ("error", "declined") and d.rungs[2].detail == TEXT_ASKED
    assert d.receipt.cost == 105.0 and len(remote.requests) == 1


def test_the_text_tier_is_never_asked_for_other_decisions(policy, stubs, tiers):
    writer, remote = stubs
    remote.answer, remote.arguments = "get_user_details", {"user_id": "u1"}
    for specialists in (Picks(None), None):  # the specialist abstains, or there is none
        d = Router(policy, specialists=specialists, tiers=tiers).decide(S)
        assert (d.tier, d.kind, d.action) == ("remote", "call", "get_user_details")
        skipped = next(a for a in d.rungs if a.rung == "writer")
        assert (skipped.outcome, skipped.detail) == ("skipped", TEXT_ONLY)
        assert d.receipt.cost == 100.0
    d = Router(policy, specialists=Picks("get_user_details", {"user_id": "u2"}), tiers=tiers).decide(S)
    assert (d.tier, d.kind) == ("specialist", "call")
    assert writer.requests == []


def test_a_single_legal_reply_the_compiler_hands_on_goes_to_the_text_tier(policy, stubs, tiers):
    writer, remote = stubs
    d = Router(policy, tiers=tiers).decide(S, offer={"respond"})
    assert [(a.rung, a.outcome) for a in d.rungs] == [("compiler", "handed_on"), ("writer", "answered")]
    assert (d.tier, d.text) == ("writer", REPLY) and remote.requests == []


def test_the_text_tier_honours_its_max_ms_and_the_deadline(stubs, tiers):
    writer, remote = stubs
    writer.behaviour, writer.delay_ms = "slow", 2000
    fast = zcompile.compile_text(SOURCE.replace("max_ms 3000", "max_ms 200"), "t.zc")
    started = time.perf_counter()
    d = Router(fast, specialists=Picks("respond"), tiers=tiers).decide(S)
    took = time.perf_counter() - started
    assert d.rungs[1].outcome == "timeout" and (d.tier, d.text) == ("remote", "the expensive reply")
    assert took < 1.5  # the policy gives the text tier 200 ms of the stub's 2 s
    slow = zcompile.compile_text(SOURCE, "t.zc")
    started = time.perf_counter()
    d = Router(slow, specialists=Picks("respond"), tiers=tiers, deadline_ms=300).decide(S)
    took = time.perf_counter() - started
    assert d.rungs[1].outcome == "timeout" and d.rungs[-1].detail == DEADLINE
    assert (d.tier, d.action) == ("fallback", "escalate")
    assert len(remote.requests) == 1 and took < 1.2  # only the first decision reached the remote


def test_adecide_hands_on_too(policy, stubs, tiers):
    writer, remote = stubs
    router = Router(policy, specialists=Picks("respond"), tiers=tiers)

    async def two():
        return await asyncio.gather(router.adecide(S), router.adecide(S))

    ds = asyncio.run(two())
    assert [(d.tier, d.text) for d in ds] == [("writer", REPLY)] * 2 and remote.requests == []


def test_threads_share_one_router_with_a_text_tier(policy, stubs, tiers):
    writer, remote = stubs
    router = Router(policy, specialists=Picks("respond"), tiers=tiers)
    with ThreadPoolExecutor(8) as pool:
        ds = list(pool.map(lambda _: router.decide(S), range(16)))
    assert {(d.tier, d.text) for d in ds} == {("writer", REPLY)} and len({d.receipt.id for d in ds}) == 16
    assert len(writer.requests) == 16 and remote.requests == []


def test_an_unbound_text_tier_leaves_replies_to_the_remote(policy, stubs, tiers):
    writer, remote = stubs
    d = Router(policy, specialists=Picks("respond"), tiers={"remote": tiers["remote"]}).decide(S)
    assert (d.tier, d.text) == ("remote", "the expensive reply")
    assert ("writer", "no endpoint bound to this tier") in [(a.rung, a.detail) for a in d.rungs]


def test_the_text_tier_must_write_text(policy):
    class NamesOnly:
        def propose(self, state, legal, *, timeout_s, intent=None, descriptions=None):
            raise AssertionError("never asked")

    with pytest.raises(ZcError, match="tier `writer` is the text tier of policy `chat_writer`"):
        Router(policy, tiers={"writer": NamesOnly()})
