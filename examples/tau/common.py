"""Shared pieces of the tau adapters: reading tasks and databases, compiling the policies, the walk.

Data: tau2-bench (Sierra, MIT; ../shared/data/tau/LICENSE.tau2-bench). Nothing here knows a task
id or an expected answer: state comes from the database and the effects of earlier actions.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zcompile
from zcompile import Policy, Verdict, ZcError

ROOT = Path(__file__).resolve().parents[2]
POLICIES = ROOT / "policies"
DOMAINS = ("airline", "retail")


class DataError(ZcError):
    """A tasks, database or chat file that cannot be used (named, with its `$.path`)."""


def read_json(path: str | Path, what: str) -> Any:
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise DataError(f"{p}: cannot read {what}: {exc.strerror}") from None
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f"{exc.lineno}:{exc.colno}: " if isinstance(exc, json.JSONDecodeError) else ""
        raise DataError(f"{p}:{where}invalid JSON ({what}): {getattr(exc, 'msg', exc)}") from None


def expect(cond: bool, path: str, where: str, problem: str) -> None:
    if not cond:
        raise DataError(f"{where}: {path}: {problem}")


def read_tasks(path: str | Path) -> list[dict]:
    """tau2 tasks: a JSON array of `{id, evaluation_criteria: {actions: [{name, arguments}]}, …}`."""
    tasks = read_json(path, "tasks")
    where = str(path)
    expect(isinstance(tasks, list), "$", where, "expected an array of tasks")
    for i, t in enumerate(tasks):
        expect(isinstance(t, dict), f"$[{i}]", where, "expected a task object")
        expect(isinstance(t.get("id"), (str, int)), f"$[{i}].id", where, "missing task id")
        crit = t.get("evaluation_criteria") or {}
        expect(isinstance(crit, dict), f"$[{i}].evaluation_criteria", where, "expected an object")
        actions = crit.get("actions") or []
        expect(isinstance(actions, list), f"$[{i}].evaluation_criteria.actions", where,
               "expected an array of actions")
        for j, a in enumerate(actions):
            p = f"$[{i}].evaluation_criteria.actions[{j}]"
            expect(isinstance(a, dict) and isinstance(a.get("name"), str), p, where,
                   "expected {name, arguments}")
            expect(isinstance(a.get("arguments", {}), dict), p + ".arguments", where, "expected an object")
    return tasks


def gold_actions(task: Mapping) -> list[tuple[str, dict]]:
    crit = task.get("evaluation_criteria") or {}
    return [(a["name"], dict(a.get("arguments") or {})) for a in crit.get("actions") or []]


def scenario_text(task: Mapping) -> str:
    """What the user knows and wants (the simulated user's instructions): the conversation's stand-in."""
    us = task.get("user_scenario") or {}
    ins = us.get("instructions") or {}
    if isinstance(ins, str):
        return ins
    return "\n".join(str(ins.get(k) or "") for k in ("reason_for_call", "known_info", "task_instructions"))


def load_policy(domain: str) -> Policy:
    return zcompile.compile_file(POLICIES / f"tau_{domain}.zc")


def normalize_args(policy: Policy, name: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """tau writes enum values as phrases (`no longer needed`); zc enum members are names."""
    out = dict(args)
    params = {p.name: p for p in (next(a for a in policy.ir.actions if a.name == name).params or ())}
    for k, v in args.items():
        p = params.get(k)
        if p is not None and p.kind == "enum" and isinstance(v, str):
            out[k] = v.strip().replace(" ", "_")
    return out


class Overlay:
    """Copy-on-write view of a database table: earlier writes of this task, over the shared data."""

    def __init__(self, base: Mapping[str, Any]) -> None:
        self.base = base
        self.changed: dict[str, Any] = {}

    def get(self, key: str) -> Any:
        if key in self.changed:
            return self.changed[key]
        return self.base.get(key)

    def __contains__(self, key: str) -> bool:
        return key in self.changed or key in self.base

    def edit(self, key: str) -> Any:
        """The record to modify in place (copied from the base the first time)."""
        if key not in self.changed:
            self.changed[key] = copy.deepcopy(self.base[key])
        return self.changed[key]

    def put(self, key: str, value: Any) -> None:
        self.changed[key] = value


@dataclass
class Illegal:
    task: str
    step: int
    action: str
    arguments: dict
    reasons: list[dict]

    def to_dict(self) -> dict:
        return {"task": self.task, "step": self.step, "action": self.action,
                "arguments": self.arguments, "reasons": self.reasons}


def reason_dicts(v: Verdict) -> list[dict]:
    return [{"rule": r.rule, "kind": r.kind, "message": r.message} for r in v.reasons]


@dataclass
class Report:
    tasks: int = 0
    gold_actions: int = 0
    legal: int = 0
    illegal: list[Illegal] = field(default_factory=list)
    refusals: list[dict] = field(default_factory=list)
    not_expressible: list[dict] = field(default_factory=list)
    writes_only: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "tasks": self.tasks,
            "gold_actions": self.gold_actions,
            "legal": self.legal,
            "illegal": [i.to_dict() for i in self.illegal],
            "refusals_checked": len(self.refusals),
            "refusals_blocked": sum(r["blocked"] for r in self.refusals),
            "refusals": self.refusals,
            "refusals_not_expressible": self.not_expressible,
            "writes_only_traces": self.writes_only,
        }


def first(items: Iterable, default=None):
    return next(iter(items), default)
