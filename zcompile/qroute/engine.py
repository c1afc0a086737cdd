"""Featurisation engines: local (batches into a memory-mapped float32 matrix) or Ray Data over Parquet shards,
bit for bit the same.

Both compute each decision's row with the same `Featurizer.row(root, legal)`, root and legal set
from the same `Policy.legal(state, intent)`, into a float32 matrix per split, written `BATCH` rows
at a time into a memory-mapped file in the distillation's staging directory (removed with it).
The local engine featurises the decisions in memory; the Ray engine reads the receipts again from
Parquet shards with Ray Data (`ray.data.read_parquet`, order preserved), validates and featurises
them in Ray workers, keeps the ones the sample keeps (`dataset.Sampling.keeps`: a per-receipt
test, so workers need no global state), and the driver checks that it got exactly the decisions
of each split, in order. Non-tabular recipes (transformer, pairwise) read their inputs as before.
Beyond `--max-decisions` the Ray engine also runs the first pass of `dataset.load_split` (`scan`):
every row validated in a worker, its task, timestamp, id and drop reason sent back in order.
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from ..errors import ZcError
from . import dataset as D
from . import features as F

if TYPE_CHECKING:
    from ..runtime import Policy
    from .recipes import Recipe

ENGINES = ("local", "ray")
BATCH = 4096  # decisions featurised at a time (one float32 chunk)
RAY_BATCH = 1024  # receipts per Ray Data batch


def make(name: str, paths: Sequence[str | Path], policy: Policy | None, *, skip_invalid: bool = False,
         none_fits: bool = False) -> Any:
    """The engine called `name` for these receipts (the Ray engine refuses files other than Parquet)."""
    if name == "local":
        return Local()
    if name == "ray":
        return Ray(paths, policy, skip_invalid=skip_invalid, none_fits=none_fits)
    raise ZcError(f"unknown engine `{name}` (choose {' or '.join(ENGINES)})")


def _matrix(where: Path, part: str, n: int, dim: int) -> np.ndarray:
    """A float32 (n, dim) matrix memory-mapped from a new file under `where` (in memory when empty)."""
    if n == 0 or dim == 0:
        return np.zeros((n, dim), dtype=np.float32)
    where.mkdir(exist_ok=True)
    fd, name = tempfile.mkstemp(dir=where, prefix=f"{part}-", suffix=".f32")
    os.close(fd)
    return np.lib.format.open_memmap(name, mode="w+", dtype=np.float32, shape=(n, dim))


def scratch(cdir: Path) -> Path:
    """Where a candidate's feature matrices go: a directory the staged output removes with the rest."""
    return cdir / ".features"


class Local:
    """Featurise in this process, from the decisions in memory."""

    name = "local"

    def inputs(self, rec: Recipe, parts: dict[str, list[D.LoggedDecision]], cdir: Path,
               report: D.Progress) -> dict[str, Any]:
        fz = rec.featurizer
        if fz is None:
            return {p: rec.inputs(report.bar(parts[p], f"{rec.reading} {p}", len(parts[p]))) for p in D.PARTS}
        out = {}
        for p in D.PARTS:
            ds = parts[p]
            x = _matrix(scratch(cdir), p, len(ds), fz.dim)
            for start in report.bar(range(0, len(ds), BATCH), f"{rec.reading} {p}: {len(ds)} decisions, "
                                                              f"batches of {BATCH}", -(-len(ds) // BATCH)):
                x[start:start + BATCH] = np.stack([fz.row(d.root, d.legal)
                                                   for d in ds[start:start + BATCH]])
            out[p] = x
        return out


class Ray:
    """Featurise the receipts' Parquet shards with Ray Data (a local instance, or the cluster that
    `RAY_ADDRESS` names), the same rows as the local engine."""

    name = "ray"

    def __init__(self, paths: Sequence[str | Path], policy: Policy | None, *, skip_invalid: bool,
                 none_fits: bool) -> None:
        from ..receipts import expand
        from ..receipts.io import is_parquet_file

        self.files = [str(p) for p in expand(paths)]
        if bad := [f for f in self.files if not is_parquet_file(Path(f))]:
            raise ZcError(f"{bad[0]}: --engine ray reads Parquet shards; convert it with "
                          f"`zc receipts convert {bad[0]} -o OUT.parquet`")
        if policy is None:
            raise ZcError("--engine ray needs --policy (it computes legal sets in its workers)")
        self.policy, self.skip_invalid, self.none_fits = policy, skip_invalid, none_fits
        self.sampling: D.Sampling | None = None

    def scan(self, paths: Any, policy: Policy | None, skip_invalid: bool, none_fits: bool, stats: Any,
             report: D.Progress) -> Iterator[D.Seen]:
        """Pass 1 of a bounded distillation (`dataset.load_split`) in Ray workers: every Parquet row
        validated there (`Scan`), the rows back in file order, addressed by file and row as the local
        reader addresses them. An invalid row is read again here, so its error is the local one."""
        import pyarrow.parquet as pq

        ray = _ray()
        sizes = [pq.ParquetFile(f).metadata.num_rows for f in self.files]
        k, n, total = 0, 0, 0  # the file, its rows seen, all rows seen
        batches = scanned(ray, self.files, policy, none_fits)
        for batch in report.bar(batches, "reading receipts with Ray Data (1 of 2: validating, splitting)", 0):
            for ok, task, has_ts, ts, rid, dropped, problem in zip(
                    batch["ok"], batch["task"], batch["has_ts"], batch["ts"], batch["id"], batch["dropped"],
                    batch["problem"]):
                while k < len(sizes) and n == sizes[k]:
                    k, n = k + 1, 0
                n, total = n + 1, total + 1
                if k == len(sizes):
                    raise ZcError("--engine ray: Ray Data read more rows than the shards hold; the Parquet "
                                  "shards changed while distilling?")
                if not ok:
                    if not skip_invalid:
                        self._refuse(k, n, policy)
                    stats.problem(f"{self.files[k]}:row {n}: {problem}")
                    continue
                yield (str(task), float(ts) if has_ts else None, str(rid), k * (1 << 40) + n, str(dropped)
                       or None)
        if total != sum(sizes):
            raise ZcError("--engine ray: Ray Data read fewer rows than the shards hold; the Parquet shards "
                          "changed while distilling?")

    def _refuse(self, k: int, n: int, policy: Policy | None) -> None:
        """Raise the local reader's error for row `n` of file `k` (it read the rows before as valid)."""
        from ..receipts import read

        for _ in read([self.files[k]], policy=policy):
            pass
        raise ZcError(f"{self.files[k]}:row {n}: refused in a Ray worker but valid here (a mismatched zc "
                      "or policy on the workers?)")

    def inputs(self, rec: Recipe, parts: dict[str, list[D.LoggedDecision]], cdir: Path,
               report: D.Progress) -> dict[str, Any]:
        fz = rec.featurizer
        if fz is None:
            raise ZcError(f"--engine ray featurises tabular models (logistic, mlp, gbt), not `{rec.kind}`")
        ray = _ray()
        which = {d.task: p for p in D.PARTS for d in parts[p]}
        out = {p: _matrix(scratch(cdir), p, len(parts[p]), fz.dim) for p in D.PARTS}
        filled = dict.fromkeys(D.PARTS, 0)
        for batch in report.bar(featurised(ray, self.files, self.policy, rec.spec, self.sampling,
                                           self.skip_invalid, self.none_fits), "featurising with Ray Data",
                                0):
            for rid, task, row in zip(batch["id"], batch["task"], batch["x"]):
                p = which.get(str(task))
                k = filled[p] if p is not None else -1
                if p is None or k >= len(parts[p]) or parts[p][k].id != str(rid):
                    raise ZcError(f"--engine ray: receipt `{rid}` of task `{task}` is not the decision the "
                                  "local reader has next; the Parquet shards changed while distilling?")
                out[p][k] = row
                filled[p] += 1
        if short := [p for p in D.PARTS if filled[p] != len(parts[p])]:
            raise ZcError(f"--engine ray: featurised {filled[short[0]]} of the {len(parts[short[0]])} "
                          f"{short[0]} decisions; the Parquet shards changed while distilling?")
        return out


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ZcError("--engine ray needs Ray Data: pip install 'zcompile[ray]'") from None
    if not ray.is_initialized():  # RAY_ADDRESS (a cluster) if set, else a local instance
        ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    return ray


def _shards(files: list[str]) -> Any:
    """The shards as a Ray Dataset whose rows come back in the files' order."""
    import warnings

    # Ray Data warns about its own deprecated settings when its context is made: not the user's doing
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"ray(\.|$)")
    import ray.data

    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True  # rows come back in the files' order
    return ray.data.read_parquet(files, file_extensions=None)


def _batches(ds: Any) -> Any:
    """A mapped Dataset's batches, a Ray failure as a ZcError."""
    try:
        yield from ds.iter_batches(batch_format="numpy", batch_size=None)
    except Exception as exc:  # noqa: BLE001 - Ray wraps a worker's error in its own types
        raise ZcError(f"--engine ray: Ray Data could not read the shards ({type(exc).__name__}: "
                      f"{str(exc).splitlines()[0] if str(exc) else ''}); `--engine local` reads them row by "
                      "row and names a bad row") from None


def scanned(ray: Any, files: list[str], policy: Policy | None, none_fits: bool):
    """Batches of pass 1 (`Scan`) over every row of `files`, in file and row order."""
    ds = _shards(files)
    how = {"policy_ir": msgspec.msgpack.encode(policy.ir), "none_fits": none_fits}
    yield from _batches(ds.map_batches(scan_batch, fn_kwargs=how, batch_format="pyarrow",
                                       batch_size=RAY_BATCH))


def scan_batch(table: Any, **how: Any) -> dict[str, np.ndarray]:
    """A Ray Data task: one Arrow batch of Parquet rows -> what pass 1 needs of each (`Scan`)."""
    return _scanner(**how)(table)


@functools.lru_cache(maxsize=4)
def _scanner(**how: Any) -> Scan:
    return Scan(**how)


class Scan:
    """A Ray Data worker of pass 1: each row validated exactly as `receipts.read` does; for a valid
    one its task, timestamp, id and why distillation drops it (`dataset._dropped`; "" when usable),
    for an invalid one the problem."""

    def __init__(self, policy_ir: bytes, none_fits: bool) -> None:
        from .. import ir
        from ..runtime import Policy

        self.policy = Policy(msgspec.msgpack.decode(policy_ir, type=ir.PolicyIR))
        self.none_fits = none_fits

    def __call__(self, table: Any) -> dict[str, np.ndarray]:
        from ..receipts.io import receipt_of
        from ..receipts.parquet import batch_bodies

        cols: dict[str, list] = {k: [] for k in ("ok", "task", "has_ts", "ts", "id", "dropped", "problem")}
        for body, texts in batch_bodies(table):
            r, problem = receipt_of(body, texts, self.policy)
            ok = problem is None
            row = (ok, r.task, r.ts is not None, r.ts or 0.0, r.id, D._dropped(r, self.none_fits) or "",
                   "") if ok \
                else (False, "", False, 0.0, "", "", problem)
            for k, v in zip(cols, row):
                cols[k].append(v)
        kinds = {"ok": bool, "has_ts": bool, "ts": np.float64}
        return {k: np.array(v, dtype=kinds.get(k, object)) for k, v in cols.items()}


def featurised(ray: Any, files: list[str], policy: Policy | None, spec: F.FeatureSpec,
               sampling: D.Sampling | None, skip_invalid: bool, none_fits: bool):
    """Batches {"id", "task", "x"} of the kept decisions of `files`, in file and row order."""
    import inspect

    ds = _shards(files)
    kwargs = dict(fn_kwargs={
        "policy_ir": msgspec.msgpack.encode(policy.ir), "spec": msgspec.msgpack.encode(spec),
        "sampling": msgspec.msgpack.encode(_plain_sampling(sampling)), "skip_invalid": skip_invalid,
        "none_fits": none_fits}, batch_format="pyarrow", batch_size=RAY_BATCH)
    if "udf_modifying_row_count" in inspect.signature(ds.map_batches).parameters:
        kwargs["udf_modifying_row_count"] = True  # rows not kept are left out
    # Ray tasks (not an actor pool: an actor would hold a CPU the read tasks wait for), each worker
    # process building its Featurise once (`_worker`)
    yield from _batches(ds.map_batches(featurise_batch, **kwargs))


def featurise_batch(table: Any, **how: Any) -> dict[str, np.ndarray]:
    """A Ray Data task: one Arrow batch of Parquet rows -> the kept decisions' feature rows."""
    return _worker(**how)(table)


@functools.lru_cache(maxsize=4)
def _worker(**how: Any) -> Featurise:
    return Featurise(**how)


def _plain_sampling(s: D.Sampling | None) -> dict[str, Any] | None:
    return None if s is None or s.theta is None else {"seed": s.seed, "theta": s.theta}


class Featurise:
    """A Ray Data worker: receipts (an Arrow batch of Parquet rows) -> the kept decisions' feature rows.

    Validates each row exactly as `receipts.read` does (an invalid one is skipped when the
    distillation skips invalid receipts, else it is an error), drops what `dataset.load` drops and
    what the sample does not keep.
    """

    def __init__(self, policy_ir: bytes, spec: bytes, sampling: bytes, skip_invalid: bool,
                 none_fits: bool) -> None:
        from .. import ir
        from ..runtime import Policy

        self.policy = Policy(msgspec.msgpack.decode(policy_ir, type=ir.PolicyIR))
        self.fz = F.Featurizer(msgspec.msgpack.decode(spec, type=F.FeatureSpec))
        s = msgspec.msgpack.decode(sampling)
        self.sampling = None if s is None else D.Sampling("sample", 0, 0, 0, s["seed"], s["theta"])
        self.skip_invalid, self.none_fits = skip_invalid, none_fits

    def __call__(self, table: Any) -> dict[str, np.ndarray]:
        from ..receipts.io import receipt_of
        from ..receipts.parquet import batch_bodies

        ids, tasks, rows = [], [], []
        for body, texts in batch_bodies(table):
            r, problem = receipt_of(body, texts, self.policy)
            if problem is not None:
                if self.skip_invalid:
                    continue
                raise ZcError(f"receipt row: {problem}")
            if D._dropped(r, self.none_fits) is not None or (self.sampling is not None
                                                             and not self.sampling.keeps(r)):
                continue
            legal = self.policy.legal(r.state, r.intent)
            ids.append(r.id)
            tasks.append(r.task)
            rows.append(self.fz.row(legal.root, legal.actions))
        x = np.stack(rows) if rows else np.zeros((0, self.fz.dim), dtype=np.float32)
        return {"id": np.array(ids, dtype=object), "task": np.array(tasks, dtype=object), "x": x}
