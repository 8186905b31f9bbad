"""The access gate shared by the WebSocket endpoint and the HTTP routes.

Order of checks for a new connection or request (each refusal is logged without credentials):

1. the client's actor name (no NUL: it separates tenants from names) → 4400 / 400;
2. ``Origin`` against the allow-list (browsers only) → 4403 / 403 ``origin_refused``;
3. ``authenticate`` → 4401 / 401 ``unauthenticated``;
4. the name is scoped to the principal's tenant (:func:`~roost.transport.security.scoped_name`);
5. ``authorize(principal, kind, name, action)`` with ``"connect"``, ``"read"`` or ``"call:<method>"``
   → 4403 / 403 ``forbidden``;
6. a connection or call that would create an actor that does not exist yet (live, or dormant with a
   file) takes a token from its principal's creation bucket (:meth:`Access.creation`; anonymous
   clients: their address's; on by default for them only) → 1013 / 429 ``creation_limited``;
7. WebSocket only: connections per actor and per principal → 1013 ``too_many_connections``.

Then per frame (:class:`FrameGate`): token buckets per connection and per principal
(``rate_limited``), read-only principals (only ``@callable(readonly=True)`` methods; no messages;
``forbidden``), and ``authorize`` with ``"call:<method>"`` / ``"message"`` (``forbidden``).

A token sent on an open connection (an ``auth`` frame) is checked as the handshake's was
(:meth:`Access.renew`: steps 3 and 5); the connection's rules decide what follows
(:meth:`roost.transport.protocol.ConnectionProtocol.renewed`), and :meth:`FrameGate.use` puts the new
principal's claims in force for later frames.
Anonymous principals have their own per-address bucket and connection count (IPv6 by /64, an IPv4
address carried in IPv6 as that IPv4 address; behind a reverse proxy, uvicorn's proxy headers give the
client's address), off by default; their creations also count per IPv6 /48 and all together.
"""

from __future__ import annotations

import inspect
import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from starlette.requests import HTTPConnection

from roost.actors import ANONYMOUS, Principal, Registry
from roost.transport.auth import Authenticate, run_authenticate
from roost.transport.limits import BucketTable, Counter, Limits, TokenBucket
from roost.transport.security import Authorize, check_client_name, origin_allowed, scoped_name

__all__ = ["Access", "Admitted", "FrameGate", "Refused"]

log = logging.getLogger("roost.access")


@dataclass(frozen=True, slots=True)
class Admitted:
    principal: Principal
    name: str  # the actor's name within the principal's tenant (what the registry addresses)


@dataclass(frozen=True, slots=True)
class Refused:
    code: str  # bad_address | origin_refused | unauthenticated | forbidden | too_many_connections | …
    message: str
    #: Whole seconds after which the same request may succeed (``creation_limited``), else None.
    retry_after: int | None = None


def _anonymous(principal: Principal) -> bool:
    return principal is ANONYMOUS or (principal.id == ANONYMOUS.id and principal.tenant is None)


def address_key(client: str | None) -> object | None:
    """The key one anonymous client's address is counted under (the per-address limits and the
    transport's socket share). Anonymous clients are told apart by address: IPv4 by address, IPv6 by
    its /64 (one host's usual share). An IPv4 address carried in an IPv6 one is keyed as that IPv4
    address: IPv4-mapped ``::ffff:a.b.c.d`` (what a dual-stack socket or proxy reports for an IPv4
    client), IPv4-compatible ``::a.b.c.d`` and 6to4 ``2002:aabb:ccdd::/48`` (otherwise every such
    client would share ``::/64`` or one /64 of its 6to4 site)."""
    if not client:
        return None
    ip = _ip(client)
    if ip is None:
        return ("addr", client)
    if ip.version == 6:
        return ("ip6", str(ipaddress.ip_network(f"{ip}/64", strict=False)))
    return ("ip", str(ip))


def _ip(client: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``client`` as an address, an IPv4 address carried in IPv6 as IPv4; None if it is not one."""
    try:
        ip = ipaddress.ip_address(client)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address):
        inner = ip.ipv4_mapped or ip.sixtofour
        if inner is None and int(ip) >> 32 == 0 and int(ip) > 1:  # ::a.b.c.d (not :: or ::1)
            inner = ipaddress.IPv4Address(int(ip))
        if inner is not None:
            return inner
    return ip


def _network(client: str | None) -> object | None:
    """The wider network an anonymous client's address belongs to for creations: its IPv6 /48 (None
    for IPv4 and for what is not an address)."""
    ip = _ip(client) if client else None
    if ip is None or ip.version == 4:
        return None
    return ("net6", str(ipaddress.ip_network(f"{ip}/48", strict=False)))


def limit_key(principal: Principal, client: str | None = None) -> object | None:
    """The key per-principal limits count under: the principal, or for anonymous clients their
    address (None when it is unknown)."""
    if _anonymous(principal):
        return address_key(client)
    return (principal.tenant, principal.id)


class Access:
    def __init__(
        self,
        registry: Registry,
        authenticate: Authenticate,
        authorize: Authorize | None,
        origins: Iterable[str] | None,
        limits: Limits,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.authenticate = authenticate
        self.authorize = authorize
        self.origins = frozenset(origins) if origins is not None else None
        self.limits = limits
        self.clock = clock
        self.per_actor = Counter(limits.conns_per_actor)
        self.per_principal = Counter(limits.conns_per_principal)
        self.per_address = Counter(limits.conns_per_address)
        self._principal_buckets: dict[object, TokenBucket] = {}
        #: Refused connections and requests by code (:meth:`admit`), and frames and requests refused
        #: ``rate_limited`` (:meth:`FrameGate.rate`, HTTP): read by ``/metrics``, counted on refusal only.
        self.refused: dict[str, int] = {}
        self.limited = 0
        size = limits.creation_buckets
        self.anonymous_creations = (
            BucketTable(limits.anonymous_creation_rate, limits.anonymous_creation_burst, size, clock)
            if limits.anonymous_creation_rate is not None
            else None
        )
        self.principal_creations = (
            BucketTable(limits.creation_rate, limits.creation_burst, size, clock)
            if limits.creation_rate is not None
            else None
        )
        self.network_creations = (
            BucketTable(
                limits.anonymous_network_creation_rate, limits.anonymous_network_creation_burst, size, clock
            )
            if limits.anonymous_network_creation_rate is not None
            else None
        )
        self.total_creations = (
            TokenBucket(limits.anonymous_total_creation_rate, limits.anonymous_total_creation_burst, clock)
            if limits.anonymous_total_creation_rate is not None
            else None
        )

    async def admit(self, conn: HTTPConnection, kind: str, name: str, action: str) -> Admitted | Refused:
        """Admit a connection or request (the module doc's order of checks); a refusal is counted in
        :attr:`refused` by its code (``/metrics``)."""
        verdict = await self._admit(conn, kind, name, action)
        if isinstance(verdict, Refused):
            self.refused[verdict.code] = self.refused.get(verdict.code, 0) + 1
        return verdict

    async def _admit(self, conn: HTTPConnection, kind: str, name: str, action: str) -> Admitted | Refused:
        where = f"{kind}/{name!r}"
        client = conn.client.host if conn.client else "?"
        try:
            check_client_name(name)
        except ValueError as exc:
            return Refused("bad_address", str(exc))
        if not origin_allowed(conn, self.origins):
            log.warning(
                "refused %s from %s: origin %r not allowed", where, client, conn.headers.get("origin")
            )
            return Refused("origin_refused", "origin not allowed")
        principal = await run_authenticate(self.authenticate, conn)
        if principal is None:
            return Refused("unauthenticated", "not authenticated")
        if not await self.allowed(principal, kind, name, action):
            log.warning(
                "refused %s %s for %r (tenant %r) from %s",
                action,
                where,
                principal.id,
                principal.tenant,
                client,
            )
            return Refused("forbidden", f"{action} on {kind}/{name} is not allowed")
        return Admitted(principal, scoped_name(principal, name))

    async def renew(self, conn: HTTPConnection, token: str, kind: str, name: str) -> Principal | Refused:
        """Verify a token sent on the open connection ``conn`` to ``kind``/``name`` (the name as the
        client asked for it) exactly as a handshake's token: ``authenticate`` is asked with the
        handshake's request carrying this token instead of its own (in ``scope["roost.token"]``, where
        a ``?token=`` is found; the ``Authorization`` header and ``roost.token.`` subprotocol offers
        are left out, so that the old token cannot answer for the new one), then
        ``authorize(principal, kind, name, "connect")``. The principal, or the refusal:
        ``unauthenticated`` or ``forbidden``. Whether it may replace the connection's principal is the
        connection's rule (:meth:`~roost.transport.protocol.ConnectionProtocol.renewed`)."""
        principal = await run_authenticate(self.authenticate, HTTPConnection(_renewal_scope(conn, token)))
        if principal is None:
            return Refused("unauthenticated", "the renewal's token was refused")
        if not await self.allowed(principal, kind, name, "connect"):
            client = conn.client.host if conn.client else "?"
            log.warning(
                "refused the renewal on %s/%r for %r (tenant %r) from %s",
                kind,
                name,
                principal.id,
                principal.tenant,
                client,
            )
            return Refused("forbidden", f"connect on {kind}/{name} is not allowed with this token")
        return principal

    async def allowed(self, principal: Principal, kind: str, name: str, action: str) -> bool:
        if self.authorize is None:
            return True
        verdict = self.authorize(principal, kind, name, action)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        return bool(verdict)

    # -- connection counts ----------------------------------------------------------------------------
    def open(self, principal: Principal, kind: str, name: str, client: str | None = None) -> bool:
        """Take a connection slot of the actor and of the principal (for anonymous clients: of their
        address); False if either is full."""
        if not self.per_actor.acquire((kind, name)):
            self._full()
            return False
        who = limit_key(principal, client)
        counter = self.per_address if _anonymous(principal) else self.per_principal
        if who is not None and not counter.acquire(who):
            self.per_actor.release((kind, name))
            self._full()
            return False
        return True

    def _full(self) -> None:
        self.refused["too_many_connections"] = self.refused.get("too_many_connections", 0) + 1

    def close(self, principal: Principal, kind: str, name: str, client: str | None = None) -> None:
        self.per_actor.release((kind, name))
        who = limit_key(principal, client)
        if who is not None:
            (self.per_address if _anonymous(principal) else self.per_principal).release(who)

    # -- creations ------------------------------------------------------------------------------------
    def creation(
        self, principal: Principal, kind: str, name: str, client: str | None = None
    ) -> Refused | None:
        """May ``principal`` (from ``client``) create ``kind``/``name`` (the name within its tenant)?

        Only a request that would create the actor counts: an actor that exists (live, or dormant with
        a file) is never refused here, and costs no token. Otherwise one token is taken from the
        principal's creation bucket; an anonymous client's from three at once: its address's (IPv4
        by address, IPv6 by /64), its network's (IPv6 by /48, so that many /64s of one site do not
        each bring a burst) and the one of all anonymous creations (the bound no number of addresses
        multiplies). A token is taken from each or from none: without one in every bucket the
        refusal is ``creation_limited`` with the whole seconds until the last of them has one. No
        bucket (the rates are off, or an anonymous client's address is unknown): always allowed."""
        buckets = self._creation_buckets(principal, client)
        if not buckets or self.registry.exists(kind, name):
            return None
        now = self.clock()
        wait = max(bucket.wait(now) for bucket in buckets)
        if wait == 0:
            for bucket in buckets:
                bucket.take(now)
            return None
        log.debug(  # not a warning: a flood of refusals must not become a flood of log lines
            "refused to create %s/%r for %r from %s: creation rate exceeded",
            kind,
            name,
            principal.id,
            client or "?",
        )
        return Refused(
            "creation_limited", f"too many new actors for this client; retry in {wait} s", retry_after=wait
        )

    def _creation_buckets(self, principal: Principal, client: str | None) -> list[TokenBucket]:
        """The creation buckets a new actor of ``principal`` from ``client`` takes a token from."""
        who = limit_key(principal, client)
        if not _anonymous(principal):
            table = self.principal_creations
            return [table.get(who)] if table is not None and who is not None else []
        if self.anonymous_creations is None or who is None:  # the per-address rate off: none apply
            return []
        buckets = [self.anonymous_creations.get(who)]
        network = _network(client)
        if network is not None and self.network_creations is not None:
            buckets.append(self.network_creations.get(network))
        if self.total_creations is not None:
            buckets.append(self.total_creations)
        return buckets

    # -- rates ----------------------------------------------------------------------------------------
    def principal_bucket(self, principal: Principal, client: str | None = None) -> TokenBucket | None:
        """The rate shared by a principal's connections and requests (anonymous: by address)."""
        who = limit_key(principal, client)
        limits = self.limits
        rate, burst = (
            (limits.anonymous_rate, limits.anonymous_burst)
            if _anonymous(principal)
            else (limits.principal_rate, limits.principal_burst)
        )
        if who is None or rate is None:
            return None
        bucket = self._principal_buckets.get(who)
        if bucket is None:
            if len(self._principal_buckets) > 100_000:  # bounded: forget the oldest
                del self._principal_buckets[next(iter(self._principal_buckets))]
            bucket = TokenBucket(rate, burst, self.clock)
            self._principal_buckets[who] = bucket
        return bucket

    def frame_gate(self, principal: Principal, kind: str, name: str, client: str | None = None) -> FrameGate:
        limits = self.limits
        conn_bucket = (
            TokenBucket(limits.conn_rate, limits.conn_burst, self.clock)
            if limits.conn_rate is not None
            else None
        )
        return FrameGate(self, principal, kind, name, conn_bucket, self.principal_bucket(principal, client))


def _renewal_scope(conn: HTTPConnection, token: str) -> dict[str, Any]:
    """The handshake's scope with ``token`` as its only token (see :meth:`Access.renew`)."""
    headers = []
    for key, value in conn.scope.get("headers", ()):
        if key == b"authorization":
            continue
        if key == b"sec-websocket-protocol":
            offers = [p.strip() for p in value.split(b",")]
            value = b", ".join(p for p in offers if p and not p.startswith(b"roost.token."))
            if not value:
                continue
        headers.append((key, value))
    return {**conn.scope, "headers": headers, "roost.token": token, "roost.token_from": "auth frame"}


class FrameGate:
    """Per-connection checks of calls and messages (see the module doc)."""

    __slots__ = ("access", "conn_bucket", "kind", "name", "principal", "principal_bucket", "read_only")

    def __init__(
        self,
        access: Access,
        principal: Principal,
        kind: str,
        name: str,
        conn_bucket: TokenBucket | None,
        principal_bucket: TokenBucket | None,
    ) -> None:
        self.access = access
        self.principal = principal
        self.kind = kind
        self.name = name  # as the client named it (authorize sees names within the tenant)
        self.conn_bucket = conn_bucket
        self.principal_bucket = principal_bucket
        self.read_only = bool(principal.claims.get("read_only"))

    def use(self, principal: Principal) -> None:
        """Judge later frames by ``principal``'s claims (a renewal of the same subject and tenant, so
        the rate shared by the principal's connections stays the same)."""
        self.principal = principal
        self.read_only = bool(principal.claims.get("read_only"))

    def rate(self, now: float) -> Refused | None:
        """Take a token at ``now`` (a reading of the access clock) from the connection's and then the
        principal's bucket; the refusal when either is empty."""
        if self.conn_bucket is not None and not self.conn_bucket.take(now):
            self.access.limited += 1
            return Refused("rate_limited", "too many frames per second on this connection")
        if self.principal_bucket is not None and not self.principal_bucket.take(now):
            self.access.limited += 1
            return Refused("rate_limited", "too many frames per second for this principal")
        return None

    def call(self, method: str) -> Refused | Awaitable[Refused | None] | None:
        """May this connection call ``method``? (Unknown methods pass: the actor answers them.)"""
        if self.read_only:
            info = self.access.registry.callable_info(self.kind, method)
            if info is not None and not info.readonly:
                return Refused("forbidden", f"read-only: {method} is not a read-only method")
        return self._authorize(f"call:{method}")

    def message(self) -> Refused | Awaitable[Refused | None] | None:
        if self.read_only:
            return Refused("forbidden", "read-only connections cannot send messages")
        return self._authorize("message")

    def _authorize(self, action: str) -> Refused | Awaitable[Refused | None] | None:
        hook = self.access.authorize
        if hook is None:
            return None
        verdict = hook(self.principal, self.kind, self.name, action)
        if inspect.isawaitable(verdict):
            return self._later(verdict, action)
        return None if verdict else Refused("forbidden", f"{action} is not allowed")

    async def _later(self, verdict: Awaitable[bool], action: str) -> Refused | None:
        return None if await verdict else Refused("forbidden", f"{action} is not allowed")
