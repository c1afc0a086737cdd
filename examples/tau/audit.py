"""Audit: replay GPT-4o's logged airline tool calls through policies/tau_airline.zc.

    python -m examples.tau.audit --domain airline --chat PATH [--json] [--examples N]

The state of each write call comes only from what the conversation had shown by then: the tool
outputs before it (users, reservations, flights seen in searches) and the user's words (the reason
for cancelling). The tools of these runs (tau-bench, Sierra, MIT) cannot show the status of a
booked flight: a segment dated before today (2024-05-15) counts as flown, one dated later as not
flown, one dated today is unknown; a cancelled or delayed flight is known only when a search showed
it. Unknown facts are absent, and the policy fails closed on them (the reasons say `absent`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

from zcompile import ZcError

from .airline import DEPARTED, AirlineWorld, cancel_reason
from .common import DataError, load_policy, normalize_args, reason_dicts

TODAY = "2024-05-15"


class ObservedWorld(AirlineWorld):
    """The airline database as far as one conversation's tool outputs have shown it."""

    def __init__(self) -> None:
        super().__init__({"users": {}, "reservations": {}, "flights": {}}, "")

    def _segments(self, res: dict, statuses: tuple[str, ...]) -> int | None:
        count = 0
        for f in res.get("flights", []):
            seen = self.status(f.get("flight_number"), f.get("date"))
            if statuses == DEPARTED and seen is None:
                date = str(f.get("date"))
                if date == TODAY:
                    return None  # departed or not depends on the hour: unknown
                count += date < TODAY
            elif seen is None:
                return None
            else:
                count += seen in statuses
        return count

    def _new_segments(self, flights: Any, keep: set[tuple[str, str]]) -> int | None:
        """As in the database adapter, but a flight no search showed on that date is unknown."""
        if isinstance(flights, list) and any(
                isinstance(f, dict) and (f.get("flight_number"), f.get("date")) not in keep
                and self.status(f.get("flight_number"), f.get("date")) is None for f in flights):
            return None
        return super()._new_segments(flights, keep)

    def _flight(self, f: dict, date: str | None) -> None:
        number = f.get("flight_number")
        if not isinstance(number, str):
            return
        info = self.flights.setdefault(number, {"origin": f.get("origin"),
                                                "destination": f.get("destination"), "dates": {}})
        if date and f.get("status"):
            info["dates"][date] = {"status": f["status"]}

    def observe(self, name: str, args: dict, output: Any) -> None:
        """Learn from one tool output (an `Error: …` output teaches nothing)."""
        if not isinstance(output, str) or output.startswith("Error"):
            return
        try:
            data = json.loads(output)
        except json.JSONDecodeError:
            data = None
        if name == "get_user_details" and isinstance(data, dict):
            self.users.base[args.get("user_id")] = data
        elif name in ("get_reservation_details", "cancel_reservation", "book_reservation",
                      "update_reservation_flights", "update_reservation_baggages",
                      "update_reservation_passengers") and isinstance(data, dict):
            rid = data.get("reservation_id")
            if not isinstance(rid, str):
                return
            if rid not in self.base_reservations:
                self.base_reservations[rid] = data  # as first seen: the `…_at_start` facts
            else:
                self.reservations.put(rid, data)
            for f in data.get("flights", []):
                self._flight(f, None)
            self.last_reservation = rid
            if name != "get_reservation_details":
                self.changed.add(rid)
        elif name == "search_direct_flight" and isinstance(data, list):
            for f in data:
                if isinstance(f, dict):
                    self._flight(f, args.get("date"))
        elif name == "search_onestop_flight" and isinstance(data, list):
            for pair in data:
                for f in pair if isinstance(pair, list) else ():
                    if isinstance(f, dict):
                        self._flight(f, f.get("date"))
        elif name == "send_certificate" and isinstance(args.get("user_id"), str) \
                and args["user_id"] in self.users:
            self.apply(name, args)


def _calls(messages: list, where: str):
    """(message index, name, arguments, output) of every tool call, outputs paired in order."""
    pending: list[tuple[int, str, dict]] = []
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise DataError(f"{where}: $.messages[{i}]: expected a message object")
        if m.get("role") == "assistant":
            for j, tc in enumerate(m.get("tool_calls") or []):
                fn = (tc or {}).get("function") or {}
                name = fn.get("name")
                if not isinstance(name, str):
                    raise DataError(f"{where}: $.messages[{i}].tool_calls[{j}].function.name: expected a "
                                    "string")
                raw = fn.get("arguments") or "{}"
                try:
                    args = json.loads(raw) if isinstance(raw, str) else dict(raw)
                except (json.JSONDecodeError, TypeError, ValueError):
                    raise DataError(f"{where}: $.messages[{i}].tool_calls[{j}].function.arguments: "
                                    "not a JSON object") from None
                pending.append((i, name, args if isinstance(args, dict) else {}))
        elif m.get("role") == "tool" and pending:
            i, name, args = pending.pop(0)
            out.append((i, name, args, m.get("content")))
    out.extend((i, name, args, None) for i, name, args in pending)
    return out


def _guarded(fn, where: str, index: int):
    """One step of the replay; a tool output of an unexpected shape is a DataError, not a crash."""
    try:
        return fn()
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DataError(f"{where}: $.messages[{index}]: unexpected data shape "
                        f"({type(exc).__name__}: {exc})") from None


def run(chat_path: str | Path, examples: int = 3) -> dict:
    policy = load_policy("airline")
    writes = {a.name for a in policy.ir.actions if "write" in a.tags}
    p = Path(chat_path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{p}: cannot read chat log: {getattr(exc, 'strerror', None) or exc}") from None
    by_reward: dict[str, dict] = {}
    rules: Counter = Counter()
    shown: list[dict] = []
    runs = 0
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{p}:{n}"
        try:
            conv = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{where}: invalid JSON: {exc.msg}") from None
        if not isinstance(conv, dict) or not isinstance(conv.get("messages"), list):
            raise DataError(f"{where}: $.messages: expected a conversation with a messages array")
        runs += 1
        reward = conv.get("reward")
        key = "unknown" if reward is None else f"{float(reward):.1f}"
        bucket = by_reward.setdefault(key, {"runs": 0, "write_calls": 0, "blocked": 0,
                                            "blocked_on_known_facts": 0, "blocked_for_unknown_facts": 0,
                                            "api_also_refused": 0, "runs_with_a_block": 0,
                                            "runs_with_a_block_on_known_facts": 0})
        bucket["runs"] += 1
        world = ObservedWorld()
        history: set[str] = set()
        messages = conv["messages"]
        blocked_here = known_here = 0
        for i, name, args, output in _calls(messages, where):
            if name in writes:
                users = " ".join(str(m.get("content") or "") for m in messages[:i] if m.get("role") == "user")
                world.reason = cancel_reason(users)
                norm = normalize_args(policy, name, args)
                state = _guarded(partial(world.state, name, args, history), where, i)
                verdict = policy.check(state, name, norm)
                bucket["write_calls"] += 1
                if not verdict.allowed:
                    bucket["blocked"] += 1
                    blocked_here += 1
                    # unknown facts: every reason shows an absent value (the conversation never showed it)
                    unknown = all(any(v is None for _, v in r.values) for r in verdict.reasons)
                    bucket["blocked_for_unknown_facts" if unknown else "blocked_on_known_facts"] += 1
                    known_here += not unknown
                    bucket["api_also_refused"] += isinstance(output, str) and output.startswith("Error")
                    names = sorted({r.rule for r in verdict.reasons})
                    rules.update(names)
                    if sum(1 for s in shown if s["rules"] == names) < examples:
                        shown.append({"conversation": conv.get("id"), "task": conv.get("task"),
                                      "reward": reward, "message": i,
                                      "call": {"name": name, "arguments": args}, "rules": names,
                                      "reasons": reason_dicts(verdict), "tool_output": str(output)[:200]
                                      if output is not None else None})
            if name in policy.actions:
                _guarded(partial(world.observe, name, args, output), where, i)
            history.add(name)
        bucket["runs_with_a_block"] += blocked_here > 0
        bucket["runs_with_a_block_on_known_facts"] += known_here > 0
    total = sum(b["write_calls"] for b in by_reward.values())
    return {"runs": runs, "write_calls": total, "blocked": sum(b["blocked"] for b in by_reward.values()),
            "blocked_on_known_facts": sum(b["blocked_on_known_facts"] for b in by_reward.values()),
            "by_reward": dict(sorted(by_reward.items(), reverse=True)),
            "blocked_by_rule": dict(rules.most_common()), "examples": shown}


def render(report: dict) -> str:
    lines = [f"runs {report['runs']}, write calls {report['write_calls']}, "
             f"blocked by the policy {report['blocked']}"]
    for key, b in report["by_reward"].items():
        lines.append(f"  reward {key}: {b['runs']} runs, {b['write_calls']} write calls, {b['blocked']} "
                     f"blocked ({b['blocked_on_known_facts']} on known facts, "
                     f"{b['blocked_for_unknown_facts']} for facts the conversation never showed; the tool "
                     f"itself refused {b['api_also_refused']}); runs with a block: {b['runs_with_a_block']}, "
                     f"with a block on known facts: {b['runs_with_a_block_on_known_facts']}")
    lines.append("blocked by rule: " + ", ".join(f"{r} {n}" for r, n in report["blocked_by_rule"].items()))
    lines.append("examples:")
    for e in report["examples"]:
        lines.append(f"  {e['conversation']} (reward {e['reward']}) message {e['message']}: "
                     f"{e['call']['name']} {json.dumps(e['call']['arguments'])[:120]}")
        lines.extend(f"    - {r['rule']}: {r['message']}" for r in e["reasons"])
        if e["tool_output"] is not None:
            lines.append(f"    tool answered: {e['tool_output'][:120]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m examples.tau.audit", description=__doc__.split("\n\n")[0])
    ap.add_argument("--domain", required=True, choices=("airline",), help="only airline runs are logged")
    ap.add_argument("--chat", required=True, help="chat JSONL (e.g. tau-airline-gpt4o.chat.jsonl)")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    ap.add_argument("--examples", type=int, default=2, help="examples kept per combination of rules")
    ns = ap.parse_args(argv)
    try:
        report = run(ns.chat, ns.examples)
    except ZcError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    print(json.dumps(report, indent=1) if ns.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
