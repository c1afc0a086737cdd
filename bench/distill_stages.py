"""Where the time of a distillation goes: `zc distill` on the bundled receipts, wall and CPU seconds at each
stage.

    python bench/distill_stages.py [-o build/stages/airline_chat]     # after `zc compile policies/ -o build/`

Runs what `make distill` runs (`--model auto --guarantee conformal` over `receipts/`), in this
process, printing before every stage line the wall-clock seconds and the CPU seconds of this
process (all its threads) since the start; then the load average. CPU seconds say where the work
is even on a shared machine, where wall-clock seconds mostly say how shared it was.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", default=str(ROOT / "build" / "stages" / "airline_chat"))
    args = ap.parse_args()
    wall, cpu = time.perf_counter(), time.process_time()

    def step(text: str) -> None:
        print(f"{time.perf_counter() - wall:7.1f} s wall {time.process_time() - cpu:7.1f} s CPU  {text}",
              flush=True)

    import zcompile
    from zcompile.qroute import Progress, Settings, distill

    os.chdir(ROOT)  # the manifest records the receipts' path as given, as `make distill` gives it
    policy = zcompile.load("build/airline_chat.zcp")
    res = distill(["receipts/"], policy, args.out, Settings(guarantee="conformal"),
                  report=Progress(step=step), name="airline_chat")
    step(f"done: kept {res.manifest.model.kind}; load average "
         f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
