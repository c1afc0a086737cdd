"""`zc eval --decisions`, precision per task, risk–coverage of calls and replies apart, and the HTML
charts: each figure recomputed from the rows it summarises, end to end on the bundled receipts."""

from __future__ import annotations

import math
from collections import defaultdict
from html.parser import HTMLParser
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner
from test_eval_router import Handing

import zcompile
from zcompile import evals, stats
from zcompile.cli import main
from zcompile.evals.decisions import DecisionRow, is_decisions_file
from zcompile.receipts import read
from zcompile.receipts.candidates import (
    Candidate,
    Provenance,
    call_provenance,
    provenance_of,
)

ROOT = Path(__file__).parents[1]
POLICY = ROOT / "policies" / "airline_chat.zc"
SHIPPED = ROOT / "specialists" / "airline_chat"
EVAL = ["eval", "--policy", str(POLICY), "--specialists", str(SHIPPED), "--receipts", str(ROOT / "receipts")]


def test_provenance_prefers_the_user_then_calls_then_tools():
    cands = [Candidate("8JX2WO", "tool", "reservations"), Candidate("8JX2WO", "user"),
             Candidate("mia_li_3668", "tool", "user_id"),
             Candidate("mia_li_3668", "call", "get_user_details.user_id"),
             Candidate(2, "tool", "passengers"), Candidate("economy", "constant"), Candidate(3.0, "user")]
    sources = provenance_of(cands)
    each, call = call_provenance({"reservation_id": "8JX2WO", "user_id": "mia_li_3668"}, sources)
    assert each == {"reservation_id": Provenance.USER, "user_id": Provenance.CALL} and call is Provenance.CALL
    each, call = call_provenance({"n": 2, "cabin": "economy", "x": 3}, sources)  # 3 == 3.0 when normalized
    assert each == {"n": Provenance.TOOL, "cabin": Provenance.CONSTANT, "x": Provenance.USER}
    assert call is Provenance.CONSTANT  # the weakest value decides the call's kind
    each, call = call_provenance({"ids": ["8JX2WO", "HAT069"], "who": {"id": "mia_li_3668"}}, sources)
    assert each == {"ids": Provenance.NONE, "who": Provenance.CALL} and call is Provenance.NONE
    assert call_provenance({}, sources) == ({}, Provenance.CONSTANT)
    assert call_provenance({"a": "x"}, provenance_of(None)) == ({"a": Provenance.NONE}, Provenance.NONE)


def test_stats_task_helpers_by_hand():
    # all n tasks clean: the one-sided bound is alpha^(1/n); 0.95 needs ceil(ln 0.05 / ln 0.95) = 59
    assert stats.tasks_needed(0, 0, 0.95) == math.ceil(math.log(0.05) / math.log(0.95)) == 59
    assert stats.tasks_needed(3, 3, 0.95) == 56 and stats.tasks_needed(59, 59, 0.95) == 0
    k = stats.tasks_needed(58, 60, 0.95)  # two unclean tasks: the first m that reaches the target
    assert stats.lower_bound(58 + k, 60 + k) >= 0.95 > stats.lower_bound(58 + k - 1, 60 + k - 1)
    import numpy as np

    bins = stats.reliability(np.array([0.05, 0.95, 0.91, 0.55]), np.array([0.0, 1.0, 0.0, 1.0]))
    assert [(b["n"], b["k"]) for b in bins] == [(1, 0), (1, 1), (2, 1)]
    assert bins[2]["confidence"] == pytest.approx(0.93) and bins[2]["ci"] == list(stats.wilson(1, 2))


@pytest.fixture(scope="module")
def policy():
    return zcompile.compile_file(POLICY)


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """`zc eval --decisions` of the shipped specialist on the bundled receipts (the sealed test split)."""
    d = tmp_path_factory.mktemp("eval")
    out, rep_path, html = d / "decisions.jsonl", d / "r.json", d / "r.html"
    res = CliRunner().invoke(main, [*EVAL, "--decisions", str(out), "--json", str(rep_path),
                                    "--html", str(html)])
    assert res.exit_code == 0, res.output
    rows = [msgspec.json.decode(line, type=DecisionRow) for line in out.read_bytes().splitlines()]
    return rows, msgspec.json.decode(rep_path.read_bytes()), html.read_text(), res.output, d


def test_decisions_file_holds_every_replayed_decision(shipped, policy):
    rows, rep, _, _, _ = shipped
    assert len(rows) == rep["n"] and "decisions" not in rep  # the rows are in their own file only
    assert {r.task for r in rows} <= set(read_tasks()) and len({r.id for r in rows}) == len(rows)
    assert all(r.version == 1 and (r.novelty is None) == (r.confidence is None) for r in rows)
    calls = [r for r in rows if r.kind == "call"]
    assert len(calls) == rep["calls"]["answered"] > 0
    assert sum(r.acceptable for r in calls) == rep["calls"]["acceptable"]["correct"]
    assert sum(r.strict for r in calls) == rep["calls"]["correct"]
    fell = [r for r in rows if r.rung == "remote" and not r.handed_on]
    assert fell and all(r.strict is None and r.acceptable is None for r in fell)
    handed = [r for r in rows if r.handed_on]
    assert len(handed) == rep["overall"]["handed_to_text_tier"]
    assert sum(r.strict for r in handed) == rep["overall"]["handed_precision"]["k"]
    # every argument's provenance recomputed from the candidates its receipt recorded
    by_id = {r.id: r for r in read([ROOT / "receipts"], policy=policy)}
    for r in calls:
        each, call = call_provenance(r.arguments, provenance_of(by_id[r.id].candidates))
        assert (r.provenance, r.source) == (each, call), r.id
    by = defaultdict(lambda: [0, 0])
    for r in calls:
        by[r.source.value][0] += 1
        by[r.source.value][1] += r.acceptable
    assert {k: (v["answered"], v["acceptable"]["k"]) for k, v in rep["calls"]["by_provenance"].items()} == \
        {k: tuple(v) for k, v in by.items()}
    # the specialist's confidence where it was asked; none where the compiler answered alone
    assert all(r.confidence is None for r in rows if r.rung == "compiler")
    assert all(0.0 <= r.confidence <= 1.0 for r in rows if r.rung == "specialist")


def read_tasks():
    return {r.task for r in read([ROOT / "receipts"])}


def test_precision_per_task_and_the_worst(shipped):
    rows, rep, _, text, _ = shipped
    for key, pick in (("calls", lambda r: r.kind == "call"), ("replies", lambda r: r.handed_on)):
        per = defaultdict(lambda: [0, 0, 0])
        for r in filter(pick, rows):
            per[r.task][0] += 1
            per[r.task][1] += r.strict
            per[r.task][2] += r.acceptable
        block = rep["per_task"][key]
        got = {t["task"]: (t["answered"], t["strict"]["k"], t["acceptable"]["k"]) for t in block["tasks"]}
        assert got == {t: tuple(v) for t, v in per.items()} and got
        for t in block["tasks"]:
            assert t["acceptable"]["ci"] == list(stats.wilson(t["acceptable"]["k"], t["answered"]))
        worst = min(block["tasks"], key=lambda t: (t["acceptable"]["rate"], -t["answered"], t["task"]))
        assert block["worst"] == worst
        assert block["below"] == [t["task"] for t in block["tasks"] if t["answered"] >= 3
                                  and t["acceptable"]["rate"] < 0.80]
        assert f"worst `{worst['task']}` acceptable" in text
    # on the sealed test split, one task holds the wrong calls (issue 37's pattern)
    assert rep["per_task"]["calls"]["below"] == [rep["per_task"]["calls"]["worst"]["task"]]


def test_risk_coverage_of_calls_and_replies_apart(shipped):
    """Calls at the call τ, replies at the reply τ, each under both judges; the names curve's point is
    the specialist's committed outputs, not the call τ applied to everything."""
    rows, rep, _, text, _ = shipped
    m = msgspec.json.decode((SHIPPED / "manifest.json").read_bytes())
    rc = rep["risk_coverage"]
    calls, replies = rc["calls"], rc["replies"]
    assert calls["tau"] == m["threshold"]["tau"] and replies["tau"] == m["calls"]["reply_threshold"]["tau"]
    mine = [r for r in rows if r.rung == "specialist" and r.kind == "call"]
    assert calls["answered"] == len(mine)
    assert calls["acceptable"]["at_tau"]["correct"] == sum(r.acceptable for r in mine)
    assert calls["strict"]["at_tau"]["correct"] == sum(r.strict for r in mine)
    assert calls["acceptable"]["points"][-1]["coverage"] == pytest.approx(calls["coverage"])  # ends at τ
    handed = [r for r in rows if r.handed_on]
    assert replies["answered"] == len(handed) and replies["judged"] == replies["n"] >= len(handed)
    assert replies["acceptable"]["points"][-1]["coverage"] == pytest.approx(1.0)
    assert all(r.confidence >= replies["tau"] for r in handed)
    committed = [r for r in rows if r.rung == "specialist" or r.handed_on]
    assert rc["at_tau"]["answered"] == len(committed)
    assert "risk–coverage, calls (τ = " in text and "risk–coverage, replies (τ = " in text


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.labels = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "svg":
            self.labels.append(dict(attrs).get("aria-label"))


def test_html_draws_the_charts_without_scripts(shipped):
    _, rep, html, _, _ = shipped
    p = _Tags()
    p.feed(html)
    assert "script" not in p.tags
    assert {"risk–coverage: calls", "risk–coverage: replies", "reliability diagram", "risk–coverage curve",
            "precision per task: answered complete calls",
            "precision per task: replies handed to a text tier"} <= set(p.labels)
    worst = rep["per_task"]["calls"]["worst"]["task"]
    assert f"{worst} (" in html and "Precision per task" in html


def test_decisions_file_never_replaces_a_strangers_file(shipped):
    _, _, _, _, d = shipped
    out = d / "decisions.jsonl"
    assert is_decisions_file(out)
    stranger = d / "notes.jsonl"
    stranger.write_text('{"id": "mine"}\n')
    res = CliRunner().invoke(main, [*EVAL, "--decisions", str(stranger)])
    assert res.exit_code == 1 and "is not a zc eval decisions file; refusing to overwrite it" in res.output
    assert stranger.read_text() == '{"id": "mine"}\n' and "Traceback" not in res.output


def test_reply_tau_and_call_tau_apart_on_a_rule(policy):
    """A rule specialist that hands replies on and answers calls: the kinds' curves count exactly the
    router's decisions (no reply τ without a calls manifest: `tau` is None)."""
    rep = evals.report([ROOT / "receipts"], policy, Handing(), split="all", decisions=True)
    rows = rep["decisions"]
    rc = rep["risk_coverage"]
    assert rc["replies"]["tau"] is None and rc["replies"]["answered"] == sum(r.handed_on for r in rows) > 0
    assert rc["calls"]["answered"] == sum(r.rung == "specialist" and r.kind == "call" for r in rows) > 0
    assert rc["replies"]["strict"]["at_tau"]["correct"] == sum(bool(r.strict) for r in rows if r.handed_on)
    text = evals.render_text(rep)
    assert "risk–coverage, replies (no τ): " in text
