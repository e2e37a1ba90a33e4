"""The network layer: one ``asyncio.BufferedProtocol`` per client connection.

Like Kafka, a connection's requests are processed one at a time, to completion, and answered
in order (an idempotent producer's five in-flight batches must be appended in the order sent;
a long-poll Fetch holds its connection). Read-ahead is bounded: once a few requests are
queued, reading pauses until the queue drains. A request in flight when its client
disconnects still runs to completion and only its answer is dropped, as Kafka's purgatory
does: abandoning it half-way would strand coordinator state (an offset commit left pending
makes every later require_stable OffsetFetch UNSTABLE_OFFSET_COMMIT); queued requests are
dropped. Only a broker shutdown abandons requests in flight.

Bad input is handled as Kafka does: a frame whose size is negative or above
``socket.request.max.bytes``, an unreadable request, an unknown API key, or an unsupported
version of any API but ApiVersions closes the connection; an unsupported ApiVersions version
is answered in the v0 layout with UNSUPPORTED_VERSION.

A TLS listener (:class:`TlsListener`) accepts its sockets itself so that a failed handshake is
logged and counted as a failed authentication, as Kafka's is; the connection starts after it.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import structlog

from protocol import codec
from protocol.api import API_VERSIONS_KEY, REGISTRY
from protocol.errors import InvalidRequest
from security.authenticator import PLAINTEXT, ListenerSecurity
from security.authorizer import java_host_address
from security.principal import ANONYMOUS, NoMatchingRule
from security.sasl import SASL_HANDSHAKE, AuthenticationFailed, IllegalSaslState

from .connection_quotas import ConnectionQuotas, ConnectionRefused
from .quotas import REQUEST, RequestTime, user_name
from .receive_buffer import FrameTooLarge, ReceiveBuffer
from .request_context import NO_RESPONSE, CloseConnection, RequestContext
from .services import BrokerServices

log = structlog.get_logger("broker.server")

MAX_QUEUED_REQUESTS = 8
_SIZE = struct.Struct(">i")
# Cluster actions answered without the request quota (Kafka's sendResponseExemptThrottle).
REQUEST_QUOTA_EXEMPT = frozenset({27, 56})  # WriteTxnMarkers, AlterPartition
PRODUCE_KEY, FETCH_KEY = 0, 1


def _exempt_body(api_key: int, body) -> bool:
    """A follower's fetch and an acks=0 produce are exempt from the request quota, as in Kafka."""
    if api_key == FETCH_KEY:
        state = getattr(body, "replica_state", None)
        replica = state.replica_id if state is not None else getattr(body, "replica_id", -1)
        return replica >= 0
    return api_key == PRODUCE_KEY and body.acks == 0


def _answer_request_throttle(result, ms: int) -> None:
    """Put a request throttle into a response still to be encoded (the larger of it and a
    throttle the handler answered); an encoded one keeps what its handler wrote."""
    if ms and isinstance(result, dict) and "throttle_time" in result:
        result["throttle_time"] = max(result["throttle_time"], ms)


class ConnectionHost(BrokerServices, Protocol):
    """What a connection needs of the broker that accepted it: the services its requests
    get, the set of open connections, and the v0 answer to an unsupported ApiVersions."""

    connections: set[KafkaConnection]
    connection_quotas: ConnectionQuotas

    def unsupported_api_versions_response(self, correlation_id: int) -> tuple[bytes, bytes]: ...


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, broker: ConnectionHost, listener: str | None = None,
                 security: ListenerSecurity = PLAINTEXT) -> None:
        self.broker = broker
        self.listener = listener  # the listener name: answers advertise that listener's endpoints
        self.security = security
        self.principal = ANONYMOUS  # authenticated in connection_made (TLS) or by SASL
        self.session_expiry: float | None = None  # time.monotonic(); set by a SASL login
        self.muted_until = 0.0  # time.monotonic(): a quota's throttle (KIP-219)
        self.sasl = security.sasl_authenticator()  # None unless SASL_PLAINTEXT / SASL_SSL
        self.frames: deque[bytes] = deque()
        self.transport: asyncio.Transport | None = None
        self.worker: asyncio.Task | None = None
        self.wakeup = asyncio.Event()
        self.paused = False
        self.closed = False
        self.peer = None
        self.client_host = ""
        self.admitted = False  # counted by the broker's connection quotas
        self.max_request = broker.config["socket.request.max.bytes"]
        self.received = ReceiveBuffer(self.max_request)

    @property
    def security_protocol(self) -> str:
        return self.security.protocol

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.peer = transport.get_extra_info("peername")
        self.client_host = java_host_address(self.peer[0]) if self.peer else ""
        try:
            self.principal = self.security.authenticate(transport.get_extra_info("ssl_object"))
        except NoMatchingRule as exc:
            log.warning("authentication_failed", listener=self.listener, client=self.client_host, error=str(exc))
            self.broker.metrics.failed_authentication.labels(self.listener or "").inc()
            self.closed = True  # never counted as open
            transport.abort()
            return
        self.broker.connections.add(self)
        self.worker = asyncio.get_running_loop().create_task(self._admit_and_process())

    async def _admit_and_process(self) -> None:
        """Wait for the connection quotas to let the connection in (Kafka's acceptor waits the
        same way), then process its requests; over a limit only this connection goes."""
        quotas = self.broker.connection_quotas
        try:
            await quotas.acquire(self.listener, self.client_host)
        except ConnectionRefused as exc:
            log.info("connection_rejected", listener=self.listener, reason=str(exc))
            self.broker.metrics.connections_rejected.labels(self.listener or "").inc()
            if exc.delay_s:  # a throttled address's connection closes late, so its client slows down
                await asyncio.sleep(exc.delay_s)
            self.transport.abort()
            return
        except asyncio.CancelledError:
            return
        except Exception:  # a fault in the limits must cost this connection only, never hang it
            log.exception("connection_admission_failed", listener=self.listener, address=self.client_host)
            self.transport.abort()
            return
        if self.closed:  # the client left while it waited: give the slot back
            quotas.release(self.listener, self.client_host)
            return
        self.admitted = True
        self.broker.metrics.connections.inc()
        await self._process()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.received.writable(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        try:
            frames = self.received.written(nbytes)
        except FrameTooLarge as exc:
            self._close_for("frame_size", size=exc.size, limit=self.max_request)
            return
        if frames:
            self.frames.extend(frames)
            self.wakeup.set()
            if len(self.frames) >= MAX_QUEUED_REQUESTS and not self.paused:
                self.paused = True
                self.transport.pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.admitted:
            self.admitted = False
            self.broker.connection_quotas.release(self.listener, self.client_host)
            self.broker.metrics.connections.dec()
        self.closed = True
        if self.worker is None or self.worker.done():
            self.broker.connections.discard(self)
        else:  # shutdown must still find (and abandon) the request in flight
            self.worker.add_done_callback(lambda _: self.broker.connections.discard(self))
        if getattr(self.broker, "share_manager", None) is not None:
            self.broker.share_manager.connection_closed(self)  # share sessions end with it
        self.wakeup.set()  # an idle worker ends; a request in flight completes, unanswered

    # --- processing ---------------------------------------------------------------------------

    def _close_for(self, reason: str, **fields: Any) -> None:
        log.info("connection_closed_invalid_request", reason=reason, peer=self.peer, **fields)
        self.broker.metrics.closed_bad_input.labels(reason).inc()
        self.frames.clear()
        if self.transport is not None:
            self.transport.close()
        self.closed_for_bad_input = True

    async def _process(self) -> None:
        try:
            while not (self.closed or self.transport.is_closing()):
                if not self.frames:
                    self.wakeup.clear()
                    await self.wakeup.wait()
                    continue
                frame = self.frames.popleft()
                if self.paused and len(self.frames) < MAX_QUEUED_REQUESTS // 2:
                    self.paused = False
                    self.transport.resume_reading()
                response = await self._handle(frame)
                if response is not None and not self.transport.is_closing():
                    # (size + header, body): large fetch bodies are not copied into one buffer.
                    self.transport.writelines(response)
                muted = self.muted_until - time.monotonic()
                if muted > 0:  # throttled: the next request waits, as Kafka mutes the channel
                    await asyncio.sleep(muted)
        except asyncio.CancelledError:
            pass
        except Exception:  # a bug in a handler must not take the broker down
            log.exception("connection_worker_failed", peer=self.peer)
            self.transport.close()

    async def _handle(self, frame: bytes) -> tuple[bytes, bytes] | None:
        if self.sasl is not None and self.sasl.awaiting_raw_token:
            return self._raw_sasl_token(frame)
        try:
            api_key, api_version, correlation_id = codec.parse_header_prefix(frame)
        except InvalidRequest:
            self._close_for("short_header")
            return None
        spec = REGISTRY.get(api_key)
        if spec is None:
            self._close_for("unknown_api_key", api_key=api_key)
            return None
        if not spec.min_version <= api_version <= spec.max_version and not (
                spec.unstable_max is not None and spec.min_version <= api_version <= spec.unstable_max
                and self.broker.config["unstable.api.versions.enable"]):
            if api_key == API_VERSIONS_KEY:
                # Kafka reads a newer ApiVersions request with the flexible header (v2);
                # a header it cannot read closes the connection instead.
                try:
                    codec.parse_header(frame, 2)
                except InvalidRequest:
                    self._close_for("unreadable_request", api=spec.name, version=api_version)
                    return None
                return self.broker.unsupported_api_versions_response(correlation_id)
            self._close_for("unsupported_version", api=spec.name, version=api_version)
            return None
        if self.sasl is not None and not self._sasl_admits(api_key, spec.name):
            return None
        if api_version < spec.refused_below:
            return self._refuse(spec, frame, api_version, correlation_id)
        decoding = time.perf_counter()
        try:
            header, body = codec.decode_request(frame)
        except (InvalidRequest, Exception) as exc:
            self._close_for("unreadable_request", api=spec.name, version=api_version, error=str(exc)[:200])
            return None
        started = time.perf_counter()
        timer = self._request_time(api_key, header, body)
        ctx = RequestContext(self.broker, header, self, timer)
        try:
            if timer is None:
                result = await spec.handler(ctx, body)
            else:
                timer.add(started - decoding)
                result = await timer.run(spec.handler(ctx, body))
        except CloseConnection as exc:
            self._close_for("handler_closed", api=spec.name, detail=str(exc))
            return None
        metrics = self.broker.metrics
        metrics.requests.labels(spec.name, str(api_version)).inc()
        metrics.request_time.labels(spec.name).observe((time.perf_counter() - started) * 1000)
        if result is NO_RESPONSE:
            return None
        if ctx.request_time is not None:
            _answer_request_throttle(result, ctx.request_throttle_ms())
        encoding = time.perf_counter()
        if not isinstance(result, (bytes, bytearray)):
            result = codec.encode_body(api_key, api_version, result)
        if ctx.request_time is not None:  # the encoding counts too, unthrottled (Kafka's network thread time)
            ctx.request_time.add(time.perf_counter() - encoding)
            self.broker.quotas[REQUEST].record(user_name(self.principal), header.client_id or "",
                                               ctx.request_time.take() * 100)
        return codec.frame_prefix(api_key, api_version, correlation_id, len(result)), result

    def _request_time(self, api_key: int, header, body) -> RequestTime | None:
        """A timer for the request when a ``request_percentage`` quota applies to its caller
        and it is not exempt (broker.quotas); None otherwise, which costs nothing."""
        quotas = self.broker.quotas[REQUEST]
        if not quotas.quotas() or api_key in REQUEST_QUOTA_EXEMPT or _exempt_body(api_key, body):
            return None
        if quotas.quota_for(user_name(self.principal), header.client_id or "") is None:
            return None
        return RequestTime()

    def _sasl_admits(self, api_key: int, api_name: str) -> bool:
        """Whether the SASL state machine lets this request through; if not, the connection is
        closed. On an authenticated connection a SaslHandshake starts a re-authentication
        (KIP-368) and anything else is refused once the session has expired."""
        sasl = self.sasl
        if sasl.complete:
            now = time.monotonic()
            if api_key == SASL_HANDSHAKE and sasl.begin_reauthentication(now):
                return True
            if self.session_expiry is not None and now >= self.session_expiry:
                self.broker.metrics.expired_connections_killed.labels(self.listener or "").inc()
                self._close_for("session_expired", api=api_name, principal=self.principal)
                return False
            return True
        try:
            sasl.check_allowed(api_key)
        except IllegalSaslState as exc:
            self._close_for("sasl_illegal_state", api=api_name, detail=str(exc))
            return False
        return True

    def _raw_sasl_token(self, token: bytes) -> tuple[bytes, bytes] | None:
        """A SASL token after a v0 SaslHandshake: the mechanism's answer as a bare frame. A
        failure cannot be told in this framing: the connection just closes (delayed)."""
        sasl = self.sasl
        try:
            answer = sasl.authenticate(token)
        except AuthenticationFailed as exc:
            self.authentication_failed(f"{exc}: {exc.detail}" if exc.detail else str(exc))
            return None
        if sasl.complete:
            self.authenticated(sasl.principal, sasl.session_lifetime_ms)
        return _SIZE.pack(len(answer)), answer

    def _refuse(self, spec, frame: bytes, api_version: int, correlation_id: int) -> tuple[bytes, bytes] | None:
        try:
            header = codec.parse_header(frame, 1)
            body = spec.legacy(frame, header.body_offset, api_version)
        except Exception:
            self._close_for("unreadable_request", api=spec.name, version=api_version)
            return None
        return codec.frame_prefix(spec.key, api_version, correlation_id, len(body)), body

    def throttle(self, ms: int) -> None:
        """A quota's throttle: the worker reads the next request only after ``ms``."""
        self.muted_until = max(self.muted_until, time.monotonic() + ms / 1000)

    # --- authentication (the SASL handlers' side of the connection) ----------------------------

    def authenticated(self, principal: str, session_lifetime_ms: int = 0, reauthenticated: bool = False) -> None:
        self.principal = principal
        self.session_expiry = time.monotonic() + session_lifetime_ms / 1000 if session_lifetime_ms else None
        metrics = self.broker.metrics
        counter = metrics.successful_reauthentication if reauthenticated else metrics.successful_authentication
        counter.labels(self.listener or "").inc()
        log.info("reauthenticated" if reauthenticated else "authenticated", listener=self.listener,
                 client=self.client_host, principal=principal, session_lifetime_ms=session_lifetime_ms)

    def authentication_failed(self, reason: str) -> None:
        """After the failure's answer, the connection closes (Kafka's delayed close)."""
        self.broker.metrics.failed_authentication.labels(self.listener or "").inc()
        # Info, as Kafka's Selector logs it: a client retrying a wrong password must not flood.
        log.info("authentication_failed", listener=self.listener, client=self.client_host, reason=reason)
        delay = self.broker.config["connection.failed.authentication.delay.ms"] / 1000
        if self.transport is not None:
            asyncio.get_running_loop().call_later(delay, self.transport.close)

    def close(self) -> None:
        """Broker shutdown: close the socket and abandon the request in flight."""
        if self.transport is not None:
            self.transport.close()
        if self.worker is not None and not self.worker.done():
            self.worker.cancel()


class TlsListener:
    """A TLS listener: its sockets and accept loop.

    asyncio's TLS server drops a failed handshake without a word; Kafka counts it as a failed
    authentication and logs the client's address. So a TLS listener accepts the socket itself
    and hands it to ``loop.connect_accepted_socket`` (the same TLS implementation), whose
    handshake failure is seen here. A client that disconnects or stalls before its handshake
    ends is dropped without counting, as Kafka does."""

    def __init__(self, sockets: list[socket.socket], listener: str, failed_authentication) -> None:
        self.sockets = sockets
        self.listener = listener
        self.failed_authentication = failed_authentication  # the listener's counter
        self.tasks: set[asyncio.Task] = set()

    @classmethod
    def bind(cls, host: str | None, port: int, listener: str, failed_authentication) -> TlsListener:
        if host:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            sock = socket.create_server((host, port), family=family, backlog=1024)
        elif socket.has_dualstack_ipv6():  # every interface, as create_server(host=None)
            sock = socket.create_server(("", port), family=socket.AF_INET6, backlog=1024, dualstack_ipv6=True)
        else:
            sock = socket.create_server(("", port), backlog=1024)
        sock.setblocking(False)
        return cls([sock], listener, failed_authentication)

    def serve(self, connection_factory, context: Callable[[], ssl.SSLContext], timeout_s: float) -> None:
        for sock in self.sockets:
            self._spawn(self._accept(sock, connection_factory, context, timeout_s))

    def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        for sock in self.sockets:
            sock.close()

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _accept(self, sock: socket.socket, connection_factory, context, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                client, address = await loop.sock_accept(sock)
            except OSError as exc:  # e.g. out of file descriptors: keep listening
                log.warning("accept_failed", listener=self.listener, error=str(exc))
                await asyncio.sleep(0.1)
                continue
            self._spawn(self._handshake(client, address, connection_factory, context(), timeout_s))

    async def _handshake(self, client: socket.socket, address, connection_factory, context: ssl.SSLContext,
                         timeout_s: float) -> None:
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                connection_factory, client, ssl=context, ssl_handshake_timeout=timeout_s)
        except ssl.SSLError as exc:
            self.failed_authentication.inc()
            log.info("authentication_failed", listener=self.listener, client=java_host_address(address[0]),
                     reason=f"SSL handshake failed: {exc.reason or exc}")
            client.close()
        except (TimeoutError, OSError) as exc:
            log.debug("tls_handshake_abandoned", listener=self.listener, client=address[0], error=repr(exc))
            client.close()
