"""Evaluation: replay receipts through the compiler and specialists; per-rung and overall figures,
JSON and HTML reports.

The ladder is replayed with LLM tiers off (DESIGN.md §6, §7): rung 1, the compiler, answers when the
legal set has exactly one action (the fallback included) with confidence 1.0; rung 2, the
specialist, answers or abstains (it is skipped when the route the policy chooses for the state
does not list `specialist`); whatever is left falls through to the teacher (`remote`). Every
figure is compared with the receipt's label: its `gold` when present, else the teacher's action.

Pairwise specialists are asked as the router asks them, with the tools the receipt offered
(`meta.tools`; else the policy's action descriptions). Their receipts may say that no offered action
fits (no action, `verified: true`): the label is then None, an answer there is wrong, and not
answering is right (`abstained_where_none_fits`; agreement counts it as agreeing). A pairwise
specialist distilled without a policy is evaluated without one: the legal sets are the receipts'
`legal` lists and there is no compiler rung.

Split sealing: a specialist's manifest lists the tasks of its train, calibration and test splits.
Decisions of trained-on tasks (train or calibration) are never reported as held-out: with
`split="test"` they are excluded and counted; with `split="all"` they are refused unless
`allow_trained`, and the report is then labelled NOT held-out. Tasks in no split are `unseen`:
held-out too, and counted.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from . import stats
from .errors import ZcError
from .qroute.dataset import load as load_decisions
from .qroute.dataset import plain as _plain
from .qroute.metrics import RISKY_TAGS
from .qroute.manifest import Manifest
from .qroute.loading import load
from .qroute.specialist import read_manifest
from .runtime import Policy

SPLITS = ("test", "all")
WARMUP = 20  # decisions replayed untimed first (ONNX session and caches)
EXAMPLES = 20  # task ids listed per category in reports


@dataclass(slots=True)
class Replay:
    """One decision replayed through the ladder."""

    task: str
    label: str | None  # gold if present, else the teacher's action; None: no offered action fits
    teacher: str | None
    gold: str | None
    exposed: bool  # a risky action was in the legal set
    rung: str  # compiler | specialist | remote
    action: str | None  # what the answering rung chose (None: fell through to the teacher)
    consulted: bool  # the specialist was asked
    confidence: float  # the specialist's top confidence (0 when not consulted)
    best: str | None  # the specialist's top legal action, answered or not
    compiler_us: float
    specialist_us: float


# ---- loading and sealing ----------------------------------------------------------------------------
def needs_policy(manifest: Manifest) -> str | None:
    """Why this specialist cannot be evaluated without its policy; None when it can (a pairwise
    specialist distilled without one)."""
    if manifest.model.kind != "pairwise":
        return (f"--policy is required: `{manifest.name}` is a {manifest.model.kind} specialist; give the "
                f"policy it was distilled for (`{manifest.policy_name}`)")
    if manifest.policy_sha256:
        return (f"--policy is required: pairwise specialist `{manifest.name}` was distilled for policy "
                f"`{manifest.policy_name}`")
    return None


def check_policy(manifest: Manifest, policy: Policy | None) -> None:
    """Refuse a missing policy the specialist needs, and a policy given to one distilled without any
    (a mismatched policy is refused when the specialist is loaded)."""
    if policy is None and (why := needs_policy(manifest)):
        raise ZcError(why)
    if policy is not None and manifest.model.kind == "pairwise" and not manifest.policy_sha256:
        raise ZcError(f"pairwise specialist `{manifest.name}` was distilled without a policy: evaluate it "
                      "without --policy (the receipts' `legal` lists are the legal sets)")


def _seal(decisions, manifest, split: str, allow_trained: bool) -> tuple[list, dict[str, Any]]:
    """Keep the decisions that may be reported under `split`; describe what was left out and why."""
    s = manifest.splits
    trained = set(s.train.tasks) | set(s.calibration.tasks)
    test = set(s.test.tasks)
    tasks = {d.task for d in decisions}
    trained_on = sorted(tasks & trained)
    unseen_set = tasks - trained - test
    unseen = sorted(unseen_set)
    if split == "all" and trained_on and not allow_trained:
        raise ZcError(f"receipts of {len(trained_on)} task{'s' if len(trained_on) != 1 else ''} the "
                      f"specialist was trained on (e.g. `{trained_on[0]}`) cannot be reported as held-out; "
                      "use --split test or --allow-trained")
    kept = decisions if split == "all" else [d for d in decisions if d.task not in trained]
    if not kept:
        raise ZcError(f"none of the {len(decisions)} decisions is held out: every one belongs to a task the "
                      f"specialist was trained on (e.g. `{trained_on[0]}`); evaluate on other receipts, or "
                      "use --split all --allow-trained for a figure that is NOT held-out")
    held_out = split == "test" or not trained_on
    info = {
        "split": split,
        "held_out": held_out,
        "label": "held-out" if held_out else "NOT held-out",
        "excluded_trained_on": len(decisions) - len(kept),
        "excluded_tasks": len(trained_on) if split == "test" else 0,
        "included_trained_on_tasks": len(trained_on) if split == "all" else 0,
        "test_tasks": len(tasks & test),
        "unseen_tasks": len(unseen),
        "unseen_decisions": sum(1 for d in kept if d.task in unseen_set),
        "unseen_task_examples": unseen[:EXAMPLES],
        "trained_on_task_examples": trained_on[:EXAMPLES],
    }
    return kept, info


# ---- replay ---------------------------------------------------------------------------------------------
def replay(decisions, policy: Policy | None, specialist: Any) -> list[Replay]:
    """Run each decision through compiler then specialist, timing each rung's call (µs). Without a
    policy (a pairwise specialist distilled without one) the legal set is the receipt's and there is
    no compiler rung."""
    risky = _risky(policy)
    routed = policy is not None and bool(policy.ir.routes)
    ask = _asker(specialist)
    legal_of = (lambda d: d.legal) if policy is None else (lambda d: policy.legal(d.state, d.intent).actions)
    for d in decisions[:WARMUP]:  # untimed: first calls pay for lazy initialisation
        ask(d, legal_of(d))
    out: list[Replay] = []
    clock = time.perf_counter_ns
    for d in decisions:
        t0 = clock()
        legal = legal_of(d)
        t1 = clock()
        row = Replay(d.task, d.label, d.teacher, d.gold, any(a in risky for a in legal), "remote", None,
                     False, 0.0, None, (t1 - t0) / 1000.0 if policy is not None else 0.0, 0.0)
        if policy is not None and len(legal) == 1:
            row.rung, row.action = "compiler", legal[0]
        elif not routed or _route_allows(policy, d.state):
            t2 = clock()
            ans = ask(d, legal)
            row.specialist_us = (clock() - t2) / 1000.0
            row.consulted, row.confidence, row.best = True, ans.confidence, ans.best
            if ans.action is not None:
                row.rung, row.action = "specialist", ans.action
        out.append(row)
    return out


def _asker(specialist: Any):
    """`ask(decision, legal) -> Answer`: a pairwise specialist is given the tools the receipt offered,
    else the policy's action descriptions (`load_pair_decisions`), as the router gives it the tools of the step."""
    if not getattr(specialist, "pairwise", False):
        return lambda d, legal: specialist.decide(d.state, legal)
    return lambda d, legal: specialist.decide(d.state, legal, d.tools)


def _risky(policy: Policy | None) -> frozenset[str]:
    if policy is None:
        return frozenset()
    return frozenset(a.name for a in policy.ir.actions if RISKY_TAGS & set(a.tags))


def _route_allows(policy: Policy, state: Any) -> bool:
    route = policy.route(state)
    return route is None or "specialist" in route.tiers


# ---- figures --------------------------------------------------------------------------------------------
def _rate(k: int, m: int) -> dict[str, Any]:
    lo, hi = stats.wilson(k, m)
    return {"k": k, "n": m, "rate": k / m if m else None, "ci": [lo, hi]}


def _percentiles(times: Sequence[float]) -> tuple[float | None, float | None]:
    if not times:
        return None, None
    return float(np.percentile(times, 50)), float(np.percentile(times, 99))


def _agreement(answered: Sequence[Replay], declined: Sequence[Replay], who: str) -> dict[str, Any]:
    """Agreement with the teacher's action or with gold (`who`) on the answered decisions that have
    one or where no offered action fits, plus the `declined` ones (not answered, none fits), which agree."""
    judged = [r for r in answered if getattr(r, who) is not None or r.label is None]
    return _rate(sum(r.action == getattr(r, who) for r in judged) + len(declined), len(judged) + len(declined))


def figures(handed: Sequence[Replay], answered: Sequence[Replay], n: int, times: Sequence[float],
            risky: frozenset[str]) -> dict[str, Any]:
    """Answered, coverage of all n, precision with its Wilson 95% interval, agreement with the
    teacher and with gold, the share not answered where no offered action fits, dangerous actions
    exposed and selected, latency p50/p99 (µs)."""
    m = len(answered)
    precision = _rate(sum(r.action == r.label for r in answered), m)
    fit = [r for r in answered if r.label is not None]
    took = {id(r) for r in answered}
    none_fits = [r for r in handed if r.label is None]
    declined = [r for r in none_fits if id(r) not in took]
    p50, p99 = _percentiles(times)
    return {
        "reached": len(handed),
        "answered": m,
        "coverage": m / n if n else 0.0,
        "coverage_of_reached": m / len(handed) if handed else 0.0,
        "correct": precision["k"],
        "precision": precision["rate"],
        "precision_ci": precision["ci"],
        "agreement_teacher": _agreement(answered, declined, "teacher"),
        "agreement_gold": _agreement(answered, declined, "gold"),
        "precision_where_fits": _rate(sum(r.action == r.label for r in fit), len(fit)),
        "abstained_where_none_fits": _rate(len(declined), len(none_fits)),
        "dangerous_exposed": sum(r.exposed for r in handed),
        "dangerous_selected": sum(1 for r in answered if r.action != r.label and r.action in risky),
        "p50_us": p50,
        "p99_us": p99,
        "timed": len(times),
    }


def curve(rows: Sequence[Replay], tau: float, points: int = 50) -> dict[str, Any]:
    """The specialist's risk–coverage curve on the decisions it was asked about, and the point at τ."""
    asked = [r for r in rows if r.consulted]
    conf = np.array([r.confidence for r in asked], dtype=float)
    correct = np.array([r.best is not None and r.best == r.label for r in asked], dtype=float)
    answered = (conf >= tau) & (conf > 0)
    m = int(answered.sum())
    return {
        "n": len(asked),
        "tau": tau,
        "points": stats.risk_coverage(conf, correct, points=min(points, max(1, len(asked)))),
        "at_tau": {"coverage": m / len(asked) if asked else 0.0,
                   "precision": float(correct[answered].mean()) if m else None, "answered": m},
        "aurc": stats.aurc(conf, correct) if asked else None,
        "ece": stats.ece(conf, correct) if asked else None,
    }


def report(paths: Sequence[str | Path], policy: Policy | None, specialist: Any, *, split: str = "test",
           allow_trained: bool = False, skip_invalid: bool = False) -> dict[str, Any]:
    """Replay receipts through the compiler and `specialist` (a classifier `Specialist` or a
    `PairwiseSpecialist`); the whole evaluation as a JSON-ready dict. `policy` may be None only for
    a pairwise specialist distilled without one.

    Raises:
        ZcError: unreadable or invalid receipts (without a policy: receipts that do not list their
            legal actions), no usable decision, trained-on tasks under `split="all"` without
            `allow_trained`, nothing held out, an unknown split, a policy missing or given wrongly.
    """
    if split not in SPLITS:
        raise ZcError(f"unknown split `{split}` (choose test or all)")
    m = specialist.manifest
    check_policy(m, policy)
    paths = [str(p) for p in paths]
    data = load_decisions(paths, policy, skip_invalid=skip_invalid, none_fits=getattr(specialist, "pairwise", False))
    decisions, counts = data.decisions, data.counts
    kept, sealing = _seal(decisions, m, split, allow_trained)
    rows = replay(kept, policy, specialist)
    risky = _risky(policy)
    n = len(rows)
    tiers = {}
    if policy is not None:  # without a policy there is no compiler rung
        tiers["compiler"] = figures(rows, [r for r in rows if r.rung == "compiler"], n,
                                    [r.compiler_us for r in rows], risky)
    tiers["specialist"] = figures([r for r in rows if r.rung != "compiler"],
                                  [r for r in rows if r.rung == "specialist"], n,
                                  [r.specialist_us for r in rows if r.consulted], risky)
    overall = figures(rows, [r for r in rows if r.rung != "remote"], n,
                      [r.compiler_us + r.specialist_us for r in rows], risky)
    overall.pop("coverage_of_reached")
    remote_tier = next((t for t in policy.ir.tiers if t.name == "remote"), None) if policy is not None else None
    unit = remote_tier.cost if remote_tier is not None and remote_tier.cost is not None else None
    per_call = float(unit) if unit is not None else 1.0
    removed = overall["answered"]
    return {
        "n": n,
        "policy": {"name": policy.name, "sha256": policy.sha256} if policy is not None else None,
        "legal_sets": "policy" if policy is not None else "receipts",
        "specialist": {"name": m.name, "model": m.model.kind, "tau": m.threshold.tau,
                       "target_precision": m.threshold.target_precision, "promoted": m.gate.promoted},
        "receipts": paths,
        **sealing,
        "tasks": len({r.task for r in rows}),
        "counts": {**dict(counts), "route_skipped_specialist": sum(
            1 for r in rows if r.rung == "remote" and not r.consulted)},
        "tiers": tiers,
        "remote": {"reached": sum(r.rung == "remote" for r in rows)},
        "overall": overall,
        "cost": {
            "unit": "remote tier cost" if unit is not None else "teacher calls",
            "per_teacher_call": per_call,
            "all_to_teacher": n * per_call,
            "with_ladder": (n - removed) * per_call,
            "saved": removed * per_call,
            "teacher_calls_removed": removed,
            "cost_saved_share": removed / n if n else 0.0,
        },
        "risk_coverage": curve(rows, m.threshold.tau),
    }


def run(policy: Policy | None, specialist_dir: str | Path, paths: Sequence[str | Path], **kw: Any) -> dict[str, Any]:
    """Load the specialist for `policy` (refusing a mismatch; the class as its manifest says) and
    `report` on `paths`. `policy` may be None for a pairwise specialist distilled without one."""
    check_policy(read_manifest(specialist_dir), policy)
    return report(paths, policy, load(specialist_dir, policy), **kw)


# ---- output -----------------------------------------------------------------------------------------------
def to_json(rep: dict[str, Any]) -> bytes:
    """The report as indented JSON (non-finite numbers as null)."""
    return msgspec.json.format(msgspec.json.encode(_plain(rep)), indent=2) + b"\n"


def _num(v: float | None, fmt: str = ".3f") -> str:
    return "n/a" if v is None else format(v, fmt)


def _pairwise(rep: dict[str, Any]) -> bool:
    return rep["specialist"]["model"] == "pairwise"


def _share(r: dict[str, Any]) -> str:
    """A `_rate` as `rate [lo, hi] (k/n)`."""
    return f"{_num(r['rate'])} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}] ({r['k']}/{r['n']})"


def _table_rows(rep: dict[str, Any]) -> list[list[str]]:
    """The per-rung table: header, compiler (with a policy), specialist, remote, overall; for a pairwise
    specialist also the share not answered where no offered action fits."""
    pairwise = _pairwise(rep)
    head = ["rung", "reached", "answered", "coverage", "precision", "Wilson 95%", "danger exp/sel",
            "p50 µs", "p99 µs"] + (["precision where an action fits [Wilson 95%] (k/n)",
                                    "abstained where none fits [Wilson 95%] (k/n)"] if pairwise else [])
    out = [head]
    for name, t in (*rep["tiers"].items(), ("overall", rep["overall"])):
        lo, hi = t["precision_ci"]
        out.append([name, str(t["reached"]), str(t["answered"]), _num(t["coverage"]), _num(t["precision"]),
                    f"[{lo:.3f}, {hi:.3f}]", f"{t['dangerous_exposed']}/{t['dangerous_selected']}",
                    _num(t["p50_us"], ".1f"), _num(t["p99_us"], ".1f")]
                   + ([_share(t["precision_where_fits"]), _share(t["abstained_where_none_fits"])] if pairwise else []))
        if name == "specialist":
            out.append(["remote", str(rep["remote"]["reached"])] + ["-"] * (len(head) - 2))
    return out


def _headline(rep: dict[str, Any]) -> str:
    s = rep["specialist"]
    policy = f"policy {rep['policy']['name']}" if rep["policy"] else "no policy (legal sets from the receipts)"
    return (f"{policy}, specialist {s['name']} ({s['model']}, τ = {s['tau']:.4f}); "
            f"split {rep['split']}: {rep['label']}")


def _scope(rep: dict[str, Any]) -> str:
    parts = [f"n = {rep['n']} decisions from {rep['tasks']} tasks ({rep['test_tasks']} in the sealed test "
             f"split, {rep['unseen_tasks']} unseen by the specialist)"]
    if rep["excluded_trained_on"]:
        parts.append(f"excluded {rep['excluded_trained_on']} decisions of {rep['excluded_tasks']} "
                     "trained-on tasks")
    if rep["included_trained_on_tasks"]:
        parts.append(f"includes {rep['included_trained_on_tasks']} tasks the specialist was trained on")
    if rep["policy"] is None:
        parts.append("no compiler rung without a policy")
    return "; ".join(parts)


def _none_fits_line(rep: dict[str, Any]) -> str:
    """For a pairwise specialist: how often the ladder did not answer where no offered action fits."""
    a = rep["overall"]["abstained_where_none_fits"]
    if not a["n"]:
        return "where no offered action fits: no such decision (receipts with no action and verified: true)"
    return f"where no offered action fits (n = {a['n']}): abstained {_share(a)}; an answer there counts as wrong"


def _cost_line(rep: dict[str, Any]) -> str:
    c = rep["cost"]
    return (f"teacher calls removed: {c['teacher_calls_removed']} of {rep['n']} "
            f"({c['cost_saved_share']:.1%}); cost saved {c['saved']:g} of {c['all_to_teacher']:g} "
            f"({c['unit']})")


def render_text(rep: dict[str, Any]) -> str:
    """The compact stdout report: scope, a row per rung and overall, cost saved."""
    rows = _table_rows(rep)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [_headline(rep), _scope(rep), ""]
    for r in rows:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    o = rep["overall"]
    lines += ["", f"overall precision {_num(o['precision'])} [{o['precision_ci'][0]:.3f}, "
              f"{o['precision_ci'][1]:.3f}] on {o['answered']} answered of n = {rep['n']}; "
              + _cost_line(rep)]
    if _pairwise(rep):
        lines.append(_none_fits_line(rep))
    return "\n".join(lines)


# ---- HTML -------------------------------------------------------------------------------------------------
_CSS = """body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:62em;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:.6em 0 1.4em}th,td{padding:.25em .7em;border-bottom:1px solid #ddd}
th{text-align:left;background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}
.warn{background:#fde8e8;border:1px solid #e0a0a0;padding:.5em 1em;font-weight:600}
.ok{background:#e8f5e9;border:1px solid #a5d6a7;padding:.5em 1em}
code{background:#f4f4f4;padding:0 .2em}svg text{font:12px system-ui,sans-serif}"""


def _table(rows: list[list[str]]) -> str:
    e = html.escape
    head = "".join(f"<th>{e(c)}</th>" for c in rows[0])
    body = "".join("<tr>" + "".join(f"<td{'' if i == 0 else ' class=n'}>{e(c)}</td>" for i, c in enumerate(r))
                   + "</tr>" for r in rows[1:])
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def svg_curve(rc: dict[str, Any], target: float | None, width: int = 560, height: int = 340) -> str:
    """Precision against coverage as an inline SVG, with the point at τ marked."""
    e = html.escape
    pts = rc["points"]
    if not pts:
        return "<p>No decision reached the specialist: no risk–coverage curve.</p>"
    left, right, top, bottom = 60, 20, 20, 50
    w, h = width - left - right, height - top - bottom
    low = min([p["precision"] for p in pts] + ([target] if target else []))
    y0 = max(0.0, math.floor(low * 10) / 10 - (0.1 if low * 10 == math.floor(low * 10) and low > 0 else 0))
    y0 = min(y0, 0.9)
    x = lambda c: left + c * w  # noqa: E731
    y = lambda p: top + (1 - (p - y0) / (1 - y0)) * h  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="risk–coverage curve">',
           f'<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="#fafafa" stroke="#999"/>']
    for i in range(6):
        c = i / 5
        out.append(f'<line x1="{x(c):.1f}" y1="{top + h}" x2="{x(c):.1f}" y2="{top + h + 5}" stroke="#666"/>'
                   f'<text x="{x(c):.1f}" y="{top + h + 18}" text-anchor="middle">{c:.1f}</text>')
        p = y0 + (1 - y0) * i / 5
        out.append(f'<line x1="{left - 5}" y1="{y(p):.1f}" x2="{left + w}" y2="{y(p):.1f}" stroke="#e4e4e4"/>'
                   f'<text x="{left - 8}" y="{y(p) + 4:.1f}" text-anchor="end">{p:.2f}</text>')
    out.append(f'<text x="{left + w / 2}" y="{height - 10}" text-anchor="middle">coverage (share of the '
               f'{rc["n"]} decisions asked, most confident first)</text>')
    out.append(f'<text transform="translate(14 {top + h / 2}) rotate(-90)" text-anchor="middle">'
               'precision</text>')
    if target is not None:
        out.append(f'<line x1="{left}" y1="{y(target):.1f}" x2="{left + w}" y2="{y(target):.1f}" '
                   f'stroke="#2e7d32" stroke-dasharray="5 4"/><text x="{left + w - 4}" y="{y(target) - 5:.1f}" '
                   f'text-anchor="end" fill="#2e7d32">target {e(f"{target:.2f}")}</text>')
    line = " ".join(f"{x(p['coverage']):.1f},{y(p['precision']):.1f}" for p in pts)
    out.append(f'<polyline points="{line}" fill="none" stroke="#1565c0" stroke-width="2"/>')
    at = rc["at_tau"]
    if at["precision"] is not None:
        cx, cy = x(at["coverage"]), y(at["precision"])
        label = f"τ = {rc['tau']:.3f}: coverage {at['coverage']:.2f}, precision {at['precision']:.3f}"
        anchor = "end" if at["coverage"] > 0.5 else "start"
        dx = -8 if anchor == "end" else 8
        out.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="#c62828"/>'
                   f'<text x="{cx + dx:.1f}" y="{cy + 18:.1f}" text-anchor="{anchor}" fill="#c62828">'
                   f'{e(label)}</text>')
    else:
        label = f"τ = {rc['tau']:.3f}: the specialist answered nothing"
        out.append(f'<text x="{left + 8}" y="{top + h - 8}" fill="#c62828">{e(label)}</text>')
    out.append("</svg>")
    return "".join(out)


def render_html(rep: dict[str, Any]) -> str:
    """One self-contained page: scope, per-rung table, agreement, cost, counts, the risk–coverage SVG."""
    e = html.escape
    banner = ('<p class="ok">Held-out: no decision of a task the specialist was trained on is included.</p>'
              if rep["held_out"] else
              '<p class="warn">NOT held-out: these receipts include tasks the specialist was trained on; '
              'the figures overstate how it does on new tasks.</p>')
    agree = [["rung", "answered", "agreement with teacher (n)", "Wilson 95%", "with gold (n)", "Wilson 95%"]]
    for name, t in (*rep["tiers"].items(), ("overall", rep["overall"])):
        a, g = t["agreement_teacher"], t["agreement_gold"]
        agree.append([name, str(t["answered"]), f"{_num(a['rate'])} ({a['n']})",
                      f"[{a['ci'][0]:.3f}, {a['ci'][1]:.3f}]",
                      f"{_num(g['rate'])} ({g['n']})", f"[{g['ci'][0]:.3f}, {g['ci'][1]:.3f}]"])
    pairwise = _pairwise(rep)
    agree_note = ("<p>Agreement is counted on the answered decisions that have a teacher's action (a gold "
                  "action)" + (", and on every decision where no offered action fits (a receipt with no "
                               "action and verified: true): not answering it agrees, answering it does not"
                               if pairwise else "") + ".</p>")
    c = rep["cost"]
    cost = [["", "value"], ["unit", c["unit"]], ["per teacher call", f"{c['per_teacher_call']:g}"],
            ["everything to the teacher", f"{c['all_to_teacher']:g}"], ["with the ladder", f"{c['with_ladder']:g}"],
            ["saved", f"{c['saved']:g} ({c['cost_saved_share']:.1%})"],
            ["teacher calls removed", f"{c['teacher_calls_removed']} of {rep['n']}"]]
    counts = [["count", "value"], *([k, str(v)] for k, v in sorted(rep["counts"].items())),
              ["excluded (trained-on tasks)", str(rep["excluded_trained_on"])],
              ["unseen tasks", str(rep["unseen_tasks"])], ["unseen decisions", str(rep["unseen_decisions"])]]
    rc = rep["risk_coverage"]
    asked = "legal set of two or more actions" if rep["policy"] else "every decision: no compiler rung"
    rc_note = (f"On the {rc['n']} decisions the specialist was asked ({asked}): "
               f"AURC {_num(rc['aurc'])}, ECE {_num(rc['ece'])}.")
    title = e("zc eval: " + (rep["policy"]["name"] if rep["policy"] else rep["specialist"]["name"]))
    unseen = ", ".join(rep["unseen_task_examples"])
    body = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{title}</title><style>{_CSS}</style></head><body>",
        f"<h1>{title}</h1>",
        f"<p>{e(_headline(rep))}</p>", banner, f"<p>{e(_scope(rep))}</p>",
        "<h2>Per rung</h2>",
        "<p>Coverage is answered / n over all n decisions; precision is agreement with the receipt's label "
        "(gold when present, else the teacher's action) on answered decisions. Dangerous: exposed = a risky "
        "action was legal for a decision the rung was handed; selected = the rung answered a risky action "
        "that differs from the label. Latency is per decision of that rung's call.</p>",
        _table(_table_rows(rep)),
        *([f"<p>{e(_none_fits_line(rep))}. Abstained where none fits: of the decisions handed to the rung "
           "where no offered action fits, the share it did not answer (the right outcome there).</p>"]
          if pairwise else []),
        "<h2>Agreement with the teacher and with gold</h2>", agree_note, _table(agree),
        "<h2>Estimated cost saved</h2>", _table(cost),
        "<h2>Specialist risk–coverage</h2>", f"<p>{e(rc_note)}</p>",
        svg_curve(rc, rep["specialist"]["target_precision"]),
        "<h2>Counts</h2>", _table(counts),
        f"<p>Unseen tasks (first {EXAMPLES}): {e(unseen) if unseen else 'none'}</p>",
        f"<p>Receipts: {e(', '.join(rep['receipts']))}</p>",
        "</body></html>", "",
    ]
    return "\n".join(body)
