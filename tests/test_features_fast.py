"""The fast feature row (one pass; text hashing and row writing in C when `_features_c` is built)
against a straightforward reference written from features.py's docstring: the same bytes on the
bundled receipts and on generated states, on the C path and on the Python path; and the shipped
specialist's decisions unchanged."""

from __future__ import annotations

import math
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zcompile
from zcompile.qroute import Specialist, load_decisions
from zcompile.qroute import features as F
from zcompile.qroute.features import (
    Featurizer,
    fit_scaling,
    spec_for,
    text_buckets,
    text_columns,
    text_tokens,
)
from zcompile.qroute.specialist import masked_confidence
from zcompile.router import Router
from zcompile.state import read_path

ROOT = Path(__file__).resolve().parents[1]
SPECIALIST = ROOT / "specialists" / "airline_chat"
compiled = pytest.mark.skipif(F._count_c is None, reason="the C extension zcompile.qroute._features_c is not "
                                                         "built")


def reference_row(fz: Featurizer, root, legal) -> np.ndarray:
    """Feature version 2 field by field, as the features.py docstring defines it."""
    spec = fz.spec
    out: list[np.ndarray] = []
    for f in spec.fields:
        v = read_path(fz.schema, root, f.path)
        if v is None and f.has_default:
            v = f.default
        if f.kind == "enum":
            part = [1.0 if v == m else 0.0 for m in f.members]
        elif f.kind == "bool":
            part = [1.0 if v else 0.0]
        elif f.kind in ("int", "float"):
            part = [0.0 if v is None else (v - spec.mean.get(f.path, 0.0)) / spec.std.get(f.path, 1.0)]
            if f.kind == "int":
                bucket = None if v is None else min(max(v, 0), 2) if v <= 2 else \
                    3 if v <= 4 else 4 if v <= 8 else 5 if v <= 16 else 6
                part += [1.0 if b == bucket else 0.0 for b in range(len(F.INT_BUCKETS))]
        elif f.kind == "set":
            part = [1.0 if a in (v or ()) else 0.0 for a in spec.actions]
        else:
            counts = np.zeros(spec.text_dim, np.float32)
            for t in text_tokens(v) if v else ():
                counts[zlib.crc32(t.encode()) % spec.text_dim] += 1
            part = [*np.log1p(counts), math.log1p(len(v)) if v else 0.0]
        if f.may_be_absent or f.kind == "text":
            part.append(1.0 if v is None else 0.0)
        out.append(np.array(part, np.float32))
    out.append(np.array([1.0 if a in legal else 0.0 for a in spec.actions], np.float32))
    return np.concatenate(out)


@pytest.fixture(scope="module")
def bundled():
    policy = zcompile.compile_file(ROOT / "policies" / "airline_chat.zc")
    return policy, load_decisions([ROOT / "receipts"], policy).decisions


@pytest.fixture
def python_path(monkeypatch):
    """Features computed without the C extension."""
    monkeypatch.setattr(F, "_count_c", None)
    monkeypatch.setattr(F, "_put_c", None)


def test_rows_equal_the_reference_on_every_bundled_receipt(bundled):
    policy, decisions = bundled
    fz = Specialist(SPECIALIST, policy).featurizer  # the shipped spec: its mean and std
    assert len(decisions) == 1518
    for d in decisions:
        legal = policy.legal(d.state)
        x = fz.row(legal.root, legal.actions)
        assert x.dtype == np.float32 and x.tobytes() == reference_row(fz, legal.root, legal.actions).tobytes()
        assert x.tobytes() == fz.one(d.state, d.legal).tobytes()


def test_python_path_rows_equal_the_reference(bundled, python_path):
    policy, decisions = bundled
    fz = Featurizer(spec_for(policy.ir))
    for d in decisions[::5]:
        legal = policy.legal(d.state)
        assert fz.row(legal.root, d.legal).tobytes() == reference_row(fz, legal.root, d.legal).tobytes()


def test_text_buckets_of_each_field(bundled):
    policy, decisions = bundled
    fz = Featurizer(spec_for(policy.ir))
    names = fz.spec.names()
    hashed = 0
    for d in decisions[:150]:
        x = fz.one(d.state, d.legal)
        for path in (f.path for f in fz.spec.fields if f.kind == "text"):
            value = d.state.get(path.split(".")[0], {}).get(path.split(".")[1])
            if value:
                hashed += 1
                start = names.index(f"{path}#h0")
                assert np.array_equal(x[start:start + fz.spec.text_dim],
                                      text_buckets(value, fz.spec.text_dim))
    assert hashed > 50


def test_decisions_unchanged_on_every_bundled_receipt(bundled):
    """The shipped specialist decides the same from its fast rows as from the reference rows, and
    its single-row softmax agrees with the batch one (`masked_confidence`)."""
    policy, decisions = bundled
    sp = Specialist(SPECIALIST, policy)
    legals = [policy.legal(d.state) for d in decisions]
    X = np.stack([reference_row(sp.featurizer, ls.root, ls.actions) for ls in legals])
    probs = sp.probabilities(X)
    mask = np.array([[a in ls.actions for a in sp.actions] for ls in legals], np.float32)
    conf = masked_confidence(probs, sp._class_index, mask, sp.temperature)
    def novelty(answer, x):  # with a novelty model: the row's novelty, and an abstention past the cut
        return answer if sp.novelty is None else sp.unfamiliar(answer, sp.novelty.one(x))

    for d, ls, x, p, c in zip(decisions, legals, X, probs, conf):
        fast = sp.decide(d.state, ls)
        assert fast == sp.decide(d.state, d.legal) == novelty(sp.choose(p.tolist(), ls.actions), x)
        # float32 logs: close, not equal
        batch = novelty(sp.complete(sp.actions[int(c.argmax())], float(c.max()), None), x)
        assert (fast.action, fast.best, fast.kind) == (batch.action, batch.best, batch.kind)
        assert fast.confidence == pytest.approx(batch.confidence, rel=1e-5)
    assert sp.manifest.calls is not None  # so `complete` is the shipped specialist's last step


def test_router_hands_the_validated_state_down(bundled, monkeypatch):
    policy, decisions = bundled
    router = Router(policy, specialists=SPECIALIST)
    sp = router.specialists[0]
    before = [router.decide(d.state).rungs for d in decisions[:40]]

    def refuse(state):
        raise AssertionError("the state was validated a second time")

    monkeypatch.setattr(sp.featurizer.schema, "convert", refuse)
    after = [router.decide(d.state).rungs for d in decisions[:40]]
    strip = lambda rungs: [(a.kind, a.rung, a.action, a.confidence, a.cause) for a in rungs]  # noqa: E731
    assert [strip(r) for r in after] == [strip(r) for r in before]
    assert any(a.rung == "specialist" for r in after for a in r)


# ---- generated states ----------------------------------------------------------------------------
GEN = """policy gen
state {
  mode: enum(a, b, c)
  kind: enum(x, y) = y
  opt.e: enum(p, q)?
  opt.note: text?
  flag: bool
  tflag: bool = true
  oflag: bool?
  n: int = 0
  on: int?
  r: float?
  body: text?
  seen: set[action] = {}
}
action go
action stop
action wait
fallback stop
"""
ACTIONS = ("go", "stop", "wait")
CHARS = list("abcdXYZ0189_ -.,:/\n\t") + ["é", "ß", "☃", "𝔘", "K", "٣", "ǅ", "\u00a0"]
SHORT = st.text(st.sampled_from(CHARS), max_size=80)
# around and past 2 * WINDOW = 800 characters: a head, a filler repeated, a tail
LONG = st.builds(lambda head, fill, n, tail: head + (fill * n)[:n] + tail, SHORT,
                 st.text(st.sampled_from(CHARS), min_size=1, max_size=9), st.integers(640, 1700), SHORT)
TEXT = st.one_of(st.none(), SHORT, LONG)


@st.composite
def states(draw):
    state: dict = {"mode": draw(st.sampled_from(["a", "b", "c"]))}
    optional = {
        "kind": st.sampled_from(["x", "y"]), "flag": st.booleans(), "tflag": st.booleans(),
        "oflag": st.booleans(), "n": st.integers(-5, 40) | st.integers(-2**63, 2**63 - 1),
        "on": st.integers(-3, 1000), "r": st.floats(-1e30, 1e30), "body": TEXT,
        "seen": st.lists(st.sampled_from(ACTIONS), unique=True),
    }
    for key, strategy in optional.items():
        if draw(st.booleans()):
            state[key] = draw(strategy | st.none()) if key not in ("flag",) else draw(strategy)
    if draw(st.booleans()):
        state["opt"] = {k: draw(s) for k, s in (("e", st.sampled_from(["p", "q"]) | st.none()),
                                                ("note", TEXT))
                        if draw(st.booleans())}
    state.setdefault("flag", False)
    return state


GEN_POLICY = zcompile.compile_text(GEN)
GEN_FZ = Featurizer(fit_scaling(spec_for(GEN_POLICY.ir), {"n": [0, 3, 7, 40], "on": [1, 2],
                                                          "r": [0.5, -2.25]}))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(states(), st.lists(st.sampled_from(ACTIONS), unique=True, min_size=1))
def test_generated_states_equal_the_reference_on_both_paths(state, legal):
    root = GEN_FZ.schema.convert(state)
    x = GEN_FZ.row(root, legal)
    ref = reference_row(GEN_FZ, root, legal)
    assert x.tobytes() == ref.tobytes()
    saved = F._count_c, F._put_c
    F._count_c = F._put_c = None  # the Python path (no fixture: Hypothesis runs this many times)
    try:
        assert GEN_FZ.row(root, legal).tobytes() == ref.tobytes()
    finally:
        F._count_c, F._put_c = saved


@compiled
@settings(max_examples=300, deadline=None)
@given(st.one_of(SHORT, st.text(max_size=60), LONG,
                 st.lists(st.sampled_from(["ab", "Q9_x", "ZZZZZZZZZZZZZZZ", "é", "0"]),
                          max_size=60).map(" ".join)),
       st.integers(0, 40), st.sampled_from([1, 7, 128, 4096]))
def test_c_counts_equal_text_columns(text, first, dim):
    row = np.zeros(first + dim + 3, np.float32)
    n = F._count_c(row, text, first, dim)
    cols = text_columns(text, first, dim, {})
    assert n == len(cols)
    assert row.tobytes() == np.bincount(cols, minlength=len(row)).astype(np.float32).tobytes()


@compiled
def test_c_functions_refuse_bad_rows():
    row = np.zeros(10, np.float32)
    with pytest.raises(ValueError, match="float32"):
        F._count_c(np.zeros(10), "abc", 0, 5)
    with pytest.raises(ValueError, match="columns"):
        F._count_c(row, "abc", 6, 5)
    with pytest.raises(ValueError, match="outside the row"):
        F._put_c(row, [10], [], [])
    with pytest.raises(ValueError, match="outside the row"):
        F._put_c(row, [], [-1], [0.5])
    with pytest.raises(TypeError):
        F._put_c(row, [1], [2], [])
    with pytest.raises((ValueError, BufferError)):  # not contiguous
        F._count_c(np.zeros(10, np.float32)[::2], "abc", 0, 2)
    F._put_c(row, [1, 3], [2], [1e300])
    assert row[1] == row[3] == 1.0 and row[2] == np.inf


def test_absent_parents_and_true_defaults():
    policy = zcompile.compile_text(
        "policy p\nstate {\n  a.flag: bool = true\n  a.kind: enum(x, y) = y\n  b.note: text?\n}\n"
        "action go\naction stop\nfallback stop\nrule r: go requires a.flag\n")
    fz = Featurizer(spec_for(policy.ir))
    names = fz.spec.names()
    x = fz.row(policy.legal({}).root, ["go", "stop"])
    assert x[names.index("a.flag")] == 1 and x[names.index("a.kind=y")] == 1
    assert x[names.index("b.note absent")] == 1 and x[names.index("go legal")] == 1
    assert np.array_equal(x, fz.one({}, ["go", "stop"]))
