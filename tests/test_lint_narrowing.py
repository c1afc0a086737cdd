"""The lints enumerate an enum's unnamed members as one (`Linter._domains`): the same diagnostics as
enumerating every member."""

from __future__ import annotations

import random

from zcompile import lint
from zcompile.driver import check_source
from zcompile.errors import ZcError
from zcompile.source import Source

MEMBERS = [f"m{i}" for i in range(9)]


def _atom(rng: random.Random) -> str:
    field = rng.choice(["a", "b"])
    other = "b" if field == "a" else "a"
    kind = rng.randrange(6)
    if kind == 0:
        return f"{field} == {rng.choice(MEMBERS)}"
    if kind == 1:
        return f"{field} != {rng.choice(MEMBERS)}"
    if kind == 2:
        return f"{field} in {{{', '.join(rng.sample(MEMBERS, rng.randint(1, 4)))}}}"
    if kind == 3:
        return f"{field} not in {{{', '.join(rng.sample(MEMBERS, rng.randint(1, 4)))}}}"
    if kind == 4:
        return f"{field} {rng.choice(['==', '!='])} {other}"
    return f"n > {rng.randint(0, 3)}"


def _cond(rng: random.Random) -> str:
    parts = [_atom(rng) for _ in range(rng.randint(1, 3))]
    text = f" {rng.choice(['and', 'or'])} ".join(parts)
    return f"not ({text})" if rng.random() < 0.2 else text


def _policy(rng: random.Random) -> str:
    lines = ["policy p", "state {", f"  a: enum({', '.join(MEMBERS)})", f"  b: enum({', '.join(MEMBERS)})?",
             "  n: int = 0", "}", *(f"action x{i}" for i in range(4)), "fallback x0"]
    for r in range(rng.randint(2, 7)):
        target = f"x{rng.randrange(4)}"
        form = rng.choice(["{t} requires {c}", "forbid {t} when {c}", "forbid {t} unless {c}"])
        lines.append(f"rule r{r}: " + form.format(t=target, c=_cond(rng)))
    return "\n".join(lines) + "\n"


def _diagnostics(text: str) -> list[str]:
    try:
        return [d.render() for d in check_source(Source("p.zc", text)).diagnostics]
    except ZcError as exc:
        return [d.render() for d in exc.diagnostics]


def test_narrowed_enums_decide_as_whole_ones(monkeypatch):
    rng = random.Random(27)
    texts = [_policy(rng) for _ in range(150)]
    narrowed = [_diagnostics(t) for t in texts]
    real = lint.Linter._domains

    def whole(self, consts, members):
        found = real(self, consts, members)
        if found is not None:
            for path in found[0]:
                info = self.k.fields[path]
                if info.kind == "enum":
                    found[0][path] = list(info.members) + ([None] if info.may_be_absent else [])
        return found

    monkeypatch.setattr(lint.Linter, "_domains", whole)
    assert [_diagnostics(t) for t in texts] == narrowed
    found = [d for ds in narrowed for d in ds]
    assert sum("ZC1001" in d for d in found) >= 5 and sum("ZC1002" in d for d in found) >= 5
