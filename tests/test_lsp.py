"""The language server, driven over its protocol: a subprocess speaking LSP JSON-RPC on stdio."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
DESK = (ROOT / "tests" / "golden" / "ok" / "support_desk.zc").read_text()
URI = "file:///work/policies/support_desk.zc"
TIMEOUT = 30


class Client:
    """A minimal LSP client: Content-Length framing, requests by id, notifications queued."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "zcompile", "lsp"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.messages: queue.Queue = queue.Queue()
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        out = self.proc.stdout
        while True:
            headers = {}
            while (line := out.readline()) not in (b"\r\n", b""):
                key, _, value = line.decode().partition(":")
                headers[key.strip().lower()] = value.strip()
            if not headers:
                return
            self.messages.put(json.loads(out.read(int(headers["content-length"]))))

    def send(self, msg: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", **msg}).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def notify(self, method: str, params: dict) -> None:
        self.send({"method": method, "params": params})

    def answer(self, method: str, params) -> dict:
        """The server's response to a request (its `result` or its `error`)."""
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, "params": params})
        while True:
            msg = self.messages.get(timeout=TIMEOUT)
            if msg.get("id") == self.next_id and "method" not in msg:
                return msg

    def request(self, method: str, params: dict):
        msg = self.answer(method, params)
        assert "error" not in msg, msg["error"]
        return msg["result"]

    def diagnostics(self, version: int, uri: str = URI) -> list[dict]:
        """The diagnostics published for `uri` at a document version (earlier ones are skipped)."""
        while True:
            msg = self.messages.get(timeout=TIMEOUT)
            if msg.get("method") == "textDocument/publishDiagnostics" \
                    and msg["params"]["uri"] == uri and msg["params"].get("version") == version:
                return msg["params"]["diagnostics"]

    def close(self) -> str:
        """Shut the server down; its stderr."""
        try:
            self.request("shutdown", None)
            self.notify("exit", None)
            self.proc.wait(timeout=TIMEOUT)
            return self.proc.stderr.read().decode()
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.stdin.close()
            self.proc.stdout.close()
            self.proc.stderr.close()


@pytest.fixture(scope="module")
def lsp():
    pytest.importorskip("pygls")
    client = Client()
    caps = client.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
    client.notify("initialized", {})
    client.caps = caps["capabilities"]
    client.notify("textDocument/didOpen", {"textDocument": {
        "uri": URI, "languageId": "zc", "version": 1, "text": DESK}})
    client.opened = client.diagnostics(1)
    yield client
    stderr = client.close()
    assert client.proc.returncode == 0 and "Traceback" not in stderr, stderr


def position(text: str, needle: str, nth: int = 0, delta: int = 1) -> dict:
    """The LSP position `delta` characters into the nth occurrence of needle."""
    offset = -1
    for _ in range(nth + 1):
        offset = text.index(needle, offset + 1)
    offset += delta
    line = text.count("\n", 0, offset)
    return {"line": line, "character": offset - (text.rfind("\n", 0, offset) + 1)}


def at(text: str, needle: str, nth: int = 0, delta: int = 1) -> dict:
    return {"textDocument": {"uri": URI}, "position": position(text, needle, nth, delta)}


def test_without_pygls_zc_lsp_says_what_to_install():
    code = ("import sys; sys.modules['pygls'] = sys.modules['pygls.lsp.server'] = None; "
            "from zcompile.cli import main; main(['lsp'])")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert ("the language server needs pygls, which is not installed: pip install "
            "'zcompile[lsp]'") in res.stderr


def test_requests_about_a_document_never_opened_answer_empty(lsp):
    """An editor may ask about a file it has not opened (or that is gone): empty answers, never an
    internal error from reading it off the disk."""
    gone = {"uri": "file:///nowhere/missing.zc"}
    where = {"textDocument": gone, "position": {"line": 0, "character": 0}}
    assert lsp.request("textDocument/hover", where) is None
    assert lsp.request("textDocument/definition", where) is None
    assert lsp.request("textDocument/formatting", {"textDocument": gone, "options": {
        "tabSize": 2, "insertSpaces": True}}) is None
    assert lsp.request("textDocument/hover", at(DESK, "get_order")) is not None  # still serving


@pytest.mark.parametrize("params, where", [
    ({"textDocument": {"uri": URI}, "position": {"line": -1, "character": 0}}, "$.params.position"),
    ({"textDocument": {"uri": URI}, "position": {"line": 2**31, "character": 0}}, "$.params.position"),
    ({"textDocument": {"uri": URI}, "position": {"line": "x", "character": 0}}, "$.params.position.line"),
    ({"textDocument": {"uri": URI}}, "$.params.position"),
    ({"position": {"line": 0, "character": 0}}, "$.params.textDocument"),
    (None, "$.params"),
    ([1, 2], "$.params.textDocument"),  # by position: the first is the document
])
@pytest.mark.parametrize("method", ["textDocument/hover", "textDocument/definition",
                                    "textDocument/completion"])
def test_a_request_whose_params_fail_the_schema_is_answered_with_an_error(lsp, method, params, where):
    """The protocol requires a response to every request: invalid params get InvalidParams (-32602)
    naming where they are wrong, and the server goes on serving."""
    msg = lsp.answer(method, params)
    assert "result" not in msg and msg["error"]["code"] == -32602, msg
    assert msg["error"]["message"].startswith(f"invalid params: {where}: "), msg["error"]
    assert lsp.request("textDocument/hover", at(DESK, "get_order")) is not None  # still serving


def test_a_negative_position_names_the_bound(lsp):
    msg = lsp.answer("textDocument/hover", {"textDocument": {"uri": URI},
                                            "position": {"line": -1, "character": 0}})
    assert msg["error"]["message"] == ("invalid params: $.params.position: Position.line should be in "
                                       "range [0:2147483647], but was -1"), msg["error"]


def test_a_notification_whose_params_fail_the_schema_is_ignored_and_logged(lsp):
    """A notification gets no response: the client's log says why it was ignored, the document is
    unchanged and the server goes on (the fixture checks that stderr holds no traceback)."""
    lsp.notify("textDocument/didChange", {"textDocument": {"uri": URI, "version": 9}, "contentChanges": 5})
    while (msg := lsp.messages.get(timeout=TIMEOUT)).get("method") != "window/logMessage":
        pass
    assert msg["params"] == {"type": 2, "message": "textDocument/didChange ignored: invalid params: "
                                                   "$.params.contentChanges: invalid value for type, "
                                                   "expected Sequence"}, msg
    assert lsp.request("textDocument/hover", at(DESK, "get_order")) is not None


def test_capabilities(lsp):
    for cap in ("hoverProvider", "definitionProvider", "completionProvider", "documentFormattingProvider"):
        assert lsp.caps.get(cap), cap


def test_diagnostics_on_open_are_the_checks_warnings(lsp):
    assert sorted((d["code"], d["severity"]) for d in lsp.opened) == [("ZC1004", 2), ("ZC1004", 2)]
    (verified,) = [d for d in lsp.opened if "user.verified" in d["message"]]
    line = DESK.splitlines()[verified["range"]["start"]["line"]]
    r = verified["range"]
    assert line[r["start"]["character"] : r["end"]["character"]] == "user.verified"


def test_diagnostics_as_you_type_then_fixed(lsp):
    broken = DESK.replace("rule pending_only:    cancel_order", "rule pending_only:    cancle_order")
    lsp.notify("textDocument/didChange", {"textDocument": {"uri": URI, "version": 2},
                                          "contentChanges": [{"text": broken}]})
    (err,) = [d for d in lsp.diagnostics(2) if d["severity"] == 1]
    assert err["code"] == "ZC0203" and "unknown action `cancle_order`" in err["message"]
    assert "did you mean `cancel_order`?" in err["message"]
    assert err["range"]["start"] == position(broken, "cancle_order", delta=0)
    syntax = DESK.replace("rule pending_only:", "rule pending_only")
    lsp.notify("textDocument/didChange", {"textDocument": {"uri": URI, "version": 3},
                                          "contentChanges": [{"text": syntax}]})
    assert [d["code"] for d in lsp.diagnostics(3)][0].startswith("ZC000")
    # hover still works from the last text that parsed
    hover = lsp.request("textDocument/hover", at(syntax, "retries", nth=1))
    assert "int = 0" in hover["contents"]["value"]
    lsp.notify("textDocument/didChange", {"textDocument": {"uri": URI, "version": 4},
                                          "contentChanges": [{"text": DESK}]})
    assert all(d["severity"] == 2 for d in lsp.diagnostics(4))


def test_hover_field_type_and_action_tags_and_signature(lsp):
    hover = lsp.request("textDocument/hover", at(DESK, "order.status == pending", delta=3))
    value = hover["contents"]["value"]
    assert "**field** `order.status`" in value
    assert "enum(pending, processed, delivered, cancelled)?" in value
    hover = lsp.request("textDocument/hover", at(DESK, "cancel_order requires"))
    assert "action cancel_order tags(write, destructive) cost 2" in hover["contents"]["value"]
    hover = lsp.request("textDocument/hover", at(DESK, "get_order in history", delta=len("get_order i")))
    assert hover is None  # `in` is a keyword, not a name
    assert lsp.request("textDocument/hover", at(DESK, "history", nth=1)) is None  # in a comment
    hover = lsp.request("textDocument/hover", at(DESK, "tags(destructive)", delta=6))
    assert "tag `destructive`: `cancel_order`" in hover["contents"]["value"]


def test_definition_of_actions_fields_rules_and_tiers(lsp):
    def target(needle, nth=0, delta=1):
        (loc,) = lsp.request("textDocument/definition", at(DESK, needle, nth, delta))
        assert loc["uri"] == URI
        return loc["range"]["start"]

    assert target("get_order", nth=2) == position(DESK, "action get_order", delta=len("action "))
    assert target("budget.units", nth=1) == position(DESK, "budget.units:", delta=0)
    assert target("large, remote") == position(DESK, "tier large", delta=len("tier "))
    assert target("pending_only") == position(DESK, "pending_only", delta=0)
    assert lsp.request("textDocument/definition", at(DESK, "requires", delta=2)) is None


def test_completion_offers_fields_and_actions(lsp):
    result = lsp.request("textDocument/completion", at(DESK, "forbid * when cost", delta=0))
    labels = {item["label"]: item for item in result["items"]}
    assert {"user.role", "budget.units", "history", "cancel_order", "escalate", "requires"} <= set(labels)
    assert labels["cancel_order"]["kind"] == 3  # Function
    assert labels["user.role"]["kind"] == 5  # Field
    assert "tags(write, destructive)" in labels["cancel_order"]["detail"]
    assert "built in" in labels["history"]["detail"]


def test_formatting_returns_the_formatted_document(lsp):
    messy = DESK.replace("fallback escalate ", "fallback     escalate ")
    lsp.notify("textDocument/didChange", {"textDocument": {"uri": URI, "version": 5},
                                          "contentChanges": [{"text": messy}]})
    lsp.diagnostics(5)
    (edit,) = lsp.request("textDocument/formatting", {"textDocument": {"uri": URI},
                                                      "options": {"tabSize": 2, "insertSpaces": True}})
    from zcompile.fmt import format_text

    assert edit["newText"] == format_text(messy) and "fallback escalate  #" in edit["newText"]


def test_arguments_hover_and_definition(lsp):
    uri = "file:///work/policies/shop.zc"
    text = (ROOT / "tests" / "golden" / "ok" / "shop.zc").read_text()
    lsp.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "zc", "version": 1,
                                                         "text": text}})
    where = {"textDocument": {"uri": uri}, "position": position(text, "args.bags", delta=6)}
    hover = lsp.request("textDocument/hover", where)
    assert "argument of `add_bags`: bags: int" in hover["contents"]["value"]
    (loc,) = lsp.request("textDocument/definition", where)
    assert loc["range"]["start"] == position(text, "bags: int", delta=0)
    lsp.notify("textDocument/didClose", {"textDocument": {"uri": uri}})


def test_test_files_are_validated_and_run_as_you_type(lsp, tmp_path):
    (tmp_path / "support_desk.zc").write_text(DESK)
    uri = (tmp_path / "support_desk.test.yaml").as_uri()
    text = ("version: 1\ncases:\n- name: ok\n  state: {user: {role: customer, verified: true}, "
            "budget: {units: 3}}\n  legal: [get_order, ask_user, continue, stop, escalate]\n"
            "- name: wrong\n  state: {user: {role: customer, verified: true}, budget: {units: 3}}\n"
            "  legal: [get_order, refund]\n")

    lsp.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "yaml", "version": 1,
                                                         "text": text}})
    (d,) = lsp.diagnostics(1, uri)
    assert d["code"] == "test" and d["range"]["start"] == {"line": 5, "character": 0}
    assert "case `wrong` fails" in d["message"]
    assert "- refund: expected legal, but removed: `confirm_first`" in d["message"]
    assert "+ ask_user: legal, but expected removed" in d["message"]
    where = {"textDocument": {"uri": uri}, "position": position(text, "refund")}
    hover = lsp.request("textDocument/hover", where)
    assert "action refund tags(write, money) cost 2" in hover["contents"]["value"]
    (loc,) = lsp.request("textDocument/definition", where)
    assert loc["uri"] == (tmp_path / "support_desk.zc").as_uri()
    assert loc["range"]["start"] == position(DESK, "action refund", delta=len("action "))
    lsp.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                          "contentChanges": [{"text": text.replace(
                                              "legal: [get_order, refund]",
                                                                                   "legal: 7")}]})
    (d,) = lsp.diagnostics(2, uri)
    assert d["code"] == "test-file" and d["range"]["start"] == {"line": 7, "character": 2}
    assert d["message"] == "$.cases[1].legal: expected `array`, got `int`"
    lsp.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 3},
                                          "contentChanges": [{"text": text.replace(
                                              "legal: [get_order, refund]",
                                                                                   "legal: [get_ordr]")}]})
    (d,) = lsp.diagnostics(3, uri)  # a case that is wrong itself: at the wrong value, not at the case
    assert d["code"] == "test" and d["range"]["start"] == {"line": 7, "character": 10}
    assert "$.cases[1].legal[0]: unknown action `get_ordr` (did you mean `get_order`?)" in d["message"]
    lsp.notify("textDocument/didClose", {"textDocument": {"uri": uri}})


def test_broken_new_document_and_utf16_columns(lsp):
    uri = "file:///work/policies/new.zc"
    text = 'policy p\naction a "😀 smile" fallback b\n'
    lsp.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "zc", "version": 1,
                                                         "text": text}})
    while True:
        msg = lsp.messages.get(timeout=TIMEOUT)
        if msg.get("method") == "textDocument/publishDiagnostics" and msg["params"]["uri"] == uri:
            break
    (d,) = msg["params"]["diagnostics"]
    assert d["code"] == "ZC0203" and "unknown action `b`" in d["message"]
    # the emoji is one code point but two UTF-16 code units: LSP columns count the latter
    assert d["range"]["start"] == {"line": 1, "character": text.split("\n")[1].index(" b") + 2}
    result = lsp.request("textDocument/completion", {"textDocument": {"uri": uri},
                                                     "position": {"line": 1, "character": 0}})
    assert {"a", "policy", "requires"} <= {i["label"] for i in result["items"]}
    lsp.notify("textDocument/didClose", {"textDocument": {"uri": uri}})


def test_test_files_name_nested_state_keys_and_rules(lsp, tmp_path):
    (tmp_path / "support_desk.zc").write_text(DESK)
    uri = (tmp_path / "support_desk.test.yaml").as_uri()
    text = ("version: 1\ncases:\n- name: a\n  state:\n    user: {role: admin, verified: true}\n"
            "    budget: {units: 3}\n  legal: [get_order]\n  removed: {refund: [confirm_first]}\n")
    lsp.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "yaml", "version": 1,
                                                         "text": text}})

    def at_(needle, delta=1):
        return {"textDocument": {"uri": uri}, "position": position(text, needle, delta=delta)}

    # a nested key stands for its dotted field: hover and definition of `user.role`
    hover = lsp.request("textDocument/hover", at_("role"))
    assert "**field** `user.role`" in hover["contents"]["value"]
    assert "enum(customer, agent, admin)" in hover["contents"]["value"]
    (loc,) = lsp.request("textDocument/definition", at_("units"))
    assert loc["range"]["start"] == position(DESK, "budget.units:", delta=0)
    assert lsp.request("textDocument/hover", at_("user")) is None  # an object, not a field
    # the rules an expectation names: definition into the policy
    (loc,) = lsp.request("textDocument/definition", at_("confirm_first"))
    assert loc["uri"] == (tmp_path / "support_desk.zc").as_uri()
    assert loc["range"]["start"] == position(DESK, "confirm_first:", delta=0)
    labels = [i["label"] for i in lsp.request("textDocument/completion", at_("get_order"))["items"]]
    assert {"confirm_first", "get_order", "user", "role", "budget", "units", "history"} <= set(labels)
    assert "user.role" not in labels  # a state key is nested: `user: {role: …}`
    assert "requires" not in labels and len(labels) == len(set(labels))
    lsp.notify("textDocument/didClose", {"textDocument": {"uri": uri}})


def test_completion_offers_each_name_once_and_hover_shows_a_signature(lsp):
    uri = "file:///work/policies/shop.zc"
    text = (ROOT / "tests" / "golden" / "ok" / "shop.zc").read_text()
    lsp.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "zc", "version": 1,
                                                         "text": text}})
    where = {"textDocument": {"uri": uri}, "position": position(text, "add_bags when")}
    hover = lsp.request("textDocument/hover", where)
    shown = hover["contents"]["value"]
    assert "action add_bags(order_id: text, bags: int, express: bool?) tags(write)" in shown
    items = lsp.request("textDocument/completion", where)["items"]
    labels = [i["label"] for i in items]
    assert len(labels) == len(set(labels)) and "rule" in labels  # keywords in a policy
    (order_id,) = [i for i in items if i["label"] == "args.order_id"]  # one item, every action's
    assert order_id["detail"].count("argument of") == 4
    lsp.notify("textDocument/didClose", {"textDocument": {"uri": uri}})


def test_a_test_file_runs_against_the_policy_as_last_saved(lsp, tmp_path):
    policy = tmp_path / "support_desk.zc"
    policy.write_text(DESK)
    uri = (tmp_path / "support_desk.test.yaml").as_uri()
    text = ("version: 1\ncases:\n- name: ok\n  state: {user: {role: customer, verified: true}, "
            "budget: {units: 3}}\n  legal: [get_order, ask_user, continue, stop, escalate]\n")

    lsp.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "yaml", "version": 1,
                                                         "text": text}})
    assert lsp.diagnostics(1, uri) == []
    policy.write_text(DESK.replace("rule fault_stops:", "rule no_continue: forbid continue when retries >= "
                                                        "0\nrule fault_stops:"))
    lsp.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                          "contentChanges": [{"text": text + "\n"}]})
    (d,) = lsp.diagnostics(2, uri)  # the saved policy is compiled again: `continue` is now removed
    assert "case `ok` fails" in d["message"] and "- continue: expected legal, but removed: `no_continue`" \
        in d["message"]
    lsp.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
