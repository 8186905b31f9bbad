"""What the app offers the endpoints it routes to: :class:`Runtime`.

The WebSocket endpoint (:mod:`roost.transport.endpoint`) and the HTTP endpoints
(:mod:`roost.transport.http`) need the app's runtime — its registry, access gate, limits and open
sockets — but not the app: :class:`roost.transport.app.RoostApp` builds them and satisfies this
protocol, so the app imports its endpoints and no endpoint imports the app.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from roost.actors import Registry
    from roost.transport.access import Access
    from roost.transport.auth import Authenticate
    from roost.transport.cloudflare import CloudflareCursors
    from roost.transport.sink import SocketSink
    from roost.transport.tracing import Tracing

__all__ = ["Runtime"]


class Runtime(Protocol):
    """The runtime of a serving app, as its endpoints see it (``request.app.state.roost``)."""

    @property
    def registry(self) -> Registry:
        """The live actors."""

    @property
    def authenticate(self) -> Authenticate:
        """Who a request or connection is (``allow_all`` when none was configured)."""

    @property
    def access(self) -> Access:
        """Admission, authorization, origins, rates and connection slots."""

    @property
    def max_frame_bytes(self) -> int:
        """The largest client frame or HTTP body."""

    @property
    def max_in_flight(self) -> int:
        """The calls and messages one connection may have queued at its actor."""

    @property
    def send_queue(self) -> int:
        """The frames that may wait for one slow client."""

    @property
    def send_queue_bytes(self) -> int:
        """The bytes of frames (their size in memory) that may wait for one slow client."""

    @property
    def sinks(self) -> set[SocketSink]:
        """The open sockets' outbound sides: an endpoint adds its socket's on accept and removes it
        when the socket ends; shutdown closes every one with 1001."""

    @property
    def cloudflare_cursors(self) -> CloudflareCursors:
        """Where Cloudflare clients' connections resume (per actor and PartySocket id)."""

    @property
    def metrics(self) -> CollectorRegistry | None:
        """What ``GET /metrics`` exposes (None: metrics are off, the route answers 404)."""

    @property
    def tracing(self) -> Tracing | None:
        """The app's spans (:mod:`roost.transport.tracing`; None: tracing is off)."""

    async def ensure_started(self) -> None:
        """Start the runtime if the lifespan did not (a mounted sub-app). Idempotent."""
