"""Promotion on shadow evidence: re-gate a specialist on live receipts of tasks it was never trained on."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from .. import stats
from ..errors import ZcError
from ..outdir import new_file
from ..receipts import ReadStats, expand, read
from ..router.shadow import committed, label_of, record_right
from .manifest import Gate, Manifest, encode, identity, seal_manifest
from .metrics import risky_actions
from .report import render
from .specialist import read_manifest

ALPHA = 0.05  # one-sided: the same bound the router's Monitor demotes on


@dataclass
class Evidence:
    """What the shadow records of one specialist version say, judged against each receipt's label."""

    receipts: int = 0  # receipts read
    asked: int = 0  # shadow records of this version, on receipts of tasks it never trained on
    answered: int = 0
    right: int = 0  # whole outputs equal to the label (a call with its arguments)
    illegal: int = 0  # answered an action the policy does not allow in the receipt's state
    dangerous: int = 0  # answered a risky action other than the label
    unjudged: int = 0  # the action taken was judged wrong and gold is unknown
    trained_on: int = 0  # records left out: the receipt's task is in the train or calibration split
    other_versions: int = 0  # records of a specialist of the same name but another manifest
    tasks: int = 0
    files: list[dict[str, str]] = field(default_factory=list)


def evidence(paths: Sequence[str | Path], manifest: Manifest, policy: Any, *,
             skip_invalid: bool = False) -> Evidence:
    """Tally the shadow records of `manifest`'s specialist (same name and `manifest.identity`) in the
    receipts."""
    ev = Evidence()
    files = expand(paths)
    ev.files = [{"path": str(f), "sha256": hashlib.sha256(f.read_bytes()).hexdigest()} for f in files]
    trained = set(manifest.splits.train.tasks) | set(manifest.splits.calibration.tasks)
    risky = risky_actions(policy)
    tasks = set()
    version = identity(manifest)
    for r in read(files, skip_invalid=skip_invalid, policy=policy, stats=ReadStats()):
        ev.receipts += 1
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
                ev.answered += 1
                ev.right += record_right(s, label, label_args)
                action = s.get("action")
                legal = policy.legal(r.state, intent=r.intent)
                ev.illegal += action not in legal.actions
                ev.dangerous += action != label and action in risky
    ev.tasks = len(tasks)
    return ev


def regate(m: Manifest, ev: Evidence, alpha: float = ALPHA) -> Manifest:
    """The manifest with its gate decided on the live evidence alone: promoted when no answer was
    illegal or dangerous and the one-sided (1 − alpha) Clopper–Pearson lower bound of live precision
    reaches the target; the evidence goes into `metrics.promotion`."""
    target = m.threshold.target_precision
    bound = stats.lower_bound(ev.right, ev.answered, alpha)
    need = stats.answers_needed(target, method="clopper-pearson", confidence=1 - alpha)
    bad = ev.illegal + ev.dangerous
    checks = [
        (ev.answered > 0, f"no shadow answer of this specialist version on tasks it never trained on "
                          f"({ev.asked} asked; {ev.other_versions} records of other versions, "
                          f"{ev.trained_on} on trained-on tasks)"),
        (bad == 0, f"{ev.illegal} illegal and {ev.dangerous} dangerous shadow answers"),
        (bound >= target, f"live precision {ev.right}/{ev.answered}: one-sided {1 - alpha:.0%} "
                          f"Clopper–Pearson lower bound {bound:.3f} < target {target:g} (≥ {need} answers, "
                          "all right, are needed)"),
    ]
    key = (*(float(ok) for ok, _ in checks), -float(bad), round(bound, 6))
    gate = Gate(all(ok for ok, _ in checks), key, tuple(msg for ok, msg in checks if not ok))
    promotion = {**asdict(ev), "lower_bound": bound, "alpha": alpha, "target_precision": target,
                 "answers_needed": need, "precision": ev.right / ev.answered if ev.answered else None,
                 "precision_ci": list(stats.wilson(ev.right, ev.answered)), "promoted": gate.promoted,
                 "previous_gate": msgspec.to_builtins(m.gate)}
    return msgspec.structs.replace(m, gate=gate, metrics={**m.metrics, "promotion": promotion})


def promote(directory: str | Path, policy: Any, paths: Sequence[str | Path], *, dry_run: bool = False,
            skip_invalid: bool = False) -> tuple[Manifest, Evidence]:
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
