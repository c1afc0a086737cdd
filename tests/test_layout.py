"""The package's shape: no import cycle in zcompile/, no module importing another's private names,
every module opening with a one-line docstring."""

from __future__ import annotations

import ast
from pathlib import Path

from isolation import DISTILL, modules_after

PKG = Path(__file__).parents[1] / "zcompile"


def _modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        parts = p.relative_to(PKG.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, list[str]]]:
    """(imported zcompile module, names taken from it) for every import in the file: at the top, inside
    functions and under `if TYPE_CHECKING:` (an annotation-only import is still a dependency, and a cycle
    through one is a cycle hidden from the interpreter, not one that is absent)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("zcompile"):
                continue
            names = [a.name for a in node.names]
            subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in modules]
            out += [(s, []) for s in subs]
            out.append((target, [n for n in names if f"{target}.{n}" not in modules]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names if a.name.startswith("zcompile")]
    return [(t, n) for t, n in out if t in modules]


def test_no_import_cycle():
    modules = _modules()
    graph = {m: {t for t, _ in _imports(m, p, modules) if t != m} for m, p in modules.items()}
    # a package's __init__ re-exporting its modules is not a cycle through them
    for m in graph:
        graph[m] = {t for t in graph[m] if not (m.startswith(t + ".") and modules[t].name == "__init__.py")}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(t):] + [t]))
            if t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_no_module_imports_another_modules_private_names():
    modules = _modules()
    bad = [f"{m} imports {n} from {t}" for m, p in modules.items() for t, names in _imports(m, p, modules)
           for n in names if n.startswith("_") and not n.startswith("__") and t != m]
    assert not bad, bad


def test_every_module_opens_with_a_one_line_docstring():
    missing = [str(p.relative_to(PKG)) for p in PKG.rglob("*.py")
               if not (ast.get_docstring(ast.parse(p.read_text())) or "").strip()]
    assert not missing, missing


def test_decisions_need_no_training_dependency():
    """The decision path — compile, load, legal, a router deciding with the shipped tabular specialist,
    its shadow rung and the live demotion bound — runs with the `distill` extra unimportable."""
    root = PKG.parent
    code = f"""
import gzip, itertools, json, zcompile
from zcompile.router import Monitor, Router
from zcompile.qroute import Specialist
policy = zcompile.compile_file({str(root / "policies" / "airline_chat.zc")!r})
spec = {str(root / "specialists" / "airline_chat")!r}
router = Router(policy, specialists=spec, shadow=Specialist(spec, policy), monitor=Monitor(window=5))
outcomes = []
with gzip.open({str(root / "receipts" / "tau-airline-gpt4o.jsonl.gz")!r}, "rt") as f:
    for line in itertools.islice(f, 60):
        r = json.loads(line)
        d = router.decide(r["state"], candidates=r.get("candidates"))
        outcomes += [s["outcome"] for s in d.receipt.meta["rungs"] if s["tier"] == "specialist"]
        router.record_outcome(d, action=r["action"])
assert "handed_on" in outcomes and "abstained" in outcomes, outcomes
# the live demotion rule (a one-sided Clopper–Pearson bound) over a window of judged answers (a fresh
# window: the answers above filled the router's own)
fresh = Monitor(window=5)
why = [fresh.add("airline_chat", right, 0.95) for right in (True, True, True, True, False)]
assert why[:4] == [None] * 4 and "lower bound 0.343 < target 0.950" in why[4], why
"""
    loaded = modules_after(code, blocked=DISTILL)
    assert "zcompile.stats" in loaded and "onnxruntime" in loaded
    assert not {m.partition(".")[0] for m in loaded} & set(DISTILL)


MAX_MODULE_LINES = 600


def test_no_module_past_600_lines():
    lines = {str(p.relative_to(PKG)): len(p.read_text().splitlines()) for p in PKG.rglob("*.py")}
    long = {m: n for m, n in lines.items() if n > MAX_MODULE_LINES}
    assert not long, long
