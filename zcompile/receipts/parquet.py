"""Receipts in Parquet: the columnar schema, a streaming writer and a streaming row reader.

The schema is the receipt format's (`format.FORMAT_VERSION`), one column per field:

| column | Arrow type | holds |
|---|---|---|
| `version` | string | the receipt's format version (always written, as FORMAT_VERSION) |
| `id`, `task`, `tier`, `policy` | string, not null | as in JSON Lines |
| `ts`, `confidence` | float64, null = absent | |
| `intent`, `model`, `action`, `gold` | string, null = absent | |
| `legal` | list<string>, null = absent | |
| `latency_ms`, `cost` | float64, not null | |
| `verified` | bool, null = not judged | |
| `state`, `meta` | string, not null | the JSON object, as `encode` writes it |
| `arguments`, `candidates` | string, null = absent | the JSON value, as `encode` writes it |

The file's key-value metadata names the format: `zc.receipts` = FORMAT_VERSION. A reader takes the
columns it knows and ignores the rest (a newer minor version adds columns); a missing optional
column reads as absent (an older minor version); a newer major version is refused. Each row is
reassembled as the JSON object `encode` would write and decoded by the receipt decoder, so a row is
validated exactly like a JSON line, and JSON Lines -> Parquet -> JSON Lines gives back equal
receipts (and equal bytes for a file `write_file` wrote).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from ..outdir import new_file
from .format import FORMAT_VERSION, Receipt, ReceiptError, newer_major

__all__ = ["BATCH_ROWS", "MAGIC", "METADATA_KEY", "ROW_GROUP_ROWS", "columns", "is_parquet", "iter_rows",
           "write_parquet"]

MAGIC = b"PAR1"
METADATA_KEY = b"zc.receipts"
BATCH_ROWS = 1024  # rows decoded at a time when reading: memory stays bounded by this, not the file
ROW_GROUP_ROWS = 8_192  # rows per row group when writing: Arrow decodes a whole group at a time (~50 MB here)

_JSON = ("state", "meta", "arguments", "candidates")  # JSON text columns
_REQUIRED = ("id", "task", "state", "tier")
# stored values that decode to the field's default when left out (`omit_defaults`, as JSON Lines)
_OMITTED = {"policy": "", "latency_ms": 0.0, "cost": 0.0, "meta": "{}"}


def _is_default(c: str, v: Any) -> bool:
    return v == _OMITTED[c] and not (isinstance(v, float) and math.copysign(1.0, v) < 0)  # -0.0 is kept


def _arrow() -> tuple[Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ReceiptError("Parquet receipts need pyarrow: pip install 'zcompile[distill]'") from None
    return pa, pq


def schema() -> Any:
    """The Arrow schema of receipts of FORMAT_VERSION (see the module docstring)."""
    pa, _ = _arrow()
    s, f, b = pa.string(), pa.float64(), pa.bool_()
    fields = [("version", s, False), ("id", s, False), ("task", s, False), ("state", s, False),
              ("tier", s, False), ("ts", f, True), ("policy", s, False), ("intent", s, True),
              ("legal", pa.list_(s), True), ("model", s, True), ("action", s, True), ("arguments", s, True),
              ("candidates", s, True), ("confidence", f, True), ("latency_ms", f, False), ("cost", f, False),
              ("verified", b, True), ("gold", s, True), ("meta", s, False)]
    return pa.schema([pa.field(n, t, nullable=nullable) for n, t, nullable in fields],
                     metadata={METADATA_KEY: FORMAT_VERSION.encode()})


def columns() -> tuple[str, ...]:
    """The column names of FORMAT_VERSION, in order (the Receipt's fields)."""
    return ("version",) + tuple(f for f in Receipt.__struct_fields__ if f != "version")


_KNOWN = frozenset(columns())


def is_parquet(head: bytes) -> bool:
    return head[:4] == MAGIC


_ENC = msgspec.json.Encoder()


def _columns_of(receipts: list[Receipt]) -> dict[str, list]:
    cols: dict[str, list] = {c: [] for c in columns()}
    for r in receipts:
        for c in columns():
            v = FORMAT_VERSION if c == "version" else getattr(r, c)
            if c in _JSON and v is not None:
                v = _ENC.encode(v).decode()
            cols[c].append(v)
    return cols


def write_parquet(path: str | os.PathLike, receipts: Iterable[Receipt], *,
                  row_group_rows: int = ROW_GROUP_ROWS) -> int:
    """Write receipts to a new Parquet file atomically (temp file + rename), streaming row groups.

    Nothing is left at `path` if iterating `receipts` raises. Returns the number written.
    """
    pa, pq = _arrow()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sch = schema()
    n = 0
    with new_file(path) as tmp, pq.ParquetWriter(tmp, sch, compression="zstd") as writer:
        batch: list[Receipt] = []
        for r in receipts:
            batch.append(r)
            if len(batch) == row_group_rows:
                writer.write_table(pa.Table.from_pydict(_columns_of(batch), schema=sch))
                n += len(batch)
                batch = []
        if batch or not n:
            writer.write_table(pa.Table.from_pydict(_columns_of(batch), schema=sch))
            n += len(batch)
    return n


def _open(path: Path) -> Any:
    _, pq = _arrow()
    try:
        pf = pq.ParquetFile(path)
    except OSError as exc:
        raise ReceiptError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except Exception as exc:  # noqa: BLE001 - pyarrow raises ArrowInvalid and friends on a bad file
        raise ReceiptError(f"{path}: $: not a readable Parquet file ({exc})") from None
    meta = pf.schema_arrow.metadata or {}
    version = meta.get(METADATA_KEY)
    if version is None:
        raise ReceiptError(f"{path}: $: a Parquet file without `zc.receipts` metadata is not a receipts file "
                           "(write one with `zc receipts convert FILE.jsonl -o FILE.parquet`)")
    if (problem := newer_major(version.decode(errors="replace"))) is not None:
        raise ReceiptError(f"{path}: {problem}")
    present = set(pf.schema_arrow.names)
    if missing := [c for c in _REQUIRED if c not in present]:
        raise ReceiptError(f"{path}: $.{missing[0]}: required column is missing")
    return pf


def iter_rows(path: Path, batch_rows: int = BATCH_ROWS) -> Iterator[tuple[int, bytes, dict[str, bytes]]]:
    """(row number from 1, the row as the receipt's JSON object, its stored JSON texts) per row,
    streamed `batch_rows` rows at a time.

    The JSON text columns are spliced in as stored; when the row does not decode as JSON,
    `bad_json(texts)` names the column whose text is not JSON.

    Raises:
        ReceiptError: the file is not a readable receipts Parquet file, or its data is corrupt.
    """
    pf = _open(path)
    known = [c for c in columns() if c in set(pf.schema_arrow.names)]
    n = 0
    try:
        for batch in pf.iter_batches(batch_size=batch_rows, columns=known):
            for body, texts in batch_bodies(batch):
                n += 1
                yield n, body, texts
    except Exception as exc:  # noqa: BLE001 - corrupt pages surface as Arrow errors mid-file
        raise ReceiptError(f"{path}:row {n + 1}: $: corrupt Parquet data ({exc})") from None


def rows_at(path: Path, rows: Iterable[int]) -> Iterator[tuple[int, bytes, dict[str, bytes]]]:
    """`iter_rows` for the given row numbers only (from 1, ascending): only their row groups are read."""
    pf = _open(path)
    known = [c for c in columns() if c in set(pf.schema_arrow.names)]
    wanted = sorted(rows)
    start, k = 0, 0
    for g in range(pf.metadata.num_row_groups):
        size = pf.metadata.row_group(g).num_rows
        local = []
        while k < len(wanted) and wanted[k] <= start + size:
            local.append(wanted[k] - 1 - start)
            k += 1
        if local:
            table = pf.read_row_group(g, columns=known).take(local)
            for i, (body, texts) in zip(local, batch_bodies(table)):
                yield start + i + 1, body, texts
        start += size


def batch_bodies(batch: Any) -> Iterator[tuple[bytes, dict[str, bytes]]]:
    """(the row as the receipt's JSON object, its stored JSON texts) per row of an Arrow batch or table."""
    cols = [(c, c in _JSON, batch.column(c).to_pylist()) for c in batch.schema.names if c in _KNOWN]
    for i in range(batch.num_rows):
        doc, texts = {}, {}
        for c, is_json, values in cols:
            v = values[i]
            if v is None or (c in _OMITTED and _is_default(c, v)):
                continue  # absent, or the field's default: omitted as `encode` omits it
            if is_json and isinstance(v, str):
                v = texts[c] = v.encode()
                v = msgspec.Raw(v)
            doc[c] = v
        yield _ENC.encode(doc), texts


def bad_json(texts: dict[str, bytes]) -> str | None:
    """`$.column: invalid JSON: …` for the first stored JSON text that does not decode, else None."""
    from ..errors import json_problem

    for c, text in texts.items():
        try:
            msgspec.json.decode(text)
        except (msgspec.DecodeError, RecursionError) as exc:
            return f"$.{c}: {json_problem(exc).problem}"
    return None
