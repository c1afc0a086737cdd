"""Conformance: walk every task's gold actions statefully through the compiled tau policy.

    python -m examples.tau.conformance --domain airline|retail --tasks PATH --db PATH [--json]
                                       [--refusals PATH]

For each task, a fresh in-memory copy of the database; for each gold action in order, the adapter
derives the state for that call (database + effects of the earlier gold actions), the policy judges
the call (`Policy.check`), and then the action's effect is applied. Refusal cases (a task whose
assertions say the agent must not do something) are (task, forbidden call) pairs read from
`--refusals` (default: `examples/tau/refusals/<domain>.json`, see its README); each is judged in
the state after the task's gold actions, and must be blocked. Data: tau2-bench (Sierra, MIT).
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

from zcompile import ZcError

from .common import (
    DataError,
    Illegal,
    Report,
    expect,
    gold_actions,
    load_policy,
    normalize_args,
    read_json,
    read_tasks,
    reason_dicts,
    scenario_text,
)
from .retail import LOOKUP_FIRST

HERE = Path(__file__).resolve().parent


def world_factory(domain: str, db_path: str | Path):
    """(db, a function task -> fresh world) for a domain."""
    if domain == "airline":
        from .airline import AirlineWorld, load_db

        db = load_db(db_path)
        return lambda task: AirlineWorld(db, scenario_text(task))
    if domain == "retail":
        from .retail import RetailWorld, load_db

        db = load_db(db_path)
        return lambda task: RetailWorld(db, scenario_text(task))
    raise DataError(f"unknown domain `{domain}` (expected airline or retail)")


def read_refusals(path: str | Path) -> tuple[list[dict], list[dict]]:
    """(cases, not_expressible) of a refusals file; see refusals/README.md."""
    data = read_json(path, "refusals")
    where = str(path)
    expect(isinstance(data, dict), "$", where, 'expected {"cases": […], "not_expressible": […]}')
    cases = data.get("cases") or []
    expect(isinstance(cases, list), "$.cases", where, "expected an array")
    for i, c in enumerate(cases):
        p = f"$.cases[{i}]"
        expect(isinstance(c, dict), p, where, "expected an object")
        expect(isinstance(c.get("task"), str), p + ".task", where, "expected the task id (a string)")
        call = c.get("call")
        expect(isinstance(call, dict) and isinstance(call.get("name"), str), p + ".call", where,
               'expected {"name", "arguments"}')
        expect(isinstance(call.get("arguments", {}), dict), p + ".call.arguments", where,
               "expected an object")
    return cases, list(data.get("not_expressible") or [])


def run(domain: str, tasks_path: str | Path, db_path: str | Path,
        refusals_path: str | Path | None = None) -> Report:
    """Walk every task; return the report."""
    policy = load_policy(domain)
    tasks = read_tasks(tasks_path)
    new_world = world_factory(domain, db_path)
    if refusals_path is None:
        default = HERE / "refusals" / f"{domain}.json"
        refusals_path = default if default.exists() else None
    cases, not_expressible = read_refusals(refusals_path) if refusals_path else ([], [])
    by_task: dict[str, list[dict]] = {}
    for c in cases:
        by_task.setdefault(c["task"], []).append(c)
    ids = {str(t["id"]) for t in tasks}
    reads = {a.name for a in policy.ir.actions if "read" in a.tags}
    writes = {a.name for a in policy.ir.actions if "write" in a.tags}
    report = Report(tasks=len(tasks),
                    not_expressible=[n for n in not_expressible if str(n.get("task")) in ids])
    for task in tasks:
        tid = str(task["id"])
        world = new_world(task)
        history: set[str] = set()
        actions = gold_actions(task)
        if (hasattr(world, "assume_authenticated") and any(n in writes for n, _ in actions)
                and not any(n in reads for n, _ in actions)):
            # tau2 lists only the graded writes for some tasks: the lookups the policy requires
            # before any write (authentication, the order's status) are assumed to have happened
            world.assume_authenticated(actions[0])
            history |= set(LOOKUP_FIRST)
            report.writes_only.append(tid)
        for step, (name, args) in enumerate(actions):
            report.gold_actions += 1
            if name not in policy.actions:
                report.illegal.append(Illegal(tid, step, name, args, [
                    {"rule": "schema", "kind": "schema", "message": f"unknown tool `{name}`"}]))
                continue
            state = _guarded(partial(world.state, name, args, history), tasks_path, tid, step)
            verdict = policy.check(state, name, normalize_args(policy, name, args))
            if verdict.allowed:
                report.legal += 1
            else:
                report.illegal.append(Illegal(tid, step, name, args, reason_dicts(verdict)))
            _guarded(partial(world.apply, name, args), db_path, tid, step)
            history.add(name)
        for case in by_task.get(tid, []):
            name, args = case["call"]["name"], dict(case["call"].get("arguments") or {})
            if getattr(world, "user", "") is None:  # nobody located in the trace: as for writes-only
                world.assume_authenticated((name, args))
                history |= set(LOOKUP_FIRST)
            state = world.state(name, args, history, about=case.get("about"))
            verdict = policy.check(state, name, normalize_args(policy, name, args))
            report.refusals.append({
                "task": tid, "assertion": case.get("assertion", ""), "call": case["call"],
                "blocked": not verdict.allowed, "rules": [r.rule for r in verdict.reasons],
                "reasons": reason_dicts(verdict)})
    return report


def _guarded(fn, where, task: str, step: int):
    """Run one adapter step; a database or task of an unexpected shape is a DataError, not a crash."""
    try:
        return fn()
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DataError(f"{where}: task {task} step {step}: unexpected data shape "
                        f"({type(exc).__name__}: {exc})") from None


def render(report: Report) -> str:
    d = report.to_dict()
    lines = [f"tasks {d['tasks']}, gold actions {d['gold_actions']}: {d['legal']} legal, "
             f"{len(d['illegal'])} illegal"]
    for i in d["illegal"]:
        lines.append(f"  task {i['task']} step {i['step']}: {i['action']}")
        lines.extend(f"    - {r['rule']} ({r['kind']}): {r['message']}" for r in i["reasons"])
    if d["writes_only_traces"]:
        lines.append(f"writes-only gold traces (lookups assumed): {len(d['writes_only_traces'])} tasks")
    lines.append(f"refusals: {d['refusals_blocked']} of {d['refusals_checked']} forbidden calls blocked")
    for r in d["refusals"]:
        mark = "blocked" if r["blocked"] else "NOT BLOCKED"
        lines.append(f"  task {r['task']}: {r['call']['name']}({_args(r['call'].get('arguments'))}) "
                     f"{mark}" + (f" by {', '.join(r['rules'])}" if r["rules"] else ""))
    if d["refusals_not_expressible"]:
        lines.append(f"refusals no call can express: {len(d['refusals_not_expressible'])}")
        for n in d["refusals_not_expressible"]:
            lines.append(f"  task {n.get('task')}: {n.get('assertion')} ({n.get('why')})")
    return "\n".join(lines)


def _args(args) -> str:
    parts = []
    for k, v in (args or {}).items():
        s = repr(v)
        parts.append(f"{k}={s if len(s) <= 30 else s[:27] + '…'}")
    return ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m examples.tau.conformance",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--domain", required=True, choices=("airline", "retail"))
    ap.add_argument("--tasks", required=True, help="tau2 tasks JSON (e.g. tasks.train.json)")
    ap.add_argument("--db", required=True, help="the domain's database (airline: its db/ directory; retail: "
                                                "db.json)")
    ap.add_argument("--refusals", default=None, help="refusal cases JSON (default: the bundled one)")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    ns = ap.parse_args(argv)
    try:
        report = run(ns.domain, ns.tasks, ns.db, ns.refusals)
    except ZcError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    if ns.json:
        import json

        print(json.dumps(report.to_dict(), indent=1))
    else:
        print(render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
