"""Receipts -> validated decisions (state converted once, legal set once), the chronological task split and its seal."""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from ..errors import ZcError
from .manifest import DataFile, Split, Splits

SPLIT = (0.70, 0.15, 0.15)  # train / calibration / test, by task
PARTS = ("train", "calibration", "test")


@dataclass
class Report:
    """Progress sink: `step(text)` announces a stage; `bar(iterable, label, n)` wraps long loops."""

    step: Callable[[str], None] = lambda text: None
    bar: Callable[[Iterable, str, int], Iterable] = lambda it, label, n: it


@dataclass(frozen=True, slots=True)
class Decision:
    """One usable logged decision: the state (as logged and as validated), what was legal, what was right."""

    id: str
    task: str
    order: tuple[float, int]  # (timestamp or inf, position in the input)
    state: dict
    root: Any  # the state converted by the policy's schema (None without a policy)
    intent: str | None
    legal: tuple[str, ...]
    label: str | None  # gold, else the teacher's action; None: verified "no offered action fits"
    teacher: str | None = None
    gold: str | None = None
    arguments: dict | None = None  # the teacher's call's arguments, when the receipt has them
    candidates: tuple = ()  # argument candidates available at decision time, when the receipt has them
    tools: dict = field(default_factory=dict)  # offered tool schemas by name (`meta.tools`, else the policy's)
    verified: bool | None = None


@dataclass
class Dataset:
    """Decisions in input order, what was dropped and why, and the files they came from (with sha256)."""

    decisions: list[Decision]
    counts: Counter
    files: list[DataFile]


def load(paths: Sequence[str | Path], policy: Any = None, *, skip_invalid: bool = False,
         none_fits: bool = False, report: Report | None = None) -> Dataset:
    """Read and validate receipts into decisions; drop those judged wrong (`verified == false`).

    A receipt without an action is dropped as an abstention, unless `none_fits` and it is verified:
    then it is a decision where no offered action fits (pairwise specialists learn those). With a
    policy the state is validated and the legal set computed once, here; without one (pairwise
    only) the receipt's own `legal` list is used.
    """
    from ..receipts import ReadStats, read
    from ..tools import policy_tools

    report = report or Report()
    files = data_files(paths)
    counts: Counter = Counter()
    rstats = ReadStats()
    out: list[Decision] = []
    described = policy_tools(policy) if policy is not None else {}
    receipts = report.bar(read(paths, skip_invalid=skip_invalid, policy=policy, stats=rstats), "reading receipts", 0)
    for i, r in enumerate(receipts):
        counts["receipts"] += 1
        label = r.gold if r.gold is not None else r.action
        if r.verified is False:
            counts["dropped_judged_wrong"] += 1
            continue
        if label is None and not (none_fits and r.verified is True):
            counts["dropped_abstained"] += 1
            continue
        if policy is not None:
            legal_set = policy.legal(r.state, r.intent)
            legal, root = legal_set.actions, legal_set.root
        elif r.legal is not None:
            legal, root = tuple(r.legal), None
        else:
            raise ZcError(f"receipt `{r.id}`: $.legal: missing; without --policy a pairwise specialist needs "
                          "receipts that list the offered actions")
        if label is not None and label not in legal:
            counts["label_not_legal"] += 1  # kept: the specialist can never match it, and that counts
        if label is None:
            counts["no_action_fits"] += 1
        raw_tools = (r.meta or {}).get("tools") or []
        tools = {str(t["name"]): t for t in raw_tools if isinstance(t, dict) and "name" in t} or described
        out.append(Decision(r.id, r.task, (r.ts if r.ts is not None else math.inf, i), r.state, root, r.intent,
                            tuple(legal), label, r.action, r.gold, getattr(r, "arguments", None),
                            tuple(getattr(r, "candidates", None) or ()), tools, r.verified))
    counts["skipped_invalid"] = rstats.skipped
    counts["used"] = len(out)
    if not out:
        raise ZcError("no usable receipts: every receipt was invalid, abstained or judged wrong")
    return Dataset(out, counts, files)


def data_files(paths: Sequence[str | Path]) -> list[DataFile]:
    """Each receipts file with its sha256, for the manifest."""
    from ..receipts import expand

    files = []
    for p in expand(paths):
        try:
            files.append(DataFile(str(p), sha256_file(Path(p))))
        except OSError as exc:
            raise ZcError(f"{p}: cannot read receipts: {exc.strerror}") from None
    return files


def sha256_file(p: Path) -> str:
    h = hashlib.sha256()
    with p.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def split_by_task(decisions: Sequence[Decision]) -> dict[str, list[Decision]]:
    """70/15/15 by task, tasks ordered by their first decision (timestamp, else input order)."""
    first: dict[str, tuple[float, int]] = {}
    for d in decisions:
        first[d.task] = min(first.get(d.task, d.order), d.order)
    tasks = sorted(first, key=first.__getitem__)
    n = len(tasks)
    if n < 3:
        raise ZcError(f"need receipts from at least 3 tasks to split train/calibration/test, got {n}")
    n_train = min(max(1, round(n * SPLIT[0])), n - 2)
    n_cal = min(max(1, round(n * SPLIT[1])), n - n_train - 1)
    which = {t: PARTS[0] if i < n_train else PARTS[1] if i < n_train + n_cal else PARTS[2]
             for i, t in enumerate(tasks)}
    out: dict[str, list[Decision]] = {p: [] for p in PARTS}
    for d in decisions:
        out[which[d.task]].append(d)
    return out


def seal(part: Sequence[Decision]) -> Split:
    """The split's sorted task ids, their sha256 and its size: what `zc eval` checks held-out claims against."""
    tasks = tuple(sorted({d.task for d in part}))
    return Split(tasks, hashlib.sha256("\n".join(tasks).encode()).hexdigest(), len(part))


def seal_all(parts: dict[str, list[Decision]]) -> Splits:
    return Splits(*(seal(parts[p]) for p in PARTS))


def task_folds(decisions: Sequence[Decision], k: int) -> list[int]:
    """Fold index of each decision: tasks dealt round-robin in order of first appearance, so that a
    task is never in two folds (grouped K-fold, deterministic)."""
    order: dict[str, int] = {}
    for d in decisions:
        order.setdefault(d.task, len(order))
    return [order[d.task] % k for d in decisions]


def plain(v: Any) -> Any:
    """JSON-safe copy (numpy scalars, tuples, infinities -> None)."""
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if hasattr(v, "item") and callable(v.item) and type(v).__module__ == "numpy":
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, msgspec.Struct):
        return plain(msgspec.to_builtins(v))
    return repr(v)
