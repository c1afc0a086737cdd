"""A small agent loop that asks `zcompile.Router` before every step, and shows the receipts it leaves.

    python examples/harness.py                       # the scripted planner stands in for a model
    python examples/harness.py --url http://127.0.0.1:8080/v1 --model hammer2.1-3b   # a real server

The agent works on `policies/agent_core.zc`: it lists a directory, reads a file, hits a timeout,
retries, and finishes. Every decision goes through the ladder the policy's routes choose: the
compiler answers when one action is legal; otherwise the tiers of the chosen route (here one
local OpenAI-compatible server when --url is given, else a scripted planner with the same
interface, bound to both `small` and `large`) propose one of the legal actions, or the policy's
fallback answers. Receipts go to --receipts (JSON Lines).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import zcompile  # noqa: E402
from zcompile.receipts import read  # noqa: E402


@dataclass(frozen=True)
class Proposal:
    outcome: str
    action: str | None = None
    confidence: float | None = None
    detail: str = ""
    model: str = "scripted-planner"


class ScriptedPlanner:
    """Stands in for a model: proposes the first legal action of a fixed preference list."""

    model = "scripted-planner"
    PREFERENCE = ("retry", "fs.read", "fs.list", "continue", "stop", "ask_user")

    def propose(self, state, legal, *, timeout_s, intent=None, descriptions=None):
        choice = next((a for a in self.PREFERENCE if a in legal), None)
        return Proposal("answered", choice) if choice else Proposal("abstained", detail="nothing it likes")


def tool(action: str, step: int) -> str:
    """The world: what executing an action returns (a timeout on the first read)."""
    if action == "fs.read" and step == 1:
        return "timeout"
    return "ok"


def run(tier, receipts: Path, steps: int = 8) -> list[zcompile.router.Decision]:
    policy = zcompile.compile_file(ROOT / "policies" / "agent_core.zc")
    state = {"user": {"role": "developer"}, "budget": {"units": 40}, "target": {"kind": "dir"},
             "confidence": 0.9, "history": []}
    decisions = []
    # one endpoint serves both local rungs here; a real harness binds a bigger model to `large`
    with zcompile.Router(policy, tiers={"small": tier, "large": tier}, receipts=receipts,
                         deadline_ms=2000) as router:
        for step in range(steps):
            d = router.decide(state, intent="inspect", task="demo-task", meta={"step": step})
            decisions.append(d)
            print(f"step {step}: {d.action or '(none)':<10} by {d.tier:<9} legal={list(d.legal.actions)}")
            if d.action in ("stop", "escalate", "abstain") or d.action is None:
                break
            outcome = tool(d.action, step)
            history = state["history"] + ([d.action] if d.action not in state["history"] else [])
            state = {**state, "history": history, "last": {"outcome": outcome},
                     "retries": state.get("retries", 0) + (d.action == "retry"),
                     "target": {"kind": "file"} if d.action == "fs.list" else state["target"],
                     "task": {"phase": "done"} if d.action == "fs.read" and outcome == "ok" else
                     state.get("task", {"phase": "act"})}
    return decisions


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", help="OpenAI-compatible base URL for the `small` tier")
    ap.add_argument("--model", default="local-model")
    ap.add_argument("--receipts", type=Path, default=Path(tempfile.gettempdir()) / "zc-harness.jsonl")
    args = ap.parse_args(argv)
    tier = zcompile.OpenAITier(args.url, args.model, timeout_ms=2000) if args.url else ScriptedPlanner()
    args.receipts.unlink(missing_ok=True)
    run(tier, args.receipts)
    print(f"\nreceipts in {args.receipts}:")
    for r in read([args.receipts]):
        rungs = ", ".join(f"{x['tier']}:{x['outcome']}" for x in r.meta["rungs"])
        print(json.dumps({"action": r.action, "tier": r.tier, "latency_ms": r.latency_ms, "rungs": rungs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
