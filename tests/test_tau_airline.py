"""policies/tau_airline.zc and its adapter (examples/tau): state derivation, effects, conformance.

The small fixture under tests/fixtures/tau/airline/ is copied from tau2-bench (Sierra, MIT; the
license is beside it), so these run without ../shared/data; the full conformance run needs it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from examples.tau import conformance
from examples.tau.airline import AirlineWorld, cancel_reason, load_db
from examples.tau.common import DataError, load_policy

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "tau" / "airline"
SHARED = ROOT.parent / "shared" / "data" / "tau" / "airline"


@pytest.fixture(scope="module")
def policy():
    return load_policy("airline")


@pytest.fixture(scope="module")
def db():
    return load_db(FIXTURE)


def check(policy, world, name, args, history=()):
    return policy.check(world.state(name, args, set(history)), name, args)


def test_state_of_a_reservation(db):
    w = AirlineWorld(db, "You are sick.")
    s = w.state("cancel_reservation", {"reservation_id": "59XX6W"}, set())
    assert s["user"] == {"membership": "silver"}
    assert s["res"] == {"cabin": "economy", "insurance": True, "passengers": 2, "total_baggages": 0,
                        "hours_since_booking": 82.68, "segments_flown": 0, "segments_cancelled": 0,
                        "delayed_at_start": 0, "cancelled_at_start": 0, "changed_in_task": False}
    assert s["cancel"] == {"reason": "health"}
    flown = w.state("cancel_reservation", {"reservation_id": "4XGCCM"}, set())["res"]
    assert (flown["segments_flown"], flown["segments_cancelled"]) == (2, 2)


def test_unknown_reservation_leaves_its_fields_absent_and_fails_closed(db, policy):
    w = AirlineWorld(db, "")
    s = w.state("cancel_reservation", {"reservation_id": "NOPE00"}, set())
    assert "res" not in s and "user" not in s and "cancel" not in s
    v = policy.check(s, "cancel_reservation", {"reservation_id": "NOPE00"})
    assert not v.allowed and {r.rule for r in v.reasons} == {"not_flown", "cancel_eligible"}


@pytest.mark.parametrize("text, reason", [
    ("You cannot make the flight because you're sick", "health"),
    ("a hurricane is coming", "weather"),
    ("the flight coincides with your best friend's birthday", "other"),
    ("Under NO circumstances will you fake a health-related issue — you are healthy", "other"),
    ("", None),
])
def test_cancel_reason_from_the_users_words(text, reason):
    assert cancel_reason(text) == reason


def test_an_upgrade_before_a_cancel_changes_what_the_cancel_may_do(db, policy):
    """Task 7's shape: basic economy cannot be cancelled; after an upgrade to business it can."""
    w = AirlineWorld(db, "You want to cancel.")
    cancel = {"reservation_id": "XEHM4B"}
    v = check(policy, w, "cancel_reservation", cancel)
    assert not v.allowed and [r.rule for r in v.reasons] == ["cancel_eligible"]
    upgrade = {"reservation_id": "XEHM4B", "cabin": "business", "payment_id": "credit_card_2408938",
               "flights": [{"flight_number": "HAT005", "date": "2024-05-20"},
                           {"flight_number": "HAT178", "date": "2024-05-30"}]}
    assert check(policy, w, "update_reservation_flights", upgrade).allowed  # a cabin change: allowed
    w.apply("update_reservation_flights", upgrade)
    after = w.state("cancel_reservation", cancel, {"update_reservation_flights"})
    assert after["res"]["cabin"] == "business" and after["res"]["changed_in_task"]
    assert policy.check(after, "cancel_reservation", cancel).allowed
    # the shared database is untouched: a new world sees basic economy again
    assert AirlineWorld(db, "").state("cancel_reservation", cancel, set())["res"]["cabin"] == "basic_economy"


def test_a_cabin_change_changes_the_bag_allowance(db, policy):
    """Task 17's shape: gold, one passenger: 2 free bags in basic economy, 3 in economy."""
    w = AirlineWorld(db, "")
    bags = {"reservation_id": "FQ8APE", "total_baggages": 3, "nonfree_baggages": 0,
            "payment_id": "gift_card_8190333"}
    v = check(policy, w, "update_reservation_baggages", bags)
    assert [r.rule for r in v.reasons] == ["bag_allowance_update"]
    assert check(policy, w, "update_reservation_baggages", {**bags, "nonfree_baggages": 1}).allowed
    w.apply("update_reservation_flights", {"reservation_id": "FQ8APE", "cabin": "economy",
            "flights": [{"flight_number": "HAT056", "date": "2024-05-25"},
                        {"flight_number": "HAT138", "date": "2024-05-25"}],
                                           "payment_id": "gift_card_8190333"})
    assert check(policy, w, "update_reservation_baggages", bags).allowed
    w.apply("update_reservation_baggages", bags)
    assert [r.rule for r in check(policy, w, "update_reservation_baggages",
                                  {**bags, "total_baggages": 2}).reasons] == ["add_bags_only"]


def test_flight_changes_basic_economy_route_and_payment(db, policy):
    w = AirlineWorld(db, "")
    base = {"reservation_id": "XEHM4B", "cabin": "basic_economy", "payment_id": "credit_card_2408938"}
    moved = [{"flight_number": "HAT007", "date": "2024-05-19"},
             {"flight_number": "HAT174", "date": "2024-05-29"}]
    s = w.state("update_reservation_flights", {**base, "flights": moved}, set())
    assert s["call"] == {"payment_in_profile": True, "payment_kind": "credit_card", "flights_changed": True,
                         "same_route": True, "new_flights_unavailable": 0}
    v = policy.check(s, "update_reservation_flights", {**base, "flights": moved})
    assert [r.rule for r in v.reasons] == ["basic_economy_fixed"]
    # economy may change flights, but only with a payment method from the profile
    econ = {**base, "reservation_id": "59XX6W", "cabin": "economy", "payment_id": "gift_card_0000000",
            "flights": [{"flight_number": "HAT005", "date": "2024-05-20"},
                        {"flight_number": "HAT178", "date": "2024-05-30"}]}
    assert [r.rule for r in check(policy, w, "update_reservation_flights",
                                  econ).reasons] == ["change_payment"]
    assert check(policy, w, "update_reservation_flights", {**econ,
                                                           "payment_id": "credit_card_2408938"}).allowed


def test_flown_reservation_cannot_change_cabin_or_cancel(db, policy):
    w = AirlineWorld(db, "You are sick.")
    up = {"reservation_id": "4XGCCM", "cabin": "economy", "payment_id": "credit_card_4074252",
          "flights": [{"flight_number": f["flight_number"], "date": f["date"]}
                      for f in db["reservations"]["4XGCCM"]["flights"]]}
    assert [r.rule for r in check(policy, w, "update_reservation_flights",
                                  up).reasons] == ["cabin_before_flying"]
    assert [r.rule for r in check(policy, w, "cancel_reservation", {"reservation_id": "4XGCCM"}).reasons] == [
        "not_flown"]


def test_booking_passengers_payments_and_bags(db, policy):
    w = AirlineWorld(db, "")
    book = {"user_id": "daiki_muller_1116", "origin": "LAS", "destination": "ATL", "flight_type": "one_way",
            "cabin": "economy", "flights": [{"flight_number": "HAT007", "date": "2024-05-19"}],
            "passengers": [{"first_name": "A", "last_name": "B", "dob": "1990-01-01"}] * 2,
            "payment_methods": [{"payment_id": "credit_card_2408938", "amount": 100}],
            "total_baggages": 5, "nonfree_baggages": 1, "insurance": "no"}
    assert check(policy, w, "book_reservation", book).allowed  # silver, economy: 2 free each
    six = {**book, "passengers": book["passengers"] * 3, "nonfree_baggages": 0}
    assert [r.rule for r in check(policy, w, "book_reservation", six).reasons] == ["five_passengers"]
    foreign = {**book, "payment_methods": [{"payment_id": "gift_card_1", "amount": 1},
                                           {"payment_id": "credit_card_2408938", "amount": 99}]}
    assert [r.rule for r in check(policy, w, "book_reservation", foreign).reasons] == ["payments_in_profile"]
    bad = {**book, "cabin": "first", "insurance": True}
    assert [r.kind for r in check(policy, w, "book_reservation", bad).reasons][:2] == ["schema", "schema"]


def test_conformance_on_the_fixture(tmp_path):
    report = conformance.run("airline", FIXTURE / "tasks.json", FIXTURE,
                             refusals_path=_refusals(tmp_path)).to_dict()
    assert (report["tasks"], report["gold_actions"], report["legal"]) == (2, 8, 8)
    assert report["illegal"] == []
    assert (report["refusals_checked"], report["refusals_blocked"]) == (1, 1)
    assert report["refusals"][0]["rules"] == ["cancel_eligible"]


def _refusals(tmp_path):
    f = tmp_path / "refusals.json"
    f.write_text(json.dumps({"cases": [{"task": "17", "assertion": "a basic economy reservation",
                                         "call": {"name": "cancel_reservation",
                                                  "arguments": {"reservation_id": "XEHM4B"}}}]}))
    return f


@pytest.mark.parametrize("content, message", [
    ("[1]", r"tasks.json: \$\[0\]: expected a task object"),
    ('[{"id": "1", "evaluation_criteria": {"actions": [{"name": 3}]}}]',
     r"\$\[0\]\.evaluation_criteria\.actions\[0\]: expected \{name, arguments\}"),
    ("{", "invalid JSON"),
])
def test_bad_tasks_file(tmp_path, content, message):
    f = tmp_path / "tasks.json"
    f.write_text(content)
    with pytest.raises(DataError, match=message):
        conformance.run("airline", f, FIXTURE)


def test_cli_bad_db_is_a_clear_error(tmp_path, capsys):
    rc = conformance.main(["--domain", "airline", "--tasks", str(FIXTURE / "tasks.json"), "--db",
                           str(tmp_path)])
    assert rc == 1
    err = capsys.readouterr().err
    assert "not an airline database (no users.json" in err and "Traceback" not in err


@pytest.mark.skipif(not SHARED.exists(), reason=f"{SHARED} is not available")
def test_full_airline_conformance(capsys):
    rc = conformance.main(["--domain", "airline", "--tasks", str(SHARED / "tasks.train.json"),
                           "--db", str(SHARED / "db"), "--json"])
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["tasks"], report["gold_actions"], report["legal"]) == (30, 84, 83)
    # the one data error (README): task 39 cancels MSJ4OA, economy with insurance, booked 10 days
    # before, for a reason insurance does not cover ("give up your seat for someone else")
    [err] = report["illegal"]
    assert (err["task"], err["action"], err["arguments"]) == ("39", "cancel_reservation",
                                                              {"reservation_id": "MSJ4OA"})
    assert [r["rule"] for r in err["reasons"]] == ["cancel_eligible"]
    assert report["refusals_checked"] == report["refusals_blocked"] == 22
    assert all(r["rules"] for r in report["refusals"])


@pytest.mark.parametrize("content, message", [
    ("[]", r"refusals.json: \$: expected"),
    ('{"cases": [{"task": 7, "call": {"name": "cancel_reservation"}}]}',
     r"\$\.cases\[0\]\.task: expected the task id"),
    ('{"cases": [{"task": "7", "call": {"arguments": {}}}]}', r"\$\.cases\[0\]\.call: expected"),
])
def test_bad_refusals_file(tmp_path, content, message):
    f = tmp_path / "refusals.json"
    f.write_text(content)
    with pytest.raises(DataError, match=message):
        conformance.run("airline", FIXTURE / "tasks.json", FIXTURE, refusals_path=f)


def test_database_of_an_unexpected_shape_is_a_clear_error(tmp_path):
    for table in ("users", "flights"):
        (tmp_path / f"{table}.json").write_text((FIXTURE / f"{table}.json").read_text())
    broken = json.loads((FIXTURE / "reservations.json").read_text())
    del broken["XEHM4B"]["created_at"]
    (tmp_path / "reservations.json").write_text(json.dumps(broken))
    with pytest.raises(DataError, match=r"task 7 step \d: unexpected data shape \(KeyError: 'created_at'\)"):
        conformance.run("airline", FIXTURE / "tasks.json", tmp_path)
