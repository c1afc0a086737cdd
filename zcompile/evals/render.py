"""Rendering of `zc eval`'s report: the compact text for stdout and one self-contained HTML page
(a Jinja2 template, autoescaped)."""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path
from typing import Any

EXAMPLES = 20  # task ids listed per category in reports


def _num(v: float | None, fmt: str = ".3f") -> str:
    return "n/a" if v is None else format(v, fmt)


def _pairwise(rep: dict[str, Any]) -> bool:
    return rep["specialist"]["model"] == "pairwise"


def _share(r: dict[str, Any]) -> str:
    """A `_rate` as `rate [lo, hi] (k/n)`."""
    return f"{_num(r['rate'])} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}] ({r['k']}/{r['n']})"


def _table_rows(rep: dict[str, Any]) -> list[list[str]]:
    """The per-rung table: header, compiler (with a policy), specialist, remote, overall; for a pairwise
    specialist also the share not answered where no offered action fits."""
    pairwise = _pairwise(rep)
    head = ["rung", "reached", "answered", "coverage", "precision", "Wilson 95%", "acceptable [Wilson 95%]",
            "complete (right: strict/acceptable)",
            "handed to text", "danger exp/sel", "p50 µs",
            "p99 µs"] + (["precision where an action fits [Wilson 95%] (k/n)",
                                    "abstained where none fits [Wilson 95%] (k/n)"] if pairwise else [])
    out = [head]
    for name, t in (*rep["tiers"].items(), ("overall", rep["overall"])):
        lo, hi = t["precision_ci"]
        a = t.get("acceptable", {"precision": t["precision"], "precision_ci": t["precision_ci"],
                                 "complete_correct": t["complete_correct"]})
        out.append([name, str(t["reached"]), str(t["answered"]), _num(t["coverage"]), _num(t["precision"]),
                    f"[{lo:.3f}, {hi:.3f}]" if t["answered"] else "-",
                    _p(a) if t["answered"] else "-",
                    f"{t['complete']} ({t['complete_correct']}/{a['complete_correct']})",
                    str(t["handed_to_text_tier"]), f"{t['dangerous_exposed']}/{t['dangerous_selected']}",
                    _num(t["p50_us"], ".1f"), _num(t["p99_us"], ".1f")]
                   + ([_share(t["precision_where_fits"]), _share(t["abstained_where_none_fits"])] if pairwise
                      else []))
        if name == "specialist":
            out.append(["remote", str(rep["remote"]["reached"])] + ["-"] * (len(head) - 2))
    return out


def _headline(rep: dict[str, Any]) -> str:
    s = rep["specialist"]
    policy = (f"policy {rep['policy']['name']}" if rep["policy"]
              else "no policy (legal sets from the receipts)")
    return (f"{policy}, specialist {s['name']} ({s['model']}, τ = {s['tau']:.4f}); "
            f"split {rep['split']}: {rep['label']}")


def _scope(rep: dict[str, Any]) -> str:
    parts = [f"n = {rep['n']} decisions from {rep['tasks']} tasks ({rep['test_tasks']} in the sealed test "
             f"split, {rep['unseen_tasks']} unseen by the specialist)"]
    if rep["excluded_trained_on"]:
        parts.append(f"excluded {rep['excluded_trained_on']} decisions of {rep['excluded_tasks']} "
                     "trained-on tasks")
    if rep["included_trained_on_tasks"]:
        parts.append(f"includes {rep['included_trained_on_tasks']} tasks the specialist was trained on")
    if rep["policy"] is None:
        parts.append("no compiler rung without a policy")
    return "; ".join(parts)


def _none_fits_line(rep: dict[str, Any]) -> str:
    """For a pairwise specialist: how often the ladder did not answer where no offered action fits."""
    a = rep["overall"]["abstained_where_none_fits"]
    if not a["n"]:
        return "where no offered action fits: no such decision (receipts with no action and verified: true)"
    return (f"where no offered action fits (n = {a['n']}): abstained {_share(a)}; an answer there counts as "
            "wrong")


def _cost_line(rep: dict[str, Any]) -> str:
    c = rep["cost"]
    text = (f"; {c['replies_to_text_tier']} of them replies priced at the text tier's "
            f"{c['per_text_tier_reply']:g}"
            if c.get("replies_to_text_tier") else "")
    return (f"teacher calls removed (complete, checked outputs only): {c['teacher_calls_removed']} of "
            f"{rep['n']}{text}; cost saved {c['saved']:g} of {c['all_to_teacher']:g} "
            f"({c['cost_saved_share']:.1%}, {c['unit']})")


def _calls_line(rep: dict[str, Any]) -> str:
    c = rep["calls"]
    if not c["answered"]:
        return f"complete tool calls (name and arguments): none answered of n = {c['n']} tool-call decisions"
    lo, hi = c["precision_ci"]
    a = c.get("acceptable", c)
    return (f"complete tool calls (name and arguments): {c['answered']} answered of n = {c['n']} tool-call "
            f"decisions (coverage {c['coverage']:.3f}), precision acceptable {_num(a['precision'])} "
            f"[{a['precision_ci'][0]:.3f}, {a['precision_ci'][1]:.3f}] ({a['correct']}/{c['answered']}), "
            f"strict {_num(c['precision'])} [{lo:.3f}, {hi:.3f}] ({c['correct']}/{c['answered']})")


def _p(x: dict[str, Any]) -> str:
    """`precision [lo, hi] (k/n)` of a {correct, precision, precision_ci} figure answered of `n`."""
    return f"{_num(x['precision'])} [{x['precision_ci'][0]:.3f}, {x['precision_ci'][1]:.3f}]"


def headline(rep: dict[str, Any]) -> str:
    """The one line that leads: the share of decisions taken off the expensive model, with its
    precision under both judges, n and intervals."""
    o = rep["off_teacher"]
    lo, hi = o["share_ci"]
    if o.get("text_tier_live"):
        tier = (f", {o['handed_to_text_tier']} of them replies the text tier `{o['text_tier']}` wrote and "
                f"the grader passed ({o['handed_escalated']} handed replies went to the teacher instead)")
    elif o["text_tier"]:
        tier = f", {o['handed_to_text_tier']} of them replies handed to the text tier `{o['text_tier']}`"
    else:
        tier = " (no text tier is declared: handed-on replies still reach the teacher)"
    return (f"taken off the expensive model: {o['taken']} of {o['n']} decisions ({o['share']:.1%} [{lo:.3f}, "
            f"{hi:.3f}]){tier}; precision acceptable {_p(o['acceptable'])}, strict {_p(o['strict'])}")


def _handed_line(rep: dict[str, Any]) -> str | None:
    o = rep["overall"]
    if not o["handed_to_text_tier"]:
        return None
    h = o["handed_precision"]
    return (f"replies handed to a text tier: {o['handed_to_text_tier']}, of which the teacher replied at "
            f"{_share(h)} (reply-recognition precision, Wilson 95%)")


def _judge_line(rep: dict[str, Any]) -> str | None:
    j = rep.get("judge")
    if j is None:
        return None
    lenient = ", ".join(j["lenient_actions"]) or "none"
    return (f"the judge: {j['rule']} (side-effect-free: {lenient}); {j['more_than_strict']} of n = {j['n']} "
            "decisions have more than the strict answer acceptable")


def _floor_line(rep: dict[str, Any]) -> str | None:
    f = rep.get("noise_floor")
    if f is None:
        return None
    if not f["decisions"]:
        return ("noise floor: no state of a task was met in two or more conversations (trials), so the "
                "teacher's consistency with itself is not measured here")
    s, a, o = f["strict"], f["acceptable"], rep["off_teacher"]
    return (f"noise floor: at {f['states']} states met in several trials ({f['decisions']} decisions, "
            f"{f['pairs']} pairs) the teacher agrees with itself {_num(s['rate'])} [{s['ci'][0]:.3f}, "
            f"{s['ci'][1]:.3f}] strictly, {_num(a['rate'])} [{a['ci'][0]:.3f}, {a['ci'][1]:.3f}] acceptably "
            f"(the {f['interval']}); against it, the ladder takes {o['share']:.1%} of all decisions off the "
            f"teacher at precision {_num(o['acceptable']['precision'])} acceptable, "
            f"{_num(o['strict']['precision'])} strict")


def _power_line(name: str, p: dict[str, Any]) -> str:
    """Whether the split can support the precision claim printed for `name` (`metrics.power`)."""
    head = (f"power ({name}): a Wilson 95% lower bound ≥ {p['target']:g} needs ≥ {p['answers_needed']} "
            f"answers, all right; this split gave {p['answered']} of n = {p['n']}")
    if p["enough"]:
        head += " (enough)"
    elif p["decisions_needed"] is not None:
        head += f": at this coverage, a split of ≥ {p['decisions_needed']} decisions"
    d_p, d_c = p["detectable_precision_difference"], p["detectable_coverage_difference"]
    test = f"two-sided α = {p['alpha']:g}, power {p['power']:g}"
    if d_p is None:
        return head + "; no answers, so no difference between two specialists can be detected"
    cov = f" and coverage by ≥ {d_c:.3f}" if d_c is not None else ""
    return head + (f"; two specialists' precision (near {p['target']:g}) must differ by ≥ {d_p:.3f}{cov} "
                   f"to be told apart at these n ({test})")


def power_lines(rep: dict[str, Any]) -> list[str]:
    return [_power_line(name, p) for name, p in rep["power"].items()]


def _ci(r: dict[str, Any]) -> str:
    """A `metrics.rate` as `rate [lo, hi] (k/n)`, or `n/a` when n is 0."""
    if not r["n"]:
        return "n/a"
    return f"{r['rate']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}] ({r['k']}/{r['n']})"


def per_task_lines(rep: dict[str, Any]) -> list[str]:
    """Precision per task of answered calls and of handed replies: how many tasks, the worst, and
    the tasks below the bar."""
    out = []
    for block in rep.get("per_task", {}).values():
        head = f"precision per task, {block['what']}"
        if not block["tasks"]:
            out.append(f"{head}: none")
            continue
        w = block["worst"]
        below = block["below"]
        listed = f" ({', '.join(below[:EXAMPLES])})" if below else ""
        bar = (f"{len(below)} task{'s' if len(below) != 1 else ''} with ≥ {block['below_min_answers']} "
               f"answers below {block['below_precision']:.2f}{listed}")
        out.append(f"{head}, over {len(block['tasks'])} tasks: worst `{w['task']}` acceptable "
                   f"{_ci(w['acceptable'])}, strict {_ci(w['strict'])}; {bar}")
    return out


def kind_lines(rep: dict[str, Any]) -> list[str]:
    """The risk–coverage of complete calls (at the call τ) and of replies (at the reply τ), both judges."""
    out = []
    rc = rep["risk_coverage"]
    for key, what, verb in (("calls", "a call", "answered"), ("replies", "a reply", "handed on")):
        k = rc.get(key)
        if k is None or not k["n"]:
            continue
        tau = "no τ" if k["tau"] is None else f"τ = {k['tau']:.4f}"
        a, st = k["acceptable"], k["strict"]
        line = (f"risk–coverage, {key} ({tau}): {k['answered']} {verb} of the {k['n']} decisions whose best "
                f"action is {what} (coverage {k['coverage']:.3f})")
        if k["answered"]:
            line += (f", precision acceptable {_ci(_as_rate(a['at_tau']))}, "
                     f"strict {_ci(_as_rate(st['at_tau']))}")
        if k["judged"]:
            line += (f"; AURC acceptable {_num(a['aurc'])}, strict {_num(st['aurc'])} "
                     f"over {k['judged']} judged")
        if key == "calls" and k["judged"] < k["n"]:
            line += " (below τ the specialist forms no complete call: those are not judged)"
        out.append(line)
    return out


def _as_rate(at: dict[str, Any]) -> dict[str, Any]:
    return {"k": at["correct"], "n": at["answered"], "rate": at["precision"], "ci": at["precision_ci"]}


def provenance_line(rep: dict[str, Any]) -> str | None:
    """The answered calls by the provenance of their weakest argument value."""
    by = rep["calls"].get("by_provenance")
    if not by:
        return None
    parts = [f"{p} {v['answered']} (acceptable {_ci(v['acceptable'])}, strict {_ci(v['strict'])})"
             for p, v in by.items()]
    return "answered calls by where their weakest argument value was seen: " + "; ".join(parts)


def _specialist_line(rep: dict[str, Any]) -> str | None:
    """A specialist that answered nothing has no precision or agreement to show: say so instead."""
    t = rep["tiers"]["specialist"]
    if t["answered"]:
        return None
    return (f"the specialist answered nothing (asked on {rep['risk_coverage']['n']} decisions, "
            f"{t['handed_to_text_tier']} replies handed to a text tier): no precision or agreement figure")


def _shadow_lines(rep: dict[str, Any]) -> list[str]:
    out = []
    for name, s in rep.get("shadow", {}).items():
        if not s["answered"]:
            out.append(f"shadow {name}: answered none of {s['asked']} decisions: no agreement figure")
            continue
        lo, hi = s["agreement_ci"]
        by_task = (f"; by task: {s['clean_tasks']} of {s['tasks']} tasks with every answer right as a whole "
                   f"output, one-sided 95% lower bound {s['task_lower_bound']:.3f}" if "tasks" in s else "")
        out.append(f"shadow {name}: live agreement {s['agreement']:.3f} [{lo:.3f}, {hi:.3f}] ({s['agree']}/"
                   f"{s['answered']} answered of {s['asked']} asked; one-sided 95% lower bound "
                   f"{s['lower_bound']:.3f}){by_task}")
    return out


def render_text(rep: dict[str, Any]) -> str:
    """The compact stdout report: scope, a row per rung and overall, cost saved."""
    rows = _table_rows(rep)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [_headline(rep), _scope(rep), ""]
    for r in rows:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i,
                               (c, w) in enumerate(zip(r, widths))))
    o = rep["overall"]
    if "off_teacher" in rep:
        lines[:0] = [headline(rep)]
    a = o.get("acceptable", {"precision": o["precision"], "precision_ci": o["precision_ci"]})
    lines += ["", f"overall precision (name level) acceptable {_p(a)}, strict {_num(o['precision'])} "
              f"[{o['precision_ci'][0]:.3f}, {o['precision_ci'][1]:.3f}] on {o['answered']} answered of "
              f"n = {rep['n']}; " + _cost_line(rep), _calls_line(rep)]
    lines += [x for x in (provenance_line(rep), _handed_line(rep), _judge_line(rep), _floor_line(rep))
              if x is not None]
    lines += per_task_lines(rep) + kind_lines(rep)
    if (line := _specialist_line(rep)) is not None:
        lines.append(line)
    lines += power_lines(rep)
    lines += _shadow_lines(rep)
    if _pairwise(rep):
        lines.append(_none_fits_line(rep))
    return "\n".join(lines)


# ---- HTML -------------------------------------------------------------------------------------------------
@cache
def template(name: str = "report.html"):
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("zcompile.evals", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True)
    return env.get_template(name)


BLUE, ORANGE, GREEN, RED, GREY = "#1565c0", "#ef6c00", "#2e7d32", "#c62828", "#777"


def _axis_floor(values: list[float]) -> float:
    """The y axis' lower end: a tenth below the lowest value (0 at most 0.9), so the lines fill the plot."""
    low = min(values, default=0.0)
    y0 = max(0.0, math.floor(low * 10) / 10 - (0.1 if low * 10 == math.floor(low * 10) and low > 0 else 0))
    return min(y0, 0.9)


def chart(series: list[dict[str, Any]], *, xlabel: str, ylabel: str = "precision", y0: float | None = None,
          target: float | None = None, diagonal: bool = False, marks: tuple[dict[str, Any], ...] = (),
          width: int = 560, height: int = 340) -> dict[str, Any]:
    """Coordinates of one SVG chart the template draws (`chart` macro), x and y in [0, 1] (y from `y0`):
    each series a line (`line`) or dots with Wilson whiskers (`dots`: points with `lo`, `hi` and a
    `title`), a dashed target line, the diagonal (a reliability diagram), labelled `marks` (the
    operating points at τ), and a legend."""
    left, right, top, bottom = 60, 20, 34, 50
    w, h = width - left - right, height - top - bottom
    if y0 is None:
        ys = [p["y"] for s in series for p in s["points"]] + [m["y"] for m in marks]
        ys += [target] if target else []
        y0 = _axis_floor(ys)
    x = lambda c: left + c * w  # noqa: E731
    y = lambda p: top + (1 - (max(p, y0) - y0) / (1 - y0)) * h  # noqa: E731
    lines, dots = [], []
    for s in series:
        pts = s["points"]
        if s.get("dots"):
            dots += [{"x": x(p["x"]), "y": y(p["y"]), "lo": y(p["lo"]), "hi": y(p["hi"]), "color": s["color"],
                      "title": p["title"]} for p in pts]
        elif pts:
            coords = " ".join(f"{x(p['x']):.1f},{y(p['y']):.1f}" for p in pts)
            lines.append({"points": coords, "color": s["color"], "dash": s.get("dash", "")})
    out_marks = []
    for m in marks:
        anchor = "end" if m["x"] > 0.5 else "start"
        out_marks.append({"x": x(m["x"]), "y": y(m["y"]), "color": m["color"], "anchor": anchor,
                          "dx": -8 if anchor == "end" else 8, "label": m["label"]})
    return {
        "width": width, "height": height, "left": left, "top": top, "w": w, "h": h, "xlabel": xlabel,
        "ylabel": ylabel,
        "xticks": [{"x": x(i / 5), "label": f"{i / 5:.1f}"} for i in range(6)],
        "yticks": [{"y": y(y0 + (1 - y0) * i / 5), "label": f"{y0 + (1 - y0) * i / 5:.2f}"}
                   for i in range(6)],
        "target": {"y": y(target), "label": f"target {target:.2f}"} if target is not None else None,
        "diagonal": f"{x(y0):.1f},{y(y0):.1f} {x(1):.1f},{y(1):.1f}" if diagonal else None,
        "lines": lines, "dots": dots, "marks": out_marks,
        "legend": [{"name": s["name"], "color": s["color"], "dash": s.get("dash", "")} for s in series],
    }


def _curve_points(points: list[dict[str, Any]]) -> list[dict[str, float]]:
    return [{"x": p["coverage"], "y": p["precision"]} for p in points]


def curve_geometry(rc: dict[str, Any], target: float | None) -> dict[str, Any] | None:
    """The names curve (every decision the specialist was asked) with the point of its committed
    outputs; None: no curve."""
    if not rc["points"]:
        return None
    at = rc["at_tau"]
    marks: tuple[dict[str, Any], ...] = ()
    if at["precision"] is not None:
        marks = ({"x": at["coverage"], "y": at["precision"], "color": RED,
                  "label": f"answered: coverage {at['coverage']:.2f}, precision {at['precision']:.3f}"},)
    return chart([{"name": "best action = label", "color": BLUE, "points": _curve_points(rc["points"])}],
                 xlabel=f"coverage of the {rc['n']} decisions asked, most confident first",
                 target=target, marks=marks)


def kind_geometry(k: dict[str, Any], what: str, target: float | None) -> dict[str, Any] | None:
    """One kind's curve (calls or replies) under both judges, with its point at τ; None: nothing judged."""
    if not k["judged"]:
        return None
    marks = []
    a, st = k["acceptable"]["at_tau"], k["strict"]["at_tau"]
    if a["precision"] is not None:
        tau = "" if k["tau"] is None else f"τ = {k['tau']:.3f}: "
        if a["correct"] == st["correct"]:  # one point
            marks.append({"x": a["coverage"], "y": a["precision"], "color": BLUE,
                          "label": f"{tau}both judges {a['precision']:.3f} ({a['correct']}/{a['answered']})"})
        else:
            for name, at, color in (("acceptable", a, BLUE), ("strict", st, ORANGE)):
                marks.append({"x": at["coverage"], "y": at["precision"], "color": color,
                              "label": f"{tau}{name} {at['precision']:.3f} "
                                       f"({at['correct']}/{at['answered']})"})
    return chart([{"name": "acceptable", "color": BLUE, "points": _curve_points(k["acceptable"]["points"])},
                  {"name": "strict", "color": ORANGE, "dash": "6 4",
                   "points": _curve_points(k["strict"]["points"])}],
                 xlabel=f"coverage of the {k['n']} decisions whose best is {what}",
                 target=target, marks=tuple(marks))


def reliability_geometry(rc: dict[str, Any]) -> dict[str, Any] | None:
    """The reliability diagram: observed precision (Wilson 95% whiskers) against mean confidence per
    confidence bin, for complete calls and replies (acceptable judge) and names; None: no bin."""
    series = []
    for name, color, bins in (("names, all asked", GREY, rc.get("reliability", [])),
                              ("replies (acceptable)", GREEN, rc.get("replies", {}).get("reliability", [])),
                              ("calls (acceptable)", BLUE, rc.get("calls", {}).get("reliability", []))):
        if bins:
            series.append({"name": name, "color": color, "dots": True, "points": [
                {"x": b["confidence"], "y": b["precision"], "lo": b["ci"][0], "hi": b["ci"][1],
                 "title": f"{name}: confidence {b['lo']:.1f}–{b['hi']:.1f}, n = {b['n']}, precision "
                          f"{b['precision']:.3f} [{b['ci'][0]:.3f}, {b['ci'][1]:.3f}]"} for b in bins]})
    if not series:
        return None
    return chart(series, xlabel="confidence (mean of the bin)", ylabel="observed precision", y0=0.0,
                 diagonal=True)


def tasks_geometry(block: dict[str, Any], limit: int = 40, width: int = 560,
                   row: int = 16) -> dict[str, Any] | None:
    """Precision per task (acceptable) with its Wilson 95% interval, worst first, at most `limit` tasks."""
    tasks = sorted(block["tasks"], key=lambda t: (t["acceptable"]["rate"], -t["answered"], t["task"]))[:limit]
    if not tasks:
        return None
    left, right, top = 190, 20, 10
    w = width - left - right
    x = lambda p: left + p * w  # noqa: E731
    rows = [{"y": top + (i + 0.5) * row, "x": x(t["acceptable"]["rate"]), "lo": x(t["acceptable"]["ci"][0]),
             "hi": x(t["acceptable"]["ci"][1]), "bad": t["task"] in block["below"],
             "label": f"{t['task'][:22]} ({t['acceptable']['k']}/{t['answered']})",
             "title": f"{t['task']}: acceptable {_ci(t['acceptable'])}, strict {_ci(t['strict'])}"}
            for i, t in enumerate(tasks)]
    h = len(rows) * row
    return {"width": width, "height": top + h + 40, "left": left, "top": top, "w": w, "h": h, "rows": rows,
            "bar": x(block["below_precision"]), "bar_label": f"{block['below_precision']:.2f}",
            "xticks": [{"x": x(i / 5), "label": f"{i / 5:.1f}"} for i in range(6)],
            "shown": len(rows), "of": len(block["tasks"])}


GENERATOR = b'<meta name="generator" content="zc eval">'


def is_html_report(path: Path) -> bool:
    """Whether `path` holds a report `render_html` wrote (what `zc eval --html` may replace): its
    generator tag, or the title of the reports written before there was one."""
    with open(path, "rb") as f:
        head = f.read(4096)
    return GENERATOR in head or (head.startswith(b"<!DOCTYPE html>") and b"<title>zc eval: " in head)


def render_html(rep: dict[str, Any]) -> str:
    """One self-contained page: scope, per-rung table, complete calls, agreement, cost, shadow
    agreement, counts, the risk–coverage SVG."""
    agree = [["rung", "answered", "agreement with teacher (n)", "Wilson 95%", "with gold (n)", "Wilson 95%"]]
    for name, t in (*rep["tiers"].items(), ("overall", rep["overall"])):
        a, g = t["agreement_teacher"], t["agreement_gold"]
        if not t["answered"]:
            agree.append([name, "0", "answered nothing", "-", "-", "-"])
            continue
        agree.append([name, str(t["answered"]), f"{_num(a['rate'])} ({a['n']})",
                      f"[{a['ci'][0]:.3f}, {a['ci'][1]:.3f}]",
                      f"{_num(g['rate'])} ({g['n']})", f"[{g['ci'][0]:.3f}, {g['ci'][1]:.3f}]"])
    c = rep["cost"]
    cost = [["", "value"], ["unit", c["unit"]], ["per teacher call", f"{c['per_teacher_call']:g}"],
            ["everything to the teacher", f"{c['all_to_teacher']:g}"],
            ["with the ladder", f"{c['with_ladder']:g}"], ["saved",
                                                           f"{c['saved']:g} ({c['cost_saved_share']:.1%})"],
            ["teacher calls removed (complete, checked outputs)",
             f"{c['teacher_calls_removed']} of {rep['n']}"],
            ["bare names answered (the teacher still gives the arguments)",
             str(c["names_answered_not_removed"])]]
    k = rep["calls"]
    ka = k.get("acceptable", k)
    calls = [["tool-call decisions (n)", "answered", "coverage", "strict: correct", "precision", "Wilson 95%",
              "acceptable: correct", "precision", "Wilson 95%"],
             [str(k["n"]), str(k["answered"]), _num(k["coverage"]), str(k["correct"]), _num(k["precision"]),
              f"[{k['precision_ci'][0]:.3f}, {k['precision_ci'][1]:.3f}]" if k["answered"] else "-",
              str(ka["correct"]), _num(ka["precision"]),
              f"[{ka['precision_ci'][0]:.3f}, {ka['precision_ci'][1]:.3f}]" if k["answered"] else "-"]]
    shadow = [["specialist", "asked", "answered", "agreement", "Wilson 95%", "95% lower bound"]]
    for name, s in rep.get("shadow", {}).items():
        shadow.append([name, str(s["asked"]), str(s["answered"]),
                       _num(s["agreement"]) if s["answered"] else "answered nothing",
                       f"[{s['agreement_ci'][0]:.3f}, {s['agreement_ci'][1]:.3f}]" if s["answered"] else "-",
                       f"{s['lower_bound']:.3f}" if s["answered"] else "-"])
    counts = [["count", "value"], *([k, str(v)] for k, v in sorted(rep["counts"].items())),
              ["excluded (trained-on tasks)", str(rep["excluded_trained_on"])],
              ["unseen tasks", str(rep["unseen_tasks"])], ["unseen decisions", str(rep["unseen_decisions"])]]
    rc = rep["risk_coverage"]
    kinds = [k for k in ("calls", "replies") if k in rc and rc[k]["n"]]
    kind_lines_by = dict(zip(kinds, kind_lines(rep), strict=True))
    asked = "legal set of two or more actions" if rep["policy"] else "every decision: no compiler rung"
    return template().render(
        rep=rep, title="zc eval: " + (rep["policy"]["name"] if rep["policy"] else rep["specialist"]["name"]),
        headline=_headline(rep), scope=_scope(rep), pairwise=_pairwise(rep), rungs=_table_rows(rep),
        none_fits=_none_fits_line(rep) if _pairwise(rep) else None, specialist_line=_specialist_line(rep),
        agree=agree, cost=cost, calls=calls, shadow=shadow if len(shadow) > 1 else None, counts=counts,
        rc_note=f"On the {rc['n']} decisions the specialist was asked ({asked}): AURC {_num(rc['aurc'])}, "
                f"ECE {_num(rc['ece'])}.",
        curve=curve_geometry(rc, rep["specialist"]["target_precision"]),
        kinds=[(key, kind_lines_by[key], kind_geometry(rc[key], what, rep["specialist"]["target_precision"]))
               for key, what in (("calls", "a call"), ("replies", "a reply")) if key in kinds],
        reliability=reliability_geometry(rc), provenance=provenance_line(rep),
        tasks=[(b["what"], line, tasks_geometry(b))
               for b, line in zip(rep.get("per_task", {}).values(), per_task_lines(rep), strict=True)],
        unseen=", ".join(rep["unseen_task_examples"]), examples=EXAMPLES, power=power_lines(rep),
        lead=headline(rep) if "off_teacher" in rep else None, handed=_handed_line(rep),
        judge=_judge_line(rep), floor=_floor_line(rep))
