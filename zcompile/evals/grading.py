"""`zc grader validate`: the reply grader checked against ground truth: each flaw planted into teacher
replies from receipts (labels known), its recall, false alarms on the replies as written, the restated-note
trap."""

from __future__ import annotations

import copy
import random
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ZcError
from ..qroute.dataset import QUIET, Progress
from ..router.grader import IDENT, Grader
from ..router.prompt import SCAFFOLDING
from .metrics import rate

REPLY_ACTION = "respond"  # the bundled receipts' reply action; `replies(reply_action=…)` for others
FOREIGN = (  # replies a model might write in another language than the user's (hand-written, fixed)
    "Gracias por su paciencia. He revisado su reserva y el vuelo está confirmado para la fecha que "
    "usted indicó. ¿Hay algo más en lo que pueda ayudarle?",
    "Merci pour votre patience. J'ai vérifié votre réservation et le vol est confirmé pour la date que "
    "vous avez indiquée. Puis-je vous aider avec autre chose ?",
    "Vielen Dank für Ihre Geduld. Ich habe Ihre Buchung geprüft und der Flug ist für das von Ihnen "
    "genannte Datum bestätigt. Kann ich Ihnen sonst noch helfen?",
    "Obrigado pela sua paciência. Verifiquei a sua reserva e o voo está confirmado para a data que "
    "você indicou. Posso ajudar com mais alguma coisa?",
)
SUCCESS_CLAIMS = (
    "Your reservation has been successfully updated.",
    "I have updated your reservation as requested.",
    "All set! The change is confirmed.",
    "Your booking has been cancelled and the refund has been processed.",
)
# restating what a hidden note asks for, in the reply's own words: not a leak (the known trap)
RESTATED = (
    "I can only choose among the options available to me here, so let me pick the right one for you.",
    "I'll stick to one action at a time and won't make up options that aren't available.",
)


@dataclass(frozen=True, slots=True)
class Pair:
    """A teacher reply with the state it answered and what was legal there."""

    state: dict
    legal: tuple[str, ...]
    text: str
    task: str
    seen: tuple = ()  # the values seen before the reply (the receipt's argument candidates)


def replies(paths: Sequence[str | Path], reply_action: str = REPLY_ACTION) -> list[Pair]:
    """Each teacher reply of the receipts: a `reply_action` decision, its text read from the next decision
    of the same conversation (its `last.assistant_text`); the last reply of a conversation has none."""
    from ..receipts import read

    by_conv: dict[str, list[Any]] = defaultdict(list)
    for r in read([str(p) for p in paths]):
        conv = (r.meta or {}).get("conversation")
        if isinstance(conv, str):
            by_conv[conv].append(r)
    out = []
    for rs in by_conv.values():
        rs.sort(key=lambda r: (r.meta or {}).get("turn", 0))
        for r, nxt in zip(rs, rs[1:], strict=False):
            text = ((nxt.state or {}).get("last") or {}).get("assistant_text")
            if r.action == reply_action and isinstance(text, str) and text.strip():
                seen = tuple(r.candidates or ())
                out.append(Pair(dict(r.state), tuple(r.legal or ()), text, r.task or "", seen))
    if not out:
        raise ZcError(f"no `{reply_action}` decision with its text (the next decision's last.assistant_text)")
    return out


def _with(state: dict, **last: Any) -> dict:
    s = copy.deepcopy(state)
    s.setdefault("last", {}).update(last)
    return s


def plant(check: str, p: Pair, rng: random.Random, grader: Grader) -> tuple[dict, str, str | None] | None:
    """(state, reply, finish_reason) with one flaw of `check` planted, or None when `p` cannot carry it."""
    words = p.text.split()
    if check == "empty":
        return p.state, rng.choice(("", "   ", "Okay")), None
    if check == "truncated (server said so)":
        return p.state, " ".join(words[: max(len(words) // 2, 1)]), "length"
    if check == "truncated (text only)":
        if len(words) < 8:
            return None
        return p.state, " ".join(words[: rng.randrange(3, len(words) - 2)]), None
    if check == "language":
        return p.state, rng.choice(FOREIGN), None
    if check == "leak (template token)":
        return p.state, p.text + rng.choice(("<|im_end|>", "<|im_start|>assistant", "</s>", "[INST]")), None
    if check == "leak (scaffolding)":
        return p.state, f"{rng.choice(SCAFFOLDING)} {p.text}", None
    if check == "echo":  # the user's message as if the model were the user, then the reply
        user = (p.state.get("last") or {}).get("user_text")
        if not isinstance(user, str) or len(user.split()) < 3:
            return None
        return p.state, f"{user} {p.text}", None
    if check == "leak (state)":
        return p.state, f'{p.text} {{"tool_error": false, "user_text": "…"}}', None
    if check == "fault_ignored":
        state = _with(p.state, tool_error=True, tool_text="Error: the payment method was declined")
        return state, f"{rng.choice(SUCCESS_CLAIMS)} {p.text}", None
    if check == "unsupported_id":
        seen = " ".join(str(v) for v in (*(p.state.get("last") or {}).values(), *(c.value for c in p.seen)))
        letters = "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(3))
        fake = f"{letters}{rng.randrange(100, 1000)}"
        if fake in seen:
            return None
        ids = [m.group(0) for m in IDENT.finditer(p.text)]
        text = p.text.replace(ids[0], fake, 1) if ids else f"{p.text} Your confirmation code is {fake}."
        return p.state, text, None
    if check == "promise":
        banned = [(a, v) for a, vs in grader.config.promises.items() if a not in p.legal for v in vs]
        if not banned:
            return None
        action, verb = rng.choice(banned)
        return p.state, f"{p.text} I will {verb} it for you right away.", None
    raise ValueError(check)


PLANTS = ("empty", "truncated (server said so)", "truncated (text only)", "language", "leak (template token)",
          "leak (scaffolding)", "leak (state)", "echo", "fault_ignored", "unsupported_id", "promise")


def _family(plant_name: str) -> str:
    return re.sub(r" \(.*\)$", "", plant_name)


def validate(grader: Grader, pairs: Sequence[Pair], seed: int = 0) -> dict[str, Any]:
    """Recall per planted flaw (caught by its own check), false alarms on the replies as written (any check,
    and per check), the restated-note trap, and agreement over all planted and clean replies."""
    rng = random.Random(seed)
    clean = [grader.grade(p.text, p.state, p.legal, seen=p.seen) for p in pairs]
    alarms_by: dict[str, int] = defaultdict(int)
    for v in clean:
        for check in {f.check for f in v.flaws}:
            alarms_by[check] += 1
    false_alarms = sum(not v.passed for v in clean)
    trap = [grader.grade(f"{p.text} {rng.choice(RESTATED)}", p.state, p.legal, seen=p.seen) for p in pairs]
    faulted = [(p, v) for p, v in zip(pairs, clean, strict=True)
               if (p.state.get("last") or {}).get("tool_error") is True]
    rows = []
    agree = sum(v.passed for v in clean) + sum(v.passed for v in trap)
    total = 2 * len(pairs)
    for name in PLANTS:
        caught = n = 0
        for p in pairs:
            planted = plant(name, p, rng, grader)
            if planted is None:
                continue
            state, text, finish = planted
            v = grader.grade(text, state, p.legal, finish_reason=finish, seen=p.seen)
            n += 1
            caught += any(f.check == _family(name) for f in v.flaws)
            agree += not v.passed
            total += 1
        rows.append({"flaw": name, "check": _family(name), "recall": rate(caught, n)})
    return {
        "format": "zc-grader-validation/1",
        "replies": len(pairs),
        "tasks": len({p.task for p in pairs}),
        "seed": seed,
        "false_alarms": rate(false_alarms, len(pairs)),
        "false_alarms_by_check": {c: rate(alarms_by.get(c, 0), len(pairs)) for c in grader.checks},
        "faulted_replies_passed": rate(sum(v.passed for _, v in faulted), len(faulted)),
        "restated_note_trap_passed": rate(sum(v.passed for v in trap), len(trap)),
        "recall": rows,
        "agreement": rate(agree, total),
    }


def _cell(r: dict[str, Any]) -> str:
    if not r["n"]:
        return "n = 0"
    lo, hi = r["ci"]
    return f"{r['k']}/{r['n']} = {r['rate']:.3f} [{lo:.3f}, {hi:.3f}]"


def render_markdown(rep: dict[str, Any]) -> str:
    lines = [f"Teacher replies: {rep['replies']} ({rep['tasks']} tasks); seed {rep['seed']}; Wilson 95% "
             "intervals.", "", "| measure | k/n = rate [Wilson 95%] |", "|---|---|",
             f"| false alarms on the replies as written (any check) | {_cell(rep['false_alarms'])} |"]
    by = rep["false_alarms_by_check"]
    lines += [f"| … raised by `{c}` | {_cell(r)} |" for c, r in by.items() if r["k"]]
    lines += [f"| replies written after a real tool fault, passed | {_cell(rep['faulted_replies_passed'])} |",
              f"| restated-note trap (a note restated in own words), passed | "
              f"{_cell(rep['restated_note_trap_passed'])} |"]
    lines += [f"| recall: {r['flaw']} | {_cell(r['recall'])} |" for r in rep["recall"]]
    lines.append(f"| agreement with the labels (clean, trap and planted) | {_cell(rep['agreement'])} |")
    return "\n".join(lines)


def written(router: Any, tier: str, policy: Any, pairs: Sequence[Pair], runs: int = 3,
            progress: Progress = QUIET) -> dict[str, Any]:
    """The replies a tier writes for `pairs`, graded: `router` walks the tier alone, grading it, offered the
    reply action only. Per run (the tier's `extra_body["seed"]` = the run), the pass rate on the decisions
    after a tool fault and on the others; the spread of the runs is the noise floor of the gap."""
    halves: dict[str, list[dict[str, Any]]] = {"fault": [], "no_fault": []}
    causes: dict[str, int] = defaultdict(int)
    bound = router.tiers[tier]
    for run in range(runs):
        bound.extra_body["seed"] = run
        k = {"fault": 0, "no_fault": 0}
        n = {"fault": 0, "no_fault": 0}
        for p in progress.bar(pairs, f"run {run + 1}/{runs}: writing replies", len(pairs)):
            half = "fault" if (p.state.get("last") or {}).get("tool_error") is True else "no_fault"
            replies_ = frozenset(a for a in p.legal if a in router.catalog.replies)
            d = router.decide(p.state, task=p.task, candidates=p.seen, offer=replies_ or None,
                              meta={"run": run, "half": half})
            ans = next((a for a in d.rungs if a.rung == tier), None)
            n[half] += 1
            if ans is not None and ans.kind == "reply":
                k[half] += 1
            else:
                causes[_why(ans)] += 1
        for half in halves:
            halves[half].append(rate(k[half], n[half]))
    gaps = [a["rate"] - b["rate"] for a, b in zip(halves["no_fault"], halves["fault"], strict=True)
            if a["rate"] is not None and b["rate"] is not None]
    return {"runs": runs, "fault": halves["fault"], "no_fault": halves["no_fault"], "gap_by_run": gaps,
            "failures": dict(causes)}


def _why(ans: Any) -> str:
    """Why a tier wrote no passing reply: the grader's first check, or the abstention's cause."""
    if ans is None:
        return "not asked"
    if ans.cause == "graded":
        return "graded: " + ans.detail.removeprefix("reply failed the grader: ").split(":")[0]
    return str(ans.cause)


def halves(pairs: Sequence[Pair], per_half: int) -> list[Pair]:
    """Up to `per_half` replies written after a tool fault and as many after none, each spread evenly over
    the receipts' order (chosen without reading the replies)."""
    out: list[Pair] = []
    for faulted in (True, False):
        group = [p for p in pairs if ((p.state.get("last") or {}).get("tool_error") is True) is faulted]
        step = max(len(group) / per_half, 1.0)
        out += [group[int(i * step)] for i in range(min(per_half, len(group)))]
    return out
