"""Receipts -> validated decisions (state converted once, legal set once), the chronological task split and
its seal."""

from __future__ import annotations

import hashlib
import math
import sys
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from ..errors import ZcError
from ..inputs import sha256_file
from ..receipts.candidates import Candidate, normalize
from ..receipts.judge import Judge, canonical, lenient_actions
from .manifest import DataFile, Split, Splits
from .settings import MAX_DECISIONS

if TYPE_CHECKING:
    from ..runtime import Policy

SPLIT = (0.70, 0.15, 0.15)  # train / calibration / test, by task
PARTS = ("train", "calibration", "test")


@dataclass(frozen=True)
class Progress:
    """Progress sink: `step(text)` announces a stage; `bar(iterable, label, n)` wraps long loops."""

    step: Callable[[str], None] = lambda text: None
    bar: Callable[[Iterable, str, int], Iterable] = lambda it, label, n: it


QUIET = Progress()  # no progress shown


@dataclass(frozen=True, slots=True, kw_only=True)
class LoggedDecision:
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
    # offered tool schemas by name (`meta.tools`, else the policy's)
    tools: dict = field(default_factory=dict)
    verified: bool | None = None
    # what the harness could take (`meta.offer`); None: every legal action
    offer: frozenset[str] | None = None
    # the judge (`receipts.judge`): the calls acceptable here, the teacher's own first ((): not judged)
    acceptable: tuple = ()
    # what training learns (`targets`): one of the acceptable calls; else the label and its arguments
    target: str | None = None
    target_arguments: dict | None = None


@dataclass
class Dataset:
    """Decisions in input order, what was dropped and why, and the files they came from (with sha256)."""

    decisions: list[LoggedDecision]
    counts: Counter
    files: list[DataFile]


def load(paths: Sequence[str | Path], policy: Policy | None = None, *, skip_invalid: bool = False,
         none_fits: bool = False, report: Progress | None = None) -> Dataset:
    """Read and validate receipts into decisions; drop those judged wrong (`verified == false`).

    A receipt without an action is dropped as an abstention, unless `none_fits` and it is verified:
    then it is a decision where no offered action fits (pairwise specialists learn those). With a
    policy the state is validated and the legal set computed once, here; without one (pairwise
    only) the receipt's own `legal` list is used.
    """
    files = data_files(paths)
    counts: Counter = Counter()
    judge = make_judge(policy)
    out = [d for r, d in judged(stream(paths, policy, counts, skip_invalid=skip_invalid, none_fits=none_fits,
                                       report=report), judge) if d is not None]
    if not out:
        raise no_usable(counts)
    return Dataset([with_acceptable(d, judge) for d in out], counts, files)


def make_judge(policy: Policy | None) -> Any:
    """The judge of `policy`'s decisions: its side-effect-free and reply actions (strict without one)."""
    from ..tools import REPLY_TAG

    replies = [a.name for a in policy.ir.actions if REPLY_TAG in a.tags] if policy is not None else ()
    return Judge(lenient_actions(policy), replies)


def judged(pairs: Iterable[tuple[Any, LoggedDecision | None]],
           judge: Any) -> Iterator[tuple[Any, LoggedDecision | None]]:
    """`stream`'s pairs, unchanged, each receipt given to `judge` on the way (dropped ones too: a
    call judged wrong was still made, and ends a run of reads)."""
    for i, (r, d) in enumerate(pairs):
        judge.add_receipt(r, i, i, getattr(r, "arguments", None))
        yield r, d


def with_acceptable(d: LoggedDecision, judge: Any) -> LoggedDecision:
    """`d` with its acceptable calls (keyed by its position in the stream, `order[1]`)."""
    return replace(d, acceptable=judge.acceptable(d.order[1]))


def no_usable(counts: Counter) -> ZcError:
    """The error when no receipt read is a decision, saying what became of them (`stream`'s counts)."""
    seen = counts["receipts"] + counts["skipped_invalid"]
    if not seen:
        return ZcError("no usable receipts: the files hold none")
    why = [f"{counts[k]} {what}" for k, what in (("skipped_invalid", "invalid (skipped)"),
                                                 ("dropped_abstained", "abstained"),
                                                 ("dropped_judged_wrong", "judged wrong")) if counts[k]]
    return ZcError(f"no usable receipts: of {seen} read, " + ", ".join(why))


def stream(paths: Sequence[str | Path], policy: Policy | None, counts: Counter, *, skip_invalid: bool = False,
           none_fits: bool = False, report: Progress | None = None, label: str = "reading receipts",
           length: int = 0) -> Iterator[tuple[Any, LoggedDecision | None]]:
    """`load` one receipt at a time: each valid receipt read with its decision (None: dropped, and
    counted in `counts`); once exhausted, `counts` holds what `load` reports. Nothing is kept."""
    from ..receipts import ReadStats, read
    from ..tools import policy_tools

    report = report or QUIET
    rstats = ReadStats()
    used = 0
    described = policy_tools(policy) if policy is not None else {}
    receipts = report.bar(read(paths, skip_invalid=skip_invalid, policy=policy, stats=rstats), label, length)
    for i, r in enumerate(receipts):
        counts["receipts"] += 1
        if (dropped := _dropped(r, none_fits)) is not None:
            counts[dropped] += 1
            yield r, None
            continue
        used += 1
        yield r, _decision(r, i, policy, described, counts)
    counts["skipped_invalid"] = rstats.skipped
    counts["used"] = used


def _dropped(r: Any, none_fits: bool) -> str | None:
    """Why receipt `r` is not a decision to learn from (a count's name), or None."""
    if r.verified is False:
        return "dropped_judged_wrong"
    if r.gold is None and r.action is None and not (none_fits and r.verified is True):
        return "dropped_abstained"
    return None


def _decision(r: Any, i: int, policy: Policy | None, described: dict, counts: Counter) -> LoggedDecision:
    """The decision of receipt `r`, the `i`-th valid receipt read: the legal set computed once."""
    label = r.gold if r.gold is not None else r.action
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
    offer = (r.meta or {}).get("offer")
    if offer is not None:
        if not isinstance(offer, list) or not all(isinstance(a, str) for a in offer):
            raise ZcError(f"receipt `{r.id}`: $.meta.offer: expected an array of action names")
        offer = frozenset(offer)
    arguments = getattr(r, "arguments", None)
    own = (label, canonical(arguments if arguments is not None else {})) if label is not None else None
    return LoggedDecision(id=r.id, task=r.task, order=(r.ts if r.ts is not None else math.inf, i),
                          state=r.state, root=root, intent=r.intent, legal=tuple(legal), label=label,
                          teacher=r.action, gold=r.gold, arguments=arguments,
                          candidates=_shared(getattr(r, "candidates", None) or ()), tools=tools,
                          verified=r.verified, offer=offer, acceptable=(own,) if own is not None else (),
                          target=label, target_arguments=arguments)


def _shared(candidates: Any) -> tuple:
    """The candidates with their strings interned: a conversation's decisions repeat the values and
    keys of the ones before (on the bundled receipts 188,495 candidates hold 2,288 distinct values
    and 100 keys), and one copy of each is most of a decision's memory saved."""
    return tuple(Candidate(sys.intern(c.value) if type(c.value) is str else c.value, c.source,
                           sys.intern(c.key), c.age, c.count) for c in candidates)


# ---- bounded memory: a seeded, task-stratified sample beyond a size limit ---------------------------



@dataclass(frozen=True)
class Sampling:
    """Which decisions distillation used: all of them, or a seeded task-stratified sample of each split.

    A decision is kept when its key (`sample_key(seed, id)`) is at most its task's threshold
    (`theta`; None: every decision is kept), so any engine reading the receipts keeps the same ones.
    """

    method: str  # "all" or "sample"
    usable: int  # decisions in the data
    kept: int  # decisions used
    limit: int
    seed: int
    theta: dict[str, int] | None = None

    def keeps(self, r: Any) -> bool:
        return self.theta is None or sample_key(self.seed, r.id) <= self.theta.get(r.task, -1)

    def text(self) -> str:
        if self.method == "all":
            return f"all {self.usable} decisions (limit {self.limit})"
        return (f"a seeded task-stratified sample of {self.kept} of {self.usable} decisions (limit "
                f"{self.limit}, seed {self.seed}; each task keeps its share, rounded at random; the split "
                "and its seal cover every task)")


def sample_key(seed: int, rid: str) -> int:
    """A receipt's seeded random key (64 bits of blake2b of the seed and its id): the sample's order."""
    return int.from_bytes(hashlib.blake2b(f"{seed}\0{rid}".encode(), digest_size=8).digest(), "little")


@dataclass
class Bounded:
    """Decisions split by task (sampled beyond the limit), and the seal over every task."""

    parts: dict[str, list[LoggedDecision]]
    splits: Splits
    counts: Counter
    files: list[DataFile]
    sampling: Sampling


def rows_in(paths: Sequence[str | Path]) -> int:
    """Receipt rows in the files (non-blank lines; Parquet: the metadata's count), without decoding any.

    Only what can be read is counted (a truncated gzip stream up to its end, nothing of an unreadable
    file or corrupt Parquet): reading the receipts reports those, or skips them under --skip-invalid.
    """
    from ..receipts import ReceiptError, expand
    from ..receipts.io import is_parquet_file, iter_lines

    n = 0
    for p in expand(paths):
        try:
            if is_parquet_file(p):
                import pyarrow.parquet as pq

                n += pq.ParquetFile(p).metadata.num_rows
                continue
            for _ in iter_lines(p):
                n += 1
        except (ReceiptError, OSError, ValueError):  # pyarrow's ArrowInvalid is a ValueError
            continue
    return n


Seen = tuple  # (task, ts, id, where, dropped): one valid receipt of pass 1; `where` addresses it for
# pass 2 (file index << 40 | line or Parquet row), `dropped` why distillation drops it (None: usable)


def seen_locally(paths: Sequence[str | Path], policy: Policy | None, skip_invalid: bool, none_fits: bool,
                 stats: Any, report: Progress) -> Iterator[Seen]:
    """Pass 1 in this process: every receipt read and validated (`receipts.read`), in file order."""
    from ..receipts import read

    receipts = report.bar(read(paths, skip_invalid=skip_invalid, policy=policy, stats=stats),
                          "reading receipts (1 of 2: validating, splitting)", 0)
    for r in receipts:
        yield r.task, r.ts, r.id, (stats.files - 1) * (1 << 40) + stats.line, _dropped(r, none_fits)


def load_split(paths: Sequence[str | Path], policy: Policy | None = None, *, skip_invalid: bool = False,
               none_fits: bool = False, limit: int = MAX_DECISIONS, seed: int = 0,
               report: Progress | None = None, scan: Callable[..., Iterator[Seen]] | None = None) -> Bounded:
    """Steps 1–2 in memory bounded by `limit` decisions: `load` and `split_by_task` when the files
    hold at most `limit` rows; beyond it two streaming passes. The first reads and validates every
    receipt, keeping only each usable one's task and position; the split by task is made and sealed
    over all of them; then each split keeps, per task, a seeded random share `limit / usable` of its
    decisions (rounded up or down at random: `thresholds`), and the second pass builds only those, decoding
    only their
    lines (Parquet: reading only their row groups). `scan` runs the first pass (`seen_locally`, or an
    engine's: the Ray engine's validates in Ray workers), yielding the same rows in the same order.
    """
    report = report or QUIET
    if rows_in(paths) <= limit:
        data = load(paths, policy, skip_invalid=skip_invalid, none_fits=none_fits, report=report)
        report.step("2/10 splitting by task (chronological, sealed)")
        parts = split_by_task(data.decisions)
        n = len(data.decisions)
        return Bounded(parts, seal_all(parts), data.counts, data.files, Sampling("all", n, n, limit, seed))
    from ..receipts import ReadStats
    from ..tools import policy_tools

    files = data_files(paths)
    counts: Counter = Counter()
    rstats = ReadStats()
    tasks: dict[str, int] = {}
    first: dict[str, tuple[float, int]] = {}
    task_of, keys, raw, position = array("q"), array("Q"), array("q"), array("q")  # 32 bytes a decision
    for i, (task, ts, rid, where, dropped) in enumerate((scan or seen_locally)(
        paths, policy, skip_invalid, none_fits,
                                                                               rstats, report)):
        counts["receipts"] += 1
        if dropped is not None:
            counts[dropped] += 1
            continue
        t = tasks.setdefault(task, len(tasks))
        order = (ts if ts is not None else math.inf, i)
        if task not in first or order < first[task]:
            first[task] = order
        task_of.append(t)
        keys.append(sample_key(seed, rid))
        raw.append(where)
        position.append(i)
    usable = len(task_of)
    if not usable:
        counts["skipped_invalid"] = rstats.skipped
        raise no_usable(counts)
    report.step("2/10 splitting by task (chronological, sealed over every task), then sampling")
    which = task_parts(first)
    names = list(tasks)
    task_arr = np.frombuffer(task_of, dtype=np.int64)
    sizes = np.bincount(task_arr, minlength=len(names))
    part_of_task = np.array([PARTS.index(which[t]) for t in names], dtype=np.int8)
    splits = Splits(*(_seal_tasks([t for t in names if which[t] == p], int(sizes[part_of_task == k].sum()))
                      for k, p in enumerate(PARTS)))
    key_arr = np.frombuffer(keys, dtype=np.uint64)
    theta = thresholds(task_arr, key_arr, min(1.0, limit / usable), names, seed)
    keep = np.array([k <= th for k, th in zip(key_arr.tolist(), theta[task_arr].tolist())], dtype=bool)
    at = dict(zip(np.frombuffer(raw, dtype=np.int64)[keep].tolist(),
                  np.frombuffer(position, dtype=np.int64)[keep].tolist()))
    sampling = Sampling("sample", usable, len(at), limit, seed, dict(zip(names, theta.tolist())))
    del task_of, keys, raw, position, task_arr, key_arr, keep
    described = policy_tools(policy) if policy is not None else {}
    parts: dict[str, list[LoggedDecision]] = {p: [] for p in PARTS}
    for raw_at, r in report.bar(_again(files, at), "reading receipts (2 of 2: the sample)", len(at)):
        parts[which[r.task]].append(_decision(r, at[raw_at], policy, described, counts))
    kept = sum(len(v) for v in parts.values())
    if kept != len(at):
        raise ZcError(f"the receipts changed while being read: {kept} of the {len(at)} sampled decisions "
                      "were found again")
    counts["skipped_invalid"] = rstats.skipped
    counts["used"] = kept
    counts["sampled_out"] = usable - kept
    counts["sample_limit"] = limit
    return Bounded(parts, splits, counts, files, sampling)


def _again(files: list[DataFile], at: dict[int, int]) -> Iterator[tuple[int, Any]]:
    """The receipts at the given (file, line or row) keys, validated by the first pass: a Parquet file's
    rows read from their row groups only, a JSON Lines file's lines decoded only where wanted."""
    from ..receipts import ReadStats, read
    from ..receipts.io import is_parquet_file, receipt_of
    from ..receipts.parquet import rows_at

    for k, f in enumerate(files):
        path = Path(f.path)
        lo, hi = k * (1 << 40), (k + 1) * (1 << 40)
        rows = sorted(x - lo for x in at if lo <= x < hi)
        if not rows:
            continue
        if is_parquet_file(path):
            for n, body, texts in rows_at(path, rows):
                r, _ = receipt_of(body, texts, None)
                if r is not None:
                    yield lo + n, r
            continue
        stats, wanted = ReadStats(), set(rows)
        for r in read(path, skip_invalid=True, stats=stats):
            if stats.line in wanted:
                yield lo + stats.line, r


def thresholds(task: np.ndarray, key: np.ndarray, rate: float, names: Sequence[str], seed: int) -> np.ndarray:
    """Per task, the key at or below which its quota of lowest-keyed rows falls (-1: none kept).

    A task's quota is `rate * rows`, rounded down or up at random (seeded per task name) with the
    probability of its fraction: each task keeps its share in expectation and the total stays at
    about `rate * rows` however many tasks there are."""
    order = np.lexsort((key, task))  # rows grouped by task, each task's by key
    sizes = np.bincount(task, minlength=len(names))
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    want = rate * sizes
    coin = np.array([sample_key(seed, "task\0" + t) / 2.0**64 for t in names])
    quota = np.minimum(sizes, np.floor(want) + (coin < want - np.floor(want))).astype(np.int64)
    sorted_keys = key[order].astype(object)
    return np.array([int(sorted_keys[s + q - 1]) if q else -1 for s, q in zip(starts, quota)], dtype=object)


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


def split_by_task(decisions: Sequence[LoggedDecision]) -> dict[str, list[LoggedDecision]]:
    """70/15/15 by task, tasks ordered by their first decision (timestamp, else input order)."""
    first: dict[str, tuple[float, int]] = {}
    for d in decisions:
        first[d.task] = min(first.get(d.task, d.order), d.order)
    which = task_parts(first)
    out: dict[str, list[LoggedDecision]] = {p: [] for p in PARTS}
    for d in decisions:
        out[which[d.task]].append(d)
    return out


def task_parts(first: dict[str, tuple[float, int]]) -> dict[str, str]:
    """Each task's split: 70/15/15 of the tasks ordered by their first decision's (timestamp, position)."""
    tasks = sorted(first, key=first.__getitem__)
    n = len(tasks)
    if n < 3:
        raise ZcError(f"need receipts from at least 3 tasks to split train/calibration/test, got {n}")
    n_train = min(max(1, round(n * SPLIT[0])), n - 2)
    n_cal = min(max(1, round(n * SPLIT[1])), n - n_train - 1)
    return {t: PARTS[0] if i < n_train else PARTS[1] if i < n_train + n_cal else PARTS[2]
            for i, t in enumerate(tasks)}


def seal(part: Sequence[LoggedDecision]) -> Split:
    """The split's sorted task ids, their sha256 and its size: what `zc eval` checks held-out claims
    against."""
    return _seal_tasks({d.task for d in part}, len(part))


def _seal_tasks(tasks: Iterable[str], n: int) -> Split:
    ordered = tuple(sorted(set(tasks)))
    return Split(ordered, hashlib.sha256("\n".join(ordered).encode()).hexdigest(), n)


def seal_all(parts: dict[str, list[LoggedDecision]]) -> Splits:
    return Splits(*(seal(parts[p]) for p in PARTS))


def task_folds(decisions: Sequence[LoggedDecision], k: int) -> list[int]:
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
    if isinstance(v, msgspec.Struct):  # numpy scalars within (figures' Structs) as numbers
        return plain(msgspec.to_builtins(v, enc_hook=_item))
    return repr(v)


def _item(v: Any) -> Any:
    if type(v).__module__ == "numpy" and callable(getattr(v, "item", None)):
        return v.item()
    raise TypeError(f"cannot make {type(v).__name__} plain")


def targets(pool: Sequence[LoggedDecision], replies: frozenset[str]) -> tuple[list[LoggedDecision], int]:
    """What training learns at each decision of `pool` (train and calibration, never test): one call
    of its acceptable set (`receipts.judge`), chosen the same way everywhere so that equal states get
    equal targets. Among the acceptable calls a specialist could make here (every argument value is
    among the decision's candidates: seen before it), the target is the one whose action is
    acceptable at the most decisions of the pool (ties: the one the teacher makes first), so a reply
    the teacher gave before a lookup it then made becomes that lookup; otherwise the teacher's own
    step. Returns the decisions (targets set) and how many of them changed."""
    at = Counter(a for d in pool for a in {a for a, _ in d.acceptable})
    out, changed = [], 0
    for d in pool:
        seen = {normalize(c.value) for c in d.candidates}
        calls = [(a, c) for a, c in d.acceptable
                 if a not in replies and c is not None and ((a, c) == d.acceptable[0] or _available(c, seen))]
        if len(d.acceptable) < 2 or not calls:
            out.append(d)
            continue
        a, c = max(calls, key=lambda call: at[call[0]])  # max keeps the first of equals
        args = msgspec.json.decode(c)
        if a == d.target and canonical(d.target_arguments if d.target_arguments is not None else {}) == c:
            out.append(d)
            continue
        changed += 1
        out.append(replace(d, target=a, target_arguments=args))
    return out, changed


def _available(canon: str | None, seen: set[str]) -> bool:
    """Whether every scalar of a call's arguments (canonical JSON) is among the values `seen`."""
    if canon is None:
        return False
    stack = [msgspec.json.decode(canon)]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif normalize(v) not in seen:
            return False
    return True
