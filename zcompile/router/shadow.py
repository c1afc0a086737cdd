"""Shadow mode and demotion: specialists asked beside the ladder, and the live window of verified
outcomes that demotes a promoted specialist whose precision bound falls below its target."""

from __future__ import annotations

import enum
import itertools
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from typing import Any

from ..receipts import Receipt
from ..receipts.candidates import same_call
from .rung import SPECIALIST, Step, ask, timed


def receipt_arguments(r: Receipt) -> Any:
    """The arguments of the call a receipt recorded (None: a bare name, or not recorded)."""
    return r.arguments


def label_of(r: Receipt) -> tuple[str | None, Any] | None:
    """What a receipt's decision is judged against: (gold, None) when gold is known, else (the action
    taken, its arguments); None when the action taken was judged wrong and gold is unknown."""
    if r.gold is not None:
        return r.gold, None
    if r.verified is False:
        return None
    return r.action, receipt_arguments(r)


def committed(record: Mapping[str, Any]) -> bool:
    """Whether a shadow record is an output the specialist stands by: a call (or name) it answered, or
    a text reply it recognised and handed on to a rung that writes text (not an abstention)."""
    return record.get("outcome") in ("answered", "handed_on") and record.get("action") is not None


def record_right(record: Mapping[str, Any], label: str | None, label_arguments: Any) -> bool:
    """Whether a shadow record's answer equals the label: a call needs equal arguments as well (a
    label without recorded arguments never matches a call); a reply or a bare name, the same name."""
    if record.get("kind") == "call":
        return label_arguments is not None and same_call(record.get("action"), record.get("arguments"), label,
                                                         label_arguments)
    return record.get("action") == label


class _Ask:
    """One shadow specialist as a rung."""

    writes_text = False

    def __init__(self, sp: Any) -> None:
        self.sp, self.name = sp, sp.name

    def answer(self, step: Step, timeout_s: float | None):
        return ask(self.sp, step)


_VERSIONS: dict[int, tuple[Any, str]] = {}
MAX_VERSIONS = 64  # manifests held for their identity; beyond, the cache starts again


def version(sp: Any) -> str | None:
    """`manifest.identity` of a loaded specialist (computed once per manifest); None for a specialist
    without a manifest (a harness's own rung)."""
    from ..qroute.manifest import Manifest, identity  # only with shadow specialists: numpy is loaded then

    m = getattr(sp, "manifest", None)
    if not isinstance(m, Manifest):
        return None
    held = _VERSIONS.get(id(m))
    if held is None or held[0] is not m:  # the manifest itself is kept, so its id is not reused
        if len(_VERSIONS) >= MAX_VERSIONS:  # a process loading specialists over time keeps no more
            _VERSIONS.clear()
        held = _VERSIONS[id(m)] = (m, identity(m))
    return held[1]


def shadow_answers(specialists: Sequence[Any], step: Step, action: str | None, arguments: Any) -> list[dict]:
    """What each shadow specialist would have done (`meta.shadow` of the receipt): its answer as a rung
    record, its name, and whether it is the decision's own answer (`same`)."""
    out = []
    for sp in specialists:
        ans = timed(_Ask(sp), SPECIALIST, step, None)
        record = ans.to_dict()
        del record["tier"]
        record["specialist"] = sp.name
        if (v := version(sp)) is not None:
            record["version"] = v  # which version answered: evidence for it alone
        record["same"] = ans.answered and same_call(ans.action, ans.arguments, action, arguments)
        out.append(record)
    return out


class Unit(enum.Enum):
    """What the Monitor's window counts: judged answers, or tasks (clean when every answer was right)."""

    ANSWERS = "answers"
    TASKS = "tasks"


class Monitor:
    """The demotion rule for promoted specialists, over live verified or teacher-labelled outcomes.

    Each specialist keeps its last `window` judged answers, or with `unit=Unit.TASKS` its last
    `window` tasks, each a success when every answer in it was right (decisions of one task are not
    exchangeable with another's: errors come in whole tasks, as `zc promote` counts them). Once it
    has at least `min_outcomes` of them (default: `window`), it is demoted when the one-sided
    (1 − alpha) Clopper–Pearson lower bound of its precision over the window falls below the target
    precision of its manifest: the live evidence no longer certifies what its threshold promised.
    A demoted specialist moves to the shadow rung, where it keeps answering into receipts and never
    into decisions.

    Args:
        window: judged answers (or tasks) kept per specialist.
        min_outcomes: judged answers (or tasks) needed before the rule applies.
        alpha: 1 − the confidence of the bound.
        unit: what is counted; an answer without a task is its own task.
    """

    def __init__(self, window: int = 300, min_outcomes: int | None = None, alpha: float = 0.05,
                 unit: Unit | str = Unit.ANSWERS) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        self.window = window
        self.min_outcomes = window if min_outcomes is None else min_outcomes
        self.alpha = alpha
        self.unit = Unit(unit)
        self._seen: dict[str, deque[bool]] = {}
        self._tasks: dict[str, OrderedDict[Any, bool]] = {}
        self._untasked = itertools.count()

    def judge(self, receipt: Receipt, *, correct: bool | None = None, action: str | None = None,
              arguments: Mapping[str, Any] | None = None) -> list[tuple[str, bool]]:
        """(specialist, right) for each specialist answer the receipt holds, judged by the label
        (`action`, `arguments`) or, without one, by `correct` (see `Router.record_outcome`)."""
        if action is None and correct is None:
            raise ValueError("record_outcome needs the label (action=…) or correct=True/False")
        answers = []
        args = receipt_arguments(receipt)
        if receipt.tier == SPECIALIST and receipt.model:
            answers.append((receipt.model, receipt.action, args, True))
        for s in receipt.meta.get("shadow") or ():
            if isinstance(s, Mapping) and s.get("outcome") == "answered":
                answers.append((str(s.get("specialist")), s.get("action"), s.get("arguments"),
                                bool(s.get("same"))))
        out = []
        for name, a, a_args, same in answers:
            if action is not None:
                record = {"kind": None if a_args is None else "call", "action": a, "arguments": a_args}
                out.append((name, record_right(record, action, arguments)))
            elif same:
                out.append((name, bool(correct)))
            elif correct:
                out.append((name, False))
        return out

    def add(self, name: str, right: bool, target: float | None, task: str | None = None) -> str | None:
        """Record one judged answer (of `task`); why the specialist is to be demoted, or None."""
        if self.unit is Unit.TASKS:
            tasks = self._tasks.setdefault(name, OrderedDict())
            key = task if task is not None else ("", next(self._untasked))
            tasks[key] = tasks.get(key, True) and right
            tasks.move_to_end(key)
            if len(tasks) > self.window:
                tasks.popitem(last=False)
            held = len(tasks)
        else:
            seen = self._seen.setdefault(name, deque(maxlen=self.window))
            seen.append(right)
            held = len(seen)
        if target is None or held < self.min_outcomes:
            return None
        k, n, bound = self.figures(name)
        if bound < target:
            what = "tasks clean" if self.unit is Unit.TASKS else "answers right"
            return (f"live precision {k}/{n} {what}: one-sided {1 - self.alpha:.0%} Clopper–Pearson lower "
                    f"bound {bound:.3f} < target {target:.3f}")
        return None

    def figures(self, name: str) -> tuple[int, int, float]:
        """(right, judged, lower bound) over the specialist's window (clean tasks and tasks with
        `Unit.TASKS`)."""
        from .. import stats

        seen: Sequence[bool] = (list(self._tasks.get(name, {}).values()) if self.unit is Unit.TASKS
                                else self._seen.get(name, ()))
        k, n = sum(seen), len(seen)
        return k, n, stats.lower_bound(k, n, self.alpha)
