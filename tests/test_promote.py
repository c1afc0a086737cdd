"""`zc promote`: a specialist re-gated on its shadow answers in live receipts of tasks it never trained on;
the power figures behind it (hand-computed)."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner

import zcompile
from zcompile import stats
from zcompile.cli import main
from zcompile.errors import ZcError
from zcompile.qroute import load_specialist, read_manifest
from zcompile.qroute.manifest import encode, identity, seal_manifest
from zcompile.qroute.promote import Evidence, Kind, evidence, promote, regate
from zcompile.receipts import Receipt, read, write_file
from zcompile.router import Router
from zcompile.router.rung import settle

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "specialists" / "airline_chat"


def test_answers_needed_and_detectable_difference_by_hand():
    # all right: the one-sided Clopper–Pearson lower bound of n/n is alpha ** (1 / n)
    assert stats.answers_needed(0.95, method="clopper-pearson") == math.ceil(math.log(0.05) / math.log(
        0.95)) == 59
    assert stats.answers_needed(0.9, method="clopper-pearson") == math.ceil(math.log(0.05) / math.log(0.9))
    # Wilson (two-sided 95%) of n/n is n / (n + z²): ≥ 0.95 first at n = 0.95 z² / 0.05
    z2 = 1.959963984540054 ** 2
    assert stats.answers_needed(0.95) == math.ceil(0.95 * z2 / 0.05) == 73
    # (z_0.975 + z_0.8) * sqrt(2 p (1 - p) / n)
    assert stats.detectable_difference(0.95, 20) == pytest.approx(
        (1.959963984540054 + 0.8416212335729143) * math.sqrt(2 * 0.95 * 0.05 / 20), rel=1e-9)
    assert stats.detectable_difference(0.5, 0) is None


@pytest.fixture(scope="module")
def policy():
    return zcompile.compile_file(ROOT / "policies" / "airline_chat.zc")


class Teacher:
    """The remote rung answering as the logged teacher did (the receipt being replayed): its call with
    its arguments, or its reply, so live shadow calls are judged against whole calls."""

    name = "remote"
    writes_text = True
    receipt = None

    def answer(self, step, timeout_s):
        r = self.receipt
        return settle(step, r.action, r.arguments, "(the teacher's reply)" if r.arguments is None else None,
                      confidence=1.0, model="teacher")


def live(policy, path: Path, windows: int, relabel=None) -> Path:
    """Receipts a router writes with the shipped specialist in shadow mode, over the decisions of its
    sealed test tasks (never trained on), `windows` times (as new conversations of those tasks)."""
    sp = load_specialist(SHIPPED, policy)
    test = set(sp.manifest.splits.test.tasks)
    logged = [r for r in read(ROOT / "receipts") if r.task in test]
    teacher = Teacher()
    with Router(policy, tiers={"remote": teacher}, receipts=path, shadow=[sp]) as router:
        for _ in range(windows):
            for r in logged:
                teacher.receipt = r
                router.decide(r.state, task=r.task, candidates=r.candidates,
                              meta={"conversation": r.meta.get("conversation")})
    if relabel is not None:
        write_file(path, [relabel(r) for r in read(path)])
    return path


def copy(tmp_path: Path, call_target: float | None = None) -> Path:
    """The shipped specialist copied; with `call_target`, its calls' threshold stating that precision
    (sealed again)."""
    d = tmp_path / "sp"
    shutil.copytree(SHIPPED, d)
    if call_target is not None:
        m = read_manifest(d)
        th = msgspec.structs.replace(m.threshold, target_precision=call_target)
        (d / "manifest.json").write_bytes(encode(seal_manifest(msgspec.structs.replace(m, threshold=th))))
    return d


def test_one_window_is_too_small_to_promote(policy, tmp_path):
    d = copy(tmp_path)
    before = read_manifest(d)
    m, ev = promote(d, policy, [live(policy, tmp_path / "live.jsonl", 1)])
    assert ev.asked == before.splits.test.decisions  # one shadow record per decision
    assert ev.answered >= ev.right >= ev.strict > 0 and ev.illegal == ev.dangerous == 0
    p = m.metrics["promotion"]
    assert p["unit"] == "tasks" and ev.tasks == len(before.splits.test.tasks) == 5
    for k in ev.kinds:  # one-sided Clopper–Pearson over the tasks each kind answered in
        assert k.lower_bound == pytest.approx(stats.lower_bound(k.clean, k.tasks)) and k.tasks <= 5
        assert k.target == (before.calls.reply_threshold.target_precision if k.kind in before.calls.replies
                            else before.threshold.target_precision)  # calls at 0.90, replies at 0.95
        assert k.tasks_needed == stats.tasks_needed(k.clean, k.tasks, k.target) > 0 and not k.promoted
    assert {k.kind for k in ev.kinds} >= {"call/user", "respond"}  # the receipts carry candidates
    user = next(k for k in ev.kinds if k.kind == "call/user")
    assert (user.clean, user.tasks, user.tasks_needed) == (2, 2, 27)  # docs/router.md prints these
    assert p["lower_bound"] == min(k.lower_bound for k in ev.kinds) and not m.gate.promoted
    assert any("tasks clean" in r and "more clean tasks needed" in r for r in m.gate.reasons)
    assert p["previous_gate"]["promoted"] is True
    on_disk = read_manifest(d)  # re-sealed: it loads, and says what promote decided
    assert on_disk.sha256 == m.sha256 and encode(on_disk) == encode(m) and not on_disk.gate.promoted
    report = (d / "report.md").read_text()
    assert "## Promotion on shadow evidence" in report and ("- `respond` (target 0.95): 5 of 5 tasks "
                                                            "clean") in report
    with pytest.raises(ZcError, match="not promoted"):
        Router(policy, specialists=d)
    # a loaded one: the caller's choice
    assert Router(policy, specialists=load_specialist(d, policy)).specialists


def shadow_receipts(path: Path, m, tasks: dict[str, list[bool]], *, candidates: bool = True) -> Path:
    """Live receipts of new tasks, each decision a lookup the teacher made with the user's id and the
    specialist `m` answered in shadow: right (the same id) or wrong (another word the user typed), as
    `tasks` says."""
    base = next(r for r in read(ROOT / "receipts") if r.action == "get_user_details")
    other = next(c.value for c in base.candidates if c.source == "user" and isinstance(c.value, str))
    rows = []
    for task, answers in tasks.items():
        for i, right in enumerate(answers):
            record = {"tier": "specialist", "outcome": "answered", "kind": "call",
                      "action": "get_user_details",
                      "arguments": {"user_id": base.arguments["user_id"] if right else other},
                      "specialist": m.name, "version": identity(m)}
            rows.append(Receipt(id=f"{task}:{i}", task=task, state=base.state, tier="remote",
                                action=base.action, arguments=base.arguments,
                                candidates=base.candidates if candidates else None,
                                meta={"conversation": f"{task}/{i}", "shadow": [record]}))
    write_file(path, rows)
    return path


def test_promotion_counts_tasks_not_answers(policy, tmp_path):
    """100 right answers from 3 tasks are 3 clean tasks: far from 0.95 (56 more needed); 59 clean tasks
    promote; one unclean task among 60 demotes; without candidates a call's kind is its action. (The
    calls' threshold made to state 0.95; the shipped one states 0.90.)"""
    d = copy(tmp_path, call_target=0.95)
    m0 = read_manifest(d)
    many = shadow_receipts(tmp_path / "many.jsonl", m0,
                           {"t0": [True] * 34, "t1": [True] * 33, "t2": [True] * 33})
    m, ev = promote(d, policy, [many])
    (k,) = ev.kinds
    assert (ev.answered, ev.right, ev.tasks) == (100, 100, 3) and not m.gate.promoted
    assert (k.kind, k.clean, k.tasks, k.tasks_needed) == ("call/user", 3, 3, 56)
    assert k.lower_bound == pytest.approx(0.05 ** (1 / 3))
    assert stats.lower_bound(100, 100) >= 0.95  # what counting answers would have certified
    clean = {f"new-{i}": [True] * (1 + i % 2) for i in range(59)}
    m, ev = promote(d, policy, [shadow_receipts(tmp_path / "clean.jsonl", m0, clean)])
    (k,) = ev.kinds
    assert (k.clean, k.tasks, k.tasks_needed, k.promoted) == (59, 59, 0, True) and m.gate.promoted
    assert k.lower_bound == pytest.approx(0.05 ** (1 / 59)) and m.gate.reasons == ()
    assert Router(policy, specialists=d).specialists  # the directory now earns its rung
    out = CliRunner().invoke(main, ["promote", str(d), "--policy", str(ROOT / "policies" / "airline_chat.zc"),
                                    "--receipts", str(tmp_path / "clean.jsonl"), "--dry-run"])
    assert out.exit_code == 0 and "call/user (target 0.95): 59 of 59 tasks clean" in out.output
    assert "would be promoted" in out.output
    # one wrong answer in a 60th task: 59 of 60 clean, the bound falls below the target: demoted
    one_bad = shadow_receipts(tmp_path / "one_bad.jsonl", m0, {**clean, "bad": [True, False]})
    m, ev = promote(d, policy, [one_bad])
    (k,) = ev.kinds
    assert (k.clean, k.tasks) == (59, 60) and not m.gate.promoted
    assert k.tasks_needed == stats.tasks_needed(59, 60, 0.95) > 0
    assert m.metrics["promotion"]["previous_gate"]["promoted"] is True
    out = CliRunner().invoke(main, ["promote", str(d), "--policy", str(ROOT / "policies" / "airline_chat.zc"),
                                    "--receipts", str(tmp_path / "one_bad.jsonl"), "--dry-run"])
    assert out.exit_code == 1 and f"needs {k.tasks_needed} more clean tasks" in out.output
    bare = shadow_receipts(tmp_path / "bare.jsonl", m0, {"t0": [True]}, candidates=False)
    assert [k.kind for k in evidence([bare], m0, policy).kinds] == ["get_user_details"]


def test_later_reads_of_the_teacher_are_acceptable_live(policy, tmp_path):
    """A shadow lookup the teacher made one step later counts as acceptable (the judge `zc eval`
    uses), not strict."""
    m0 = read_manifest(SHIPPED)
    path = shadow_receipts(tmp_path / "s.jsonl", m0, {"t0": [True]})
    (r,) = read(path)
    early = msgspec.structs.replace(r, id="t0:early", action="respond", arguments=None, ts=1.0,
                                    meta={**r.meta, "conversation": "c"})
    later = msgspec.structs.replace(r, id="t0:later", meta={"conversation": "c"}, ts=2.0)
    write_file(path, [early, later])
    ev = evidence([path], m0, policy)
    assert (ev.answered, ev.right, ev.strict) == (1, 1, 0)


def test_dry_run_changes_nothing(policy, tmp_path):
    d = copy(tmp_path)
    before = {f.name: f.read_bytes() for f in d.iterdir()}
    m, _ = promote(d, policy, [live(policy, tmp_path / "live.jsonl", 1)], dry_run=True)
    assert not m.gate.promoted
    assert {f.name: f.read_bytes() for f in d.iterdir()} == before


def test_only_this_version_on_unseen_tasks_counts(policy, tmp_path):
    m = read_manifest(SHIPPED)
    trained = m.splits.train.tasks[0]
    path = live(policy, tmp_path / "live.jsonl", 1)
    rows = list(read(path))

    def tweak(i, r):
        shadow = [dict(s) for s in r.meta["shadow"]]
        if i % 3 == 0:  # another version of the same name
            shadow = [dict(s, version="0" * 64) for s in shadow]
        elif i % 3 == 1:  # a task the specialist trained on
            return msgspec.structs.replace(r, task=trained, meta={**r.meta, "shadow": shadow})
        return msgspec.structs.replace(r, meta={**r.meta, "shadow": shadow})

    write_file(path, [tweak(i, r) for i, r in enumerate(rows)])
    ev = evidence([path], m, policy)
    assert ev.other_versions == len(range(0, len(rows), 3))
    assert ev.trained_on == len(range(1, len(rows), 3))
    assert ev.asked == len(rows) - ev.other_versions - ev.trained_on


def test_illegal_or_dangerous_shadow_answers_refuse_promotion():
    m = read_manifest(SHIPPED)
    good = Evidence(asked=100, answered=80, right=80,
                    kinds=[Kind("respond", answered=80, right=80, tasks=60, clean=60)])
    assert regate(m, good).gate.promoted
    for bad in (Evidence(asked=100, answered=80, right=79, dangerous=1,
                         kinds=[Kind("respond", answered=80, right=79, tasks=60, clean=59, dangerous=1)]),
                Evidence(asked=100, answered=80, right=80, illegal=1,
                         kinds=[Kind("respond", answered=80, right=80, tasks=60, clean=60, illegal=1)])):
        g = regate(m, bad).gate
        assert not g.promoted and any("illegal" in r for r in g.reasons)
    assert not regate(m, Evidence(asked=100)).gate.promoted


def test_cli_promote(policy, tmp_path):
    d = copy(tmp_path)
    path = live(policy, tmp_path / "live.jsonl", 1)

    def run(*a: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "zcompile", "promote", *a], capture_output=True,
                              text=True, timeout=300)

    out = run(str(d), "--policy", str(ROOT / "policies" / "airline_chat.zc"), "--receipts", str(path))
    assert out.returncode == 1, out.stderr
    assert "NOT promoted" in out.stdout and "Traceback" not in out.stderr
    out = run(str(tmp_path / "nowhere"), "--policy", str(ROOT / "policies" / "airline_chat.zc"), "--receipts",
              str(path))
    assert out.returncode == 1 and out.stderr.startswith("error:") and "Traceback" not in out.stderr
    other = ROOT / "policies" / "agent_core.zc"
    out = run(str(d), "--policy", str(other), "--receipts", str(path))
    assert out.returncode == 1 and "Traceback" not in out.stderr and out.stderr.startswith("error:")


def test_encode_of_a_promoted_manifest_is_sealed(policy, tmp_path):
    d = copy(tmp_path)
    m, _ = promote(d, policy, [live(policy, tmp_path / "live.jsonl", 1)])
    assert encode(m) == (d / "manifest.json").read_bytes()


def test_shadow_versions_are_cached_without_growing():
    """A process that loads specialist after specialist keeps at most MAX_VERSIONS manifests for
    their identities, and each identity stays its own manifest's."""
    from types import SimpleNamespace

    from zcompile.qroute.manifest import identity
    from zcompile.router import shadow

    m = read_manifest(Path(__file__).parents[1] / "specialists" / "airline_chat")
    made = [msgspec.structs.replace(m, name=f"copy-{i}") for i in range(shadow.MAX_VERSIONS + 6)]
    got = [shadow.version(SimpleNamespace(manifest=x)) for x in made]
    assert len(shadow._VERSIONS) <= shadow.MAX_VERSIONS
    assert got == [identity(x) for x in made] and len(set(got)) == len(made)


def test_monitor_counting_tasks_demotes_errors_that_come_in_whole_tasks():
    """60 tasks of 10 answers, every tenth task wrong throughout: counted by answers (270/300 when the
    rule first applies, 540/600 at the end) the live bound stays above 0.80; counted by tasks (27/30
    clean when the rule first applies) it falls below, and the reason says so."""
    from zcompile.router.shadow import Monitor, Unit

    def run(m):
        whys = [m.add("s", i % 10 != 0, 0.80, task=f"t{i}") for i in range(60) for _ in range(10)]
        return [w for w in whys if w]

    assert run(Monitor(window=1000, min_outcomes=300)) == []
    tasks = Monitor(window=100, min_outcomes=30, unit="tasks")
    whys = run(tasks)
    assert whys and whys[0].startswith("live precision 27/30 tasks clean") and tasks.unit is Unit.TASKS
    assert tasks.figures("s") == (54, 60, pytest.approx(stats.lower_bound(54, 60)))
    # the window keeps the last `window` tasks; an answer without a task is its own
    small = Monitor(window=3, min_outcomes=1, unit=Unit.TASKS)
    for t in ("a", "b", "a", "c", "d"):
        small.add("s", t != "b", None, task=t)
    small.add("s", True, None)
    # a, c, d were clean once b fell out; then c, d and the untasked answer
    assert small.figures("s")[:2] == (3, 3)
