"""examples/tau/audit.py: GPT-4o's logged airline calls replayed through policies/tau_airline.zc.

tests/fixtures/tau/airline/chat.jsonl holds two of the logged runs (tau-bench, Sierra, MIT); the
full 120-run audit needs ../shared/data.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from examples.tau import audit
from examples.tau.common import DataError

ROOT = Path(__file__).resolve().parents[1]
CHAT = ROOT / "tests" / "fixtures" / "tau" / "airline" / "chat.jsonl"
SHARED = ROOT.parent / "shared" / "data" / "receipts" / "tau-airline-gpt4o.chat.jsonl"

RESERVATION = {"reservation_id": "AB12CD", "user_id": "u1", "origin": "JFK", "destination": "SEA",
               "flight_type": "one_way", "cabin": "economy", "insurance": "no", "total_baggages": 0,
               "nonfree_baggages": 0, "created_at": "2024-05-10T10:00:00",
               "passengers": [{"first_name": "A", "last_name": "B", "dob": "1990-01-01"}],
               "flights": [{"flight_number": "HAT001", "date": "2024-05-14", "origin": "JFK",
                            "destination": "ATL"},
                           {"flight_number": "HAT002", "date": "2024-05-20", "origin": "ATL",
                            "destination": "SEA"}]}


def test_observed_world_knows_only_what_tools_showed():
    w = audit.ObservedWorld()
    s = w.state("cancel_reservation", {"reservation_id": "AB12CD"}, set())
    assert "res" not in s  # never looked up: absent
    w.observe("get_reservation_details", {"reservation_id": "AB12CD"}, json.dumps(RESERVATION))
    res = w.state("cancel_reservation", {"reservation_id": "AB12CD"}, set())["res"]
    assert res["segments_flown"] == 1  # dated before 2024-05-15: flown
    assert res["segments_cancelled"] is None  # no search showed the status: unknown (null = absent)
    w.observe("search_direct_flight", {"origin": "ATL", "destination": "SEA", "date": "2024-05-20"},
              json.dumps([{"flight_number": "HAT002", "origin": "ATL", "destination": "SEA",
                           "status": "available"}]))
    assert w.status("HAT002", "2024-05-20") == "available"
    w.observe("get_user_details", {"user_id": "u1"}, "Error: user not found")  # errors teach nothing
    assert "user" not in w.state("cancel_reservation", {"reservation_id": "AB12CD"}, set())


def test_a_write_output_updates_the_reservation_and_marks_it_changed():
    w = audit.ObservedWorld()
    w.observe("get_reservation_details", {"reservation_id": "AB12CD"}, json.dumps(RESERVATION))
    w.observe("update_reservation_baggages", {"reservation_id": "AB12CD"},
              json.dumps({**RESERVATION, "total_baggages": 2}))
    res = w.state("update_reservation_baggages", {"reservation_id": "AB12CD"}, set())["res"]
    assert res["total_baggages"] == 2 and res["changed_in_task"]


def test_audit_on_two_logged_runs():
    report = audit.run(CHAT, examples=5)
    assert report["runs"] == 2
    ok, failed = report["by_reward"]["1.0"], report["by_reward"]["0.0"]
    assert (ok["runs"], failed["runs"]) == (1, 1)
    # airline-t5-r1 adds 3 bags to basic-economy FQ8APE (gold member: 2 free) before its cabin change
    bag = next(e for e in report["examples"] if e["conversation"] == "airline-t5-r1")
    assert bag["rules"] == ["bag_allowance_update"] and bag["call"]["name"] == "update_reservation_baggages"
    # airline-t0-r0 charges a gold member for a bag that is free in economy
    book = next(e for e in report["examples"] if e["conversation"] == "airline-t0-r0")
    assert "bag_allowance_book" in book["rules"]
    assert report["blocked"] == ok["blocked"] + failed["blocked"] <= report["write_calls"]


@pytest.mark.parametrize("content, message", [
    ("{not json\n", r"chat.jsonl:1: invalid JSON"),
    ('{"id": "x"}\n', r"chat.jsonl:1: \$\.messages: expected a conversation"),
    ('{"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": 3}}]}]}\n',
     r"chat.jsonl:1: \$\.messages\[0\]\.tool_calls\[0\]\.function\.name: expected a string"),
])
def test_bad_chat_file(tmp_path, content, message):
    f = tmp_path / "chat.jsonl"
    f.write_text(content)
    with pytest.raises(DataError, match=message):
        audit.run(f)


def test_cli_missing_file(tmp_path, capsys):
    assert audit.main(["--domain", "airline", "--chat", str(tmp_path / "nope.jsonl")]) == 1
    err = capsys.readouterr().err
    assert "cannot read chat log" in err and "Traceback" not in err


@pytest.mark.skipif(not SHARED.exists(), reason=f"{SHARED} is not available")
def test_full_audit(capsys):
    assert audit.main(["--domain", "airline", "--chat", str(SHARED), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert (r["runs"], r["write_calls"], r["blocked"], r["blocked_on_known_facts"]) == (120, 157, 88, 39)
    ok, failed = r["by_reward"]["1.0"], r["by_reward"]["0.0"]
    assert (ok["runs"], ok["write_calls"], ok["blocked"], ok["blocked_on_known_facts"]) == (49, 30, 19, 4)
    assert (failed["runs"], failed["write_calls"], failed["blocked"], failed["blocked_on_known_facts"]) == \
        (71, 127, 69, 35)


def test_tool_output_of_an_unexpected_shape_is_a_clear_error(tmp_path):
    bad = {k: v for k, v in RESERVATION.items() if k != "created_at"}
    conv = {"id": "c1", "reward": 1.0, "messages": [
        {"role": "assistant", "tool_calls": [{"function": {"name": "get_reservation_details",
                                                           "arguments": '{"reservation_id": "AB12CD"}'}}]},
        {"role": "tool", "name": "get_reservation_details", "content": json.dumps(bad)},
        {"role": "assistant", "tool_calls": [{"function": {"name": "cancel_reservation",
                                                           "arguments": '{"reservation_id": "AB12CD"}'}}]}]}
    f = tmp_path / "chat.jsonl"
    f.write_text(json.dumps(conv) + "\n")
    with pytest.raises(DataError, match=r"chat.jsonl:1: \$\.messages\[2\]: unexpected data shape \(KeyError"):
        audit.run(f)
