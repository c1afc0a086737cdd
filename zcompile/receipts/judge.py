"""The judge: which calls are acceptable at each logged decision of a conversation (strict, or a
side-effect-free call the teacher makes later).

A decision's **strict** answer is the teacher's own next step: the same action and, for a call, the
same arguments as canonical JSON. Its **acceptable** answers add the side-effect-free calls the
teacher makes later in the same conversation before its next other call: a call of an action tagged
`read` or `pure` (and not `write` or a risky tag), with equal arguments, that was not already made
earlier in the conversation. Replies between them do not end the run; any other call, an
abstention, or `LOOKAHEAD` decisions do. A write is only ever acceptable as the teacher's own call,
and a reply is right when the teacher replied with that action. A `gold` label replaces the
teacher's step and allows nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from .candidates import normalize

LENIENT_TAGS = frozenset({"read", "pure"})  # side-effect free: a later such call is acceptable now
NEVER_LENIENT = frozenset({"write", "destructive", "publish", "money", "credential"})
LOOKAHEAD = 100  # later decisions of a conversation read for one decision (fewer: never more lenient)
RULE = ("a call is acceptable when it is the teacher's next call (same action, arguments equal as "
        "canonical JSON), or when its action is tagged read or pure (never write or a risky tag) and "
        f"the teacher makes the same call later in the conversation, within {LOOKAHEAD} decisions and "
        "before its next call of any other action, having not made it earlier; a reply is right when "
        "the teacher replied")

Call = tuple[str, str | None]  # (action, canonical JSON of the arguments; None: unknown or a reply)


def lenient_actions(policy: Any) -> frozenset[str]:
    """The policy's side-effect-free actions: tagged `read` or `pure`, and none of NEVER_LENIENT."""
    if policy is None:
        return frozenset()
    return frozenset(a.name for a in policy.ir.actions
                     if LENIENT_TAGS & set(a.tags) and not NEVER_LENIENT & set(a.tags))


def canonical(arguments: Any) -> str | None:
    """The arguments as canonical JSON (`candidates.normalize`), None when unknown or not JSON."""
    if not isinstance(arguments, Mapping):
        return None
    try:
        return normalize(dict(arguments))
    except (TypeError, ValueError):
        return None


def conversation_of(receipt: Any) -> str:
    """The conversation a receipt belongs to: `meta.conversation` (chat imports), else its task."""
    conv = (receipt.meta or {}).get("conversation") if isinstance(receipt.meta, Mapping) else None
    return conv if isinstance(conv, str) else receipt.task


class Judge:
    """Acceptable calls for every decision added, once the whole conversation is known.

    `add` each logged step (in any order; `order` sorts a conversation), then `acceptable(id)`.
    Memory: one small tuple per step.
    """

    def __init__(self, lenient: Iterable[str] = (), replies: Iterable[str] = ()) -> None:
        self.lenient, self.replies = frozenset(lenient), frozenset(replies)
        self._steps: dict[str, list[tuple[Any, Any, str | None, str | None, str | None, bool]]] = {}
        self._done: dict[Any, tuple[Call, ...]] | None = None

    def add(self, conversation: str, order: Any, key: Any, action: str | None, arguments: Any,
            gold: str | None = None) -> None:
        """One step: its conversation, its place in it, a key naming it (hashable), the action taken
        and its arguments (None: unknown, which the teacher's own call reads as no arguments, as
        `candidates.same_call` does); `gold`: the judged right action, which replaces the
        teacher's and allows nothing else."""
        if gold is not None and gold != action:
            action, arguments = gold, None
        reply = action in self.replies
        own = None if reply else canonical(arguments if arguments is not None else {})
        known = None if reply else canonical(arguments)
        self._steps.setdefault(conversation, []).append((order, key, action, own, known, gold is not None))
        self._done = None

    def add_receipt(self, r: Any, position: int, key: Any, arguments: Any) -> None:
        """`add` for receipt `r`, the `position`-th read: its conversation (`conversation_of`), its
        place (timestamp, else position), its action, `arguments` and gold."""
        self.add(conversation_of(r), (r.ts if r.ts is not None else math.inf, position), key, r.action,
                 arguments, r.gold)

    def acceptable(self, key: Any) -> tuple[Call, ...]:
        """The calls acceptable at step `key`, the teacher's own first; () for an unknown key."""
        if self._done is None:
            self._done = {}
            for steps in self._steps.values():
                steps.sort(key=lambda s: s[0])
                self._done.update(self._judge(steps))
        return self._done.get(key, ())

    def _judge(self, steps: list) -> Iterable[tuple[Any, tuple[Call, ...]]]:
        made: set[Call] = set()
        for p, (_, key, action, args, known, gold) in enumerate(steps):
            if action is None:
                yield key, ()
                continue
            own: Call = (action, args)
            out = [own]
            if not gold and (action in self.replies or action in self.lenient):
                for _, _, a, _, c, later_gold in steps[p + 1:p + 1 + LOOKAHEAD]:
                    if a in self.replies and not later_gold:
                        continue
                    if a is None or a not in self.lenient or later_gold:
                        break
                    if c is not None and (a, c) not in made and (a, c) not in out:
                        out.append((a, c))
            if known is not None:
                made.add((action, known))
            yield key, tuple(out)


def accepts(acceptable: tuple[Call, ...], action: str | None, arguments: Any, replies: frozenset[str],
            *, names: bool = False) -> bool:
    """Whether an answer is among the acceptable calls: a reply by its action; a call by its action
    and canonical arguments (unknown arguments never match); `names`: by action only."""
    if action is None:
        return False
    if names or action in replies:
        return any(a == action for a, _ in acceptable)
    c = canonical(arguments if arguments is not None else {})
    return c is not None and any(a == action and k == c for a, k in acceptable)


def strict(acceptable: tuple[Call, ...], action: str | None, arguments: Any, replies: frozenset[str],
           *, names: bool = False) -> bool:
    """`accepts` against the teacher's own step only."""
    return accepts(acceptable[:1], action, arguments, replies, names=names)
