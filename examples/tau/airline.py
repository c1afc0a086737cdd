"""The airline adapter: the state of `policies/tau_airline.zc` for one proposed call.

A harness would write this: it reads the tau-bench airline database, applies the effects of the
actions already taken in the conversation to an in-memory copy, and describes the user and the
reservation a proposed call names. Data: tau2-bench (Sierra, MIT).
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any

from .common import DataError, Overlay, expect, read_json

NOW = datetime(2024, 5, 15, 15, 0, 0)  # "The current time is 2024-05-15 15:00:00 EST."
DEPARTED = ("flying", "landed")
RESERVATION_ID = re.compile(r"\b[A-Z0-9]{6}\b")


def load_db(path: str | Path) -> dict[str, dict]:
    """The airline database: a directory with users.json, reservations.json and flights.json."""
    p = Path(path)
    if p.is_file():
        p = p.parent
    db = {}
    for table in ("users", "reservations", "flights"):
        f = p / f"{table}.json"
        if not f.exists():
            raise DataError(f"{p}: not an airline database (no {table}.json; expected a directory "
                            "with users.json, reservations.json and flights.json)")
        data = read_json(f, f"airline {table}")
        expect(isinstance(data, dict), "$", str(f), f"expected an object of {table} keyed by id")
        db[table] = data
    return db


# The reason for cancelling, from what the user says. Only explicit words count; anything else the
# user gives is `other`, and no words at all leave it absent (the agent has not asked).
_REASONS = (
    ("health", re.compile(r"\b(sick|ill|illness|unwell|not feeling well|under the weather|flu|fever|"
                          r"hospital\w*|medical|injur\w*|surgery)\b", re.I)),
    ("weather", re.compile(r"\b(weather|storm|hurricane|snow\w*|blizzard|typhoon|flood\w*)\b", re.I)),
    ("airline_cancelled", re.compile(r"\b(airline cancel\w*|cancel\w* by the airline|flight (was|got|has "
                                     r"been) cancel\w*)\b", re.I)),
    ("change_of_plan", re.compile(r"\b(change of plans?|plans? (have |has )?changed|no longer need|don'?t "
                                  r"need)\b", re.I)),
)


def cancel_reason(text: str) -> str | None:
    """`cancel.reason` from the user's words (None when they give no reason at all)."""
    if not text.strip():
        return None
    for reason, pattern in _REASONS:
        if pattern.search(text):
            return reason
    return "other"


class AirlineWorld:
    """The database as the conversation has changed it, and the state for each proposed call."""

    def __init__(self, db: dict[str, dict], text: str = "") -> None:
        self.users = Overlay(db["users"])
        self.reservations = Overlay(db["reservations"])
        self.flights = db["flights"]
        self.base_reservations = db["reservations"]
        self.reason = cancel_reason(text)
        self.changed: set[str] = set()
        self.last_reservation: str | None = None
        self.booked = 0

    # ---- facts --------------------------------------------------------------------------------
    def status(self, number: str, date: str) -> str | None:
        return ((self.flights.get(number) or {}).get("dates") or {}).get(date, {}).get("status")

    def _segments(self, res: dict, statuses: tuple[str, ...]) -> int | None:
        found = [self.status(f["flight_number"], f["date"]) for f in res.get("flights", [])]
        if any(s is None for s in found):
            return None  # a flight the database does not know on that date: unknown
        return sum(s in statuses for s in found)

    def _payment(self, user: dict | None, pid: Any) -> tuple[bool | None, str | None]:
        if user is None or not isinstance(pid, str):
            return None, None
        pm = (user.get("payment_methods") or {}).get(pid)
        if pm is None:
            return False, None
        kind = pm.get("source")
        return True, kind if kind in ("credit_card", "gift_card", "certificate") else None

    def _new_segments(self, flights: Any, keep: set[tuple[str, str]]) -> int | None:
        if not isinstance(flights, list):
            return None
        bad = 0
        for f in flights:
            if not isinstance(f, dict):
                return None
            key = (f.get("flight_number"), f.get("date"))
            if key not in keep and self.status(*key) != "available":
                bad += 1
        return bad

    def _route(self, flights: list) -> list[tuple[str, str]] | None:
        out = []
        for f in flights:
            info = self.flights.get(f.get("flight_number")) if isinstance(f, dict) else None
            if info is None:
                return None
            out.append((info["origin"], info["destination"]))
        return out or None

    def _same_route(self, res: dict, flights: Any) -> bool | None:
        if not isinstance(flights, list):
            return None
        legs = self._route(flights)
        if legs is None:
            return None
        if legs[0][0] != res["origin"]:
            return False
        if res.get("flight_type") == "round_trip":
            return legs[-1][1] == res["origin"] and res["destination"] in {d for _, d in legs}
        return legs[-1][1] == res["destination"]

    def state(self, name: str, args: dict, history: set[str], about: str | None = None) -> dict:
        """The policy's state for proposed call `name(args)` after the actions in `history`."""
        rid = args.get("reservation_id")
        if name == "send_certificate":
            rid = about or self.last_reservation
        res = self.reservations.get(rid) if isinstance(rid, str) else None
        uid = args.get("user_id") if isinstance(args.get("user_id"), str) else (res or {}).get("user_id")
        user = self.users.get(uid) if isinstance(uid, str) else None
        state: dict[str, Any] = {"history": sorted(history)}
        if user is not None:
            state["user"] = {"membership": user.get("membership")}
        if res is not None:
            created = datetime.fromisoformat(res["created_at"])
            base = self.base_reservations.get(rid) or res
            state["res"] = {
                "cabin": res.get("cabin"),
                "insurance": res.get("insurance") == "yes",
                "passengers": len(res.get("passengers") or []),
                "total_baggages": res.get("total_baggages"),
                "hours_since_booking": round((NOW - created).total_seconds() / 3600, 2),
                "segments_flown": self._segments(res, DEPARTED),
                "segments_cancelled": self._segments(res, ("cancelled",)),
                "delayed_at_start": self._segments(base, ("delayed",)),
                "cancelled_at_start": self._segments(base, ("cancelled",)),
                "changed_in_task": rid in self.changed,
            }
        if self.reason is not None:
            state["cancel"] = {"reason": self.reason}
        call: dict[str, Any] = {}
        if name == "book_reservation":
            methods = args.get("payment_methods")
            if isinstance(methods, list) and user is not None:
                kinds = [self._payment(user, m.get("payment_id") if isinstance(m, dict) else None)
                         for m in methods]
                call["payments_not_in_profile"] = sum(ok is not True for ok, _ in kinds)
                for kind in ("certificate", "credit_card", "gift_card"):
                    call[f"{kind}s"] = sum(k == kind for _, k in kinds)
            call["new_flights_unavailable"] = self._new_segments(args.get("flights"), set())
        elif name in ("update_reservation_flights", "update_reservation_baggages") and res is not None:
            ok, kind = self._payment(user, args.get("payment_id"))
            call["payment_in_profile"] = ok
            call["payment_kind"] = kind
            if name == "update_reservation_flights":
                keep = {(f["flight_number"], f["date"]) for f in res.get("flights", [])}
                new = args.get("flights")
                if isinstance(new, list):
                    got = {(f.get("flight_number"), f.get("date")) for f in new if isinstance(f, dict)}
                    call["flights_changed"] = got != keep or len(new) != len(keep)
                call["same_route"] = self._same_route(res, new)
                call["new_flights_unavailable"] = self._new_segments(new, keep)
        if call:
            state["call"] = {k: v for k, v in call.items() if v is not None}
        return state

    # ---- effects ------------------------------------------------------------------------------
    def apply(self, name: str, args: dict) -> None:
        """Apply a write to the in-memory copy, as the tau-bench tool would (no checks)."""
        rid = args.get("reservation_id")
        if isinstance(rid, str) and rid in self.reservations:
            self.last_reservation = rid
        if name == "cancel_reservation" and rid in self.reservations:
            res = self.reservations.edit(rid)
            res["status"] = "cancelled"
            self.changed.add(rid)
        elif name == "update_reservation_flights" and rid in self.reservations:
            res = self.reservations.edit(rid)
            cabin = args.get("cabin", res["cabin"])
            new = []
            for f in args.get("flights") or []:
                info = self.flights.get(f.get("flight_number"), {})
                day = (info.get("dates") or {}).get(f.get("date"), {})
                new.append({"flight_number": f.get("flight_number"), "date": f.get("date"),
                            "origin": info.get("origin"), "destination": info.get("destination"),
                            "price": (day.get("prices") or {}).get(cabin, 0)})
            res["flights"], res["cabin"] = new, cabin
            self.changed.add(rid)
        elif name == "update_reservation_baggages" and rid in self.reservations:
            res = self.reservations.edit(rid)
            res["total_baggages"] = args.get("total_baggages", res["total_baggages"])
            res["nonfree_baggages"] = args.get("nonfree_baggages", res["nonfree_baggages"])
            self.changed.add(rid)
        elif name == "update_reservation_passengers" and rid in self.reservations:
            res = self.reservations.edit(rid)
            res["passengers"] = list(args.get("passengers") or [])
            self.changed.add(rid)
        elif name == "book_reservation" and args.get("user_id") in self.users:
            self.booked += 1
            new_id = f"NEW{self.booked:03d}"
            self.reservations.put(new_id, {
                "reservation_id": new_id, "user_id": args["user_id"],
                "origin": args.get("origin"), "destination": args.get("destination"),
                "flight_type": args.get("flight_type"), "cabin": args.get("cabin"),
                "flights": list(args.get("flights") or []),
                "passengers": list(args.get("passengers") or []),
                "payment_history": list(args.get("payment_methods") or []),
                "created_at": NOW.isoformat(), "total_baggages": args.get("total_baggages", 0),
                "nonfree_baggages": args.get("nonfree_baggages", 0),
                "insurance": args.get("insurance", "no")})
            user = self.users.edit(args["user_id"])
            user.setdefault("reservations", []).append(new_id)
            for m in args.get("payment_methods") or []:
                pm = (user.get("payment_methods") or {}).get(m.get("payment_id"))
                if pm and pm.get("source") == "certificate":
                    del user["payment_methods"][m["payment_id"]]  # a certificate is used up
                elif pm and pm.get("source") == "gift_card":
                    pm["amount"] = pm.get("amount", 0) - m.get("amount", 0)
            self.changed.add(new_id)
        elif name == "send_certificate" and args.get("user_id") in self.users:
            user = self.users.edit(args["user_id"])
            n = sum(1 for k in user.get("payment_methods", {}) if k.startswith("certificate_"))
            pid = f"certificate_new{n}"
            user.setdefault("payment_methods", {})[pid] = {
                "source": "certificate", "amount": args.get("amount"), "id": pid}
