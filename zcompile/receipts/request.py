"""The request in the state: lexical cues of what the user's latest message asks for, one versioned function.

`request_features(text)` maps a user message to `REQUEST_FIELDS`, each a bool (version
`REQUEST_VERSION`). The chat extractor (`receipts.chat.ChatSummary`) calls it on every user
message, so the chat importer, `zc serve` and `zc mcp` derive the same values; a policy reads them
as `bool` fields `request.<name>` (policies/airline_chat.zc), which the tabular features encode
like any other bool. The cues are closed lists of common English words, not of any domain's records:

- `create`: a verb of creating a record in its base form (book, reserve, buy, purchase, order),
  or `new` / `another`;
- `change`: a verb of changing one (change, modify, update, upgrade, downgrade, switch, add, remove,
  move, reschedule, edit, replace) in any inflection;
- `cancel`: cancel in any inflection, cancellation, refund;
- `existing`: a reference to a record that exists already: a possessive or demonstrative
  determiner (my, our, this, that, the same) or existing / current / upcoming / previous / original,
  followed within two words by a record noun (reservation, booking, flight, trip, ticket, order,
  account, profile), or a creation verb in the past tense (booked, reserved, bought, purchased, made);
- `lookup`: a verb or noun of reading (check, see, view, show, tell, know, look, find, status,
  detail(s), information, info, verify);
- `question`: a question mark, or a first word that opens a question (what, when, where, which,
  who, whose, why, how, can, could, would, will, is, are, am, was, were, do, does, did, should,
  may, might, have, has);
- `affirm`: a first word that agrees (yes, yeah, yep, sure, ok, okay, correct, confirm, confirmed,
  proceed, go ahead).

Words are the lowercase runs of letters and apostrophes; the first 64 are read (an opening request
says what it is about early). No message (`None`) gives every field false.
"""

from __future__ import annotations

import re

REQUEST_VERSION = 1
REQUEST_FIELDS = ("create", "change", "cancel", "existing", "lookup", "question", "affirm")
MAX_WORDS = 64  # words of a message read

_WORD = re.compile(r"[a-z']+")
_CREATE = frozenset({"book", "reserve", "buy", "purchase", "order", "new", "another"})
_E = ("e", "es", "ed", "ing")  # change, changes, changed, changing
_CHANGE = frozenset(f"{stem}{end}" for stem, ends in (
    ("chang", _E), ("modif", ("y", "ies", "ied", "ying")), ("updat", _E), ("upgrad", _E), ("downgrad", _E),
    ("switch", ("", "es", "ed", "ing")), ("add", ("", "s", "ed", "ing")), ("remov", _E), ("mov", _E),
    ("reschedul", _E), ("edit", ("", "s", "ed", "ing")), ("replac", _E),
) for end in ends)
_CANCEL = frozenset({"cancel", "cancels", "canceled", "cancelled", "canceling", "cancelling",
                     "cancellation", "refund", "refunds", "refunded"})
_DETERMINER = frozenset({"my", "our", "this", "that", "these", "those", "same", "existing", "current",
                         "upcoming", "previous", "original"})
_RECORD = frozenset({"reservation", "reservations", "booking", "bookings", "flight", "flights", "trip",
                     "trips", "ticket", "tickets", "order", "orders", "account", "profile"})
_PAST = frozenset({"booked", "reserved", "bought", "purchased", "made"})
_LOOKUP = frozenset({"check", "see", "view", "show", "tell", "know", "look", "find", "status", "detail",
                     "details", "information", "info", "verify"})
_OPENS_QUESTION = frozenset({"what", "what's", "when", "where", "which", "who", "whose", "why", "how",
                             "can", "could", "would", "will", "is", "are", "am", "was", "were", "do", "does",
                             "did", "should", "may", "might", "have", "has"})
_AGREES = frozenset({"yes", "yeah", "yep", "sure", "ok", "okay", "correct", "confirm", "confirmed",
                     "proceed"})
_NONE = dict.fromkeys(REQUEST_FIELDS, False)


def request_features(text: str | None) -> dict[str, bool]:
    """The cues of a user message (module docstring), one bool per `REQUEST_FIELDS` name, in order."""
    if not text:
        return dict(_NONE)
    words = _WORD.findall(text.lower())[:MAX_WORDS]
    first = words[0] if words else ""
    existing = not _PAST.isdisjoint(words) or any(
        w in _DETERMINER and not _RECORD.isdisjoint(words[i + 1:i + 3]) for i, w in enumerate(words))
    return {
        "create": not _CREATE.isdisjoint(words),
        "change": not _CHANGE.isdisjoint(words),
        "cancel": not _CANCEL.isdisjoint(words),
        "existing": existing,
        "lookup": not _LOOKUP.isdisjoint(words),
        "question": "?" in text or first in _OPENS_QUESTION,
        "affirm": first in _AGREES or words[:2] == ["go", "ahead"],
    }
