"""The reply grader: program checks a reply written by a cheaper tier must pass before it reaches the user."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from ..errors import ZcError, json_problem
from ..inputs import read_file
from .prompt import SCAFFOLDING

FORMAT = "zc-grader/1"
CHECKS = ("empty", "truncated", "language", "leak", "echo", "fault_ignored", "unsupported_id", "promise")

SPECIAL_TOKEN = re.compile(r"<\|[a-z_]{2,20}\|>|</?s>|\[/?INST\]|<<SYS>>|<start_of_turn>|<end_of_turn>")
STATE_KEYS = re.compile(r'"(?:tool_error|user_text|tool_text|assistant_text|calls_since_user)"\s*:')
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?|\d+", re.U)
_DANGLING = frozenset("a an the and or but to of for with in on at by from as is are was that your my"
                      .split())  # a sentence does not end on these
_END = re.compile(r"[.!?:;…)\]}\"'*`»。！？]\s*$")
SUCCESS = re.compile(
    r"\b(?:successfully|(?:has|have) been (?:\w+ )?(?:updated|cancel+ed|booked|processed|changed|added|"
    r"modified|refunded|confirmed|completed|issued|upgraded|removed)|(?:is|are) (?:now )?(?:confirmed|"
    r"booked|cancel+ed|updated)|i(?:'ve| have) (?:\w+ )?(?:updated|cancel+ed|booked|processed|changed|"
    r"added|modified|refunded|completed|issued|upgraded|removed)|all set|(?:is|has been) done)\b", re.I)
ACKNOWLEDGED = re.compile(
    r"\b(?:error|unable|could ?n[o']t|can ?n[o']t|cannot|failed|fail|not (?:able|possible|available|enough|"
    r"allowed|eligible|be)|unfortunately|sorry|apolog\w*|issue|problem|unsuccessful|didn't|did not|"
    r"wasn't|was not|isn't possible|no (?:seats|availability))\b", re.I)
# who promises: the agent, in the first person ("I will", "I've", "we'll", "I am going to"), then up to
# two words before the verb; "I can …" states an ability, and a passive "is canceled" is as often a
# condition as a promise
PROMISE = r"\b(?:i|we)(?:'ll|'ve|'m going to| will| have| am going to| are going to)\s+(?:\w+\s+){0,2}"
# an identifier as agents quote them: letters and digits mixed (HAT229, 3RK2T9), or words joined by
# underscores that end in digits (gift_card_2550356)
IDENT = re.compile(r"\b(?=[A-Z0-9]*\d)(?=[A-Z0-9]*[A-Z])[A-Z0-9]{5,12}\b|\b[a-z]+(?:_[a-z]+)*_\d{3,}\b")
# stop words of the languages a reply is compared in: a reply in another language than the user's
STOPWORDS = {
    "en": "the and you your is are to of for with this that have will please can i we it be".split(),
    "es": "el la los las y de que para con por su usted es una un está puede favor gracias".split(),
    "fr": "le la les et de des que pour avec vous votre est une un pouvez merci nous je".split(),
    "de": "der die das und ist nicht sie ihre ihr für mit ein eine bitte wir ich zu den".split(),
    "pt": "o a os as e de que para com você seu sua é um uma por favor obrigado não".split(),
    "it": "il lo la gli le e di che per con lei suo sua è un una grazie non siamo".split(),
}
_STOP = {lang: frozenset(ws) for lang, ws in STOPWORDS.items()}
FIRST_PERSON = frozenset("i i'm i'd i've i'll me my mine myself".split())  # the user's own voice


class GraderConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A grader file (TOML): which checks run, where a state keeps what the reply is checked against,
    what must never be quoted, and what each action is promised with."""

    checks: list[str] = msgspec.field(default_factory=lambda: list(CHECKS))
    user: str = "last.user_text"  # the state paths (dotted) of the last user message,
    tool: str = "last.tool_text"  # ... the last tool output,
    fault: str = "last.tool_error"  # ... and whether that tool call faulted
    scaffolding: list[str] = []  # more text that must never appear verbatim (a system prompt, notes)
    leak_words: int = 8  # a run of this many words copied from scaffolding is a leak
    echo_words: int = 6  # a run of this many words copied from the user's last message is an echo
    promises: dict[str, list[str]] = {}  # action -> verbs that promise it ("cancel")
    graded: list[str] | None = None  # the rungs whose replies are graded (None: every rung but the last)


@dataclass(frozen=True, slots=True)
class Flaw:
    check: str
    detail: str


@dataclass(frozen=True, slots=True)
class Verdict:
    flaws: tuple[Flaw, ...]

    @property
    def passed(self) -> bool:
        return not self.flaws

    def reason(self) -> str:
        return "; ".join(f"{f.check}: {f.detail}" for f in self.flaws)


def _path(state: Any, dotted: str) -> Any:
    for key in dotted.split("."):
        if not isinstance(state, Mapping):
            return None
        state = state.get(key)
    return state


def _words(text: str) -> list[str]:
    return [w.casefold() for w in _WORD.findall(text)]


def language(text: str) -> str | None:
    """The language a text is most likely written in among `STOPWORDS`, when its stop words say so
    clearly (at least 3, and twice the runner-up); None for short or mixed text."""
    words = _words(text)
    hits = sorted(((sum(w in stop for w in words), lang) for lang, stop in _STOP.items()), reverse=True)
    (best, lang), (second, _) = hits[0], hits[1]
    return lang if best >= 3 and best >= 2 * second else None


def _leaning(text: str) -> str | None:
    """For text too short for `language`: the one language whose stop words it uses, if only one."""
    words = _words(text)
    used = [lang for lang, stop in _STOP.items() if any(w in stop for w in words)]
    return used[0] if len(used) == 1 else None


def _script(text: str) -> str | None:
    """'latin' or 'other' by the letters a text is written in; None without letters."""
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return None
    latin = sum(c < "\u0250" for c in letters)
    return "latin" if latin >= 0.5 * len(letters) else "other"


def _verbs(stem: str) -> str:
    """A verb's forms that state an act: cancel -> cancel|cancels|cancel(l)ed (not `-ing`: "booking" is
    as often a noun)."""
    s = re.escape(stem.casefold())
    base = s[:-1] if s.endswith("e") else s
    return rf"(?:{s}s?|{base}(?:{s[-1]})?ed|{base}e?d)"


class Grader:
    """Grades a reply against the decision it answers: `grade(text, state, legal)` -> Verdict."""

    def __init__(self, config: GraderConfig | None = None, source: str = "<grader>") -> None:
        self.config = config = config or GraderConfig()
        unknown = [c for c in config.checks if c not in CHECKS]
        if unknown:
            raise ZcError(f"{source}: checks: unknown check `{unknown[0]}` (known: {', '.join(CHECKS)})")
        if config.leak_words < 4:
            raise ZcError(f"{source}: leak_words: at least 4 (fewer words are common phrases)")
        if config.echo_words < 4:
            raise ZcError(f"{source}: echo_words: at least 4 (fewer words are common phrases)")
        self.checks = tuple(config.checks)
        n = config.leak_words
        self._grams = {tuple(ws[i:i + n]) for text in (*SCAFFOLDING, *config.scaffolding)
                       for ws in [_words(text)] for i in range(max(len(ws) - n + 1, 0))}
        self._short = [t for t in (*SCAFFOLDING, *config.scaffolding) if len(_words(t)) < n and t.strip()]
        self._promises = {action: re.compile(f"{PROMISE}(?:{'|'.join(_verbs(v) for v in verbs)})\\b", re.I)
                          for action, verbs in config.promises.items() if verbs}

    def applies(self, rung: str, ladder: Sequence[str]) -> bool:
        """Whether replies written by `rung` on `ladder` are graded."""
        if self.config.graded is not None:
            return rung in self.config.graded
        return not ladder or rung != ladder[-1]

    def grade(self, text: str | None, state: Any, legal: Sequence[str] = (), *,
              finish_reason: str | None = None, seen: Sequence[Any] = ()) -> Verdict:
        """The flaws of reply `text` for a decision in `state` with `legal` actions; `finish_reason` as
        the server gave it; `seen`: the values seen in the conversation before (argument candidates)."""
        c = self.config
        text = text or ""
        flaws: list[Flaw] = []
        words = _words(text)
        run = set(self.checks)
        if "empty" in run and len(words) < 2:
            why = "the reply has no words" if not words else f"a one-word reply: {text.strip()!r}"
            flaws.append(Flaw("empty", why))
        if not words:
            return Verdict(tuple(flaws))
        if "truncated" in run:
            if finish_reason == "length":
                flaws.append(Flaw("truncated", "cut at max_tokens (finish_reason \"length\")"))
            elif text.count("```") % 2 or (not _END.search(text) and words[-1] in _DANGLING):
                flaws.append(Flaw("truncated", f"ends mid-sentence: …{text.rstrip()[-30:]!r}"))
        user = _path(state, c.user)
        if "language" in run and isinstance(user, str) and user.strip():
            us, rs = _script(user), _script(text)
            ul, rl = language(user) or _leaning(user), language(text)
            if us and rs and us != rs:
                flaws.append(Flaw("language", f"written in another script than the user's ({rs}, not {us})"))
            elif ul and rl and ul != rl:
                flaws.append(Flaw("language", f"written in `{rl}`, the user wrote in `{ul}`"))
        if "leak" in run:
            leak = self._leak(text, words)
            if leak:
                flaws.append(Flaw("leak", leak))
        if "echo" in run and isinstance(user, str) and (copied := self._echo(_words(user), words)):
            flaws.append(Flaw("echo", f"copies the user's message ({copied!r}): it speaks as the user, "
                                      "not to them"))
        tool = _path(state, c.tool)
        if "fault_ignored" in run and _path(state, c.fault) is True:
            claim = SUCCESS.search(text)
            if claim and not ACKNOWLEDGED.search(text):
                flaws.append(Flaw("fault_ignored", f"the last tool call failed, and the reply says "
                                                   f"{claim.group(0)!r} without saying so"))
        if "unsupported_id" in run:
            texts = (user, tool, _path(state, "last.assistant_text"), *(getattr(c, "value", c) for c in seen))
            context = " ".join(str(v) for v in texts if isinstance(v, (str, int)))
            if context:
                unseen = [m.group(0) for m in IDENT.finditer(text) if m.group(0) not in context]
                if unseen:
                    flaws.append(Flaw("unsupported_id", f"names {unseen[0]!r}, which neither the last tool "
                                                        "output nor the user's message holds"))
        if "promise" in run:
            for action, pattern in self._promises.items():
                if action not in legal and (m := pattern.search(text)):
                    flaws.append(Flaw("promise", f"promises {m.group(0)!r}, but `{action}` is not allowed "
                                                 "in this state"))
                    break
        return Verdict(tuple(flaws))

    def _echo(self, user: list[str], words: list[str]) -> str:
        """The words of the user's message the reply copies in the user's own first person: a run of
        `echo_words` (or a message of 3 or more words shorter than that, whole) holding "I", "my", "me"…
        An agent restates what the user asked in the second person ("your flight from New York to
        Chicago"); copying "I need to cancel my reservation" is speaking as the user."""
        n = min(self.config.echo_words, len(user))
        if n < 3:
            return ""
        said = {r for i in range(len(user) - n + 1) if FIRST_PERSON & set(r := tuple(user[i:i + n]))}
        runs = (tuple(words[i:i + n]) for i in range(len(words) - n + 1))
        return next((" ".join(r) for r in runs if r in said), "")

    def _leak(self, text: str, words: list[str]) -> str:
        if m := SPECIAL_TOKEN.search(text):
            return f"a chat template's token {m.group(0)!r}"
        if m := STATE_KEYS.search(text):
            return f"the decision's state as JSON ({m.group(0)!r})"
        n = self.config.leak_words
        for i in range(len(words) - n + 1):
            if tuple(words[i:i + n]) in self._grams:
                return f"{n} words copied from scaffolding: {' '.join(words[i:i + n])!r}"
        for t in self._short:
            if t in text:
                return f"scaffolding copied: {t!r}"
        return ""


def load_grader(path: str | Path) -> Grader:
    """A grader file (TOML, `format = "zc-grader/1"`); ZcError naming the file and the key."""
    file = str(path)
    try:
        data = tomllib.loads(read_file(path, "grader file").decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ZcError(f"{file}: not valid TOML: {exc}") from None
    if data.pop("format", None) != FORMAT:
        raise ZcError(f'{file}: format: expected "{FORMAT}"')
    try:
        config = msgspec.convert(data, GraderConfig, strict=True)
    except msgspec.ValidationError as exc:
        p = json_problem(exc)
        raise ZcError(f"{file}: {p.path.removeprefix('$.') or p.field}: {p.problem}") from None
    return Grader(config, file)
