"""Figures of a replay, gathered one decision at a time in counters (`Ledger`): per rung and overall
coverage and precision with Wilson 95% intervals and n, complete calls, agreement, dangerous actions,
latency, cost, risk–coverage, live shadow agreement. Nothing per decision is kept beyond `Sample`'s
bounded reservoir (exact up to its size)."""

from __future__ import annotations

import random
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import stats
from ..receipts.candidates import Provenance, same_call
from ..receipts.judge import accepts
from ..router.shadow import committed, label_of, record_right
from .decisions import DecisionRow
from .replay import Replay

if TYPE_CHECKING:
    from ..runtime import Policy

SAMPLE = 1 << 20  # decisions whose timings and confidences are kept: exact figures up to this many


def rate(k: int, m: int) -> dict[str, Any]:
    """k of m with its Wilson 95% interval (`rate` None when m is 0)."""
    lo, hi = stats.wilson(k, m)
    return {"k": k, "n": m, "rate": k / m if m else None, "ci": [lo, hi]}


def percentiles(times: Sequence[float]) -> tuple[float | None, float | None]:
    if not len(times):
        return None, None
    return float(np.percentile(times, 50)), float(np.percentile(times, 99))


def call_correct(r: Replay) -> bool:
    """A complete output equal to the label (strict): the same name, and for a call the same arguments
    as JSON (unknown label arguments never match)."""
    if not r.complete or r.action != r.label:
        return False
    return r.kind == "reply" or (r.label_arguments is not None and same_call(r.action, r.arguments, r.label,
                                                                             r.label_arguments))


def call_acceptable(r: Replay) -> bool:
    """A complete output the judge accepts (`receipts.judge.accepts`): strict, or a side-effect-free
    call the teacher made later before any other call."""
    return r.complete and (call_correct(r) or accepts(r.acceptable, r.action, r.arguments, frozenset(),
                                                      names=r.kind == "reply"))


def handed_right(r: Replay) -> bool:
    """A reply the specialist handed on where the teacher replied with that action."""
    return r.handed_on and r.best is not None and r.best == r.label


def name_acceptable(r: Replay) -> bool:
    """The answer's action is the label's, or that of an acceptable call (name level)."""
    return r.action is not None and (r.action == r.label or accepts(r.acceptable, r.action, None, frozenset(),
                                                                    names=True))


def reply_verdict(r: Replay) -> tuple[bool, bool]:
    """(strict, acceptable) of the reply the specialist picked (handed on or not): the teacher
    replied with that action (the judge accepts a reply by its action alone)."""
    strict = r.best is not None and r.best == r.label
    return strict, strict or (r.best is not None and accepts(r.acceptable, r.best, None, frozenset(),
                                                             names=True))


def verdicts(r: Replay) -> tuple[bool | None, bool | None]:
    """(strict, acceptable) of what left the teacher's hands: a complete output, a bare name (by
    name), or a reply the specialist handed on; (None, None) when the decision fell through."""
    if r.complete:
        return call_correct(r), call_acceptable(r)
    if r.kind == "name":
        return r.action == r.label, name_acceptable(r)
    if r.handed_on:
        return reply_verdict(r)
    return None, None


WORST_BELOW = 0.80  # a task is listed as below the bar when its precision is under this ...
WORST_MIN = 3  # ... over at least this many answers


def per_task(counts: Mapping[str, Sequence[int]], what: str) -> dict[str, Any]:
    """Precision per task of one kind of answer (`counts`: task -> (answered, strict, acceptable)),
    each with its Wilson 95% interval, the worst task (lowest acceptable precision, then most
    answers, then name) and the tasks with at least `WORST_MIN` answers below `WORST_BELOW`."""
    tasks: list[dict[str, Any]] = []
    for task, (m, right, ok) in sorted(counts.items()):
        if m:
            tasks.append({"task": task, "answered": m, "acceptable": rate(ok, m), "strict": rate(right, m)})
    worst = min(tasks, key=lambda t: (t["acceptable"]["rate"], -t["answered"], t["task"]), default=None)
    below = [t["task"] for t in tasks if t["answered"] >= WORST_MIN and t["acceptable"]["rate"] < WORST_BELOW]
    return {"what": what, "tasks": tasks, "worst": worst, "below": below, "below_precision": WORST_BELOW,
            "below_min_answers": WORST_MIN}


class KindCurve:
    """Risk–coverage of one kind of the specialist's outputs (complete calls, or replies it hands on):
    `n` decisions whose best action is of the kind, `answered` of them at its τ; the confidence and
    both verdicts of each judged one (a call is judged only when answered: below τ the specialist
    forms no complete call), in a bounded `Sample`."""

    def __init__(self, tau: float | None, sample: int) -> None:
        self.tau = tau
        self.n = 0
        self.answered = [0, 0, 0]  # answered, strict right, acceptable right
        self.judged = Sample(3, sample)  # confidence, strict, acceptable

    def add(self, confidence: float, answered: bool, judged: tuple[bool, bool] | None) -> None:
        self.n += 1
        if judged is not None:
            self.judged.add(confidence, float(judged[0]), float(judged[1]))
        if answered and judged is not None:
            self.answered[0] += 1
            self.answered[1] += judged[0]
            self.answered[2] += judged[1]

    def figures(self, points: int = 50) -> dict[str, Any]:
        """Per judge: the curve (coverage of all n), the point the specialist answered at (exact
        counts), AURC over the judged; the reliability bins of the acceptable judge."""
        conf = self.judged.column(0)
        m, right, ok = self.answered
        share = len(conf) / self.judged.seen if self.judged.seen else 0.0  # judged decisions in the sample
        out: dict[str, Any] = {"tau": self.tau, "n": self.n, "judged": self.judged.seen, "answered": m,
                               "coverage": m / self.n if self.n else 0.0}
        for i, name, k in ((1, "strict", right), (2, "acceptable", ok)):
            correct = self.judged.column(i)
            pts = stats.risk_coverage(conf, correct, points=min(points, max(1, len(conf))))
            for p in pts:  # of all n decisions of the kind, not only the judged ones
                p["coverage"] = p["answered"] / share / self.n if self.n and share else 0.0
            at = rate(k, m)
            out[name] = {"points": pts, "at_tau": {"answered": m, "correct": k, "precision": at["rate"],
                                                   "precision_ci": at["ci"], "coverage": out["coverage"]},
                         "aurc": stats.aurc(conf, correct) if len(conf) else None}
        out["reliability"] = stats.reliability(conf, self.judged.column(2))
        if self.judged.sampled:
            out["sample"] = len(conf)
        return out


class Sample:
    """A seeded uniform reservoir of rows of `width` floats: every row while at most `size` were added
    (in order, so the figures are exact), then a uniform sample of `size` of them (Algorithm R)."""

    def __init__(self, width: int, size: int = SAMPLE, seed: int = 0) -> None:
        self.cols = [array("d") for _ in range(width)]
        self.size, self.seen = size, 0
        self._rng = random.Random(seed)

    def add(self, *values: float) -> None:
        if self.seen < self.size:
            for c, v in zip(self.cols, values):
                c.append(v)
        elif (j := self._rng.randrange(self.seen + 1)) < self.size:
            for c, v in zip(self.cols, values):
                c[j] = v
        self.seen += 1

    @property
    def sampled(self) -> bool:
        return self.seen > self.size

    def column(self, i: int) -> np.ndarray:
        return np.frombuffer(self.cols[i], dtype=np.float64).copy() if len(self.cols[i]) else np.zeros(0)


@dataclass(slots=True)
class Tally:
    """What the figures read of a set of replayed decisions (those handed to a rung, or those it
    answered), counted as they go by."""

    n: int = 0
    no_label: int = 0
    handed_on: int = 0
    handed_right: int = 0
    exposed: int = 0
    correct: int = 0
    acceptable: int = 0
    fit: int = 0
    fit_correct: int = 0
    complete: int = 0
    complete_correct: int = 0
    complete_acceptable: int = 0
    judged_teacher: int = 0
    agree_teacher: int = 0
    judged_gold: int = 0
    agree_gold: int = 0
    dangerous: int = 0

    def add(self, r: Replay, risky: frozenset[str]) -> None:
        self.n += 1
        right = r.action == r.label
        self.no_label += r.label is None
        self.handed_on += r.handed_on
        self.handed_right += handed_right(r)
        self.exposed += r.exposed
        self.correct += right
        self.acceptable += name_acceptable(r)
        if r.label is not None:
            self.fit += 1
            self.fit_correct += right
        if r.complete:
            self.complete += 1
            self.complete_correct += call_correct(r)
            self.complete_acceptable += call_acceptable(r)
        if r.teacher is not None or r.label is None:
            self.judged_teacher += 1
            self.agree_teacher += r.action == r.teacher
        if r.gold is not None or r.label is None:
            self.judged_gold += 1
            self.agree_gold += r.action == r.gold
        self.dangerous += not right and r.action in risky


def agreement(answered: Tally, declined: int, who: str) -> dict[str, Any]:
    """Agreement with the teacher's action or with gold (`who`) on the answered decisions that have
    one or where no offered action fits, plus the `declined` ones (not answered, none fits), which
    agree. No figure (rate None, n 0) for a rung that answered nothing."""
    if not answered.n:
        return rate(0, 0)
    return rate(getattr(answered, "agree_" + who) + declined, getattr(answered, "judged_" + who) + declined)


def figures(handed: Tally, answered: Tally, n: int, times: np.ndarray, timed: int,
            hands_on: bool = False) -> dict[str, Any]:
    """For the decisions `handed` to a rung and those it `answered` (a subset): coverage of all n,
    precision (name level) with its Wilson 95% interval, complete outputs (checked calls and text
    replies) and how many are right, replies handed on to a text tier, agreement with the teacher
    and with gold, the share not answered where no offered action fits, dangerous actions exposed
    and selected, latency p50/p99 (µs) over `times` (`timed` calls; a uniform sample of them beyond
    `SAMPLE`). `hands_on`: this row counts the replies the specialist handed on to a text tier (the
    specialist's and the overall row; a tier reached afterwards does not count them again)."""
    m = answered.n
    precision = rate(answered.correct, m)
    declined = handed.no_label - answered.no_label
    complete_precision = rate(answered.complete_correct, answered.complete)
    acceptable, complete_acceptable = rate(answered.acceptable,
                                           m), rate(answered.complete_acceptable, answered.complete)
    p50, p99 = percentiles(times)
    return {
        "reached": handed.n,
        "answered": m,
        "coverage": m / n if n else 0.0,
        "coverage_of_reached": m / handed.n if handed.n else 0.0,
        "correct": precision["k"],
        "precision": precision["rate"],
        "precision_ci": precision["ci"],
        "complete": answered.complete,
        "complete_correct": complete_precision["k"],
        "complete_coverage": answered.complete / n if n else 0.0,
        "complete_precision": complete_precision["rate"],
        "complete_precision_ci": complete_precision["ci"],
        "handed_to_text_tier": handed.handed_on if hands_on else 0,
        "handed_precision": rate(handed.handed_right if hands_on else 0, handed.handed_on if hands_on else 0),
        "acceptable": {"correct": acceptable["k"], "precision": acceptable["rate"],
                       "precision_ci": acceptable["ci"], "complete_correct": complete_acceptable["k"],
                       "complete_precision": complete_acceptable["rate"],
                       "complete_precision_ci": complete_acceptable["ci"]},
        "agreement_teacher": agreement(answered, declined, "teacher"),
        "agreement_gold": agreement(answered, declined, "gold"),
        "precision_where_fits": rate(answered.fit_correct, answered.fit),
        "abstained_where_none_fits": rate(declined, handed.no_label),
        "dangerous_exposed": handed.exposed,
        "dangerous_selected": answered.dangerous,
        "p50_us": p50,
        "p99_us": p99,
        "timed": timed,
    }


def power(answered: int, n: int, target: float, alpha: float = 0.05, power: float = 0.8) -> dict[str, Any]:
    """Whether `answered` answers of `n` decisions can support a precision claim at `target`: the answers
    (all right) a Wilson 95% lower bound ≥ target needs, the decisions that takes at this coverage, and
    the smallest precision difference (near the target, over these answers) and coverage difference
    (over these n) between two specialists a two-sided level-`alpha` test detects with `power`."""
    need = stats.answers_needed(target)
    coverage = answered / n if n else 0.0
    return {"answered": answered, "n": n, "target": target, "answers_needed": need,
            "enough": answered >= need,
            "decisions_needed": -(-need * n // answered) if answered else None,  # ceil, exactly
            "detectable_precision_difference": stats.detectable_difference(target, answered, alpha, power),
            "detectable_coverage_difference": stats.detectable_difference(coverage, n, alpha, power),
            "alpha": alpha, "power": power}


class Ledger:
    """Every figure of a report, gathered one replayed decision at a time (`add`)."""

    def __init__(self, risky: frozenset[str], tau: float, *, compiler: bool = True, sample: int = SAMPLE,
                 keep_rows: bool = False, text_tier: Any = None, reply_tau: float | None = None,
                 live_text: bool = False) -> None:
        self.risky, self.tau, self.compiler = risky, tau, compiler
        self.text_tier = text_tier  # the policy's text tier (`ir.TierDef`): handed-on replies go there
        # bound in the replay: it wrote each handed reply (graded), so none is assumed written
        self.live_text = live_text
        self.escalated = 0  # handed replies the live text tier did not write well (went to the teacher)
        self.written = 0  # ... and those it wrote and the grader passed (counted among the complete)
        self.n = 0
        self.every, self.by_compiler, self.past_compiler = Tally(), Tally(), Tally()
        # past: not answered by
        self.by_specialist, self.past_specialist, self.by_ladder = Tally(), Tally(), Tally()
        self.by_tier: dict[str, Tally] = {}  # LLM tiers that answered, by name
        self.remote = self.skipped = 0
        self.calls_n = self.calls_answered = self.calls_correct = self.calls_acceptable = 0
        # taken off the teacher: answered, strict right, acceptable right, handed replies
        self.off = [0, 0, 0, 0]
        self.removed = self.names = 0
        self.at_tau = [0, 0]  # the specialist's committed outputs (each kind at its τ), and right by name
        self.kinds = {"calls": KindCurve(tau, sample), "replies": KindCurve(reply_tau, sample)}
        self.task_calls: dict[str, list[int]] = {}  # task -> answered calls, strict right, acceptable right
        self.task_replies: dict[str, list[int]] = {}  # task -> handed replies, strict right, acceptable right
        self.by_source: dict[Provenance, list[int]] = {}  # answered calls by provenance: n, strict, ok
        self.tasks: set[str] = set()
        self.times = Sample(2, sample)  # per decision: compiler µs, compiler + specialist µs
        self.asked = Sample(3, sample)  # per consulted decision: specialist µs, confidence, best == label
        self.rows: list[DecisionRow] | None = [] if keep_rows else None  # what --decisions lists

    def add(self, r: Replay) -> None:
        risky = self.risky
        self.n += 1
        self.tasks.add(r.task)
        self.every.add(r, risky)
        (self.by_compiler if r.rung == "compiler" else self.past_compiler).add(r, risky)
        if r.rung != "compiler":
            if r.rung == "specialist":
                self.by_specialist.add(r, risky)
            else:
                self.past_specialist.add(r, risky)
                if r.rung != "remote":
                    self.by_tier.setdefault(r.rung, Tally()).add(r, risky)
        if r.rung == "remote":
            self.remote += 1
            self.skipped += not r.consulted
        else:
            self.by_ladder.add(r, risky)
            self.removed += r.complete
            self.names += r.kind == "name"
            if r.kind == "call":
                judged = (call_correct(r), call_acceptable(r))
                self.calls_answered += 1
                self.calls_correct += judged[0]
                self.calls_acceptable += judged[1]
                _count(self.task_calls, r.task, judged)
                if r.source is not None:
                    _count(self.by_source, r.source, judged)
            if r.complete:
                self.off[0] += 1
                self.off[1] += call_correct(r)
                self.off[2] += call_acceptable(r)
        if r.rung == "remote" and r.handed_on and self.live_text:
            self.escalated += 1
        elif self.live_text and r.kind == "reply" and r.rung == self.text_tier.name:
            self.written += 1
        elif r.rung == "remote" and r.handed_on and self.text_tier is not None:  # assumed written by it
            right = handed_right(r)
            self.off[0] += 1
            self.off[1] += right
            self.off[2] += right
            self.off[3] += 1
        self.calls_n += r.label_is_call
        self.times.add(r.compiler_us, r.compiler_us + r.specialist_us)
        strict, ok = verdicts(r)
        if r.consulted:
            right = r.best is not None and r.best == r.label
            self.asked.add(r.specialist_us, r.confidence, float(right))
            if r.rung == "specialist" or r.handed_on:
                self.at_tau[0] += 1
                self.at_tau[1] += right
            if r.asked_kind == "reply":
                self.kinds["replies"].add(r.confidence, r.handed_on, reply_verdict(r))
            elif r.asked_kind == "call":
                mine = r.rung == "specialist" and r.kind == "call"
                self.kinds["calls"].add(r.confidence, mine, (bool(strict), bool(ok)) if mine else None)
        if r.handed_on:
            _count(self.task_replies, r.task, reply_verdict(r))
        if self.rows is not None:
            self.rows.append(DecisionRow(
                id=r.id, task=r.task, rung=r.rung, action=r.action, kind=r.kind, arguments=r.arguments,
                provenance=r.provenance, source=r.source, confidence=r.confidence if r.consulted else None,
                novelty=r.novelty, handed_on=r.handed_on, label=r.label, strict=strict, acceptable=ok,
                text=r.text, graded=r.graded))

    def tiers(self) -> dict[str, dict[str, Any]]:
        """The figures of each rung (no compiler without a policy) and of the tiers that answered."""
        n, times = self.n, self.times.column(0)
        out = {}
        if self.compiler:
            out["compiler"] = figures(self.every, self.by_compiler, n, times, self.times.seen)
        out["specialist"] = figures(self.past_compiler, self.by_specialist, n, self.asked.column(0),
                                    self.asked.seen, hands_on=True)
        for name in sorted(self.by_tier):
            out[name] = figures(self.past_specialist, self.by_tier[name], n, np.zeros(0), 0)
        return out

    def overall(self) -> dict[str, Any]:
        o = figures(self.every, self.by_ladder, self.n, self.times.column(1), self.times.seen, hands_on=True)
        o.pop("coverage_of_reached")
        return o

    def calls(self) -> dict[str, Any]:
        """Complete tool calls (name and arguments) answered before the teacher: n is the decisions whose
        label is a tool call, coverage answered / n, precision correct / answered (a call answered
        where the teacher replied is answered and wrong)."""
        n, answered = self.calls_n, self.calls_answered
        p, a = rate(self.calls_correct, answered), rate(self.calls_acceptable, answered)
        return {"n": n, "answered": answered, "correct": p["k"], "coverage": answered / n if n else 0.0,
                "precision": p["rate"], "precision_ci": p["ci"],
                "acceptable": {"correct": a["k"], "precision": a["rate"], "precision_ci": a["ci"]}}

    def per_task(self) -> dict[str, Any]:
        """Precision per task of the answered calls and of the replies handed on (`per_task`)."""
        return {"calls": per_task(self.task_calls, "answered complete calls"),
                "replies": per_task(self.task_replies, "replies handed to a text tier")}

    def by_provenance(self) -> dict[str, Any]:
        """The answered calls by the provenance of their weakest argument value, both judges."""
        out = {}
        for p in Provenance:
            if p in self.by_source:
                m, right, ok = self.by_source[p]
                out[p.value] = {"answered": m, "strict": rate(right, m), "acceptable": rate(ok, m)}
        return out

    def off_teacher(self) -> dict[str, Any]:
        """Decisions taken off the teacher: complete outputs of the local rungs (checked calls, replies a
        local tier wrote) and, when the policy declares a text tier, the replies the specialist handed
        to it; their share of all n with its Wilson 95% interval, and precision strict and acceptable."""
        taken, right, ok, handed = self.off
        handed += self.written
        share = rate(taken, self.n)
        strict_p, acc_p = rate(right, taken), rate(ok, taken)
        return {"n": self.n, "taken": taken, "share": share["rate"] or 0.0, "share_ci": share["ci"],
                "handed_to_text_tier": handed, "text_tier": self.text_tier.name if self.text_tier else None,
                "text_tier_live": self.live_text, "handed_escalated": self.escalated,
                "strict": {"correct": right, "precision": strict_p["rate"], "precision_ci": strict_p["ci"]},
                "acceptable": {"correct": ok, "precision": acc_p["rate"], "precision_ci": acc_p["ci"]}}

    def cost(self, policy: Policy | None) -> dict[str, Any]:
        """What sending everything to the teacher costs against the ladder: a teacher call is removed
        only by a complete, checked output (a bare name still needs the teacher for its arguments)."""
        n, handed = self.n, self.off[3] + self.written
        removed = self.removed - self.written  # a reply the live text tier wrote is priced at its cost
        remote = (next((t for t in policy.ir.tiers if t.name == "remote"), None) if policy is not None
                  else None)
        unit = remote.cost if remote is not None and remote.cost is not None else None
        per_call = float(unit) if unit is not None else 1.0
        text_cost = float(self.text_tier.cost or 0) if self.text_tier is not None else 0.0
        saved = removed * per_call + handed * (per_call - text_cost)
        return {
            "unit": "remote tier cost" if unit is not None else "teacher calls",
            "per_teacher_call": per_call,
            "all_to_teacher": n * per_call,
            "with_ladder": n * per_call - saved,
            "saved": saved,
            "teacher_calls_removed": removed + handed,
            "replies_to_text_tier": handed,
            "per_text_tier_reply": text_cost,
            "names_answered_not_removed": self.names,
            "cost_saved_share": saved / (n * per_call) if n else 0.0,
        }

    def curve(self, points: int = 50) -> dict[str, Any]:
        """The specialist's risk–coverage curves. At the level of names, on every decision it was asked
        about (its best action against the label), with the point of its committed outputs (calls and
        names it answered, replies it handed on: each kind at its own τ) and a reliability diagram;
        then complete calls (at the call τ) and replies (at the reply τ) apart, under both judges
        (`KindCurve`). Beyond the sample's size curves, AURC, ECE and bins are those of a uniform
        sample (`sample` says of how many); the points at τ are counted over all of them."""
        n, m, right = self.asked.seen, *self.at_tau
        conf, correct = self.asked.column(1), self.asked.column(2)
        out = {
            "n": n,
            "tau": self.tau,
            "points": stats.risk_coverage(conf, correct, points=min(points, max(1, len(conf)))),
            "at_tau": {"coverage": m / n if n else 0.0, "precision": right / m if m else None, "answered": m},
            "aurc": stats.aurc(conf, correct) if n else None,
            "ece": stats.ece(conf, correct) if n else None,
            "reliability": stats.reliability(conf, correct),
            "calls": self.kinds["calls"].figures(points),
            "replies": self.kinds["replies"].figures(points),
        }
        if self.asked.sampled:
            out["sample"] = len(conf)
        return out

    def sampled(self) -> dict[str, Any] | None:
        """How many timings and confidences the figures are computed over, when a sample was taken."""
        if not (self.times.sampled or self.asked.sampled):
            return None
        return {"size": self.times.size, "decisions": self.times.seen, "asked": self.asked.seen}


def _count(table: dict, key: Any, verdict: tuple[bool, bool]) -> None:
    """One answer of `key` in `table` (answered, strict right, acceptable right)."""
    t = table.setdefault(key, [0, 0, 0])
    t[0] += 1
    t[1] += verdict[0]
    t[2] += verdict[1]


def ledger(rows: Iterable[Replay], risky: frozenset[str] = frozenset(), tau: float = 1.0,
           compiler: bool = True) -> Ledger:
    """A Ledger of `rows` (replayed decisions held in a list)."""
    led = Ledger(risky, tau, compiler=compiler)
    for r in rows:
        led.add(r)
    return led


def calls(rows: Iterable[Replay]) -> dict[str, Any]:
    """`Ledger.calls` of `rows`."""
    return ledger(rows).calls()


def cost(rows: Iterable[Replay], policy: Policy | None) -> dict[str, Any]:
    """`Ledger.cost` of `rows`."""
    return ledger(rows).cost(policy)


def curve(rows: Iterable[Replay], tau: float, points: int = 50) -> dict[str, Any]:
    """`Ledger.curve` of `rows`."""
    return ledger(rows, tau=tau).curve(points)


class Shadows:
    """Live agreement of each shadow specialist with the decision recorded in its receipts (`shadow.label_of`:
    gold when present, else the action taken; receipts judged wrong are left out): asked, answered,
    coverage (answers include replies handed on to a text tier), agreement by name with its Wilson 95%
    interval and its one-sided Clopper–Pearson 95% lower
    bound, and answers right as whole outputs (`shadow.record_right`: a call with its arguments); and
    by task, the unit `zc promote` certifies on: tasks answered in, those where every answer was right
    as a whole output, and the one-sided Clopper–Pearson 95% lower bound over tasks."""

    def __init__(self) -> None:
        self.tally: dict[str, list[int]] = {}  # asked, answered, agree, right
        self.clean: dict[str, dict[str, bool]] = {}  # specialist -> task -> every answer right
        self.seen = False  # some receipt had shadow records (judged or not)

    def add(self, r: Any) -> None:
        """Count receipt `r`'s shadow records (`meta.shadow`), if any."""
        records = r.meta.get("shadow")
        if not isinstance(records, list) or not records:
            return
        self.seen = True
        judged = label_of(r)
        if judged is None:
            return
        label, label_args = judged
        for s in records:
            if not isinstance(s, Mapping):
                continue
            t = self.tally.setdefault(str(s.get("specialist")), [0, 0, 0, 0])
            t[0] += 1
            if not committed(s):
                continue
            right = record_right(s, label, label_args)
            t[1] += 1
            t[2] += s.get("action") == label
            t[3] += right
            tasks = self.clean.setdefault(str(s.get("specialist")), {})
            tasks[r.task] = tasks.get(r.task, True) and right

    def figures(self) -> dict[str, Any]:
        out: dict[str, dict[str, Any]] = {}
        for name, (asked, answered, agree, right) in sorted(self.tally.items()):
            a = rate(agree, answered)
            out[name] = {"asked": asked, "answered": answered, "coverage": answered / asked if asked else 0.0,
                         "agree": agree, "agreement": a["rate"], "agreement_ci": a["ci"],
                         "lower_bound": stats.lower_bound(agree, answered), "right": right}
            tasks = self.clean.get(name, {})
            clean = sum(tasks.values())
            out[name].update(tasks=len(tasks), clean_tasks=clean,
                             task_lower_bound=stats.lower_bound(clean, len(tasks)))
        return out
