"""The router: walks the ladder of rungs (compiler, specialists, LLM tiers) for one decision; the first
rung that answers wins; every decision leaves a receipt."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from ..errors import ZcError, did_you_mean
from ..receipts import Receipt, ReceiptWriter
from ..receipts.candidates import as_candidates
from ..runtime import LegalSet, Policy, Reason
from ..state import StateError
from ..tools import tool_schemas
from .rung import (
    SPECIALIST,
    Answer,
    Catalog,
    CompilerRung,
    Resident,
    SpecialistRung,
    Step,
    abstain,
    as_rung,
    bare,
    stamped,
    timed,
)
from .shadow import Monitor, shadow_answers

DEADLINE = "overall deadline reached"  # the detail of a rung skipped for want of time
TEXT_ONLY = "the text tier writes only replies handed on to it"  # the text tier met on the ladder
TEXT_ASKED = "the text tier was asked when the reply was handed on"


def undeclared_tier(policy: Policy, name: str) -> str | None:
    """Why `name` cannot be bound to a tier of `policy`, with did-you-mean (None: it declares it):
    the one check of `Router(tiers=…)` and of tiers.toml (`zcompile.tiers.load_tiers`)."""
    if name == SPECIALIST:
        return (f"`{SPECIALIST}` is the specialists' rung (given as specialists), not a tier an LLM is bound "
                "to")
    declared = [t.name for t in policy.ir.tiers]
    if name in declared:
        return None
    hint = did_you_mean(name, declared)
    return f"policy `{policy.name}` declares no tier `{name}`" + (
        f" ({hint})" if hint else f" (it declares {', '.join(declared) or 'none'})")


@dataclass(frozen=True, slots=True)
class Decision:
    """The router's answer: `action` is None only when every rung abstained and the fallback is not legal.

    Attributes:
        action: the action to take.
        tier: who answered: compiler | specialist | a tier name | fallback | none.
        confidence: the answering rung's confidence.
        legal: the LegalSet of the state.
        rungs: what each rung asked did, in order (`Answer`s; the compiler only when it answered or
            handed on).
        receipt: the receipt written for this decision.
        arguments: the call's arguments, when the answer is a complete call.
        kind: "call" (complete, checked), "name" (a bare name), "reply" (a text reply), "none".
        text: the reply's text (kind "reply").
        legal_ms: the time the compiler took for the legal set (validation included).
    """

    action: str | None
    tier: str
    confidence: float | None
    legal: LegalSet
    rungs: tuple[Answer, ...]
    receipt: Receipt
    arguments: dict[str, Any] | None = None
    kind: str = "name"
    text: str | None = None
    legal_ms: float = 0.0

    @property
    def reasons(self) -> Mapping[str, tuple[Reason, ...]]:
        """Why each other action was not legal (computed on first access)."""
        return self.legal.removed

    @property
    def complete(self) -> bool:
        return self.kind in ("call", "reply")


class Router:
    """Runs the ladder for one policy. Thread-safe: share one Router between threads.

    Args:
        policy: a loaded or compiled `zcompile.Policy`.
        specialists: a specialist directory (classifier or pairwise), a loaded `Specialist` or
            `PairwiseSpecialist`, or a sequence of them; asked in order on the `specialist` rung,
            the first that answers wins. A directory must hold a promoted specialist (its gate, from
            `zc distill` or `zc promote`); a loaded one is used as given. A pairwise specialist scores the
    legal actions against
            their descriptions: the `tools` given to `decide`, else the policy's action
            descriptions, else the action names.
        tiers: tier name -> a rung (`zcompile.router.rung.Rung`, e.g. `zcompile.OpenAITier`) or an
            object with `propose(state, legal, timeout_s=…, intent=…, descriptions=…)` returning a
            `zcompile.tiers.TierAnswer`. Names must match the policy's `tier` declarations; routes
            name the ladder. The policy's text tier (`tier NAME … text`), when bound here, writes
            the replies the compiler or a specialist hands on: it is asked first after a hand-on,
            offered the legal reply actions only, and skipped on any other decision; when it
            abstains, the ladder's next rung that writes text is asked.
        receipts: where each decision's receipt goes: a path (appended, JSON Lines), a
            `ReceiptWriter`, a callable taking a `Receipt`, or None.
        deadline_ms: overall budget per decision; rungs left when it runs out are skipped.
        ladder: the rungs every decision walks, in place of the policy's routes (an arm of `zc arms`);
            its tier names must be bound in `tiers`, and need not be declared by the policy (an
            undeclared tier has no `max_ms` and no cost).
        shadow: specialists (as for `specialists`) asked beside the ladder on every decision with
            two or more legal actions; what they would have done goes into the receipt
            (`meta.shadow`), never into the decision.
        monitor: the demotion rule for promoted specialists (`zcompile.router.shadow.Monitor`);
            outcomes reach it through `record_outcome`.
        complete: only complete answers (a checked call, a text reply) end the walk; a bare name
            is recorded and the next rung is asked (the gateway, `zc serve`, answers whole calls).
        grader: a `zcompile.router.grader.Grader`: a text reply written by a rung it grades (by default
            every rung but the ladder's last, the remote model) must pass its checks; a reply that fails
            becomes an abstention with cause `graded` and the checks' reasons, and the next rung is asked.
        budgets: the policy's `tier NAME max_ms N` bounds that tier's call (default). False for a
            measurement of what the tiers do given the time (`zc eval --tiers`, `zc arms`,
            `zc grader replies`, `zc local calibrate`): each is then bounded by its own `timeout_ms`
            and `deadline_ms` only, so a slow machine does not turn answers into timeouts.

    With `deadline_ms` (a router that runs against a clock, as `zc serve`'s always does) the policy's
    `tier specialist max_ms N` is the specialist rung's budget: an answer that took longer, measured
    around the rung, is not used (cause `deadline`) and the next rung is asked. Without a deadline
    (`zc eval`'s replay, `zc route` without `--deadline-ms`) an answer is used whatever it took, so a
    replay decides what it decides independent of this machine's load.
    """

    def __init__(self, policy: Policy, specialists: Any = None, tiers: Mapping[str, Any] | None = None,
                 receipts: str | Path | ReceiptWriter | Callable[[Receipt], None] | None = None,
                 deadline_ms: float | None = None, *, shadow: Any = None, monitor: Monitor | None = None,
                 complete: bool = False, ladder: Sequence[str] | None = None, grader: Any = None,
                 budgets: bool = True) -> None:
        self.policy = policy
        self.budgets = budgets
        self.grader = grader
        self.complete = complete
        self.tiers = dict(tiers or {})
        declared = {t.name: t for t in policy.ir.tiers}
        self._ladder = None if ladder is None else tuple(ladder)
        if self._ladder is not None:  # an experiment's ladder (`zc arms`): its tiers need not be declared
            unbound = [n for n in self._ladder if n != SPECIALIST and n not in self.tiers]
            if unbound:
                raise ZcError(f"ladder: rung `{unbound[0]}` is neither `{SPECIALIST}` nor a bound tier")
        elif problem := next(filter(None, (undeclared_tier(policy, n) for n in self.tiers)), None):
            raise ZcError(problem)
        self._declared = declared
        self.deadline_ms = deadline_ms
        self.catalog = Catalog(policy)
        self._compiler = CompilerRung()
        self._specialists = SpecialistRung(load_specialists(specialists, policy, promoted_only=True))
        self._shadow = tuple(load_specialists(shadow, policy))
        self._tier_rungs = {name: as_rung(name, t) for name, t in self.tiers.items()}
        text = next((t.name for t in policy.ir.tiers if t.text), None)
        self.text_tier = text if text in self._tier_rungs else None  # the tier handed-on replies go to first
        if self.text_tier is not None and not getattr(self._tier_rungs[text], "writes_text", False):
            raise ZcError(f"tier `{text}` is the text tier of policy `{policy.name}`, but what is bound to "
                          "it does not write text (its `writes_text` is false)")
        self.monitor = monitor if monitor is not None else Monitor()
        self.demoted: dict[str, str] = {}  # specialist name -> why it was demoted
        self._lock = threading.Lock()
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

    @property
    def specialists(self) -> tuple[Any, ...]:
        """The promoted specialists, in the order they are asked."""
        return self._specialists.specialists

    @property
    def shadow(self) -> tuple[Any, ...]:
        """The shadow specialists (demoted ones join them)."""
        return self._shadow

    def close(self) -> None:
        if self._own_writer is not None:
            self._own_writer.close()

    def __enter__(self) -> Router:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def ladder(self, legal: LegalSet) -> tuple[str | None, tuple[str, ...]]:
        """(route name, rung names) for a legal set's state: the first holding route, else every rung."""
        if self._ladder is not None:
            return "ladder", self._ladder
        route = self.policy.route_of(legal)
        if route is not None:
            return route.name, route.tiers
        return None, (SPECIALIST, *self.tiers)

    def decide(self, state: Any, intent: str | None = None, *, task: str = "",
               meta: Mapping[str, Any] | None = None, tools: Any = None,
               candidates: Sequence[Any] | None = None, offer: Collection[str] | None = None,
               started: float | None = None) -> Decision:
        """Decide one step. Raises StateError for an invalid state (never guesses), before any rung runs.

        `started`: when the decision was asked for (a `time.perf_counter()` second; default now):
        `deadline_ms` and the receipt's latency count from it (a server passes the request's
        arrival, so time spent queued counts against the deadline).

        `offer`: the actions the harness can take at this step (the tools it offered, and its reply
        actions unless it requires a tool call). Every rung, and the fallback, answers only a
        legal action in the offer (fail closed: a call the harness cannot run is never returned);
        the receipt keeps the offer (`meta.offer`) and the whole legal set.

        `candidates`: the values seen before this decision that a call's arguments may copy
        (`zcompile.receipts.extract_candidates(messages)`); a specialist proposes a complete call
        from them, and the receipt keeps them for the next distillation.

        `tools`: the tool schemas (`{name, description, parameters}`, a list or a dict by name)
        offered at this step, for pairwise specialists; classifiers and tiers do not read them. The
        receipt keeps them (`meta.tools`), so a later distillation describes actions as this step did.
        Raises ZcError when `tools` is not tool schemas (the message names the `$.tools` path), or
        when the state, `meta` or `tools` cannot be written as JSON (the receipt could not be).
        """
        if started is not None and (isinstance(started, bool) or not isinstance(started, (int, float))):
            raise ZcError(f"started: expected a time.perf_counter() second, got {type(started).__name__}")
        t0 = time.perf_counter() if started is None else float(started)
        if not isinstance(task, str):  # the receipt's `task` is a string: it must read back
            raise ZcError(f"$.task: expected a string, got {type(task).__name__}")
        if tools is not None:
            tools = tool_schemas(tools)  # refuses anything but tool schemas, naming the $.path
        if not isinstance(state, Mapping):
            raise StateError(f"$: expected a JSON object, got {type(state).__name__}")
        # refused here, before any rung runs: no decision without its receipt
        receipt_state = json_copy(state, "$")
        if meta is not None and not isinstance(meta, Mapping):
            raise ZcError(f"$.meta: expected an object, got {type(meta).__name__}")
        receipt_meta = json_copy(dict(meta or {}), "$.meta")
        receipt_tools = json_copy(list(tools.values()), "$.tools") if tools is not None else None
        cands = as_candidates(candidates)
        if offer is not None:
            if isinstance(offer, (str, bytes)) or not isinstance(offer, Collection) or not all(
                    isinstance(a, str) for a in offer):
                raise ZcError("$.offer: expected a collection of action names")
            offer = frozenset(offer)
            receipt_meta["offer"] = sorted(offer)
        t1 = time.perf_counter()
        legal = self.policy.legal(state, intent)
        legal_ms = (time.perf_counter() - t1) * 1000
        step = Step(self.policy, state, legal, intent, tools, self.catalog, cands, offer)
        answers, chosen, route_name, cost = self._walk(step, t0)
        if chosen is not None:
            action, tier, confidence, kind = chosen.action, chosen.rung, chosen.confidence, chosen.kind
            arguments, text, model = chosen.arguments, chosen.text, chosen.model
        else:
            fb = self.policy.ir.fallback
            found = step.allows(fb)
            action, tier, confidence = (fb, "fallback", None) if found else (None, "none", None)
            kind, arguments, text, model = (bare(step, fb) if found else "none"), None, None, None
            if kind == "call":
                arguments = {}
        shadow = shadow_answers(self._shadow, step, action, arguments) if len(step.choices) > 1 else []
        receipt_meta.update({"route": route_name, "fallback": legal.fallback, "kind": kind,
                             "rungs": [a.to_dict() for a in answers]})
        if text is not None:
            receipt_meta["text"] = text
        if receipt_tools is not None:
            receipt_meta["tools"] = receipt_tools
        if shadow:
            receipt_meta["shadow"] = shadow
        receipt = Receipt(
            id=os.urandom(16).hex(), task=task, state=receipt_state, tier=tier, ts=time.time(),
            policy=self.policy.sha256, intent=intent, legal=legal.actions, model=model, action=action,
            confidence=confidence if confidence is not None and 0.0 <= confidence <= 1.0 else None,
            latency_ms=round((time.perf_counter() - t0) * 1000, 4), cost=cost, meta=receipt_meta,
            candidates=cands if candidates is not None else None, arguments=arguments)
        if self._sink is not None:
            self._sink(receipt)  # if it raises, no decision is returned
        return Decision(action, tier, confidence, legal, tuple(answers), receipt, arguments, kind, text,
                        legal_ms)

    def _walk(self, step: Step, t0: float) -> tuple[list[Answer], Answer | None, str | None, float]:
        """(what each rung did, the answer that won or None, the route's name, the tiers' cost).

        A reply handed on (by the compiler or a specialist) goes to the text tier first, when one is
        bound, offered the legal reply actions only; met on the ladder, the text tier is skipped."""
        answers: list[Answer] = []
        handed = False
        if len(step.choices) == 1:  # the compiler's rung: it abstains otherwise (not recorded)
            first = timed(self._compiler, "compiler", step, None)
            if self._accepts(first):
                return [first], first, None, 0.0
            answers.append(first)
            handed = first.cause == "handed_on"
        route_name, names = self.ladder(step.legal)
        deadline = None if self.deadline_ms is None else t0 + self.deadline_ms / 1000
        cost = 0.0
        todo, text_asked = list(reversed(names)), False
        # a conditional route that leaves the text tier out (`when last.tool_error use remote`): a reply
        # handed on goes to the route's tiers, past the text tier
        bypass = self.text_tier is not None and self._passes_text_tier(step.legal, names)
        while todo or (handed and not text_asked and self.text_tier is not None):
            if handed and bypass and not text_asked:
                text_asked = True
                answers.append(_skipped(self.text_tier, f"route `{route_name}` does not list the text "
                                                        "tier: its replies go to the route's tiers"))
                continue
            handoff = handed and not text_asked and self.text_tier is not None
            name = self.text_tier if handoff else todo.pop()
            text_asked = text_asked or handoff
            rung = self._specialists if name == SPECIALIST else self._tier_rungs.get(name)
            left = None if deadline is None else deadline - time.perf_counter()
            if name == self.text_tier and not handoff:
                ans = _skipped(name, TEXT_ASKED if text_asked else TEXT_ONLY)
            elif left is not None and left <= 0:
                ans = _skipped(name, DEADLINE)
            elif rung is None:
                ans = _skipped(name, "no endpoint bound to this tier")
            elif rung is self._specialists and not rung.specialists:
                ans = _skipped(name, "no specialist loaded")
            elif handed and not rung.writes_text:
                ans = _skipped(name, "handed on to a rung that writes text")
            else:
                ans = self._ask(rung, name, _replies_only(step) if handoff else step,
                                self._budget(name, left))
                if ans.kind == "reply" and self.grader is not None and self.grader.applies(name, names):
                    ans = self._graded(ans, step)
                if name in self._declared and name in self._tier_rungs and ans.cause != "cold":
                    cost += float(self._declared[name].cost or 0)
            answers.append(ans)
            if self._accepts(ans):
                return answers, ans, route_name, cost
            handed = handed or ans.cause == "handed_on"
        return answers, None, route_name, cost

    def _ask(self, rung: Any, name: str, step: Step, budget: float | None) -> Answer:
        """One rung's answer within `budget` seconds: a rung with residency loaded first when the budget
        covers its cold load (skipped with cause `cold` when it does not); the specialist's answer
        held to its declared `max_ms` when the router has a deadline."""
        if isinstance(rung, Resident):
            return resident_answer(rung, name, step, budget)
        ans = timed(rung, name, step, budget)
        limit = self._declared[SPECIALIST].max_ms if SPECIALIST in self._declared else None
        if (name == SPECIALIST and self.deadline_ms is not None and limit and ans.latency_ms > limit
                and (ans.answered or ans.cause == "handed_on")):
            why = (f"answered in {ans.latency_ms:.2f} ms, past its budget (tier specialist max_ms "
                   f"{limit:g}): the answer is not used")
            ans = stamped(abstain("deadline", why, action=ans.action, confidence=ans.confidence,
                                  model=ans.model),
                          name, ans.latency_ms)
        return ans

    def _passes_text_tier(self, legal: Any, names: Sequence[str]) -> bool:
        """Whether the route holding for this state is conditional and leaves the text tier out: then a
        reply handed on skips it (a fault's reply goes to a stronger tier)."""
        if self._ladder is not None or self.text_tier in names:
            return False
        route = self.policy.route_of(legal)
        return route is not None and route.when is not None

    def _graded(self, ans: Answer, step: Step) -> Answer:
        """`ans` (a text reply) as it is when it passes the grader, else an abstention with cause `graded`
        that keeps the rejected text for the receipt."""
        verdict = self.grader.grade(ans.text, step.state, step.legal.actions, seen=step.candidates)
        if verdict.passed:
            return ans
        return dataclasses.replace(ans, kind="abstain", cause="graded",
                                   detail=f"reply failed the grader: {verdict.reason()}")

    def preload(self, names: Collection[str]) -> dict[str, float]:
        """Make the named tiers resident now (`zc serve --resident`): {name: milliseconds of its cold
        load, 0 when it already was}. Raises ZcError for a name that is not a bound tier with residency,
        or a load that fails."""
        out = {}
        for name in names:
            rung = self._tier_rungs.get(name)
            if not isinstance(rung, Resident):
                why = "is not bound" if rung is None else "has no residency (zc does not start its server)"
                raise ZcError(f"tier `{name}` {why}: only a tier with `launch` in tiers.toml can be kept "
                              "resident")
            out[name] = rung.load(None)
        return out

    def _accepts(self, ans: Answer) -> bool:
        return ans.complete if self.complete else ans.answered

    def _budget(self, name: str, left: float | None) -> float | None:
        declared = (self._declared[name].max_ms if self.budgets and name in self._tier_rungs
                    and name in self._declared else None)
        budgets = [b for b in (declared / 1000 if declared else None, left) if b is not None]
        return min(budgets) if budgets else None

    async def adecide(self, state: Any, intent: str | None = None, *, task: str = "",
                      meta: Mapping[str, Any] | None = None, tools: Any = None,
                      candidates: Sequence[Any] | None = None, offer: Collection[str]
                      | None = None) -> Decision:
        """`decide` for asyncio harnesses: runs in a worker thread, never blocks the event loop."""
        return await asyncio.to_thread(self.decide, state, intent, task=task, meta=meta, tools=tools,
                                       candidates=candidates, offer=offer)

    # ---- live outcomes and demotion -------------------------------------------------------------
    def record_outcome(self, receipt: Receipt | Decision, *, correct: bool | None = None,
                       action: str | None = None, arguments: Mapping[str, Any] | None = None) -> list[str]:
        """Record the verified outcome of one decision, for the promoted and shadow specialists whose
        answers its receipt holds; demote a promoted specialist whose window of outcomes no longer
        certifies its target (see `Monitor`). Returns the names demoted by this outcome.

        Give the label (`action`, with `arguments` for a call: the teacher's or a verified answer),
        or only `correct` (whether the decision's own answer was right: it judges the specialists
        that answered the same; a different answer is wrong when the decision was right, and unjudged
        otherwise).
        """
        if isinstance(receipt, Decision):
            receipt = receipt.receipt
        verdicts = self.monitor.judge(receipt, correct=correct, action=action, arguments=arguments)
        demoted = []
        with self._lock:
            for name, ok in verdicts:
                why = self.monitor.add(name, ok, self._target(name), task=receipt.task)
                if why and name in {sp.name for sp in self._specialists.specialists}:
                    sp = next(s for s in self._specialists.specialists if s.name == name)
                    self._specialists = SpecialistRung(tuple(s for s in self._specialists.specialists
                                                             if s is not sp))
                    self._shadow = (*self._shadow, sp)
                    self.demoted[name] = why
                    demoted.append(name)
        return demoted

    def _target(self, name: str) -> float | None:
        for sp in (*self._specialists.specialists, *self._shadow):
            if sp.name == name:
                m = getattr(sp, "manifest", None)
                return m.threshold.target_precision if m is not None else None
        return None


_ENCODER = msgspec.json.Encoder()


def _replies_only(step: Step) -> Step:
    """The step as the text tier sees it: only the legal reply actions are offered."""
    return dataclasses.replace(step, offer=frozenset(a for a in step.choices if a in step.catalog.replies))


def resident_answer(rung: Any, name: str, step: Step, budget: float | None) -> Answer:
    """A resident rung asked as it is (`warm`); one that is not loaded first when `budget` covers its
    cold load (`cold`, its load's time recorded), else skipped with cause `cold` without waiting."""
    if rung.resident:
        ans = dataclasses.replace(timed(rung, name, step, budget), residency="warm")
        if ans.cause not in ("timeout", "error"):
            rung.note_warm(ans.latency_ms)
        return ans
    cold = rung.cold_ms
    if budget is not None and budget * 1000 < cold:
        why = f"not resident: a cold load takes about {cold:.0f} ms, {budget * 1000:.0f} ms left"
        return dataclasses.replace(stamped(abstain("cold", why), name, 0.0), residency="cold")
    started = time.perf_counter()
    try:
        load_ms = rung.load(budget)
    except ZcError as exc:
        ans = stamped(abstain("error", f"cold load failed: {exc}"), name,
                      (time.perf_counter() - started) * 1000)
        return dataclasses.replace(ans, residency="cold")
    rest = None if budget is None else budget - (time.perf_counter() - started)
    ans = stamped(timed(rung, name, step, rest), name, (time.perf_counter() - started) * 1000)
    return dataclasses.replace(ans, residency="cold", cold_ms=load_ms)


@functools.cache
def _skipped(name: str, detail: str) -> Answer:
    """A skipped rung's record (immutable, so one per rung and cause)."""
    return stamped(abstain("skipped", detail), name, 0.0)


def json_copy(value: Any, path: str) -> Any:
    """`value` as plain JSON (a copy), or a ZcError naming the `$.path` of what cannot be written."""
    try:
        return msgspec.json.decode(_ENCODER.encode(value))
    except (TypeError, ValueError, OverflowError, RecursionError, msgspec.MsgspecError) as exc:
        where, why = _unencodable(value, path, exc)
        raise StateError(f"{where}: cannot be written to the receipt as JSON ({why})", where) from None


def _unencodable(value: Any, path: str, exc: Exception, depth: int = 0) -> tuple[str, str]:
    """The deepest path under `value` that does not encode, and why."""
    children = ()
    if isinstance(value, Mapping):
        children = [(f"{path}.{k}" if isinstance(k, str) else f"{path}[{k!r}]", v) for k, v in value.items()]
    elif isinstance(value, (list, tuple)):
        children = [(f"{path}[{i}]", v) for i, v in enumerate(value)]
    if depth < 64:
        for where, child in children:
            try:
                _ENCODER.encode(child)
            except (TypeError, ValueError, OverflowError, RecursionError, msgspec.MsgspecError) as inner:
                return _unencodable(child, where, inner, depth + 1)
    if isinstance(exc, RecursionError):
        return path, "nested too deeply"
    return path, str(exc) or type(exc).__name__


def load_specialists(spec: Any, policy: Policy | None, *, promoted_only: bool = False) -> list[Any]:
    """Specialists from directories or loaded objects (one, or a sequence), in order; with
    `promoted_only`, a directory whose gate did not promote it is refused (a loaded object is the
    caller's explicit choice)."""
    if spec is None:
        return []
    items: Sequence[Any] = spec if isinstance(spec, (list, tuple)) else [spec]
    out = []
    for item in items:
        if isinstance(item, (str, Path)):
            from ..qroute import load_specialist

            sp = load_specialist(item, policy)
            if promoted_only and not sp.manifest.gate.promoted:
                raise ZcError(f"{item}: specialist `{sp.manifest.name}` is not promoted ("
                              + "; ".join(sp.manifest.gate.reasons) + "): run it in shadow mode (shadow=…) "
                              "and re-gate it with `zc promote` on those receipts, or pass the loaded "
                              "specialist to use it anyway")
            out.append(sp)
        else:
            out.append(item)
    return out
