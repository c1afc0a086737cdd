"""Replay: receipts -> sealed held-out decisions -> `Router.decide` on each, one row per decision.

The ladder replayed is the router's own (`zcompile.router.Router`), with LLM tiers off unless some
are given: the compiler answers when one action is legal, the specialist rung answers or abstains
(skipped when the policy's route for the state does not list `specialist`), and whatever is left
falls through to the teacher (`remote`). A pairwise specialist distilled without a policy has no
router: its rung (`SpecialistRung`, the router's) is asked with the receipt's `legal` list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ZcError
from ..receipts import read
from ..router import Router
from ..router.rung import SPECIALIST, Catalog, Offered, SpecialistRung, Step, timed
from ..router.shadow import receipt_arguments
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


def seal(decisions: Sequence[Any], manifest: Any, split: str, allow_trained: bool) -> tuple[list, dict[str, Any]]:
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
    kept = list(decisions) if split == "all" else [d for d in decisions if d.task not in trained]
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


# ---- what the receipts recorded beside the decisions -------------------------------------------------
@dataclass(slots=True)
class Recorded:
    """Per receipt id: the arguments the router recorded in `meta` (receipts of this format version have
    no field for them); and every receipt's shadow records."""

    arguments: dict[str, Any]
    shadow: list[tuple[Any, list[Mapping[str, Any]]]]  # (receipt, its meta.shadow)


def recorded(paths: Sequence[str]) -> Recorded:
    """Read once more (the decisions were validated by then): what the decisions do not carry."""
    args: dict[str, Any] = {}
    shadow = []
    for r in read(paths, skip_invalid=True):
        a = receipt_arguments(r)
        if a is not None:
            args[r.id] = a
        s = r.meta.get("shadow")
        if isinstance(s, list) and s:
            shadow.append((r, [x for x in s if isinstance(x, Mapping)]))
    return Recorded(args, shadow)


# ---- replay ------------------------------------------------------------------------------------------
def replay(decisions: Sequence[Any], policy: Policy | None, specialist: Any, *,
           tiers: Mapping[str, Any] | None = None, arguments: Mapping[str, Any] | None = None) -> list[Replay]:
    """Each decision through `Router.decide` (with `specialist` on its rung and `tiers`, none by
    default), as a Replay row; `arguments`: the teacher's arguments by receipt id."""
    arguments = arguments or {}
    pairwise = bool(getattr(specialist, "pairwise", False))
    if policy is None:
        ask = _policyless(specialist)
    else:
        router = Router(policy, specialists=[specialist], tiers=tiers)
        ask = lambda d: router.decide(d.state, d.intent, task=d.task, tools=d.tools if pairwise else None)  # noqa: E731
    for d in decisions[:WARMUP]:  # untimed: first calls pay for lazy initialisation
        ask(d)
    catalog = Catalog(policy)
    risky = risky_actions(policy)
    return [_row(d, ask(d), catalog, risky, arguments) for d in decisions]


def _policyless(specialist: Any):
    """The specialist rung asked as the router asks it, with the receipt's legal set (no compiler)."""
    rung, catalog = SpecialistRung([specialist]), Catalog(None)

    def ask(d):
        step = Step(None, d.state, Offered(tuple(d.legal)), d.intent, d.tools, catalog)
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


def _row(d: Any, dec: Any, catalog: Catalog, risky: frozenset[str], arguments: Mapping[str, Any]) -> Replay:
    sp = next((a for a in dec.rungs if a.rung == SPECIALIST), None)
    consulted = sp is not None and sp.cause != "skipped"
    answered = dec.tier in ("compiler", SPECIALIST) or dec.tier in _tier_names(dec)
    label_args = (d.arguments if d.arguments is not None else arguments.get(d.id)) if d.label == d.teacher else None
    if label_args is None and d.label is not None and catalog.params.get(d.label) == ():
        label_args = {}
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
    )


def _tier_names(dec: Any) -> set[str]:
    return {a.rung for a in dec.rungs if a.rung not in ("compiler", SPECIALIST)}


def risky_actions(policy: Policy | None) -> frozenset[str]:
    from ..qroute import risky_actions as risky

    return risky(policy)
