"""`zc eval`: replay receipts through the compiler and a specialist; sealing, figures, JSON, HTML, CLI."""

from __future__ import annotations

import itertools
import random
from html.parser import HTMLParser
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner

import zcompile
from zcompile import ZcError, evals, stats
from zcompile.cli import main
from zcompile.evals import metrics
from zcompile.qroute import Settings, distill, load_decisions
from zcompile.qroute.specialist import Specialist
from zcompile.receipts import Receipt, write_file

POLICY = """
policy toy
state {
  phase: enum(start, middle, end)
  mood:  enum(calm, angry, unsure)
  kind:  enum(a, b, c)
}
action greet()     tags(control)
action lookup()    tags(read)
action refund()    tags(write, money)
action close()     tags(control)
action escalate()  tags(control)
fallback escalate
rule refund_angry: refund requires mood == angry
rule greet_first:  greet requires phase == start
rule close_last:   close requires phase == end
rule locked:       forbid greet, lookup, refund, close when kind == c
tier specialist max_ms 50
tier remote cost 10
route unsure:  when mood == unsure use remote
route default: use specialist, remote
"""
STATES = [{"phase": p, "mood": m, "kind": k}
          for p, m, k in itertools.product(("start", "middle", "end"), ("calm", "angry", "unsure"),
                                           ("a", "b", "c"))]


def teacher(s: dict) -> str:
    """The learnable pattern: what the expensive model does in state s."""
    if s["kind"] == "c":
        return "escalate"
    if s["phase"] == "start":
        return "greet"
    if s["phase"] == "end":
        return "close"
    return "refund" if s["mood"] == "angry" else "lookup"


def receipt(task: str, i: int, state: dict, action: str | None, **kw) -> Receipt:
    return Receipt(id=f"{task}:{i}", task=task, state=state, tier="remote", action=action, **kw)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("eval")
    (d / "toy.zc").write_text(POLICY)
    policy = zcompile.compile_file(d / "toy.zc")
    rng = random.Random(7)
    rows = []
    for t in range(20):  # 20 tasks of 24 decisions: split 14 / 3 / 3
        for i in range(24):
            s = rng.choice(STATES)
            rows.append(receipt(f"task-{t:02d}", i, s, teacher(s)))
    write_file(d / "train.jsonl", rows)
    distill([d / "train.jsonl"], policy, d / "spec", Settings(model="logistic", target_precision=0.8,
                                                                         unit="decision"))
    return d, policy, Specialist(d / "spec", policy)


def hand_case(d: Path) -> Path:
    """Six receipts of a task the specialist never saw, with figures computable by hand."""
    s = lambda p, m, k: {"phase": p, "mood": m, "kind": k}  # noqa: E731
    rows = [
        receipt("new-1", 0, s("start", "calm", "c"), "escalate"),          # compiler, right
        receipt("new-1", 1, s("end", "calm", "c"), "escalate", gold="close"),  # compiler, wrong (gold)
        receipt("new-1", 2, s("start", "calm", "a"), "greet"),             # specialist, right
        # specialist refund: wrong, dangerous
        receipt("new-1", 3, s("middle", "angry", "b"), "lookup"),
        receipt("new-1", 4, s("end", "calm", "a"), None),                  # abstained: dropped
        receipt("new-1", 5, s("end", "calm", "a"), "close", verified=False),  # judged wrong: dropped
    ]
    write_file(d / "hand.jsonl", rows)
    return d / "hand.jsonl"


def test_hand_computed_figures(setup):
    d, policy, spec = setup
    for st in ({"phase": "start", "mood": "calm", "kind": "a"},
               {"phase": "middle", "mood": "angry", "kind": "b"}):
        assert spec.decide(st, policy.legal(st).actions).action == teacher(st)  # the specialist answers
    rep = evals.report([hand_case(d)], policy, spec)
    assert rep["n"] == 4 and rep["held_out"] and rep["unseen_tasks"] == 1 and rep["excluded_trained_on"] == 0
    assert rep["counts"]["dropped_abstained"] == 1 and rep["counts"]["dropped_judged_wrong"] == 1
    c, sp, o = rep["tiers"]["compiler"], rep["tiers"]["specialist"], rep["overall"]
    assert (c["reached"], c["answered"], c["correct"], c["coverage"], c["precision"]) == (4, 2, 1, 0.5, 0.5)
    assert (sp["reached"], sp["answered"], sp["correct"], sp["coverage"],
            sp["precision"]) == (2, 2, 1, 0.5, 0.5)
    assert (o["answered"], o["coverage"], o["precision"]) == (4, 1.0, 0.5)
    assert o["precision_ci"] == list(stats.wilson(2, 4))
    assert c["agreement_teacher"]["k"] == 2 and c["agreement_gold"] == {**c["agreement_gold"], "k": 0, "n": 1}
    assert (sp["dangerous_exposed"], sp["dangerous_selected"]) == (1, 1)  # refund legal once, chosen wrongly
    assert (o["dangerous_exposed"], o["dangerous_selected"], c["dangerous_selected"]) == (1, 1, 0)
    assert rep["remote"]["reached"] == 0
    cost = rep["cost"]
    assert (cost["per_teacher_call"], cost["all_to_teacher"], cost["saved"], cost["teacher_calls_removed"],
            cost["cost_saved_share"]) == (10.0, 40.0, 40.0, 4, 1.0)
    assert c["p50_us"] > 0 and o["p99_us"] >= o["p50_us"]
    # every action declares an empty signature: each answered name is a complete call
    assert rep["calls"] == {"n": 4, "answered": 4, "correct": 2, "coverage": 1.0, "precision": 0.5,
                            "precision_ci": list(stats.wilson(2, 4)),
                            "acceptable": {"correct": 2, "precision": 0.5,
                                           "precision_ci": list(stats.wilson(2, 4))},
                            # no argument at all: every call is a constant one
                            "by_provenance": {"constant": {"answered": 4, "strict": evals.rate(2, 4),
                                                           "acceptable": evals.rate(2, 4)}}}
    assert (o["complete"], o["complete_correct"], o["handed_to_text_tier"]) == (4, 2, 0)
    # `lookup` reads, but no task here makes a lookup after another step: both judges agree
    assert rep["judge"]["lenient_actions"] == ["lookup"] and rep["judge"]["more_than_strict"] == 0
    assert o["acceptable"]["correct"] == o["correct"] and rep["off_teacher"]["taken"] == 4


def test_bare_names_remove_no_teacher_call(setup):
    """Without declared signatures the same answers are bare names: the teacher still has to give
    the arguments, so no call is removed and no complete call is counted."""
    d, policy, spec = setup
    names = zcompile.compile_text(POLICY.replace("()", ""), "names.zc")
    decisions = load_decisions([hand_case(d)], names).decisions
    rows = evals.replay(decisions, names, spec)
    assert {r.kind for r in rows if r.rung != "remote"} == {"name"}
    assert metrics.cost(rows, names)["teacher_calls_removed"] == 0
    assert evals.calls(rows)["answered"] == 0 and evals.calls(rows)["n"] == 4


def test_compiler_answers_singletons(setup):
    d, policy, spec = setup
    rows = [receipt("solo", i, {"phase": p, "mood": "calm", "kind": "c"}, "escalate")
            for i, p in enumerate(("start", "middle", "end"))]
    write_file(d / "solo.jsonl", rows)
    rep = evals.report([d / "solo.jsonl"], policy, spec)
    assert rep["tiers"]["compiler"]["answered"] == 3 and rep["tiers"]["compiler"]["precision"] == 1.0
    assert rep["tiers"]["specialist"]["reached"] == 0 and rep["tiers"]["specialist"]["p50_us"] is None
    assert rep["risk_coverage"]["points"] == []


def test_route_without_specialist_falls_through(setup):
    d, policy, spec = setup
    write_file(d / "unsure.jsonl", [receipt("unsure", 0, {"phase": "start", "mood": "unsure", "kind": "a"},
                                            "greet"),
                                    receipt("unsure", 1, {"phase": "start", "mood": "unsure", "kind": "c"},
                                            "escalate")])
    rep = evals.report([d / "unsure.jsonl"], policy, spec)
    assert rep["counts"]["route_skipped_specialist"] == 1 and rep["remote"]["reached"] == 1
    assert rep["tiers"]["compiler"]["answered"] == 1 and rep["tiers"]["specialist"]["answered"] == 0
    assert rep["cost"]["teacher_calls_removed"] == 1 and rep["cost"]["cost_saved_share"] == 0.5


def test_sealing(setup):
    d, policy, spec = setup
    train = d / "train.jsonl"
    m = spec.manifest
    rep = evals.report([train], policy, spec)  # default: only the sealed test split is reported
    assert rep["held_out"] and rep["label"] == "held-out"
    assert rep["n"] == m.splits.test.decisions
    assert rep["excluded_trained_on"] == m.splits.train.decisions + m.splits.calibration.decisions
    assert rep["excluded_tasks"] == len(m.splits.train.tasks) + len(m.splits.calibration.tasks)
    with pytest.raises(ZcError, match=r"receipts of 17 tasks the specialist was trained on \(e\.g\. "
                                      r"`task-00`\) cannot be reported as held-out; use --split test or "
                                      r"--allow-trained"):
        evals.report([train], policy, spec, split="all")
    rep = evals.report([train], policy, spec, split="all", allow_trained=True)
    assert not rep["held_out"] and rep["label"] == "NOT held-out" and rep["n"] == 480
    trained_only = d / "trained_only.jsonl"
    write_file(trained_only, [receipt("task-00", 0, STATES[0], "greet")])
    with pytest.raises(ZcError, match="none of the 1 decisions is held out"):
        evals.report([trained_only], policy, spec)


def test_mismatched_policy_refused(setup):
    d, _, _ = setup
    other = zcompile.compile_text(POLICY.replace("action close()",
                                                 "action wait() tags(control)\naction close()"))
    with pytest.raises(ZcError, match="specialist was trained for policy `toy`.*distil it again"):
        evals.run(other, d / "spec", [d / "train.jsonl"])


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.text = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        self.text.append(data)


def test_cli_json_html_and_text(setup, tmp_path):
    d, _, _ = setup
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    res = CliRunner().invoke(main, ["eval", "--policy", str(d / "toy.zc"), "--specialists", str(d / "spec"),
                                    "--receipts", str(d / "train.jsonl"), str(hand_case(d)),
                                    "--json", str(out_json), "--html", str(out_html)])
    assert res.exit_code == 0, res.output
    for word in ("compiler", "specialist", "remote", "overall", "Wilson 95%", "held-out", "p99 µs"):
        assert word in res.output
    rep = msgspec.json.decode(out_json.read_bytes())
    assert set(rep["tiers"]) == {"compiler", "specialist"}
    assert {"coverage", "precision", "precision_ci", "answered", "dangerous_exposed", "dangerous_selected",
            "p50_us", "p99_us"} <= set(rep["overall"])
    assert isinstance(rep["n"], int) and len(rep["overall"]["precision_ci"]) == 2
    assert rep["unseen_tasks"] == 1 and rep["excluded_trained_on"] > 0
    page = out_html.read_text()
    parser = _Collect()
    parser.feed(page)
    parser.close()
    assert {"table", "svg", "polyline", "circle"} <= set(parser.tags)
    assert "script" not in parser.tags and "http://" not in page.replace(
        'xmlns="http://www.w3.org/2000/svg"', "")
    assert "NOT held-out" not in "".join(parser.text)


def test_cli_errors(setup, tmp_path):
    d, _, _ = setup
    base = ["eval", "--policy", str(d / "toy.zc"), "--specialists", str(d / "spec"),
            "--receipts", str(d / "train.jsonl")]
    runner = CliRunner()
    res = runner.invoke(main, [*base, "--split", "all"])
    assert res.exit_code == 1 and "use --split test or --allow-trained" in res.output
    assert "Traceback" not in res.output
    res = runner.invoke(main, [*base, "--split", "all", "--allow-trained", "--html",
                               str(tmp_path / "x.html")])
    assert res.exit_code == 0 and "NOT held-out" in res.output
    assert "NOT held-out" in (tmp_path / "x.html").read_text()
    assert runner.invoke(main, [*base, "--split", "bogus"]).exit_code == 2
    assert runner.invoke(main, ["eval", "--policy", str(d / "toy.zc")]).exit_code == 2
    # --policy may be left out only for a pairwise specialist distilled without one
    res = runner.invoke(main, ["eval", *base[3:]])
    assert res.exit_code == 2 and res.output == ("error: --policy is required: `spec` is a logistic "
                                                 "specialist; give the policy it was distilled for (`toy`)\n")
    with pytest.raises(ZcError, match="--policy is required: `spec` is a logistic specialist"):
        evals.run(None, d / "spec", [d / "train.jsonl"])
    res = runner.invoke(main, [*base[:-1], str(tmp_path / "missing.jsonl")])
    assert res.exit_code == 1 and "missing.jsonl" in res.output and "Traceback" not in res.output
    res = runner.invoke(main, [*base[:3], "--specialists", str(tmp_path), *base[5:]])
    assert res.exit_code == 1 and "not a specialist directory" in res.output


def test_no_usable_receipts_says_what_became_of_them(setup, tmp_path):
    """`zc eval` and `zc distill` with nothing to learn or replay say how many receipts were read and
    why none was used, not a guess of three reasons."""
    d, policy, _ = setup
    s = {"phase": "start", "mood": "calm", "kind": "a"}
    (tmp_path / "none.jsonl").write_text("\n")
    write_file(tmp_path / "dropped.jsonl", [receipt("new", 0, s, None),
                                            receipt("new", 1, s, "greet", verified=False),
                                            receipt("new", 2, s, None)])
    (tmp_path / "bad.jsonl").write_text("[]\n")
    base = ["eval", "--policy", str(d / "toy.zc"), "--specialists", str(d / "spec"), "--skip-invalid",
            "--receipts"]
    for name, problem in (("none.jsonl", "the files hold none"),
                          ("dropped.jsonl", "of 3 read, 2 abstained, 1 judged wrong"),
                          ("bad.jsonl", "of 1 read, 1 invalid (skipped)")):
        res = CliRunner().invoke(main, [*base, str(tmp_path / name)])
        assert res.exit_code == 1 and res.stderr.endswith("error: no usable receipts: "
                                                          f"{problem}\n"), res.output
    with pytest.raises(ZcError, match=r"^no usable receipts: of 3 read, 2 abstained, 1 judged wrong$"):
        load_decisions([tmp_path / "dropped.jsonl"], policy)


def test_configured_tiers_answer_in_the_replay(setup):
    """With tiers configured the replay is the router's with them on: a tier's answers are its own
    rung's, and a complete call it makes removes a teacher call."""
    d, _, spec = setup

    class Small:
        model = "small-model"

        def propose(self, state, legal, *, timeout_s, intent=None, descriptions=None):
            from zcompile.tiers import TierAnswer

            return TierAnswer("answered", "greet" if "greet" in legal else legal[0])

    with_small = zcompile.compile_text(POLICY.replace("tier remote cost 10",
                                                      "tier small max_ms 100\ntier remote cost 10")
                                       .replace("when mood == unsure use remote",
                                                "when mood == unsure use small, remote"))
    write_file(d / "unsure2.jsonl", [receipt("unsure2", 0, {"phase": "start", "mood": "unsure", "kind": "a"},
                                             "greet"),
                                     receipt("unsure2", 1, {"phase": "start", "mood": "unsure", "kind": "c"},
                                             "escalate")])
    rep = evals.report([d / "unsure2.jsonl"], with_small, spec, tiers={"small": Small()})
    assert rep["tiers"]["small"]["answered"] == 1 and rep["tiers"]["small"]["correct"] == 1
    assert rep["remote"]["reached"] == 0 and rep["cost"]["teacher_calls_removed"] == 2
    res = CliRunner().invoke(main, ["eval", "--policy", str(d / "toy.zc"), "--specialists", str(d / "spec"),
                                    "--receipts", str(d / "unsure2.jsonl"), "--tiers",
                                    str(d / "missing.toml")])
    assert res.exit_code == 1 and "missing.toml: cannot read" in res.output and "Traceback" not in res.output
