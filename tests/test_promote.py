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

import zcompile
from zcompile import stats
from zcompile.errors import ZcError
from zcompile.qroute import load_specialist, read_manifest
from zcompile.qroute.manifest import encode
from zcompile.qroute.promote import Evidence, evidence, promote, regate
from zcompile.receipts import read, write_file
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
                router.decide(r.state, task=r.task, candidates=r.candidates)
    if relabel is not None:
        write_file(path, [relabel(r) for r in read(path)])
    return path


def copy(tmp_path: Path) -> Path:
    d = tmp_path / "sp"
    shutil.copytree(SHIPPED, d)
    return d


def test_one_window_is_too_small_to_promote(policy, tmp_path):
    d = copy(tmp_path)
    before = read_manifest(d)
    m, ev = promote(d, policy, [live(policy, tmp_path / "live.jsonl", 1)])
    assert ev.asked == before.splits.test.decisions  # one shadow record per decision
    assert ev.answered >= ev.right > 0 and ev.illegal == ev.dangerous == 0
    p = m.metrics["promotion"]
    # one-sided Clopper–Pearson
    assert p["lower_bound"] == pytest.approx(stats.lower_bound(ev.right, ev.answered))
    assert ev.answered < 59 and not m.gate.promoted
    assert any("Clopper–Pearson lower bound" in r and "59 answers" in r for r in m.gate.reasons)
    assert p["previous_gate"]["promoted"] is True
    on_disk = read_manifest(d)  # re-sealed: it loads, and says what promote decided
    assert on_disk.sha256 == m.sha256 and encode(on_disk) == encode(m) and not on_disk.gate.promoted
    assert "## Promotion on shadow evidence" in (d / "report.md").read_text()
    with pytest.raises(ZcError, match="not promoted"):
        Router(policy, specialists=d)
    # a loaded one: the caller's choice
    assert Router(policy, specialists=load_specialist(d, policy)).specialists


def agreeing(r):
    """The receipt of a teacher that made the call its shadow specialist answered (synthetic: the
    shipped specialist's 2 wrong calls of 30 answers on its test tasks keep the live bound below
    0.95 however many windows; what is tested here is the promotion rule)."""
    for s in r.meta.get("shadow") or []:
        if s.get("outcome") == "answered" and s.get("action") is not None:
            return msgspec.structs.replace(r, action=s["action"], arguments=s.get("arguments"))
    return r


def test_enough_right_shadow_answers_promote_and_wrong_ones_demote(policy, tmp_path):
    d = copy(tmp_path)
    path = live(policy, tmp_path / "live.jsonl", 3, relabel=agreeing)
    m, ev = promote(d, policy, [path])
    assert ev.answered == ev.right >= 59, ev
    assert m.gate.promoted and m.gate.reasons == ()
    assert Router(policy, specialists=d).specialists  # the directory now earns its rung

    # gold says every reply the specialist recognised should have been a lookup, every call a reply
    def wrong(r):
        shadow = r.meta.get("shadow") or []
        if any(s.get("outcome") == "handed_on" for s in shadow):
            return msgspec.structs.replace(r, gold="get_user_details")
        if any(s.get("outcome") == "answered" for s in shadow):
            return msgspec.structs.replace(r, gold="respond")
        return r

    bad = live(policy, tmp_path / "bad.jsonl", 1, relabel=wrong)
    m2, ev2 = promote(d, policy, [bad])
    assert ev2.answered > 0 and ev2.right == 0 and not m2.gate.promoted
    assert read_manifest(d).metrics["promotion"]["previous_gate"]["promoted"] is True
    m3, ev3 = promote(d, policy, [path])  # re-gating keeps the version: the first window still counts
    assert ev3.answered == ev.answered and m3.gate.promoted


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
    good = Evidence(asked=100, answered=80, right=80)
    assert regate(m, good).gate.promoted
    for bad in (Evidence(asked=100, answered=80, right=79, dangerous=1),
                Evidence(asked=100, answered=80, right=80,
                                                                               illegal=1)):
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
