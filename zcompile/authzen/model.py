"""AuthZEN Authorization API 1.0 requests: the JSON body checked against the information model
(subject, action, resource, context, page, options), every problem a 400 naming its `$.path`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import msgspec

from ..errors import ZcError, json_problem
from ..inputs import decode_json, json_type

SEMANTICS = ("execute_all", "deny_on_first_deny", "permit_on_first_permit")
MAX_EVALUATIONS = 1000  # a longer `evaluations` array is refused (400): one request, bounded work


class BadInput(Exception):
    """A request the PDP refuses with 400: the message starts with the `$.path` at fault."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message, self.status = message, status


class Entity(msgspec.Struct, frozen=True):
    """A Subject or Resource (`id` is optional only where a search omits it). Unknown keys are
    ignored, as the specification requires of receivers."""

    type: str
    id: str | None = None
    properties: dict[str, Any] | None = None


class Action(msgspec.Struct, frozen=True):
    name: str
    properties: dict[str, Any] | None = None


class Page(msgspec.Struct, frozen=True):
    token: str | None = None
    limit: Annotated[int, msgspec.Meta(ge=0)] | None = None
    properties: dict[str, Any] | None = None


class Options(msgspec.Struct, frozen=True):
    evaluations_semantic: str = "execute_all"


@dataclass(frozen=True, slots=True)
class Query:
    """One evaluation (or search) as plain JSON values, with the `$.path` each part came from."""

    subject: dict[str, Any] | None
    action: dict[str, Any] | None
    resource: dict[str, Any] | None
    context: dict[str, Any]
    where: dict[str, str]

    def doc(self) -> dict[str, Any]:
        return {"subject": self.subject, "action": self.action, "resource": self.resource,
                "context": self.context}


def body_object(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object; BadInput otherwise."""
    if not raw.strip():
        raise BadInput("$: the request body is empty, expected a JSON object")
    try:
        body = decode_json(raw, what="the request body")
    except ZcError as exc:
        raise BadInput(f"$: {exc}") from None
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise BadInput(str(json_problem(exc))) from None
    if not isinstance(body, dict):
        raise BadInput(f"$: expected a JSON object, got {json_type(body)}")
    return body


def _convert(value: Any, typ: type, at: str) -> Any:
    try:
        return msgspec.convert(value, typ)
    except msgspec.ValidationError as exc:
        p = json_problem(exc)
        raise BadInput(f"{at}{p.path[1:]}: {p.problem.replace(' | null`', '`')}") from None


def _part(body: dict[str, Any], key: str, at: str, *, need_id: bool = True) -> dict[str, Any]:
    """`body[key]` checked as an entity or action: plain JSON back, with `properties` null as absent."""
    if key not in body or body[key] is None:
        raise BadInput(f"{at}: required field is missing")
    typ = Action if key == "action" else Entity
    got = _convert(body[key], typ, at)
    if typ is Entity and need_id and got.id is None:
        raise BadInput(f"{at}.id: required field is missing")
    out = {"name": got.name} if typ is Action else {"type": got.type, "id": got.id}
    if got.properties is not None:
        out["properties"] = got.properties
    return out


def _context(body: dict[str, Any], at: str) -> dict[str, Any]:
    ctx = body.get("context")
    if ctx is None:
        return {}
    if not isinstance(ctx, dict):
        raise BadInput(f"{at}: expected an object, got {json_type(ctx)}")
    return ctx


def evaluation(body: dict[str, Any], prefix: str = "$") -> Query:
    """A single Access Evaluation request (subject, action, resource required; context optional)."""
    parts = {k: _part(body, k, f"{prefix}.{k}") for k in ("subject", "action", "resource")}
    return Query(parts["subject"], parts["action"], parts["resource"], _context(body, f"{prefix}.context"),
                 {k: f"{prefix}.{k}" for k in ("subject", "action", "resource", "context")})


def evaluations(body: dict[str, Any]) -> tuple[list[Query] | None, str]:
    """The entries of an Access Evaluations request, top-level values as defaults (an entry's key
    replaces the default whole), and the semantic; (None, …) when there is no `evaluations`
    array or it is empty: the request is then a single evaluation."""
    options = body.get("options")
    semantic = "execute_all"
    if options is not None:
        if not isinstance(options, dict):
            raise BadInput(f"$.options: expected an object, got {json_type(options)}")
        semantic = _convert(options, Options, "$.options").evaluations_semantic
        if semantic not in SEMANTICS:
            raise BadInput(f"$.options.evaluations_semantic: expected one of {'|'.join(SEMANTICS)}, "
                           f"got {msgspec.json.encode(semantic).decode()}")
    items = body.get("evaluations")
    if items is None or items == []:
        return None, semantic
    if not isinstance(items, list):
        raise BadInput(f"$.evaluations: expected an array, got {json_type(items)}")
    if len(items) > MAX_EVALUATIONS:
        raise BadInput(f"$.evaluations: {len(items)} evaluations; at most {MAX_EVALUATIONS} in one request")
    out = []
    for i, item in enumerate(items):
        at = f"$.evaluations[{i}]"
        if not isinstance(item, dict):
            raise BadInput(f"{at}: expected an object, got {json_type(item)}")
        merged, where = {}, {}
        for key in ("subject", "action", "resource", "context"):
            if item.get(key) is not None:
                merged[key], where[key] = item[key], f"{at}.{key}"
            elif body.get(key) is not None:
                merged[key], where[key] = body[key], f"$.{key}"
        for key in ("subject", "action", "resource"):
            if key not in merged:
                raise BadInput(f"{at}.{key}: required field is missing (in the evaluation or at the top "
                               "level)")
        parts = {k: _part(merged, k, where[k]) for k in ("subject", "action", "resource")}
        out.append(Query(parts["subject"], parts["action"], parts["resource"],
                         _context(merged, where.get("context", f"{at}.context")),
                         {**where, "context": where.get("context", f"{at}.context")}))
    return out, semantic


def ignored(body: dict[str, Any], endpoint: str) -> list[str]:
    """The `$.paths` of request members zc ignores, as the specification says receivers MUST
    (reported in the answer's `context.zc.ignored`): unknown `options` of an Access Evaluations
    request, and the `action` of an Action Search request (the specification omits it)."""
    out = []
    options = body.get("options")
    if endpoint == "evaluations" and isinstance(options, dict):
        out += [f"$.options.{k}" for k in options if k != "evaluations_semantic"]
    if endpoint == "search_action" and "action" in body:
        out.append("$.action")
    return out


def search(body: dict[str, Any], kind: str) -> tuple[Query, Page]:
    """A Subject, Resource or Action Search request (`kind`): the searched entity needs only its
    `type` (an `id` given is ignored, as the specification says); an action search has no action."""
    subject = _part(body, "subject", "$.subject", need_id=kind != "subject")
    resource = _part(body, "resource", "$.resource", need_id=kind != "resource")
    if kind == "subject":
        subject = {"type": subject["type"]}
    if kind == "resource":
        resource = {"type": resource["type"]}
    action = _part(body, "action", "$.action") if kind != "action" else None
    page = body.get("page")
    if page is not None and not isinstance(page, dict):
        raise BadInput(f"$.page: expected an object, got {json_type(page)}")
    page = _convert(page or {}, Page, "$.page")
    return Query(subject, action, resource, _context(body, "$.context"),
                 {k: f"$.{k}" for k in ("subject", "action", "resource", "context")}), page
