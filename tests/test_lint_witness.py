"""The lints' joined search (`lint._witness`) answers exactly what enumerating every state answers."""

from __future__ import annotations

import itertools
import random

from zcompile.lint import _join, _search, _witness


def _brute(preds, domains, want_keep):
    paths = list(domains)
    for combo in itertools.product(*(domains[p] for p in paths)):
        state = dict(zip(paths, combo))
        kept = [keep(*(state[p] for p in reads)) for keep, reads in preds]
        if all(kept) if want_keep else not all(kept):
            return True
    return False


def _table_pred(rng: random.Random, domains: dict[str, list], reads: tuple[str, ...]):
    """A predicate over `reads` given by a random truth table (True mostly, so joins matter)."""
    table = {row: rng.random() < 0.7
             for row in itertools.product(*(domains[p] for p in reads))}
    return (lambda *values: table[values]), reads


def test_witness_matches_enumeration():
    rng = random.Random(7)
    names = ["a", "b", "c", "d", "e"]
    checked = {True: 0, False: 0}
    for _ in range(400):
        domains = {n: [*range(rng.randint(1, 3)), None][:rng.randint(1, 4)] for n in names}
        preds = []
        for _ in range(rng.randint(1, 5)):
            reads = tuple(sorted(rng.sample(names, rng.randint(0, 3))))
            preds.append(_table_pred(rng, domains, reads))
        for want_keep in (True, False):
            want = _brute(preds, domains, want_keep)
            assert _witness(preds, domains, want_keep) is want, (preds, domains, want_keep)
            checked[want] += 1
        want = _brute(preds, domains, True)  # each way of answering it, on its own
        assert _search(preds, domains, 10**9) is want and _join(preds, domains) is want
        assert _search(preds, domains, 0) in (want, None)
    assert checked[True] > 50 and checked[False] > 50  # both answers were exercised
