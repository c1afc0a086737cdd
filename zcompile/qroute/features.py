"""Features: one documented, versioned function from (state, legal set) to a vector, shared by training and runtime.

Version 2, in order, for each state field of the policy (declaration order, `history` last):
- enum: one-hot over its members, then an `absent` indicator when the field may be absent;
- bool: 1.0 / 0.0, then an `absent` indicator when the field may be absent;
- int, float: the value standardised with the training split's mean and standard deviation
  (0 when absent), then an `absent` indicator when the field may be absent;
- set[action] (and `history`): multi-hot over the policy's actions;
- int: also a one-hot of its bucket (0, 1, 2, 3–4, 5–8, 9–16, more; negatives in the first);
- text: `TEXT_DIM` hashed buckets of word unigrams, word bigrams, word shapes (`AAAAAA`,
  `aaaa_aaa_9999`: each letter and digit mapped to its class, cut at 12 characters, so identifiers
  count without their values) and the first word, over the first and last 16 words (found in the
  first and last 400 characters), each bucket log(1 + count), then log(1 + number of characters),
  then an `absent` indicator;
then the legal set, multi-hot over the policy's actions. Hashing is crc32: stable across runs.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from .. import ir
from ..errors import ZcError
from ..state import Schema, read_path

VERSION = 2
TEXT_DIM = 128
MAX_WORDS = 32  # words hashed per text field: its first and last 16 (an opening and what was asked)
WINDOW = 400  # characters scanned at each end of a long text for those words
_WORD = re.compile(r"[A-Za-z0-9_]+")


class FeatureSpec(msgspec.Struct, frozen=True):
    """Everything the feature function needs; stored in the specialist's manifest."""

    version: int
    fields: tuple[ir.FieldDef, ...]
    actions: tuple[str, ...]
    text_dim: int = TEXT_DIM
    mean: dict[str, float] = {}
    std: dict[str, float] = {}

    @property
    def dim(self) -> int:
        return len(self.names())

    def names(self) -> list[str]:
        """A name per feature column, for reports."""
        out: list[str] = []
        for f in self.fields:
            if f.kind == "enum":
                out += [f"{f.path}={m}" for m in f.members]
            elif f.kind in ("bool", "int", "float"):
                out.append(f.path)
                if f.kind == "int":
                    out += [f"{f.path} bucket {b}" for b in INT_BUCKETS]
            elif f.kind == "set":
                out += [f"{a} in {f.path}" for a in self.actions]
            elif f.kind == "text":
                out += [f"{f.path}#h{i}" for i in range(self.text_dim)] + [f"{f.path}#chars"]
            if f.may_be_absent or f.kind == "text":
                out.append(f"{f.path} absent")
        return out + [f"{a} legal" for a in self.actions]


def spec_for(policy: ir.PolicyIR, text_dim: int = TEXT_DIM) -> FeatureSpec:
    return FeatureSpec(VERSION, policy.fields, tuple(a.name for a in policy.actions), text_dim)


def fit_scaling(spec: FeatureSpec, values: dict[str, list[float]]) -> FeatureSpec:
    """The spec with mean and std of each number field taken from training values."""
    mean, std = {}, {}
    for f in spec.fields:
        if f.kind in ("int", "float"):
            xs = [v for v in values.get(f.path, []) if v is not None]
            mean[f.path] = float(np.mean(xs)) if xs else 0.0
            sd = float(np.std(xs)) if xs else 1.0
            std[f.path] = sd if sd > 1e-9 else 1.0
    return msgspec.structs.replace(spec, mean=mean, std=std)


_SHAPE = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
                       "A" * 26 + "a" * 26 + "9" * 10)
CACHE_TOKENS = 200_000  # token -> bucket memo per featurizer; cleared when full


def text_tokens(text: str) -> list[str]:
    """The hashed tokens of a text (see the module docstring)."""
    if len(text) > 2 * WINDOW:  # only its ends are hashed: do not scan the middle
        head, tail = _WORD.findall(text[:WINDOW]), _WORD.findall(text[-WINDOW:])
        words = head[: MAX_WORDS // 2] + tail[-MAX_WORDS // 2 :]
    else:
        words = _WORD.findall(text)
        if len(words) > MAX_WORDS:
            words = words[: MAX_WORDS // 2] + words[-MAX_WORDS // 2 :]
    if not words:
        return []
    joined = " ".join(words)
    lower = joined.lower().split(" ")
    tokens = lower + [a + " " + b for a, b in zip(lower, lower[1:])]
    tokens += ["~" + s[:12] for s in joined.translate(_SHAPE).split(" ")]
    tokens.append("^" + lower[0])
    return tokens


def text_buckets(text: str, dim: int, cache: dict[str, int] | None = None) -> np.ndarray:
    """Hashed log-counts of a text's tokens. `cache` memoises token -> bucket."""
    tokens = text_tokens(text)
    if cache is None:
        idx = [zlib.crc32(t.encode()) % dim for t in tokens]
    else:
        get = cache.get
        idx = [get(t) for t in tokens]
        if None in idx:
            if len(cache) >= CACHE_TOKENS:
                cache.clear()
            for i, t in enumerate(tokens):
                if idx[i] is None:
                    idx[i] = cache[t] = zlib.crc32(t.encode()) % dim
    return np.log1p(np.bincount(idx, minlength=dim).astype(np.float32))


INT_BUCKETS = ("<=0", "1", "2", "3-4", "5-8", "9-16", ">16")


def _int_bucket(v: int) -> int:
    if v <= 2:
        return max(v, 0)
    return 3 if v <= 4 else 4 if v <= 8 else 5 if v <= 16 else 6


class Featurizer:
    """Applies a FeatureSpec to validated states."""

    def __init__(self, spec: FeatureSpec) -> None:
        if spec.version != VERSION:
            raise ZcError(f"features of version {spec.version} are not computed by this zc (version "
                          f"{VERSION}); distil the specialist again")
        self.spec = spec
        self.schema = Schema(spec.fields, spec.actions, strict=False)
        self.index = {a: i for i, a in enumerate(spec.actions)}
        self.dim = spec.dim
        self._cache: dict[str, int] = {}

    def one(self, state: Any, legal: Sequence[str]) -> np.ndarray:
        """The feature row of one state (a dict, validated here) and its legal set."""
        root = self.schema.convert(state)
        return self.row(root, legal)

    def row(self, root: Any, legal: Sequence[str]) -> np.ndarray:
        spec, index = self.spec, self.index
        x = np.zeros(self.dim, dtype=np.float32)
        j = 0
        for f in spec.fields:
            v = read_path(self.schema, root, f.path)
            if f.kind == "enum":
                if v is not None:
                    x[j + f.members.index(v)] = 1.0
                j += len(f.members)
            elif f.kind == "bool":
                x[j] = 1.0 if v else 0.0
                j += 1
            elif f.kind in ("int", "float"):
                if v is not None:
                    x[j] = (v - spec.mean.get(f.path, 0.0)) / spec.std.get(f.path, 1.0)
                j += 1
                if f.kind == "int":
                    if v is not None:
                        x[j + _int_bucket(v)] = 1.0
                    j += len(INT_BUCKETS)
            elif f.kind == "set":
                for a in v or ():
                    x[j + index[a]] = 1.0
                j += len(spec.actions)
            elif f.kind == "text":
                if v:
                    x[j : j + spec.text_dim] = text_buckets(v, spec.text_dim, self._cache)
                    x[j + spec.text_dim] = math.log1p(len(v))
                j += spec.text_dim + 1
            if f.may_be_absent or f.kind == "text":
                x[j] = 1.0 if v is None else 0.0
                j += 1
        for a in legal:
            x[j + index[a]] = 1.0
        return x

    def matrix(self, states: Sequence[Any], legals: Sequence[Sequence[str]]) -> np.ndarray:
        return np.stack([self.one(s, l) for s, l in zip(states, legals)]) if states else \
            np.zeros((0, self.dim), dtype=np.float32)
