"""The benchmark's generated zc, Cedar and Casbin policies agree on every decision (else its timings are
void)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parents[1] / "bench" / "legal_bench.py"


def test_legal_bench_engines_agree():
    proc = subprocess.run([sys.executable, str(BENCH), "--check-only", "--sizes", "10,100"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "agreement check passed" in proc.stdout + proc.stderr
    assert ("[100 actions] agree: 20,000 decisions (zc = Cedar = Casbin = reference)" in proc.stdout
            + proc.stderr)


def test_shapes_generator_makes_what_it_says():
    """bench/shapes.py: a policy zc compiles without errors, with the shapes it promises, and a Cedar
    policy set Cedar parses with one policy per zc rule and intent (plus the permit)."""
    import cedarpy

    sys.path.insert(0, str(BENCH.parent))
    import shapes

    import zcompile

    pol = shapes.generate(400)
    assert pol == shapes.generate(400)  # seeded
    policy = zcompile.compile_text(shapes.to_zc(pol))
    kinds = {r.kind for r in policy.ir.rules}
    assert kinds == {"after", "requires", "forbid_when", "forbid_unless"}
    assert len(policy.ir.rules) == 2 * 400 and len(policy.intents) == 20
    assert any(r.args for r in policy.ir.rules)  # argument rules
    chain = [r for r in policy.ir.rules if r.kind == "after"]
    # every action after the one before, but the first of each chain
    assert len(chain) == 399 - len(range(0, 399, shapes.CHAIN))
    cedar = shapes.to_cedar(pol)
    cedarpy.PolicySet.from_str(cedar)  # raises on a syntax error
    assert cedar.count("forbid (") == len(policy.ir.rules) + len(policy.intents)


def test_growth_exponent_is_the_log_log_slope():
    sys.path.insert(0, str(BENCH.parent))
    import growth_bench

    xs = [1_000, 10_000, 100_000]
    assert abs(growth_bench.slope(xs, [x ** 1.5 for x in xs]) - 1.5) < 1e-9
    assert abs(growth_bench.slope(xs, [3 * x for x in xs]) - 1.0) < 1e-9
