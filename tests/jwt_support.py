"""Test support for identity-provider tokens: signing keys made with ``cryptography`` and published
as JWKs, an identity provider's JWKS endpoint served over HTTP on 127.0.0.1 (a small Starlette app
on :func:`roost.testing.serve`), and JWTs signed by PyJWT or put together by hand."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from roost.testing import serve

ISSUER = "https://idp.example"
AUDIENCE = "roost-api"


@dataclass
class Key:
    """A signing key of the identity provider, and its public half as a JWK."""

    kid: str
    alg: str
    private: Any
    with_alg: bool = True  # publish the JWK's ``alg`` (else the verifier infers it from its type)

    def jwk(self) -> dict[str, Any]:
        public = self.private.public_key()
        if self.alg.startswith("RS"):
            jwk: dict[str, Any] = RSAAlgorithm.to_jwk(public, as_dict=True)
        elif self.alg.startswith("ES"):
            jwk = ECAlgorithm.to_jwk(public, as_dict=True)
        else:
            jwk = OKPAlgorithm.to_jwk(public, as_dict=True)
        jwk.update({"kid": self.kid, "use": "sig"})
        if self.with_alg:
            jwk["alg"] = self.alg
        return jwk

    def sign(self, claims: dict[str, Any], *, alg: str | None = None, kid: str | None = None) -> str:
        headers = {"kid": self.kid if kid is None else kid}
        return jwt.encode(claims, self.private, algorithm=alg or self.alg, headers=headers)

    def public_pem(self) -> bytes:
        return bytes(
            self.private.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )


RSA_1 = Key("rsa-1", "RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048))
RSA_2 = Key("rsa-2", "RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048))
EC_1 = Key("ec-1", "ES256", ec.generate_private_key(ec.SECP256R1()), with_alg=False)
ED_1 = Key("ed-1", "EdDSA", ed25519.Ed25519PrivateKey.generate())
GHOST = Key("ghost", "RS256", RSA_2.private)  # a key the identity provider never published


class IdentityProvider:
    """A JWKS endpoint on 127.0.0.1: the keys it publishes, the requests it had, how it answers."""

    def __init__(self, *keys: Key) -> None:
        self.keys = list(keys)
        self.hits = 0
        self.status = 200
        self.gate: asyncio.Event | None = None  # set: every answer waits for it
        self.url = ""

    async def jwks(self, request: Request) -> JSONResponse:
        self.hits += 1
        if self.gate is not None:
            await self.gate.wait()
        return JSONResponse({"keys": [k.jwk() for k in self.keys]}, status_code=self.status)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[IdentityProvider]:
        async with serve(Starlette(routes=[Route("/jwks.json", self.jwks)])) as addr:
            self.url = f"http://{addr}/jwks.json"
            try:
                yield self
            finally:
                if self.gate is not None:
                    self.gate.set()


#: The kinds :func:`claims` grants unless told otherwise (a JWT without a ``kinds`` claim is refused).
KINDS = ["whoami", "counter"]


def claims(now: float, ttl: float = 600, **extra: Any) -> dict[str, Any]:
    """A JWT's claims from :data:`ISSUER` for :data:`AUDIENCE`, subject ``alice``, issued at ``now``,
    granting :data:`KINDS` (``kinds=`` another list)."""
    return {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "alice",
        "iat": int(now),
        "exp": int(now) + ttl,
        "kinds": KINDS,
        **extra,
    }


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def handmade(header: dict[str, Any], payload: dict[str, Any], sign: Any = None) -> str:
    """A JWT put together by hand: ``sign(signing_input) -> bytes``, or none at all."""
    body = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"
    return f"{body}.{b64(sign(body.encode())) if sign else ''}"
