"""`zc test`: policy unit tests (`*.test.yaml` / `*.test.json`), their runner and rule coverage."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from . import ast as A
from . import interp
from .checked import Checked
from .errors import ZcError, did_you_mean
from .inputs import files_under, read_file
from .kinds import FieldKind, RuleKind
from .runtime import Policy
from .state import StateError
from .yamldoc import Refused, compose, locate

VERSION = 1
SUFFIXES = (".test.yaml", ".test.yml", ".test.json")


# ---- the format ------------------------------------------------------------------------------
class Call(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A proposed call: the action and its arguments."""

    name: str
    arguments: dict[str, Any] = {}


class Case(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One test case: a state (and intent), then either the expected legal set or a call's verdict.

    A legal-set case gives `legal` (the set of legal actions, order free) and optionally `fallback`
    and `removed` (for each action listed, exactly the rules that remove it; `intent` for one
    outside the intent's `allow`; actions not listed are not checked). A call case gives
    `call` and `allowed`, and optionally `reasons` (every rule that blocks it, exactly; `schema` for
    a signature mismatch).
    """

    name: str
    state: dict[str, Any]
    intent: str | None = None
    legal: list[str] | None = None
    fallback: bool | None = None
    removed: dict[str, list[str]] | None = None
    call: Call | None = None
    allowed: bool | None = None
    reasons: list[str] | None = None


class Suite(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A test file: its format version, the policy it tests (default: the `.zc` of the same stem
    beside it) and its cases."""

    version: int
    cases: list[Case]
    policy: str | None = None


@dataclass(frozen=True, slots=True)
class LoadedSuite:
    """A validated test file: where it is, the policy it tests, its cases and their lines."""

    path: Path
    policy: Path
    cases: tuple[Case, ...]
    lines: tuple[int | None, ...]  # 1-based line of each case, when known
    node: Any = field(default=None, compare=False, repr=False)  # the YAML node tree, when parsed

    def where(self, at: str) -> str:
        """`file:line:column` of the value at a `$.cases[0].state.x` path (as deep as it goes)."""
        spot = locate(self.node, at) if self.node is not None else None
        return f"{self.path}:{spot[0]}:{spot[1]}" if spot else str(self.path)


# ---- reading ---------------------------------------------------------------------------------
def _problem(path: Path, node, at: str, problem: str) -> ZcError:
    where = locate(node, at) if node is not None else None
    loc = f"{path}:{where[0]}:{where[1]}" if where else str(path)
    return ZcError(f"{loc}: {at}: {problem}")


def load_suite(path: str | Path, text: str | None = None) -> LoadedSuite:
    """Read (or take the `text` of) and validate a test file; ZcError naming the file, line and
    `$.path` otherwise."""
    p = Path(path)
    if text is None:
        try:  # a regular file only (a FIFO would block), of bounded size
            text = read_file(p, "test file").decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ZcError(f"{p}: test file is not UTF-8 text (byte {exc.start})") from None
    if p.name.endswith(".json"):
        try:
            data = msgspec.json.decode(text.encode("utf-8"))
        except msgspec.DecodeError as exc:
            m = re.search(r"\(byte (\d+)\)", str(exc))
            if m:
                head = text.encode("utf-8")[: int(m.group(1))]
                line, col = head.count(b"\n") + 1, len(head) - (head.rfind(b"\n") + 1) + 1
                raise ZcError(f"{p}:{line}:{col}: invalid JSON: {str(exc).split(' (byte')[0]}") from None
            raise ZcError(f"{p}: invalid JSON: {exc}") from None
        except RecursionError:
            raise ZcError(f"{p}: the document is nested too deeply") from None
        try:  # JSON is (almost) YAML: the node tree gives line numbers to validation errors
            node = compose(text, str(p))[1]
        except Refused:  # a duplicate key: JSON decoding kept the last one silently
            raise
        except ZcError:
            node = None
    else:
        data, node = compose(text, str(p))
    try:
        suite = msgspec.convert(data, Suite)
    except msgspec.ValidationError as exc:
        msg, _, at = str(exc).rpartition(" - at `")
        at, msg = (at.rstrip("`"), msg) if msg else ("$", str(exc))
        msg = msg[0].lower() + msg[1:].replace(" | null`", "`")
        unknown = re.fullmatch(r"object contains unknown field `(.*)`", msg)
        if unknown:  # at the key itself, with the keys its object takes
            known = (Call if at.endswith(".call") else Case if at.endswith("]") else Suite).__struct_fields__
            hint = did_you_mean(unknown.group(1), known)
            at, msg = f"{at}.{unknown.group(1)}", "unknown key" + (f" ({hint})" if hint else
                                                                  " (a "
                                                                  f"{'case' if at.endswith(']') else 'file'} "
                                                                  f"takes {', '.join(known)})")
        raise _problem(p, node, at, msg) from None
    if suite.version != VERSION:
        raise _problem(p, node, "$.version", f"unsupported test file version {suite.version} "
                                             f"(this zc reads version {VERSION})")
    names: set[str] = set()
    for i, case in enumerate(suite.cases):
        at = f"$.cases[{i}]"
        if (case.legal is None) == (case.call is None):
            raise _problem(p, node, at, "a case gives either `legal` (the expected legal set) or "
                                        "`call` (a proposed call) and `allowed`")
        if case.call is not None and case.allowed is None:
            raise _problem(p, node, at + ".call", "a call case needs `allowed: true|false`")
        for key, wrong in (("fallback", case.call is not None), ("removed", case.call is not None),
                           ("allowed", case.legal is not None), ("reasons", case.legal is not None)):
            if wrong and getattr(case, key) is not None:
                kind = "call" if case.call is not None else "legal-set"
                raise _problem(p, node, f"{at}.{key}", f"`{key}` does not belong in a {kind} case")
        if case.name in names:
            raise _problem(p, node, f"{at}.name", f"duplicate case name `{case.name}`")
        names.add(case.name)
    stem = p.name[: -len(next(s for s in SUFFIXES if p.name.endswith(s)))] \
        if p.name.endswith(SUFFIXES) else p.stem
    policy = (p.parent / suite.policy) if suite.policy else p.parent / f"{stem}.zc"
    if policy.suffix != ".zc":  # an artifact has no source to place reasons and coverage on
        raise _problem(p, node, "$.policy", f"`{suite.policy}` is not a policy source: name the `.zc` "
                                            "file (zc test compiles it)")
    if not policy.exists():
        raise _problem(p, node, "$.policy" if suite.policy else "$",
                       f"policy `{policy}` not found" + ("" if suite.policy else
                                                         " (name it with `policy:`)"))
    lines = tuple(locate(node, f"$.cases[{i}]")[0] if node is not None else None
                  for i in range(len(suite.cases)))
    return LoadedSuite(p, policy, tuple(suite.cases), lines, node)


def suite_files(paths: Iterable[str | Path]) -> list[Path]:
    """Expand directories to the test files inside them (sorted), and a policy to its own."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = files_under(p, lambda name: name.endswith(SUFFIXES))
            if not found:
                raise ZcError(f"{p}: no test files (`*.test.yaml`, `*.test.json`) in this directory")
            out.extend(found)
        elif p.is_file() and p.suffix == ".zc":  # a policy: the test files beside it
            found = [p.with_name(p.stem + s) for s in SUFFIXES if p.with_name(p.stem + s).is_file()]
            if not found:
                raise ZcError(f"{p}: no test file beside this policy (`{p.stem}.test.yaml`)")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        elif p.exists():
            raise ZcError(f"{p}: not a regular file, a directory or a policy")
        else:
            raise ZcError(f"{p}: no such file or directory")
    return out


# ---- running ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CaseResult:
    """The outcome of one case: passed, or the differences (and errors) that failed it; `at` is the
    `$.path` of the value that makes the case itself wrong (an unknown name, an invalid state)."""

    name: str
    passed: bool
    diff: tuple[str, ...] = ()
    seconds: float = 0.0
    at: str | None = None


@dataclass(slots=True)
class Compiled:
    """A policy compiled for testing: the runtime, the checked AST (for coverage) and its source."""

    policy: Policy
    checked: Any
    path: Path


def compile_policy(path: Path) -> Compiled:
    """Compile a policy for its tests; ZcError (with its diagnostics) when it has errors."""
    from .driver import check_source, read_source
    from .lower import lower

    source = read_source(path)
    checked = check_source(source, lints=False)  # `zc test` shows no warnings
    return Compiled(Policy(lower(checked, source)), checked, path)


def _why(reasons) -> str:
    return "; ".join(f"`{r.rule}`: {r.message}" for r in reasons) or "no reason"


def run_case(compiled: Compiled, case: Case, at: str = "$") -> CaseResult:
    """Run one case (`at`: its `$.cases[i]` path in its file) against a compiled policy."""
    t0 = time.perf_counter()
    wrong = (_flat_keys(case.state, set(compiled.checked.fields), at + ".state")
             + _unknown_names(compiled, case, at))
    if not wrong:
        try:
            diff = _legal_diff(compiled.policy, case) if case.legal is not None \
                else _call_diff(compiled.policy, case)
            return CaseResult(case.name, not diff, tuple(diff), time.perf_counter() - t0)
        except StateError as exc:  # the case's state does not match the schema
            wrong = [(at + ".state" + exc.path[1:], str(exc).removeprefix(exc.path + ": "))]
    return CaseResult(case.name, False, tuple(f"error: {w}: {problem}" for w, problem in wrong),
                      time.perf_counter() - t0, wrong[0][0])


def _flat_keys(state: Mapping[str, Any], fields: set[str], at: str,
               prefix: str = "") -> list[tuple[str, str]]:
    """A state key written flat (`"user.role": …`) would be ignored: say how to nest it."""
    out = []
    for key, value in state.items():
        path = prefix + key
        if "." in key and path in fields:
            parts = key.split(".")
            nested = ": {".join(parts) + ": …" + "}" * (len(parts) - 1)
            out.append((f"{at}{msgspec.json.encode([key]).decode()}",
                        f"state key `{path}` is written flat: dotted fields are nested objects "
                        f"(`{nested}`)"))
        elif isinstance(value, Mapping):
            out.extend(_flat_keys(value, fields, f"{at}.{key}", path + "."))
    return out


def _unknown_names(compiled: Compiled, case: Case, at: str) -> list[tuple[str, str]]:
    """Every action, rule and intent the case names that the policy does not declare."""
    tree = compiled.checked.policy
    actions = compiled.policy.actions
    rules = [r.name.text for r in tree.rules]
    out = []

    def need(name: str, known, what: str, where: str) -> None:
        if name not in known:
            hint = did_you_mean(name, known)
            out.append((where, f"unknown {what} `{name}`" + (f" ({hint})" if hint else "")))

    if case.intent is not None:
        need(case.intent, [i.name.text for i in tree.intents], "intent", at + ".intent")
    for j, a in enumerate(case.legal or ()):
        need(a, actions, "action", f"{at}.legal[{j}]")
    for a, names in (case.removed or {}).items():
        need(a, actions, "action", f"{at}.removed.{a}")
        for j, r in enumerate(names):  # `intent`: outside the intent's allow list
            need(r, [*rules, "intent"], "rule", f"{at}.removed.{a}[{j}]")
    if case.call is not None:
        need(case.call.name, actions, "action", at + ".call.name")
    for j, r in enumerate(case.reasons or ()):  # `schema`: the arguments do not match the signature
        need(r, [*rules, "schema"], "rule", f"{at}.reasons[{j}]")
    return out


def _legal_diff(policy: Policy, case: Case) -> list[str]:
    got = policy.legal(case.state, case.intent)
    removed = got.removed
    diff = []
    for a in policy.actions:  # declaration order
        want_in, got_in = a in case.legal, a in got.actions
        if want_in and not got_in:
            diff.append(f"- {a}: expected legal, but removed: {_why(removed.get(a, ()))}")
        elif got_in and not want_in:
            diff.append(f"+ {a}: legal, but expected removed")
    if case.fallback is not None and got.fallback != case.fallback:
        diff.append(f"fallback: expected {str(case.fallback).lower()}, got {str(got.fallback).lower()}")
    if case.removed is not None:
        for a in (a for a in policy.actions if a in case.removed):
            want = sorted(case.removed[a])
            have = sorted(r.rule for r in removed.get(a, ()))
            if want != have:
                diff.append(f"removed {a}: expected rules {_list(want)}, got {_list(have)}"
                            + (f" ({_why(removed[a])})" if a in removed else ""))
    return diff


def _call_diff(policy: Policy, case: Case) -> list[str]:
    call = case.call
    verdict = policy.check(case.state, call.name, call.arguments, case.intent)
    diff = []
    if verdict.allowed != case.allowed:
        diff.append(f"{call.name}: expected {'allowed' if case.allowed else 'blocked'}, got "
                    + ("allowed" if verdict.allowed else f"blocked: {_why(verdict.reasons)}"))
    if case.reasons is not None:
        have = sorted(r.rule for r in verdict.reasons)
        if sorted(case.reasons) != have:
            diff.append(f"reasons: expected {_list(sorted(case.reasons))}, got {_list(have)}"
                        + (f" ({_why(verdict.reasons)})" if verdict.reasons else ""))
    return diff


def _list(names: list[str]) -> str:
    return "[" + ", ".join(names) + "]"


# ---- coverage --------------------------------------------------------------------------------
@dataclass(slots=True)
class Coverage:
    """What the cases of one policy exercised: per rule, whether it removed and kept an action;
    per condition leaf (a comparison, a bare boolean, `a in history` of `after`), its outcomes:
    true and false, and unknown for a leaf that reads an optional field or argument."""

    compiled: Compiled
    rules: dict[str, set[bool]] = field(default_factory=dict)  # rule -> {removed?} seen
    leaves: dict[tuple[str, int], set[Any]] = field(default_factory=dict)  # (rule, i) -> values

    def add(self, case: Case) -> None:
        """Record the rules and leaves one case exercises (a case whose state is invalid adds none)."""
        checked = self.compiled.checked
        try:
            self.compiled.policy.legal(case.state, case.intent)
        except ZcError:
            return
        state = flat_state(checked, case.state)
        if case.call is not None:
            if case.call.name not in checked.costs:
                return
            judged = [(case.call.name, interp.typed_args(checked.params.get(case.call.name),
                                                         case.call.arguments)[0])]
        else:
            judged = [(a.name.text, None) for a in checked.actions]
        for rule in checked.policy.rules:
            reads_args = interp.reads_args(rule)
            for action, args in judged:
                if action not in checked.targets[rule.name.text] or (reads_args and args is None):
                    continue
                cost = checked.costs[action]
                keeps = interp.keeps(rule, state, action, cost, args)
                self.rules.setdefault(rule.name.text, set()).add(not keeps)
                for i, leaf in enumerate(_leaves(rule)):
                    value = (leaf.text in (state.get("history") or ())) if isinstance(leaf, A.Ident) \
                        else interp.evaluate(leaf, state, action, cost, args)
                    self.leaves.setdefault((rule.name.text, i), set()).add(value)

    def gaps(self) -> list[str]:
        """One line per rule outcome and leaf outcome that no case exercised, in source order."""
        out = []
        for rule in self.compiled.checked.policy.rules:
            name = rule.name.text
            seen = self.rules.get(name, set())
            where = rule.span.location() if rule.span else name
            if True not in seen:
                out.append(f"{where}: rule `{name}` never removed an action")
            if False not in seen:
                out.append(f"{where}: rule `{name}` never kept an action")
            for i, leaf in enumerate(_leaves(rule)):
                values = self.leaves.get((name, i), set())
                missing = [w for w, v in self._outcomes(rule, leaf) if v not in values]
                if missing:
                    text = f"{leaf.text} in history" if isinstance(leaf, A.Ident) else leaf.span.text
                    loc = leaf.span.location() if leaf.span else where
                    out.append(f"{loc}: `{text}` in rule `{name}` was never {' or '.join(missing)}")
        return out

    def totals(self) -> tuple[int, int]:
        """(outcomes exercised, outcomes there are): two per rule, two or three per leaf."""
        have = total = 0
        for rule in self.compiled.checked.policy.rules:
            name = rule.name.text
            have += len(self.rules.get(name, set()) & {True, False})
            total += 2
            for i, leaf in enumerate(_leaves(rule)):
                outcomes = self._outcomes(rule, leaf)
                values = self.leaves.get((name, i), set())
                have += sum(v in values for _, v in outcomes)
                total += len(outcomes)
        return have, total

    def _outcomes(self, rule: A.RuleDecl, leaf: Any) -> tuple[tuple[str, Any], ...]:
        """The outcomes a leaf can have: true and false, and unknown (None) when it reads a field
        that may be absent or an optional argument of an action the rule targets."""
        if isinstance(leaf, A.Ident):  # `a in history` of an `after` rule: never unknown
            return _BOOL
        checked = self.compiled.checked
        for e in A.walk(leaf):
            if isinstance(e, A.FieldRef) and (f := checked.fields.get(
                e.path)) is not None and f.may_be_absent:
                return _KLEENE
            if isinstance(e, A.ArgRef) and any(
                    (p := (checked.params.get(t) or {}).get(e.name)) is not None and p.optional
                    for t in checked.targets[rule.name.text]):
                return _KLEENE
        return _BOOL


_BOOL = (("true", True), ("false", False))
_KLEENE = (*_BOOL, ("unknown", None))


def _leaves(rule: A.RuleDecl) -> list:
    """The atomic conditions of a rule: every maximal sub-expression that is not and/or/not."""
    if rule.kind == RuleKind.AFTER:
        return list(rule.after)
    out, stack = [], [rule.cond]
    while stack:
        e = stack.pop()
        if isinstance(e, (A.And, A.Or)):
            stack.extend(reversed(e.operands))
        elif isinstance(e, A.Not):
            stack.append(e.operand)
        else:
            out.append(e)
    return out


def flat_state(checked: Checked, state: Mapping[str, Any]) -> dict[str, Any]:
    """The interpreter's reading of a state: field path -> value (defaults applied, None absent)."""
    out = {}
    for path, info in checked.fields.items():
        node: Any = state
        for part in path.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if node is None:
            node = info.default if info.has_default else None
        if info.kind == FieldKind.SET and node is not None:
            node = frozenset(node)
        out[path] = node
    return out


@dataclass(slots=True)
class SuiteRun:
    """One test file run: its cases' results, or the error that stopped it (bad file or policy)."""

    path: Path
    results: list[CaseResult] = field(default_factory=list)
    lines: tuple[int | None, ...] = ()
    suite: LoadedSuite | None = None
    error: ZcError | None = None
    coverage: Coverage | None = None


def run_suites(files: Iterable[Path], coverage: bool = False) -> list[SuiteRun]:
    """Run every case of every test file; a file or policy that fails to load is one error."""
    compiled: dict[Path, Compiled | ZcError] = {}
    covers: dict[Path, Coverage] = {}
    runs = []
    for f in files:
        run = SuiteRun(f)
        runs.append(run)
        try:
            suite = load_suite(f)
        except ZcError as exc:
            run.error = exc
            continue
        key = suite.policy.resolve()
        if key not in compiled:
            try:
                compiled[key] = compile_policy(suite.policy)
            except ZcError as exc:
                compiled[key] = exc
        target = compiled[key]
        if isinstance(target, ZcError):
            run.error = target
            continue
        run.lines, run.suite = suite.lines, suite
        run.results = [run_case(target, c, f"$.cases[{i}]") for i, c in enumerate(suite.cases)]
        if coverage:
            run.coverage = covers.setdefault(key, Coverage(target))
            for c in suite.cases:
                run.coverage.add(c)
    return runs
