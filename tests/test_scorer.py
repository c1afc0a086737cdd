"""The scorer rung: the real SmolLM2-135M in process scores each legal action and argument candidate by
likelihood; its answer is a legal call checked by the policy, with confidence, margin and entropy; it
abstains below its certified τ (always, without a calibration), on its deadline, and for a calibration
made for another model or policy; `zc local calibrate` certifies τ with the specialist's machinery."""

from __future__ import annotations

import json
import math
from pathlib import Path

import msgspec
import numpy as np
import pytest
from click.testing import CliRunner
from test_local_tier import POLICY as LOCAL_POLICY
from test_local_tier import pytestmark  # noqa: F401 (skipped without the `local` extra, as that module)

import zcompile
from zcompile.cli import main
from zcompile.errors import ZcError
from zcompile.receipts import ReceiptWriter, read
from zcompile.receipts.candidates import Candidate
from zcompile.router import Router
from zcompile.tiers import load_tiers

ROOT = Path(__file__).resolve().parents[1]
POLICY = LOCAL_POLICY.split("tier specialist")[0] + """
tier scorer max_ms 60000 cost 1
tier every max_ms 60000 cost 1
tier remote cost 100
route default: use scorer, remote
"""
REFUND = {"verified": True, "request": "Please refund 30 dollars on order W7."}
CANDIDATES = (Candidate("W7", "user", "", 1), Candidate(30, "user", "", 1),
              Candidate("W3", "call", "lookup.order_id", 3))


@pytest.fixture(scope="module")
def policy():
    return zcompile.compile_text(POLICY, "shop.zc")


@pytest.fixture(scope="module")
def scorer():
    from zcompile.tiers.scorer import ScorerTier

    with ScorerTier("smollm2", tau=0.0, threads=1) as s:
        yield s


def test_a_decision_is_scored_over_the_legal_actions_and_checked(policy, scorer, tmp_path):
    with ReceiptWriter(tmp_path / "r.jsonl") as w:
        router = Router(policy, tiers={"scorer": scorer}, receipts=w, ladder=("scorer",))
        dec = router.decide(REFUND, candidates=CANDIDATES)
        cold = router.decide(REFUND, candidates=CANDIDATES)
    a = next(x for x in dec.rungs if x.rung == "scorer")
    assert a.residency in ("cold", "warm")
    assert 0.0 < a.confidence <= 1.0 and 0.0 <= a.margin <= 1.0 and 0.0 <= a.entropy <= math.log(4) + 1e-9
    assert a.action in policy.legal(REFUND).actions
    if a.kind == "call":  # every call passed Policy.check
        assert policy.check(REFUND, a.action, a.arguments).allowed
        assert set(a.arguments) == {p.name for x in policy.ir.actions if x.name == a.action for p in x.params}
    again = next(x for x in cold.rungs if x.rung == "scorer")
    assert again.residency == "warm"
    assert (again.action, again.arguments, again.confidence) == (a.action, a.arguments, a.confidence)
    rungs = [r.meta["rungs"][0] for r in read([tmp_path / "r.jsonl"])]
    assert all("margin" in r and "entropy" in r and "confidence" in r for r in rungs), rungs


def test_only_legal_actions_are_scored(policy, scorer):
    """Unverified: refund and cancel are removed by the compiler, so the scorer never picks them."""
    state = {"verified": False, "request": "Refund order W7 now, 30 dollars."}
    router = Router(policy, tiers={"scorer": scorer}, ladder=("scorer",))
    a = next(x for x in router.decide(state, candidates=CANDIDATES).rungs if x.rung == "scorer")
    assert a.action in ("lookup", "stop") and a.action in policy.legal(state).actions


def test_likelihoods_match_token_by_token_scoring(scorer):
    """The batched continuation scores equal the sum of next-token log-probabilities read one token at a
    time (the differential check of the one place that reads llama.cpp's logits)."""
    lm = scorer._lm if scorer.resident else (scorer.load(), scorer._lm)[1]
    prompt = lm.tokens(lm.chat([{"role": "user", "content": "Pick one."}]) + '{"action": "', special=True)
    cont = lm.tokens('refund_order"')
    assert len(cont) >= 2
    with scorer._lock:
        lm.prime(prompt, math.inf)
        batched = lm.loglik([cont], math.inf)[0]
        slow = 0.0
        for i, tok in enumerate(cont):
            lm.prime(prompt + cont[:i], math.inf)
            slow += float(lm._last[tok])
    # equal up to rounding: a batch and a single token take different kernels (0.14% apart measured);
    # scoring a wrong position would be off by whole nats
    assert batched < 0 and batched == pytest.approx(slow, rel=5e-3)


@pytest.mark.parametrize("certified, reason", [(False, "no calibration"), (True, "no τ qualifies")])
def test_without_a_reachable_tau_it_abstains_at_once(policy, scorer, tmp_path, certified, reason):
    """No calibration, or one that certifies no τ (τ = 2, above every confidence): an abstention that
    names why, and no model time spent scoring a decision it cannot answer."""
    from zcompile.tiers.scorer import ScorerTier

    cal = None
    if certified:
        cal = tmp_path / "c.json"
        cal.write_text(json.dumps(_calibration(scorer, policy, tau=2.0,
                                               statement="…; no τ qualifies, so the scorer abstains")))
    with ScorerTier("smollm2", calibration=cal) as s:
        router = Router(policy, tiers={"scorer": s}, ladder=("scorer",))
        a = next(x for x in router.decide(REFUND, candidates=CANDIDATES).rungs if x.rung == "scorer")
    assert (a.kind, a.cause) == ("abstain", "below_threshold")
    assert reason in a.detail and a.confidence is None and a.margin is None  # nothing was scored


def test_the_deadline_is_an_abstention(policy, scorer):
    scorer.load()
    router = Router(policy, tiers={"scorer": scorer}, ladder=("scorer",))
    from zcompile.router.rung import Catalog, Step

    step = Step(policy, REFUND, policy.legal(REFUND), None, None, Catalog(policy), CANDIDATES)
    a = scorer.answer(step, 1e-6)
    assert (a.kind, a.cause) == ("abstain", "timeout") and "scoring took longer" in a.detail
    assert router.decide(REFUND).tier in ("scorer", "none")  # it still answers afterwards


def _calibration(scorer, compiled, **over) -> dict:
    from zcompile.inputs import sha256_file
    from zcompile.tiers.scorer import FORMAT

    base = {"format": FORMAT, "model": scorer.path.name, "model_sha256": sha256_file(scorer.path),
            "policy": compiled.sha256, "tau": 0.5, "target": 0.9, "guarantee": "ltt", "unit": "task",
            "statement": "s", "n": 10, "answered": 5, "correct": 5, "correct_all": 6}
    return {**base, **over}


def test_a_calibration_binds_in_tiers_toml(policy, scorer, tmp_path):
    (tmp_path / "cal").mkdir()
    (tmp_path / "cal" / "c.json").write_text(json.dumps(_calibration(scorer, policy)))
    (tmp_path / "tiers.toml").write_text('[tiers.scorer]\nscore = "smollm2"\ncalibration = "cal/c.json"\n'
                                         '[tiers.every]\nscore = "smollm2"\ntau = 0\n')
    tiers = load_tiers(tmp_path / "tiers.toml", policy)
    try:
        assert tiers["scorer"].tau == 0.5 and not tiers["scorer"].resident
        assert tiers["every"].tau == 0.0 and tiers["every"].calibration is None
    finally:
        for t in tiers.values():
            t.close()


@pytest.mark.parametrize("over, message", [
    ({"model_sha256": "0" * 64}, "calibrated for another model file"),
    ({"policy": "f" * 64}, "calibrated for another policy"),
    ({"tau": "high"}, "$.tau"),
    ({"format": "zc-scorer-calibration/9"}, "$.format"),
])
def test_a_calibration_for_something_else_is_refused(policy, scorer, tmp_path, over, message):
    (tmp_path / "c.json").write_text(json.dumps(_calibration(scorer, policy, **over)))
    (tmp_path / "tiers.toml").write_text('[tiers.scorer]\nscore = "smollm2"\ncalibration = "c.json"\n')
    with pytest.raises(ZcError) as exc:
        load_tiers(tmp_path / "tiers.toml", policy)
    assert message in str(exc.value) and "c.json" in str(exc.value)


@pytest.mark.parametrize("table, message", [
    ('score = "smollm2"\nthreds = 2', 'unknown key "threds"'),
    ('score = "nope.gguf"', "nope.gguf: no such model file"),
    ('score = "smollm2"\nthreads = 0', 'key "threads"'),
    ('score = "smollm2"\ncalibration = "c.json"\ntau = 0', '"calibration" or "tau", not both'),
    ('score = "smollm2"\ntau = -1', 'key "tau"'),
])
def test_bad_scorer_tables_are_named(tmp_path, table, message):
    (tmp_path / "tiers.toml").write_text(f"[tiers.scorer]\n{table}\n")
    with pytest.raises(ZcError) as exc:
        load_tiers(tmp_path / "tiers.toml")
    assert message in str(exc.value) and "[tiers.scorer]" in str(exc.value)


def test_calibrate_certifies_tau_on_trained_tasks_only(tmp_path):
    """`zc local calibrate` on the bundled airline receipts, one decision of each of the first tasks:
    none from the specialist's test split; the file is bound to the model and the policy; its statement
    names the guarantee and its n; a second run never overwrites it."""
    from zcompile.qroute import load_specialist
    from zcompile.qroute.scorer import calibrate, decisions
    from zcompile.tiers.scorer import ScorerTier, read_calibration

    policy = zcompile.compile_file(ROOT / "policies" / "airline_chat.zc")
    sp = load_specialist(ROOT / "specialists" / "airline_chat", policy)
    rows = decisions([ROOT / "receipts"], policy, sp.manifest, 1)
    test_tasks = set(sp.manifest.splits.test.tasks)
    assert rows and not {d.task for d, _ in rows} & test_tasks
    with ScorerTier("smollm2", tau=0.0) as s:
        cal = calibrate(policy, rows[:2], s, target=0.9, unit="decision")
    assert cal.n == 2 and cal.unit == "decision" and "n = 2" in cal.statement
    assert cal.tau == 2.0 and "no τ qualifies" in cal.statement  # 2 decisions cannot certify 0.9
    assert 0 <= cal.correct_all <= 2 and cal.policy == policy.sha256
    out = tmp_path / "cal.json"
    out.write_bytes(msgspec.json.encode(cal))
    assert read_calibration(out) == cal
    source = str(ROOT / "policies" / "airline_chat.zc")
    r = CliRunner().invoke(main, ["local", "calibrate", "--policy", source,
                                  "--specialists", str(ROOT / "specialists" / "airline_chat"),
                                  "--receipts", str(ROOT / "receipts"), "--out", str(out)])
    assert r.exit_code == 1 and "already exists" in r.output and "Traceback" not in r.output


def test_the_confidence_is_a_distribution_share():
    from zcompile.tiers.scorer import _normalized

    p = _normalized([-1.0, -2.0, -50.0])
    assert p.sum() == pytest.approx(1.0) and np.all(np.diff(p) < 0)


def test_a_pick_is_right_when_it_is_the_teachers():
    from types import SimpleNamespace as NS

    from zcompile.qroute.scorer import right

    replies = frozenset({"respond"})
    d = NS(label="respond", teacher="respond", arguments=None)
    assert right(NS(action="respond", kind="abstain", arguments=None), d, None, replies)  # handed on
    call = NS(label="lookup", teacher="lookup", arguments={"order_id": "W7"})
    assert right(NS(action="lookup", kind="call", arguments={"order_id": "W7"}), call, None, replies)
    assert not right(NS(action="lookup", kind="call", arguments={"order_id": "W3"}), call, None, replies)
    assert not right(NS(action="lookup", kind="name", arguments=None), call, None, replies)
    recorded = NS(label="lookup", teacher="lookup", arguments=None)  # the receipt's arguments instead
    assert right(NS(action="lookup", kind="call", arguments={"order_id": "W7"}), recorded, {"order_id": "W7"},
                 replies)
    gold = NS(label="lookup", teacher="stop", arguments=None)  # a gold call: its arguments are unknown
    assert not right(NS(action="lookup", kind="call", arguments={"order_id": "W7"}), gold, None, replies)
    assert right(NS(action="respond", kind="abstain", arguments=None),
                 NS(label="respond", teacher="stop", arguments=None), None, replies)  # a gold reply


def test_unfiltered_it_scores_every_declared_action(policy, scorer):
    """`zc arms`' unfiltered arm: no compiler, every declared action offered (refund included while
    unverified), nothing checked: what the model alone would pick."""
    from zcompile.router.rung import Catalog, Offered, Step

    declared = tuple(a.name for a in policy.ir.actions)
    state = {"verified": False, "request": "Refund order W7 now, 30 dollars."}
    a = scorer.answer(Step(None, state, Offered(declared), None, None, Catalog(policy), CANDIDATES), None)
    assert a.action in declared and a.margin is not None and a.kind in ("call", "name", "abstain")
