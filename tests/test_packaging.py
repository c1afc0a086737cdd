"""The wheel: every subpackage, the grammar and the LICENSE; and the core install, from a fresh virtual
environment, checks, compiles, judges, decides and evaluates without the `distill` extra."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from isolation import _BLOCK, DISTILL

ROOT = Path(__file__).parents[1]
# what pip prints when it cannot reach the package index at all (not when a requirement is wrong)
UNREACHABLE = re.compile(r"NewConnectionError|Max retries exceeded|Temporary failure in name resolution|"
                         r"Network is unreachable|ConnectTimeoutError|ProxyError")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
                   check=True, capture_output=True)
    return next(out.glob("zcompile-*.whl"))


def test_wheel_contains_packages_grammar_and_license(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "zcompile/grammar/zc.lark" in names
    assert "zcompile/grammar/zc.tables" in names  # the parser's packaged LALR tables
    assert "zcompile/evals/templates/report.html" in names
    for module in sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "zcompile").rglob("*.py")):
        assert module in names
    if shutil.which("cc"):  # the optional C extension of the feature row is built where it can be
        assert [n for n in names if re.fullmatch(r"zcompile/qroute/_features_c\..+\.so", n)]
    licenses = [n for n in names if n.endswith("/LICENSE") and ".dist-info/" in n]
    assert licenses and zipfile.ZipFile(wheel).read(licenses[0]) == (ROOT / "LICENSE").read_bytes()
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    core = [line for line in meta.splitlines() if line.startswith("Requires-Dist:")
            and "extra ==" not in line]
    assert core and not [line for line in core if re.search(r"scikit-learn|scipy|skl2onnx|onnx\b|mapie",
                                                            line)]


def test_distill_without_the_extra_says_what_to_install(tmp_path):
    code = _BLOCK.format(blocked=DISTILL) + ("import sys\nsys.argv[0] = 'zc'\nfrom zcompile.cli import "
                                             "main\nmain()\n")
    run = subprocess.run([sys.executable, "-c", code, "distill", "--from", str(ROOT / "receipts"), "--policy",
                          str(ROOT / "policies" / "airline_chat.zc"), "-o", str(tmp_path / "sp")],
                         capture_output=True, text=True)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert "pip install 'zcompile[distill]'" in run.stderr and "sklearn" in run.stderr
    assert not (tmp_path / "sp").exists()


DECIDE = """
import gzip, itertools, json, sys, zcompile
from zcompile.router import Router
root = sys.argv[1]
policy = zcompile.load("build/airline_chat.zcp")
router = Router(policy, specialists=root + "/specialists/airline_chat")
seen = []
with gzip.open(root + "/receipts/tau-airline-gpt4o.jsonl.gz", "rt") as f:
    for line in itertools.islice(f, 30):
        r = json.loads(line)
        d = router.decide(r["state"], candidates=r.get("candidates"))
        seen += [s["outcome"] for s in d.receipt.meta["rungs"] if s["tier"] == "specialist"]
print(json.dumps(sorted(set(seen))))
"""


@pytest.mark.slow  # a fresh virtual environment and the core's install
def test_core_wheel_in_a_fresh_venv(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    py, zc_bin = venv / "bin" / "python", str(venv / "bin" / "zc")
    install = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                              "--no-compile", str(wheel)],
                             capture_output=True, text=True, timeout=900)
    if install.returncode and UNREACHABLE.search(install.stdout + install.stderr):
        pytest.skip("the package index is unreachable: the core wheel's dependencies cannot be installed")
    assert install.returncode == 0, install.stderr[-3000:]
    found = subprocess.run([str(py), "-c", f"import importlib.util as u; print([m for m in {DISTILL!r} "
                            "if u.find_spec(m)])"], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"  # the core install brings none of the training stack
    work = tmp_path / "work"
    shutil.copytree(ROOT / "policies", work / "policies")
    shutil.copytree(ROOT / "examples", work / "examples", ignore=shutil.ignore_patterns("__pycache__"))

    def zc(*args: str) -> str:
        run = subprocess.run([zc_bin, *args], cwd=work, capture_output=True, text=True)
        assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
        return run.stdout

    zc("check", "policies/")
    assert "compiled" in zc("compile", "policies/", "-o", "build/")
    legal = json.loads(zc("legal", "build/agent_core.zcp", "--state", "examples/agent_core_state.json",
                          "--json"))
    assert legal["policy"] == "agent_core" and legal["legal"]
    decide = subprocess.run([str(py), "-c", DECIDE, str(ROOT)], cwd=work, capture_output=True, text=True)
    assert decide.returncode == 0, decide.stderr
    # the tabular specialist decided (replies go to a text tier)
    assert "handed_on" in json.loads(decide.stdout)
    zc("eval", "--policy", "build/airline_chat.zcp", "--specialists",
       str(ROOT / "specialists" / "airline_chat"), "--receipts", str(ROOT / "receipts"), "--html",
       "eval.html")
    assert (work / "eval.html").exists()
    distill = subprocess.run([zc_bin, "distill", "--from", str(ROOT / "receipts"), "--policy",
                              "build/airline_chat.zcp", "-o", "sp"], cwd=work, capture_output=True, text=True)
    assert distill.returncode == 1 and "pip install 'zcompile[distill]'" in distill.stderr
