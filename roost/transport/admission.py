"""Admission of a WebSocket, sans-I/O: what the endpoint learns in, what it must do next out.

:class:`Admission` holds the rules that decide whether a new connection reaches its actor, in the order
``docs/protocol.md`` (*Connection rules*) gives them. It does no I/O and never awaits: it asks for what
it cannot know itself with an action (:data:`Step`) and the endpoint (:mod:`roost.transport.endpoint`)
feeds the answer back as an event:

==========================  ==============================================  ==========================
action                      what the endpoint does                          event it feeds back
==========================  ==============================================  ==========================
:class:`NeedValidate`       ``registry.validate(kind, name)``               :meth:`Admission.validated`
:class:`NeedVerdict`        ``await access.admit(conn, kind, name, …)``     :meth:`Admission.verdict`
:class:`NeedExists`         ``registry.exists(kind, name)``                 :meth:`Admission.exists`
:class:`NeedCreation`       ``access.creation(principal, kind, name, …)``   :meth:`Admission.creation`
:class:`NeedSlot`           ``access.open(principal, kind, name, client)``  :meth:`Admission.slot`
:class:`Refuse`             accept, send ``close.frame``, close             (the end)
:class:`Accept`             accept and hand over to the connection          (the end)
==========================  ==============================================  ==========================

The rules, in this order (the first that fails decides):

1. the address: the path's ``kind`` and ``name`` (one path segment, UTF-8), the query's ``cursor`` and
   ``subscribe``, the size of the request the actor would see
   (:func:`~roost.transport.handshake.connect_request`), then the registry's check of the kind and the
   name → ``bad_address`` / ``unknown_kind``;
2. the access gate's verdict (name, ``Origin``, ``authenticate``, ``authorize(…, "connect")``) → its
   code (``bad_address``, ``origin_refused``, ``unauthenticated``, ``forbidden``);
3. the name within the principal's tenant, checked by the registry again (the length limit is the
   name's own, but a tenant from a custom ``authenticate`` hook may make it invalid) → ``bad_address``;
4. a read-only principal may not create the actor: the registry is asked whether it exists, for
   read-only principals only → ``forbidden``;
5. a connection that would create the actor takes a token from its principal's (anonymous: its
   address's) creation bucket; an actor that exists costs none → ``creation_limited``;
6. a connection slot of the actor and of the principal → ``too_many_connections``;
7. otherwise :class:`Accept`, with everything the connection needs.

Guarantees:

- The rules are applied in the order above, and nothing is asked after a refusal (a refused address
  is never shown to the access gate; a refused verdict never takes a slot).
- Every refusal is a :class:`Refuse` whose ``close`` is :func:`~roost.transport.protocol.refusal` of
  its code: one ``error`` frame, then the failure table's close code.
- :meth:`Admission.connect` never raises, whatever the raw path and query: what does not parse is
  refused ``bad_address``.
- An event that does not answer the pending action raises :class:`AdmissionError` (a bug in the caller,
  never a wrong decision); after :class:`Accept` or :class:`Refuse` no event is accepted.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any, NamedTuple

from roost.actors import InvalidActorAddress, Principal, Request, Subscriptions, UnknownKind
from roost.transport.access import Admitted, Refused
from roost.transport.cloudflare import Dialect, dialect_of
from roost.transport.handshake import RequestTooLarge, connect_request
from roost.transport.protocol import Close, ProtocolError, actor_address, parse_connect_query, refusal

__all__ = [
    "Accept",
    "Admission",
    "AdmissionError",
    "AdmissionState",
    "NeedCreation",
    "NeedExists",
    "NeedSlot",
    "NeedValidate",
    "NeedVerdict",
    "Refuse",
    "Step",
]


class AdmissionError(RuntimeError):
    """An event fed to :class:`Admission` that does not answer the action it is waiting on."""


class NeedValidate(NamedTuple):
    """Check ``kind`` and ``name`` with the registry (``Registry.validate``) and feed the error it
    raised, or None, to :meth:`Admission.validated`."""

    kind: str
    name: str


class NeedVerdict(NamedTuple):
    """Ask the access gate (``await Access.admit(conn, kind, name, "connect")``) and feed its
    ``Admitted`` or ``Refused`` to :meth:`Admission.verdict`."""

    kind: str
    name: str


class NeedExists(NamedTuple):
    """Ask the registry whether the actor was ever created (``Registry.exists``) and feed the answer to
    :meth:`Admission.exists`. Asked for read-only principals only."""

    kind: str
    name: str  # within the principal's tenant


class NeedCreation(NamedTuple):
    """Ask the access gate whether the connection may create the actor if it does not exist yet
    (``Access.creation(principal, kind, name, client)``) and feed its ``Refused`` or None to
    :meth:`Admission.creation`. Not asked for read-only principals (rule 4 settled it)."""

    principal: Principal
    kind: str
    name: str  # within the principal's tenant


class NeedSlot(NamedTuple):
    """Take a connection slot (``Access.open(principal, kind, name, client)``) and feed whether it was
    free to :meth:`Admission.slot`. Once taken, the endpoint gives it back when the socket ends."""

    principal: Principal
    kind: str
    name: str  # within the principal's tenant


class Refuse(NamedTuple):
    """Refuse the connection: accept the socket, send ``close.frame``, close with ``close.code``."""

    code: str
    message: str

    @property
    def close(self) -> Close:
        """The error frame and close code of ``code`` (:func:`~roost.transport.protocol.refusal`)."""
        return refusal(self.code, self.message)


class Accept(NamedTuple):
    """Admitted: accept the socket and hand it to a connection of ``kind``/``name``."""

    principal: Principal
    kind: str
    #: The name as the client asked for it (what the access gate's per-frame checks see).
    public: str
    #: The name within the principal's tenant (what the registry addresses).
    name: str
    cursor: int | None
    subscriptions: Subscriptions
    #: What the actor sees of the handshake (``conn.request``), credentials left out.
    request: Request = Request()
    #: The wire dialect (:func:`roost.transport.cloudflare.dialect_of`) and the PartySocket id, if any.
    dialect: Dialect = "roost"
    pk: str | None = None


#: What the endpoint does next. ``Refuse`` and ``Accept`` end the admission.
Step = NeedValidate | NeedVerdict | NeedExists | NeedCreation | NeedSlot | Refuse | Accept


class AdmissionState(Enum):
    """Which answer an :class:`Admission` waits for; it only moves forward."""

    #: Nothing yet: :meth:`Admission.connect` comes first.
    START = 0
    #: The registry's check of the address as the client sent it (:class:`NeedValidate`).
    ADDRESS = 1
    #: The access gate's verdict (:class:`NeedVerdict`).
    VERDICT = 2
    #: The registry's check of the name within the tenant (:class:`NeedValidate`).
    TENANT_NAME = 3
    #: Whether the actor exists, for a read-only principal (:class:`NeedExists`).
    EXISTS = 4
    #: Whether it may create the actor (:class:`NeedCreation`).
    CREATION = 5
    #: A connection slot (:class:`NeedSlot`).
    SLOT = 6
    #: Decided: :class:`Accept` or :class:`Refuse` was returned.
    DONE = 7


class Admission:
    """The admission rules of one WebSocket as a state machine without I/O (see the module doc).

    ``connect`` starts it with the request's scope (only its path, routed path parameters and query
    string are read); each later event answers the action returned before it.
    """

    __slots__ = (
        "_admitted",
        "_cursor",
        "_dialect",
        "_kind",
        "_name",
        "_pk",
        "_request",
        "_subscriptions",
        "state",
    )

    def __init__(self) -> None:
        self.state = AdmissionState.START
        self._kind = ""
        self._name = ""  # as the client asked
        self._cursor: int | None = None
        self._subscriptions = Subscriptions()
        self._request = Request()
        self._dialect: Dialect = "roost"
        self._pk: str | None = None
        self._admitted: Admitted | None = None

    def connect(self, scope: Mapping[str, Any]) -> Step:
        """A WebSocket asks to connect: its address (``raw_path`` or ``path``, the router's
        ``path_params``) and its query (``cursor``, ``subscribe``) are parsed, and its request (query
        and headers, credentials left out) is made and bounded."""
        self._expect(AdmissionState.START, "connect")
        try:
            kind, name = actor_address(scope)
            params = parse_connect_query(scope.get("query_string", b""))
            subscriptions = Subscriptions.parse(params.subscribe)
            self._request = connect_request(scope)
        except ProtocolError as exc:
            return self._refuse("bad_address", exc.message)
        except RequestTooLarge as exc:
            return self._refuse("bad_address", str(exc))
        except ValueError as exc:  # the subscribe value
            return self._refuse("bad_address", str(exc))
        self._kind, self._name = kind, name
        self._cursor, self._subscriptions = params.cursor, subscriptions
        self._dialect, self._pk = dialect_of(params.dialect, params.pk, params.cursor), params.pk
        self.state = AdmissionState.ADDRESS
        return NeedValidate(kind, name)

    def validated(self, error: UnknownKind | InvalidActorAddress | None) -> Step:
        """The registry checked the address of the last :class:`NeedValidate`: what it raised, or None."""
        state = self.state
        if state is not AdmissionState.ADDRESS and state is not AdmissionState.TENANT_NAME:
            raise AdmissionError(f"validated() while waiting for {state.name}")
        if isinstance(error, UnknownKind):
            return self._refuse("unknown_kind", str(error))
        if error is not None:
            return self._refuse("bad_address", str(error))
        if state is AdmissionState.ADDRESS:
            self.state = AdmissionState.VERDICT
            return NeedVerdict(self._kind, self._name)
        admitted = self._admitted
        assert admitted is not None
        if admitted.principal.claims.get("read_only"):
            self.state = AdmissionState.EXISTS
            return NeedExists(self._kind, admitted.name)
        self.state = AdmissionState.CREATION
        return NeedCreation(admitted.principal, self._kind, admitted.name)

    def verdict(self, verdict: Admitted | Refused) -> Step:
        """The access gate's verdict on ``"connect"``: refused with its code, or the principal and the
        name within its tenant (which the registry checks next)."""
        self._expect(AdmissionState.VERDICT, "verdict")
        if isinstance(verdict, Refused):
            return self._refuse(verdict.code, verdict.message)
        self._admitted = verdict
        self.state = AdmissionState.TENANT_NAME
        return NeedValidate(self._kind, verdict.name)

    def exists(self, exists: bool) -> Step:
        """Whether the actor a read-only principal connects to was ever created."""
        self._expect(AdmissionState.EXISTS, "exists")
        if not exists:
            return self._refuse("forbidden", "read-only principals cannot create actors")
        assert self._admitted is not None
        return self._need_slot(self._admitted)

    def creation(self, refused: Refused | None) -> Step:
        """The access gate's answer on creating the actor: its refusal (``creation_limited``), or None."""
        self._expect(AdmissionState.CREATION, "creation")
        if refused is not None:
            return self._refuse(refused.code, refused.message)
        assert self._admitted is not None
        return self._need_slot(self._admitted)

    def slot(self, taken: bool) -> Step:
        """Whether a connection slot of the actor and of the principal was free (and is now taken)."""
        self._expect(AdmissionState.SLOT, "slot")
        if not taken:
            return self._refuse("too_many_connections", "too many connections to this actor or principal")
        admitted = self._admitted
        assert admitted is not None
        self.state = AdmissionState.DONE
        return Accept(
            admitted.principal,
            self._kind,
            self._name,
            admitted.name,
            self._cursor,
            self._subscriptions,
            self._request,
            self._dialect,
            self._pk,
        )

    # -- helpers ---------------------------------------------------------------------------------------
    def _need_slot(self, admitted: Admitted) -> NeedSlot:
        self.state = AdmissionState.SLOT
        return NeedSlot(admitted.principal, self._kind, admitted.name)

    def _refuse(self, code: str, message: str) -> Refuse:
        self.state = AdmissionState.DONE
        return Refuse(code, message)

    def _expect(self, state: AdmissionState, event: str) -> None:
        if self.state is not state:
            raise AdmissionError(f"{event}() while waiting for {self.state.name}")
