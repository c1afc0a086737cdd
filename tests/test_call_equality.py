"""One call equality for training, eval, shadow promotion and demotion: canonical JSON arguments."""

from zcompile.receipts import Receipt
from zcompile.receipts.candidates import same_call
from zcompile.receipts.candidates import same_call as training_same_call
from zcompile.router.shadow import Monitor, record_right


def test_arguments_compare_as_canonical_json():
    assert same_call("pay", {"amount": 50, "to": "a"}, "pay", {"to": "a", "amount": 50.0})
    assert same_call("pay", {"x": {"b": [1, 2], "a": True}}, "pay", {"x": {"a": True, "b": [1.0, 2]}})
    assert not same_call("pay", {"amount": 50}, "pay", {"amount": 50.5})
    assert not same_call("pay", {"flag": True}, "pay", {"flag": 1})  # bool is not a number
    assert not same_call("pay", {"amount": 50}, "refund", {"amount": 50})
    assert not same_call(None, {}, None, {})  # no action is never a call
    assert same_call("list", None, "list", {})  # no arguments is the empty object
    assert not same_call("pay", ["amount"], "pay", {"amount": 1})  # not an object: never equal
    assert training_same_call is same_call


def test_shadow_records_and_the_monitor_judge_alike():
    call = {"kind": "call", "action": "pay", "arguments": {"amount": 50.0}}
    assert record_right(call, "pay", {"amount": 50})
    assert not record_right(call, "pay", None)  # a label without arguments never matches a call
    assert record_right({"kind": "reply", "action": "respond"}, "respond", None)
    receipt = Receipt(id="c:1", task="t", state={}, legal=["pay"], action="pay", tier="specialist",
                      model="sp", meta={"shadow": [{"specialist": "shadow", "outcome": "answered",
                                                    "action": "pay",
                                        "arguments": {"amount": 50}, "same": True}]},
                      arguments={"amount": 50})
    judged = Monitor().judge(receipt, action="pay", arguments={"amount": 50.0})
    assert judged == [("sp", True), ("shadow", True)]
    judged = Monitor().judge(receipt, action="pay", arguments={"amount": 51})
    assert judged == [("sp", False), ("shadow", False)]
