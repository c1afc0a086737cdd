"""MCP gateway latency: what `zc mcp` adds to a `tools/call` and a `tools/list`, beside calling the
same server directly in the same run; writes its section of BENCHMARKS.md.

    python bench/mcp_bench.py [--rounds N] [--write BENCHMARKS.md]

The server is the test suite's reservations server (tests/mcp_servers/reservations.py, the SDK's
low-level Server over stdio). The SDK's `Client` talks to it directly, and to `zc mcp` over stdio in
front of another copy of it (tests/fixtures/mcp/reservations.zc, receipts appended), under the
2026-07-28 revision; requests are interleaved over the two targets after warm-up.
"""

from __future__ import annotations

import argparse
import gc
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
import numpy as np
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from benchdoc import machine_table, publish  # noqa: E402

PACKAGES = [("mcp / anyio", ("mcp", "anyio")), ("msgspec", ("msgspec",))]
SERVER = ROOT / "tests" / "mcp_servers" / "reservations.py"
POLICY = ROOT / "tests" / "fixtures" / "mcp" / "reservations.zc"
WARMUP = 30


async def measure(rounds: int, receipts: Path) -> dict[str, list[float]]:
    direct = StdioServerParameters(command=sys.executable, args=[str(SERVER)])
    gateway = StdioServerParameters(command=sys.executable, cwd=str(ROOT), args=[
        "-m", "zcompile", "mcp", "--policy", str(POLICY), "--server", f"{sys.executable} {SERVER}",
        "--receipts", str(receipts)])
    times: dict[str, list[float]] = {}
    async with Client(direct, mode="2026-07-28") as d, Client(gateway, mode="2026-07-28") as g:
        targets = {"direct": d, "zc mcp": g}
        ops = {"tools/list": lambda c: c.list_tools(cache_mode="bypass"),
               "tools/call": lambda c: c.call_tool("get_reservation", {"reservation_id": "ABC123"})}
        for c in targets.values():  # warm-up, and a check that each answers
            for _ in range(WARMUP):
                assert (await c.list_tools(cache_mode="bypass")).tools
                assert not (await c.call_tool("get_reservation", {"reservation_id": "ABC123"})).is_error
        gc.disable()
        try:
            for _ in range(rounds):
                for op, fn in ops.items():
                    for name, c in targets.items():
                        t = time.perf_counter_ns()
                        await fn(c)
                        times.setdefault(f"{op} {name}", []).append((time.perf_counter_ns() - t) / 1000)
        finally:
            gc.enable()
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=500, help="timed requests per operation and target")
    ap.add_argument("--write", type=Path, help="replace the MCP gateway section of this markdown file")
    args = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    receipts = Path(tempfile.mkdtemp(prefix="mcp-bench-")) / "r.jsonl"
    times = anyio.run(measure, args.rounds, receipts)
    load1 = os.getloadavg()[0]
    from zcompile.receipts import read

    logged = list(read(receipts))[2 * WARMUP:]  # the timed requests' receipts
    inside = {op: statistics.median(r.latency_ms * 1000 for r in logged if r.meta["mcp"]["method"] == op)
              for op in ("tools/call", "tools/list")}
    written = len(logged) + 2 * WARMUP
    med = {k: statistics.median(v) for k, v in times.items()}
    p90 = {k: float(np.percentile(v, 90)) for k, v in times.items()}
    cmd = "python bench/mcp_bench.py" + (f" --rounds {args.rounds}" if args.rounds != 500 else "") + \
        (f" --write {shlex.quote(str(args.write))}" if args.write else "")
    rows = []
    for op in ("tools/call", "tools/list"):
        d, g = f"{op} direct", f"{op} zc mcp"
        rows.append(f"| `{op}` | {len(times[d]):,} | {med[d]:,.0f} | {med[g]:,.0f} | "
                    f"**{med[g] - med[d]:,.0f}** | {med[g] / med[d]:.2f}× | {p90[d]:,.0f} | {p90[g]:,.0f} | "
                    f"{inside[op]:,.0f} |")
    lines = [
        "## The MCP gateway: `zc mcp` (`bench/mcp_bench.py`)", "",
        f"Command: `{cmd}`, run on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", "",
        *machine_table(PACKAGES),
        f"| load average (1 min): start / end | {load0:.2f} / {load1:.2f} |", "",
        "Wall-clock time of one request from the SDK's `Client` (protocol 2026-07-28, stdio), interleaved: "
        "straight to the reservations server, and through `zc mcp` (policy "
        "`tests/fixtures/mcp/reservations.zc`, its own stdio connection to another copy of the server, one "
        f"receipt appended per request) after {WARMUP} warm-up requests of each kind; GC off in the client "
        "while timing. `tools/call` is `get_reservation` (legal, forwarded, the state advanced); "
        "`tools/list` bypasses the client's cache.", "",
        "| request | n | direct: median µs | through zc mcp: median µs | added: median µs | ratio | "
        "direct: p90 µs | zc mcp: p90 µs | inside zc mcp: median µs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows, "",
        "Through the gateway a call is judged (`Policy.check` on the derived state), forwarded over a second "
        "stdio hop, its result folded into the session's state, the legal set recomputed for "
        "`list_changed`, and a receipt appended; a list reads the state, the legal set and appends a receipt "
        "(the servers' tools are read once at start, not per list). *Inside zc mcp* is the receipts' "
        "`latency_ms`: from the gateway's handler starting to the receipt (a call's includes its own round "
        "trip to the server over stdio); the rest is the SDK's stdio transport and JSON-RPC on both sides.",
        "", *([f"The machine was busy (load average {max(load0, load1):.1f} on {os.cpu_count()} cores, "
               "shared with other work): every figure above is inflated by waiting for a core.", ""]
          if max(load0, load1) > (os.cpu_count() or 1) else []),
        f"Receipts written by the gateway: {written:,} (warm-up included).",
    ]
    publish("mcp_bench", "\n".join(lines), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
