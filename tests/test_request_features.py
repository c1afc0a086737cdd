"""The request in the state: `receipts.request` cues, and the same state from the chat importer, `zc serve`
and `zc mcp` on the same conversation."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, MCPError, StdioServerParameters

from zcompile.gateway.request import derive, parse
from zcompile.receipts import import_chat, read
from zcompile.receipts.chat import default_extract
from zcompile.receipts.request import REQUEST_FIELDS, request_features

ROOT = Path(__file__).resolve().parent.parent
POLICY = ROOT / "tests/fixtures/mcp/reservations.zc"
SERVER = ROOT / "tests/mcp_servers/reservations.py"
USER = "io.zcompile/user"


def cues(text: str | None) -> set[str]:
    return {k for k, v in request_features(text).items() if v}


def test_a_new_booking_and_a_question_about_a_record_differ():
    assert cues("I'd like to book a new flight from New York to Seattle on May 20.") == {"create"}
    assert cues("Can you check the status of my reservation ABC123?") == {"existing", "lookup", "question"}
    assert cues("I booked a trip last week and want to cancel it") == {"existing", "cancel"}
    assert cues("Please change the flights of my upcoming booking") == {"change", "existing"}
    assert cues("yes, go ahead") == {"affirm"} and cues("Go ahead please") == {"affirm"}
    assert cues("what is the baggage allowance") == {"question"}


def test_no_message_has_no_cue_and_every_field_is_a_bool():
    for text in (None, "", "   ", "12345 !!!"):
        assert request_features(text) == dict.fromkeys(REQUEST_FIELDS, False)
    got = request_features("my reservation " * 100 + "book")  # read: the first 64 words only
    assert list(got) == list(REQUEST_FIELDS) and all(type(v) is bool for v in got.values())
    assert got["existing"] and not got["create"]


def test_the_extractor_carries_the_last_user_messages_cues():
    msgs = [{"role": "user", "content": "Where is my booking?"},
            {"role": "assistant", "content": "Which one?"},
            {"role": "user", "content": "Actually, book me another flight."},
            {"role": "assistant", "content": "Sure."}]
    assert default_extract(msgs, 0, {})["request"] == request_features(None)
    assert default_extract(msgs, 1, {})["request"] == request_features(msgs[0]["content"])
    assert default_extract(msgs, 3, {})["request"] == request_features(msgs[2]["content"])


# the agent's side of one conversation through the MCP test server's tools: (user message, call)
TURNS = [("Hi! Can you look up my reservation ABC123?", ("get_reservation", {"reservation_id": "ABC123"})),
         ("Thanks. I also want to book a new flight to Paris.", ("search", {"q": "Paris"})),
         ("yes, cancel the old one", ("cancel", {"reservation_id": "ABC123"}))]


def _through_mcp(tmp_path: Path) -> list[str]:
    """Run TURNS through `zc mcp` (stdio, the SDK's client), each call carrying its user message in
    `_meta`; returns the tools' result texts."""
    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT), args=[
        "-m", "zcompile", "mcp", "--policy", str(POLICY), "--server", f"{sys.executable} {SERVER}",
        "--receipts", str(tmp_path / "r.jsonl")])
    texts: list[str] = []

    async def main_() -> None:
        async with Client(params, mode="legacy") as c:
            with pytest.raises(MCPError) as bad:
                await c.call_tool("search", {"q": "x"}, meta={USER: {"turn": 0, "text": "hi"}})
            assert bad.value.code == -32602 and USER in bad.value.message
            for turn, (text, (name, args)) in enumerate(TURNS, 1):
                await c.list_tools(meta={USER: {"turn": turn, "text": text}})
                result = await c.call_tool(name, args, meta={USER: {"turn": turn, "text": text}})
                texts.append(result.content[0].text)
    anyio.run(main_)
    return texts


def test_importer_serve_and_mcp_derive_the_same_state(tmp_path):
    texts = _through_mcp(tmp_path)
    messages: list[dict] = []
    decisions = []  # the index of each assistant message
    for i, ((text, (name, args)), result) in enumerate(zip(TURNS, texts, strict=True)):
        messages.append({"role": "user", "content": text})
        decisions.append(len(messages))
        messages.append({"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{i}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}]})
        messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": result})
    log = tmp_path / "chat.jsonl"
    log.write_text(json.dumps({"id": "c", "messages": messages}) + "\n")
    imported = [r.state for r in import_chat(log)]
    served = [derive(parse(json.dumps({"model": "m", "messages": messages[:i]}).encode()),
                     default_extract)[0] for i in decisions]
    mcp = [r.state for r in read(tmp_path / "r.jsonl")
           if r.meta["mcp"]["method"] == "tools/call" and r.state]
    assert len(imported) == len(served) == len(mcp) == len(TURNS)
    for i, (a, b, c) in enumerate(zip(imported, served, mcp, strict=True)):
        assert a == b == c, i
        assert a["request"] == request_features(TURNS[i][0])
    assert [s["request"]["create"] for s in imported] == [False, True, False]
    assert [s["request"]["existing"] for s in imported] == [True, False, False]
