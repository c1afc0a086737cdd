"""The argument model: which of the candidates seen before a decision each argument of a call takes.

Candidates (`Candidate`, `extract_candidates`) live in `zcompile.receipts.candidates`: receipts store
them and the gateway computes them. `ArgumentModel` learns, from teacher calls, which candidate each
argument of an action takes (or abstains); `ArgumentModel.spec()` exports its parameters as plain data
(`ArgumentModelSpec`) and `ArgumentScorer(spec).propose(action, params, candidates)` answers at
decision time with numpy only.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property, lru_cache
from typing import Any, Literal

import msgspec
import numpy as np

from ..receipts.candidates import Candidate, Scalar, normalize

SPEC_VERSION = 1

MAX_CONSTANTS = 8  # training values offered per argument as `constant` candidates
MIN_CONSTANT_GROUPS = 2  # ... when seen in at least this many groups (conversations or tasks)
MIN_CONSTANT_SHARE = 0.1  # ... and in at least this share of the argument's training values
MAX_ROWS = 250_000  # candidate rows trained on at most (above: a seeded sample of whole calls' arguments)

_SCALARS = frozenset({"string", "integer", "number", "boolean"})
_INT = re.compile(r"0|[1-9][0-9]{0,17}")
_FLOAT = re.compile(r"(?:0|[1-9][0-9]{0,17})\.[0-9]{1,12}")
_SEGMENT = re.compile(r"[A-Za-z0-9]+|[^A-Za-z0-9]")
_KEY_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")


# ---------------------------------------------------------------------------------------------
# features

FEATURES = (
    "source=user", "source=tool", "source=call", "source=constant",
    "log_age",  # log(1 + age)
    "log_count",  # log(1 + count)
    "recency_rank",  # log(1 + rank by age among the argument's fitting candidates)
    "shape_recency_rank",  # log(1 + rank by age among fitting candidates of a seen shape), 3 if unseen
    "key_equal",  # the candidate's key is the argument's name
    "key_overlap",  # Jaccard overlap of their words (plural `s` dropped)
    "key_empty",
    "used_same_action",  # an earlier call of this action passed this value as this argument
    "used_other_action",  # an earlier call of another action passed it as an argument of this name
    "sibling_rank",  # log(1 + position among candidates of the same source, key and age)
    "first_unused_sibling",  # the first of those this action has not yet been called with
    "tool_key_equal",  # a tool output field of the argument's name
    "shape_fine",  # share of training values of this argument with this shape (lengths kept)
    "shape_coarse",  # the same without lengths
    "value_prior",  # share of training values of this argument equal to this value
    "mentioned",  # the value (case-insensitive) also occurs in a user message
    "coerced",  # the value had to be converted to the declared type
    "reach",  # share of training calls whose value for this argument was among the candidates
    "log_fitting",  # log(1 + number of fitting candidates)
)


class ArgumentStats(msgspec.Struct, frozen=True):
    """What training saw of one argument (for an action, or for an argument name over all actions)."""

    n: int  # calls with this argument in their signature
    included: float  # share of them that passed it
    reach: float  # share of passed values found among the candidates
    shape_fine: dict[str, float]
    shape_coarse: dict[str, float]
    values: dict[str, float]  # normalized value -> share (MIN_CONSTANT_SHARE or more, in MIN_CONSTANT_GROUPS)
    constants: tuple[Scalar, ...]  # the most frequent of them, offered as `constant` candidates


class Linear(msgspec.Struct, frozen=True, tag="logistic"):
    """Logistic regression over standardised features: p = sigmoid(z . coef + intercept)."""

    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float


class Trees(msgspec.Struct, frozen=True, tag="gbt"):
    """Gradient-boosted regression trees on the log-odds: p = sigmoid(base + rate * sum of leaves).

    Tree t's node i tests `x[feature] <= threshold` (x as `precision`: float32 for scikit-learn's
    GradientBoostingClassifier, which older specialists ship, float64 for its
    HistGradientBoostingClassifier) and goes to `left[i]`, else `right[i]`; a node with
    `left[i] == -1` is a leaf worth `value[i]`.
    """

    learning_rate: float
    feature: tuple[tuple[int, ...], ...]
    threshold: tuple[tuple[float, ...], ...]
    left: tuple[tuple[int, ...], ...]
    right: tuple[tuple[int, ...], ...]
    value: tuple[tuple[float, ...], ...]
    base: float = 0.0
    precision: Literal["float32", "float64"] = "float32"


class ArgumentModelSpec(msgspec.Struct, frozen=True):
    """A fitted argument model as plain data (stored in a specialist's manifest.json); scored with numpy."""

    version: int
    features: tuple[str, ...]
    model: Linear | Trees
    min_confidence: float  # an argument whose best value scores lower abstains
    actions: dict[str, dict[str, ArgumentStats]]  # action -> argument -> stats
    names: dict[str, ArgumentStats]  # argument name -> stats over all actions (for rare actions)


class ArgumentExample(msgspec.Struct, frozen=True):
    """One argument of one teacher call: what the model trains on."""

    action: str
    argument: str
    schema: dict[str, Any]  # the argument's JSON schema (`type`, `enum`)
    candidates: tuple[Candidate, ...]
    value: Any = None  # the teacher's value (ignored when not `present`)
    present: bool = True  # the teacher passed this argument
    required: bool = True
    group: str = ""  # conversation or task: training statistics for a row leave its own group out
    reached: bool | None = None  # the teacher's value is among the candidates (None: not yet computed)


class Proposal(msgspec.Struct, frozen=True):
    """The proposed arguments of a call (None: a required argument abstained) and per-argument detail."""

    arguments: dict[str, Any] | None
    confidence: float  # product of the arguments' confidences (0 when `arguments` is None)
    values: dict[str, Any]  # argument -> chosen value, for the arguments that did not abstain
    confidences: dict[str, float]  # argument -> confidence of its choice (0: abstained)


def call_examples(action: str, params: Mapping[str, Any], candidates: Sequence[Candidate],
                  arguments: Mapping[str, Any], group: str = "") -> list[ArgumentExample]:
    """One `ArgumentExample` per argument of the action's signature, from a teacher call."""
    props = params.get("properties") or {}
    required = set(params.get("required") or ())
    cands = tuple(candidates)
    return [ArgumentExample(action, name, dict(schema or {}), cands, arguments.get(name), name in arguments,
                            name in required, group,
                            _reached(name in arguments, arguments.get(name), schema or {}, cands))
            for name, schema in props.items()]


def _reached(present: bool, value: Any, schema: Mapping[str, Any], candidates: Sequence[Candidate]) -> bool:
    """Whether a passed value is among the candidates, as a value of the declared type."""
    if not present:
        return False
    target = normalize(value)
    return any((f := fit_value(c.value, schema)) is not None and normalize(f[0]) == target
               for c in candidates)


def fit_value(value: Scalar, schema: Mapping[str, Any]) -> tuple[Scalar, bool] | None:
    """The candidate as a value of the declared type (and whether it was converted), or None if it cannot
    be."""
    kind = schema.get("type")
    enum = schema.get("enum")
    out: Scalar | None = value
    if kind == "string":
        out = value if isinstance(value, str) else None if isinstance(value, bool) else normalize(value)
    elif kind == "integer":
        if isinstance(value, str) and _INT.fullmatch(value.lstrip("-")):
            out = int(value)
        elif isinstance(value, bool) or not isinstance(value, int):
            out = None
    elif kind == "number":
        if isinstance(value, str) and (_INT.fullmatch(value) or _FLOAT.fullmatch(value)):
            out = float(value) if "." in value else int(value)
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            out = None
    elif kind == "boolean":
        out = value if isinstance(value, bool) else {"true": True, "false": False}.get(str(value).lower())
    elif kind is not None and not (isinstance(kind, list) and _SCALARS & set(kind)):
        out = None  # array, object, null: scalars do not fit
    if out is not None and isinstance(enum, list):
        if normalize(out) not in {normalize(e) for e in enum}:
            folded = {str(e).casefold().replace(" ", "_"): e for e in enum}
            out = folded.get(str(out).casefold().replace(" ", "_").replace("-", "_"))
    if out is None:
        return None
    return out, out is not value and normalize(out) != normalize(value)


def shape(value: Any, fine: bool = True) -> str:
    """A value's shape class: `a_a_9:4` for `mia_li_3668`, `X:6` for `8JX2WO`, `9:4-9:2-9:2` for a date."""
    return _shape(value, fine) if isinstance(value, (str, int, float)) else "other"


@lru_cache(maxsize=8192, typed=True)
def _shape(value: Scalar, fine: bool) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    parts = _SEGMENT.findall(value)
    if len(parts) > 9:
        return "text"
    out = []
    for p in parts:
        if not p.isalnum():
            out.append(p)
            continue
        if p.isdigit():
            c = "9"
        elif p.isalpha():
            c = ("a" if p.islower() else "A" if p.isupper() else "Aa" if p[0].isupper() and p[1:].islower()
                 else "m")
        else:
            c = "x" if p.lower() == p else "X" if p.upper() == p else "m"
        out.append(f"{c}:{len(p)}" if fine and c in ("9", "A", "X", "x") else c)
    return "".join(out)


@lru_cache(maxsize=4096)
def _words(key: str) -> frozenset[str]:
    words = (w.lower() for w in _KEY_WORD.findall(key))
    return frozenset(w[:-1] if len(w) > 3 and w.endswith("s") else w for w in words)


class _Stats:
    """Per-argument counts, in total and per group, so a training row can see them without its own group."""

    def __init__(self) -> None:
        self.total: Counter = Counter()  # ("n",) | ("included",) | ("reached",) | (shape or "value", item)
        self.groups: dict[str, Counter] = defaultdict(Counter)
        self.value_groups: dict[str, set[str]] = defaultdict(set)

    def add(self, group: str, present: bool, value: Any, reached: bool) -> None:
        keys = [("n",)]
        if present:
            keys += [("included",), ("fine", shape(value)), ("coarse", shape(value, fine=False)),
                     ("value", normalize(value))] + [("reached",)] * reached
            self.value_groups[normalize(value)].add(group)
        for k in keys:
            self.total[k] += 1
            self.groups[group][k] += 1

    def view(self, group: str | None) -> ArgumentStats:
        """The statistics without `group`'s rows (None: all rows)."""
        c = self.total - self.groups[group] if group is not None else self.total
        n, inc = c[("n",)], c[("included",)]

        def shares(kind: str) -> dict[str, float]:
            return {k[1]: v / inc for k, v in c.items() if k[0] == kind}

        values = {v: p for v, p in shares("value").items()
                  if p >= MIN_CONSTANT_SHARE and len(self.value_groups[v] - {group}) >= MIN_CONSTANT_GROUPS}
        scalars = [v for v in values if isinstance(json.loads(v), (str, int, float, bool))]  # candidates
        top = sorted(scalars, key=lambda v: (-values[v], v))[:MAX_CONSTANTS]
        return ArgumentStats(n=n, included=inc / n if n else 0.0, reach=c[("reached",)] / inc if inc else 0.0,
                             shape_fine=shares("fine"), shape_coarse=shares("coarse"), values=values,
                             constants=tuple(json.loads(v) for v in top))


_EMPTY = ArgumentStats(n=0, included=0.0, reach=0.0, shape_fine={}, shape_coarse={}, values={}, constants=())


def _rows(action: str, argument: str, schema: Mapping[str, Any], candidates: Sequence[Candidate],
          stats: ArgumentStats) -> tuple[list[Scalar], list[str], np.ndarray]:
    """The fitting values of an argument's candidates (constants added), each one's `normalize`d
    form, and their feature rows."""
    if schema.get("type") in ("array", "object", "null"):
        return [], [], np.zeros((0, len(FEATURES)))
    pool = list(candidates) + [Candidate(v, "constant", argument, 0, 1) for v in stats.constants]
    fitted = []
    for c in pool:
        fit = fit_value(c.value, schema)
        if fit is not None:
            fitted.append((c, fit[0], fit[1]))
    if not fitted:
        return [], [], np.zeros((0, len(FEATURES)))
    norms = [normalize(v) for _, v, _ in fitted]
    fine = [shape(v) for _, v, _ in fitted]
    user = {str(c.value).casefold() for c in candidates if c.source == "user"}
    same, other = set(), set()
    for c in candidates:
        if c.source == "call" and c.key.partition(".")[2] == argument:
            (same if c.key.partition(".")[0] == action else other).add(normalize(c.value))
    words = _words(argument)
    order = sorted(range(len(fitted)), key=lambda i: (fitted[i][0].source == "constant", fitted[i][0].age))
    rank = [0.0] * len(fitted)
    for r, i in enumerate(order):
        rank[i] = float(r)
    shaped = [i for i in order if fine[i] in stats.shape_fine]
    shape_rank = [math.exp(3) - 1] * len(fitted)
    for r, i in enumerate(shaped):
        shape_rank[i] = float(r)
    siblings: Counter = Counter()  # (source, key, age) -> candidates seen so far, in list order
    unused_seen: set[tuple[str, str, int]] = set()
    rows = []
    for i, (c, value, coerced) in enumerate(fitted):
        key = c.key.partition(".")[2] if c.source == "call" else c.key
        kw = _words(key)
        norm = norms[i]
        group = (c.source, c.key, c.age)
        sibling = siblings[group]
        siblings[group] += 1
        first_unused = norm not in same and group not in unused_seen
        if norm not in same:
            unused_seen.add(group)
        rows.append((
            c.source == "user", c.source == "tool", c.source == "call", c.source == "constant",
            math.log1p(c.age), math.log1p(c.count), math.log1p(rank[i]), math.log1p(shape_rank[i]),
            key == argument, len(kw & words) / len(kw | words) if kw else 0.0, key == "",
            norm in same, norm in other, math.log1p(sibling), first_unused,
            c.source == "tool" and key == argument,
            stats.shape_fine.get(fine[i], 0.0), stats.shape_coarse.get(shape(value, fine=False), 0.0),
            stats.values.get(norm, 0.0), str(value).casefold() in user, coerced, stats.reach,
            math.log1p(len(fitted)),
        ))
    return [v for _, v, _ in fitted], norms, np.array(rows, dtype=np.float64)


def _merge(stats: ArgumentStats | None, fallback: ArgumentStats | None) -> ArgumentStats:
    """An action's own statistics when it has any, else those of the argument name over all actions."""
    if stats is not None and stats.n:
        return stats
    return fallback if fallback is not None else _EMPTY


# ---------------------------------------------------------------------------------------------
# model


class ArgumentModel:
    """Learns which candidate each argument of an action takes (scikit-learn conventions).

    One binary classifier over (argument, candidate) rows, shared by all actions: is this
    candidate the teacher's value? Per-argument behaviour comes from the features (training
    shapes, reach, key match), so rare actions borrow from common ones.

    Args:
        kind: `gbt` (gradient-boosted trees, scikit-learn's HistGradientBoostingClassifier: features
            binned once, so a fit over 250,000 rows takes seconds) or `logistic`.
        n_estimators, max_depth, learning_rate: the trees' size (gbt).
        C: inverse regularisation strength (logistic).
        min_confidence: an argument whose best value scores below this abstains.
        seed: the trees' random state and the sample's.
        max_rows: when the examples' candidates exceed this many rows, the classifier trains on a
            seeded sample of whole examples (each kept with probability max_rows / candidates, so
            every argument keeps all its candidates and right and wrong ones their proportion); the
            training statistics still count every example. `sampled_` says what was kept.
    """

    def __init__(self, kind: str = "gbt", n_estimators: int = 100, max_depth: int = 4,
                 learning_rate: float = 0.1, C: float = 1.0, min_confidence: float = 0.5, seed: int = 0,
                 max_rows: int = MAX_ROWS) -> None:
        self.kind = kind
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.C = C
        self.min_confidence = min_confidence
        self.seed = seed
        self.max_rows = max_rows

    def fit(self, examples: Iterable[ArgumentExample]) -> ArgumentModel:
        """Fit on teacher calls' arguments; each row's statistics leave its own group out."""
        if self.kind not in ("gbt", "logistic"):
            raise ValueError(f"argument model kind {self.kind!r}: expected 'gbt' or 'logistic'")
        examples = list(examples)
        self.__dict__.pop("scorer_", None)  # a refit's scorer is made anew
        by_action: dict[tuple[str, str], _Stats] = defaultdict(_Stats)
        by_name: dict[str, _Stats] = defaultdict(_Stats)
        for e in examples:
            reached = (e.reached if e.reached is not None
                       else _reached(e.present, e.value, e.schema, e.candidates))
            by_action[(e.action, e.argument)].add(e.group, e.present, e.value, reached)
            by_name[e.argument].add(e.group, e.present, e.value, reached)
        present = [e for e in examples if e.present]
        n, total = len(present), sum(len(e.candidates) for e in present)
        self.sampled_ = None  # else (arguments kept, arguments, their candidates)
        if total > self.max_rows:
            keep = np.random.default_rng(self.seed).random(n) < self.max_rows / total
            present = [e for e, k in zip(present, keep) if k]
            self.sampled_ = (len(present), n, total)
        xs, ys = [], []
        for e in present:
            stats = _merge(by_action[(e.action, e.argument)].view(e.group), by_name[e.argument].view(e.group))
            _, norms, rows = _rows(e.action, e.argument, e.schema, e.candidates, stats)
            target = normalize(e.value)
            xs.append(rows)
            ys += [n == target for n in norms]
        x = np.concatenate(xs) if xs else np.zeros((0, len(FEATURES)))
        y = np.asarray(ys, dtype=int)
        if len(set(y.tolist())) < 2:
            raise ValueError(f"argument model: need both right and wrong candidates to fit, got "
                             f"{len(y)} rows")
        self.classifier_ = self._classifier().fit(x, y)
        self.actions_: dict[str, dict[str, ArgumentStats]] = defaultdict(dict)
        for (a, name), s in sorted(by_action.items()):
            self.actions_[a][name] = s.view(None)
        self.actions_ = dict(self.actions_)
        self.names_ = {name: s.view(None) for name, s in sorted(by_name.items())}
        self.rows_ = int(len(y))
        return self

    def _classifier(self) -> Any:
        if self.kind == "logistic":
            from sklearn.linear_model import LogisticRegression
            from sklearn.pipeline import make_pipeline
            from sklearn.preprocessing import StandardScaler

            return make_pipeline(StandardScaler(), LogisticRegression(C=self.C, max_iter=2000))
        from sklearn.ensemble import HistGradientBoostingClassifier

        # every tree grown to max_depth (no leaf cap), all rows (no early-stopping holdout): seeded and whole
        return HistGradientBoostingClassifier(max_iter=self.n_estimators, max_depth=self.max_depth,
                                              max_leaf_nodes=None, learning_rate=self.learning_rate,
                                              early_stopping=False, random_state=self.seed)

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """The probability that each feature row's candidate is the teacher's value (scikit-learn)."""
        return self.classifier_.predict_proba(x)[:, 1]

    def spec(self) -> ArgumentModelSpec:
        """The fitted model as plain data for the manifest."""
        if self.kind == "logistic":
            scaler, lr = self.classifier_[0], self.classifier_[-1]
            model: Linear | Trees = Linear(
                mean=tuple(map(float, scaler.mean_)), scale=tuple(map(float, scaler.scale_)),
                coef=tuple(map(float, lr.coef_[0])), intercept=float(lr.intercept_[0]))
        else:
            # scikit-learn's fitted predictors (leaf values already scaled by the learning rate)
            nodes = [p[0].nodes for p in self.classifier_._predictors]

            def column(name: str, cast: type, fill: float,
                       leaves: bool = False) -> tuple[tuple[Any, ...], ...]:
                """A node field per tree, `fill` at leaves (at inner nodes with `leaves`)."""
                return tuple(tuple(map(cast, np.where(n["is_leaf"].astype(bool) != leaves, fill,
                                                      n[name].astype(np.int64 if cast is int
                                                                     else np.float64))))
                             for n in nodes)

            model = Trees(
                learning_rate=1.0, base=float(np.ravel(self.classifier_._baseline_prediction)[0]),
                precision="float64", feature=column("feature_idx", int, -2),
                threshold=column("num_threshold", float, 0.0), left=column("left", int, -1),
                right=column("right", int, -1), value=column("value", float, 0.0, leaves=True))
        return ArgumentModelSpec(version=SPEC_VERSION, features=FEATURES, model=model,
                                 min_confidence=self.min_confidence, actions=self.actions_, names=self.names_)

    @cached_property
    def scorer_(self) -> ArgumentScorer:
        """`ArgumentScorer(self.spec())`, made once."""
        return ArgumentScorer(self.spec())

    def propose(self, action: str, params: Mapping[str, Any], candidates: Sequence[Candidate]) -> Proposal:
        """`ArgumentScorer(self.spec()).propose(...)`."""
        return self.scorer_.propose(action, params, candidates)


def _check_trees(m: Trees) -> int:
    """The trees' greatest depth; ValueError unless every tree is a well-formed binary tree over FEATURES."""
    if not m.feature:
        raise ValueError("argument model spec: no trees")
    depth = 0
    trees = zip(m.feature, m.threshold, m.left, m.right, m.value)
    for t, (feature, threshold, left, right, value) in enumerate(trees):
        n = len(feature)
        if not n or any(len(a) != n for a in (threshold, left, right, value)):
            raise ValueError(f"argument model spec: tree {t} has fields of different lengths")
        level, d, seen = [0], 0, 1
        while True:
            level = [c for i in level if left[i] != -1 for c in (left[i], right[i])]
            if any(not 0 < c < n for c in level) or any(not 0 <= feature[i] < len(FEATURES) for i in level
                                                        if left[i] != -1):
                raise ValueError(f"argument model spec: tree {t} has a child or feature index out of range")
            seen += len(level)
            if not level:
                break
            if seen > n:
                raise ValueError(f"argument model spec: tree {t} is not a tree")
            d += 1
        if left[0] != -1 and not 0 <= feature[0] < len(FEATURES):
            raise ValueError(f"argument model spec: tree {t} has a feature index out of range")
        depth = max(depth, d)
    return depth


class ArgumentScorer:
    """Decision-time argument proposals from an `ArgumentModelSpec` (numpy only)."""

    def __init__(self, spec: ArgumentModelSpec) -> None:
        if spec.version != SPEC_VERSION:
            raise ValueError(f"argument model spec version {spec.version}, this zc reads {SPEC_VERSION}")
        if tuple(spec.features) != FEATURES:
            raise ValueError(f"argument model features {list(spec.features)} differ from this zc's "
                             f"{list(FEATURES)}")
        self.spec = spec
        m = spec.model
        if isinstance(m, Linear):
            self._linear = tuple(np.asarray(a, dtype=np.float64) for a in (m.mean, m.scale, m.coef))
        else:  # the trees padded to one (trees x nodes) array per field; padding is never reached
            self._depth = _check_trees(m)
            width = max(len(f) for f in m.feature)

            def pad(rows: tuple[tuple[Any, ...], ...], dtype: Any, fill: Any) -> np.ndarray:
                out = np.full((len(rows), width), fill, dtype=dtype)
                for t, r in enumerate(rows):
                    out[t, :len(r)] = r
                return out

            # raveled, tree t's node i at t * width + i: one flat gather a level
            self._feature = np.maximum(pad(m.feature, np.int64, 0), 0).ravel()  # leaves hold -2: any will do
            self._threshold = pad(m.threshold, np.float64, 0.0).ravel()
            self._left = pad(m.left, np.int64, -1).ravel()
            self._right = pad(m.right, np.int64, -1).ravel()
            self._value = pad(m.value, np.float64, 0.0).ravel()
            self._base = np.arange(len(m.feature), dtype=np.int64) * width

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """The probability that each feature row's candidate is the teacher's value."""
        m = self.spec.model
        if isinstance(m, Linear):
            mean, scale, coef = self._linear
            z = ((x - mean) / scale) @ coef + m.intercept
        else:
            xs = np.asarray(x, dtype=np.float32 if m.precision == "float32" else np.float64)
            flat_x, width = xs.ravel(), xs.shape[1]
            rows = np.arange(len(xs), dtype=np.int64)[:, None] * width
            at = np.broadcast_to(self._base, (len(xs), len(self._base))).copy()  # rows x trees: node index
            for _ in range(self._depth):
                left = self._left.take(at)
                go_left = flat_x.take(rows + self._feature.take(at)) <= self._threshold.take(at)
                at = np.where(left == -1, at, self._base + np.where(go_left, left, self._right.take(at)))
            z = m.base + m.learning_rate * self._value.take(at).sum(axis=1)
        return 1.0 / (1.0 + np.exp(-z))

    def stats(self, action: str, argument: str) -> ArgumentStats:
        return _merge(self.spec.actions.get(action, {}).get(argument), self.spec.names.get(argument))

    def choose(self, action: str, argument: str, schema: Mapping[str, Any],
               candidates: Sequence[Candidate]) -> tuple[Any, float]:
        """The argument's best value and its confidence ((None, 0.0) when no candidate fits).

        A value's score is the best of its candidates' probabilities; the confidence discounts it
        by the strongest rival value: p_best * (1 - p_second).
        """
        values, norms, rows = _rows(action, argument, schema, candidates, self.stats(action, argument))
        if not values:
            return None, 0.0
        p = self.predict_proba(rows)
        best: dict[str, tuple[float, Any]] = {}
        for v, key, pv in zip(values, norms, p):
            if key not in best or pv > best[key][0]:
                best[key] = (float(pv), v)
        ranked = sorted(best.values(), key=lambda t: -t[0])
        second = ranked[1][0] if len(ranked) > 1 else 0.0
        return ranked[0][1], ranked[0][0] * (1.0 - second)

    def propose(self, action: str, params: Mapping[str, Any], candidates: Sequence[Candidate]) -> Proposal:
        """A value for every argument of the action's signature, or abstain.

        A required argument whose best confidence is below `min_confidence` (or that no candidate
        fits) makes the whole proposal abstain (`arguments` None). An optional argument is passed
        when training saw it passed in most calls and its value is confident, else left out.

        Args:
            action: the chosen action's name.
            params: its JSON-schema `parameters` object (`properties`, `required`).
            candidates: `extract_candidates` of the conversation before the decision.
        """
        props = params.get("properties") or {}
        required = set(params.get("required") or ())
        values: dict[str, Any] = {}
        confs: dict[str, float] = {}
        args: dict[str, Any] | None = {}
        joint = 1.0
        for name, schema in props.items():
            value, conf = self.choose(action, name, schema or {}, candidates)
            ok = value is not None and conf >= self.spec.min_confidence
            confs[name] = conf if ok else 0.0
            if ok:
                values[name] = value
            if name in required:
                if ok and args is not None:
                    args[name] = value
                    joint *= conf
                else:
                    args = None
            elif args is not None:  # optional: passed as often as training passed it
                include = self.stats(action, name).included
                if ok and include >= 0.5:
                    args[name] = value
                    joint *= include * conf
                else:
                    joint *= 1.0 - include
        return Proposal(arguments=args, confidence=joint if args is not None else 0.0, values=values,
                        confidences=confs)
