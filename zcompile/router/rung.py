"""Rungs: the one protocol every rung of the ladder implements, and the one answer type they return.

A rung is the compiler, a specialist (classifier or pairwise, through `SpecialistRung`) or an LLM
tier. Given a `Step` (the validated decision) and a time budget it returns an `Answer`:

- `call`: a complete call, `action` with its `arguments`, accepted by `Policy.check`;
- `name`: a bare action name, for an action whose signature has arguments or is not declared (the
  harness still has to find the arguments, so it is never counted as a complete call);
- `reply`: a text reply (`text`), for an action tagged `reply`; only rungs that write text give it;
- `abstain`: no answer, with its `cause` (`CAUSES`: `novel` is a specialist's state past its novelty
  cut, unlike anything it was trained on; `graded` a text reply the reply grader failed, its text kept)
  and `detail`.

Every answer a rung proposes goes through `settle`, which applies these rules in one place.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

import msgspec

from ..tools import REPLY_TAG, policy_tools

KINDS = ("call", "name", "reply", "abstain")
CAUSES = ("below_threshold", "novel", "declined", "timeout", "illegal", "error", "skipped", "handed_on",
          "cold", "deadline", "graded")
SPECIALIST = "specialist"  # the rung name of the specialists in a policy's routes


@dataclass(frozen=True, slots=True)
class Answer:
    """What one rung did with one decision.

    Attributes:
        kind: "call" | "name" | "reply" | "abstain".
        rung: the rung's name (`compiler`, `specialist`, a tier name); set by the router.
        action: the answer's action; for an abstention, the rung's best legal candidate when it has
            one (below threshold) or the reply action it handed on, else None.
        arguments: the call's arguments (kind "call" only).
        text: the reply's text (kind "reply" only).
        confidence: the rung's confidence, when it reports one.
        cause: why the rung abstained (`CAUSES`); None for an answer.
        detail: the cause in words, or a note on an answer.
        latency_ms: wall-clock time of the rung (a cold load included).
        model: the model (or specialist) that answered.
        novelty: a specialist's distance of the state from its training data (None: not measured);
            past the specialist's cut it abstains with cause `novel`.
        residency: for a rung with residency (`Resident`): "warm" (it was loaded) or "cold" (this
            decision loaded it); None for other rungs.
        cold_ms: the cold load this decision paid, in milliseconds (residency "cold").
        margin, entropy: for a rung that scores every offered action (the scorer), the gap between its
            two most likely actions' probabilities and the entropy (nats) of its distribution over them:
            a small margin or a high entropy marks an unusual decision.
    """

    kind: str
    rung: str = ""
    action: str | None = None
    arguments: dict[str, Any] | None = None
    text: str | None = None
    confidence: float | None = None
    cause: str | None = None
    detail: str = ""
    latency_ms: float = 0.0
    model: str | None = None
    novelty: float | None = None
    residency: str | None = None
    cold_ms: float | None = None
    margin: float | None = None
    entropy: float | None = None

    @property
    def answered(self) -> bool:
        return self.kind != "abstain"

    @property
    def complete(self) -> bool:
        """A complete output: a checked call or a text reply (a bare name is not)."""
        return self.kind in ("call", "reply")

    @property
    def outcome(self) -> str:
        """answered | abstained | timeout | illegal | error | skipped | handed_on (as receipts say)."""
        if self.answered:
            return "answered"
        return "abstained" if self.cause in ("below_threshold", "novel", "declined") else str(self.cause)

    @property
    def tier(self) -> str:
        """The rung's name (the name receipts used before rungs had one protocol)."""
        return self.rung

    def to_dict(self) -> dict[str, Any]:
        kind = self.kind
        out: dict[str, Any] = {"tier": self.rung, "outcome": self.outcome if kind == "abstain"
                               else "answered", "kind": kind, "latency_ms": round(self.latency_ms, 3)}
        if self.action is not None:
            out["action"] = self.action
        if self.arguments is not None:
            out["arguments"] = self.arguments
        if self.text is not None:
            out["text"] = self.text
        if self.confidence is not None:
            out["confidence"] = self.confidence
        if self.cause is not None:
            out["cause"] = self.cause
        if self.model is not None:
            out["model"] = self.model
        if self.novelty is not None:
            out["novelty"] = self.novelty
        if self.detail:
            out["detail"] = self.detail
        if self.residency is not None:
            out["residency"] = self.residency
        if self.cold_ms is not None:
            out["cold_ms"] = round(self.cold_ms, 3)
        if self.margin is not None:
            out["margin"] = round(self.margin, 6)
        if self.entropy is not None:
            out["entropy"] = round(self.entropy, 6)
        return out


def abstain(cause: str, detail: str = "", *, action: str | None = None, confidence: float | None = None,
            model: str | None = None) -> Answer:
    return Answer("abstain", action=action, confidence=confidence, cause=cause, detail=detail, model=model)


def stamped(a: Answer, rung: str, latency_ms: float) -> Answer:
    """`a` with the rung's name and latency (dataclasses.replace, without its cost)."""
    return Answer(a.kind, rung, a.action, a.arguments, a.text, a.confidence, a.cause, a.detail, latency_ms,
                  a.model, a.novelty, a.residency, a.cold_ms, a.margin, a.entropy)


class Catalog:
    """What the rungs need to know about a policy's actions, computed once per router."""

    __slots__ = ("descriptions", "params", "replies", "tools")

    def __init__(self, policy: Any) -> None:
        actions = policy.ir.actions if policy is not None else ()
        self.replies = frozenset(a.name for a in actions if REPLY_TAG in a.tags)
        self.params: dict[str, tuple | None] = {a.name: a.params for a in actions}
        self.tools = policy_tools(policy) if policy is not None else {}
        self.descriptions = {name: t["description"] for name, t in self.tools.items()}


@dataclass(frozen=True, slots=True)
class Offered:
    """A legal set without a policy: the actions a decision offered (its receipt's `legal`)."""

    actions: tuple[str, ...]
    fallback: bool = False
    root: Any = None


@dataclass(frozen=True, slots=True)
class Step:
    """One decision as every rung sees it, validated once.

    Attributes:
        policy: the Policy (None only for a pairwise specialist evaluated without one).
        state: the state as the harness gave it.
        legal: its LegalSet (`legal.root` is the validated state: `Policy.check` takes it as is).
        intent: the active intent.
        tools: the tool schemas offered at this step, by name (None: none offered).
        catalog: the policy's action catalog.
        candidates: values seen before the decision that a call's arguments may copy
            (`zcompile.receipts.candidates`); specialists propose arguments from them.
        offer: the actions the harness can take at this step (its offered tools and, unless it
            asked for a tool call, its reply actions); None: every legal action. A rung answers
            only a legal action in the offer; features still read the whole legal set.
    """

    policy: Any
    state: Mapping[str, Any]
    legal: Any
    intent: str | None
    tools: Mapping[str, Mapping[str, Any]] | None
    catalog: Catalog
    candidates: tuple = ()
    offer: frozenset[str] | None = None

    def allows(self, action: str | None) -> bool:
        """Whether a rung may answer `action`: legal, and in the offer when there is one."""
        return action in self.legal.actions and (self.offer is None or action in self.offer)

    @property
    def choices(self) -> tuple[str, ...]:
        """The legal actions a rung may answer, in the legal set's order."""
        if self.offer is None:
            return self.legal.actions
        return tuple(a for a in self.legal.actions if a in self.offer)


@runtime_checkable
class Rung(Protocol):
    """A rung of the ladder: answer a Step within `timeout_s` seconds (None: no limit), or abstain.

    `writes_text`: whether the rung can write a text reply; a rung that cannot and chooses a reply
    action hands the decision on to the rungs that can.
    """

    name: str
    writes_text: bool

    def answer(self, step: Step, timeout_s: float | None) -> Answer: ...


_ENC = msgspec.json.Encoder()


def settle(step: Step, action: str | None, arguments: Any = None, text: str | None = None, *,
           confidence: float | None = None, model: str | None = None, detail: str = "") -> Answer:
    """The answer a rung gives when it proposes `action` (with `arguments`, or `text`): a checked
    call, a bare name, a text reply, or an abstention (outside the legal set, refused by
    `Policy.check`, arguments that are not JSON, a reply without text: handed on)."""
    if action is None:
        return abstain("declined", detail or "no action", confidence=confidence, model=model)
    if action not in step.legal.actions:
        return abstain("illegal", f"proposed `{action}` outside the legal set", confidence=confidence,
                       model=model)
    if step.offer is not None and action not in step.offer:
        return abstain("illegal", f"proposed `{action}`, which is legal but not offered at this step",
                       confidence=confidence, model=model)
    if action in step.catalog.replies:
        if text is None:
            return abstain("handed_on", "a text reply: handed on to a rung that writes text", action=action,
                           confidence=confidence, model=model)
        return Answer("reply", action=action, text=text, confidence=confidence, detail=detail, model=model)
    if step.catalog.params.get(action) is None:  # no signature: its arguments are unknown
        return Answer("name", action=action, confidence=confidence, detail=detail, model=model)
    if arguments is None:
        if step.catalog.params.get(action) != ():
            return Answer("name", action=action, confidence=confidence, detail=detail, model=model)
        arguments = {}  # the signature declares no argument: the name is the whole call
    if not isinstance(arguments, Mapping):
        return abstain("illegal", f"arguments of `{action}` are not an object", confidence=confidence,
                       model=model)
    try:  # plain JSON, so the receipt can always be written
        arguments = msgspec.json.decode(_ENC.encode(arguments))
    except (TypeError, ValueError, OverflowError, RecursionError, msgspec.MsgspecError) as exc:
        return abstain("error", f"arguments of `{action}` are not JSON: {exc}", confidence=confidence,
                       model=model)
    if step.policy is not None:
        verdict = step.policy.check(step.legal.root, action, arguments, step.intent)
        if not verdict.allowed:
            why = "; ".join(r.message for r in verdict.reasons[:3])
            return abstain("illegal", f"call refused by the policy: {why}", action=None,
                           confidence=confidence, model=model)
    return Answer("call", action=action, arguments=arguments, confidence=confidence, detail=detail,
                  model=model)


def bare(step: Step, action: str) -> str:
    """The kind of answer `action` alone is: "call" when its signature declares no argument, else "name"."""
    if action not in step.catalog.replies and step.catalog.params.get(action) == ():
        return "call"
    return "name"


@runtime_checkable
class Resident(Protocol):
    """A rung with residency: a model that must be loaded before it answers (`zcompile.tiers.LocalTier`).

    `resident`: loaded now; `cold_ms`: what a load costs (measured, else declared); `load(timeout_s)`
    loads it (blocking, at most `timeout_s`) and returns the milliseconds it took, raising ZcError when
    it cannot; `note_warm(ms)` records the latency of an answer given while resident."""

    @property
    def resident(self) -> bool: ...

    @property
    def cold_ms(self) -> float: ...

    def load(self, timeout_s: float | None = None) -> float: ...

    def note_warm(self, ms: float) -> None: ...


# ---- the compiler ------------------------------------------------------------------------------
class CompilerRung:
    """Rung 1: answers when exactly one legal action is offered (the fallback included)."""

    name = "compiler"
    writes_text = False

    def answer(self, step: Step, timeout_s: float | None) -> Answer:
        actions = step.choices
        if len(actions) != 1:
            return abstain("declined", f"{len(actions)} legal actions offered")
        note = "fallback: nothing else is legal" if step.legal.fallback else "single legal action"
        return settle(step, actions[0], confidence=1.0, detail=note)


# ---- specialists -------------------------------------------------------------------------------
class SpecialistRung:
    """The `specialist` rung: asks each specialist in order; the first that answers wins.

    A classifier (`zcompile.qroute.specialist.Specialist`) is asked `decide(state, legal)`; a
    pairwise one (`pairwise = True`) `decide(state, legal, tools)` with the step's offered tools,
    else the policy's action descriptions. Their answer (`.action`, `.confidence`, `.best`, and
    `.arguments` when the specialist proposes them) goes through `settle`: a specialist never
    writes text, so a reply action it picks is handed on.
    """

    writes_text = False

    def __init__(self, specialists: Sequence[Any], name: str = SPECIALIST) -> None:
        self.specialists = tuple(specialists)
        self.name = name

    def answer(self, step: Step, timeout_s: float | None) -> Answer:
        if not self.specialists:
            return abstain("skipped", "no specialist loaded")
        first = None
        for sp in self.specialists:
            ans = ask(sp, step)
            if ans.answered or ans.cause == "handed_on":
                return ans
            first = first or ans
        return first


def ask(sp: Any, step: Step) -> Answer:
    """One specialist's answer for a step, settled (its name is the answer's model)."""
    if getattr(sp, "pairwise", False):  # it scores the offered tools only
        raw = sp.decide(step.state, step.choices, step.tools if step.tools is not None
                        else step.catalog.tools)
    else:  # a zc Specialist takes the LegalSet itself: its validated state is not validated again
        given = step.legal if getattr(sp, "takes_legal_set", False) else step.legal.actions
        raw = (sp.decide(step.state, given, step.candidates) if step.candidates
               else sp.decide(step.state, given))
    conf = float(raw.confidence) if raw.confidence is not None else None
    novelty = getattr(raw, "novelty", None)
    if raw.action is None:
        best = raw.best if step.allows(raw.best) else None
        if getattr(raw, "novel", False):
            why = f"novelty {novelty:.4g} past the specialist's cut: unlike its training data"
            ans = abstain("novel", why, action=best, confidence=conf, model=sp.name)
        else:
            ans = abstain("below_threshold", "below threshold", action=best, confidence=conf, model=sp.name)
    else:
        ground = getattr(raw, "grounding", None)  # a call's arguments: typed by the user, or picked
        ans = settle(step, raw.action, getattr(raw, "arguments", None), confidence=conf, model=sp.name,
                     detail=f"arguments {ground}" if ground and ground != "bare" else "")
    return ans if novelty is None else replace(ans, novelty=float(novelty))


# ---- tiers that speak the older `propose` protocol ------------------------------------------------
class ProposeRung:
    """An object with `propose(state, legal, *, timeout_s, intent, descriptions)` returning a
    TierAnswer-like object (`outcome`, `action`, `confidence`, `detail`, `model`; `arguments` and
    `text` when it has them), as a rung."""

    def __init__(self, name: str, tier: Any) -> None:
        self.name = name
        self.tier = tier
        self.writes_text = bool(getattr(tier, "writes_text", False))

    def answer(self, step: Step, timeout_s: float | None) -> Answer:
        ans = self.tier.propose(step.state, step.choices, timeout_s=30.0 if timeout_s is None else timeout_s,
                                intent=step.intent, descriptions=step.catalog.descriptions or None)
        model = getattr(ans, "model", None) or getattr(self.tier, "model", None)
        if ans.outcome == "answered":
            return settle(step, ans.action, getattr(ans, "arguments", None), getattr(ans, "text", None),
                          confidence=ans.confidence, model=model, detail=ans.detail)
        cause = "declined" if ans.outcome == "abstained" else ans.outcome
        return abstain(cause if cause in CAUSES else "error", ans.detail, confidence=ans.confidence,
                       model=model)


def as_rung(name: str, tier: Any) -> Any:
    """A tier object as a rung: one that implements `Rung` as it is, else through `ProposeRung`."""
    return tier if isinstance(tier, Rung) else ProposeRung(name, tier)


def timed(rung: Any, name: str, step: Step, timeout_s: float | None) -> Answer:
    """Ask one rung; an exception becomes an `error` abstention (a rung must not take the harness down)."""
    started = time.perf_counter()
    try:
        ans = rung.answer(step, timeout_s)
    except Exception as exc:
        ans = abstain("error", f"{type(exc).__name__}: {exc}")
    if not isinstance(ans, Answer):
        ans = abstain("error", f"rung returned {type(ans).__name__}, not an Answer")
    return stamped(ans, name, (time.perf_counter() - started) * 1000)
