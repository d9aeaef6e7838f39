"""The relying party: discovery, the authorization URL with PKCE, the code exchange, the ID token.

authlib (``AsyncOAuth2Client``) builds the authorization request (``S256`` code challenge) and
exchanges the code (``client_secret_basic``); joserfc checks the ID token's signature against the
provider's JWKS and its ``iss``, ``aud``, ``exp``, ``iat`` and ``nonce``. Discovery
(``<issuer>/.well-known/openid-configuration``) and the JWKS are cached for ``CACHE_SECONDS``
and read again when a token is signed with a key not in the cached set.

Each way a provider can be misconfigured is its own error (``OidcError`` and below, in
``modelyard.errors``) whose message
says what failed and what to check; none of them carries the client secret, a code or a token.

Usage::

    provider = OidcProvider(settings)
    start = await provider.start(redirect_uri)             # redirect the browser to start.url
    claims = await provider.finish(start.pending, code, redirect_uri)
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from authlib.common.security import generate_token
from authlib.integrations.base_client import OAuthError
from authlib.integrations.httpx_client import AsyncOAuth2Client
from fastapi import Request
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from modelyard.errors import (
    IdTokenRefused,
    OidcError,
    ProviderMisconfigured,
    ProviderUnreachable,
    SignInMismatch,
    TokenRefused,
)
from modelyard.server.oidc.settings import OidcSettings

logger = logging.getLogger(__name__)

CACHE_SECONDS = 3600.0
HTTP_TIMEOUT_SECONDS = 10.0
# Clock difference tolerated between the provider and this host for exp, iat.
LEEWAY_SECONDS = 60


@dataclass(frozen=True)
class ProviderMetadata:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    userinfo_endpoint: str | None


@dataclass(frozen=True)
class PendingSignIn:
    """What the browser's sign-in cookie keeps between the redirect and the callback."""

    state: str
    nonce: str
    code_verifier: str
    next_path: str
    started_at: float


@dataclass(frozen=True)
class SignInStart:
    url: str
    pending: PendingSignIn


@dataclass
class OidcProvider:
    settings: OidcSettings
    clock: Callable[[], float] = time.monotonic
    _metadata: ProviderMetadata | None = None
    _metadata_until: float = 0.0
    _keys: KeySet | None = None
    _keys_until: float = 0.0

    @property
    def discovery_url(self) -> str:
        return f"{self.settings.issuer}/.well-known/openid-configuration"

    async def _get_json(self, url: str, what: str) -> dict[str, Any]:
        try:
            async with httpx.AsyncClient(timeout=HTTP_TIMEOUT_SECONDS, trust_env=False) as client:
                response = await client.get(url, headers={"Accept": "application/json"})
        except httpx.HTTPError as error:
            raise ProviderUnreachable(
                f"the OpenID Connect provider's {what} at {url} cannot be reached: "
                f"{type(error).__name__}: {error}",
                hint="check MODELYARD_OIDC_ISSUER and that this server can reach the provider",
            ) from None
        if response.status_code != 200:
            raise ProviderMisconfigured(
                f"the OpenID Connect provider's {what} at {url} answered HTTP {response.status_code}",
                hint="check MODELYARD_OIDC_ISSUER: it must be the issuer itself, without "
                "/.well-known/openid-configuration",
            )
        try:
            document = response.json()
        except ValueError:
            document = None
        if not isinstance(document, dict):
            raise ProviderMisconfigured(
                f"the OpenID Connect provider's {what} at {url} is not a JSON object",
                hint="check MODELYARD_OIDC_ISSUER",
            )
        return document

    async def metadata(self) -> ProviderMetadata:
        """The provider's discovery document (cached), checked for what the code flow needs."""
        if self._metadata is not None and self.clock() < self._metadata_until:
            return self._metadata
        document = await self._get_json(self.discovery_url, "discovery document")
        missing = [
            name
            for name in ("issuer", "authorization_endpoint", "token_endpoint", "jwks_uri")
            if not isinstance(document.get(name), str)
        ]
        if missing:
            raise ProviderMisconfigured(
                f"the discovery document at {self.discovery_url} lacks {', '.join(missing)}",
                hint="the provider must support the authorization code flow",
            )
        if document["issuer"].rstrip("/") != self.settings.issuer:
            raise ProviderMisconfigured(
                f"the discovery document names the issuer {document['issuer']!r}, "
                f"not MODELYARD_OIDC_ISSUER={self.settings.issuer!r}",
                hint="set MODELYARD_OIDC_ISSUER to the issuer exactly as the provider names it",
            )
        userinfo = document.get("userinfo_endpoint")
        self._metadata = ProviderMetadata(
            issuer=document["issuer"],
            authorization_endpoint=document["authorization_endpoint"],
            token_endpoint=document["token_endpoint"],
            jwks_uri=document["jwks_uri"],
            userinfo_endpoint=userinfo if isinstance(userinfo, str) else None,
        )
        self._metadata_until = self.clock() + CACHE_SECONDS
        return self._metadata

    async def _key_set(self, metadata: ProviderMetadata, *, fresh: bool) -> KeySet:
        if self._keys is not None and not fresh and self.clock() < self._keys_until:
            return self._keys
        document = await self._get_json(metadata.jwks_uri, "key set (JWKS)")
        try:
            keys = KeySet.import_key_set(document)  # type: ignore[arg-type]
        except (JoseError, ValueError, KeyError, TypeError) as error:
            raise ProviderMisconfigured(
                f"the provider's key set at {metadata.jwks_uri} cannot be read: {error}",
                hint="the provider must publish its signing keys as a JWKS",
            ) from None
        self._keys, self._keys_until = keys, self.clock() + CACHE_SECONDS
        return keys

    def _client(self, redirect_uri: str) -> AsyncOAuth2Client:
        return AsyncOAuth2Client(
            client_id=self.settings.client_id,
            client_secret=self.settings.client_secret,
            scope=" ".join(self.settings.scopes),
            redirect_uri=redirect_uri,
            code_challenge_method="S256",
            timeout=HTTP_TIMEOUT_SECONDS,
            trust_env=False,
        )

    async def start(self, redirect_uri: str, next_path: str = "/") -> SignInStart:
        """Where to send the browser, and what to remember for the callback."""
        metadata = await self.metadata()
        pending = PendingSignIn(
            state=secrets.token_urlsafe(32),
            nonce=secrets.token_urlsafe(32),
            code_verifier=generate_token(64),
            next_path=next_path,
            started_at=time.time(),
        )
        async with self._client(redirect_uri) as client:
            url, _ = client.create_authorization_url(
                metadata.authorization_endpoint,
                state=pending.state,
                code_verifier=pending.code_verifier,
                nonce=pending.nonce,
            )
        return SignInStart(url=url, pending=pending)

    async def finish(self, pending: PendingSignIn, code: str, redirect_uri: str) -> dict[str, Any]:
        """Exchange the code (with the PKCE verifier) and return the ID token's checked claims,
        with the userinfo endpoint's added where the provider has one."""
        metadata = await self.metadata()
        async with self._client(redirect_uri) as client:
            try:
                token = await client.fetch_token(
                    metadata.token_endpoint, code=code, code_verifier=pending.code_verifier
                )
            except OAuthError as error:
                raise self._token_refusal(metadata, error.error, error.description) from None
            except Exception as error:  # authlib's transport (httpx2) errors
                if type(error).__module__.split(".")[0] not in ("httpx", "httpx2"):
                    raise
                raise ProviderUnreachable(
                    f"the provider's token endpoint {metadata.token_endpoint} cannot be reached: "
                    f"{type(error).__name__}",
                    hint="check that this server can reach the provider",
                ) from None
            id_token = token.get("id_token")
            if not isinstance(id_token, str):
                raise IdTokenRefused(
                    "the provider's token answer has no id_token",
                    hint="the client must be allowed the openid scope at the provider",
                )
            claims = await self._checked_claims(metadata, id_token, pending.nonce)
            if metadata.userinfo_endpoint is not None:
                claims = {**await self._userinfo(client, metadata, claims["sub"]), **claims}
        return claims

    def _token_refusal(
        self, metadata: ProviderMetadata, error: str | None, description: str | None
    ) -> OidcError:
        said = f"{error}" + (f": {description}" if description else "")
        if error == "invalid_client":
            return TokenRefused(
                f"the provider refused this server's client credentials ({said})",
                hint="check MODELYARD_OIDC_CLIENT_ID and the client secret "
                "(MODELYARD_OIDC_CLIENT_SECRET_FILE) against the provider's client",
            )
        if error == "invalid_grant":
            return TokenRefused(
                f"the provider refused the sign-in code ({said})",
                hint="the code expired or was used already, or the redirect URL differs: sign in again",
            )
        return TokenRefused(
            f"the provider's token endpoint {metadata.token_endpoint} refused the code ({said})",
            hint="check the client's settings at the provider (redirect URL, allowed grant types)",
        )

    async def _checked_claims(self, metadata: ProviderMetadata, id_token: str, nonce: str) -> dict[str, Any]:
        decoded = None
        for fresh in (False, True):  # a key not in the cached set: read the JWKS again, once
            keys = await self._key_set(metadata, fresh=fresh)
            try:
                decoded = jwt.decode(id_token, keys, algorithms=["RS256", "ES256", "PS256", "EdDSA"])
                break
            except JoseError as error:
                if fresh:
                    raise IdTokenRefused(
                        f"the ID token's signature does not verify with the provider's keys ({error})",
                        hint="the provider must sign ID tokens with an asymmetric key in its JWKS "
                        "(RS256 or ES256)",
                    ) from None
        assert decoded is not None
        claims: dict[str, Any] = dict(decoded.claims)
        registry = jwt.JWTClaimsRegistry(
            leeway=LEEWAY_SECONDS,
            iss={"essential": True, "value": metadata.issuer},
            sub={"essential": True},
            exp={"essential": True},
            iat={"essential": True},
        )
        try:
            registry.validate(claims)
        except JoseError as error:
            raise IdTokenRefused(
                f"the ID token was refused: {error.error}: {error.description or ''}".rstrip(": "),
                hint="check the clocks of this host and the provider, and MODELYARD_OIDC_ISSUER",
            ) from None
        audience = claims.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if self.settings.client_id not in audiences:
            raise IdTokenRefused(
                f"the ID token is for {audience!r}, not for this client ({self.settings.client_id!r})",
                hint="check MODELYARD_OIDC_CLIENT_ID",
            )
        sent = claims.get("nonce")
        if not isinstance(sent, str) or not secrets.compare_digest(sent.encode(), nonce.encode()):
            raise SignInMismatch(
                "the ID token's nonce is not the one this sign-in sent (a replayed or foreign token)",
                hint="sign in again from the sign-in page",
            )
        return claims

    async def _userinfo(
        self, client: AsyncOAuth2Client, metadata: ProviderMetadata, subject: str
    ) -> dict[str, Any]:
        assert metadata.userinfo_endpoint is not None
        try:
            response = await client.get(metadata.userinfo_endpoint)
        except Exception as error:
            if type(error).__module__.split(".")[0] not in ("httpx", "httpx2"):
                raise
            logger.warning("the provider's userinfo endpoint cannot be reached (%s)", type(error).__name__)
            return {}
        try:
            document = response.json() if response.status_code == 200 else None
        except ValueError:
            document = None
        if not isinstance(document, dict) or document.get("sub") != subject:
            logger.warning(
                "the provider's userinfo answer (HTTP %s) is not about the signed-in subject: ignored",
                response.status_code,
            )
            return {}
        return document


def oidc_provider(request: Request) -> OidcProvider | None:
    """The app's relying party (``app.state.oidc_provider``); None without MODELYARD_OIDC_ISSUER."""
    provider = getattr(request.app.state, "oidc_provider", None)
    return provider if isinstance(provider, OidcProvider) else None
