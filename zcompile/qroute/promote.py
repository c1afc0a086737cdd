"""Promotion on shadow evidence: re-gate a specialist on live receipts of tasks it was never trained on,
counting tasks (each kind of output certified on the tasks it answered in, not on its answers)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from .. import stats
from ..errors import ZcError
from ..outdir import new_file
from ..receipts import ReadStats, expand, read
from ..receipts.candidates import call_provenance, provenance_of
from ..receipts.judge import accepts
from ..router.shadow import committed, label_of, receipt_arguments, record_right
from .manifest import Gate, Manifest, encode, identity, seal_manifest
from .metrics import risky_actions
from .report import render
from .specialist import read_manifest

if TYPE_CHECKING:
    from ..runtime import Policy

ALPHA = 0.05  # one-sided: the same bound the router's Monitor demotes on


@dataclass
class Kind:
    """The live evidence of one kind of output (`kind_of`), task by task."""

    kind: str
    answered: int = 0
    right: int = 0  # acceptable (`receipts.judge`): the teacher's next step, or a read it made later
    strict: int = 0  # equal to the teacher's next step
    tasks: int = 0  # tasks in which this kind answered
    clean: int = 0  # of them, tasks where every answer of this kind was acceptable
    illegal: int = 0
    dangerous: int = 0
    lower_bound: float = 0.0  # one-sided Clopper–Pearson over tasks: clean of tasks
    tasks_needed: int = 0  # more clean tasks for the bound to reach the target
    target: float = 0.0  # the precision its threshold states (`target_of`)
    promoted: bool = False


@dataclass
class Evidence:
    """What the shadow records of one specialist version say, judged against what the teacher then did."""

    receipts: int = 0  # receipts read
    asked: int = 0  # shadow records of this version, on receipts of tasks it never trained on
    answered: int = 0
    right: int = 0  # acceptable outputs (`receipts.judge`; a call with its arguments)
    strict: int = 0  # outputs equal to the label (a call with its arguments)
    illegal: int = 0  # answered an action the policy does not allow in the receipt's state
    dangerous: int = 0  # answered a risky action other than the label
    unjudged: int = 0  # the action taken was judged wrong and gold is unknown
    trained_on: int = 0  # records left out: the receipt's task is in the train or calibration split
    other_versions: int = 0  # records of a specialist of the same name but another manifest
    tasks: int = 0
    files: list[dict[str, str]] = field(default_factory=list)
    kinds: list[Kind] = field(default_factory=list)  # sorted by name


def kind_of(record: dict, candidates: Any) -> str:
    """The kind of a shadow output: a call by where its weakest argument value was seen
    (`call/user`, `call/call`, `call/tool`, `call/constant`, `call/none`) when the receipt carries the
    candidates its values could come from, else by its action; a reply or a bare name by its action."""
    if record.get("kind") == "call" and candidates:
        _, source = call_provenance(record.get("arguments"), provenance_of(candidates))
        return f"call/{source.value}"
    return str(record.get("action"))


def evidence(paths: Sequence[str | Path], manifest: Manifest, policy: Policy, *,
             skip_invalid: bool = False) -> Evidence:
    """Tally the shadow records of `manifest`'s specialist (same name and `manifest.identity`) in the
    receipts, each judged by the judge `zc eval` uses (strict, or acceptable: a side-effect-free call
    the teacher made later), per kind and per task."""
    from .dataset import make_judge

    ev = Evidence()
    files = expand(paths)
    ev.files = [{"path": str(f), "sha256": hashlib.sha256(f.read_bytes()).hexdigest()} for f in files]
    trained = set(manifest.splits.train.tasks) | set(manifest.splits.calibration.tasks)
    risky = risky_actions(policy)
    judge = make_judge(policy)
    tasks = set()
    version = identity(manifest)
    answers = []  # (receipt position, task, kind, record, label, label arguments, illegal, dangerous)
    for i, r in enumerate(read(files, skip_invalid=skip_invalid, policy=policy, stats=ReadStats())):
        ev.receipts += 1
        judge.add_receipt(r, i, i, receipt_arguments(r))
        mine = [s for s in r.meta.get("shadow") or () if isinstance(s, dict)
                and s.get("specialist") == manifest.name]
        for s in mine:
            if s.get("version") != version:
                ev.other_versions += 1
            elif r.task in trained:
                ev.trained_on += 1
            elif (judged := label_of(r)) is None:
                ev.unjudged += 1
            else:
                ev.asked += 1
                tasks.add(r.task)
                if not committed(s):
                    continue
                label, label_args = judged
                action = s.get("action")
                legal = policy.legal(r.state, intent=r.intent)
                answers.append((i, r.task, kind_of(s, getattr(r, "candidates", None)), s, label, label_args,
                                action not in legal.actions, action != label and action in risky))
    ev.tasks = len(tasks)
    by_kind: dict[str, Kind] = {}
    clean: dict[str, dict[str, bool]] = {}  # kind -> task -> every answer acceptable
    for i, task, kind, s, label, label_args, illegal, dangerous in answers:
        strict = record_right(s, label, label_args)
        ok = strict or accepts(judge.acceptable(i), s.get("action"), s.get("arguments"), judge.replies,
                               names=s.get("kind") != "call")
        k = by_kind.setdefault(kind, Kind(kind))
        k.answered += 1
        k.right += ok
        k.strict += strict
        k.illegal += illegal
        k.dangerous += dangerous
        per = clean.setdefault(kind, {})
        per[task] = per.get(task, True) and ok
    for kind, k in by_kind.items():
        k.tasks, k.clean = len(clean[kind]), sum(clean[kind].values())
        ev.answered += k.answered
        ev.right += k.right
        ev.strict += k.strict
        ev.illegal += k.illegal
        ev.dangerous += k.dangerous
    ev.kinds = [by_kind[k] for k in sorted(by_kind)]
    return ev


def target_of(m: Manifest, kind: str) -> float:
    """The precision the manifest states for a kind of output: a reply's is its reply threshold's,
    any other kind's (calls, names) the main threshold's."""
    if m.calls is not None and kind in m.calls.replies:
        return m.calls.reply_threshold.target_precision
    return m.threshold.target_precision


def regate(m: Manifest, ev: Evidence, alpha: float = ALPHA) -> Manifest:
    """The manifest with its gate decided on the live evidence alone, with tasks as the unit: a kind
    of output is promoted when none of its answers was illegal or dangerous and the one-sided
    (1 − alpha) Clopper–Pearson lower bound over the tasks it answered in, counting a task as a
    success when every answer of that kind in it was acceptable, reaches the target; the specialist
    is promoted when every kind it answered is (so a kind whose live precision falls demotes it).
    Each kind says how many more clean tasks it needs; the evidence goes into `metrics.promotion`."""
    target = m.threshold.target_precision
    need = stats.tasks_needed(0, 0, target, alpha)
    for k in ev.kinds:
        k.target = target_of(m, k.kind)
        k.lower_bound = stats.lower_bound(k.clean, k.tasks, alpha)
        k.tasks_needed = stats.tasks_needed(k.clean, k.tasks, k.target, alpha)
        k.promoted = k.illegal + k.dangerous == 0 and k.lower_bound >= k.target
    bad = ev.illegal + ev.dangerous
    short = [k for k in ev.kinds if not k.promoted]
    checks = [
        (ev.answered > 0, f"no shadow answer of this specialist version on tasks it never trained on "
                          f"({ev.asked} asked; {ev.other_versions} records of other versions, "
                          f"{ev.trained_on} on trained-on tasks)"),
        (bad == 0, f"{ev.illegal} illegal and {ev.dangerous} dangerous shadow answers"),
        *((False, f"`{k.kind}`: {k.clean} of {k.tasks} tasks clean ({k.right}/{k.answered} answers "
                  f"acceptable): one-sided {1 - alpha:.0%} Clopper–Pearson lower bound over tasks "
                  f"{k.lower_bound:.3f} < target {k.target:g}; {k.tasks_needed} more clean tasks needed")
          for k in short if k.illegal + k.dangerous == 0),
    ]
    bound = min((k.lower_bound for k in ev.kinds), default=0.0)
    key = (*(float(ok) for ok, _ in checks[:2]), float(not short), -float(bad), round(bound, 6))
    promoted = all(ok for ok, _ in checks) and bool(ev.kinds)
    gate = Gate(promoted, key, tuple(msg for ok, msg in checks if not ok))
    promotion = {**asdict(ev), "lower_bound": bound, "unit": "tasks", "alpha": alpha,
                 "target_precision": target,
                 "tasks_needed_from_none": need, "precision": ev.right / ev.answered if ev.answered else None,
                 "precision_ci": list(stats.wilson(ev.right, ev.answered)), "promoted": gate.promoted,
                 "previous_gate": msgspec.to_builtins(m.gate)}
    return msgspec.structs.replace(m, gate=gate, metrics={**m.metrics, "promotion": promotion})


def promote(directory: str | Path, policy: Policy, paths: Sequence[str | Path], *,
            dry_run: bool = False, skip_invalid: bool = False) -> tuple[Manifest, Evidence]:
    """Re-gate the specialist in `directory` on the shadow evidence in `paths` and, unless `dry_run`,
    rewrite its manifest (re-sealed) and report.md in place, each file replaced atomically."""
    from .loading import load

    load(directory, policy)  # the whole directory verifies (seal, files, policy) before anything is judged
    m = read_manifest(directory)
    ev = evidence(paths, m, policy, skip_invalid=skip_invalid)
    new = seal_manifest(regate(m, ev))
    if not dry_run:
        d = Path(directory)
        _replace(d / "report.md", render(new).encode())
        _replace(d / "manifest.json", encode(new))
    return new, ev


def _replace(path: Path, data: bytes) -> None:
    """Write `data` to a temporary sibling, then rename it over `path` (never a half-written file)."""
    try:
        with new_file(path) as tmp:
            tmp.write_bytes(data)
    except OSError as exc:
        raise ZcError(f"{path}: cannot write: {exc.strerror}") from None
