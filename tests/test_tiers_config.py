"""tiers.toml read as untrusted input: a regular file, bounded nesting, tier names checked against the
policy."""

from __future__ import annotations

import os
import random

import pytest
from click.testing import CliRunner

import zcompile
from zcompile.cli import main
from zcompile.errors import ZcError
from zcompile.tiers import load_tiers

POLICY = """policy p
action a
action b
fallback a
tier small max_ms 250
tier large max_ms 4000
route default: use small, large
"""
TABLE = '[tiers.{}]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n'


@pytest.fixture(scope="module")
def policy():
    return zcompile.compile_text(POLICY, "p.zc")


def test_a_tier_name_typo_gets_did_you_mean_and_the_file(tmp_path, policy):
    path = tmp_path / "tiers.toml"
    path.write_text(TABLE.format("small") + TABLE.format("lrage"))
    with pytest.raises(ZcError) as e:
        load_tiers(path, policy)
    assert str(e.value) == (f"{path}: [tiers.lrage]: policy `p` declares no tier `lrage` (did you mean "
                            "`large`?)")
    path.write_text(TABLE.format("remote"))
    with pytest.raises(ZcError, match=r"declares no tier `remote` \(it declares small, large\)"):
        load_tiers(path, policy)
    path.write_text(TABLE.format("small") + TABLE.format("large"))
    tiers = load_tiers(path, policy)
    assert sorted(tiers) == ["large", "small"]
    for t in tiers.values():
        t.close()


def test_the_specialists_rung_cannot_be_bound_to_an_llm(tmp_path):
    """`specialist` is a rung the router fills with specialists: an LLM bound to it would be ignored."""
    policy = zcompile.compile_text(POLICY.replace("tier small",
                                                  "tier specialist").replace("use small", "use specialist"),
                                   "p.zc")
    path = tmp_path / "tiers.toml"
    path.write_text(TABLE.format("specialist"))
    with pytest.raises(ZcError, match=r"\[tiers.specialist\]: `specialist` is the specialists' rung"):
        load_tiers(path, policy)
    with pytest.raises(ZcError, match=r"`specialist` is the specialists' rung"):
        zcompile.Router(policy, tiers={"specialist": object()})


@pytest.mark.parametrize("name, hint", [("lrage", "(did you mean `large`?)"),
                                        ("remote", "(it declares small, large)")])
def test_a_router_built_in_python_refuses_a_typo_as_tiers_toml_does(tmp_path, policy, name, hint):
    """One check, one message: `Router(tiers=…)` says what tiers.toml says, without the file."""
    from zcompile.tiers import TierAnswer

    class Tier:
        def propose(self, state, legal, **kw):
            return TierAnswer("abstained", None)

    path = tmp_path / "tiers.toml"
    path.write_text(TABLE.format(name))
    with pytest.raises(ZcError) as from_file:
        load_tiers(path, policy)
    with pytest.raises(ZcError) as from_python:
        zcompile.Router(policy, tiers={"small": Tier(), name: Tier()})
    assert str(from_python.value) == f"policy `p` declares no tier `{name}` {hint}"
    assert str(from_file.value) == f"{path}: [tiers.{name}]: {from_python.value}"
    assert zcompile.Router(policy, tiers={"small": Tier(), "large": Tier()}).tiers.keys() == {
        "small", "large"}

def test_route_names_the_tiers_file_on_a_typo(tmp_path):
    (tmp_path / "p.zc").write_text(POLICY)
    (tmp_path / "tiers.toml").write_text(TABLE.format("smal"))
    (tmp_path / "s.json").write_text("{}")
    res = CliRunner().invoke(main, ["route", "--policy", str(tmp_path / "p.zc"), "--tiers",
                                    str(tmp_path / "tiers.toml"), "--state", str(tmp_path / "s.json")])
    assert res.exit_code == 1
    assert (f"{tmp_path / 'tiers.toml'}: [tiers.smal]: policy `p` declares no tier `smal` (did you mean "
            "`small`?)") \
        in res.stderr


@pytest.mark.parametrize("seed", range(4))
def test_nesting_past_the_bound_is_a_named_error_at_any_depth(tmp_path, seed):
    rng = random.Random(seed)
    depth = rng.randrange(201, 3000)
    opener, closer = rng.choice([("[", "]"), ("{x = ", "}")])
    path = tmp_path / "tiers.toml"
    path.write_text(TABLE.format("small") + f"extra_body = {{x = {opener * depth}1{closer * depth}}}\n")
    with pytest.raises(ZcError) as e:
        load_tiers(path)
    assert str(e.value).startswith(f"{path}: ")
    assert "nested" in str(e.value)


def test_nesting_within_the_bound_loads(tmp_path):
    path = tmp_path / "tiers.toml"
    path.write_text(TABLE.format("small") + f"extra_body = {{x = {'[' * 150}1{']' * 150}}}\n")
    tiers = load_tiers(path)
    tiers["small"].close()


def test_a_fifo_is_refused_not_waited_on(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    os.mkfifo(tmp_path / "tiers.toml")
    with pytest.raises(ZcError, match="not a regular file"):
        load_tiers(tmp_path / "tiers.toml")
