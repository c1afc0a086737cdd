"""Runtime: the IR of an artifact to a fast evaluator, state -> LegalSet. No compiler imports.

At load the IR is verified (verify.py; not the IR the compiler has just lowered), every rule is
specialised per target action (`self` and `cost` become constants), actions whose residual
conditions are equal share a group, and the whole policy becomes one generated Python function
(codegen.py) that tests each distinct condition once, in Kleene logic, and flags the actions of
the groups that fire as removed.
Reasons are assembled lazily from the groups that fired.

Rules that read the proposed call's arguments (`args.*`) are left out of that function: `legal`
cannot know arguments. `check(state, action, args)` judges one proposed call: the argument schema,
the legal set, and those rules, generated into one small function per action.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import compress
from pathlib import Path
from typing import Any

import msgspec

from . import codegen, ir
from .errors import ZcError, did_you_mean
from .inputs import json_type, read_file
from .kinds import NUMBERS, FieldKind, RuleKind
from .state import Schema, number_problem, read_path
from .verify import verify

MAX_SHOWN = 160  # a longer condition is cut in reason messages (its span points at the whole rule)

_json_type = functools.partial(json_type, integers=True)  # errors here name an int `an integer`


@dataclass(frozen=True, slots=True)
class Reason:
    """Why one action was removed: the rule, its kind and span, the deciding values, a message."""

    rule: str  # rule name, or "intent" for default-deny outside the active intent
    kind: str  # requires | forbid_when | forbid_unless | after | intent
    message: str
    span: ir.SpanDef | None
    values: tuple[tuple[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "kind": self.kind, "message": self.message,
                "span": msgspec.to_builtins(self.span) if self.span else None,
                "values": {k: _show(v) for k, v in self.values}}


@dataclass(frozen=True, slots=True)
class Verdict:
    """The judgement of one proposed call: allowed, or every reason it is not."""

    action: str
    allowed: bool
    reasons: tuple[Reason, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "allowed": self.allowed,
                "reasons": [r.to_dict() for r in self.reasons]}


class LegalSet:
    """The legal actions for one state, with every reason each other action was removed."""

    __slots__ = ("_policy", "_root", "_fired", "_intent", "actions", "fallback", "_reasons")

    def __init__(self, policy: Policy, root: Any, fired: list[int], intent: str | None,
                 actions: tuple[str, ...], fallback: bool) -> None:
        self._policy, self._root, self._fired, self._intent = policy, root, fired, intent
        self.actions = actions
        self.fallback = fallback
        self._reasons: dict[str, tuple[Reason, ...]] | None = None

    def __contains__(self, action: str) -> bool:
        return action in self.actions

    def __iter__(self) -> Iterator[str]:
        return iter(self.actions)

    def __len__(self) -> int:
        return len(self.actions)

    def __repr__(self) -> str:
        return f"LegalSet(actions={self.actions!r}, fallback={self.fallback})"

    @property
    def policy(self) -> Policy:
        """The policy that computed this set."""
        return self._policy

    @property
    def root(self) -> Any:
        """The validated state this set was computed from (pass it on instead of validating again)."""
        return self._root

    @property
    def removed(self) -> Mapping[str, tuple[Reason, ...]]:
        """Each action not in `actions`, mapped to every reason it was removed (computed once)."""
        if self._reasons is None:
            legal = set(self.actions)
            self._reasons = self._policy._explain(
                self._root, self._fired, self._intent,
                [a for a in self._policy.actions if a not in legal])
        return self._reasons

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self._policy.name, "legal": list(self.actions), "fallback": self.fallback,
                "removed": {a: [r.to_dict() for r in rs] for a, rs in self.removed.items()}}


class Policy:
    """A loaded policy: `legal(state, intent)` answers which actions are legal and why not."""

    def __init__(self, policy: ir.PolicyIR) -> None:
        with ir.no_gc():
            verify(policy)
            self._setup(policy)

    @classmethod
    def _of_lowered(cls, policy: ir.PolicyIR) -> Policy:
        """The Policy of IR that the compiler has just lowered from checked source, not verified
        again: its IR passes `verify` by construction (tests/test_differential.py and
        tests/test_golden_ok.py hold it to that). IR from anywhere else goes through `Policy(ir)`."""
        self = cls.__new__(cls)
        with ir.no_gc():
            self._setup(policy)
        return self

    def _setup(self, policy: ir.PolicyIR) -> None:
        self.ir = policy
        self.name = policy.name
        self.actions = tuple(a.name for a in policy.actions)
        self._index = {a: i for i, a in enumerate(self.actions)}
        self._intents = {i.name: frozenset(self._index[a] for a in i.allow) for i in policy.intents}
        self._fallback = policy.fallback
        self._fields = {f.path: f for f in policy.fields}
        self._schemas = {s: Schema(policy.fields, self.actions, s) for s in (False, True)}
        self._action_evals: dict[str, tuple[Callable[..., Any], tuple[int, ...]]] = {}
        self._arg_rules = frozenset(i for i, r in enumerate(policy.rules) if r.args)
        self._program = codegen.legal_program(
            policy, codegen.Gen(self._fields, self._schemas[False].attrs), self._index,
            self._arg_rules)
        self._groups = self._program.groups
        # per intent (None: all actions): 1 for each action removed before any rule is evaluated,
        # because it is outside the intent or a constant rule removes it; copied per evaluation.
        # An intent's flags are made on its first use: n bytes each, so making all of them at load
        # would cost actions x intents
        self._base: dict[str | None, bytes] = {None: _flags(len(self.actions), self._program.static)}
        namespace = codegen.load(self._program.source, self._program.gen.consts, self._label())
        self._eval, self._route = namespace["_eval"], namespace["_route"]
        self._params = {a.name: ({p.name: p for p in a.params} if a.params is not None else None)
                        for a in policy.actions}
        self._checks: dict[str, tuple[Callable[..., Any], tuple[int, ...]]] = {}
        self._reads_cost: dict[str, bool] = {}  # rule name -> its condition reads `cost`

    @functools.cached_property
    def sha256(self) -> str:
        """The policy's identity (`ir.identity`), computed on first use."""
        return ir.identity(self.ir)

    @property
    def intents(self) -> tuple[str, ...]:
        return tuple(self._intents)

    # ---- evaluation --------------------------------------------------------------------------
    def legal(self, state: Any, intent: str | None = None, *, strict: bool = False) -> LegalSet:
        """Validate `state` and return its LegalSet; `strict` rejects unknown keys.

        Raises:
            StateError: the state does not match the schema (message starts with its `$.path`).
            ZcError: `intent` is not declared by the policy.
        """
        root = self._schemas[strict].convert(state)
        removed = bytearray(self._universe(intent))
        fired = self._eval(root, removed)
        legal = tuple(compress(self.actions, removed.translate(_FLIP)))
        if legal:
            return LegalSet(self, root, fired, intent, legal, False)
        return LegalSet(self, root, fired, intent, (self._fallback,), True)

    def check(self, state: Any, action: str, args: Mapping[str, Any] | None = None,
              intent: str | None = None, *, strict: bool = False) -> Verdict:
        """Judge one proposed call: `action` with `args` in `state` (under `intent`).

        Reasons, in this order: the arguments against the action's signature (kind `schema`:
        missing required, wrong type, unknown argument), why `legal(state, intent)` removed the
        action, and every rule reading `args.*` whose condition goes against the call. An argument
        that is missing or has the wrong type is unknown to the rules, so it never makes a call
        allowed (fail closed). Actions without a signature take any arguments.

        Raises:
            StateError: the state does not match the schema.
            ZcError: `action` or `intent` is not declared by the policy, or `args` is not an object.
        """
        if not isinstance(action, str):
            raise ZcError(f"the action to check must be a string naming an action, got {_json_type(action)}")
        if action not in self._index:
            hint = did_you_mean(action, self.actions) or "not declared by the policy"
            raise ZcError(f"unknown action `{action}` ({hint})")
        if args is None:
            args = {}
        if not isinstance(args, Mapping):
            raise ZcError(f"arguments of `{action}` must be an object, got {_json_type(args)}")
        reasons, values = self._schema(action, args)
        root = self._schemas[strict].convert(state)
        base = self._universe(intent)
        evaluate, groups = self._action_eval(action)
        removed = bytearray(base)
        fired = evaluate(root, removed)
        if removed[self._index[action]]:
            if action == self._fallback:  # legal anyway when every other action is removed too
                removed = bytearray(base)
                fired = self._eval(root, removed)
                if 0 not in removed:
                    fired = None
            if fired is not None:
                reasons.extend(self._explain(root, fired, intent, [action], groups)[action])
        fn, rules = self._check_fn(action)
        if rules:
            fired_args = fn(root, values)
            for j, ri in enumerate(rules):
                if fired_args >> j & 1:
                    reasons.append(self._arg_reason(self.ir.rules[ri], action, root, values))
        return Verdict(action, not reasons, tuple(reasons))

    def filter_tools(self, tools: Any, state: Any, intent: str | None = None) -> list[Any]:
        """The legal subset of an OpenAI `tools` array, in its order, for a harness that embeds zc.

        A tool is kept when its name (`function.name`, or `name` for a flat schema) is an action
        legal in `state` under `intent`; a tool the policy does not declare is dropped (fail
        closed). The entries kept are the given objects, unchanged.

        Raises:
            ZcError: `tools` is not an array of tool objects with a string name (the message names
                the `$.tools[i]` path).
            StateError: the state does not match the schema.
        """
        if not isinstance(tools, (list, tuple)):
            raise ZcError(f"$.tools: expected an array of tools, got {_json_type(tools)}")
        names = [tool_name(t, f"$.tools[{i}]") for i, t in enumerate(tools)]
        legal = set(self.legal(state, intent).actions)
        return [t for t, n in zip(tools, names) if n in legal]

    def _action_eval(self, action: str) -> tuple[Callable[..., Any], tuple[int, ...]]:
        """(the generated evaluator restricted to the groups that can remove `action`, returning
        (fired, removed) like the whole one; the indices of those groups). Made on first use."""
        got = self._action_evals.get(action)
        if got is None:
            src, groups = self._program.restricted(self._index[action])
            namespace = codegen.load(src, self._program.gen.consts, self._label(action))
            got = self._action_evals[action] = (namespace["_eval"], groups)
        return got

    def _schema(self, action: str, args: Mapping[str, Any]) -> tuple[list[Reason], dict[str, Any]]:
        """Schema reasons, and the argument values the rules may read (bad ones as unknown)."""
        params = self._params[action]
        if params is None:
            return [], dict(args)
        reasons: list[Reason] = []
        values: dict[str, Any] = {}
        for name, p in params.items():
            v = args.get(name)
            if v is None:
                if not p.optional:
                    reasons.append(_schema_reason(action, name, f"missing required argument `{name}`"))
                continue
            problem = _type_problem(p, v)
            if problem:
                reasons.append(_schema_reason(action, name, problem, v))
            else:
                values[name] = v
        for name in args:
            if name not in params:
                hint = did_you_mean(str(name), params)
                reasons.append(_schema_reason(
                    action, str(name), f"unknown argument `{name}`" + (f" ({hint})" if hint else
                    f" (`{action}` takes " + (", ".join(f"`{p}`" for p in params) or "none") + ")"),
                    args[name]))
        return reasons, values

    def _check_fn(self, action: str) -> tuple[Callable[..., Any], tuple[int, ...]]:
        """(generated function, rule indices) judging the argument rules that target `action`."""
        got = self._checks.get(action)
        if got is None:
            rules = tuple(ri for ri in sorted(self._arg_rules) if action in self.ir.rules[ri].targets)
            gen = codegen.Gen(self._fields, self._schemas[False].attrs)
            src = codegen.check_program(self.ir, gen, self.ir.actions[self._index[action]], rules)
            fn = codegen.load(src, gen.consts, self._label(action))["_check"]
            got = self._checks[action] = (fn, rules)
        return got

    def _arg_reason(self, rule: ir.RuleDef, action: str, root: Any, args: dict[str, Any]) -> Reason:
        values = tuple((p, read_path(self._schemas[False], root, p)) for p in rule.reads)
        values += tuple((f"args.{n}", args.get(n)) for n in rule.args)
        return self._reason(rule, action, values)

    def route(self, state: Any, *, strict: bool = False) -> ir.RouteDef | None:
        """The first route whose `when` definitely holds (routes without `when` always hold)."""
        return self._route_root(self._schemas[strict].convert(state))

    def route_of(self, legal: LegalSet) -> ir.RouteDef | None:
        """`route` for the state a LegalSet was computed from (validated once, not twice)."""
        return self._route_root(legal._root)

    def _route_root(self, root: Any) -> ir.RouteDef | None:
        index = self._route(root)
        return None if index < 0 else self.ir.routes[index]

    def _universe(self, intent: str | None) -> bytes:
        """The removed-before-evaluation flags of an intent (see `_base`)."""
        if intent is None:
            return self._base[None]
        if not isinstance(intent, str):
            raise ZcError(f"intent must be a string naming an intent, got {_json_type(intent)}")
        base = self._base.get(intent)
        if base is not None:
            return base
        allowed = self._intents.get(intent)
        if allowed is None:
            hint = did_you_mean(intent, self._intents) or (
                f"declared intents: {', '.join(self._intents)}" if self._intents else
                "this policy declares no intents")
            raise ZcError(f"unknown intent `{intent}` ({hint})")
        flags = bytearray(b"\x01") * len(self.actions)
        for i in allowed:
            flags[i] = 0
        for i in self._program.static:
            flags[i] = 1
        base = self._base[intent] = bytes(flags)  # two threads may both make it: the same bytes
        return base

    # ---- reasons -------------------------------------------------------------------------------
    def _explain(self, root: Any, fired: list[int], intent: str | None,
                 removed: list[str], groups: Iterable[int] | None = None) -> dict[str, tuple[Reason, ...]]:
        """Every reason each action of `removed` was removed; `fired`: the groups that fired;
        `groups`: the indices of the groups to look at (default: all)."""
        reasons: dict[str, list[Reason]] = {a: [] for a in removed}
        if not reasons:
            return {}
        if intent is not None:
            allowed = self._intents[intent]
            for a in reasons:
                if self._index[a] not in allowed:
                    reasons[a].append(Reason("intent", "intent",
                                             f"not allowed by intent `{intent}`", None))
        want = {self._index[a] for a in reasons}
        fired_rules: dict[int, set[int]] = {}
        fired_set = set(fired)
        for g in range(len(self._groups)) if groups is None else groups:
            group = self._groups[g]
            if g not in fired_set and group.rule > 0:
                continue
            hit = want.intersection(group.targets)
            if hit:
                fired_rules.setdefault(abs(group.rule), set()).update(hit)
        for ri, hit in sorted(fired_rules.items()):
            rule = self.ir.rules[ri - 1]
            values = tuple((p, read_path(self._schemas[False], root, p)) for p in rule.reads)
            for i in sorted(hit):
                a = self.actions[i]
                reasons[a].append(self._reason(rule, a, values))
        return {a: tuple(rs) for a, rs in reasons.items()}

    def _reason(self, rule: ir.RuleDef, action: str, values: tuple[tuple[str, Any], ...]) -> Reason:
        cost = self.ir.actions[self._index[action]].cost
        reads_cost = self._reads_cost.get(rule.name)
        if reads_cost is None:
            reads_cost = self._reads_cost[rule.name] = rule.cond is not None and ir.holds(rule.cond, ir.Cost)
        if reads_cost:
            values = values + (("cost", cost),)
        shown = ", ".join(f"{k} = {_show(v)}" for k, v in values)
        if rule.kind == RuleKind.AFTER:
            history = dict(values).get("history") or frozenset()
            missing = [a for a in rule.after if a not in history]
            msg = f"`{action}` must come after {', '.join(f'`{m}`' for m in missing)}"
            values = (("history", history),)
        else:
            verb = {"requires": "requires", "forbid_when": "is forbidden when",
                    "forbid_unless": "is forbidden unless"}[rule.kind]
            text = rule.text if len(rule.text) <= MAX_SHOWN else rule.text[:MAX_SHOWN - 1] + "…"
            msg = f"`{action}` {verb} `{text}`" + (f" ({shown})" if shown else "")
        return Reason(rule.name, rule.kind, msg, rule.span, values)

    def _label(self, action: str | None = None) -> str:
        return f"<zc policy {self.name}" + (f": {action}>" if action else ">")


_FLIP = bytes([1, 0]) + bytes(254)  # removed flag -> legal flag


def _flags(n: int, on: Iterable[int]) -> bytes:
    """n bytes, 1 at the indices in `on`."""
    out = bytearray(n)
    for i in on:
        out[i] = 1
    return bytes(out)


def tool_name(tool: Any, path: str = "$.tools[0]") -> str:
    """The name of an OpenAI tool (`{"type": "function", "function": {"name": …}}`, or a flat
    `{"name": …}` schema); anything else is refused naming `path`."""
    fn = tool.get("function") if isinstance(tool, Mapping) and "function" in tool else tool
    name = fn.get("name") if isinstance(fn, Mapping) else None
    if not isinstance(name, str):
        raise ZcError(f"{path}: expected a tool object with a string `function.name`, got "
                      + (_json_type(tool) if not isinstance(tool, Mapping) else "no name"))
    return name


def _schema_reason(action: str, arg: str, problem: str, value: Any = None) -> Reason:
    msg = f"`{action}`: {problem}" if problem.startswith(("missing", "unknown")) else \
        f"`{action}`: argument `{arg}`: {problem}"
    return Reason("schema", "schema", msg, None,
                  ((f"args.{arg}", value),) if value is not None else ())


def _type_problem(p: ir.ParamDef, v: Any) -> str | None:
    """What is wrong with argument value `v` for parameter `p` (None: nothing)."""
    ok = {"bool": isinstance(v, bool),
          "int": isinstance(v, int) and not isinstance(v, bool),
          "float": isinstance(v, (int, float)) and not isinstance(v, bool),
          "text": isinstance(v, str),
          "list": isinstance(v, (list, tuple)),
          "enum": isinstance(v, str) and v in p.members}[p.kind]
    if ok:
        return number_problem(v) if p.kind in NUMBERS else None
    if p.kind == FieldKind.ENUM:
        shown = "|".join(p.members[:12]) + ("|…" if len(p.members) > 12 else "")
        got = msgspec.json.encode(v).decode() if isinstance(v, str) else _json_type(v)
        return f"expected one of {shown}, got {got}"
    want = {"bool": "a boolean", "int": "an integer", "float": "a number", "text": "a string",
            "list": "an array"}[p.kind]
    return f"expected {want}, got {_json_type(v)}"


def _show(v: Any) -> Any:
    if v is None:
        return "absent"
    if isinstance(v, (list, tuple)):
        return f"[{len(v)} item{'' if len(v) == 1 else 's'}]"
    if isinstance(v, frozenset):
        return "{" + ", ".join(sorted(v)) + "}"
    if isinstance(v, bool):
        return "true" if v else "false"
    return v


def load(path: str | Path) -> Policy:
    """Load a compiled `.zcp` artifact (hash and version verified).

    Raises:
        ZcError: the file is missing, not an artifact, tampered with, or of a newer format.
    """
    policy, _ = ir.loads(read_file(path, "artifact"), str(path))
    return Policy(policy)
