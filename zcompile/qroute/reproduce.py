"""Reproducibility: whether a rebuilt specialist is another one, byte for byte but for the times it measured.

    python -m zcompile.qroute.reproduce build/specialists/airline_chat specialists/airline_chat

A distillation measures two things on the machine it runs on: how long each model trained
(`$.model.params.train_seconds`) and the decision latency on the test split (`$.metrics.latency_us`,
whose p50 is also the last entry of the gate's sort key, `$.gate.key`). Everything else it writes
follows from the receipts, the policy, the settings and the seed (whether the gate promotes, too:
a latency over the tier's budget is a difference). So two
specialists are the same when every file but the manifest and the report is equal byte for byte
and, once the rebuilt manifest carries the other's two measured values, its manifest (seal
included) and its report are equal byte for byte too.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import msgspec

from ..errors import ZcError
from .manifest import Manifest, decode, encode
from .report import render

MEASURED = ("$.model.params.train_seconds", "$.metrics.latency_us", "$.gate.key[-1]")
WRITTEN = ("manifest.json", "report.md")  # derived from the manifest: compared through it


def _manifest(d: Path) -> Manifest:
    path = d / "manifest.json"
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ZcError(f"{path}: cannot read: {exc.strerror}") from None
    return decode(data, str(path))


def with_times_of(m: Manifest, other: Manifest) -> Manifest:
    """`m` carrying `other`'s measured times (`MEASURED`) instead of its own."""
    params = dict(m.model.params)
    if "train_seconds" in other.model.params:
        params["train_seconds"] = other.model.params["train_seconds"]
    metrics = dict(m.metrics)
    if "latency_us" in other.metrics:
        metrics["latency_us"] = other.metrics["latency_us"]
    gate = m.gate
    if gate.key and len(gate.key) == len(other.gate.key):  # the last entry: -p50 latency in ms
        gate = msgspec.structs.replace(gate, key=(*gate.key[:-1], other.gate.key[-1]))
    return msgspec.structs.replace(m, model=msgspec.structs.replace(m.model, params=params), metrics=metrics,
                                   gate=gate)


def _paths(a: Any, b: Any, where: str = "$") -> list[str]:
    """The JSON paths at which two decoded JSON values differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [p for k in sorted(set(a) | set(b)) for p in _paths(a.get(k), b.get(k), f"{where}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [p for i, (x, y) in enumerate(zip(a, b)) for p in _paths(x, y, f"{where}[{i}]")]
    return [] if a == b else [where]


def differences(rebuilt: str | Path, shipped: str | Path) -> list[str]:
    """What differs between two specialist directories apart from the measured times (empty: the same)."""
    rebuilt, shipped = Path(rebuilt), Path(shipped)
    a, b = _manifest(rebuilt), _manifest(shipped)
    out = []
    names = {p.name for p in rebuilt.iterdir()}, {p.name for p in shipped.iterdir()}
    if names[0] != names[1]:
        out.append(f"files: {sorted(names[0])} against {sorted(names[1])}")
    for name in sorted((names[0] & names[1]) - set(WRITTEN)):
        if (rebuilt / name).read_bytes() != (shipped / name).read_bytes():
            out.append(f"{name}: the bytes differ")
    timed = with_times_of(a, b)
    if encode(timed) != (shipped / "manifest.json").read_bytes():
        plain = msgspec.to_builtins
        paths = [p for p in _paths(plain(timed), plain(b)) if p != "$.sha256"]
        out.append("manifest.json: " + (", ".join(paths[:12]) + (f" (+{len(paths) - 12} more)" if len(
            paths) > 12
                                                                  else "") if paths
                                        else "its layout differs"))
    if (shipped / "report.md").exists() and render(timed) != (shipped / "report.md").read_text():
        out.append("report.md: the text differs")
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m zcompile.qroute.reproduce REBUILT SHIPPED", file=sys.stderr)
        return 2
    try:
        found = differences(*args)
    except ZcError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    if found:
        print(f"{args[0]} is not {args[1]}:\n" + "\n".join(f"  {d}" for d in found), file=sys.stderr)
        return 1
    print(f"{args[0]} is {args[1]}: every file byte for byte, but for the measured times "
          f"({', '.join(MEASURED)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
