"""tiers.toml: one `[tiers.NAME]` table per LLM tier, checked and bound to OpenAITier."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from ..errors import ZcError, did_you_mean, json_problem
from ..inputs import MAX_JSON_DEPTH, read_file
from ..router.router import undeclared_tier
from .tier import OpenAITier

Positive = Annotated[float, msgspec.Meta(gt=0)]


class TierConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One `[tiers.NAME]` table of a tiers.toml file (the keyword arguments of OpenAITier)."""

    base_url: str
    model: str
    timeout_ms: Positive = 4000.0
    mode: Literal["tools", "json_schema", "json_object"] = "tools"
    api_key_env: str | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    max_tokens: Annotated[int, msgspec.Meta(ge=1)] = 64
    system_prompt: str | None = None
    extra_body: dict[str, Any] | None = None
    # a server zc starts itself (zcompile.tiers.local): `smollm2` (the packaged model) or a GGUF path,
    # its declared cold-load cost and warm latency (until measured), and llama.cpp's threads
    launch: str | None = None
    cold_ms: Positive | None = None
    warm_ms: Positive | None = None
    threads: Annotated[int, msgspec.Meta(ge=1)] | None = None


class ScorerConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A `[tiers.NAME]` table with `score`: the scorer rung (zcompile.tiers.scorer.ScorerTier), a local
    model in this process; `calibration` is a `zc local calibrate` file (relative to the tiers file)."""

    score: str
    model: str | None = None
    calibration: str | None = None
    tau: Annotated[float, msgspec.Meta(ge=0)] | None = None  # given directly: uncertified (measurement only)
    timeout_ms: Positive = 30000.0
    cold_ms: Positive | None = None
    warm_ms: Positive | None = None
    threads: Annotated[int, msgspec.Meta(ge=1)] = 1


LAUNCH_ONLY = ("cold_ms", "warm_ms", "threads")


def _config_error(file: str, where: str, table: dict, exc: msgspec.ValidationError,
                  struct: type = TierConfig) -> ZcError:
    p = json_problem(exc)
    if p.kind == "unknown":
        fields = msgspec.structs.fields(struct)
        unset = [f.name for f in fields if f.name not in table]
        required = [f.name for f in fields if f.required and f.name not in table]  # those first
        hint = did_you_mean(p.field, required) or did_you_mean(p.field, unset)
        return ZcError(f'{file}: {where} unknown key "{p.field}"' + (f" ({hint})" if hint else ""))
    if p.kind == "missing":
        return ZcError(f'{file}: {where} missing key "{p.field}"')
    key = p.path.removeprefix("$").lstrip(".").split(".")[0].split("[")[0]
    return ZcError(f'{file}: {where} key "{key}": {p.problem}' if key else f"{file}: {where} {p.problem}")


def _nesting(value: Any) -> int:
    """How deeply tables and arrays nest in a parsed TOML value (iteratively: no recursion limit)."""
    deepest, todo = 0, [(value, 0)]
    while todo:
        v, depth = todo.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, depth + 1)
            todo.extend((x, depth + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def _tier(name: str, cfg: TierConfig | ScorerConfig, base: Path, policy: Any) -> Any:
    if isinstance(cfg, ScorerConfig):
        from .scorer import ScorerTier

        kwargs = msgspec.structs.asdict(cfg)
        if cfg.calibration is not None:
            kwargs["calibration"] = base / Path(cfg.calibration).expanduser()
        return ScorerTier(name=name, policy_sha256=policy.sha256 if policy is not None else None, **kwargs)
    kwargs = msgspec.structs.asdict(cfg)
    if cfg.launch is None:
        for key in ("launch", *LAUNCH_ONLY):
            del kwargs[key]
        return OpenAITier(name=name, **kwargs)
    from .local import LocalTier

    return LocalTier(name=name, **kwargs)


def load_tiers(path: str | os.PathLike, policy: Any = None) -> dict[str, Any]:
    """Read a tiers.toml file: one `[tiers.NAME]` table per tier (each a tier `policy` declares,
    when given): an OpenAITier, a LocalTier (`launch`), or the scorer rung (`score`).

    Raises:
        ZcError: the file is missing, not a regular file or not TOML, nests more than
            `MAX_JSON_DEPTH` levels, a key is unknown or missing, a value has the wrong type, a tier
            is not one the policy declares (with did-you-mean), or a tier's `api_key_env` variable is
            not set; the message names the file, the tier and the key.
    """
    file = str(path)
    try:
        data = tomllib.loads(read_file(path, "tiers file").decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ZcError(f"{file}: not valid TOML: {exc}") from None
    except RecursionError:
        raise ZcError(f"{file}: not valid TOML: nested too deeply") from None
    if _nesting(data) > MAX_JSON_DEPTH:
        raise ZcError(f"{file}: nested more than {MAX_JSON_DEPTH} levels deep")
    for key in data:
        if key != "tiers":
            raise ZcError(f'{file}: unknown key "{key}" (expected only [tiers.NAME] tables)')
    tables = data.get("tiers", {})
    if not isinstance(tables, dict):
        raise ZcError(f'{file}: "tiers" must be a table of [tiers.NAME] tables')
    configs: dict[str, TierConfig | ScorerConfig] = {}
    for name, table in tables.items():
        where = f"[tiers.{name}]"
        if policy is not None and (problem := undeclared_tier(policy, name)):  # as Router(tiers=…) says it
            raise ZcError(f"{file}: {where}: {problem}")
        if not isinstance(table, dict):
            raise ZcError(f"{file}: {where} must be a table, got {type(table).__name__}")
        struct: type[TierConfig] | type[ScorerConfig] = ScorerConfig if "score" in table else TierConfig
        try:
            configs[name] = cfg = msgspec.convert(table, struct, strict=True)
        except msgspec.ValidationError as exc:
            raise _config_error(file, where, table, exc, struct) from None
        if isinstance(cfg, ScorerConfig) and cfg.tau is not None and cfg.calibration is not None:
            raise ZcError(f'{file}: {where} give "calibration" or "tau", not both')
        extra = next((k for k in LAUNCH_ONLY if k in table), None)
        if isinstance(cfg, TierConfig) and cfg.launch is None and extra is not None:
            raise ZcError(f'{file}: {where} key "{extra}" needs "launch" (a server zc starts itself)')
    tiers: dict[str, Any] = {}
    base = Path(file).parent
    try:
        for name, cfg in configs.items():
            try:
                tiers[name] = _tier(name, cfg, base, policy)
            except ZcError as exc:
                raise ZcError(f"{file}: [tiers.{name}] {str(exc).removeprefix(f'tier {name}: ')}") from None
    except ZcError:
        for tier in tiers.values():
            tier.close()
        raise
    return tiers
