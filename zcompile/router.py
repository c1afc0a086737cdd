"""The router: compiler -> specialists -> LLM tiers, the first rung that answers wins; a receipt per decision."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ZcError
from .receipts import Receipt, ReceiptWriter
from .runtime import LegalSet, Policy, Reason
from .tools import policy_tools, tool_schemas

SPECIALIST = "specialist"


@dataclass(frozen=True, slots=True)
class Rung:
    """What one rung did for one decision."""

    tier: str
    outcome: str  # answered | abstained | timeout | illegal | error | skipped
    action: str | None = None
    confidence: float | None = None
    latency_ms: float = 0.0
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tier": self.tier, "outcome": self.outcome,
                               "latency_ms": round(self.latency_ms, 3)}
        if self.action is not None:
            out["action"] = self.action
        if self.confidence is not None:
            out["confidence"] = self.confidence
        if self.detail:
            out["detail"] = self.detail
        return out


@dataclass(frozen=True, slots=True)
class Decision:
    """The router's answer: `action` is None only when every rung abstained and the fallback is not legal."""

    action: str | None
    tier: str  # compiler | specialist | a tier name | fallback | none
    confidence: float | None
    legal: LegalSet
    rungs: tuple[Rung, ...]
    receipt: Receipt

    @property
    def reasons(self) -> Mapping[str, tuple[Reason, ...]]:
        """Why each other action was not legal (computed on first access)."""
        return self.legal.removed


class Router:
    """Runs the ladder for one policy. Thread-safe: share one Router between threads.

    Args:
        policy: a loaded or compiled `zcompile.Policy`.
        specialists: a specialist directory (classifier or pairwise), a loaded `Specialist` or
            `PairwiseSpecialist`, or a sequence of them; asked in order on the `specialist` rung,
            the first that answers wins. A pairwise specialist scores the legal actions against
            their descriptions: the `tools` given to `decide`, else the policy's action
            descriptions, else the action names.
        tiers: tier name -> an object with `propose(state, legal, timeout_s=…, intent=…)` returning
            a `zcompile.tiers.TierAnswer` (e.g. `zcompile.OpenAITier`). Names must match the
            policy's `tier` declarations; routes name the ladder.
        receipts: where each decision's receipt goes: a path (appended, JSON Lines), a
            `ReceiptWriter`, a callable taking a `Receipt`, or None.
        deadline_ms: overall budget per decision; rungs left when it runs out are skipped.
    """

    def __init__(self, policy: Policy, specialists: Any = None, tiers: Mapping[str, Any] | None = None,
                 receipts: str | Path | ReceiptWriter | Callable[[Receipt], None] | None = None,
                 deadline_ms: float | None = None) -> None:
        self.policy = policy
        self.specialists = tuple(_load_specialists(specialists, policy))
        self.tiers = dict(tiers or {})
        declared = {t.name: t for t in policy.ir.tiers}
        unknown = [n for n in self.tiers if n not in declared]
        if unknown:
            raise ZcError(f"tier `{unknown[0]}` is not declared by policy `{policy.name}` "
                          f"(declared: {', '.join(declared) or 'none'})")
        self._declared = declared
        self.deadline_ms = deadline_ms
        self._own_writer = None
        if receipts is None:
            self._sink: Callable[[Receipt], None] | None = None
        elif isinstance(receipts, ReceiptWriter):
            self._sink = receipts.append
        elif callable(receipts):
            self._sink = receipts
        else:
            self._own_writer = ReceiptWriter(receipts)
            self._sink = self._own_writer.append
        self._tools = policy_tools(policy)
        self._descriptions = {name: t["description"] for name, t in self._tools.items()}

    def close(self) -> None:
        if self._own_writer is not None:
            self._own_writer.close()

    def __enter__(self) -> Router:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def ladder(self, legal: LegalSet) -> tuple[str | None, tuple[str, ...]]:
        """(route name, tier names) for a legal set's state: the first holding route, else every rung."""
        route = self.policy.route_of(legal)
        if route is not None:
            return route.name, route.tiers
        return None, (SPECIALIST, *self.tiers)

    def decide(self, state: Any, intent: str | None = None, *, task: str = "",
               meta: Mapping[str, Any] | None = None, tools: Any = None) -> Decision:
        """Decide one step. Raises StateError for an invalid state (never guesses).

        `tools`: the tool schemas (`{name, description, parameters}`, a list or a dict by name)
        offered at this step, for pairwise specialists; classifiers and tiers do not read them. The
        receipt keeps them (`meta.tools`), so a later distillation describes actions as this step did.
        Raises ZcError when `tools` is not tool schemas (the message names the `$.tools` path).
        """
        t0 = time.perf_counter()
        if tools is not None:
            tools = tool_schemas(tools)  # refuses anything but tool schemas, naming the $.path
        legal = self.policy.legal(state, intent)
        rungs: list[Rung] = []
        answer: tuple[str, str, float | None, str | None] | None = None  # action, tier, confidence, model
        route_name = None
        cost = 0.0
        if len(legal.actions) == 1:
            answer = (legal.actions[0], "compiler", 1.0, None)
            rungs.append(Rung("compiler", "answered", legal.actions[0], 1.0,
                              (time.perf_counter() - t0) * 1000,
                              "fallback: nothing else is legal" if legal.fallback else "single legal action"))
        else:
            route_name, names = self.ladder(legal)
            deadline = None if self.deadline_ms is None else t0 + self.deadline_ms / 1000
            for name in names:
                left = None if deadline is None else deadline - time.perf_counter()
                if left is not None and left <= 0:
                    rungs.append(Rung(name, "skipped", detail="overall deadline reached"))
                    continue
                rung, model = self._rung(name, state, legal, intent, left, tools)
                rungs.append(rung)
                if name in self.tiers and rung.outcome != "skipped":
                    cost += float(self._declared[name].cost or 0)
                if rung.outcome == "answered":
                    answer = (rung.action, name, rung.confidence, model)
                    break
        if answer is None:
            fb = self.policy.ir.fallback
            if fb in legal.actions:
                answer = (fb, "fallback", None, None)
            else:
                answer = (None, "none", None, None)
        action, tier, confidence, model = answer
        latency = (time.perf_counter() - t0) * 1000
        receipt = Receipt(
            id=os.urandom(16).hex(), task=task, state=dict(state), tier=tier, ts=time.time(),
            policy=self.policy.sha256, intent=intent, legal=legal.actions, model=model, action=action,
            confidence=confidence, latency_ms=round(latency, 4), cost=cost,
            meta={**(meta or {}), "route": route_name, "fallback": legal.fallback,
                  "rungs": [r.to_dict() for r in rungs],
                  **({"tools": list(tools.values())} if tools is not None else {})})
        if self._sink is not None:
            self._sink(receipt)
        return Decision(action, tier, confidence, legal, tuple(rungs), receipt)

    async def adecide(self, state: Any, intent: str | None = None, *, task: str = "",
                      meta: Mapping[str, Any] | None = None, tools: Any = None) -> Decision:
        """`decide` for asyncio harnesses: runs in a worker thread, never blocks the event loop."""
        return await asyncio.to_thread(self.decide, state, intent, task=task, meta=meta, tools=tools)

    def _rung(self, name: str, state: Any, legal: LegalSet, intent: str | None,
              left_s: float | None, tools: Any = None) -> tuple[Rung, str | None]:
        started = time.perf_counter()
        ms = lambda: (time.perf_counter() - started) * 1000  # noqa: E731
        if name == SPECIALIST:
            if not self.specialists:
                return Rung(name, "skipped", detail="no specialist loaded"), None
            best = None
            for sp in self.specialists:
                if getattr(sp, "pairwise", False):
                    ans = sp.decide(state, legal.actions, tools if tools is not None else self._tools)
                else:
                    ans = sp.decide(state, legal.actions)
                if ans.action is not None and ans.action in legal.actions:
                    return Rung(name, "answered", ans.action, ans.confidence, ms(), sp.name), sp.name
                best = best or ans
            return Rung(name, "abstained", best.best if best else None, best.confidence if best else None,
                        ms(), "below threshold"), None
        tier = self.tiers.get(name)
        if tier is None:
            return Rung(name, "skipped", detail="no endpoint bound to this tier"), None
        declared = self._declared[name].max_ms
        budgets = [b for b in (declared / 1000 if declared else None, left_s) if b is not None]
        timeout_s = min(budgets) if budgets else 30.0
        try:
            ans = tier.propose(state, legal.actions, timeout_s=timeout_s, intent=intent,
                               descriptions=self._descriptions or None)
        except Exception as exc:  # a tier must not take the harness down: record and fall through
            return Rung(name, "error", latency_ms=ms(), detail=f"{type(exc).__name__}: {exc}"), None
        outcome, action = ans.outcome, ans.action
        if outcome == "answered" and action not in legal.actions:
            outcome, action = "illegal", None
            detail = f"proposed `{ans.action}` outside the legal set"
        else:
            detail = ans.detail
        return (Rung(name, outcome, action if outcome == "answered" else None, ans.confidence, ms(), detail),
                getattr(ans, "model", None) or getattr(tier, "model", None))


def _load_specialists(spec: Any, policy: Policy) -> list[Any]:
    if spec is None:
        return []
    items: Sequence[Any] = spec if isinstance(spec, (list, tuple)) else [spec]
    out = []
    for item in items:
        if isinstance(item, (str, Path)):
            from .qroute.loading import load

            out.append(load(item, policy))
        else:
            out.append(item)
    return out
