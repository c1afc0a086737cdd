#!/usr/bin/env python3
"""Benchmark: chat import time against conversation length (the extractor must be linear).

For conversations of 1,000 to 40,000 messages (user message, tool call, tool result, reply,
repeated), times `import_chat` with the default extractor (incremental: `ChatSummary`) and, up to
`--scratch-max` messages, the same import through a custom extractor that calls `default_extract`
from scratch for every decision (the O(n²) path the importer used before). Prints seconds and
microseconds per message; linear growth keeps µs/message flat.

Usage:
    python bench/receipts_bench.py [--scratch-max 5000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without an editable install
    sys.path.insert(0, str(ROOT))

from zcompile.receipts import default_extract, import_chat  # noqa: E402


def conversation(n: int) -> dict:
    msgs: list[dict] = [{"role": "system", "content": "policy"}]
    i = 0
    while len(msgs) < n:
        rid = f"ABC{i % 1000:03d}"
        msgs += [{"role": "user", "content": f"my reservation is {rid}"},
                 {"role": "assistant", "content": None, "tool_calls": [{"function": {
                     "name": "get_reservation_details", "arguments": json.dumps({"reservation_id": rid})}}]},
                 {"role": "tool", "content": json.dumps({"reservation_id": rid, "flights": [1, 2]})},
                 {"role": "assistant", "content": "found it"}]
        i += 1
    return {"id": "c", "task": "t", "messages": msgs[:n]}


def scratch(messages: list[dict], index: int, conv: dict) -> dict:
    return default_extract(messages, index, conv)


def timed(path: Path, extract) -> float:
    t0 = time.perf_counter()
    n = sum(1 for _ in import_chat(path, extract=extract))
    assert n > 0
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scratch-max", type=int, default=5_000,
                    help="largest conversation also imported through the from-scratch extractor")
    args = ap.parse_args(argv)
    print("| messages | incremental s | µs/message | from scratch s | µs/message |")
    print("|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (1_000, 5_000, 10_000, 20_000, 40_000):
            path = Path(tmp) / f"c{n}.jsonl"
            path.write_text(json.dumps(conversation(n)) + "\n")
            inc = timed(path, default_extract)
            row = f"| {n:,} | {inc:.3f} | {inc / n * 1e6:.1f} |"
            if n <= args.scratch_max:
                s = timed(path, scratch)
                row += f" {s:.3f} | {s / n * 1e6:.1f} |"
            else:
                row += " – | – |"
            print(row, flush=True)
    print(f"\ncommand: python bench/receipts_bench.py --scratch-max {args.scratch_max}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
