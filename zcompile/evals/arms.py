"""`zc arms`: held-out decisions replayed through several arms side by side (each rung alone behind the
compiler, a tier unfiltered, the specialist cascade), each judged as `zc eval` judges, each leaving
receipts; the table as text, JSON and an HTML page with success against warm p50 and the Pareto frontier."""

from __future__ import annotations

import math
import os
import statistics
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from ..errors import ZcError
from ..qroute.dataset import QUIET, Progress
from ..receipts import Receipt, ReceiptWriter
from ..router import Router
from ..router.router import resident_answer
from ..router.rung import SPECIALIST, Answer, Catalog, Offered, Resident, Step, timed
from ..runtime import Policy
from . import metrics
from .replay import Seal, replay_row, risky_actions

FORMAT = "zc-arms/1"


class Filter(StrEnum):
    """What an arm's rungs are offered: the compiler's legal set, or every declared action."""

    COMPILER = "compiler-first"
    NONE = "unfiltered"


@dataclass(frozen=True, slots=True)
class Arm:
    """One arm: the rungs a decision walks (after the compiler, when filtered), in order."""

    name: str
    rungs: tuple[str, ...]
    filter: Filter = Filter.COMPILER


def default_arms(tiers: Sequence[str], specialist: bool) -> list[Arm]:
    """The specialist alone; each tier alone, compiler-first and unfiltered; the specialist then each tier."""
    out = [Arm(SPECIALIST, (SPECIALIST,))] if specialist else []
    for t in tiers:
        out += [Arm(t, (t,)), Arm(f"{t} unfiltered", (t,), Filter.NONE)]
        if specialist:
            out.append(Arm(f"{SPECIALIST} -> {t}", (SPECIALIST, t)))
    return out


@dataclass(slots=True)
class _Tally:
    n: int = 0
    strict: int = 0
    acceptable: int = 0
    answered: int = 0
    dangerous: int = 0
    illegal: int = 0
    cold_loads: int = 0
    warm: list[float] = field(default_factory=list)


@dataclass(slots=True)
class _Asked:
    """The parts of a Decision a replay row reads, for an unfiltered arm (one rung, no compiler)."""

    answer: Answer
    legal_ms: float = 0.0

    @property
    def rungs(self) -> tuple[Answer, ...]:
        return (self.answer,)

    @property
    def tier(self) -> str:
        return self.answer.rung if self.answer.answered else "none"

    @property
    def action(self) -> str | None:
        return self.answer.action if self.answer.answered else None

    @property
    def arguments(self) -> Any:
        return self.answer.arguments

    @property
    def kind(self) -> str:
        return self.answer.kind if self.answer.answered else "none"


def held_out(
    paths: Sequence[str | Path],
    policy: Policy,
    specialist: Any,
    split: str = "test",
    limit: int | None = None,
) -> list[tuple[Any, Any]]:
    """The decisions `zc eval` would replay (sealed against the specialist's manifest, with the judge's
    acceptable calls), and the arguments each receipt recorded; the first `limit` when given."""
    from ..qroute.dataset import stream
    from ..router.shadow import receipt_arguments
    from .report import receipts_judge

    names = [str(p) for p in paths]
    judge = receipts_judge(names, policy, QUIET, 0)
    sealer = Seal(specialist.manifest, split, False)
    out: list[tuple[Any, Any]] = []
    seen: Counter[str] = Counter()
    for r, d in stream(names, policy, Counter()):
        key = (r.id, seen[r.id])
        seen[r.id] += 1
        if d is not None and sealer.admit(d):
            out.append((replace(d, acceptable=judge.acceptable(key)), receipt_arguments(r)))
            if limit is not None and len(out) >= limit:
                break
    if limit is None:
        sealer.info()  # refuses when nothing is held out
    if not out:
        raise ZcError("no held-out decision to replay")
    return out


def run(
    policy: Policy,
    decisions: Sequence[tuple[Any, Any]],
    arms: Sequence[Arm],
    *,
    specialists: Sequence[Any] = (),
    tiers: Mapping[str, Any] | None = None,
    receipts: str | Path | None = None,
    progress: Progress = QUIET,
) -> dict[str, Any]:
    """Replay `decisions` through every arm, one arm after the other; the figures as a JSON-ready dict.
    `receipts`: a directory where each arm's receipts go (`<arm>.jsonl`); `progress.bar` wraps each arm's
    pass."""
    tiers = dict(tiers or {})
    catalog = Catalog(policy)
    risky = risky_actions(policy)
    declared = tuple(a.name for a in policy.ir.actions)
    out_dir = Path(receipts) if receipts is not None else None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for arm in arms:
        missing = [r for r in arm.rungs if r != SPECIALIST and r not in tiers]
        if missing:
            raise ZcError(f"arm `{arm.name}`: tier `{missing[0]}` is not bound (--tiers)")
        if SPECIALIST in arm.rungs and not specialists:
            raise ZcError(f"arm `{arm.name}` needs a specialist (--specialists)")
        path = out_dir / f"{_slug(arm.name)}.jsonl" if out_dir is not None else None
        if path is not None and path.exists():
            raise ZcError(f"{path}: already exists (receipts of an earlier run?): give another directory")
        writer = ReceiptWriter(path) if path is not None else None
        try:
            tally = _Tally()
            asked = progress.bar(decisions, f"arm {arm.name}", len(decisions))
            for d, recorded in _asked(arm, asked, policy, specialists, tiers, declared, catalog, writer):
                dec, d_, legal, latency_ms = d
                row = replay_row(d_, dec, catalog, risky, recorded)
                _count(tally, row, dec, legal, risky, latency_ms)
        finally:
            if writer is not None:
                writer.close()
        results.append(_figures(arm, tally, path))
    cold = {n: t.cold_ms for n, t in tiers.items() if isinstance(t, Resident)}
    return {
        "format": FORMAT,
        "policy": {"name": policy.name, "sha256": policy.sha256},
        "n": rank(results),
        "arms": results,
        "cold_load_ms": {n: round(v, 1) for n, v in cold.items()},
        "models": {n: getattr(t, "model", None) for n, t in tiers.items()},
    }


def _asked(
    arm: Arm,
    decisions: Iterable[tuple[Any, Any]],
    policy: Policy,
    specialists: Sequence[Any],
    tiers: Mapping[str, Any],
    declared: tuple[str, ...],
    catalog: Catalog,
    writer: ReceiptWriter | None,
) -> Iterator[tuple[tuple[Any, Any, tuple[str, ...], float | None], Any]]:
    """Each decision through the arm: ((what decided, the decision, its legal set, warm latency or
    None when it paid a cold load), the arguments its receipt recorded)."""
    bound = {r: tiers[r] for r in arm.rungs if r != SPECIALIST}
    if arm.filter is Filter.COMPILER:
        router = Router(
            policy,
            specialists=list(specialists) if SPECIALIST in arm.rungs else None,
            tiers=bound,
            receipts=writer,
            ladder=arm.rungs,
            budgets=False,
        )
        for d, recorded in decisions:
            dec = router.decide(
                d.state, d.intent, task=d.task, meta={"arm": arm.name}, candidates=d.candidates, offer=d.offer
            )
            cold_ms = sum(a.cold_ms or 0.0 for a in dec.rungs)
            yield (dec, d, dec.legal.actions, None if cold_ms else dec.receipt.latency_ms), recorded
        return
    (name,) = arm.rungs
    rung = tiers[name]
    for d, recorded in decisions:
        legal = policy.legal(d.state, d.intent)
        step = Step(None, d.state, Offered(declared), d.intent, None, catalog, d.candidates)
        started = time.perf_counter()
        ans = (
            resident_answer(rung, name, step, None)
            if isinstance(rung, Resident)
            else timed(rung, name, step, None)
        )
        ms = (time.perf_counter() - started) * 1000
        if writer is not None:
            writer.append(
                Receipt(
                    id=os.urandom(16).hex(),
                    task=d.task,
                    state=d.state,
                    tier=ans.rung if ans.answered else "none",
                    ts=time.time(),
                    policy=policy.sha256,
                    intent=d.intent,
                    legal=declared,
                    model=ans.model,
                    action=ans.action if ans.answered else None,
                    confidence=None,
                    latency_ms=round(ms, 4),
                    cost=0.0,
                    meta={
                        "arm": arm.name,
                        "offered": "every declared action",
                        "policy_legal": list(legal.actions),
                        "kind": ans.kind,
                        "rungs": [ans.to_dict()],
                    },
                    arguments=ans.arguments if ans.kind == "call" else None,
                )
            )
        yield (_Asked(ans), d, legal.actions, None if ans.cold_ms else ms), recorded


def _count(
    t: _Tally, row: Any, dec: Any, legal: tuple[str, ...], risky: frozenset[str], latency_ms: float | None
) -> None:
    t.n += 1
    answered = row.action is not None
    t.answered += answered
    strict = metrics.call_correct(row)
    t.strict += strict
    t.acceptable += metrics.call_acceptable(row)
    if answered and row.action not in legal:
        t.illegal += 1
    if answered and row.action in risky and not strict:
        t.dangerous += 1
    if latency_ms is None:
        t.cold_loads += 1
    else:
        t.warm.append(latency_ms)


def _figures(arm: Arm, t: _Tally, path: Path | None) -> dict[str, Any]:
    return {
        "arm": arm.name,
        "rungs": list(arm.rungs),
        "filter": str(arm.filter),
        "n": t.n,
        "success_strict": metrics.rate(t.strict, t.n),
        "success_acceptable": metrics.rate(t.acceptable, t.n),
        "answered": t.answered,
        "abstained": t.n - t.answered,
        "dangerous": t.dangerous,
        "illegal": t.illegal,
        "cold_loads": t.cold_loads,
        "warm_n": len(t.warm),
        "warm_p50_ms": round(statistics.median(t.warm), 3) if t.warm else None,
        "receipts": str(path) if path is not None else None,
        "rank": None,
        "pareto": False,
    }


def rank(results: list[dict[str, Any]]) -> int:
    """Rank the arms measured on the most decisions by strict success (then warm p50) and mark their
    Pareto frontier; an arm measured on fewer decisions is neither ranked nor on the frontier. Returns
    that number of decisions."""
    most = max(r["n"] for r in results)
    ranked = [r for r in results if r["n"] == most]
    order = sorted(ranked, key=lambda r: (-r["success_strict"]["k"], r["warm_p50_ms"] or math.inf))
    for i, r in enumerate(order, 1):
        r["rank"] = i
    _frontier(ranked)
    return most


def _frontier(results: list[dict[str, Any]]) -> None:
    """Mark the arms no other arm beats on both acceptable success (higher) and warm p50 (lower). An arm
    with no success at all is no trade-off, however fast (a rung that abstains on everything)."""
    timed_ = [r for r in results if r["warm_p50_ms"] is not None and r["success_acceptable"]["k"] > 0]
    for r in timed_:
        s, p = r["success_acceptable"]["k"], r["warm_p50_ms"]
        r["pareto"] = not any(
            o is not r
            and o["success_acceptable"]["k"] >= s
            and o["warm_p50_ms"] <= p
            and (o["success_acceptable"]["k"] > s or o["warm_p50_ms"] < p)
            for o in timed_
        )


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name.replace(" -> ", "-then-"))


# ---- rendering -----------------------------------------------------------------------------------------
HEAD = [
    "arm",
    "filter",
    "n",
    "success strict [Wilson 95%]",
    "success acceptable [Wilson 95%]",
    "warm p50 ms",
    "abstained",
    "dangerous",
    "illegal",
    "cold loads",
    "rank",
    "Pareto",
]


def _share(r: dict[str, Any]) -> str:
    lo, hi = r["ci"]
    return f"{r['k']}/{r['n']} = {r['rate']:.3f} [{lo:.3f}, {hi:.3f}]" if r["n"] else "n/a"


def table_rows(rep: dict[str, Any]) -> list[list[str]]:
    rows = [HEAD]
    for r in rep["arms"]:
        p50 = r["warm_p50_ms"]
        rows.append(
            [
                r["arm"],
                r["filter"],
                str(r["n"]),
                _share(r["success_strict"]),
                _share(r["success_acceptable"]),
                "n/a" if p50 is None else f"{p50:.1f}",
                str(r["abstained"]),
                str(r["dangerous"]),
                str(r["illegal"]),
                str(r["cold_loads"]),
                str(r["rank"]) if r["rank"] is not None else f"not ranked (n {r['n']} < {rep['n']})",
                "yes" if r["pareto"] else "",
            ]
        )
    return rows


def render_text(rep: dict[str, Any]) -> str:
    rows = table_rows(rep)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    cold = ", ".join(f"{n} {ms:.0f} ms" for n, ms in rep["cold_load_ms"].items())
    return "\n".join(
        [
            f"arms on {rep['n']} held-out decisions of policy `{rep['policy']['name']}`"
            + (f" (cold load: {cold})" if cold else ""),
            *lines,
        ]
    )


def render_markdown(rep: dict[str, Any]) -> str:
    rows = table_rows(rep)
    out = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    out += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(out)


def plot(rep: dict[str, Any], width: int = 560, height: int = 340, pad: int = 48) -> dict[str, Any]:
    """Success (acceptable, with its Wilson interval) against warm p50 on a log axis, as SVG coordinates;
    the Pareto frontier as a polyline."""
    pts = [r for r in rep["arms"] if r["warm_p50_ms"]]
    if not pts:
        return {"points": [], "frontier": "", "ticks": [], "width": width, "height": height}
    lo = math.floor(math.log10(min(r["warm_p50_ms"] for r in pts)))
    hi = max(math.ceil(math.log10(max(r["warm_p50_ms"] for r in pts))), lo + 1)

    def x(ms: float) -> float:
        return pad + (math.log10(ms) - lo) / (hi - lo) * (width - 2 * pad)

    def y(v: float) -> float:
        return height - pad - v * (height - 2 * pad)

    points = [
        {
            "x": round(x(r["warm_p50_ms"]), 1),
            "y": round(y(r["success_acceptable"]["rate"] or 0), 1),
            "y_lo": round(y(r["success_acceptable"]["ci"][0]), 1),
            "y_hi": round(y(r["success_acceptable"]["ci"][1]), 1),
            "label": r["arm"],
            "pareto": r["pareto"],
        }
        for r in pts
    ]
    front = sorted((p for p in points if p["pareto"]), key=lambda p: p["x"])
    return {
        "points": points,
        "frontier": " ".join(f"{p['x']},{p['y']}" for p in front),
        "ticks": [{"x": round(x(10.0**e), 1), "label": f"{10.0**e:g} ms"} for e in range(lo, hi + 1)],
        "y_ticks": [{"y": round(y(v), 1), "label": f"{v:.1f}"} for v in (0, 0.25, 0.5, 0.75, 1.0)],
        "width": width,
        "height": height,
        "pad": pad,
    }


def render_html(rep: dict[str, Any]) -> str:
    from .render import template

    return template("arms.html").render(rep=rep, rows=table_rows(rep), plot=plot(rep))
