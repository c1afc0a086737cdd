"""The retail adapter: the state of `policies/tau_retail.zc` for one proposed call.

It reads the tau-bench retail database, applies the effects of the actions already taken in the
conversation to an in-memory copy, and describes the order a proposed call names and what the call
would do to it. Data: tau2-bench (Sierra, MIT).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from .common import DataError, Overlay, expect, read_json

READS = ("find_user_id_by_email", "find_user_id_by_name_zip", "get_order_details",
         "get_product_details", "get_item_details", "get_user_details", "list_all_product_types")
LOOKUP_FIRST = ("find_user_id_by_name_zip", "get_order_details")  # what a writes-only trace assumes


def load_db(path: str | Path) -> dict[str, dict]:
    """The retail database: db.json with `products`, `users` and `orders` (or its directory)."""
    p = Path(path)
    if p.is_dir():
        p = p / "db.json"
    if not p.exists():
        raise DataError(f"{p}: not a retail database (expected db.json with products, users, orders)")
    db = read_json(p, "retail database")
    expect(isinstance(db, dict), "$", str(p), "expected {products, users, orders}")
    for table in ("products", "users", "orders"):
        expect(isinstance(db.get(table), dict), f"$.{table}", str(p),
               f"expected an object of {table} keyed by id")
    return db


def status_name(status: Any) -> str | None:
    """The database's status as an enum member: `pending (item modified)` -> `pending_item_modified`."""
    if not isinstance(status, str):
        return None
    name = re.sub(r"[^a-z]+", "_", status.lower()).strip("_")
    return {"pending_items_modified": "pending_item_modified"}.get(name, name)


class RetailWorld:
    """The database as the conversation has changed it, and the state for each proposed call."""

    def __init__(self, db: dict[str, dict], text: str = "") -> None:
        self.orders = Overlay(db["orders"])
        self.users = Overlay(db["users"])
        self.products = db["products"]
        self.variants = {iid: (pid, v) for pid, p in self.products.items()
                         for iid, v in (p.get("variants") or {}).items()}
        self.user: str | None = None  # the user authenticated in this conversation

    # ---- authentication -------------------------------------------------------------------------
    def locate(self, name: str, args: dict) -> str | None:
        """The user a find_user_* call locates, as the tool would answer."""
        for uid, u in self.users.base.items():
            if name == "find_user_id_by_email" and u.get("email") == args.get("email"):
                return uid
            if name == "find_user_id_by_name_zip" and (
                    (u.get("name") or {}).get("first_name") == args.get("first_name")
                    and (u.get("name") or {}).get("last_name") == args.get("last_name")
                    and (u.get("address") or {}).get("zip") == args.get("zip")):
                return uid
        return None

    def owner(self, name: str, args: dict) -> str | None:
        order = self.orders.get(args.get("order_id")) if isinstance(args.get("order_id"), str) else None
        if order is not None:
            return order.get("user_id")
        return args.get("user_id") if isinstance(args.get("user_id"), str) else None

    # ---- state ----------------------------------------------------------------------------------
    def state(self, name: str, args: dict, history: set[str], about: str | None = None) -> dict:
        """The policy's state for proposed call `name(args)` after the actions in `history`."""
        oid = args.get("order_id")
        order = self.orders.get(oid) if isinstance(oid, str) else None
        state: dict[str, Any] = {"history": sorted(history)}
        if order is not None:
            state["order"] = {"status": status_name(order.get("status")),
                              "total": round(sum(i.get("price", 0) for i in order.get("items", [])), 2)}
        call: dict[str, Any] = {}
        owner = self.owner(name, args)
        if self.user is not None and owner is not None:
            call["same_user"] = owner == self.user
            call["other_user"] = owner != self.user and (owner in self.users or order is not None)
        user = self.users.get(self.user) if self.user else None
        pid = args.get("payment_method_id")
        if isinstance(pid, str) and user is not None:
            pm = (user.get("payment_methods") or {}).get(pid)
            call["payment_in_profile"] = pm is not None
            if pm is not None and pm.get("source") in ("gift_card", "paypal", "credit_card"):
                call["payment_kind"] = pm["source"]
                if pm["source"] == "gift_card":
                    call["gift_card_balance"] = pm.get("balance")
        if isinstance(pid, str) and order is not None:
            paid = [p for p in order.get("payment_history", []) if p.get("transaction_type") == "payment"]
            if paid:
                call["payment_is_original"] = pid == paid[0].get("payment_method_id")
        items = args.get("item_ids")
        if order is not None and isinstance(items, list):
            have = Counter(i.get("item_id") for i in order.get("items", []))
            call["items_in_order"] = not (Counter(items) - have)
            new = args.get("new_item_ids")
            if isinstance(new, list) and len(new) == len(items):
                product_of = {i.get("item_id"): i.get("product_id") for i in order.get("items", [])}
                price_of = {i.get("item_id"): i.get("price", 0) for i in order.get("items", [])}
                found = [self.variants.get(n) for n in new]
                call["items_same_product"] = all(f is not None and f[0] == product_of.get(o)
                                                 for o, f in zip(items, found))
                call["items_changed"] = all(o != n for o, n in zip(items, new))
                call["new_items_available"] = all(f is not None and f[1].get("available") is True
                                                  for f in found)
                if all(f is not None for f in found):
                    call["price_difference"] = round(
                        sum(f[1].get("price", 0) for f in found) - sum(price_of.get(o, 0) for o in items), 2)
        if call:
            state["call"] = {k: v for k, v in call.items() if v is not None}
        return state

    # ---- effects --------------------------------------------------------------------------------
    def apply(self, name: str, args: dict) -> None:
        """Apply a call to the in-memory copy, as the tau-bench tool would (no checks)."""
        if name in ("find_user_id_by_email", "find_user_id_by_name_zip"):
            found = self.locate(name, args)
            if found is not None:
                self.user = found
            return
        oid = args.get("order_id")
        if not (isinstance(oid, str) and oid in self.orders):
            if name == "modify_user_address" and args.get("user_id") in self.users:
                self.users.edit(args["user_id"])["address"] = _address(args)
            return
        if name == "cancel_pending_order":
            self.orders.edit(oid)["status"] = "cancelled"
        elif name == "modify_pending_order_address":
            self.orders.edit(oid)["address"] = _address(args)
        elif name == "modify_pending_order_payment":
            order = self.orders.edit(oid)
            total = sum(i.get("price", 0) for i in order.get("items", []))
            order.setdefault("payment_history", []).append(
                {"transaction_type": "payment", "amount": total, "payment_method_id": args.get(
                    "payment_method_id")})
        elif name == "modify_pending_order_items":
            order = self.orders.edit(oid)
            for old, new in zip(args.get("item_ids") or [], args.get("new_item_ids") or []):
                found = self.variants.get(new)
                for item in order.get("items", []):
                    if item.get("item_id") == old and found is not None:
                        item.update(item_id=new, price=found[1].get("price"), options=found[1].get("options"))
                        break
            order["status"] = "pending (item modified)"
        elif name == "return_delivered_order_items":
            order = self.orders.edit(oid)
            order["status"] = "return requested"
            order["return_items"] = list(args.get("item_ids") or [])
        elif name == "exchange_delivered_order_items":
            order = self.orders.edit(oid)
            order["status"] = "exchange requested"
            order["exchange_items"] = list(args.get("item_ids") or [])

    def assume_authenticated(self, first_write: tuple[str, dict]) -> None:
        """For a trace that lists no read at all: the user is the owner of what the first write names."""
        self.user = self.owner(*first_write)


def _address(args: dict) -> dict:
    return {k: args.get(k) for k in ("address1", "address2", "city", "state", "country", "zip")}
