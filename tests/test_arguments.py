"""Typed action arguments: `check(state, action, args)` semantics, the artifact, and `zc legal --call`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from isolation import compiler_modules, modules_after

import zcompile
from zcompile import Verdict, ZcError, ir
from zcompile.cli import main
from zcompile.driver import artifact_bytes, compile_source, read_source

SHOP = Path(__file__).parent / "golden" / "ok" / "shop.zc"
OK = {"user": {"verified": True}, "order": {"status": "pending", "items": 2}}
CANCEL = {"order_id": "#W1", "reason": "no_longer_needed"}


@pytest.fixture(scope="module")
def shop():
    return zcompile.compile_file(SHOP)


def rules(v: Verdict) -> list[str]:
    return sorted(r.rule for r in v.reasons)


def test_legal_does_not_evaluate_argument_rules(shop):
    # `some_items` and `add_only` read arguments: unknown in `legal`, so they do not remove anything
    ls = shop.legal({**OK, "order": {"status": "delivered", "items": 0}})
    assert "return_items" in ls.actions and "add_bags" in ls.actions


def test_check_reports_schema_then_legal_set_then_argument_rules(shop):
    v = shop.check({"order": {"status": "pending", "items": 1}}, "return_items",
                   {"order_id": 7, "item_ids": ["a", "b"]})
    assert not v.allowed
    assert [r.rule for r in v.reasons] == ["schema", "verified_writes", "delivered_only", "some_items"]
    assert v.reasons[0].kind == "schema" and "expected a string, got an integer" in v.reasons[0].message
    last = v.reasons[-1]
    assert last.kind == "requires" and last.span is not None
    assert dict(last.values) == {"order.items": 1, "args.item_ids": ["a", "b"]}
    assert "args.item_ids = [2 items]" in last.message


def test_allowed_call_has_no_reasons(shop):
    v = shop.check(OK, "cancel_pending_order", CANCEL)
    assert v == Verdict("cancel_pending_order", True, ())
    assert v.to_dict() == {"action": "cancel_pending_order", "allowed": True, "reasons": []}


@pytest.mark.parametrize("args, message", [
    ({"order_id": "#W1"}, "missing required argument `reason`"),
    ({"order_id": "#W1", "reason": None}, "missing required argument `reason`"),  # null = absent
    ({"order_id": "#W1", "reason": "no longer needed"},
     'argument `reason`: expected one of no_longer_needed|ordered_by_mistake, got "no longer needed"'),
    ({**CANCEL, "reasn": 1}, "unknown argument `reasn` (did you mean `reason`?)"),
    ({**CANCEL, "order_id": ["#W1"]}, "argument `order_id`: expected a string, got an array"),
])
def test_schema_reasons(shop, args, message):
    v = shop.check(OK, "cancel_pending_order", args)
    assert not v.allowed
    assert [r.kind for r in v.reasons] == ["schema"]
    assert message in v.reasons[0].message


def test_missing_or_wrong_argument_fails_closed(shop):
    # `forbid add_bags when args.bags <= 0`: unknown bags must not let the call through
    assert rules(shop.check(OK, "add_bags", {"order_id": "#W1", "express": False})) == ["add_only", "schema"]
    assert rules(shop.check(OK, "add_bags", {"order_id": "#W1", "bags": True, "express": False})) == \
        ["add_only", "schema"]
    # an absent *optional* argument is unknown too: `forbid … when args.express` keeps nothing
    assert rules(shop.check(OK, "add_bags", {"order_id": "#W1", "bags": 1})) == ["no_express"]
    assert shop.check(OK, "add_bags", {"order_id": "#W1", "bags": 1, "express": False}).allowed


def test_int_argument_accepts_no_float_and_float_accepts_int():
    p = zcompile.compile_text("policy p\naction a(n: int, x: float)\naction e\nfallback e\n")
    assert p.check({}, "a", {"n": 1, "x": 2}).allowed
    assert not p.check({}, "a", {"n": 1.5, "x": 2.5}).allowed


def test_action_without_signature_takes_any_arguments_and_empty_signature_none():
    p = zcompile.compile_text("policy p\naction free\naction none()\naction e\nfallback e\n")
    assert p.check({}, "free", {"x": 1}).allowed
    v = p.check({}, "none", {"x": 1})
    assert not v.allowed and "unknown argument `x` (`none` takes none)" in v.reasons[0].message


def test_fallback_call_is_allowed_only_while_it_is_the_answer():
    p = zcompile.compile_text("policy p\nstate { ok: bool\n busy: bool }\naction a\naction e(n: int)\n"
                              "fallback e\nrule r: forbid a, e when not ok\nrule s: forbid e when busy\n"
                              "rule big: forbid e when args.n > 3\n")
    assert p.check({"ok": False, "busy": True}, "e", {"n": 1}).allowed  # the fallback is the answer
    assert rules(p.check({"ok": False, "busy": True}, "e", {"n": 5})) == ["big"]
    assert rules(p.check({"ok": True, "busy": True}, "e", {"n": 1})) == ["s"]


def test_check_under_intent_includes_default_deny(shop):
    p = zcompile.compile_text(SHOP.read_text().replace(
        "fallback escalate", "fallback escalate\nintent look { allow get_order, escalate }"), "shop.zc")
    v = p.check(OK, "cancel_pending_order", CANCEL, intent="look")
    assert rules(v) == ["intent"]


def test_check_bad_input_raises(shop):
    with pytest.raises(ZcError, match=r"unknown action `cancel_order` \(did you mean "
                                      r"`cancel_pending_order`\?\)"):
        shop.check(OK, "cancel_order", {})
    with pytest.raises(ZcError, match="arguments of `think` must be an object, got an array"):
        shop.check(OK, "think", [1])
    with pytest.raises(zcompile.StateError, match=r"\$\.order\.status"):
        shop.check({"order": {"status": "lost"}}, "think", {})


def test_artifact_version_2_round_trip_and_version_1_still_read(tmp_path):
    policy, _ = compile_source(read_source(SHOP))
    data = artifact_bytes(policy)
    assert json.loads(data)["version"] == ir.VERSION == 2
    f = tmp_path / "shop.zcp"
    f.write_bytes(data)
    p = zcompile.load(f)
    assert rules(p.check(OK, "return_items", {"order_id": "#W1", "item_ids": []})) == \
        ["delivered_only", "some_items"]
    # a version-1 artifact (no arguments) is still read
    old, _ = compile_source(read_source(Path(__file__).parent / "golden" / "ok" / "support_desk.zc"))
    data = artifact_bytes(old)
    assert data.startswith(b'{"format":"zcp","version":2,')
    f.write_bytes(data.replace(b'"version":2', b'"version":1', 1))
    assert zcompile.load(f).name == "support_desk"


def test_identity_of_a_policy_without_arguments_is_unchanged():
    # policies/airline_chat.zc as it was before it declared signatures, and the identity its
    # specialist of that time recorded (IR version 1): signatures change nothing for such policies
    p = zcompile.compile_file(Path(__file__).parent / "fixtures" / "airline_chat_v1.zc")
    assert p.sha256 == "307e0e83b9f45af76cd88e19a321af17b064752f5e4f9d3a64256cdafb78c53e"


def test_corrupt_artifact_argument_refused(tmp_path):
    policy, _ = compile_source(read_source(SHOP))
    import msgspec

    bad = msgspec.structs.replace(policy, actions=tuple(
        msgspec.structs.replace(a, params=()) if a.name == "add_bags" else a for a in policy.actions))
    f = tmp_path / "bad.zcp"
    f.write_bytes(ir.dumps(bad, "test"))
    with pytest.raises(ZcError, match="reads argument `bags` that `add_bags` does not declare"):
        zcompile.load(f)


def test_check_imports_no_compiler(tmp_path):
    policy, _ = compile_source(read_source(SHOP))
    f = tmp_path / "shop.zcp"
    f.write_bytes(artifact_bytes(policy))
    code = f"""
import sys, zcompile
p = zcompile.load({str(f)!r})
v = p.check({OK!r}, "return_items", {{"order_id": "#W1", "item_ids": []}})
assert not v.allowed and v.reasons
"""
    assert compiler_modules(modules_after(code)) == []


# ---- CLI -----------------------------------------------------------------------------------------
@pytest.fixture()
def state_file(tmp_path):
    f = tmp_path / "state.json"
    f.write_text(json.dumps({"user": {"verified": True}, "order": {"status": "delivered"}}))
    return str(f)


def run(*args):
    res = CliRunner().invoke(main, ["legal", str(SHOP), *args])
    assert "Traceback" not in res.output
    return res


def test_cli_call_text_and_json(state_file):
    call = json.dumps({"name": "cancel_pending_order",
                       "arguments": {"order_id": "#W1", "reason": "by mistake"}})
    res = run("--state", state_file, "--call", call)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == "policy shop: call `cancel_pending_order` blocked (2 reasons)"
    assert lines[1].startswith("  - schema (schema): `cancel_pending_order`: argument `reason`")
    assert lines[2].startswith("  - pending_only (requires) at ")
    res = run("--state", state_file, "--call", call, "--json")
    out = json.loads(res.output)
    assert out["allowed"] is False and out["call"]["name"] == "cancel_pending_order"
    assert [r["rule"] for r in out["reasons"]] == ["schema", "pending_only"]


def test_cli_call_arguments_as_json_string(state_file):
    # OpenAI tool calls carry `arguments` as a JSON-encoded string
    call = json.dumps({"name": "return_items", "arguments": json.dumps({"order_id": "#W1", "item_ids": []})})
    out = json.loads(run("--state", state_file, "--call", call, "--json").output)
    assert [r["rule"] for r in out["reasons"]] == ["some_items"]


@pytest.mark.parametrize("call, message", [
    ('{"name": "think",', "error: --call: invalid JSON: input data was truncated"),
    ("[1]", 'error: --call: $: expected an object `{"name": …, "arguments": {…}}`'),
    ('{"arguments": {}}', "error: --call: $.name: required key is missing"),
    ('{"name": 3}', "error: --call: $.name: expected a string, got 3"),
    ('{"name": "cancel_order"}', "error: --call: $.name: unknown action `cancel_order` (did you mean "
                                 "`cancel_pending_order`?)"),
    ('{"name": "think", "arguments": [1]}', "error: --call: $.arguments: expected an object of arguments"),
    ('{"name": "think", "arguments": "{oops"}', "error: --call: $.arguments: the arguments string is not "
                                                "valid JSON"),
    ('{"name": "think", "args": {}}', "error: --call: $.args: unknown key (a call has `name` and "
                                      "`arguments`)"),
])
def test_cli_malformed_call(state_file, call, message):
    res = run("--state", state_file, "--call", call)
    assert res.exit_code == 1
    assert res.output.startswith(message), res.output


def test_arguments_may_be_named_with_reserved_words():
    # tool schemas name arguments freely (`state` in an address): a signature takes them as they are
    p = zcompile.compile_text("policy p\naction a(state: enum(x, y), true: int, policy: bool?)\n"
                              "action e\nfallback e\nrule r: a requires args.state == x and args.true > 1\n")
    assert p.check({}, "a", {"state": "x", "true": 2}).allowed
    assert [r.rule for r in p.check({}, "a", {"state": "y", "true": 2}).reasons] == ["r"]


def test_a_long_condition_is_cut_in_reason_messages():
    cond = " or ".join(f"n == {i}" for i in range(60))
    p = zcompile.compile_text(f"policy p\nstate {{ n: int }}\naction a\naction e\nfallback e\nrule r: a "
                              f"requires {cond}\n")
    [reason] = p.legal({"n": 99}).removed["a"]
    assert len(reason.message) < 220 and "…` (n = 99)" in reason.message
