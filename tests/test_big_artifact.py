"""A generated 15,000-rule artifact (IR built directly: parsing that much source takes tens of seconds)
verifies, loads and evaluates in a default interpreter, agreeing with a plain reference."""

from __future__ import annotations

import random
import sys

from zcompile import ir
from zcompile.runtime import Policy

N_ACTIONS, N_RULES = 3_000, 15_000
ROLES = ("viewer", "member", "admin")
SPAN = ir.SpanDef("big.zc", 1, 1, 1, 2)


def _rule(r: int) -> tuple[ir.RuleDef, object]:
    """Rule r as IR, with its reference: (action index, state) -> keeps."""
    a = r % N_ACTIONS
    target = (f"a{a}",)
    if r % 3 == 0:
        cond = ir.Cmp(">=", ir.Field("level"), ir.Const(r % 50))
        return (ir.RuleDef(f"r{r}", "requires", target, SPAN, "level >= k", cond, reads=("level",)),
                lambda s, k=r % 50: s["level"] >= k)
    if r % 3 == 1:
        role = ROLES[r % 3]
        cond = ir.And((ir.Field("locked"), ir.Cmp("==", ir.Field("role"), ir.Const(role))))
        return (ir.RuleDef(f"r{r}", "forbid_when", target, SPAN, "locked and role == x", cond,
                           reads=("locked", "role")),
                lambda s, role=role: not (s["locked"] and s["role"] == role))
    allowed = (ROLES[r % 3], "admin")
    cond = ir.Or((ir.InConst(ir.Field("role"), allowed, False), ir.Cmp("<", ir.Cost(), ir.Const(r % 5))))
    return (ir.RuleDef(f"r{r}", "requires", target, SPAN, "role in {…} or cost < k", cond, reads=("role",)),
            lambda s, allowed=allowed, k=r % 5, cost=a % 7: s["role"] in allowed or cost < k)


def test_fifteen_thousand_rule_artifact_loads_and_agrees():
    assert sys.flags.int_max_str_digits in (-1, 0)  # the interpreter's default limits are in force
    rules, refs = zip(*(_rule(r) for r in range(N_RULES)))
    policy_ir = ir.PolicyIR(
        name="big", source_path="big.zc", source_sha256="0" * 64,
        fields=(ir.FieldDef("role", "enum", ROLES), ir.FieldDef("level", "int", has_default=True, default=0),
                ir.FieldDef("locked", "bool", has_default=True, default=False)),
        actions=tuple(ir.ActionDef(f"a{i}", cost=i % 7) for i in range(N_ACTIONS)),
        fallback="a0", rules=rules)
    loaded, _ = ir.loads(ir.dumps(policy_ir, "test"))
    policy = Policy(loaded)
    rng = random.Random(16)
    for _ in range(12):
        state = {"role": rng.choice(ROLES), "level": rng.randrange(60), "locked": rng.random() < 0.5}
        want = {f"a{i}" for i in range(N_ACTIONS)}
        for r, keeps in enumerate(refs):
            if not keeps(state):
                want.discard(f"a{r % N_ACTIONS}")
        got = policy.legal(state)
        assert set(got.actions) == (want or {"a0"})
        removed = sorted(set(policy.actions) - want)[:3]
        for a in removed:  # each removed action is explained, and `check` agrees
            assert got.removed[a] and not policy.check(state, a).allowed
