"""The compiled artifact: round trip, refusal of tampered/foreign/newer files, runtime isolation."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import msgspec
import pytest
from isolation import compiler_modules, modules_after

import zcompile
from zcompile import ZcError, ir
from zcompile.driver import artifact_bytes, compile_source, read_source

POLICIES = Path(__file__).parents[1] / "policies"
STATE = {"user": {"role": "admin", "verified": True}, "budget": {"units": 3}, "history": ["get_order"]}
SRC = Path(__file__).parent / "golden" / "ok" / "support_desk.zc"


@pytest.fixture
def artifact(tmp_path) -> Path:
    policy, _ = compile_source(read_source(SRC))
    out = tmp_path / "support_desk.zcp"
    out.write_bytes(artifact_bytes(policy))
    return out


def test_round_trip_preserves_ir_and_answers(artifact):
    policy, _ = compile_source(read_source(SRC))
    loaded = zcompile.load(artifact)
    assert loaded.ir == policy
    direct = zcompile.compile_file(SRC)
    assert loaded.legal(STATE).actions == direct.legal(STATE).actions
    assert loaded.legal(STATE).removed.keys() == direct.legal(STATE).removed.keys()
    assert len(loaded.sha256) == 64


def test_artifact_is_deterministic():
    a, _ = compile_source(read_source(SRC))
    b, _ = compile_source(read_source(SRC))
    assert artifact_bytes(a) == artifact_bytes(b)


def test_tampered_artifact_refused(artifact):
    data = artifact.read_bytes().replace(b'"cost":5', b'"cost":0', 1)
    assert data != artifact.read_bytes()
    artifact.write_bytes(data)
    with pytest.raises(ZcError, match="does not match its sha256"):
        zcompile.load(artifact)


def test_newer_version_refused(artifact):
    env = json.loads(artifact.read_bytes())
    env["version"] = ir.VERSION + 1
    artifact.write_text(json.dumps(env))
    with pytest.raises(ZcError, match="newer than this zc supports"):
        zcompile.load(artifact)


@pytest.mark.parametrize("content, message", [
    (b"\x00\x01garbage", "not a zc artifact"),
    (b'{"format": "onnx", "version": 1}', "not a zc artifact"),
    (b"[1, 2]", "not a zc artifact"),
    (b'{"format": "zcp", "version": 1, "compiler": "x", "sha256": "00", "policy": {}}', "sha256"),
])
def test_foreign_or_corrupt_refused(tmp_path, content, message):
    f = tmp_path / "x.zcp"
    f.write_bytes(content)
    with pytest.raises(ZcError, match=message):
        zcompile.load(f)


def test_rehashed_but_inconsistent_artifact_refused(artifact):
    """A hand-edited artifact with a recomputed hash still must not reference unknown names."""
    import hashlib

    env = json.loads(artifact.read_bytes())
    env["policy"]["fallback"] = "nonexistent"
    body = json.dumps(env["policy"]).encode()
    env["sha256"] = hashlib.sha256(body).hexdigest()
    raw = (json.dumps({k: v for k, v in env.items() if k != "policy"})[:-1] + ', "policy": '
           + body.decode() + "}")
    artifact.write_text(raw)
    with pytest.raises(ZcError, match="unknown action `nonexistent`"):
        zcompile.load(artifact)


def test_runtime_imports_no_compiler(artifact):
    code = f"""
import sys, zcompile
p = zcompile.load({str(artifact)!r})
ls = p.legal({STATE!r}, intent="cancel")
ls.removed; p.route({STATE!r})
"""
    assert compiler_modules(modules_after(code)) == []


def test_compiler_only_router_stays_light(artifact, tmp_path):
    """A Router with no specialist, deciding with offered tools, loads no compiler, numpy or onnxruntime."""
    code = f"""
import zcompile
p = zcompile.load({str(artifact)!r})
r = zcompile.Router(p, receipts={str(tmp_path / "r.jsonl")!r})
r.decide({STATE!r}, intent="cancel", tools=[{{"name": "x", "description": "d"}}])
r.close()
"""
    loaded = modules_after(code)
    assert compiler_modules(loaded) == []
    assert not {"numpy", "onnxruntime"} & loaded


def test_ir_children_name_every_sub_expression():
    """`ir.children` (a table by expression kind) gives what every struct-valued field holds."""
    f = ir.Field("x")
    every = [f, ir.Arg("a"), ir.Len(f), ir.Const(1), ir.Self(), ir.Cost(), ir.Not(f), ir.And((f, f)),
             ir.Or((f, f)), ir.Cmp("==", f, f), ir.InConst(f, (1,), False), ir.InSet(f, "s", False),
             ir.Arith("+", f, f), ir.Neg(f)]
    assert {type(e) for e in every} == set(typing.get_args(ir.Expr))
    for e in every:
        held = []
        for name in e.__struct_fields__:
            v = getattr(e, name)
            held += [x for x in (v if isinstance(v, tuple) else (v,)) if isinstance(x, msgspec.Struct)]
        assert list(ir.children(e)) == held, e
