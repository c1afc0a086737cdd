"""`zc eval`'s report: load and seal the receipts, replay them through the router, gather the figures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from ..errors import ZcError
from ..runtime import Policy
from . import metrics
from .replay import SPLITS, check_policy, recorded, replay, risky_actions, seal


def report(paths: Sequence[str | Path], policy: Policy | None, specialist: Any, *, split: str = "test",
           allow_trained: bool = False, skip_invalid: bool = False, tiers: Mapping[str, Any] | None = None,
           decisions: bool = False) -> dict[str, Any]:
    """Replay receipts through `Router` with `specialist` (a classifier `Specialist` or a
    `PairwiseSpecialist`) on its rung and `tiers` (none: off); the whole evaluation as a JSON-ready
    dict. `policy` may be None only for a pairwise specialist distilled without one. `decisions`:
    also list what the router decided for each receipt.

    Raises:
        ZcError: unreadable or invalid receipts (without a policy: receipts that do not list their
            legal actions), no usable decision, trained-on tasks under `split="all"` without
            `allow_trained`, nothing held out, an unknown split, a policy missing or given wrongly.
    """
    from ..qroute import load_decisions

    if split not in SPLITS:
        raise ZcError(f"unknown split `{split}` (choose test or all)")
    m = specialist.manifest
    check_policy(m, policy)
    paths = [str(p) for p in paths]
    data = load_decisions(paths, policy, skip_invalid=skip_invalid, none_fits=getattr(specialist, "pairwise", False))
    loaded, counts = data.decisions, data.counts
    kept, sealing = seal(loaded, m, split, allow_trained)
    rec = recorded(paths)
    rows = replay(kept, policy, specialist, tiers=tiers, arguments=rec.arguments)
    risky = risky_actions(policy)
    n = len(rows)
    per_rung = {}
    if policy is not None:  # without a policy there is no compiler rung
        per_rung["compiler"] = metrics.figures(rows, [r for r in rows if r.rung == "compiler"], n,
                                               [r.compiler_us for r in rows], risky)
    per_rung["specialist"] = metrics.figures([r for r in rows if r.rung != "compiler"],
                                             [r for r in rows if r.rung == "specialist"], n,
                                             [r.specialist_us for r in rows if r.consulted], risky, hands_on=True)
    for name in sorted({r.rung for r in rows} - {"compiler", "specialist", "remote"}):  # tiers, when given
        per_rung[name] = metrics.figures([r for r in rows if r.rung not in ("compiler", "specialist")],
                                         [r for r in rows if r.rung == name], n, [], risky)
    overall = metrics.figures(rows, [r for r in rows if r.rung != "remote"], n,
                              [r.compiler_us + r.specialist_us for r in rows], risky, hands_on=True)
    overall.pop("coverage_of_reached")
    calls, target = metrics.calls(rows), m.threshold.target_precision
    out = {
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
        "tiers": per_rung,
        "remote": {"reached": sum(r.rung == "remote" for r in rows)},
        "overall": overall,
        "calls": calls,
        "power": {"overall": metrics.power(overall["answered"], n, target),
                  "calls": metrics.power(calls["answered"], calls["n"], target)},
        "cost": metrics.cost(rows, policy),
        "risk_coverage": metrics.curve(rows, m.threshold.tau),
    }
    if rec.shadow:
        out["shadow"] = metrics.shadow(rec)
    if decisions:
        out["decisions"] = metrics.row_dicts(rows)
    return out


def run(policy: Policy | None, specialist_dir: str | Path, paths: Sequence[str | Path], **kw: Any) -> dict[str, Any]:
    """Load the specialist for `policy` (refusing a mismatch; the class as its manifest says) and
    `report` on `paths`. `policy` may be None for a pairwise specialist distilled without one."""
    from ..qroute import load_specialist, read_manifest

    check_policy(read_manifest(specialist_dir), policy)
    return report(paths, policy, load_specialist(specialist_dir, policy), **kw)


def to_json(rep: dict[str, Any]) -> bytes:
    """The report as indented JSON (non-finite numbers as null, numpy scalars as numbers)."""
    return msgspec.json.format(msgspec.json.encode(rep, enc_hook=_scalar), indent=2) + b"\n"


def _scalar(obj: Any) -> Any:
    if hasattr(obj, "item"):  # a numpy scalar
        return obj.item()
    raise TypeError(f"cannot encode {type(obj).__name__} in the report")
