"""`zc eval`'s report: stream the receipts once, seal them, replay the held-out decisions through the
router and count the figures as they go (memory bounded: nothing per decision is kept)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec

from ..errors import ZcError
from ..router.shadow import receipt_arguments
from ..runtime import Policy
from . import metrics
from .floor import NoiseFloor
from .replay import SPLITS, Seal, check_policy, replays, risky_actions


def report(paths: Sequence[str | Path], policy: Policy | None, specialist: Any, *, split: str = "test",
           allow_trained: bool = False, skip_invalid: bool = False, tiers: Mapping[str, Any] | None = None,
           decisions: bool = False, progress: Any = None, sample: int = metrics.SAMPLE,
           grader: Any = None) -> dict[str, Any]:
    """Replay receipts through `Router` with `specialist` (a classifier `Specialist` or a
    `PairwiseSpecialist`) on its rung and `tiers` (none: off); the whole evaluation as a JSON-ready
    dict. `policy` may be None only for a pairwise specialist distilled without one. `decisions`:
    also list what the router decided for each receipt (the one part that grows with the receipts).
    `progress`: a `qroute.Progress` whose `bar` wraps the pass over the receipts. `sample`: latencies
    and the risk–coverage curve are exact up to this many decisions, then from a uniform sample.
    `grader`: the reply grader (`zcompile.router.grader`) the replies of bound tiers must pass. With the
    policy's text tier bound in `tiers`, a handed-on reply counts as taken off the expensive model only
    when the text tier wrote it and it passed; without it, it is counted as the text tier's.

    The receipts are read twice, one at a time: first for the judge (`receipts.judge`: what each
    conversation did next, a few values per decision), then each is validated and converted to a
    decision as `zc distill` does, sealed against the specialist's manifest and, when held out,
    replayed; every figure is a counter (`metrics.Ledger`), besides the noise floor's groups.

    Raises:
        ZcError: unreadable or invalid receipts (without a policy: receipts that do not list their
            legal actions), no usable decision, trained-on tasks under `split="all"` without
            `allow_trained`, nothing held out, an unknown split, a policy missing or given wrongly.
    """
    from ..qroute.dataset import QUIET, no_usable, rows_in, stream
    from ..receipts.judge import LOOKAHEAD, RULE, conversation_of

    if split not in SPLITS:
        raise ZcError(f"unknown split `{split}` (choose test or all)")
    if sample < 1:
        raise ZcError(f"sample must be at least 1, got {sample}")
    m = specialist.manifest
    check_policy(m, policy)
    paths = [str(p) for p in paths]
    length = rows_in(paths) if progress is not None else 0  # for the progress bar: rows, counted undecoded
    progress = progress or QUIET
    counts: Counter = Counter()
    sealer = Seal(m, split, allow_trained)
    shadows = metrics.Shadows()
    judge = receipts_judge(paths, policy, progress, length)
    floor = NoiseFloor(policy)
    received = stream(paths, policy, counts, skip_invalid=skip_invalid,
                      none_fits=getattr(specialist, "pairwise", False), report=progress,
                      label="replaying receipts", length=length)
    more = 0

    def held_out() -> Iterator[tuple[Any, Any]]:
        nonlocal more
        seen: Counter = Counter()
        for r, d in received:
            shadows.add(r)
            key = (r.id, seen[r.id])
            seen[r.id] += 1
            if d is not None and sealer.admit(d):
                d = replace(d, acceptable=judge.acceptable(key))
                more += len(d.acceptable) > 1
                floor.add(d, conversation_of(r))
                yield d, receipt_arguments(r)

    text_tier = (next((t for t in policy.ir.tiers if getattr(t, "text", False)), None)
                 if policy is not None else None)
    calls_spec = getattr(m, "calls", None)
    led = metrics.Ledger(risky_actions(policy), m.threshold.tau, compiler=policy is not None, sample=sample,
                         keep_rows=decisions, text_tier=text_tier,
                         live_text=text_tier is not None and text_tier.name in (tiers or {}),
                         reply_tau=calls_spec.reply_threshold.tau if calls_spec is not None else None)
    for row in replays(held_out(), policy, specialist, tiers=tiers, grader=grader):
        led.add(row)
    if not counts["used"]:
        raise no_usable(counts)
    sealing = sealer.info()
    n = led.n
    overall = led.overall()
    calls, target = led.calls(), m.threshold.target_precision
    off = led.off_teacher()
    out = {
        "n": n,
        "policy": {"name": policy.name, "sha256": policy.sha256} if policy is not None else None,
        "legal_sets": "policy" if policy is not None else "receipts",
        "specialist": {"name": m.name, "model": m.model.kind, "tau": m.threshold.tau,
                       "target_precision": m.threshold.target_precision, "promoted": m.gate.promoted},
        "receipts": paths,
        **sealing,
        "tasks": len(led.tasks),
        "counts": {**dict(counts), "route_skipped_specialist": led.skipped},
        "tiers": led.tiers(),
        "remote": {"reached": led.remote},
        "overall": overall,
        "off_teacher": off,
        "calls": {**calls, "by_provenance": led.by_provenance()},
        "per_task": led.per_task(),
        "judge": {"rule": RULE, "lookahead": LOOKAHEAD, "lenient_actions": sorted(judge.lenient), "n": n,
                  "more_than_strict": more},
        "noise_floor": floor.figures(),
        "power": {"overall": metrics.power(overall["answered"], n, target),
                  "calls": metrics.power(calls["answered"], calls["n"], target)},
        "cost": led.cost(policy),
        "risk_coverage": led.curve(),
    }
    if (sampled := led.sampled()) is not None:
        out["sampled"] = sampled
    if shadows.seen:
        out["shadow"] = shadows.figures()
    if led.rows is not None:
        out["decisions"] = led.rows
    return out


def receipts_judge(paths: Sequence[str], policy: Policy | None, progress: Any, length: int) -> Any:
    """The judge over every receipt of `paths`, keyed by (id, occurrence): the first pass (an invalid
    line is left out here; the second pass refuses it, or skips it too under --skip-invalid)."""
    from ..qroute.dataset import make_judge
    from ..receipts import ReceiptError, read

    judge = make_judge(policy)
    seen: Counter = Counter()
    try:
        for i, r in enumerate(progress.bar(read(paths, skip_invalid=True), "judging receipts", length)):
            judge.add_receipt(r, i, (r.id, seen[r.id]), receipt_arguments(r))
            seen[r.id] += 1
    except (ReceiptError, OSError):  # the second pass refuses it, naming its place, before any figure
        pass
    return judge


def run(policy: Policy | None, specialist_dir: str | Path, paths: Sequence[str | Path],
        **kw: Any) -> dict[str, Any]:
    """Load the specialist for `policy` (refusing a mismatch; the class as its manifest says) and
    `report` on `paths`. `policy` may be None for a pairwise specialist distilled without one."""
    from ..qroute import load_specialist, read_manifest

    check_policy(read_manifest(specialist_dir), policy)
    return report(paths, policy, load_specialist(specialist_dir, policy), **kw)


def is_json_report(path: Path) -> bool:
    """Whether `path` holds a report `to_json` wrote (what `zc eval --json` may replace)."""
    try:
        rep = msgspec.json.decode(path.read_bytes())
    except (msgspec.DecodeError, RecursionError):
        return False
    return isinstance(rep, dict) and {"n", "overall", "tiers", "specialist"} <= rep.keys()


def to_json(rep: dict[str, Any]) -> bytes:
    """The report as indented JSON (non-finite numbers as null, numpy scalars as numbers)."""
    return msgspec.json.format(msgspec.json.encode(rep, enc_hook=_scalar), indent=2) + b"\n"


def _scalar(obj: Any) -> Any:
    if hasattr(obj, "item"):  # a numpy scalar
        return obj.item()
    raise TypeError(f"cannot encode {type(obj).__name__} in the report")
