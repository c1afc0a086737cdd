"""`zc pdp` end to end: a real uvicorn server on 127.0.0.1 and httpx, through the AuthZEN interop
scenarios (Todo, Search, API gateway, IdP: tests/fixtures/authzen/ and IDP below, each saying where
its data came from), the batch semantics, paging, the MCP profile's default mappings, and bad input
of every kind."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from zcompile import compile_text
from zcompile.authzen import PDP, create_app, load_mapping
from zcompile.cli.common import load_policy
from zcompile.gateway.server import Running

ROOT = Path(__file__).parents[1]
FIX = ROOT / "tests" / "fixtures" / "authzen"
DESK = ROOT / "examples" / "authzen"
MORTY = "CiRmZDE2MTRkMy1jMzlhLTQ3ODEtYjdiZC04Yjk2ZjVhNTEwMGQSBWxvY2Fs"


def pdp_of(policy_path: Path, mapping_path: Path | None, **kw) -> PDP:
    policy = load_policy(str(policy_path))
    return PDP(policy, load_mapping(mapping_path, policy), **kw)


@pytest.fixture
def serve():
    """`serve(pdp, **app options)` -> an httpx client on a running server; all stopped at the end."""
    running: list[tuple[Running, httpx.Client]] = []

    def start(pdp: PDP, **kw) -> httpx.Client:
        srv = Running(create_app(pdp, **kw)).start()
        client = httpx.Client(base_url=srv.origin, timeout=10)
        running.append((srv, client))
        return client

    yield start
    for srv, client in running:
        client.close()
        srv.stop()


@pytest.fixture
def todo(serve):
    return serve(pdp_of(FIX / "todo.zc", FIX / "todo.mapping.yaml"))


@pytest.fixture
def search(serve):
    return serve(pdp_of(FIX / "search.zc", FIX / "search.mapping.yaml"))


@pytest.fixture
def desk(serve):
    return serve(pdp_of(DESK / "desk.zc", DESK / "desk.mapping.yaml"))


# ---- the interop scenarios ---------------------------------------------------------------------
def test_todo_interop_evaluations(todo):
    """Every decision of the Todo scenario (5 users x 8 requests), the request id echoed."""
    cases = json.loads((FIX / "todo.decisions.json").read_text())
    assert len(cases["evaluation"]) == 40
    for i, case in enumerate(cases["evaluation"]):
        r = todo.post("/access/v1/evaluation", json=case["request"], headers={"X-Request-ID": f"todo-{i}"})
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        assert r.headers["x-request-id"] == f"todo-{i}"
        assert r.json()["decision"] is case["expected"], (i, case["request"], r.json())
        if case["expected"]:
            assert r.json() == {"decision": True}  # a permit carries no context a PEP could reject
    for case in cases["evaluations"]:
        r = todo.post("/access/v1/evaluations", json=case["request"])
        assert [d["decision"] for d in r.json()["evaluations"]] == [e["decision"] for e in case["expected"]]


def test_api_gateway_interop(serve):
    """Every decision of the API gateway scenario: the method and the route template are the action."""
    client = serve(pdp_of(FIX / "gateway.zc", FIX / "gateway.mapping.yaml"))
    cases = json.loads((FIX / "gateway.decisions.json").read_text())["evaluation"]
    assert len(cases) == 25
    for case in cases:
        r = client.post("/access/v1/evaluation", json=case["request"])
        assert r.status_code == 200 and r.json()["decision"] is case["expected"], (case["request"], r.text)
    other = {**cases[0]["request"], "resource": {"type": "route", "id": "/admin"}}
    r = client.post("/access/v1/evaluation", json=other).json()
    assert r["decision"] is False and r["context"]["zc"]["reasons"][0]["message"].startswith(
        "`GET /admin` is not an action of policy `gateway_interop`")


@pytest.mark.parametrize("kind", ["subject", "resource", "action"])
def test_search_interop(search, kind):
    """Every row of the Search scenario's three result tables, in the tables' order."""
    cases = json.loads((FIX / "search.results.json").read_text())[kind]
    assert len(cases) == {"subject": 60, "resource": 18, "action": 120}[kind]
    for case in cases:
        r = search.post(f"/access/v1/search/{kind}", json=case["request"], headers={"X-Request-ID": "s"})
        assert r.status_code == 200 and r.headers["x-request-id"] == "s", r.text
        body = r.json()
        assert body["results"] == case["expected"], case["request"]
        assert body["page"] == {"next_token": "", "count": len(case["expected"]),
                                "total": len(case["expected"])}
        assert list(body)[0] == "page"  # first, as the specification recommends


# The IdP scenario (openid/authzen, interop/authzen-interop-website/docs/scenarios/idp/index.md,
# commit 1ddf59d3fc1edc6285f0c2467f35b833924cb974): the Search scenario's policy and data, an IdP
# asking which records each user may delete, to put in the token it issues. Its table:
IDP = {"alice": [101, 107, 113, 119], "bob": [102, 108, 114, 120], "carol": [103, 109, 115],
       "dan": [104, 110, 116], "erin": [105, 111, 117], "felix": [106, 112, 118]}


def test_idp_interop(search):
    for user, records in IDP.items():
        r = search.post("/access/v1/search/resource", headers={"X-Request-ID": user}, json={
            "subject": {"type": "user", "id": user}, "action": {"name": "delete"},
            "resource": {"type": "record"}})
        assert r.headers["x-request-id"] == user
        assert r.json()["results"] == [{"type": "record", "id": str(i)} for i in records], user


def test_search_interop_unknown_entities_answer_empty(search):
    """The scenario: a record or user outside the data set, or another action, is a valid empty answer."""
    for kind, body in (("subject", {"subject": {"type": "user"}, "action": {"name": "view"},
                                    "resource": {"type": "record", "id": "999"}}),
                       ("resource", {"subject": {"type": "user", "id": "zed"}, "action": {"name": "view"},
                                     "resource": {"type": "record"}}),
                       ("resource", {"subject": {"type": "user", "id": "alice"}, "action": {"name": "print"},
                                     "resource": {"type": "record"}}),
                       ("action", {"subject": {"type": "user", "id": "alice"},
                                   "resource": {"type": "record", "id": "0"}})):
        r = search.post(f"/access/v1/search/{kind}", json=body)
        assert r.status_code == 200 and r.json()["results"] == [], (kind, body, r.text)


# ---- discovery -----------------------------------------------------------------------------------
def test_discovery_lists_what_the_mapping_answers(todo, search, serve):
    base = str(todo.base_url).rstrip("/")
    doc = todo.get("/.well-known/authzen-configuration").json()
    assert doc == {"policy_decision_point": base,
                   "access_evaluation_endpoint": f"{base}/access/v1/evaluation",
                   "access_evaluations_endpoint": f"{base}/access/v1/evaluations",
                   "search_subject_endpoint": f"{base}/access/v1/search/subject",
                   # no resource directory, no MCP
                   "search_action_endpoint": f"{base}/access/v1/search/action"}
    assert "search_resource_endpoint" in search.get("/.well-known/authzen-configuration").json()
    plain = serve(pdp_of(DESK / "desk.zc", None), pdp_url="https://pdp.example.com")
    doc = plain.get("/.well-known/authzen-configuration").json()
    assert doc["policy_decision_point"] == "https://pdp.example.com"
    assert doc["search_resource_endpoint"] == "https://pdp.example.com/access/v1/search/resource"  # MCP tools
    assert "search_subject_endpoint" not in doc  # no directory of subjects: omitted, as the spec says
    r = plain.post("/access/v1/search/subject", json={"subject": {"type": "identity"},
                                                      "action": {"name": "x"},
                                                       "resource": {"type": "tool", "id": "get_order"}})
    assert r.status_code == 400 and r.json().startswith("$.subject.type: subject search answers only")


# ---- batches -------------------------------------------------------------------------------------
def _morty_batch(semantic: str | None) -> dict:
    own = {"type": "todo", "id": "1", "properties": {"ownerID": "morty@the-citadel.com"}}
    rick = {"type": "todo", "id": "2", "properties": {"ownerID": "rick@the-citadel.com"}}
    body = {"subject": {"type": "user", "id": MORTY}, "action": {"name": "can_update_todo"},
            # an empty default, overridden by every entry (the interop's shape)
            "resource": {}, "context": {},
            "evaluations": [{"resource": own}, {"resource": rick}, {"resource": own},
                            {"action": {"name": "can_read_todos"}, "resource": rick}]}
    if semantic:
        body["options"] = {"evaluations_semantic": semantic}
    return body


@pytest.mark.parametrize("semantic, expected", [(None, [True, False, True, True]),
                                                ("execute_all", [True, False, True, True]),
                                                ("deny_on_first_deny", [True, False]),
                                                ("permit_on_first_permit", [True])])
def test_batch_semantics(todo, semantic, expected):
    r = todo.post("/access/v1/evaluations", json=_morty_batch(semantic))
    got = r.json()["evaluations"]
    assert [d["decision"] for d in got] == expected
    if len(got) > 1:  # the denial carries its own action's reasons
        why = got[1]["context"]["zc"]
        assert why["action"] == "can_update_todo" and [x["rule"] for x in why["reasons"]] == ["updaters"]
        assert got[1]["context"]["reason_admin"]["en"].startswith("`can_update_todo` requires")


def test_batch_without_evaluations_is_one_evaluation(todo):
    body = _morty_batch(None)
    body["resource"] = body["evaluations"][0]["resource"]
    for evaluations in ([], None):
        b = dict(body)
        if evaluations is None:
            b.pop("evaluations")
        else:
            b["evaluations"] = evaluations
        assert todo.post("/access/v1/evaluations", json=b).json() == {"decision": True}


def test_batch_entry_whose_state_does_not_fit_is_denied_alone(search):
    body = {"action": {"name": "view"}, "resource": {"type": "record", "id": "101"},
            "evaluations": [{"subject": {"type": "user", "id": "alice"}},
                            {"subject": {"type": "guest", "id": "g", "properties": {"role": "manager"}}},
                            {"subject": {"type": "user", "id": "bob"}}]}
    got = search.post("/access/v1/evaluations", json=body).json()["evaluations"]
    assert [d["decision"] for d in got] == [True, False, True]
    assert got[1]["context"]["error"]["status"] == 400
    assert got[1]["context"]["error"]["message"].startswith("$.evaluations[1].subject.id: expected one of "
                                                            "alice|")


# ---- action search: one legal set, paged ---------------------------------------------------------
def _wide(n: int) -> PDP:
    src = "policy wide\nstate { level: int = 0 }\n" + "".join(f"action a{i:02d}\n" for i in range(n)) + \
          "action stop\nfallback stop\nrule odd_high: " + ", ".join(f"a{i:02d}" for i in range(1, n, 2)) + \
          " requires level > 5\n"
    policy = compile_text(src)
    return PDP(policy, load_mapping(None, policy))


def test_action_search_pages_one_legal_set(serve):
    pdp = _wide(40)
    calls = []
    legal = pdp.policy.legal
    pdp.policy.legal = lambda *a, **k: calls.append(a) or legal(*a, **k)
    client = serve(pdp)
    body = {"subject": {"type": "agent", "id": "a"}, "resource": {"type": "desk", "id": "d"},
            "context": {"level": 9}, "page": {"limit": 15}}
    names, token, pages = [], None, 0
    while True:
        b = json.loads(json.dumps(body))
        if token:
            b["page"]["token"] = token
        r = client.post("/access/v1/search/action", json=b)
        assert r.status_code == 200, r.text
        page = r.json()["page"]
        names += [x["name"] for x in r.json()["results"]]
        pages += 1
        assert page["total"] == 41 and page["count"] == len(r.json()["results"])
        token = page["next_token"]
        if not token:
            break
    assert pages == 3 and names == [f"a{i:02d}" for i in range(40)] + ["stop"]
    assert len(calls) == pages  # one Policy.legal a request, no per-action evaluation
    low = client.post("/access/v1/search/action", json={**body, "context": {"level": 1}, "page": {}}).json()
    assert [x["name"] for x in low["results"]] == [f"a{i:02d}" for i in range(0, 40, 2)] + ["stop"]
    assert low["context"]["zc"]["removed"]["a01"][0]["rule"] == "odd_high"


def test_page_tokens_are_bound_to_their_query(serve):
    client = serve(_wide(10))
    body = {"subject": {"type": "agent", "id": "a"}, "resource": {"type": "desk", "id": "d"},
            "page": {"limit": 4}}
    token = client.post("/access/v1/search/action", json=body).json()["page"]["next_token"]
    assert token
    again = client.post("/access/v1/search/action", json={**body, "page": {"limit": 4, "token": token}})
    assert again.status_code == 200 and [x["name"] for x in again.json()["results"]] == ["a08", "stop"]
    for changed in ({**body, "page": {"limit": 5, "token": token}},
                    {**body, "context": {"level": 9}, "page": {"limit": 4, "token": token}},
                    {**body, "subject": {"type": "agent", "id": "b"}, "page": {"limit": 4, "token": token}}):
        r = client.post("/access/v1/search/action", json=changed)
        assert r.status_code == 400, r.text
        assert r.json().startswith("$.page.token: the token belongs to another query"), r.text
    for forged in ("x", token[:-2] + ("AA" if not token.endswith("AA") else "BB"), "é"):
        r = client.post("/access/v1/search/action", json={**body, "page": {"limit": 4, "token": forged}})
        assert r.status_code == 400, forged
        assert r.json().startswith("$.page.token: not a token this PDP issued"), forged
    other = serve(_wide(10))  # another server's key: its tokens are not this one's
    r = other.post("/access/v1/search/action", json={**body, "page": {"limit": 4, "token": token}})
    assert r.status_code == 400
    zero = client.post("/access/v1/search/action", json={**body, "page": {"limit": 0}}).json()
    assert zero["results"] == [] and zero["page"] == {"next_token": "", "count": 0, "total": 6}


# ---- the MCP profile's default mappings ----------------------------------------------------------
def _call(tool: str, history: list[str], sub: str = "alice@example.com", **context) -> dict:
    """The request the AuthZEN MCP profile's default `tools/call` mapping builds."""
    return {"subject": {"type": "identity", "id": sub}, "action": {"name": "tools/call"},
            "resource": {"type": "tool", "id": tool},
            "context": {"agent": "https://agent.example.com/app", "history": history, **context}}


def test_mcp_profile_tools_call(desk):
    r = desk.post("/access/v1/evaluation", json=_call("cancel_order", [], order={"status": "pending"})).json()
    assert r["decision"] is False and [x["rule"] for x in r["context"]["zc"]["reasons"]] == ["lookup_first"]
    r = desk.post("/access/v1/evaluation", json=_call("cancel_order", ["get_order"],
                                                      order={"status": "pending"}))
    assert r.json() == {"decision": True}
    r = desk.post("/access/v1/evaluation", json=_call("refund", ["get_order"], "bob@example.com")).json()
    assert r["decision"] is False and [x["rule"] for x in r["context"]["zc"]["reasons"]] == ["staff_refund"]
    r = desk.post("/access/v1/evaluation", json=_call("refund", ["get_order"], "mallory@example.com")).json()
    assert r["decision"] is False and r["context"]["zc"]["reasons"][0]["kind"] == "unknown_subject"
    r = desk.post("/access/v1/evaluation", json=_call("drop_tables", [])).json()
    assert r["decision"] is False and r["context"]["zc"]["reasons"][0]["kind"] == "unknown_action"


def test_mcp_profile_server_methods(desk):
    server = {"type": "mcp_server", "id": "https://mcp.example.com"}
    sub = {"type": "identity", "id": "alice@example.com"}
    for method, allowed in (("tools/list", True), ("initialize", True), ("resources/read", False),
                            ("some/future_method", False)):
        r = desk.post("/access/v1/evaluation", json={"subject": sub, "action": {"name": method},
                                                     "resource": server})
        assert r.json()["decision"] is allowed, method
    r = desk.post("/access/v1/evaluation", json={"subject": sub, "action": {"name": "tools/list"},
                                                 "resource": {"type": "tool", "id": "get_order"}})
    assert r.json()["decision"] is False
    stranger = {"type": "identity", "id": "mallory@example.com"}  # not in the directory: denied everything
    r = desk.post("/access/v1/evaluation", json={"subject": stranger, "action": {"name": "tools/list"},
                                                 "resource": server})
    assert (r.json()["decision"] is False
            and r.json()["context"]["zc"]["reasons"][0]["kind"] == "unknown_subject")
    for who, methods in ((sub, ["initialize", "tools/list", "ping"]), (stranger, [])):
        r = desk.post("/access/v1/search/action", json={"subject": who, "resource": server})
        assert [x["name"] for x in r.json()["results"]] == methods
    r = desk.get("/.well-known/authzen-configuration", headers={"X-Request-ID": "meta"})
    assert r.headers["x-request-id"] == "meta"


def test_mcp_profile_searches_answer_the_legal_tools(desk):
    sub = {"type": "identity", "id": "alice@example.com"}
    ctx = {"history": ["get_order"], "order": {"status": "delivered"}}
    r = desk.post("/access/v1/search/resource", json={"subject": sub, "action": {"name": "tools/call"},
                                                      "resource": {"type": "tool"}, "context": ctx}).json()
    assert r["results"] == [{"type": "tool", "id": t} for t in ("get_order", "refund", "escalate")]
    assert r["context"]["zc"]["removed"]["cancel_order"][0]["rule"] == "pending_only"
    for tool, names in (("refund", ["tools/call"]), ("cancel_order", [])):
        r = desk.post("/access/v1/search/action", json={"subject": sub,
                                                        "resource": {"type": "tool", "id": tool},
                                                        "context": ctx}).json()
        assert [x["name"] for x in r["results"]] == names


# ---- bad input, failures, authentication --------------------------------------------------------
SUB = {"type": "identity", "id": "alice@example.com"}
OK = {"subject": SUB, "action": {"name": "get_order"}, "resource": {"type": "desk", "id": "1"}}


@pytest.mark.parametrize("path, body, where", [
    ("evaluation", b"{", "$: invalid JSON"),
    ("evaluation", b"", "$: the request body is empty"),
    ("evaluation", b"[1]", "$: expected a JSON object, got an array"),
    ("evaluation", b'{"a": ' + b"[" * 300 + b"]" * 300 + b"}", "$: the request body: nested more than"),
    ("evaluation", {"action": {"name": "get_order"}, "resource": OK["resource"]},
     "$.subject: required field is missing"),
    ("evaluation", {**OK, "subject": {"type": 7, "id": "a"}}, "$.subject.type: expected `str`, got `int`"),
    ("evaluation", {**OK, "subject": {"type": "identity"}}, "$.subject.id: required field is missing"),
    ("evaluation", {**OK, "subject": "alice"}, "$.subject: expected `object`, got `str`"),
    ("evaluation", {**OK, "action": {"names": "x"}}, "$.action.name: required field is missing"),
    ("evaluation", {**OK, "resource": {"type": "d", "id": "1", "properties": [1]}},
     "$.resource.properties: expected `object`, got `array`"),
    ("evaluation", {**OK, "context": [1]}, "$.context: expected an object, got an array"),
    ("evaluations", {**OK, "evaluations": {"1": OK}}, "$.evaluations: expected an array, got an object"),
    ("evaluations", {"evaluations": [OK, {"subject": SUB}]},
     "$.evaluations[1].action: required field is missing (in the evaluation or at the top level)"),
    ("evaluations", {"evaluations": [OK, 3]}, "$.evaluations[1]: expected an object, got a number"),
    ("evaluations", {"subject": {"type": "identity"},
                     "evaluations": [{"action": OK["action"], "resource": OK["resource"]}]},
     "$.subject.id: required field is missing"),
    ("evaluations", {"evaluations": [OK], "options": {"evaluations_semantic": "first"}},
     '$.options.evaluations_semantic: expected one of execute_all|deny_on_first_deny|permit_on_first_permit, '
     'got "first"'),
    ("evaluations", {"evaluations": [OK] * 1001}, "$.evaluations: 1001 evaluations; at most 1000"),
    ("search/action", {"subject": SUB}, "$.resource: required field is missing"),
    ("search/action", {"subject": SUB, "resource": {"type": "desk", "id": "1"}, "page": {"limit": -1}},
     "$.page.limit: expected `int` >= 0"),
    ("search/action", {"subject": SUB, "resource": {"type": "desk", "id": "1"}, "page": 3},
     "$.page: expected an object, got a number"),
    ("search/resource", {"subject": SUB, "resource": {"type": "tool"}},
     "$.action: required field is missing"),
    ("search/subject", {"subject": {}, "action": OK["action"], "resource": OK["resource"]},
     "$.subject.type: required field is missing"),
])
def test_bad_input_is_400_at_its_path(desk, path, body, where):
    kw = {"content": body} if isinstance(body, bytes) else {"json": body}
    r = desk.post(f"/access/v1/{path}", headers={"X-Request-ID": "bad-1", "content-type": "application/json"},
                  **kw)
    assert r.status_code == 400, r.text
    assert r.json().startswith(where), r.text  # the spec's "error message string", as JSON
    assert r.headers["x-request-id"] == "bad-1" and r.headers["content-type"] == "application/json"
    assert "Traceback" not in r.text


@pytest.mark.parametrize("context, where", [
    ({"order": {"status": "lost"}},
     '$.context.order.status: expected one of pending|processed|delivered|cancelled, got "lost"'),
    ({"history": ["get_ordr"]}, "$.context.history[0]: expected one of"),
    ({"order": 5}, "$.context.order: expected `object`, got `int`"),
])
def test_a_state_the_policy_refuses_denies(desk, context, where):
    """A request well formed by the specification whose state the policy refuses: denied (fail
    closed) with the reason at its `$.path`, not a 400 (the spec's 400 is for its own model)."""
    r = desk.post("/access/v1/evaluation", json={**OK, "context": context})
    assert r.status_code == 200 and r.json()["decision"] is False
    error = r.json()["context"]["error"]
    assert error["status"] == 400 and error["message"].startswith(where)


def test_transport_refusals(serve):
    client = serve(pdp_of(DESK / "desk.zc", DESK / "desk.mapping.yaml"), max_body_bytes=1000)
    r = client.post("/access/v1/evaluation", content=b"{" + b" " * 2000 + b"}",
                    headers={"content-type": "application/json"})
    assert r.status_code == 413
    r = client.post("/access/v1/evaluation", content=json.dumps(OK), headers={"content-type": "text/plain"})
    assert r.status_code == 415 and "application/json" in r.text
    # no type: JSON assumed
    assert client.post("/access/v1/evaluation", content=json.dumps(OK)).status_code == 200
    r = client.get("/access/v1/evaluation", headers={"X-Request-ID": "g"})
    assert r.status_code == 405 and r.headers["x-request-id"] == "g"
    assert client.post("/access/v2/evaluation", json=OK).status_code == 404


def test_engine_failure_fails_closed(serve):
    pdp = pdp_of(DESK / "desk.zc", DESK / "desk.mapping.yaml")

    def broken(*a, **k):
        raise RuntimeError("the evaluator broke")

    pdp.policy.check = broken
    pdp.policy.legal = broken
    client = serve(pdp)
    r = client.post("/access/v1/evaluation", json=OK)
    assert r.status_code == 200 and r.json()["decision"] is False
    assert r.json()["context"]["error"] == {"status": 500, "message": "RuntimeError: the evaluator broke"}
    options = {"evaluations_semantic": "permit_on_first_permit"}
    r = client.post("/access/v1/evaluations", json={"evaluations": [OK, OK], "options": options})
    assert [d["decision"] for d in r.json()["evaluations"]] == [False, False]
    r = client.post("/access/v1/search/action", json={"subject": SUB, "resource": OK["resource"]})
    assert (r.status_code == 200 and r.json()["results"] == []
            and r.json()["context"]["error"]["status"] == 500)


def test_api_key_and_hidden_reasons(serve):
    client = serve(pdp_of(DESK / "desk.zc", DESK / "desk.mapping.yaml", reasons="none"), api_key="s3cret")
    denied = _call("cancel_order", [])
    r = client.post("/access/v1/evaluation", json=denied, headers={"X-Request-ID": "k"})
    assert (r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
            and r.headers["x-request-id"] == "k")
    assert client.post("/access/v1/evaluation", json=denied,
                       headers={"Authorization": "Bearer wrong"}).status_code == 401
    for auth in ("Bearer s3cret", "s3cret"):
        r = client.post("/access/v1/evaluation", json=denied, headers={"Authorization": auth})
        assert r.status_code == 200 and r.json() == {"decision": False}  # no reasons revealed
    r = client.post("/access/v1/search/action", json={"subject": SUB, "resource": OK["resource"]},
                    headers={"Authorization": "s3cret"})
    assert "context" not in r.json() and r.json()["results"] == [{"name": "get_order"}, {"name": "escalate"}]


def test_a_trickled_body_gets_408(serve):
    from trickle import trickle

    client = serve(pdp_of(DESK / "desk.zc", DESK / "desk.mapping.yaml"), timeout_s=0.3)
    reply, sent = trickle(client.base_url.host, client.base_url.port,  # a byte every 50 ms: past 0.3 s
                          b"POST /access/v1/evaluation HTTP/1.1\r\nHost: x\r\nContent-Type: "
                          b"application/json\r\nX-Request-ID: slow\r\n", json.dumps(OK).encode())
    assert reply.startswith(b"HTTP/1.1 408") and sent < len(json.dumps(OK)), reply[:300]
    assert b"x-request-id: slow" in reply.lower() and b"the request body did not arrive within 0.3 s" in reply


# the specification's own Action Search example (its section on the Action Search API), verbatim
SPEC_ACTION_SEARCH = {"subject": {"type": "user", "id": "alice@example.com"},
                      "resource": {"type": "account", "id": "123"},
                      "context": {"time": "2024-10-26T01:22-07:00"}}


def test_the_specs_own_action_search_example_is_answered(desk):
    r = desk.post("/access/v1/search/action", json=SPEC_ACTION_SEARCH)
    assert r.status_code == 200 and r.json()["results"] == []  # the desk's mapping needs a role it lacks
    assert r.json()["context"]["error"]["message"].startswith("$.subject")
    assert r.json()["page"] == {"next_token": "", "count": 0, "total": 0}


def test_unknown_members_are_ignored_and_reported(desk):
    """Receivers MUST ignore unknown fields (the specification); zc lists what it ignored."""
    body = {**OK, "evaluations": [OK, {**OK, "action": {"name": "refund"}}, OK],
            "options": {"evaluation_semantics": "deny_on_first_deny"}}  # misspelt: execute_all applies
    r = desk.post("/access/v1/evaluations", json=body)
    assert r.status_code == 200 and len(r.json()["evaluations"]) == 3
    assert r.json()["context"]["zc"]["ignored"] == ["$.options.evaluation_semantics"]
    search = {"subject": SUB, "action": {"name": "refund"}, "resource": {"type": "desk", "id": "1"}}
    r = desk.post("/access/v1/search/action", json=search)
    assert r.status_code == 200 and r.json()["context"]["zc"]["ignored"] == ["$.action"]
    assert {"name": "get_order"} in r.json()["results"]  # the action key changed nothing


def test_an_empty_evaluations_array_is_one_evaluation(desk):
    """"If an `evaluations` array is NOT present or is empty", one evaluation (the specification)."""
    assert desk.post("/access/v1/evaluations", json={**OK, "evaluations": []}).json() == \
        desk.post("/access/v1/evaluation", json=OK).json()
    r = desk.post("/access/v1/evaluations", json={"evaluations": []})
    assert r.status_code == 400 and r.json() == "$.subject: required field is missing"


def test_readiness_and_metrics(desk):
    assert desk.get("/readyz").status_code == 200
    desk.post("/access/v1/evaluation", json=OK)
    desk.post("/access/v1/evaluation", json={})
    text = desk.get("/metrics").text
    assert 'zc_requests_total{door="pdp",status="200"} 1.0' in text
    assert 'zc_requests_total{door="pdp",status="400"} 1.0' in text
