"""The decision point behind `zc pdp`: AuthZEN evaluations, batches and searches answered by the
policy (`Policy.check` per evaluation, one `Policy.legal` per action search), with every reason."""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
from typing import Any

import msgspec

from ..errors import ZcError
from ..state import StateError
from . import model
from .mapping import Mapped, Mapping, Unknown
from .model import BadInput, Query

REASONS_KEY = "zc"  # the key of a response's `context` that holds zc's reasons (docs/authzen.md)
MAX_PAGE = 1000  # a search answers at most this many results a page (more: `page.next_token`)
_log = logging.getLogger("zcompile.authzen")


class Denied(Exception):
    """An evaluation denied before the policy is asked: a name the mapping does not know, or an MCP
    method it does not allow."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.message = kind, message


class StateRefused(BadInput):
    """A well-formed request whose mapped state (or intent, or arguments) the policy refuses."""


class PDP:
    """A policy and its mapping answering the Authorization API.

    Args:
        policy: the loaded policy.
        mapping: how requests map to the policy's action, state, intent and arguments.
        reasons: "full" puts every reason in a denial's `context` (under `zc`, and an English
            `reason_admin`); "none" answers bare decisions, for deployments that must not reveal rules.
        max_page: the most results one search page holds.
    """

    def __init__(self, policy: Any, mapping: Mapping, *, reasons: str = "full",
                 max_page: int = MAX_PAGE) -> None:
        if reasons not in ("full", "none"):
            raise ZcError(f"reasons must be `full` or `none`, got `{reasons}`")
        if not max_page >= 1:
            raise ZcError(f"the page size must be at least 1, got {max_page}")
        self.policy, self.mapping, self.reasons, self.max_page = policy, mapping, reasons, max_page
        self._key = secrets.token_bytes(32)  # signs page tokens: a restart ends every pagination

    # ---- the capabilities ----------------------------------------------------------------------
    @property
    def searches(self) -> dict[str, bool]:
        """Which searches this mapping answers: actions always; resources with the MCP profile or
        a resource directory; subjects with a subject directory."""
        m = self.mapping
        return {"action": True, "resource": m.spec.mcp is not None or bool(m.resources),
                "subject": bool(m.subjects)}

    # ---- one evaluation ------------------------------------------------------------------------
    def _judge(self, q: Query) -> tuple[bool, dict[str, Any]]:
        """(decision, zc's part of the context) for one well-formed evaluation. Raises Denied for a
        name the mapping does not know, BadInput for a state that does not fit the policy."""
        mcp = self.mapping.spec.mcp
        name, rtype = q.action["name"], q.resource["type"]  # the MCP profile reads the request as it is
        try:
            self.mapping.entity("subject", q.subject)  # a subject its directory lacks is denied everything
        except Unknown as exc:
            raise Denied(exc.kind, exc.message) from None
        if mcp is not None and rtype == mcp.server_type:
            if name in mcp.allow:
                return True, {}
            raise Denied("method_denied", f"`{name}` is not among the methods the mapping allows on "
                                          f"the MCP server ({', '.join(mcp.allow) or 'none'})")
        if mcp is not None and rtype == mcp.tool_type:
            if name != mcp.call_action:
                raise Denied("method_denied", f"`{name}` on a tool: only `{mcp.call_action}` is judged")
            tool: str | None = q.resource["id"]
        else:
            tool = None
        try:
            mapped = self._mapped(q)
            action = self.mapping.action_of(tool if tool is not None else self.mapping.action_name(
                mapped.doc))
        except Unknown as exc:
            raise Denied(exc.kind, exc.message) from None
        try:
            verdict = self.policy.check(mapped.state, action, mapped.arguments, mapped.intent)
        except (StateError, ZcError) as exc:
            raise self._bad(mapped, exc) from None
        if verdict.allowed:
            return True, {}
        return False, {"action": action, "reasons": [r.to_dict() for r in verdict.reasons]}

    def _mapped(self, q: Query) -> Mapped:
        doc = q.doc()
        doc["subject"] = self.mapping.entity("subject", q.subject)
        doc["resource"] = self.mapping.entity("resource", q.resource)
        mapped = self.mapping.map(doc, q.where)
        if mapped.intent is not None and not isinstance(mapped.intent, str):
            raise BadInput(f"{mapped.where['#intent']}: expected a string naming an intent of policy "
                           f"`{self.policy.name}`")
        return mapped

    def _bad(self, mapped: Mapped, exc: ZcError) -> StateRefused:
        """A StateError placed at the request value it came from; another ZcError (an unknown
        intent, arguments that are not an object) at the mapped source it names."""
        if isinstance(exc, StateError):
            at = self.mapping.place(mapped, exc.path)
            text = str(exc)
            return StateRefused(at + text[len(exc.path):] if text.startswith(exc.path) else f"{at}: {text}")
        text = str(exc)
        at = mapped.where.get("#intent") if "intent" in text else mapped.where.get("#arguments")
        return StateRefused(f"{at or '$'}: {text}")

    def _answer(self, q: Query) -> dict[str, Any]:
        """One Decision object; an engine failure, or a state the policy refuses, denies (fail closed)."""
        try:
            decision, why = self._judge(q)
        except Denied as exc:
            return self._decision(False, {"kind": exc.kind, "message": exc.message})
        except StateRefused as exc:  # a well-formed request the policy cannot judge: denied (fail closed)
            return self._decision(False, {"kind": "state_refused", "message": exc.message}, 400)
        except BadInput:
            raise
        except Exception as exc:  # noqa: BLE001 - a failing engine denies; it never permits or leaks
            _log.exception("zc pdp: the evaluation failed")
            return self._decision(False, {"kind": "engine_failure",
                                          "message": f"{type(exc).__name__}: {exc}"}, 500)
        return {"decision": True} if decision else self._decision(False, why)

    def _decision(self, decision: bool, why: dict[str, Any], status: int | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"decision": decision}
        if self.reasons == "none":
            return out
        if "reasons" in why:
            messages = [r["message"] for r in why["reasons"]]
        else:
            messages = [why["message"]]
            why = {"reasons": [{"rule": why["kind"], "kind": why["kind"], "message": why["message"]}]}
        out["context"] = {"reason_admin": {"en": "; ".join(messages)},
                          REASONS_KEY: {"policy": self.policy.name, "policy_sha256": self.policy.sha256,
                                        **why}}
        if status is not None:
            out["context"]["error"] = {"status": status, "message": messages[0]}
        return out

    def evaluate(self, body: dict[str, Any]) -> dict[str, Any]:
        """`POST /access/v1/evaluation`."""
        return self._answer(model.evaluation(body))

    def evaluate_many(self, body: dict[str, Any]) -> dict[str, Any]:
        """`POST /access/v1/evaluations`: every entry in order, or up to the first deny / permit."""
        queries, semantic = model.evaluations(body)
        if queries is None:  # no `evaluations`, or an empty array: one evaluation (spec, 7.1)
            return self._ignoring(self.evaluate(body), model.ignored(body, "evaluations"))
        out = []
        for q in queries:
            try:
                d = self._answer(q)
            except BadInput as exc:  # this evaluation's state does not fit: it alone is denied
                d = {"decision": False}
                if self.reasons != "none":
                    d["context"] = {"error": {"status": 400, "message": exc.message}}
            out.append(d)
            if (semantic == "deny_on_first_deny" and not d["decision"]) or \
                    (semantic == "permit_on_first_permit" and d["decision"]):
                break
        return self._ignoring({"evaluations": out}, model.ignored(body, "evaluations"))

    def _ignoring(self, answer: dict[str, Any], ignored: list[str]) -> dict[str, Any]:
        """The answer with `context.zc.ignored`: the request members zc ignored, when there are any."""
        if ignored:
            context = answer.setdefault("context", {})
            context[REASONS_KEY] = {**context.get(REASONS_KEY, {}), "ignored": ignored}
        return answer

    # ---- searches ------------------------------------------------------------------------------
    def search_action(self, body: dict[str, Any]) -> dict[str, Any]:
        """`POST /access/v1/search/action`: the legal set, from one `Policy.legal` call."""
        return self._ignoring(self._search_action(body), model.ignored(body, "search_action"))

    def _search_action(self, body: dict[str, Any]) -> dict[str, Any]:
        q, page = model.search(body, "action")
        mcp = self.mapping.spec.mcp
        rtype = q.resource["type"]
        if mcp is not None and rtype == mcp.server_type:  # the methods allowed, as evaluation judges them
            return self._page(body, page, [{"name": n} for n in mcp.allow if self._permits(
                Query(q.subject, {"name": n}, q.resource, q.context, q.where), "action")])
        legal, why = self._legal(q)
        if mcp is not None and rtype == mcp.tool_type:
            tool = self.mapping.actions.get(q.resource["id"])
            return self._page(body, page, [{"name": mcp.call_action}] if tool in legal else [], why)
        return self._page(body, page, [{"name": n} for n in self._names(legal)], why)

    def _names(self, actions: list[str]) -> list[str]:
        """The AuthZEN names of policy actions (each its first in the mapping), unexposed ones left out."""
        return [self.mapping.names[a] for a in actions if a in self.mapping.names]

    def _legal(self, q: Query) -> tuple[list[str], dict[str, Any]]:
        """(the legal policy actions in the policy's order, zc's context part)."""
        try:
            mapped = self._mapped(q)
        except Unknown as exc:
            return [], {"kind": exc.kind, "message": exc.message}
        try:
            legal = self.policy.legal(mapped.state, mapped.intent)
        except (StateError, ZcError) as exc:  # the request is well formed; the policy cannot judge it
            return [], {"kind": "state_refused", "message": self._bad(mapped, exc).message, "status": 400}
        except Exception as exc:  # noqa: BLE001 - fail closed: nothing is legal
            _log.exception("zc pdp: the legal set failed")
            return [], {"kind": "engine_failure", "message": f"{type(exc).__name__}: {exc}", "status": 500}
        removed = {self.mapping.names[a]: [r.to_dict() for r in rs]
                   for a, rs in legal.removed.items() if a in self.mapping.names}
        return list(legal.actions), {"fallback": legal.fallback, "removed": removed}

    def search_resource(self, body: dict[str, Any]) -> dict[str, Any]:
        """`POST /access/v1/search/resource`: the legal tools (MCP profile, one `Policy.legal`), or
        each resource of the type's directory judged in turn."""
        q, page = model.search(body, "resource")
        mcp, rtype = self.mapping.spec.mcp, q.resource["type"]
        if mcp is not None and rtype == mcp.tool_type:
            if q.action["name"] != mcp.call_action:
                return self._page(body, page, [])
            legal, why = self._legal(q)
            return self._page(body, page, [{"type": rtype, "id": n} for n in self._names(legal)], why)
        directory = self.mapping.resources.get(rtype)
        if directory is None:
            raise BadInput(self._cannot("resource", rtype))
        hits = [{"type": rtype, "id": i} for i in directory
                if self._permits(Query(q.subject, q.action, {"type": rtype, "id": i}, q.context, q.where),
                                 "resource")]
        return self._page(body, page, hits)

    def search_subject(self, body: dict[str, Any]) -> dict[str, Any]:
        """`POST /access/v1/search/subject`: each subject of the type's directory judged in turn."""
        q, page = model.search(body, "subject")
        stype = q.subject["type"]
        directory = self.mapping.subjects.get(stype)
        if directory is None:
            raise BadInput(self._cannot("subject", stype))
        hits = [{"type": stype, "id": i} for i in directory
                if self._permits(Query({"type": stype, "id": i}, q.action, q.resource, q.context, q.where),
                                 "subject")]
        return self._page(body, page, hits)

    def _cannot(self, role: str, typ: str) -> str:
        m = self.mapping
        have = sorted(m.subjects if role == "subject" else m.resources)
        if role == "resource" and m.spec.mcp is not None:
            have.append(m.spec.mcp.tool_type)
        return (f"$.{role}.type: {role} search answers only the types the mapping lists "
                f"({', '.join(f'`{t}`' for t in have) or 'none'}): `{typ}` has no directory in "
                f"`{role}s` of the mapping, and zc cannot enumerate entities it was never told of")

    def _permits(self, q: Query, role: str) -> bool:
        """Whether one candidate of a search (the `role` searched) is permitted. A state problem
        at the candidate (its directory entry) leaves it out; one elsewhere is the request's: 400."""
        try:
            return self._judge(q)[0]
        except Denied:
            return False
        except BadInput as exc:
            if exc.message.startswith(f"$.{role}"):
                return False
            raise
        except Exception:  # noqa: BLE001 - fail closed
            _log.exception("zc pdp: a search evaluation failed")
            return False

    # ---- paging --------------------------------------------------------------------------------
    def _digest(self, body: dict[str, Any]) -> bytes:
        """The query a page token is bound to: the body without `page.token`, canonically encoded."""
        page = dict(body.get("page") or {})
        page.pop("token", None)
        canon = msgspec.json.encode({**body, "page": page, "#policy": self.policy.sha256}, order="sorted")
        return hashlib.sha256(canon).digest()[:16]

    def _token(self, body: dict[str, Any], offset: int) -> str:
        payload = offset.to_bytes(8, "big") + self._digest(body)
        sig = hmac.new(self._key, payload, hashlib.sha256).digest()[:16]
        return base64.urlsafe_b64encode(payload + sig).decode().rstrip("=")

    def _offset(self, body: dict[str, Any], token: str) -> int:
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (ValueError, TypeError):
            raw = b""
        sig = hmac.new(self._key, raw[:24], hashlib.sha256).digest()[:16]
        if len(raw) != 40 or not hmac.compare_digest(raw[24:], sig):
            raise BadInput("$.page.token: not a token this PDP issued (or it was issued before a restart)")
        if raw[8:24] != self._digest(body):
            raise BadInput("$.page.token: the token belongs to another query: every entity and page "
                           "parameter must stay as in the request that returned it")
        return int.from_bytes(raw[:8], "big")

    def _page(self, body: dict[str, Any], page: model.Page, results: list[dict[str, Any]],
              why: dict[str, Any] | None = None) -> dict[str, Any]:
        start = self._offset(body, page.token) if page.token else 0
        size = self.max_page if page.limit is None else min(page.limit, self.max_page)
        chunk = results[start:start + size]
        more = size > 0 and start + size < len(results)
        out: dict[str, Any] = {"page": {"next_token": self._token(body, start + size) if more else "",
                                        "count": len(chunk), "total": len(results)}}
        if why and self.reasons != "none":
            status = why.pop("status", None)
            out["context"] = {REASONS_KEY: {"policy": self.policy.name, "policy_sha256": self.policy.sha256,
                                            **why}}
            if status is not None:
                out["context"]["error"] = {"status": status, "message": why["message"]}
        out["results"] = chunk
        return out
