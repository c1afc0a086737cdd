"""Reproducibility: whether a rebuilt specialist is another one, on this machine or on any other.

    python -m zcompile.qroute.reproduce REBUILT SHIPPED [--exact] [--receipts DIR --policy P.zcp]

A distillation measures two things on the machine it runs on: how long each model trained
(`$.model.params.train_seconds`) and the decision latency on the test split (`$.metrics.latency_us`,
whose p50 is also the last entry of the gate's sort key, `$.gate.key`). Everything else it writes
follows from the receipts, the policy, the settings and the seed, up to the last bits of the floats
that numpy's and BLAS's sums leave: those differ between CPUs (OpenBLAS picks its kernels by CPU, and
another kernel adds in another order). So two specialists are the same when

- every file but the manifest and the report is equal byte for byte (the ONNX model: its training is
  deterministic and its float32 weights come out the same on every machine tried);
- their manifests, once the rebuilt one carries the other's measured times, are equal: every string,
  integer and boolean exactly, every float within `REL_TOL` relative (`ABS_TOL` near zero), or, with
  `exact`, byte for byte, seal included (two runs on one machine);
- each report is the rendering of its own manifest;
- and, given the receipts and the policy, both decide every decision of the test split the same way
  (rung, action, arguments, kind, handed on or not): `same_decisions`.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import msgspec

from ..errors import ZcError
from .manifest import Manifest, decode, encode
from .novelty import stored_arrays, unpacked
from .report import render

if TYPE_CHECKING:
    from ..runtime import Policy

MEASURED = ("$.model.params.train_seconds", "$.metrics.latency_us", "$.gate.key[-1]")
WRITTEN = ("manifest.json", "report.md")  # derived from the manifest: compared through it
# Floats of two distillations of the same receipts agree to this much on every machine: the calibration
# fits run to their optimum (`calibrate.XATOL`, `GTOL`), and what is left is the rounding of float64
# sums (about 1e-15 relative) and of the float32 probabilities the ONNX model returns (about 6e-8).
REL_TOL = 1e-6
ABS_TOL = 1e-9


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


def _equal(a: Any, b: Any, exact: bool) -> bool:
    if not exact and isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    return type(a) is type(b) and a == b


def _paths(a: Any, b: Any, exact: bool = True, where: str = "$") -> list[str]:
    """The JSON paths at which two decoded JSON values differ (floats within `REL_TOL` unless `exact`)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [p for k in sorted(set(a) | set(b)) for p in _paths(a.get(k), b.get(k), exact, f"{where}.{k}")]
    if isinstance(a, list | tuple) and isinstance(b, list | tuple) and len(a) == len(b):
        return [p for i, (x, y) in enumerate(zip(a, b)) for p in _paths(x, y, exact, f"{where}[{i}]")]
    return [] if _equal(a, b, exact) else [where]


def _readable(m: Manifest) -> Any:
    """The manifest as JSON values, its novelty arrays (base64 float32) read as numbers, so that they
    too compare within the tolerance."""
    raw = msgspec.to_builtins(m)
    if m.novelty is not None:
        for key, (text, shape) in stored_arrays(m.novelty).items():
            values = unpacked(text, shape)
            if values is not None:
                raw["novelty"][key] = values.ravel().tolist()
    return raw


def _listed(paths: list[str], most: int = 12) -> str:
    return ", ".join(paths[:most]) + (f" (+{len(paths) - most} more)" if len(paths) > most else "")


def differences(rebuilt: str | Path, shipped: str | Path, *, exact: bool = False) -> list[str]:
    """What differs between two specialist directories apart from the measured times (empty: the same).

    Args:
        rebuilt: the specialist distilled again.
        shipped: the one to compare it with.
        exact: manifests byte for byte (two runs on one machine); otherwise floats within `REL_TOL`.
    """
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
        paths = [p for p in _paths(_readable(timed), _readable(b), exact) if p != "$.sha256"]
        if paths:
            out.append("manifest.json: " + _listed(paths))
        elif exact:
            out.append("manifest.json: its layout differs")
    for d, m in ((rebuilt, a), (shipped, b)):
        if (d / "report.md").exists() and render(m) != (d / "report.md").read_text():
            out.append(f"{d / 'report.md'}: not the rendering of its manifest")
    if exact and (shipped / "report.md").exists() and render(timed) != (shipped / "report.md").read_text():
        out.append("report.md: the text differs")
    return out


def decisions(specialist: str | Path, receipts: Sequence[str | Path],
              policy: Policy | None) -> list[dict[str, Any]]:
    """What the router decides with `specialist` on each decision of its sealed test split: one row per
    decision (id, rung, action, arguments, kind, handed on to a text tier), in receipt order."""
    from ..evals.report import report
    from .loading import load

    rep = report(receipts, policy, load(specialist, policy), decisions=True)
    keys = ("id", "rung", "action", "arguments", "kind", "handed_on")
    return [{k: getattr(row, k) for k in keys} for row in rep["decisions"]]


def same_decisions(rebuilt: str | Path, shipped: str | Path, receipts: Sequence[str | Path],
                   policy: Policy | None) -> list[str]:
    """The test-split decisions on which two specialists differ (empty: every one the same), as text."""
    a, b = decisions(rebuilt, receipts, policy), decisions(shipped, receipts, policy)
    if [r["id"] for r in a] != [r["id"] for r in b]:
        return [f"test split: {len(a)} decisions against {len(b)} (another split)"]
    return [f"decision {x['id']}: {_brief(x)} against {_brief(y)}" for x, y in zip(a, b) if x != y]


def _brief(row: dict[str, Any]) -> str:
    handed = " (handed on)" if row["handed_on"] else ""
    arguments = msgspec.json.encode(row["arguments"]).decode()
    return f"{row['rung']} {row['kind']} {row['action']}{handed} {arguments}"


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("rebuilt", type=click.Path(file_okay=False, path_type=Path))
@click.argument("shipped", type=click.Path(file_okay=False, path_type=Path))
@click.option("--exact", is_flag=True, help="manifests byte for byte: two runs on one machine")
@click.option("--receipts", "receipts", multiple=True, type=click.Path(exists=True, path_type=Path),
              help="also decide the test split of these receipts with both and compare (needs --policy)")
@click.option("--policy", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="the compiled policy (.zcp) the specialists were distilled for")
def cli(rebuilt: Path, shipped: Path, exact: bool, receipts: tuple[Path, ...], policy: Path | None) -> None:
    """Whether REBUILT is SHIPPED: every file byte for byte but for the manifest and the report, the
    manifests equal but for the measured times (floats within a relative 1e-6 unless --exact), and with
    --receipts the same decision on every receipt of the test split."""
    if bool(receipts) != (policy is not None):
        raise click.UsageError("--receipts and --policy go together")
    try:
        found = differences(rebuilt, shipped, exact=exact)
        if policy is not None and not found:
            from ..runtime import load

            found = same_decisions(rebuilt, shipped, [str(p) for p in receipts], load(policy))
    except ZcError as exc:
        click.echo(exc.render(), err=True)
        sys.exit(1)
    if found:
        click.echo(f"{rebuilt} is not {shipped}:\n" + "\n".join(f"  {d}" for d in found), err=True)
        sys.exit(1)
    how = "byte for byte" if exact else f"floats within {REL_TOL:g} relative"
    said = f"{rebuilt} is {shipped}: every file but the manifest byte for byte, the manifest {how}"
    if receipts:
        said += ", the same decision on every receipt of the test split"
    click.echo(f"{said} (measured times apart: {', '.join(MEASURED)})")


def main(argv: list[str] | None = None) -> int:
    """Run the command; its exit code (0 the same, 1 not or an error, 2 a usage error)."""
    try:
        cli.main(args=argv, prog_name="python -m zcompile.qroute.reproduce", standalone_mode=False)
    except click.UsageError as exc:
        exc.show()
        return 2
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
