"""`zc pdp` in parts: the mapping file (every refusal at its file:line:column and `$.path`), the
mapping of a request to the policy's state and back to the request's paths, the command line."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from zcompile.authzen import PDP, load_mapping
from zcompile.authzen.mapping import Unknown
from zcompile.cli import main
from zcompile.cli.common import load_policy
from zcompile.errors import ZcError

ROOT = Path(__file__).parents[1]
DESK = ROOT / "examples" / "authzen" / "desk.zc"
MAPPING = ROOT / "examples" / "authzen" / "desk.mapping.yaml"


@pytest.fixture(scope="module")
def desk():
    return load_policy(str(DESK))


@pytest.mark.parametrize("text, where, problem", [
    ("version: 1\nstat: {}\n", "2:1: $.stat", "unknown key (did you mean `state`?)"),
    ("version: 2\n", "1:1: $.version", "unsupported mapping version 2 (this zc reads version 1)"),
    ("state:\n  user.rol: subject.properties.role\n", '2:3: $.state["user.rol"]',
     "unknown field `user.rol` (did you mean `user.role`?)"),
    ("state:\n  user.role: subjct.properties.role\n", '2:3: $.state["user.role"]',
     "`subjct.properties.role` starts with `subjct` (did you mean `subject`?)"),
    ("state:\n  user.role: {equals: [subject.id]}\n", '2:15: $.state["user.role"].equals',
     "expected two items, got 1"),
    ("state:\n  user.role: {const: agent, equals: [a, b]}\n", '2:3: $.state["user.role"]',
     "a computed value has exactly one of `const`, `equals`, `contains`"),
    ("state:\n  user.role: {contains: [7, x]}\n", '2:26: $.state["user.role"].contains[0]',
     "expected a dotted path (e.g. `subject.properties.role`)"),
    ("actions: [get_order, cancel]\n", "1:22: $.actions[1]", "unknown action `cancel` (did you mean "
                                                             "`cancel_order`?)"),
    ("actions: {read: get_ordr}\n", "1:11: $.actions.read", "unknown action `get_ordr` (did you mean "
                                                            "`get_order`?)"),
    ("state:\n  user.role: subject.id\n  user.role: subject.id\n", "3:3", "duplicate key `user.role`"),
    ("subjects:\n  identity:\n    a: 3\n", "3:5: $.subjects.identity.a",
     "expected an object of the entity's properties"),
    ("resources:\n  record:\n    101: {a: 1}\n", "2:3: $.resources.record",
     'the id 101 is not a string: quote it'),
    ("base: context.\n", "1:1: $.base", "`context.` is not a dotted path"),
    ("state: [1]\n", "1:1: $.state", "expected `object`, got `array`"),
    ("mcp: {allow: [x], extra: 1}\n", "1:19: $.mcp.extra", "unknown key"),
    ("state: {a: &x b}\nintent: *x\n", "", "YAML anchors and aliases"),
    ("state: {\n", "", "invalid YAML"),
    ("", "", "empty mapping file, expected a mapping"),
])
def test_mapping_file_refusals(tmp_path, desk, text, where, problem):
    f = tmp_path / "m.yaml"
    f.write_text(text)
    with pytest.raises(ZcError) as err:
        load_mapping(f, desk)
    msg = str(err.value)
    assert msg.startswith(f"{f}:{where}" if where else str(f)), msg
    assert problem in msg, msg


def test_mapping_reads_json_too(tmp_path, desk):
    f = tmp_path / "m.json"
    f.write_text('{"version": 1, "state": {"user.role": "subject.properties.role"}, "mcp": null}')
    m = load_mapping(f, desk)
    assert m.spec.mcp is None and m.actions == {a: a for a in desk.actions}


def test_request_to_state_and_back(desk):
    """The state a request maps to, and a schema error's path placed back in the request."""
    m = load_mapping(MAPPING, desk)
    doc = {"subject": m.entity("subject", {"type": "identity", "id": "alice@example.com",
                                           "properties": {"role": "admin", "team": "x"}}),
           "action": {"name": "tools/call"}, "resource": {"type": "tool", "id": "refund"},
           "context": {"history": ["get_order"], "order": {"status": "nope"}}}
    assert doc["subject"]["properties"] == {"role": "agent", "team": "x"}  # the directory is the authority
    where = {"subject": "$.evaluations[3].subject", "context": "$.context"}
    mapped = m.map(doc, where)
    assert mapped.state == {"history": ["get_order"], "order": {"status": "nope"}, "user": {"role": "agent"}}
    assert mapped.arguments == {} and mapped.intent is None
    assert m.place(mapped, "$.user.role") == "$.evaluations[3].subject.properties.role"
    assert m.place(mapped, "$.order.status") == "$.context.order.status"
    assert m.place(mapped, "$.history[0]") == "$.context.history[0]"
    with pytest.raises(Unknown) as err:
        m.entity("subject", {"type": "identity", "id": "eve@example.com"})
    assert err.value.kind == "unknown_subject"
    assert m.entity("resource", {"type": "tool", "id": "x"}) == {"type": "tool", "id": "x"}  # no directory


def test_computed_values(tmp_path):
    from zcompile import compile_text

    policy = compile_text("policy p\nstate {\n  a: bool?\n  b: bool?\n  c: enum(x, y)?\n}\n"
                          "action go\naction stop\nfallback stop\nrule r: go requires a and b\n")
    f = tmp_path / "m.yaml"
    f.write_text("base: null\nintent: null\nstate:\n  a: {equals: [subject.id, resource.properties.owner]}\n"
                 "  b: {contains: [subject.properties.roles, admin]}\n  c: {const: y}\n")
    m = load_mapping(f, policy)

    def state(sub, res):
        return m.map({"subject": sub, "resource": res, "action": {"name": "go"}, "context": {"a": True}},
                     {}).state

    owner = {"type": "r", "id": "1", "properties": {"owner": "ann"}}
    assert state({"type": "u", "id": "ann", "properties": {"roles": ["admin"]}}, owner) == \
        {"a": True, "b": True, "c": "y"}
    assert state({"type": "u", "id": "bob", "properties": {"roles": "admin"}}, owner) == \
        {"a": False, "b": False, "c": "y"}  # `contains` needs an array
    # absent: unknown to rules
    assert state({"type": "u", "id": "ann"}, {"type": "r", "id": "1"}) == {"c": "y"}
    pdp = PDP(policy, m)
    r = pdp.evaluate({"subject": {"type": "u", "id": "ann"}, "action": {"name": "go"},
                      "resource": {"type": "r", "id": "1"}})
    assert r["decision"] is False and r["context"]["zc"]["reasons"][0]["rule"] == "r"  # fail closed


def test_join_names_the_action(tmp_path):
    from zcompile import compile_text

    policy = compile_text("policy p\naction read\naction stop\nfallback stop\n")
    f = tmp_path / "m.yaml"
    f.write_text('action: {join: [action.name, resource.id], sep: " on "}\nactions: {"GET on /x": read}\n')
    pdp = PDP(policy, load_mapping(f, policy))
    q = {"subject": {"type": "u", "id": "1"}, "action": {"name": "GET"},
         "resource": {"type": "route", "id": "/x"}}
    assert pdp.evaluate(q) == {"decision": True}
    got = pdp.evaluate({**q, "action": {"name": "PUT"}})
    assert got["context"]["zc"]["reasons"][0]["kind"] == "unknown_action"
    f.write_text("action: {join: []}\n")
    with pytest.raises(ZcError, match=r"\$.action.join: expected one path or more"):
        load_mapping(f, policy)


def test_renamed_tools_in_the_history(tmp_path, desk):
    """MCP tool names the mapping renames are the policy's actions in `history` too."""
    f = tmp_path / "m.yaml"
    f.write_text("actions: {get-order: get_order, cancel-order: cancel_order, escalate: escalate}\n"
                 "state: {user.role: {const: agent}}\n")
    pdp = PDP(desk, load_mapping(f, desk))
    call = {"subject": {"type": "identity", "id": "a"}, "action": {"name": "tools/call"},
            "resource": {"type": "tool", "id": "cancel-order"}}
    assert pdp.evaluate({**call, "context": {"history": ["get-order"], "order": {"status": "pending"}}}) == \
        {"decision": True}
    assert pdp.evaluate({**call, "context": {"history": [],
                                             "order": {"status": "pending"}}})["decision"] is False
    got = pdp.search_action({"subject": call["subject"], "resource": {"type": "desk", "id": "1"},
                             "context": {"history": ["get-order"], "order": {"status": "pending"}}})
    # refund unexposed
    assert [x["name"] for x in got["results"]] == ["get-order", "cancel-order", "escalate"]


def test_cli_check_and_refusals(tmp_path):
    r = CliRunner().invoke(main, ["pdp", "--policy", str(DESK), "--mapping", str(MAPPING), "--check"])
    assert r.exit_code == 0 and r.output.strip().endswith("4 actions, searches: action, resource, subject")
    bad = tmp_path / "m.yaml"
    bad.write_text("actions: [nope]\n")
    r = CliRunner().invoke(main, ["pdp", "--policy", str(DESK), "--mapping", str(bad), "--check"])
    assert r.exit_code == 1 and f"{bad}:1:11: $.actions[0]: unknown action `nope`" in r.output
    assert "Traceback" not in r.output
    r = CliRunner().invoke(main, ["pdp", "--policy", str(DESK), "--api-key-env", "ZC_TEST_UNSET_KEY"],
                           env={"ZC_TEST_UNSET_KEY": ""})
    assert r.exit_code == 1 and "`ZC_TEST_UNSET_KEY` is not set or empty" in r.output
    r = CliRunner().invoke(main, ["pdp", "--policy", str(tmp_path / "missing.zcp")])
    assert r.exit_code == 1 and "cannot read" in r.output
    r = CliRunner().invoke(main, ["pdp", "--policy", str(DESK), "--reasons", "some"])
    assert r.exit_code == 2


def test_cli_serves_on_localhost():
    """`zc pdp` itself: started as a process, it answers on 127.0.0.1 and stops on SIGINT."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with subprocess.Popen([sys.executable, "-m", "zcompile", "pdp", "--policy", str(DESK), "--mapping",
                           str(MAPPING), "--port", str(port)], stderr=subprocess.PIPE, text=True) as proc:
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    doc = httpx.get(f"http://127.0.0.1:{port}/.well-known/authzen-configuration",
                                    timeout=2).json()
                    break
                except httpx.TransportError:
                    assert proc.poll() is None and time.monotonic() < deadline, "zc pdp did not start"
                    time.sleep(0.1)
            assert doc["access_evaluation_endpoint"] == f"http://127.0.0.1:{port}/access/v1/evaluation"
        finally:
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=15)
    assert "zc pdp: policy desk" in err


def test_decisions_import_no_compiler(tmp_path):
    """A compiled policy behind the PDP decides, searches and serves without the compiler."""
    from isolation import compiler_modules, modules_after

    from zcompile.driver import artifact_bytes, compile_source, read_source

    artifact = tmp_path / "desk.zcp"
    artifact.write_bytes(artifact_bytes(compile_source(read_source(DESK))[0]))
    code = f"""
import zcompile
from zcompile.authzen import PDP, create_app, load_mapping
p = zcompile.load({str(artifact)!r})
pdp = PDP(p, load_mapping({str(MAPPING)!r}, p))
create_app(pdp)
sub = {{"type": "identity", "id": "alice@example.com"}}
tool = {{"type": "tool", "id": "get_order"}}
assert pdp.evaluate({{"subject": sub, "action": {{"name": "tools/call"}}, "resource": tool}})["decision"]
assert pdp.search_action({{"subject": sub, "resource": {{"type": "desk", "id": "1"}}}})["results"]
"""
    assert compiler_modules(modules_after(code)) == []


def test_mapping_intent_constant_is_checked(tmp_path):
    from zcompile import compile_text

    policy = compile_text("policy p\naction go\naction stop\nfallback stop\nintent move \"m\" { allow go, "
                          "stop }\n")
    f = tmp_path / "m.yaml"
    f.write_text("intent: {const: mvoe}\n")
    with pytest.raises(ZcError, match=r"m.yaml:1:10: \$.intent.const: unknown intent `mvoe` \(did you mean "
                                      r"`move`\?\)"):
        load_mapping(f, policy)
    f.write_text("intent: context.task\n")
    pdp = PDP(policy, load_mapping(f, policy))
    q = {"subject": {"type": "u", "id": "1"}, "action": {"name": "go"}, "resource": {"type": "r", "id": "1"}}
    assert pdp.evaluate({**q, "context": {"task": "move"}}) == {"decision": True}
    from zcompile.authzen.model import BadInput

    denied = pdp.evaluate({**q, "context": {"task": "mvoe"}})  # the policy cannot judge it: denied
    assert denied["decision"] is False
    assert denied["context"]["error"]["message"].startswith("$.context.task: unknown intent `mvoe`")
    with pytest.raises(BadInput, match=r"^\$.context.task: expected a string naming an intent"):
        pdp.evaluate({**q, "context": {"task": 3}})


def test_without_the_serve_extra_says_what_to_install():
    from isolation import _BLOCK

    code = _BLOCK.format(blocked=("starlette", "uvicorn")) + (
        "import sys\nfrom zcompile.cli import main\n"
        f"sys.argv = ['zc', 'pdp', '--policy', {str(DESK)!r}, '--check']\nmain()\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 1, run.stderr
    assert ("zc pdp needs the `serve` extra (starlette is not installed): pip install "
            "'zcompile[serve]'") in run.stderr
    assert "Traceback" not in run.stderr


def test_other_mcp_methods_are_judged_through_actions(tmp_path):
    from zcompile import compile_text

    policy = compile_text("policy p\nstate { user.admin: bool = false }\naction read_resource\naction stop\n"
                          "fallback stop\nrule admins: read_resource requires user.admin\n")
    f = tmp_path / "m.yaml"
    f.write_text('actions: {"resources/read": read_resource}\nstate: {user.admin: '
                 'subject.properties.admin}\n')
    pdp = PDP(policy, load_mapping(f, policy))
    q = {"action": {"name": "resources/read"}, "resource": {"type": "resource", "id": "file:///x"}}
    admin = {"type": "identity", "id": "a", "properties": {"admin": True}}
    assert pdp.evaluate({**q, "subject": admin}) == {"decision": True}
    assert pdp.evaluate({**q, "subject": {"type": "identity", "id": "b"}})["decision"] is False
    other = pdp.evaluate({**q, "subject": admin, "action": {"name": "prompts/get"}})
    assert other["decision"] is False and other["context"]["zc"]["reasons"][0]["kind"] == "unknown_action"
