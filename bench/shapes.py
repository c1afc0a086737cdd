"""A second policy generator for the compile benchmarks, independent of legal_bench.py's: other shapes.

Where legal_bench.py generates role and attribute rules over a few small enums, this one makes the
shapes that stress other passes of the compiler: many intents (one per 20 actions, each allowing 25),
deep `after` chains (chains of 40 actions, each after the one before), large enums (a 400-member
`region` and a 200-member `plan`, tested with `in {…}` sets of 8 members), arithmetic on
numbers, `self in confirmed` on tags (domains of about 10 actions, a few on
kinds of action: 1/8 of all), and argument rules (`args.amount`, `args.mode` of typed signatures).
It emits the same policy as zc source and as a Cedar policy set that says the same thing (one
`permit` for everything, one `forbid` per zc rule: `requires E` as `forbid … unless`, `after` as
`unless context.history.contains(…)`, an intent as `forbid … when context.intent == … unless
action in [...]`, tags as Cedar action groups), so Cedar's `PolicySet.from_str` parses a policy set of the
same size and shape.

Seeded: `generate(n_actions)` is the same text on every run and machine. About 2 rules per action,
so `generate(50_000)` is 100,000 rules in about 4 MB (below zc's 8 MB limit).

Usage: python bench/shapes.py N [--cedar]   (prints the zc source, or the Cedar text)
"""

from __future__ import annotations

import random
import sys

SEED = 20261203
REGIONS = [f"r{k}" for k in range(400)]
PLANS = [f"p{k}" for k in range(200)]
TAGS = ("read", "write", "money", "destructive", "publish", "ops", "support", "billing")
CHAIN = 40  # actions per `after` chain
PER_INTENT = 25


def generate(n_actions: int, seed: int = SEED) -> dict:
    """The policy as data: actions (name, tags, cost, signature), intents, rules."""
    rng = random.Random(f"{seed}:{n_actions}")
    actions = []
    n_domains = max(2, n_actions // 10)
    for k in range(n_actions - 1):
        tags = (rng.choice(TAGS), f"d{rng.randrange(n_domains)}")  # a kind and one of n/10 domains
        params = (("amount", "int"), ("mode", "enum(fast, slow)")) if k % 7 == 3 else ()
        actions.append((f"a{k}", tags, rng.randrange(0, 6), params))
    actions.append(("stop", ("ops",), 0, ()))
    names = [a[0] for a in actions[:-1]]
    signed = [a[0] for a in actions if a[3]]
    intents = [(f"i{k}", sorted(rng.sample(names, min(PER_INTENT, len(names))), key=names.index))
               for k in range(max(1, n_actions // 20))]
    rules = []
    for k, name in enumerate(names):  # `after` chains: each action after the one before in its chain
        if k % CHAIN:
            rules.append((f"c{k}", "after", (name,), names[k - 1]))
    i = 0
    regioned: set[str] = set()
    while len(rules) < 2 * n_actions:
        i += 1
        r = rng.random()
        a = rng.choice(names)
        if r < 0.3 and a not in regioned:  # one region rule an action: two rarely overlap
            regioned.add(a)
            members = sorted(rng.sample(REGIONS, 8), key=REGIONS.index)
            rules.append((f"g{i}", "requires", (a,), ("in", "region", members)))
        elif r < 0.5:
            rules.append((f"p{i}", "forbid_when", tuple(sorted(rng.sample(names, 2), key=names.index)),
                          ("and", ("eq", "plan", rng.choice(PLANS)), ("gt", "step", rng.randrange(2, 9)))))
        elif r < 0.65:
            rules.append((f"b{i}", "forbid_when", (a,), ("budget", rng.randrange(1, 9))))
        elif r < 0.8 and signed:
            s = rng.choice(signed)
            cond = ("amount", rng.randrange(50, 900)) if rng.random() < 0.5 else ("mode",)
            rules.append((f"x{i}", "forbid_when", (s,), cond))
        elif r < 0.9:  # a few rules on a kind of action (each targets 1/8 of them), the rest on a domain
            tag = rng.choice(TAGS[2:5]) if i % 997 == 0 else f"d{rng.randrange(n_domains)}"
            rules.append((f"t{i}", "forbid_unless_tag", tag, ("confirmed",)))
        else:
            members = sorted(rng.sample(PLANS, 6), key=PLANS.index)
            rules.append((f"n{i}", "forbid_unless", (a,), ("or", ("in", "plan", members), ("flag",))))
    return {"name": f"shapes{n_actions}", "actions": actions, "intents": intents, "rules": rules}


def _zc_cond(c) -> str:
    kind = c[0]
    if kind == "in":
        return f"{c[1]} in {{{', '.join(c[2])}}}"
    if kind == "and":
        return f"{_zc_cond(c[1])} and {_zc_cond(c[2])}"
    if kind == "or":
        return f"{_zc_cond(c[1])} or {_zc_cond(c[2])}"
    return {"eq": lambda: f"{c[1]} == {c[2]}", "gt": lambda: f"{c[1]} > {c[2]}",
            "budget": lambda: f"spent + {c[1]} > budget", "amount": lambda: f"args.amount > {c[1]}",
            "mode": lambda: "args.mode == slow", "confirmed": lambda: "self in confirmed",
            "flag": lambda: "vip"}[kind]()


def to_zc(pol: dict) -> str:
    """zc source text of a generated policy."""
    out = [f"policy {pol['name']}", "", "state {",
           f"  region: enum({', '.join(REGIONS)})", f"  plan: enum({', '.join(PLANS)})",
           "  step: int = 0", "  spent: int = 0", "  budget: int", "  vip: bool = false",
           "  confirmed: set[action] = {}", "}", ""]
    for name, tags, cost, params in pol["actions"]:
        sig = f"({', '.join(f'{p}: {t}' for p, t in params)})" if params else ""
        out.append(f"action {name}{sig} tags({', '.join(tags)})" + (f" cost {cost}" if cost else ""))
    out += ["", "fallback stop", ""]
    out += [f"intent {name} {{ allow {', '.join(allow + ['stop'])} }}" for name, allow in pol["intents"]]
    out.append("")
    for name, kind, target, cond in pol["rules"]:
        if kind == "after":
            out.append(f"rule {name}: {target[0]} after {cond}")
        elif kind == "forbid_unless_tag":
            out.append(f"rule {name}: forbid tags({target}) unless {_zc_cond(cond)}")
        else:
            body = {"requires": "{} requires {}", "forbid_when": "forbid {} when {}",
                    "forbid_unless": "forbid {} unless {}"}[kind]
            out.append(f"rule {name}: " + body.format(", ".join(target), _zc_cond(cond)))
    return "\n".join(out) + "\n"


def _cedar_cond(c) -> str:
    kind = c[0]
    if kind == "in":
        return f"[{', '.join(f'{chr(34)}{m}{chr(34)}' for m in c[2])}].contains(context.{c[1]})"
    if kind in ("and", "or"):
        op = " && " if kind == "and" else " || "
        return f"({_cedar_cond(c[1])}{op}{_cedar_cond(c[2])})"
    return {"eq": lambda: f'context.{c[1]} == "{c[2]}"', "gt": lambda: f"context.{c[1]} > {c[2]}",
            "budget": lambda: f"context.spent + {c[1]} > context.budget",
            "amount": lambda: f"context.args.amount > {c[1]}",
            "mode": lambda: 'context.args.mode == "slow"',
            "confirmed": lambda: "context.confirmed.contains(action)",
            "flag": lambda: "context.vip"}[kind]()


def _cedar_actions(names) -> str:
    return "[" + ", ".join(f'Action::"{n}"' for n in names) + "]"


def to_cedar(pol: dict) -> str:
    """The same policy as a Cedar policy set."""
    out = ["permit (principal, action, resource);"]
    for name, allow in pol["intents"]:
        out.append(f'@id("{name}")\nforbid (principal, action, resource) '
                   f'when {{ context.intent == "{name}" }} '
                   f"unless {{ action in {_cedar_actions(allow + ['stop'])} }};")
    for name, kind, target, cond in pol["rules"]:
        if kind == "after":
            head = f'action == Action::"{target[0]}"'
            body = f'unless {{ context.history.contains("{cond}") }}'
        elif kind == "forbid_unless_tag":
            head, body = f'action in Action::"tag_{target}"', f"unless {{ {_cedar_cond(cond)} }}"
        else:
            head = (f'action == Action::"{target[0]}"' if len(target) == 1
                    else f"action in {_cedar_actions(target)}")
            word = "when" if kind == "forbid_when" else "unless"
            body = f"{word} {{ {_cedar_cond(cond)} }}"
        out.append(f'@id("{name}")\nforbid (principal, {head}, resource) {body};')
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    pol = generate(int(sys.argv[1]))
    sys.stdout.write(to_cedar(pol) if "--cedar" in sys.argv else to_zc(pol))
