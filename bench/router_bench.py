"""Router latency: p50/p99 of `Router.decide` for compiler-only, compiler + tabular specialist, and a
local HTTP tier, interleaved in one process after warm-up; writes its section of BENCHMARKS.md.

    python bench/router_bench.py [--rounds N] [--specialist DIR] [--write BENCHMARKS.md]

`--specialist` is a tabular specialist distilled for `policies/airline_chat.zc` (default
`specialists/airline_chat`, made by `make demo`).

The HTTP tier is the test suite's local OpenAI-compatible stub (tests/openai_stub.py): no model
runs, so the figure is the protocol and transport cost a real local server adds on top of its
own inference time.
"""

from __future__ import annotations

import argparse
import gc
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from benchdoc import cpu_times, machine_table, publish, steal_share  # noqa: E402
from openai_stub import OpenAIStub  # noqa: E402

import zcompile  # noqa: E402
from zcompile.qroute import Specialist, features, load_decisions, recipe, split_by_task  # noqa: E402
from zcompile.qroute.features import _TEXT, count_text  # noqa: E402
from zcompile.receipts import ReceiptWriter  # noqa: E402
from zcompile.receipts.candidates import as_candidates  # noqa: E402
from zcompile.receipts.io import encode as encode_receipt  # noqa: E402
from zcompile.router import Router  # noqa: E402
from zcompile.router.router import json_copy  # noqa: E402

C_PATH = features.C_EXTENSION  # the C extension zcompile.qroute._features_c is built

PACKAGES = [("onnxruntime / numpy / scikit-learn", ("onnxruntime", "numpy", "scikit-learn")),
            ("httpx", ("httpx",))]


def interleaved(parts: dict, n_states: int, rounds: int) -> dict[str, tuple[int, float, float]]:
    """(n, p50 µs, p99 µs) of each part, timed in turn on every round after a warm-up pass, GC off.
    Each part gets its own state in a round (offset by 37 × its position), so none reads a state
    another part has just brought into the caches (the tree walk of the ONNX call is faster on a
    row it has just seen)."""
    for f in parts.values():
        for i in range(min(n_states, 50)):
            f(i)
    times: dict[str, list[float]] = {k: [] for k in parts}
    clock = time.perf_counter_ns
    gc.disable()
    try:
        for r in range(rounds):
            for pos, (name, f) in enumerate(parts.items()):
                i = (r + 37 * pos) % n_states
                t0 = clock()
                f(i)
                times[name].append((clock() - t0) / 1000)
    finally:
        gc.enable()
    return {k: (len(ts), float(np.percentile(ts, 50)), float(np.percentile(ts, 99))) for k,
            ts in times.items()}


def time_configs(configs: dict, rounds: int) -> list[tuple]:
    """(name, n, p50 µs, p99 µs) of `Router.decide` for each configuration: the in-process ones
    interleaved, then the HTTP tier's alone (its stub server is a thread of this process, still
    finishing each request, under the GIL, while the next decision would run); GC off."""
    times: dict[str, list[float]] = {k: [] for k in configs}
    local = [name for name in configs if "HTTP" not in name]
    gc.disable()
    try:
        for group in (local, [name for name in configs if name not in local]):
            for i in range(rounds):
                for name in group:
                    router, asks = configs[name]
                    kw = asks[i % len(asks)]
                    t = time.perf_counter_ns()
                    router.decide(**kw)
                    times[name].append((time.perf_counter_ns() - t) / 1000)
    finally:
        gc.enable()
    return [(k, len(ts), float(np.percentile(ts, 50)), float(np.percentile(ts, 99))) for k,
            ts in times.items()]


def median_rows(runs: list[list[tuple]]) -> list[tuple]:
    """One table from several runs of it: each row's p50 and p99 the median of the runs'."""
    return [(rows[0][0], rows[0][1], float(np.median([r[2] for r in rows])),
             float(np.median([r[3] for r in rows])))
            for rows in zip(*runs)]


def specialist_parts(policy, spec_dir: Path, decisions, rounds: int) -> list[tuple]:
    """Specialist.decide and each of its parts, and scikit-learn predict_proba, interleaved. The
    scikit-learn model is the specialist's recipe refit as `zc distill` refits it: on the train and
    calibration splits, over the specialist's own (scaled) features."""
    import warnings

    sp = Specialist(spec_dir, policy)
    parts = split_by_task(decisions)
    pool = [d for d in parts["train"] + parts["calibration"] if d.label in d.legal and d.label in sp.actions]
    fz = sp.featurizer
    X = np.stack([fz.one(d.state, d.legal) for d in pool])
    model = recipe(sp.manifest.model.kind, sp.manifest.seed, sp.manifest.features, policy, {}).model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = model.fit(X, [d.label for d in pool])
    sample = decisions[:300]
    legals = [policy.legal(d.state) for d in sample]  # the router's LegalSets (validated states)
    rows = [fz.row(ls.root, ls.actions)[None, :] for ls in legals]
    outputs = [sp.probabilities(x)[0].tolist() for x in rows]
    dim = fz.spec.text_dim
    texts = [[(v, j, cache) for (kind, j, cache, *_), v in zip(fz._plan, fz.values(ls.root)) if kind == _TEXT
              and v]
             for ls in legals]

    def hash_texts(i: int) -> None:
        x = np.zeros(fz.dim, np.float32)
        for v, j, cache in texts[i]:
            count_text(x, v, j, dim, cache)
        np.log1p(x, out=x)

    t = interleaved({
        "dec_ls": lambda i: sp.decide(sample[i].state, legals[i]),
        "dec": lambda i: sp.decide(sample[i].state, sample[i].legal),
        "validate": lambda i: fz.schema.convert(sample[i].state),
        "features": lambda i: fz.row(legals[i].root, legals[i].actions),
        "texts": hash_texts,
        "onnx": lambda i: sp.probabilities(rows[i]),
        "choose": lambda i: sp.choose(outputs[i], legals[i].actions),
    }, len(sample), rounds)
    # apart: scikit-learn's calls take milliseconds and leave its worker threads spinning, which
    # would slow whatever ran next on the two cores
    t |= interleaved({"skl": lambda i: clf.predict_proba(rows[i])}, len(sample), min(rounds, 500))
    n_texts = sum(map(len, texts)) / len(texts)
    return [(f"zc specialist `{sp.name}` ({sp.manifest.model.kind}), whole decision from a LegalSet "
             "(as the router asks: its validated state is reused)", *t["dec_ls"]),
            ("the same from a plain state and the legal names (validated here)", *t["dec"]),
            ("  of which: state validation (msgspec; not done when given a LegalSet)", *t["validate"]),
            ("  of which: feature row from the validated state (all fields, one pass)", *t["features"]),
            (f"    of which: the text fields' tokens hashed and counted, log1p ({n_texts:.1f} non-empty "
             f"texts a state; {'C extension' if C_PATH else 'Python path: the C extension is not built'})",
             *t["texts"]),
            ("  of which: its ONNX model call alone (onnxruntime, 1 thread)", *t["onnx"]),
            ("  of which: legal classes, softmax over them, τ, the call logic (`Specialist.choose`)",
             *t["choose"]),
            ("scikit-learn `predict_proba`, one row (same model kind, features, split)", *t["skl"])]


def router_parts(policy, spec_dir: Path, decisions, rounds: int, tmp: Path) -> list[tuple]:
    """`Router.decide` with the specialist and its parts, interleaved (the rest of a decision, walking
    the ladder and building the receipt and the Decision, is the whole less these)."""
    router = Router(policy, specialists=spec_dir, receipts=tmp / "parts.jsonl")
    sp = router.specialists[0]
    states = [d.state for d in decisions[:300]]
    legals = [policy.legal(s) for s in states]
    receipts = [router.decide(s).receipt for s in states]
    writer = ReceiptWriter(tmp / "parts-writer.jsonl")
    t = interleaved({
        "decide": lambda i: router.decide(states[i]),
        "copy": lambda i: json_copy(states[i], "$"),
        "legal": lambda i: policy.legal(states[i]),
        "specialist": lambda i: sp.decide(states[i], legals[i]),
        "encode": lambda i: encode_receipt(receipts[i]),
        "append": lambda i: writer.append(receipts[i]),
    }, len(states), rounds)
    # the same specialist decisions alternating with receipt appends only, then with nothing else
    after = interleaved({"specialist": lambda i: sp.decide(states[i], legals[i]),
                         "append": lambda i: writer.append(receipts[i])}, len(states), rounds)
    alone = interleaved({"specialist": lambda i: sp.decide(states[i], legals[i])}, len(states), rounds)
    # the argument model alone, on the teacher's calls that take arguments (with their candidates)
    calls = sp.manifest.calls
    asks = [(d.label, calls.params[d.label], as_candidates(d.candidates)) for d in decisions[:300]
            if d.candidates and (calls.params.get(d.label) or {}).get("properties")]
    scorer = sp._arguments
    proposing = interleaved({"propose": lambda i: scorer.propose(*asks[i])}, len(asks), min(rounds, 500))
    router.close()
    writer.close()
    return [("`Router.decide`, compiler + tabular specialist (airline_chat)", *t["decide"]),
            ("  of which: the state copied for its receipt (JSON encode + decode)", *t["copy"]),
            ("  of which: the legal set (`Policy.legal`, validation included)", *t["legal"]),
            ("  of which: the specialist (`Specialist.decide` from that LegalSet)", *t["specialist"]),
            ("  of which: appending the receipt (`ReceiptWriter.append`: flock, torn-line check, write)",
             *t["append"]),
            ("    of which: encoding the receipt (JSON)", *t["encode"]),
            ("the specialist alternating with receipt appends only", *after["specialist"]),
            ("the specialist alone, one state after another", *alone["specialist"]),
            (f"the argument model proposing a call's arguments (`ArgumentScorer.propose`; the {len(asks)} "
             "teacher calls with arguments among these decisions, their candidates)", *proposing["propose"])]


def same_decisions(policy, spec_dir: Path, decisions) -> int:
    """Assert that the specialist decides every bundled state the same with and without the C
    extension (rows bit-identical too); returns the number of states checked."""
    sp = Specialist(spec_dir, policy)
    legals = [policy.legal(d.state) for d in decisions]
    fast = [(sp.featurizer.row(ls.root, ls.actions).tobytes(), sp.decide(d.state, ls)) for d,
            ls in zip(decisions, legals)]
    saved = features._count_c, features._put_c
    features._count_c = features._put_c = None
    try:
        slow = [(sp.featurizer.row(ls.root, ls.actions).tobytes(), sp.decide(d.state, ls))
                for d, ls in zip(decisions, legals)]
    finally:
        features._count_c, features._put_c = saved
    assert fast == slow, "the C extension and the Python path disagree"
    return len(fast)


def resident_memory(spec_dir: Path) -> dict[str, float]:
    """VmRSS (MB) of a fresh interpreter after `import zcompile`, then with a router loaded."""
    import subprocess

    code = f"""
import sys, tempfile
sys.path.insert(0, {str(ROOT)!r})
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
import zcompile
base = rss()
policy = zcompile.compile_file({str(ROOT / "policies" / "airline_chat.zc")!r})
router = zcompile.Router(policy, specialists={str(spec_dir)!r}, receipts=tempfile.mktemp())
print(base, rss())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    base, loaded = map(float, out.stdout.split())
    return {"baseline": base, "loaded": loaded}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2000, help="timed decisions per configuration")
    ap.add_argument("--repeats", type=int, default=3,
                    help="whole measurements in a row; every figure is the median of theirs")
    ap.add_argument("--specialist", type=Path, default=ROOT / "specialists" / "airline_chat",
                    help="a tabular specialist distilled for policies/airline_chat.zc")
    ap.add_argument("--write", type=Path, help="replace the router section of this markdown file")
    args = ap.parse_args(argv)
    load0, steal0 = os.getloadavg()[0], cpu_times()

    core = zcompile.compile_file(ROOT / "policies" / "agent_core.zc")
    chat = zcompile.compile_file(ROOT / "policies" / "airline_chat.zc")
    spec_dir = args.specialist
    if not (spec_dir / "manifest.json").exists():
        print(f"{spec_dir} is missing: run `make demo` first", file=sys.stderr)
        return 1
    decisions = load_decisions([ROOT / "receipts"], chat).decisions
    chat_states = [{"state": d.state} for d in decisions[:300]]
    with_candidates = [{"state": d.state, "candidates": d.candidates} for d in decisions[:300]]
    n_cands = float(np.mean([len(d.candidates or ()) for d in decisions[:300]]))
    core_state = {"state": {"user": {"role": "developer"}, "budget": {"units": 40},
                            "target": {"kind": "file"}, "confidence": 0.9, "history": ["fs.read"]}}
    tmp = Path(tempfile.mkdtemp(prefix="router-bench-"))
    with OpenAIStub("correct") as stub:
        http = zcompile.OpenAITier(stub.base_url, "stub", timeout_ms=2000)
        configs = {
            "compiler only (agent_core, no rung bound: compiler or fallback)":
                (Router(core, receipts=tmp / "a.jsonl"), [core_state]),
            "compiler + tabular specialist (airline_chat, GPT-4o receipt states)":
                (Router(chat, specialists=spec_dir, receipts=tmp / "b.jsonl"), chat_states),
            f"the same with each decision's argument candidates ({n_cands:.0f} a decision, kept in its "
            "receipt)":
                (Router(chat, specialists=spec_dir, receipts=tmp / "d.jsonl"), with_candidates),
            "compiler + local HTTP tier (agent_core, stub server, tools mode)":
                (Router(core, tiers={"small": http, "large": http}, receipts=tmp / "c.jsonl"),
                 [core_state]),
        }
        for router, asks in configs.values():  # warm-up
            for kw in asks[:50]:
                router.decide(**kw)
        checked = same_decisions(chat, spec_dir, decisions)
        runs = []  # each run: (configuration rows, specialist rows, router part rows)
        for _ in range(args.repeats):
            runs.append((time_configs(configs, args.rounds),
                         specialist_parts(chat, spec_dir, decisions, args.rounds),
                         router_parts(chat, spec_dir, decisions, args.rounds, tmp)))
        for router, _ in configs.values():
            router.close()
        http.close()
        connections = stub.connections
    rss = resident_memory(spec_dir)
    m = Specialist(spec_dir, chat).manifest
    sp_calls_never = m.threshold.tau > 1 and (  # no confidence reaches a τ above 1
        m.calls is None or m.calls.risky_threshold is None or m.calls.risky_threshold.tau > 1)
    config_rows, spec_rows, parts = (median_rows([run[k] for run in runs]) for k in range(3))
    config_p50s = [run[0][1][2] for run in runs]  # compiler + specialist, each run
    one_p50s = [run[1][0][2] for run in runs]  # the specialist alone, each run

    base = config_rows[0][2]
    rows = [(name, n, p50, p99, p50 / base) for name, n, p50, p99 in config_rows]
    spec_p50, one_p50 = rows[1][2], spec_rows[0][2]
    each = lambda p50s: ", ".join(f"{p:,.0f}" for p in p50s)  # noqa: E731
    load1 = os.getloadavg()[0]
    verdict = lambda p50, target: "met" if p50 <= target else "missed"  # noqa: E731
    cmd = "python bench/router_bench.py" + (f" --rounds {args.rounds}" if args.rounds != 2000 else "") + \
        (f" --repeats {args.repeats}" if args.repeats != 3 else "") + \
        (f" --specialist {shlex.quote(str(args.specialist))}"
         if args.specialist != ROOT / "specialists" / "airline_chat" else "") + \
        (f" --write {shlex.quote(str(args.write))}" if args.write else "")
    table = lambda rs: ["| what | n | p50 µs | p99 µs |", "|---|---:|---:|---:|",  # noqa: E731
                        *(f"| {n} | {k:,} | {p50:,.1f} | {p99:,.1f} |" for n, k, p50, p99 in rs)]
    lines = [
        "## Router decisions (`bench/router_bench.py`)", "",
        f"Command: `{cmd}`, run on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", "",
        *machine_table(PACKAGES),
        f"| load average (1 min): start / end | {load0:.2f} / {load1:.2f} (2 cores: above ~1, other work "
        "shared them and every figure reads high) |",
        f"| steal (hypervisor) during the run | {steal_share(steal0, cpu_times())} |",
        "| feature row | " + ("C extension `zcompile.qroute._features_c`" if C_PATH
                              else "Python path (the C extension is not built)") + " |", "",
        f"Every figure is the median over {args.repeats} whole measurements run one after another (each "
        "p50 and p99 its run's); the verdicts list each run's p50. "
        "Each `Router.decide` includes state validation, the legal set, the route, every rung asked, "
        "and appending the receipt to a file. After 50 warm-up decisions each, the two in-process "
        "configurations interleaved, the airline states in receipt order, then the HTTP tier alone (its "
        "stub server is a thread of this process, which would still be finishing a request while the "
        f"next decision ran); GC off while timing. The HTTP tier is the local stub server (no model; "
        f"{connections} TCP connection(s) for all its calls: kept alive).", "",
        "| configuration | n | p50 µs | p99 µs | p50 / compiler-only |",
        "|---|---:|---:|---:|---:|",
        *(f"| {n} | {k:,} | {p50:,.1f} | {p99:,.1f} | {r:.2f} |" for n, k, p50, p99, r in rows),
        "",
        "With candidates the specialist proposes a call's arguments only when certain ones could lift the "
        f"call to its τ (this specialist certifies {'no' if sp_calls_never else 'a'} τ for calls"
        f"{', so it proposes none' if sp_calls_never else ''}); the rest of the difference is converting the "
        "candidates and writing them into the receipt. What a proposal costs is the last row of the router's "
        "parts below.",
        "",
        "**One specialist decision** (`Specialist.decide`: features + ONNX + legal mask + threshold) and its "
        "parts, against scikit-learn running the same kind of model, trained the same way on the same split "
        "(`predict_proba` on the same feature row, timed apart afterwards: its calls leave worker threads "
        "spinning). Interleaved over 300 receipt states, each part on a different state in a round (the "
        "tree walk is faster on a row it has just seen), after a warm-up pass:", "",
        *table(spec_rows),
        "",
        f"ONNX model call alone / scikit-learn `predict_proba`: {spec_rows[5][2] / spec_rows[7][2]:.3f} "
        "(p50). Parts are timed alone, so they need not add up to the whole to the microsecond. "
        f"Decisions and feature rows checked equal with and without the C extension on all {checked:,} "
        "bundled receipt states before timing (`same_decisions`; tests/test_features_fast.py checks the rows "
        "against a reference implementation). "
        f"docs/design.md performance target for a tabular specialist (features + ONNX + mask): p50 ≤ 60 µs — "
        f"measured {one_p50:,.0f} µs (median of {args.repeats} runs: {each(one_p50s)}): "
        f"**{verdict(one_p50, 60)}**.",
        "",
        "**One router decision and its parts** (the same kind of interleaving; the rest of a decision is "
        "walking the ladder, the rung answers and building the receipt and the `Decision`):", "",
        *table(parts),
        "",
        f"The specialist reads slower inside the router than alone ({parts[3][2]:,.0f} against "
        f"{parts[7][2]:,.0f} µs p50 here): the tree walk of its ONNX call runs faster on warm caches (a row "
        "just seen: above) and what runs between two decisions evicts them; a receipt append (four "
        "system calls: flock, fstat, write, flock; a pread of the last byte too when another writer "
        f"appended since) does most of it ({parts[6][2]:,.0f} µs p50 for "
        "the specialist alternating with appends alone).",
        "",
        f"**Resident memory** of a process holding a loaded router (policy + specialist + receipt "
        f"writer), from `/proc/self/status` in a fresh interpreter: {rss['baseline']:.1f} MB after "
        f"`import zcompile`, {rss['loaded']:.1f} MB with the router loaded "
        f"(+{rss['loaded'] - rss['baseline']:.1f} MB).", "",
        "docs/design.md performance target, router decision with compiler + tabular specialist: p50 ≤ 150 "
        f"µs — measured {spec_p50:,.0f} µs (median of {args.repeats} runs: {each(config_p50s)}): "
        f"**{verdict(spec_p50, 150)}**.",
    ]
    publish("router_bench", "\n".join(lines), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
