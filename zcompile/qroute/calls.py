"""Complete calls: an action's signature as a JSON schema, text replies (`reply` tag), call outputs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..receipts.judge import accepts, strict
from ..tools import REPLY_TAG, signature_schema

if TYPE_CHECKING:
    from ..runtime import Policy


def params_schema(action: Any) -> dict[str, Any] | None:
    """The JSON-schema `parameters` object of an `ir.ActionDef` (None: no signature)."""
    return None if action.params is None else signature_schema(action.params)


class Signatures:
    """What a policy says about calls: which actions are text replies, which take which arguments."""

    def __init__(self, policy: Policy | None) -> None:
        actions = policy.ir.actions if policy is not None else ()
        self.replies = frozenset(a.name for a in actions if REPLY_TAG in a.tags)
        self.params = {a.name: params_schema(a) for a in actions}

    def is_reply(self, action: str | None) -> bool:
        return action in self.replies

    def needs_arguments(self, action: str | None) -> bool:
        schema = self.params.get(action)
        return bool(schema and schema["properties"])

    def signed(self, action: str | None) -> bool:
        """Whether the action declares a signature (without one its arguments are unknown)."""
        return self.params.get(action) is not None

    @property
    def any(self) -> bool:
        """Whether the policy says anything about calls (replies or signatures)."""
        return bool(self.replies) or any(p is not None for p in self.params.values())


class CallOutputs:
    """What a specialist would output for each decision, by kind: `call` (a complete call, its
    arguments proposed), `reply` (a text reply: handed to a text tier), `name` (a call whose
    arguments could not be completed: never answered), None (nothing legal it knows)."""

    def __init__(self, n: int) -> None:
        self.kind: list[str | None] = [None] * n
        self.arguments: list[dict | None] = [None] * n
        self.raw = [0.0] * n  # name confidence × argument confidence, before the call calibration
        self.correct = [False] * n  # acceptable (`receipts.judge`)
        self.strict = [False] * n  # equal to the teacher's own step


def call_outputs(best: list[str | None], conf: Any, decisions: list, sig: Signatures,
                 propose: Any) -> CallOutputs:
    """Each decision's output kind, raw confidence and correctness; `propose(i, action)` returns the
    argument proposal (`arguments.Proposal`) for decision i, or None when there is no argument model."""
    out = CallOutputs(len(best))
    for i, (b, c, d) in enumerate(zip(best, conf, decisions)):
        if b is None:
            continue
        if sig.is_reply(b):
            out.kind[i], out.raw[i] = "reply", float(c)
        elif not sig.signed(b):
            out.kind[i] = "name"  # its arguments are unknown: never a complete call
            continue
        elif not sig.needs_arguments(b):
            out.kind[i], out.arguments[i], out.raw[i] = "call", {}, float(c)
        else:
            prop = propose(i, b)
            if prop is None or prop.arguments is None:
                out.kind[i] = "name"
                continue
            out.kind[i], out.arguments[i], out.raw[i] = "call", prop.arguments, float(c) * prop.confidence
        out.correct[i] = accepts(d.acceptable, b, out.arguments[i], sig.replies)
        out.strict[i] = strict(d.acceptable, b, out.arguments[i], sig.replies)
    return out


def argument_examples(decisions: list, sig: Signatures) -> list:
    """The argument model's training rows: every argument of every target call with arguments (the
    teacher's, or the acceptable call training learns instead: `dataset.targets`)."""
    from .arguments import call_examples

    rows = []
    for d in decisions:
        if d.target is not None and d.target_arguments is not None and sig.needs_arguments(d.target):
            rows += call_examples(d.target, sig.params[d.target], d.candidates, d.target_arguments, d.task)
    return rows


def fit_arguments(rows: list, seed: int = 0) -> Any:
    """An argument model fit on teacher calls' arguments (`argument_examples`; None when there are
    none to learn from); above `arguments.MAX_ROWS` candidates, on a sample seeded by `seed`
    (`ArgumentModel.sampled_`)."""
    from . import arguments as argmodel

    if not any(e.candidates for e in rows):
        return None
    try:
        return argmodel.ArgumentModel(seed=seed, max_rows=argmodel.MAX_ROWS).fit(rows)
    except ValueError:  # no right (or no wrong) candidate among them: nothing to learn
        return None
