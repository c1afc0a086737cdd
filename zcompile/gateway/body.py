"""Request bodies read with bounds: refused (413) past a limit without reading the rest, and gzip
or deflate inflated to that limit (a bomb is 413, other encodings 415)."""

from __future__ import annotations

import zlib

from starlette.requests import Request

from .request import BadRequest


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused (413) past `limit` bytes without reading the rest."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BadRequest(413, f"the request body is {declared} bytes; the limit is {limit}",
                         code="body_too_large")
    parts, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BadRequest(413, f"the request body exceeds the limit of {limit} bytes",
                             code="body_too_large")
        parts.append(chunk)
    return decoded(b"".join(parts), request.headers.get("content-encoding", "identity"), limit)


def decoded(body: bytes, encoding: str, limit: int) -> bytes:
    """The body as sent, or decompressed (gzip, deflate) to at most `limit` bytes: 413 past it (a
    small body may inflate to gigabytes), 400 when it is not what its encoding says, 415 for others."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "deflate"):
        raise BadRequest(415, f"Content-Encoding `{encoding}` is not supported (gzip, deflate or none)",
                         code="unsupported_encoding")
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS)
    try:
        out = inflate.decompress(body, limit + 1)
    except zlib.error as exc:
        raise BadRequest(400, f"the request body is not valid {encoding}: {exc}",
                         code="invalid_request") from None
    if len(out) > limit or inflate.unconsumed_tail:
        raise BadRequest(413, f"the request body inflates past the limit of {limit} bytes",
                         code="body_too_large")
    if not inflate.eof:
        raise BadRequest(400, f"the request body is not valid {encoding}: it ends early",
                         code="invalid_request")
    return out
