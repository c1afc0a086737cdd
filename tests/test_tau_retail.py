"""policies/tau_retail.zc and its adapter (examples/tau/retail.py): state, effects, conformance.

The fixture under tests/fixtures/tau/retail/ is copied from tau2-bench (Sierra, MIT; the license is
in tests/fixtures/tau/); the full conformance run needs ../shared/data.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from examples.tau import conformance
from examples.tau.common import load_policy, normalize_args
from examples.tau.retail import LOOKUP_FIRST, RetailWorld, load_db, status_name

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "tau" / "retail"
SHARED = ROOT.parent / "shared" / "data" / "tau" / "retail"
FIND = {"first_name": "Fatima", "last_name": "Johnson", "zip": "78712"}


@pytest.fixture(scope="module")
def policy():
    return load_policy("retail")


@pytest.fixture(scope="module")
def db():
    return load_db(FIXTURE / "db.json")


def authenticated(db) -> tuple[RetailWorld, set[str]]:
    w = RetailWorld(db)
    w.apply("find_user_id_by_name_zip", FIND)
    assert w.user == "fatima_johnson_7581"
    return w, {"find_user_id_by_name_zip", "get_order_details"}


def rules(policy, w, history, name, args):
    args = normalize_args(policy, name, args)
    return [r.rule for r in policy.check(w.state(name, args, history), name, args).reasons]


def test_status_names():
    assert status_name("pending (item modified)") == "pending_item_modified"
    assert status_name("exchange requested") == "exchange_requested"


def test_nothing_before_authentication(db, policy):
    w = RetailWorld(db)
    assert "authenticate_first" in rules(policy, w, set(), "get_order_details", {"order_id": "#W5199551"})
    w, history = authenticated(db)
    assert rules(policy, w, history, "get_order_details", {"order_id": "#W5199551"}) == []
    # a mistyped order id finds nothing: not another user's order, so the lookup stays legal
    assert rules(policy, w, history, "get_order_details", {"order_id": "#9502126"}) == []
    # another user's order: the lookup and any write are refused
    other = {"order_id": "#W5490111"}  # mia_garcia_4516's
    assert rules(policy, w, history, "get_order_details", other) == ["one_user_lookups"]
    assert "one_user" in rules(policy, w, history, "cancel_pending_order",
                               {**other, "reason": "no longer needed"})


def test_cancel_reason_is_the_argument_type_and_status_must_be_pending(db, policy):
    w, history = authenticated(db)
    pending = {"order_id": "#W5199551", "reason": "no longer needed"}  # spaces become `_`
    assert rules(policy, w, history, "cancel_pending_order", pending) == []
    bad = rules(policy, w, history, "cancel_pending_order", {**pending, "reason": "too expensive"})
    assert bad == ["schema"]
    w.apply("cancel_pending_order", pending)
    assert w.state("cancel_pending_order", pending, history)["order"]["status"] == "cancelled"
    assert rules(policy, w, history, "cancel_pending_order", pending) == ["cancel_pending"]
    assert rules(policy, w, set(history) - {"get_order_details"}, "cancel_pending_order",
                 {"order_id": "#W8665881", "reason": "no longer needed"})[:1] == ["check_status_first"]


def test_refund_goes_to_the_original_method_or_a_gift_card(db, policy):
    w, history = authenticated(db)
    order = db["orders"]["#W9389413"]
    assert order["status"] == "delivered"
    paid = order["payment_history"][0]["payment_method_id"]
    ret = {"order_id": "#W9389413", "item_ids": [order["items"][0]["item_id"]], "payment_method_id": paid}
    assert rules(policy, w, history, "return_delivered_order_items", ret) == []
    others = [p for p in db["users"]["fatima_johnson_7581"]["payment_methods"].values() if p["id"] != paid]
    for pm in others:
        got = rules(policy, w, history, "return_delivered_order_items",
                    {**ret, "payment_method_id": pm["id"]})
        assert got == ([] if pm["source"] == "gift_card" else ["refund_destination"]), pm
    assert rules(policy, w, history, "return_delivered_order_items", {**ret, "item_ids": ["123"]}) == \
        ["return_delivered"]
    w.apply("return_delivered_order_items", ret)
    assert rules(policy, w, history, "return_delivered_order_items", ret) == ["return_delivered"]


def test_exchange_same_product_and_once_per_order(db, policy):
    w = RetailWorld(db)
    w.assume_authenticated(("exchange_delivered_order_items", {"order_id": "#W4316152"}))
    history = set(LOOKUP_FIRST)
    ex = {"order_id": "#W4316152", "item_ids": ["7292993796"], "new_item_ids": ["3761330360"],
          "payment_method_id": "gift_card_7245904"}
    s = w.state("exchange_delivered_order_items", ex, history)
    assert s["call"]["items_same_product"] and s["call"]["items_changed"] and s["call"]["items_in_order"]
    assert rules(policy, w, history, "exchange_delivered_order_items", ex) == []
    # another product type (a water bottle for a tea kettle), the same item, unequal lists
    bottle = next(i for p in db["products"].values() if p["name"] != "Tea Kettle" for i in p["variants"])
    for bad in ({**ex, "new_item_ids": [bottle]}, {**ex, "new_item_ids": ["7292993796"]},
                {**ex, "new_item_ids": ["3761330360", "9647374798"]}):
        # (a difference the lists do not define is unknown: the gift card cannot be shown to cover it)
        assert rules(policy, w, history, "exchange_delivered_order_items", bad)[-1] == "same_product"
    w.apply("exchange_delivered_order_items", ex)
    assert rules(policy, w, history, "exchange_delivered_order_items", ex) == ["exchange_delivered"]


def test_gift_card_must_cover_the_difference(db, policy):
    """Task 105's data error: two kettles exchanged for $21.10 more on a gift card holding $17."""
    w = RetailWorld(db)
    w.assume_authenticated(("exchange_delivered_order_items", {"order_id": "#W4316152"}))
    ex = {"order_id": "#W4316152", "item_ids": ["7292993796", "7292993796"],
          "new_item_ids": ["3761330360", "9647374798"], "payment_method_id": "gift_card_7245904"}
    s = w.state("exchange_delivered_order_items", ex, set(LOOKUP_FIRST))
    assert (s["call"]["gift_card_balance"], s["call"]["price_difference"]) == (17.0, 21.1)
    assert rules(policy, w, set(LOOKUP_FIRST), "exchange_delivered_order_items", ex) == ["difference_payment"]


def test_conformance_on_the_fixture():
    report = conformance.run("retail", FIXTURE / "tasks.json", FIXTURE / "db.json").to_dict()
    assert (report["tasks"], report["gold_actions"], report["legal"]) == (3, 17, 16)
    [err] = report["illegal"]
    assert (err["task"], err["action"], [r["rule"] for r in err["reasons"]]) == \
        ("105", "exchange_delivered_order_items", ["difference_payment"])
    assert report["writes_only_traces"] == ["105"]
    assert (report["refusals_checked"], report["refusals_blocked"]) == (0, 0)  # none of these tasks


@pytest.mark.skipif(not SHARED.exists(), reason=f"{SHARED} is not available")
def test_full_retail_conformance(capsys):
    rc = conformance.main(["--domain", "retail", "--tasks", str(SHARED / "tasks.train.json"),
                           "--db", str(SHARED / "db" / "db.json"), "--json"])
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["tasks"], report["gold_actions"], report["legal"]) == (74, 365, 363)
    # the two data errors (README): task 37 modifies an order the trace never looked up; task 105
    # pays a $21.10 difference with a gift card holding $17.00
    assert [(e["task"], e["step"], [r["rule"] for r in e["reasons"]]) for e in report["illegal"]] == \
        [("37", 3, ["check_status_first"]), ("105", 0, ["difference_payment"])]
    assert report["refusals_checked"] == report["refusals_blocked"] == 4
    assert all(r["rules"] for r in report["refusals"])
