"""The human-readable report of a distillation (report.md): the verdict first, then the evidence."""

from __future__ import annotations

from typing import Any

from .. import stats
from .manifest import Manifest
from .threshold import NEVER


def _f(v: Any, fmt: str = ".3f") -> str:
    return "n/a" if v is None else format(v, fmt)


def verdict(m: Manifest) -> str:
    return "promoted" if m.gate.promoted else "NOT promoted: " + "; ".join(m.gate.reasons)


def _layers(params: dict) -> str:
    """` (its first k of 6 layers)` when `--layers` dropped some, else nothing."""
    k = params.get("layers", 6)
    return f" (its first {k} of 6 layers)" if k != 6 else ""


def _model_line(m: Manifest) -> str:
    p = m.model.params
    if m.model.kind == "pairwise":
        return (f"MiniLM-L6{_layers(p)} scoring (request, action description) pairs, fine-tuned "
                f"{p.get('steps')} steps of {p.get('batch_size')} on {p.get('pairs')} pairs "
                f"({p.get('negatives')} negatives per decision, decisions where no action fits "
                f"×{p.get('none_fits_weight', 1)}) in {p.get('train_seconds', 0):.0f} s, first "
                f"{m.model.text.max_length} tokens, exported {p.get('quantization')}. Platt calibration T = "
                f"{m.calibration.temperature:.3f}, b = {m.calibration.bias:.3f}.")
    if m.model.text is None:
        reads = f"{m.features.dim} features (version {m.features.version})"
    else:
        reads = (f"the state rendered as text (version {m.model.text.render_version}, first "
                 f"{m.model.text.max_length} tokens), fine-tuned {p.get('steps')} steps of "
                 f"{p.get('batch_size')} from `{p.get('base')}`{_layers(p)} in "
                 f"{p.get('train_seconds', 0):.0f} s, exported {p.get('quantization')}")
    return (f"Model: {m.model.kind} over {len(m.features.actions)} actions ({len(m.model.classes)} seen in "
            f"training), reading {reads}. Temperature {m.calibration.temperature:.3f}.")


def threshold_line(m: Manifest) -> str:
    """τ (each, with complete calls: calls, risky calls, replies), its guarantee and evidence, in words."""
    if m.calls is None:
        return _one_threshold(m.threshold)
    parts = [("Calls", m.threshold), ("Calls of risky actions", m.calls.risky_threshold),
             ("Text replies (handed to a text tier)", m.calls.reply_threshold)]
    return "\n".join(f"- {name}: {_one_threshold(th)}" for name, th in parts if th is not None)


def _one_threshold(th) -> str:
    where = ("scored out of fold (K task-grouped folds over the train and calibration splits)"
             if th.source == "cross-fitted" else "held out from training (the calibration split)")
    of = f"{th.n} decisions of {th.tasks} tasks" if th.unit == "task" else f"{th.n} decisions"
    if th.tau >= NEVER:
        return f"no τ qualifies, so none of these is answered. Tested on {of} {where}: {th.statement}."
    if th.unit == "task":
        at = (f"{th.calibration_correct} of {th.calibration_answered} answered right, {th.tasks_clean} of "
              f"{th.tasks_answered} answered tasks clean (one-sided {1 - th.alpha:.1%} Clopper–Pearson bound "
              f"over tasks {th.calibration_lower_bound:.3f})")
    else:
        at = (f"{th.calibration_correct} of {th.calibration_answered} answered right (one-sided "
              f"{1 - th.alpha:.1%} Clopper–Pearson bound {th.calibration_lower_bound:.3f})")
    text = f"τ = {th.tau:.4f}, certified: {th.statement}, on {of} {where}. At τ {at}."
    if th.calibration_none_fits and th.target_abstention:
        text += (f" Where no action fits: {th.calibration_abstained} of {th.calibration_none_fits} abstained "
                 f"(bound {th.calibration_abstention_lower_bound:.3f}, target {th.target_abstention:g}).")
    return text


def out_of_fold_lines(m: Manifest) -> list[str]:
    """The out-of-fold calls by the grounding of their arguments, and the answers at τ by task (worst
    named)."""
    oof = m.metrics.get("calibration", {})
    lines = []
    if oof.get("grounding"):
        parts = [f"{g} {f['correct']} of {f['calls']} acceptable ({f['answered_correct']} of {f['answered']} "
                 "at τ)"
                 for g, f in oof["grounding"].items()]
        lines.append("Out-of-fold complete calls by the grounding of their arguments (typed: every value in "
                     "the user's words; picked: some value taken from a tool output, an earlier call or a "
                     "constant; bare: none): " + "; ".join(parts) + ".")
    for what, f in oof.get("tasks", {}).items():
        w = f["worst"]
        if w is not None:
            lines.append(f"Out-of-fold {what} at τ by task: {f['tasks_clean']} of {f['tasks_answered']} "
                         f"answered tasks clean; the worst, `{w['task']}`, {w['correct']} of {w['answered']} "
                         f"right [{w['precision_ci'][0]:.3f}, {w['precision_ci'][1]:.3f}].")
    return [*lines, ""] if lines else []


def _novelty_lines(m: Manifest) -> list[str]:
    """The novelty cut in words, and how many test decisions were past it (nothing without a model)."""
    if m.novelty is None:
        return []
    seen = m.metrics.get("novelty") or {}
    test = (f" On the sealed test split {seen['test_novel']} of {seen['test_n']} decisions were past it."
            if "test_n" in seen else "")
    return [f"Novelty (abstain with cause `novel`): {m.novelty.statement}.{test}", ""]


def render(m: Manifest) -> str:
    """The report of any recipe's distillation."""
    t = m.metrics
    lo, hi = t["precision_ci"]
    par = t["parity"]
    need = stats.answers_needed(m.threshold.target_precision)
    title = "Pairwise specialist" if m.model.kind == "pairwise" else "Specialist"
    lines = [
        f"# {title} `{m.name}`" + (f" for policy `{m.policy_name}`" if m.policy_name else ""), "",
        f"**Verdict: {verdict(m)}.**", "",
        _model_line(m), "", threshold_line(m), "", *out_of_fold_lines(m), *_novelty_lines(m),
        "## Data", "", "| split | tasks | decisions |", "|---|---:|---:|",
        *(f"| {k} | {len(s.tasks)} | {s.decisions} |" for k, s in
          (("train", m.splits.train), ("calibration", m.splits.calibration), ("test", m.splits.test))),
        "", "Counts: " + ", ".join(f"{k} {v}" for k, v in sorted(m.counts.items())), "",
        "## Sealed test split", "",
        "| n | answered | coverage | precision | Wilson 95% | one-sided 95% upper | ECE | AURC | p50 µs | "
        "p99 µs |",
        "|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|",
        f"| {t['n']} | {t['answered']} | {t['coverage']:.3f} | {_f(t['precision'])} | [{lo:.3f}, {hi:.3f}] | "
        f"{t['precision_upper_one_sided']:.3f} | {_f(t['ece'])} | {_f(t['aurc'])} | "
        f"{t['latency_us']['p50']:.1f} | {t['latency_us']['p99']:.1f} |", "",
        *_judge_lines(t),
        f"The test split refuses promotion only when its upper bound falls below the target; a Wilson lower "
        f"bound of {m.threshold.target_precision:g} would need at least {need} answers, all right "
        f"(this split gave {t['answered']}).", "",
    ]
    if "calls" in t:
        c, r = t["calls"], t["replies"]
        s = c.get("strict", c)
        lines += [f"Complete calls (name and arguments, JSON-normalised): {c['answered']} of the {c['n']} "
                  f"tool-call decisions answered, {c['correct']} acceptable (precision {_f(c['precision'])} "
                  f"[{c['precision_ci'][0]:.3f}, {c['precision_ci'][1]:.3f}]), {s['correct']} strict "
                  f"(precision {_f(s['precision'])} [{s['precision_ci'][0]:.3f}, "
                  f"{s['precision_ci'][1]:.3f}]); teacher calls removed: {t['teacher_calls_removed']}. Text "
                  f"replies: {r['handed_to_text_tier']} handed to a text tier, {r['correct']} of them where "
                  f"the teacher replied (of its {r['n']} replies; precision {_f(r['precision'])} "
                  f"[{r['precision_ci'][0]:.3f}, {r['precision_ci'][1]:.3f}]). Calls whose arguments could "
                  f"not be completed (abstained): {t['names_incomplete']}.", ""]
    if "argument_sample" in t:
        a = t["argument_sample"]
        lines += [f"Argument model: trained on a seeded sample of {a['kept']} of {a['n']} teacher arguments "
                  f"(seed {a['seed']}): all of them held {a['candidates']:,} candidates, above the limit of "
                  f"{a['limit']:,} rows; its statistics count every argument.", ""]
    if t.get("n_none_fits"):
        f_lo, f_hi = t["precision_where_fits_ci"]
        a_lo, a_hi = t["abstained_where_none_fits_ci"]
        lines += [f"Where an action fits ({t['n_fits']}): coverage {_f(t['coverage_where_fits'])}, precision "
                  f"{_f(t['precision_where_fits'])} [{f_lo:.3f}, {f_hi:.3f}]. Where none fits "
                  f"({t['n_none_fits']}): abstained {_f(t['abstained_where_none_fits'])} [{a_lo:.3f}, "
                  f"{a_hi:.3f}].", ""]
    lines += [
        f"Illegal selections: {t['illegal_selected']}; dangerous selections: {t['dangerous_selected']} "
        f"(decisions with a risky action legal: {t['dangerous_exposed']}). Labels outside the legal set: "
        f"{t['label_not_legal']}. Parity ({par.get('quantization', 'none')} export vs the trained model, "
        f"test split, n = {par['n']}): max |Δp| = {par['max_abs_delta']:.2e}, same decision on "
        f"{par['decision_agreement']:.2%}"
        + "".join(f"; {a['quantization']} was tried first and refused (same decision on "
                  f"{a['decision_agreement']:.2%})" for a in par.get("attempts", [])[:-1]) + ".",
        "", "### Per action (answered)", "", "| action | answered | correct |", "|---|---:|---:|",
        *(f"| {a} | {r['answered']} | {r['correct']} |" for a, r in t["per_action"].items()),
        "", "### Risk–coverage (test split, by confidence)", "", "| coverage | precision | threshold |",
        "|---:|---:|---:|",
        *(f"| {r['coverage']:.2f} | {r['precision']:.3f} | {r['threshold']:.4f} |"
          for r in t["risk_coverage"]),
        "", "## Gate", "", verdict(m), "",
    ]
    if (p := t.get("promotion")) is not None:
        lines += ["## Promotion on shadow evidence", "", _promotion_line(p), ""]
    return "\n".join(lines)


def _judge_lines(t: dict[str, Any]) -> list[str]:
    """Precision under both judges on the test split, and the judge's rule with its n."""
    if "strict" not in t:
        return []
    s, j = t["strict"], t.get("judge", {})
    lo, hi = s["precision_ci"]
    out = [f"Judged strictly (equal to the teacher's next step): {s['correct']} of {s['answered']} answers "
           f"right (precision {_f(s['precision'])} [{lo:.3f}, {hi:.3f}]); the table above judges them "
           "acceptable."]
    if j:
        out.append(f"The judge ({j['mode']}): {j['rule']}. Side-effect-free actions: "
                   + (", ".join(f"`{a}`" for a in j["lenient_actions"]) or "none")
                   + f". Of the {j['n']} decisions, {j['more_than_strict']} have more than the strict answer "
                   f"acceptable; training learns another acceptable call at {j['targets_changed']} of them.")
    return [*out, ""]


def _promotion_line(p: dict[str, Any]) -> str:
    """`zc promote`'s evidence (`promote.regate`): the live figures the gate above was decided on."""
    prev = "promoted" if p["previous_gate"]["promoted"] else "not promoted"
    lo, hi = p["precision_ci"]
    head = (f"Re-gated by `zc promote` on {p['receipts']} receipts ({len(p['files'])} files): {p['asked']} "
            f"shadow records of this version on {p['tasks']} tasks it never trained on, {p['answered']} "
            f"answered, {p['right']} acceptable, {p.get('strict', p['right'])} strict (precision "
            f"{_f(p['precision'])} [{lo:.3f}, {hi:.3f}], by answer: not the unit of the gate); illegal "
            f"{p['illegal']}, dangerous "
            f"{p['dangerous']}; left out: {p['trained_on']} on trained-on tasks, {p['other_versions']} of "
            f"other versions, {p['unjudged']} unjudged. Before: {prev}.")
    if p.get("unit") != "tasks":  # a manifest re-gated before promotion counted tasks
        return head + (f" One-sided {1 - p['alpha']:.0%} Clopper–Pearson lower bound {p['lower_bound']:.3f} "
                       f"over answers against the target {p['target_precision']:g}.")
    rows = [f"- `{k['kind']}` (target {k.get('target') or p['target_precision']:g}): {k['clean']} of "
            f"{k['tasks']} tasks clean ({k['right']}/{k['answered']} answers acceptable, {k['strict']} "
            f"strict); lower bound over tasks {k['lower_bound']:.3f}: "
            + ("promoted" if k["promoted"] else f"not promoted, {k['tasks_needed']} more clean tasks needed")
            for k in p["kinds"]]
    return "\n".join([head, "", "Each kind of output is certified with tasks as the unit (a task is clean "
                       f"when every answer of that kind in it was acceptable; one-sided {1 - p['alpha']:.0%} "
                       "Clopper–Pearson bound against the kind's target: calls the precision their threshold "
                       "states, replies their own; at 0.95 it needs ≥ 59 clean tasks and none unclean):", "",
                       *rows])