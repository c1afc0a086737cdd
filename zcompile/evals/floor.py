"""The noise floor: how often the teacher agrees with itself at the same state, across trials of one task.

Two decisions of one task, from different conversations (trials), are at the same state when every
field the policy's rules can read (every field but `text` ones) and `history` are equal. For each
such pair the teacher agrees with itself *strictly* when both took the same step (a call with
arguments equal as canonical JSON, or the same reply action), and *acceptably* when one's step is
acceptable at the other (`receipts.judge`). A decision's agreement is the mean over its pairs; the
figure is the mean over decisions, with a 95% interval from a bootstrap over the states (pairs of
one state are not independent). No state classifier can be strictly more precise at these states
than the teacher is consistent with itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from ..kinds import FieldKind
from ..receipts.judge import accepts

if TYPE_CHECKING:
    from ..runtime import Policy

BOOTSTRAP = 2000  # resamples of the states for the interval
SEED = 0


def _get(state: Mapping[str, Any], path: str) -> Any:
    node: Any = state
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


class NoiseFloor:
    """Decisions grouped by (task, structural state), added one at a time; `figures()` at the end."""

    def __init__(self, policy: Policy | None) -> None:
        self.paths = ([f.path for f in policy.ir.fields if f.kind != FieldKind.TEXT] if policy is not None
                      else None)
        self.groups: dict[tuple[str, str], list[tuple[str, tuple]]] = {}

    def add(self, d: Any, conversation: str) -> None:
        """One held-out decision (its task, state and acceptable calls) of `conversation`."""
        if self.paths is None or not d.acceptable:
            return
        key = repr([_get(d.state, p) for p in self.paths] + [sorted(map(str, d.state.get("history") or ()))])
        self.groups.setdefault((d.task, key), []).append((conversation, d.acceptable))

    def figures(self) -> dict[str, Any]:
        """Self-agreement, strict and acceptable, over the states seen in two or more conversations."""
        per_state: list[tuple[list[float], list[float]]] = []
        pairs = 0
        for members in self.groups.values():
            if len({c for c, _ in members}) < 2:
                continue
            strict_rates, ok_rates = [], []
            for i, (ci, acc_i) in enumerate(members):
                others = [acc_j for j, (cj, acc_j) in enumerate(members) if j != i and cj != ci]
                action, canon = acc_i[0]
                same = [acc_j[0] == acc_i[0] for acc_j in others]
                fine = [accepts(acc_j, action, None if canon is None else msgspec.json.decode(canon),
                                frozenset(), names=canon is None) for acc_j in others]
                strict_rates.append(float(np.mean(same)))
                ok_rates.append(float(np.mean(fine)))
                pairs += len(others)
            per_state.append((strict_rates, ok_rates))
        n = sum(len(s) for s, _ in per_state)
        out: dict[str, Any] = {"states": len(per_state), "decisions": n, "pairs": pairs,
                               "state": "every non-text field of the policy and history, within one task",
                               "interval": f"95% bootstrap interval over the states, {BOOTSTRAP} resamples, "
                                           f"seed {SEED}"}
        for k, name in enumerate(("strict", "acceptable")):
            if not n:
                out[name] = {"rate": None, "ci": [0.0, 1.0]}
                continue
            sums = np.array([sum(g[k]) for g in per_state])
            sizes = np.array([len(g[k]) for g in per_state])
            rng = np.random.default_rng(SEED)
            draws = rng.integers(0, len(per_state), size=(BOOTSTRAP, len(per_state)))
            boot = sums[draws].sum(axis=1) / sizes[draws].sum(axis=1)
            out[name] = {"rate": float(sums.sum() / sizes.sum()),
                         "ci": [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))]}
        return out
