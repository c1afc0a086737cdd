"""Features: one documented, versioned function from (state, legal set) to a vector, shared by training and
runtime.

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

A row is made in one pass over the fields: the columns that are 1 and the numbers are collected,
every text field's tokens are counted into the row, one `log1p` turns the counts into buckets, and
the collected columns are written. Counting and writing run in the C extension
`zcompile.qroute._features_c` when it is built (an optional extension: see pyproject.toml), else
in Python (`text_columns` and numpy indexing): the same rows either way.
"""

from __future__ import annotations

import itertools
import math
import operator
import re
import zlib
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from .. import ir
from ..errors import ZcError
from ..state import Schema, read_path

C_REVISION = 1  # the revision of _features_c.c this module calls (its REVISION)
try:
    from ._features_c import REVISION as _revision
    from ._features_c import count as _count_c
    from ._features_c import put as _put_c
except ImportError:  # not built (no C compiler at install): the Python path below
    _revision = _count_c = _put_c = None
if _revision != C_REVISION:  # not built, or a stale build of another revision
    _count_c = _put_c = None
C_EXTENSION = _count_c is not None  # whether rows are counted and written in C

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
_CUT = operator.itemgetter(slice(None, 12))  # a shape is cut at 12 characters
CACHE_TOKENS = 200_000  # token -> column memo per text field; cleared when full
CACHE_LEGAL = 4096  # legal set -> its columns; cleared when full


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
    return [*lower, *map(" ".join, zip(lower, lower[1:])),
            *map("~".__add__, map(_CUT, joined.translate(_SHAPE).split(" "))), "^" + lower[0]]


def text_columns(text: str, first: int, dim: int, cache: dict[str, int]) -> list[int]:
    """The column of each hashed token of a text whose `dim` buckets start at column `first`;
    `cache` memoises token -> column for that field."""
    tokens = text_tokens(text)
    cols = list(map(cache.get, tokens))
    if None in cols:
        if len(cache) >= CACHE_TOKENS:
            cache.clear()
        for i, t in enumerate(tokens):
            if cols[i] is None:
                cols[i] = cache[t] = first + zlib.crc32(t.encode()) % dim
    return cols


def count_text(row: np.ndarray, text: str, first: int, dim: int, cache: dict[str, int]) -> None:
    """Add each hashed token of `text` to its column of the float32 `row` (buckets `first` ..
    `first + dim`): in C when the extension is built, else with `text_columns`."""
    if _count_c is not None:
        _count_c(row, text, first, dim)
    else:
        cols = text_columns(text, 0, dim, cache)
        if cols:
            row[first:first + dim] += np.bincount(cols, minlength=dim).astype(np.float32)


def put_columns(row: np.ndarray, ones: list[int], cols: list[int], nums: list[float]) -> None:
    """row[ones] = 1.0, then row[cols] = nums (in C when the extension is built)."""
    if _put_c is not None:
        _put_c(row, ones, cols, nums)
    else:
        row[ones] = 1.0
        row[cols] = nums


def text_buckets(text: str, dim: int) -> np.ndarray:
    """Hashed log-counts of a text's tokens (`dim` buckets)."""
    return np.log1p(np.bincount(text_columns(text, 0, dim, {}), minlength=dim).astype(np.float32))


INT_BUCKETS = ("<=0", "1", "2", "3-4", "5-8", "9-16", ">16")


def _int_bucket(v: int) -> int:
    if v <= 2:
        return max(v, 0)
    return 3 if v <= 4 else 4 if v <= 8 else 5 if v <= 16 else 6


_ENUM, _BOOL, _NUM, _SET, _TEXT = range(5)


def _getter(indices: list[int]):
    """A function taking a tuple to the tuple of its items at `indices`."""
    if len(indices) > 1:
        return operator.itemgetter(*indices)
    if indices:
        return lambda t, i=indices[0]: (t[i],)
    return lambda t: ()


class Featurizer:
    """Applies a FeatureSpec to validated states: one pass over the fields, collecting the columns
    that are 1, the numbers and the texts, then a handful of numpy calls."""

    def __init__(self, spec: FeatureSpec) -> None:
        if spec.version != VERSION:
            raise ZcError(f"features of version {spec.version} are not computed by this zc (version "
                          f"{VERSION}); distil the specialist again")
        self.spec = spec
        self.schema = Schema(spec.fields, spec.actions, strict=False)
        self.index = {a: i for i, a in enumerate(spec.actions)}
        self.dim = spec.dim
        self._plan: list[tuple] = []  # per field: (kind, first column, extra, absent column or -1,
        #                                            default)
        j = 0
        for f in spec.fields:
            if f.kind == "enum":
                plan, width = (_ENUM, j, {m: j + i for i, m in enumerate(f.members)}), len(f.members)
            elif f.kind == "bool":
                plan, width = (_BOOL, j, None), 1
            elif f.kind in ("int", "float"):
                scale = (spec.mean.get(f.path, 0.0), spec.std.get(f.path, 1.0), f.kind == "int")
                plan, width = (_NUM, j, scale), 1 + (len(INT_BUCKETS) if f.kind == "int" else 0)
            elif f.kind == "set":
                plan, width = (_SET, j, None), len(spec.actions)
            else:  # extra: the field's token -> column memo
                plan, width = (_TEXT, j, {}), spec.text_dim + 1
            j += width
            absent = -1
            if f.may_be_absent or f.kind == "text":
                absent, j = j, j + 1
            self._plan.append((*plan, absent, f.default if f.has_default else None))
        self.legal_offset = j
        self._legal_memo: dict[tuple[str, ...], list[int]] = {}
        # bools without an absent column whose default is not true, and enums with a default (a
        # value read as None is the default: see read_path), read together: most fields are such
        plain = [i for i, (kind, *_rest, absent, default) in enumerate(self._plan)
                 if absent < 0 and (kind == _BOOL and not default or kind == _ENUM and default is not None)]
        self._bools = [i for i in plain if self._plan[i][0] == _BOOL]
        self._enums = [i for i in plain if self._plan[i][0] == _ENUM]
        self._bool_cols = [self._plan[i][1] for i in self._bools]
        self._enum_maps = [{**self._plan[i][2], None: self._plan[i][2][self._plan[i][4]]}
                           for i in self._enums]
        self._get_bools, self._get_enums = _getter(self._bools), _getter(self._enums)
        self._rest = [(i, self._plan[i]) for i in range(len(self._plan)) if i not in set(plain)]
        self._paths = [".".join(self.schema.attrs[f.path]) for f in spec.fields]
        self._read = operator.attrgetter(*self._paths) if len(self._paths) > 1 else \
            (lambda root, g=operator.attrgetter(*self._paths): (g(root),)) if self._paths else \
            (lambda root: ())

    def one(self, state: Any, legal: Sequence[str]) -> np.ndarray:
        """The feature row of one state (a dict, validated here) and its legal set."""
        root = self.schema.convert(state)
        return self.row(root, legal)

    def values(self, root: Any) -> tuple:
        """Every field's value in a converted state, in spec order (defaults applied)."""
        try:
            return self._read(root)
        except AttributeError:  # an optional parent object is absent: read field by field
            return tuple(read_path(self.schema, root, f.path) for f in self.spec.fields)

    def row(self, root: Any, legal: Sequence[str]) -> np.ndarray:
        """The feature row of a converted state (this spec's schema, or a policy's with the same fields)."""
        x = np.zeros(self.dim, np.float32)
        ones: list[int] = []
        cols: list[int] = []
        nums: list[float] = []
        counted = False  # a text's tokens were counted into x
        dim = self.spec.text_dim
        index = self.index
        values = self.values(root)
        ones.extend(itertools.compress(self._bool_cols, self._get_bools(values)))
        ones.extend(map(operator.getitem, self._enum_maps, self._get_enums(values)))
        for i, (kind, j, extra, absent, default) in self._rest:
            v = values[i]
            if v is None:
                v = default
            if kind == _ENUM:
                if v is not None:
                    ones.append(extra[v])
            elif kind == _BOOL:
                if v:
                    ones.append(j)
            elif kind == _NUM:
                if v is not None:
                    cols.append(j)
                    nums.append((v - extra[0]) / extra[1])
                    if extra[2]:
                        ones.append(j + 1 + _int_bucket(v))
            elif kind == _SET:
                if v:
                    ones.extend([j + index[a] for a in v])
            elif v:
                count_text(x, v, j, dim, extra)
                counted = True
                cols.append(j + dim)
                nums.append(math.log1p(len(v)))
            if absent >= 0 and v is None:
                ones.append(absent)
        ones += self.legal_columns(legal)
        if counted:
            np.log1p(x, out=x)  # counts -> log(1 + count); every other column is still 0
        put_columns(x, ones, cols, nums)
        return x

    def legal_columns(self, legal: Sequence[str]) -> list[int]:
        """The columns of a legal set's actions (memoised per legal set: a policy has few)."""
        key = legal if isinstance(legal, tuple) else tuple(legal)
        found = self._legal_memo.get(key)
        if found is None:
            if len(self._legal_memo) >= CACHE_LEGAL:
                self._legal_memo.clear()
            found = self._legal_memo[key] = [self.legal_offset + self.index[a] for a in key]
        return found

    def matrix(self, states: Sequence[Any], legals: Sequence[Sequence[str]]) -> np.ndarray:
        return np.stack([self.one(s, legal) for s, legal in zip(states, legals)]) if states else \
            np.zeros((0, self.dim), dtype=np.float32)
