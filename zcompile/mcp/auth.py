"""The HTTP door as an OAuth 2.1 resource server: JWT access tokens checked for issuer, audience and
expiry."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import jwt
import msgspec
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings

from ..errors import ZcError
from ..inputs import decode_json, read_file

_log = logging.getLogger("zcompile.mcp")
ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "PS256", "EdDSA")  # asymmetric only


class JwtVerifier:
    """Verifies bearer JWTs against a JWKS (a file read once, or the issuer's URL): signature,
    `iss`, `aud` (this resource's URL: RFC 8707), `exp`. The token itself never leaves the gateway:
    servers are called with the gateway's own connections, and receipts key by its principal only."""

    def __init__(self, *, issuer: str, resource: str, jwks: str) -> None:
        self.issuer, self.resource = issuer, resource
        if jwks.startswith(("https://", "http://")):
            self._client: Any = jwt.PyJWKClient(jwks, cache_keys=True)
            self._keys = None
        else:
            try:
                self._keys = jwt.PyJWKSet.from_dict(decode_json(read_file(Path(jwks), "JWKS file"),
                                                                what=jwks))
            except (ValueError, msgspec.DecodeError, jwt.PyJWTError) as exc:
                raise ZcError(f"{jwks}: not a JWKS (a JSON object with `keys`): {exc}") from None
            self._client = None

    def _key(self, token: str) -> Any:
        if self._client is not None:
            return self._client.get_signing_key_from_jwt(token).key
        kid = jwt.get_unverified_header(token).get("kid")
        for k in self._keys.keys:
            if kid is None or k.key_id == kid:
                return k.key
        raise jwt.InvalidKeyError(f"no key `{kid}` in the JWKS")

    async def verify_token(self, token: str) -> AccessToken | None:
        """The token's principal and scopes when it is valid for this resource, else None (401)."""
        try:
            claims = jwt.decode(token, self._key(token), algorithms=list(ALGORITHMS), audience=self.resource,
                                issuer=self.issuer, options={"require": ["exp", "iss", "aud"]})
        except (jwt.PyJWTError, ValueError) as exc:
            _log.info("bearer token refused: %s", exc)
            return None
        scope = claims.get("scope", "")
        client_id = claims.get("client_id") or claims.get("azp") or claims.get("sub") or ""
        return AccessToken(token=token, client_id=str(client_id), scopes=scope.split()
                           if isinstance(scope, str) else [], expires_at=claims.get("exp"),
                           resource=self.resource, subject=claims.get("sub"),
                           claims={"iss": claims.get("iss")})


def resource_server(*, issuer: str, resource: str, jwks: str,
                    scopes: list[str] | None = None) -> tuple[AuthSettings, JwtVerifier]:
    """The SDK's resource-server settings (protected-resource metadata at
    `/.well-known/oauth-protected-resource/<path>`, 401 without a valid token, 403 without the
    scopes) and the verifier behind them."""
    try:
        settings = AuthSettings(issuer_url=issuer, resource_server_url=resource, required_scopes=scopes
                                or None, validate_token_resource=True)
    except ValueError as exc:
        raise ZcError("--auth-issuer / --auth-resource: "
                      f"{exc.errors()[0]['msg'] if hasattr(exc, 'errors') else exc}") from None
    return settings, JwtVerifier(issuer=issuer, resource=resource, jwks=jwks)
