"""The language server over pygls: diagnostics as you type (policies and their `zc test` files),
hover, go-to-definition, completion, formatting. Start it with `zc lsp` (stdio)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from cattrs import transform_error
from cattrs.v import format_exception
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol

from .. import __version__
from ..errors import Diagnostic, ZcError
from ..source import Span
from ..testing import SUFFIXES
from .analysis import KEYWORDS, Analysis, analyse, analyse_suite, lookup

_SEVERITY = {"error": types.DiagnosticSeverity.Error, "warning": types.DiagnosticSeverity.Warning,
             "note": types.DiagnosticSeverity.Information}
_COMPLETION_KIND = {"field": types.CompletionItemKind.Field, "action": types.CompletionItemKind.Function,
                    "argument": types.CompletionItemKind.Variable,
                    "rule": types.CompletionItemKind.Reference, "intent": types.CompletionItemKind.Module,
                    "tier": types.CompletionItemKind.EnumMember, "tag": types.CompletionItemKind.Constant}


# a message whose params failed the schema, answered (a request) or logged (a notification)
_HANDLED = object()


def _problem(exc: BaseException, type_: Any) -> str:
    """cattrs' description of one invalid value, with a validator's own words (`Position.line
    should be in range [0:2147483647], but was -1`) where it gave some."""
    if isinstance(exc, ValueError) and type_ is None and str(exc):
        return str(exc).rstrip(".")
    return format_exception(exc, type_)


def _params_problem(exc: BaseException) -> str:
    """`$.params.path: problem` (the first one), with the protocol's field names (`textDocument`)."""
    first = (transform_error(exc, "$", _problem) or [f"invalid value ({exc})"])[0]
    problem, _, path = first.rpartition(" @ ")
    path = re.sub(r"_([a-z])", lambda m: m.group(1).upper(), path or "$")
    return f"{path}: {problem or first}"


class _Protocol(LanguageServerProtocol):
    """pygls's protocol, answering every request: pygls drops a request whose params fail the
    schema (a negative position) without a response, which leaves the client waiting forever. A
    notification whose params fail it is ignored, with one line in the client's log saying why
    (pygls printed tracebacks on stderr)."""

    def structure_message(self, data: dict[str, Any]) -> Any:
        method = data.get("method") if "jsonrpc" in data and "error" not in data else None
        message_type = self.get_message_type(method) if isinstance(method, str) else None
        if message_type is None:
            return super().structure_message(data)
        try:
            return self._converter.structure(data, message_type)
        except Exception as exc:  # noqa: BLE001 - cattrs raises validation errors and TypeErrors alike
            problem = f"invalid params: {_params_problem(exc)}"
        if "id" in data:
            msg_id = (data["id"] if isinstance(data["id"], (int, str)) and not isinstance(data["id"], bool)
                      else None)
            self._send_response(msg_id, None, JsonRpcInvalidParams(problem).to_response_error())
        else:
            self.notify(types.WINDOW_LOG_MESSAGE, types.LogMessageParams(types.MessageType.Warning,
                                                                         f"{method} ignored: {problem}"))
        return _HANDLED

    def handle_message(self, message: Any) -> None:
        if message is not _HANDLED:
            super().handle_message(message)


class ZcServer(LanguageServer):
    """Keeps one Analysis per open document."""

    def __init__(self) -> None:
        super().__init__("zc", __version__, protocol_cls=_Protocol,
                         text_document_sync_kind=types.TextDocumentSyncKind.Full)
        self.analyses: dict[str, Analysis] = {}


server = ZcServer()


def _path(uri: str) -> str:
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme == "file" else uri


def _range(doc, d: Diagnostic) -> types.Range:
    if d.span is None:
        return types.Range(types.Position(0, 0), types.Position(0, 0))
    return types.Range(doc.client_position_at_offset(d.span.start),
                       doc.client_position_at_offset(max(d.span.end, d.span.start + 1)))


def _refresh(ls: ZcServer, uri: str) -> None:
    doc = ls.workspace.get_text_document(uri)
    if _path(uri).endswith(SUFFIXES):  # a `zc test` file: validated and run as you type
        analysis = analyse_suite(_path(uri), doc.source, ls.analyses.get(uri))
    else:
        analysis = analyse(_path(uri), doc.source, ls.analyses.get(uri))
    ls.analyses[uri] = analysis
    diagnostics = [types.Diagnostic(range=_range(doc, d), message=d.message
                                    + (f"\nhelp: {d.help}" if d.help else ""),
                                    severity=_SEVERITY.get(d.severity), code=d.code, source="zc")
                   for d in analysis.diagnostics]
    ls.text_document_publish_diagnostics(
        types.PublishDiagnosticsParams(uri=uri, version=doc.version, diagnostics=diagnostics))


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: ZcServer, params: types.DidOpenTextDocumentParams) -> None:
    _refresh(ls, params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: ZcServer, params: types.DidChangeTextDocumentParams) -> None:
    _refresh(ls, params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: ZcServer, params: types.DidCloseTextDocumentParams) -> None:
    ls.analyses.pop(params.text_document.uri, None)
    ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=params.text_document.uri,
                                                                        diagnostics=[]))


def _opened(ls: ZcServer, uri: str):
    """The open document at `uri`, or None: a request about a document the client never opened
    gets an empty answer (never the file read from disk, which may not exist)."""
    return ls.workspace.text_documents.get(uri)


def _symbols_at(ls: ZcServer, params):
    doc = _opened(ls, params.text_document.uri)
    if doc is None:
        return None, []
    analysis = ls.analyses.get(params.text_document.uri) or Analysis()
    return doc, lookup(analysis, doc.source, doc.offset_at_position(params.position))


@server.feature(types.TEXT_DOCUMENT_HOVER)
def hover(ls: ZcServer, params: types.HoverParams) -> types.Hover | None:
    _, found = _symbols_at(ls, params)
    if not found:
        return None
    text = "\n\n".join(f"**{s.kind}** `{s.name}`\n```zc\n{s.detail}\n```" for s in found)
    return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text))


@server.feature(types.TEXT_DOCUMENT_DEFINITION)
def definition(ls: ZcServer, params: types.DefinitionParams) -> list[types.Location] | None:
    doc, found = _symbols_at(ls, params)
    locations = [types.Location(uri=_uri(doc, s.span),
                                range=types.Range(_position(doc, s.span.source, s.span.start),
                                                  _position(doc, s.span.source, s.span.end)))
                 for s in found if s.span is not None and s.kind != "tag"]
    return locations or None


def _uri(doc, span: Span) -> str:
    """The document's own URI, or the file a symbol of a test file's policy is declared in."""
    return doc.uri if span.source.path == _path(doc.uri) else Path(span.source.path).resolve().as_uri()


def _position(doc, source, offset: int) -> types.Position:
    """The client's position (in the encoding it negotiated) of a character offset of a source."""
    line, col = source.line_col(offset)
    p = doc.position_codec.position_to_client_units([source.line_text(line)], types.Position(0, col - 1))
    return types.Position(line - 1, p.character)


@server.feature(types.TEXT_DOCUMENT_COMPLETION,
                types.CompletionOptions(trigger_characters=[".", "(", ","]))
def completion(ls: ZcServer, params: types.CompletionParams) -> types.CompletionList:
    analysis = ls.analyses.get(params.text_document.uri) or Analysis()
    kinds = ({"field", "action", "argument", "tag", "tier", "intent"}
             | ({"rule"} if analysis.test_file else set()))
    named: dict[str, list] = {}
    for name, symbols in sorted(analysis.symbols.items()):
        for s in symbols:
            if s.kind == "field" and analysis.test_file:  # a test file nests dotted fields: its keys
                for key in name.split("."):
                    named.setdefault(key, []).append(s)
            elif s.kind in kinds:
                named.setdefault(name, []).append(s)
    items = [types.CompletionItem(label=name, kind=_COMPLETION_KIND[shown[0].kind],  # one item a name
                                  detail="\n".join(dict.fromkeys(s.detail for s in shown)))
             for name, shown in sorted(named.items())]
    if not analysis.test_file:  # a test file is YAML: the policy's keywords are not its words
        items += [types.CompletionItem(label=k, kind=types.CompletionItemKind.Keyword) for k in KEYWORDS]
    return types.CompletionList(is_incomplete=False, items=items)


@server.feature(types.TEXT_DOCUMENT_FORMATTING)
def formatting(ls: ZcServer, params: types.DocumentFormattingParams) -> list[types.TextEdit] | None:
    from ..fmt import format_text

    doc = _opened(ls, params.text_document.uri)
    if doc is None:
        return None
    try:
        new = format_text(doc.source, _path(doc.uri))
    except ZcError:
        return None  # a policy that does not parse is left as it is (its diagnostics say why)
    if new == doc.source:
        return []
    end = doc.client_position_at_offset(len(doc.source))
    return [types.TextEdit(range=types.Range(types.Position(0, 0), end), new_text=new)]


def main() -> None:
    """Serve on stdin/stdout until the client says exit."""
    server.start_io()
