"""`zc arms`: held-out decisions through several arms side by side (the specialist here; the real local
model's arms are in tests/test_local_tier.py), receipts per arm, the table in text, JSON and HTML, and no
ranking of an arm measured on fewer decisions."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from zcompile.cli import main
from zcompile.evals import arms
from zcompile.receipts import read

ROOT = Path(__file__).parents[1]


def test_zc_arms_writes_the_table_and_receipts_per_arm(tmp_path):
    out = tmp_path / "arms"
    args = [
        "arms",
        "--policy",
        str(ROOT / "policies" / "airline_chat.zc"),
        "--specialists",
        str(ROOT / "specialists" / "airline_chat"),
        "--receipts",
        str(ROOT / "receipts"),
        "--limit",
        "12",
        "--out",
        str(out),
    ]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    rep = json.loads((out / "arms.json").read_text())
    (arm,) = rep["arms"]
    assert (rep["format"], rep["n"], arm["arm"], arm["n"], arm["rank"]) == (
        "zc-arms/1",
        12,
        "specialist",
        12,
        1,
    )
    s = arm["success_strict"]
    assert s["n"] == 12 and s["ci"][0] <= s["rate"] <= s["ci"][1]
    assert arm["answered"] + arm["abstained"] == 12 and arm["illegal"] == 0
    assert len(list(read([out / "receipts" / "specialist.jsonl"]))) == 12
    html = (out / "arms.html").read_text()
    assert "<svg" in html and "warm p50 (ms, log scale)" in html and "specialist" in html
    assert "arms on 12 held-out decisions" in r.output
    again = CliRunner().invoke(main, args)  # never over an earlier run's files
    assert again.exit_code == 1 and "exists and is not empty" in again.output


def _arm(name, n, k, p50):
    share = {"k": k, "n": n, "rate": k / n, "ci": [0.0, 1.0]}
    return {
        "arm": name,
        "n": n,
        "success_strict": share,
        "success_acceptable": share,
        "warm_p50_ms": p50,
        "rank": None,
        "pareto": False,
    }


def test_an_arm_measured_on_fewer_decisions_is_not_ranked_and_the_frontier_is_pareto():
    results = [
        _arm("fast", 150, 40, 0.3),
        _arm("slow-good", 150, 90, 400.0),
        _arm("dominated", 150, 30, 500.0),
        _arm("few", 20, 19, 0.1),
        _arm("abstains", 150, 0, 0.01),  # fastest of all, and right on nothing: no trade-off
    ]
    assert arms.rank(results) == 150
    got = {r["arm"]: (r["rank"], r["pareto"]) for r in results}
    assert got == {"slow-good": (1, True), "fast": (2, True), "dominated": (3, False), "few": (None, False),
                   "abstains": (4, False)}
    rep = {
        "n": 150,
        "arms": [
            {**r, "filter": "compiler-first", "abstained": 0, "dangerous": 0, "illegal": 0, "cold_loads": 0}
            for r in results
        ],
    }
    assert arms.table_rows(rep)[4][-2] == "not ranked (n 20 < 150)"
    plot = arms.plot(rep)
    assert len(plot["points"]) == 5 and plot["frontier"].count(",") == 2
