"""Hypothesis strategies shared by the property tests: random policies (typed action signatures,
argument rules, intents, every rule kind), states that fit them, and proposed calls. The differential
test holds the runtime to the reference interpreter on them; `zc fmt` and the gateway reuse them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from hypothesis import assume
from hypothesis import strategies as st

from zcompile.errors import ZcError

SCHEMA = """
state {
  a:   enum(x, y, z)
  b:   enum(x, y, z)?
  c:   bool
  d:   bool?
  n:   int = 0
  m:   int?
  f.g: float?
  s:   set[action] = {}
  t:   set[action]?
  u.v: enum(p, q) = p
  w:   text?
}
"""
ENUMS = {"a": "xyz", "b": "xyz", "u.v": "pq"}
NUMS = ["n", "m", "f.g", "cost"]
# numbers at the edge of the finite range: arithmetic on them overflows (to inf, NaN or past floats)
HUGE = ["1.0e308", "9223372036854775807", "1.5e307"]
BIG_INTS = [2**63 - 1, -2**63, 2**62]
BIG_FLOATS = [1.7976931348623157e308, -1.7976931348623157e308, 1e308, -5e307]
SIGNATURE = "(k: enum(x, y, z), q: int, r: int?, l: list, o: bool?, note: text?)"
ARG_LEAVES = ["args.k == x", "args.k != y", "args.k in {x, z}", "args.k == a", "args.q > n",
              "args.q + 1 <= cost", "args.r in {1, 2}", "len(args.l) <= args.q", "len(args.l) == 0",
              "args.o", "not args.o", "args.r > m"]
TAGS = ["t1", "t2", "t3"]


@st.composite
def num_expr(draw, actions, depth):
    if depth <= 0 or draw(st.booleans()):
        return draw(st.sampled_from(NUMS + [str(draw(st.integers(-3, 6))), "1.5"]
                                    + (HUGE if draw(st.integers(0, 5)) == 0 else [])))
    op = draw(st.sampled_from(["+", "-", "*"]))
    return f"({draw(num_expr(actions, depth - 1))} {op} {draw(num_expr(actions, depth - 1))})"


@st.composite
def bool_expr(draw, actions, depth, args=False):
    kind = draw(st.integers(-1 if args else 0, 11 if depth > 0 else 8))
    if kind == -1:
        return draw(st.sampled_from(ARG_LEAVES))
    if kind == 0:
        field = draw(st.sampled_from(list(ENUMS)))
        op = draw(st.sampled_from(["==", "!="]))
        return f"{field} {op} {draw(st.sampled_from(ENUMS[field]))}"
    if kind == 1:
        field = draw(st.sampled_from(list(ENUMS)))
        members = draw(st.lists(st.sampled_from(ENUMS[field]), min_size=1, max_size=3))
        neg = draw(st.sampled_from(["in", "not in"]))
        return f"{field} {neg} {{{', '.join(members)}}}"
    if kind == 2:
        return draw(st.sampled_from(["c", "d", "true", "false", "a == b", "b != a"]))
    if kind == 3:
        op = draw(st.sampled_from(["==", "!=", "<", "<=", ">", ">="]))
        return f"{draw(num_expr(actions, 1))} {op} {draw(num_expr(actions, 1))}"
    if kind == 4:
        values = draw(st.lists(st.integers(-2, 4), min_size=1, max_size=3))
        neg = draw(st.sampled_from(["in", "not in"]))
        return f"{draw(st.sampled_from(['n', 'm']))} {neg} {{{', '.join(map(str, values))}}}"
    if kind in (5, 6):
        who = draw(st.sampled_from(["self"] + actions))
        where = draw(st.sampled_from(["s", "t", "history"]))
        neg = draw(st.sampled_from(["in", "not in"]))
        return f"{who} {neg} {where}"
    if kind == 7:
        return f"self {draw(st.sampled_from(['==', '!=']))} {draw(st.sampled_from(actions))}"
    if kind == 8:
        return f"cost {draw(st.sampled_from(['>', '<=']))} {draw(st.sampled_from(['n', 'm', 'f.g']))}"
    if kind == 9:
        return f"not ({draw(bool_expr(actions, depth - 1, args))})"
    word = "and" if kind == 10 else "or"
    parts = draw(st.lists(bool_expr(actions, depth - 1, args), min_size=2, max_size=3))
    return f" {word} ".join(f"({p})" for p in parts)


# What `zc serve` needs beside a drawn policy: the text reply (`respond`), an action whose empty
# signature makes its name a complete call (`ping`, a local answer when it is the only legal action),
# and a tier for the upstream.
SERVED = "action respond tags(control, reply)\naction ping() tags(control) cost 0\ntier remote cost 1\n"


@st.composite
def policies(draw, served: bool = False):
    """(source, the drawn action names). `served`: with SERVED declared (`*` in an argument rule is
    spelled out as the drawn actions, which alone declare the arguments), and `ping` among the
    fallbacks drawn."""
    n = draw(st.integers(1, 6))
    actions = [f"act{i}" for i in range(n)]
    lines = ["policy random", SCHEMA]
    for name in actions:
        tags = draw(st.lists(st.sampled_from(TAGS), min_size=1, max_size=2))
        lines.append(f"action {name}{SIGNATURE} tags({', '.join(tags)}) cost {draw(st.integers(0, 5))}")
    used_tags = sorted({t for line in lines if line.startswith("action")
                        for t in line.split("tags(")[1].split(")")[0].split(", ")})
    lines.append(f"fallback {draw(st.sampled_from(actions + ['ping'] if served else actions))}")
    allow = draw(st.lists(st.sampled_from(actions), min_size=1, max_size=n, unique=True))
    lines.append(f"intent focus {{ allow {', '.join(allow)} }}")
    for i in range(draw(st.integers(0, 6))):
        target = draw(st.one_of(
            st.lists(st.sampled_from(actions), min_size=1, max_size=3, unique=True).map(", ".join),
            st.lists(st.sampled_from(used_tags), min_size=1, max_size=2, unique=True)
            .map(lambda ts: f"tags({', '.join(ts)})"),
            st.just("*")))
        kind = draw(st.sampled_from(["requires", "forbid_when", "forbid_unless", "after"]))
        if kind == "after":
            needs = draw(st.lists(st.sampled_from(actions), min_size=1, max_size=2, unique=True))
            # keep the `after` graph acyclic: an action may only come after an earlier one
            if target == "*" or target.startswith("tags"):
                target = actions[-1]
            first = min(actions.index(t.strip()) for t in target.split(","))
            needs = [a for a in needs if actions.index(a) < first]
            if not needs:
                continue
            lines.append(f"rule r{i}: {target} after {', '.join(needs)}")
            continue
        cond = draw(bool_expr(actions, 2, args=draw(st.booleans())))
        if served and target == "*" and "args." in cond:
            target = ", ".join(actions)
        body = {"requires": f"{target} requires {cond}",
                "forbid_when": f"forbid {target} when {cond}",
                "forbid_unless": f"forbid {target} unless {cond}"}[kind]
        lines.append(f"rule r{i}: {body}")
    return "\n".join(lines) + "\n" + (SERVED if served else ""), actions


@st.composite
def states(draw, actions):
    opt = lambda s: draw(st.one_of(st.none(), s)) if draw(st.booleans()) else draw(s)  # noqa: E731
    subset = st.lists(st.sampled_from(actions), max_size=len(actions), unique=True)
    state: dict = {"a": draw(st.sampled_from("xyz")), "c": draw(st.booleans())}
    optional = {
        "b": st.sampled_from("xyz"), "d": st.booleans(),
        "n": st.one_of(st.integers(-3, 7), st.sampled_from(BIG_INTS)),
        "m": st.one_of(st.integers(-3, 7), st.sampled_from(BIG_INTS)),
        "s": subset, "t": subset, "history": subset,
        "w": st.text(max_size=5),
    }
    for key, strat in optional.items():
        if draw(st.booleans()):
            state[key] = opt(strat)
    if draw(st.booleans()):
        state["f"] = {"g": opt(st.one_of(st.floats(-4, 8, allow_nan=False),
                                         st.sampled_from(BIG_FLOATS)))}
    if draw(st.booleans()):
        state["u"] = {"v": opt(st.sampled_from("pq"))}
    return state


@st.composite
def calls(draw, actions):
    """A proposed call: arguments present, absent, null, of the wrong type, or unknown."""
    values = {
        "k": st.one_of(st.sampled_from("xyz"), st.just("w"), st.integers(0, 2)),
        "q": st.one_of(st.integers(-2, 6), st.just(1.5), st.just("3"), st.booleans()),
        "r": st.one_of(st.integers(0, 3), st.none()),
        "l": st.one_of(st.lists(st.integers(0, 3), max_size=4), st.just("abc"), st.none()),
        "o": st.one_of(st.booleans(), st.just(0)),
        "note": st.one_of(st.text(max_size=3), st.integers()),
        "extra": st.integers(),
    }
    args = {k: draw(v) for k, v in values.items() if draw(st.integers(0, 4)) > (2 if k == "extra" else 0)}
    return draw(st.sampled_from(actions)), args


@contextmanager
def overflow_dropped() -> Iterator[None]:
    """Around checking or compiling a drawn policy: a draw whose constant arithmetic overflows
    (ZC0313, refused by design) is dropped; any other error is raised."""
    try:
        yield
    except ZcError as exc:
        assume(not exc.diagnostics or {d.code for d in exc.diagnostics} != {"ZC0313"})
        raise
