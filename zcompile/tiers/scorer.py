"""The scorer rung: a local model, in process, scores each legal action and its argument candidates by
likelihood (no decoding), and answers the most likely call when its certified τ allows, else abstains."""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, cast

import msgspec
import numpy as np

from ..errors import ZcError, json_problem
from ..inputs import read_file, sha256_file
from ..qroute.arguments import fit_value
from ..qroute.manifest import NEVER  # τ above every confidence: abstain on everything (fail closed)
from ..receipts.candidates import normalize
from ..router.prompt import system_prompt
from ..router.rung import Answer, Step, abstain, settle
from ..tools import signature_schema
from .local import Residency, check_llama_cpp, model_file
from .offer import Offer, messages

FORMAT: Literal["zc-scorer-calibration/1"] = "zc-scorer-calibration/1"
MAX_VALUES = 8  # argument values scored per argument (the most recent fitting candidates, or the enum)
PREFIX = '{"action": "'  # the assistant's answer so far: every candidate continues it
N_CTX = 4096
PRIORS = 256  # content-free priors kept (one per offered listing)


class Calibration(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """`zc local calibrate`'s output: τ for one model file and one policy, with its guarantee."""

    format: Literal["zc-scorer-calibration/1"]
    model: str  # the GGUF file's name
    model_sha256: str
    policy: str  # the policy's sha256
    tau: float
    target: float
    guarantee: str
    unit: str
    statement: str
    n: int  # decisions scored
    answered: int  # ... answered at τ
    correct: int  # ... and right
    correct_all: int  # right among all n when answering every one (τ = 0)
    tasks: int = 0
    tasks_answered: int = 0
    tasks_clean: int = 0
    receipts: list[str] = []
    tasks_used: list[str] = []  # the tasks it was calibrated on (none of the specialist's test split)


def read_calibration(path: str | Path) -> Calibration:
    """A calibration file, checked; ZcError naming the file and the `$.path` of a problem."""
    raw = read_file(path, "scorer calibration")
    try:
        return msgspec.json.decode(raw, type=Calibration)
    except msgspec.ValidationError as exc:
        p = json_problem(exc)
        raise ZcError(f"{path}: {p.path}: {p.problem}") from None
    except msgspec.DecodeError as exc:
        raise ZcError(f"{path}: not JSON: {exc}") from None


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def _normalized(lls: Sequence[float]) -> np.ndarray:
    """Log-likelihoods as a distribution over the candidates."""
    a = np.asarray(lls, dtype=np.float64)
    p = np.exp(a - a.max())
    return p / p.sum()


class Deadline(Exception):
    """The decision's budget ran out while scoring."""


class LikelihoodModel:
    """A GGUF model in this process (llama-cpp-python), asked one thing: the log-likelihood of each
    continuation of a prompt. The prompt's tokens stay in the KV cache, so a longer prompt (the call's
    arguments so far) pays only for what follows their common prefix. Not thread-safe: the caller holds
    a lock."""

    def __init__(self, path: Path, threads: int | None, n_ctx: int = N_CTX) -> None:
        from llama_cpp import Llama
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        try:
            self.llm = Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                             logits_all=False, verbose=False)
        except (ValueError, RuntimeError) as exc:
            raise ZcError(f"{path}: cannot load the model: {exc}") from None
        meta = self.llm.metadata
        template = meta.get("tokenizer.chat_template")
        if not template:
            raise ZcError(f"{path}: the model has no chat template (tokenizer.chat_template)")
        model = self.llm._model
        eos, bos = self.llm.token_eos(), self.llm.token_bos()
        self._format = Jinja2ChatFormatter(template, model.token_get_text(eos) if eos != -1 else "",
                                           model.token_get_text(bos) if bos != -1 else "")
        self.n_ctx, self.n_batch, self.vocab = n_ctx, self.llm.n_batch, self.llm.n_vocab()
        self._cached: list[int] = []  # the tokens in the KV cache
        self._last: np.ndarray | None = None  # log-probabilities after them

    def chat(self, msgs: list[dict[str, str]]) -> str:
        """The prompt of `msgs` in the model's chat template, ready for the assistant's turn."""
        return self._format(messages=cast(Any, msgs)).prompt

    def reset(self) -> None:
        """Forget the cached tokens: the next prompt is decoded from its start. Each decision starts so,
        because decoding in other batches rounds differently: what was asked before must not change a
        decision's scores."""
        self._cached, self._last = [], None

    def tokens(self, text: str, special: bool = False) -> list[int]:
        return self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)

    def prime(self, tokens: list[int], deadline: float) -> None:
        """Put `tokens` in the KV cache (reusing the common prefix with what is there)."""
        if len(tokens) + 64 > self.n_ctx:
            raise ZcError(f"prompt of {len(tokens)} tokens does not fit the context ({self.n_ctx})")
        common = 0
        for a, b in zip(self._cached, tokens, strict=False):
            if a != b:
                break
            common += 1
        if common == len(tokens) and common == len(self._cached) and self._last is not None:
            return
        common = min(common, len(tokens) - 1)  # at least one token decoded: its logits are needed
        ctx, batch = self.llm._ctx, self.llm._batch
        ctx.kv_cache_seq_rm(-1, common, -1)
        self._cached = tokens[:common]
        self._last = None
        for i in range(common, len(tokens), self.n_batch):
            if time.perf_counter() > deadline:
                raise Deadline
            chunk = tokens[i:i + self.n_batch]
            batch.set_batch(batch=chunk, n_past=i, logits_all=False)
            ctx.decode(batch)
            self._cached = tokens[:i + len(chunk)]
        raw = np.ctypeslib.as_array(ctx.get_logits(), shape=(self.vocab,))
        self._last = _log_softmax(raw.copy())

    def loglik(self, continuations: Sequence[list[int]], deadline: float) -> list[float]:
        """The log-likelihood of each continuation after the primed tokens."""
        assert self._last is not None
        n_past = len(self._cached)
        ctx, batch = self.llm._ctx, self.llm._batch
        out = []
        for toks in continuations:
            if time.perf_counter() > deadline:
                raise Deadline
            total = float(self._last[toks[0]])
            if len(toks) > 1:
                if n_past + len(toks) > self.n_ctx or len(toks) > self.n_batch:
                    raise ZcError(f"a candidate of {len(toks)} tokens does not fit the context")
                ctx.kv_cache_seq_rm(-1, n_past, -1)
                batch.set_batch(batch=toks[:-1], n_past=n_past, logits_all=True)
                ctx.decode(batch)
                rows = np.ctypeslib.as_array(ctx.get_logits(), shape=(len(toks) - 1, self.vocab))
                lp = _log_softmax(rows)
                total += float(lp[np.arange(len(toks) - 1), toks[1:]].sum())
            out.append(total)
        ctx.kv_cache_seq_rm(-1, n_past, -1)
        return out

    def close(self) -> None:
        self.llm.close()


def _values(schema: Mapping[str, Any], candidates: Sequence[Any]) -> list[Any]:
    """The values an argument may take: its enum, else the most recent candidates that fit its type."""
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return list(enum[:MAX_VALUES * 2])
    seen, out = set(), []
    for c in sorted(candidates, key=lambda c: (c.age == 0, c.age)):
        fitted = fit_value(c.value, schema)
        if fitted is None or (isinstance(fitted[0], str) and not fitted[0].strip()):
            continue
        key = normalize(fitted[0])
        if key not in seen:
            seen.add(key)
            out.append(fitted[0])
            if len(out) == MAX_VALUES:
                break
    return out


class ScorerTier(Residency):
    """The scorer rung (`score = "smollm2"` or a GGUF path in tiers.toml): in process, resident once
    loaded. For a decision it renders the same messages an LLM tier sends (the state, the intent, the
    offered legal actions), then scores `{"action": "NAME"` for each offered action and, for the most
    likely one, each argument's candidate values (`_values`) in turn, by summed token log-likelihood
    renormalised over the candidates; an action's is first corrected by its log-likelihood with an empty
    state (`_prior`: the model's bias toward a position or a name). Its confidence is the product of the
    chosen action's and values' shares; margin and entropy are those of the action distribution. It
    answers when the confidence is at least τ from its calibration file (`zc local calibrate`), else
    abstains (`below_threshold`);
    without a calibration τ is infinite: it abstains on everything, with the reason.

    Args:
        score: `smollm2` (the packaged model) or a GGUF file's path.
        calibration: a `zc local calibrate` file bound to this model and the policy, or None.
        tau: τ given directly (the calibration run itself uses 0); overrides `calibration`.
        threads: llama.cpp's threads (default 1).
        cold_ms, warm_ms: the declared costs, until measured.
        timeout_ms: this rung's budget per decision.
        policy_sha256: the policy the calibration must have been made for (checked when given).
    """

    writes_text = False

    def __init__(self, score: str, *, name: str = "scorer", calibration: str | Path | None = None,
                 tau: float | None = None, threads: int | None = 1, cold_ms: float | None = None,
                 warm_ms: float | None = None, timeout_ms: float = 30000.0, policy_sha256: str | None = None,
                 model: str | None = None) -> None:
        check_llama_cpp()
        self.name = name
        self.path = model_file(score)
        self.model = model or self.path.stem
        self.threads = threads
        self.timeout_ms = float(timeout_ms)
        self.calibration: Calibration | None = None
        if tau is not None:
            self.tau = float(tau)
        elif calibration is not None:
            cal = read_calibration(calibration)
            if cal.model_sha256 != sha256_file(self.path):
                raise ZcError(f"{calibration}: calibrated for another model file ({cal.model}), not "
                              f"{self.path.name}: run `zc local calibrate` again")
            if policy_sha256 is not None and cal.policy != policy_sha256:
                raise ZcError(f"{calibration}: calibrated for another policy (sha256 {cal.policy[:12]}…): "
                              "run `zc local calibrate` again")
            self.calibration, self.tau = cal, cal.tau
        else:
            self.tau = NEVER
        self._costs(cold_ms, warm_ms)
        self._lm: LikelihoodModel | None = None
        self._priors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._system = {"role": "system", "content": system_prompt("json_schema")}

    def __repr__(self) -> str:
        return f"ScorerTier(name={self.name!r}, model={self.model!r}, tau={self.tau})"

    # ---- residency (`zcompile.router.rung.Resident`) ----
    @property
    def resident(self) -> bool:
        return self._lm is not None

    def load(self, timeout_s: float | None = None) -> float:
        """Load the model into this process; the milliseconds it took (0 when it was loaded)."""
        with self._lock:
            if self._lm is not None:
                return 0.0
            started = time.perf_counter()
            self._lm = LikelihoodModel(self.path, self.threads)
            self.measured_cold_ms = (time.perf_counter() - started) * 1000.0
            return self.measured_cold_ms

    def close(self) -> None:
        with self._lock:
            if self._lm is not None:
                self._lm.close()
                self._lm = None

    def __enter__(self) -> ScorerTier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the rung ----
    def answer(self, step: Step, timeout_s: float | None) -> Answer:
        """The most likely legal call, with its confidence, margin and entropy; an abstention below τ."""
        started = time.perf_counter()
        budget = self.timeout_ms / 1000.0 if timeout_s is None else min(timeout_s, self.timeout_ms / 1000.0)
        legal = step.choices
        if not legal:
            return abstain("declined", "no legal action offered", model=self.model)
        if self.tau > 1.0:  # no confidence reaches it: abstain without spending the model's time
            return abstain("below_threshold", self._why_never(), model=self.model)
        if self._lm is None:
            self.load(budget)
        try:
            with self._lock:
                assert self._lm is not None
                scored = self._score(self._lm, step, legal, started + budget)
        except Deadline:
            return abstain("timeout", f"scoring took longer than {budget * 1000:.0f} ms", model=self.model)
        except (ZcError, RuntimeError) as exc:
            return abstain("error", str(exc), model=self.model)
        action, arguments, conf, margin, entropy = scored
        if conf < self.tau:
            ans = abstain("below_threshold", f"confidence {conf:.3g} below τ {self.tau:.3g}",
                          action=action if step.allows(action) else None,
                          confidence=conf, model=self.model)
        else:
            ans = settle(step, action, arguments, confidence=conf, model=self.model)
        return replace(ans, margin=margin, entropy=entropy)

    def _why_never(self) -> str:
        if self.calibration is None:
            return "no calibration: run `zc local calibrate` and bind it (calibration = …)"
        return f"its calibration certifies no τ ({self.calibration.statement.rsplit('; ', 1)[-1]})"

    def _prior(self, lm: LikelihoodModel, listing: str, names: list[list[int]],
               deadline: float) -> np.ndarray:
        """Each offered action's log-likelihood with no state at all (an empty one, no intent): what the
        model would answer from the listing alone, its bias toward a position or a name. Subtracted
        before the actions are compared (contextual calibration, Zhao et al. 2021); cached per listing."""
        got = self._priors.get(listing)
        if got is None:
            lm.reset()
            lm.prime(lm.tokens(lm.chat(messages(self._system, {}, None, listing)) + PREFIX, special=True),
                     deadline)
            got = np.asarray(lm.loglik(names, deadline))
            self._priors[listing] = got
            while len(self._priors) > PRIORS:
                self._priors.popitem(last=False)
        return got

    def _score(self, lm: LikelihoodModel, step: Step, legal: tuple[str, ...],
               deadline: float) -> tuple[str, dict[str, Any] | None, float, float, float]:
        """(action, arguments or None, confidence, margin, entropy) of the most likely call."""
        given = step.tools or {}
        descriptions = {**step.catalog.descriptions, **{a: t["description"] for a, t in given.items()
                                                       if isinstance(t.get("description"), str)}}
        offer = Offer(legal, descriptions, "json_schema")
        names = [lm.tokens(f'{a}"') for a in legal]
        prior = self._prior(lm, offer.listing, names, deadline)
        head = lm.chat(messages(self._system, step.state, step.intent, offer.listing)) + PREFIX
        prompt = lm.tokens(head, special=True)
        lm.reset()
        lm.prime(prompt, deadline)
        p = _normalized(np.asarray(lm.loglik(names, deadline)) - prior)
        order = np.argsort(-p, kind="stable")
        best = int(order[0])
        action, conf = legal[best], float(p[best])
        margin = float(p[best] - p[order[1]]) if len(legal) > 1 else 1.0
        entropy = float(-(p * np.log(np.clip(p, 1e-300, None))).sum())
        if action in step.catalog.replies:
            return action, None, conf, margin, entropy
        params = given.get(action, {}).get("parameters")
        if not isinstance(params, dict):
            declared = step.catalog.params.get(action)
            if declared is None:  # no signature: its arguments are unknown
                return action, None, conf, margin, entropy
            params = signature_schema(declared)
        schema: Mapping[str, Any] = params
        props = schema.get("properties") or {}
        required = [k for k in props if k in set(schema.get("required") or ())]
        text = head + f'{action}", "arguments": {{'
        arguments: dict[str, Any] = {}
        for i, param in enumerate(required):
            values = _values(props[param] if isinstance(props[param], dict) else {}, step.candidates)
            if not values:
                return action, None, conf, margin, entropy  # a bare name: no candidate fits
            text += ("" if i == 0 else ", ") + f'"{param}": '
            lm.prime(lm.tokens(text, special=True), deadline)
            end = ", " if i + 1 < len(required) else "}"
            dumped = [json.dumps(v, ensure_ascii=False) for v in values]
            q = _normalized(lm.loglik([lm.tokens(d + end) for d in dumped], deadline))
            j = int(np.argmax(q))
            arguments[param] = values[j]
            conf *= float(q[j])
            text += dumped[j]
        return action, arguments, conf, margin, entropy
