"""The one-pass feature row: the same vector from a LegalSet's validated state as from the raw state,
and the same as token-by-token hashing (`text_buckets`), on the bundled receipts."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import zcompile
from zcompile.qroute import load_decisions
from zcompile.qroute.features import Featurizer, spec_for, text_buckets

ROOT = Path(__file__).resolve().parents[1]


def test_row_from_legal_set_root_equals_validating_again():
    policy = zcompile.compile_file(ROOT / "policies" / "airline_chat.zc")
    fz = Featurizer(spec_for(policy.ir))
    decisions = load_decisions([ROOT / "receipts"], policy).decisions[:150]
    names = fz.spec.names()
    texts = [f.path for f in fz.spec.fields if f.kind == "text"]
    hashed = 0
    for d in decisions:
        legal = policy.legal(d.state)
        x = fz.row(legal.root, d.legal)
        assert np.array_equal(x, fz.one(d.state, d.legal))
        for path in texts:  # each text field's buckets are what hashing its text alone gives
            start = names.index(f"{path}#h0")
            value = d.state.get(path.split(".")[0], {}).get(path.split(".")[1])
            if value:
                hashed += 1
                assert np.array_equal(x[start:start + fz.spec.text_dim], text_buckets(value, fz.spec.text_dim))
    assert hashed > 50


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
