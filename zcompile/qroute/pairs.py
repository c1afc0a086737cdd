"""Pairwise training data: (request, action description) pairs with hard and random negatives, and choice
scores."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .dataset import LoggedDecision
from .pairwise import FIT, choice_score, describe

OTHER = "other"
NONE_FITS_WEIGHT_MAX = 5


@dataclass(frozen=True, slots=True)
class PairInput:
    """One decision as a pairwise scorer reads it: the request and a description of each legal action."""

    request: str
    descriptions: tuple[str, ...]
    legal: tuple[str, ...]


def pair_input(request: str, d: LoggedDecision, described: dict[str, dict]) -> PairInput:
    """The decision's legal actions described by the tools it was offered (else the policy's)."""
    tools = d.tools or described
    return PairInput(request, tuple(describe(a, tools.get(a)) for a in d.legal), d.legal)


def words_of(text: str) -> frozenset[str]:
    """The words of a description that `nearest` compares (lower case, longer than two letters)."""
    return frozenset(w for w in text.lower().replace(":", " ").replace(",", " ").split() if len(w) > 2)


def nearest(desc: str, pool: Sequence[str], pool_words: Sequence[frozenset[str]], k: int) -> list[int]:
    """Indices of the `k` pool descriptions sharing the most words with `desc` (Jaccard), itself excluded."""
    w = words_of(desc)
    sims = [(len(w & pw) / (len(w | pw) or 1), i) for i, pw in enumerate(pool_words) if pool[i] != desc]
    sims.sort(key=lambda t: (-t[0], t[1]))
    return [i for _, i in sims[:k]]


def none_fits_weight(decisions: Sequence[LoggedDecision]) -> int:
    """How many times each decision where no action fits is trained on: as many times as balances
    them against the decisions where one does (round(fitting / none-fitting)), between 1 and
    NONE_FITS_WEIGHT_MAX. Such a decision teaches only "this related tool does not fit", the error
    that limits precision at high confidence."""
    none = sum(1 for d in decisions if d.label is None)
    if not none:
        return 1
    return max(1, min(NONE_FITS_WEIGHT_MAX, round((len(decisions) - none) / none)))


def training_pairs(x: Sequence[PairInput], decisions: Sequence[LoggedDecision], described: dict[str, dict],
                   negatives: int, seed: int) -> tuple[list[tuple[str, str]], list[str]]:
    """(request, description) pairs and fit/other labels. Besides each decision's own candidates,
    `negatives` descriptions of other training decisions are added as not-fit: half drawn at
    random, half the ones sharing the most words with the right description (hard negatives, like
    the near-miss tools an open tool set offers). Decisions where no action fits are repeated
    `none_fits_weight` times (each repeat draws its own random negatives)."""
    rng = np.random.default_rng(seed)
    pool = sorted({desc for inp in x for desc in inp.descriptions})
    pool_words = [words_of(p) for p in pool]
    weight = none_fits_weight(decisions)
    pairs, y = [], []
    repeated = [(i, e) for i, e in zip(x, decisions) for _ in range(weight if e.label is None else 1)]
    for inp, d in repeated:
        own = inp.descriptions
        for a, desc in zip(d.legal, own):
            pairs.append((inp.request, desc))
            y.append(FIT if a == d.label else OTHER)
        tools = d.tools or described
        right = describe(d.label, tools.get(d.label)) if d.label is not None else None
        picks: list[int] = []
        if pool and negatives:
            hard = negatives // 2 if right is not None else 0
            picks += nearest(right, pool, pool_words, hard + len(own)) if hard else []
            picks = [i for i in picks if pool[i] not in own][:hard]
            picks += rng.choice(len(pool), size=min(negatives - len(picks), len(pool)),
                                replace=False).tolist()
        for j in dict.fromkeys(picks):
            if pool[j] != right and pool[j] not in own:
                pairs.append((inp.request, pool[j]))
                y.append(OTHER)
    return pairs, y


def score(x: Sequence[PairInput], margins_of_pairs: Callable[[list], Any] | None,
          margins_of_one: Callable[[str, Sequence[str]], Any]
          | None = None) -> tuple[np.ndarray, list[str | None]]:
    """Choice score (`pairwise.choice_score`) and the best legal action per decision.

    Margins come from `margins_of_pairs(all pairs)` (the trained model, batched) or from
    `margins_of_one(request, descriptions)` (the exported model, one call per decision, exactly
    as `decide` makes it)."""
    if margins_of_pairs is not None:
        flat = [(inp.request, desc) for inp in x for desc in inp.descriptions]
        z_all = np.asarray(margins_of_pairs(flat) if flat else np.zeros(0), dtype=np.float64)
        chunks, pos = [], 0
        for inp in x:
            chunks.append(z_all[pos:pos + len(inp.descriptions)])
            pos += len(inp.descriptions)
    else:
        chunks = [np.asarray(margins_of_one(inp.request, list(inp.descriptions)), dtype=np.float64)
                  for inp in x]
    scores = np.full(len(x), -np.inf)
    best: list[str | None] = [None] * len(x)
    for i, (inp, zi) in enumerate(zip(x, chunks)):
        if len(zi):
            scores[i], best[i] = choice_score(zi), inp.legal[int(np.argmax(zi))]
    return scores, best
