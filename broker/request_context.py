"""One request as a handler sees it, and what a handler may answer besides a response.

Owns :class:`RequestContext` (the request's header, its connection's listener, security
protocol, client address and principal, and the broker's services) and the two non-response outcomes a handler can
produce: :data:`NO_RESPONSE` (the client expects no answer) and :class:`CloseConnection`.
The connection is seen through :class:`ConnectionInfo` only, so handlers never depend on the
network layer (``broker/server.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from protocol.errors import ErrorCode, KafkaError

from .quotas import FETCH, MUTATION, REQUEST, RequestTime, ThrottlingQuotaExceeded, user_name

if TYPE_CHECKING:
    from protocol import codec
    from security.sasl import SaslServerAuthenticator

    from .services import BrokerServices


class NoResponse:
    """Returned by a handler when the client expects no answer (Produce with acks=0)."""


NO_RESPONSE = NoResponse()


class CloseConnection(Exception):
    """Raised by a handler when Kafka would close the connection (e.g. acks=0 errors)."""


class ConnectionInfo(Protocol):
    """What a request may know of the connection it arrived on."""

    client_host: str
    listener: str | None
    security_protocol: str
    principal: str            # ``User:<name>``; ``User:ANONYMOUS`` where nobody authenticates
    session_expiry: float | None  # time.monotonic() when the authenticated session ends (None: never)
    sasl: SaslServerAuthenticator | None  # the SASL exchange of a SASL_* listener's connection

    def authenticated(self, principal: str, session_lifetime_ms: int, reauthenticated: bool) -> None:
        """The SASL exchange completed: ``principal`` is the caller from now on, for
        ``session_lifetime_ms`` (0: no expiry)."""

    def authentication_failed(self, reason: str) -> None:
        """The SASL exchange failed: the connection closes once the answer is sent."""

    def throttle(self, ms: int) -> None:
        """Read no further request for ``ms`` after this one's answer (KIP-219's mute)."""


class RequestContext:
    """One request: its header, its connection and what a handler may use (``services``)."""
    __slots__ = ("services", "header", "connection", "api_version", "request_time")

    def __init__(self, services: BrokerServices, header: codec.RequestHeader, connection: ConnectionInfo,
                 request_time: RequestTime | None = None):
        self.services = services
        self.header = header
        self.connection = connection
        self.api_version = header.api_version
        # Set when a request_percentage quota applies to the caller and the request is not exempt.
        self.request_time = request_time

    def throttle_time_ms(self, kind: str, size: int) -> int:
        """Count ``size`` bytes against the caller's ``kind`` quota (broker.quotas); a positive
        answer is the throttle time, and the connection is muted for it. A fetch throttled
        for its bytes is exempt from the request quota, as in Kafka."""
        ms = self.services.quotas[kind].record(user_name(self.principal), self.header.client_id or "", size)
        self.throttle(kind, ms)
        if ms and kind == FETCH:
            self.request_time = None
        return ms

    def request_throttle_ms(self) -> int:
        """Count the request's time so far against the caller's ``request_percentage`` (once;
        later time is counted by the connection, unthrottled); the throttle time in ms."""
        timer = self.request_time
        if timer is None or timer.throttled:
            return 0
        timer.throttled = True
        ms = self.services.quotas[REQUEST].record(user_name(self.principal), self.header.client_id or "",
                                                  timer.take() * 100)
        self.throttle(REQUEST, ms)
        return ms

    def throttle(self, kind: str, ms: int) -> None:
        """Mute the connection for ``ms`` after this answer (KIP-219), counted under ``kind``."""
        if ms > 0:
            self.connection.throttle(ms)
            self.services.metrics.quota_throttle_time.labels(kind).inc(ms)

    def mutation_quota(self, strict_since: int) -> MutationQuota:
        """The caller's ``controller_mutation_rate`` for this request: strict (refusing) from
        API version ``strict_since`` on, as Kafka's ControllerMutationQuotaManager.newQuotaFor."""
        return MutationQuota(self, self.api_version >= strict_since)

    @property
    def principal(self) -> str:
        """The caller as the authorizer sees it: the connection's authenticated principal."""
        return self.connection.principal

    @property
    def client_host(self) -> str:
        """The client's address as Kafka's authorizer sees it (``InetAddress.getHostAddress``)."""
        return self.connection.client_host

    @property
    def listener(self) -> str | None:
        """The name of the listener the request arrived on (None: not from a listener)."""
        return getattr(self.connection, "listener", None)


class MutationQuota:
    """Partitions created or deleted by one request, counted against the caller's
    ``controller_mutation_rate`` (broker.quotas)."""

    def __init__(self, ctx: RequestContext, strict: bool) -> None:
        self.ctx, self.strict = ctx, strict
        self.throttle_ms = 0

    def record(self, partitions: int) -> None:
        """Count ``partitions`` before changing them; strict and out of credit, raise the
        topic's THROTTLING_QUOTA_EXCEEDED instead."""
        ctx = self.ctx
        manager = ctx.services.quotas[MUTATION]
        if not manager.quotas():  # no quota stored at all: nothing to count
            return
        try:
            ms = manager.record(user_name(ctx.principal), ctx.header.client_id or "", partitions, self.strict)
        except ThrottlingQuotaExceeded as exc:
            self.throttle_ms = max(self.throttle_ms, exc.throttle_ms)
            raise KafkaError(ErrorCode.throttling_quota_exceeded, None) from None  # Kafka sends no message
        if not self.strict:
            self.throttle_ms = max(self.throttle_ms, ms)

    def finish(self) -> int:
        """The response's ``throttle_time_ms``; the connection is muted that long (KIP-219)."""
        self.ctx.throttle(MUTATION, self.throttle_ms)
        return self.throttle_ms
