"""Replay: sealed held-out decisions -> `Router.decide` on each, one row per decision, streamed.

The ladder replayed is the router's own (`zcompile.router.Router`), with LLM tiers off unless some
are given: the compiler answers when one action is legal, the specialist rung answers or abstains
(skipped when the policy's route for the state does not list `specialist`), and whatever is left
falls through to the teacher (`remote`). A pairwise specialist distilled without a policy has no
router: its rung (`SpecialistRung`, the router's) is asked with the receipt's `legal` list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, islice
from typing import Any

from ..errors import ZcError
from ..receipts.candidates import Provenance, call_provenance, provenance_of
from ..router import Router
from ..router.rung import SPECIALIST, Catalog, Offered, SpecialistRung, Step, timed
from ..runtime import Policy

SPLITS = ("test", "all")
WARMUP = 20  # decisions replayed untimed first (ONNX session and caches)
EXAMPLES = 20  # task ids listed per category in reports


@dataclass(slots=True)
class Replay:
    """One decision replayed through the router."""

    id: str
    task: str
    label: str | None  # gold if present, else the teacher's action; None: no offered action fits
    teacher: str | None
    gold: str | None
    label_arguments: Any  # the label's arguments when known (recorded, or {} for an empty signature)
    label_is_call: bool  # the label is a tool call (not a text reply)
    exposed: bool  # a risky action was in the legal set
    rung: str  # compiler | specialist | a tier name | remote (fell through to the teacher)
    action: str | None  # what the answering rung chose (None: fell through)
    arguments: Any
    kind: str  # call | name | reply (of the answer), none when it fell through
    consulted: bool  # the specialist was asked
    handed_on: bool  # the specialist chose a reply action: handed on to a text tier
    confidence: float  # the specialist's confidence (0 when not consulted)
    best: str | None  # the specialist's top legal action, answered or not
    compiler_us: float
    specialist_us: float
    acceptable: tuple = ()  # the judge's acceptable calls (`receipts.judge`), the teacher's own first
    provenance: dict[str, Provenance] | None = None  # of each argument of an answered call
    source: Provenance | None = None  # of the answered call: the weakest of its arguments'
    asked_kind: str = ""  # what the specialist's best is: call | reply | name ("" when not consulted)
    novelty: float | None = None  # the specialist's distance to its training data (None: no novelty model)
    text: str | None = None  # the reply a tier wrote (a live text tier)
    graded: str | None = None  # why the grader failed a reply a tier wrote, if it did

    @property
    def complete(self) -> bool:
        return self.kind in ("call", "reply")


# ---- sealing ---------------------------------------------------------------------------------------
def needs_policy(manifest: Any) -> str | None:
    """Why this specialist cannot be evaluated without its policy; None when it can (a pairwise
    specialist distilled without one)."""
    if manifest.model.kind != "pairwise":
        return (f"--policy is required: `{manifest.name}` is a {manifest.model.kind} specialist; give the "
                f"policy it was distilled for (`{manifest.policy_name}`)")
    if manifest.policy_sha256:
        return (f"--policy is required: pairwise specialist `{manifest.name}` was distilled for policy "
                f"`{manifest.policy_name}`")
    return None


def check_policy(manifest: Any, policy: Policy | None) -> None:
    """Refuse a missing policy the specialist needs, and a policy given to one distilled without any
    (a mismatched policy is refused when the specialist is loaded)."""
    if policy is None and (why := needs_policy(manifest)):
        raise ZcError(why)
    if policy is not None and manifest.model.kind == "pairwise" and not manifest.policy_sha256:
        raise ZcError(f"pairwise specialist `{manifest.name}` was distilled without a policy: evaluate it "
                      "without --policy (the receipts' `legal` lists are the legal sets)")


class Seal:
    """The seal of `zc eval`, one decision at a time: `admit(d)` says whether decision `d` may be
    reported under `split` (and counts its task); `info()` describes what was left out and why, or
    refuses. Only task ids are kept."""

    def __init__(self, manifest: Any, split: str, allow_trained: bool) -> None:
        s = manifest.splits
        self.trained = set(s.train.tasks) | set(s.calibration.tasks)
        self.test = set(s.test.tasks)
        self.split, self.allow_trained = split, allow_trained
        self.tasks: set[str] = set()
        self.decisions = self.kept = self.unseen_decisions = 0
        self.refused = False  # --split all met a trained-on task: nothing more is replayed

    def admit(self, d: Any) -> bool:
        self.decisions += 1
        self.tasks.add(d.task)
        trained = d.task in self.trained
        if trained and self.split == "all" and not self.allow_trained:
            self.refused = True  # `info` refuses once every task is counted
        if self.refused or (trained and self.split == "test"):
            return False
        self.kept += 1
        self.unseen_decisions += not trained and d.task not in self.test
        return True

    def info(self) -> dict[str, Any]:
        """What the report says about sealing, once every decision was admitted or not.

        Raises:
            ZcError: trained-on tasks under --split all without --allow-trained; nothing held out.
        """
        tasks = self.tasks
        trained_on = sorted(tasks & self.trained)
        unseen = sorted(tasks - self.trained - self.test)
        if self.refused:
            raise ZcError(f"receipts of {len(trained_on)} task{'s' if len(trained_on) != 1 else ''} the "
                          f"specialist was trained on (e.g. `{trained_on[0]}`) cannot be reported as "
                          "held-out; use --split test or --allow-trained")
        if not self.kept:
            raise ZcError(f"none of the {self.decisions} decisions is held out: every one belongs to a task "
                          f"the specialist was trained on (e.g. `{trained_on[0]}`); evaluate on other "
                          "receipts, or use --split all --allow-trained for a figure that is NOT held-out")
        held_out = self.split == "test" or not trained_on
        return {
            "split": self.split,
            "held_out": held_out,
            "label": "held-out" if held_out else "NOT held-out",
            "excluded_trained_on": self.decisions - self.kept,
            "excluded_tasks": len(trained_on) if self.split == "test" else 0,
            "included_trained_on_tasks": len(trained_on) if self.split == "all" else 0,
            "test_tasks": len(tasks & self.test),
            "unseen_tasks": len(unseen),
            "unseen_decisions": self.unseen_decisions,
            "unseen_task_examples": unseen[:EXAMPLES],
            "trained_on_task_examples": trained_on[:EXAMPLES],
        }


def seal(decisions: Sequence[Any], manifest: Any, split: str,
         allow_trained: bool) -> tuple[list, dict[str, Any]]:
    """`Seal` over a list: the decisions that may be reported under `split`, and what was left out and why."""
    sealer = Seal(manifest, split, allow_trained)
    kept = [d for d in decisions if sealer.admit(d)]
    return kept, sealer.info()


# ---- replay ------------------------------------------------------------------------------------------
def _routed(router: Router, pairwise: bool) -> Callable[[Any], Any]:
    """A decision asked through the router (its offered tools only for a pairwise specialist)."""
    def ask(d: Any) -> Any:
        return router.decide(d.state, d.intent, task=d.task, tools=d.tools if pairwise else None,
                             candidates=d.candidates, offer=d.offer)
    return ask


def replays(items: Iterable[tuple[Any, Any]], policy: Policy | None, specialist: Any, *,
            tiers: Mapping[str, Any] | None = None, grader: Any = None) -> Iterator[Replay]:
    """Each (decision, the arguments its receipt recorded or None) through `Router.decide` (with
    `specialist` on its rung, `tiers`, none by default, and `grader` on their replies), as a Replay row,
    one at a time. Without tiers the first `WARMUP` decisions are asked once more before, untimed (lazy
    initialisation); the tiers' policy budgets (`max_ms`) are not applied: a replay measures what they
    do, not how fast this machine is."""
    pairwise = bool(getattr(specialist, "pairwise", False))
    if policy is None:
        ask = _policyless(specialist)
    else:
        router = Router(policy, specialists=[specialist], tiers=tiers, grader=grader, budgets=False)
        ask = _routed(router, pairwise)
    items = iter(items)
    first = list(islice(items, WARMUP))
    if not tiers:  # live tiers would write their replies twice
        for d, _ in first:
            ask(d)
    catalog = Catalog(policy)
    risky = risky_actions(policy)
    for d, args in chain(first, items):
        yield replay_row(d, ask(d), catalog, risky, args)


def replay(decisions: Sequence[Any], policy: Policy | None, specialist: Any, *,
           tiers: Mapping[str, Any] | None = None, arguments: Mapping[str, Any]
           | None = None) -> list[Replay]:
    """`replays` of a list of decisions; `arguments`: the teacher's arguments by receipt id."""
    arguments = arguments or {}
    return list(replays(((d, arguments.get(d.id)) for d in decisions), policy, specialist, tiers=tiers))


def _policyless(specialist: Any):
    """The specialist rung asked as the router asks it, with the receipt's legal set (no compiler)."""
    rung, catalog = SpecialistRung([specialist]), Catalog(None)

    def ask(d):
        step = Step(None, d.state, Offered(tuple(d.legal)), d.intent, d.tools, catalog, offer=d.offer)
        ans = timed(rung, SPECIALIST, step, None)
        return _Policyless(ans)

    return ask


@dataclass(slots=True)
class _Policyless:
    """The parts of a Decision a row reads, for the policy-less ladder (one rung)."""

    answer: Any

    @property
    def rungs(self):
        return (self.answer,)

    @property
    def tier(self):
        return SPECIALIST if self.answer.answered else "remote"

    @property
    def action(self):
        return self.answer.action if self.answer.answered else None

    @property
    def arguments(self):
        return self.answer.arguments

    @property
    def kind(self):
        return self.answer.kind if self.answer.answered else "none"

    legal_ms = 0.0


def replay_row(d: Any, dec: Any, catalog: Catalog, risky: frozenset[str], recorded: Any) -> Replay:
    sp = next((a for a in dec.rungs if a.rung == SPECIALIST), None)
    consulted = sp is not None and sp.cause != "skipped"
    answered = dec.tier in ("compiler", SPECIALIST) or dec.tier in _tier_names(dec)
    label_args = (d.arguments if d.arguments is not None else recorded) if d.label == d.teacher else None
    if label_args is None and d.label is not None and catalog.params.get(d.label) == ():
        label_args = {}
    each = source = None
    if answered and dec.kind == "call":
        each, source = call_provenance(dec.arguments, provenance_of(d.candidates))
    asked_kind = ""
    if consulted:
        best = sp.action
        asked_kind = ("reply" if best in catalog.replies else
                      "call" if catalog.params.get(best) is not None else "name")
    return Replay(
        d.id, d.task, d.label, d.teacher, d.gold, label_args,
        d.label is not None and d.label not in catalog.replies,
        any(a in risky for a in d.legal),
        dec.tier if answered else "remote",
        dec.action if answered else None,
        dec.arguments if answered else None,
        dec.kind if answered else "none",
        consulted,
        consulted and sp.cause == "handed_on",
        float(sp.confidence or 0.0) if consulted else 0.0,
        sp.action if consulted else None,
        dec.legal_ms * 1000,
        sp.latency_ms * 1000 if consulted else 0.0,
        d.acceptable,
        each,
        source,
        asked_kind,
        sp.novelty if consulted else None,
        dec.text if answered and dec.kind == "reply" else None,
        next((a.detail for a in dec.rungs if a.cause == "graded"), None),
    )


def _tier_names(dec: Any) -> set[str]:
    return {a.rung for a in dec.rungs if a.rung not in ("compiler", SPECIALIST)}


def risky_actions(policy: Policy | None) -> frozenset[str]:
    from ..qroute import risky_actions as risky

    return risky(policy)
