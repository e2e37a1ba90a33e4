"""A small asyncio Kafka client for broker-to-broker requests (transaction markers, later
verification and controller calls).

One connection per destination node. Requests are pipelined: each is written as soon as it
is sent (correlation ids in order) and the responses, which a Kafka broker returns in request
order on a connection, are matched to the oldest request in flight. When a connection breaks
or a request times out, every request in flight on it fails with ConnectionError /
TimeoutError and the connection is dropped; the next request reconnects (resolving the node
id to an address again). Requests are kio entities or dicts of their fields; responses come
back as kio entities. On a SASL listener with session lifetimes (KIP-368) the connection logs
in again before its session ends, as Kafka's clients re-authenticate.
"""

from __future__ import annotations

import asyncio
import io
import ssl
import struct
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import structlog
from kio.serial import entity_reader, entity_writer

from protocol.api import request_class, request_header_version, response_class, response_header_version
from protocol.codec import build
from security.sasl import SASL_AUTHENTICATE, SASL_HANDSHAKE, SaslClient

log = structlog.get_logger("broker.network_client")

_SIZE = struct.Struct(">i")
_REQUEST_HEAD = struct.Struct(">hhih")
REAUTH_AT = 0.85  # of the SASL session lifetime (Kafka's clients pick 85-95%)


class _InFlight:
    __slots__ = ("correlation_id", "api_key", "version", "future", "decoder")

    def __init__(self, correlation_id: int, api_key: int, version: int, future: asyncio.Future,
                 decoder: Callable[[bytes, int], Any] | None = None) -> None:
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.version = version
        self.future = future
        self.decoder = decoder


class _Connection:
    def __init__(self, node_id: int, client_id: str) -> None:
        self.node_id = node_id
        self.client_id = client_id.encode()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.reader_task: asyncio.Task | None = None
        self.in_flight: deque[_InFlight] = deque()
        self.correlation_id = 0
        self.connect_lock = asyncio.Lock()
        self.authenticated = False  # requests wait for the SASL login (none needed: set at once)
        self.renew_at: float | None = None  # time.monotonic() to re-authenticate at (KIP-368)

    @property
    def ready(self) -> bool:
        return self.writer is not None and self.authenticated and not self._session_ending()

    def _session_ending(self) -> bool:
        return self.renew_at is not None and time.monotonic() >= self.renew_at

    async def ensure_connected(self, address: tuple[str, int], timeout: float,
                               ssl_context: ssl.SSLContext | None = None, sasl: SaslClient | None = None) -> None:
        async with self.connect_lock:
            if self.ready:
                return
            if self.writer is not None and self.authenticated and sasl is not None:
                await self._reauthenticate(sasl, timeout)
                return
            if self.writer is not None:  # a login that failed half-way: start over
                self.close()
            tls = {"ssl": ssl_context, "server_hostname": address[0]} if ssl_context is not None else {}
            reader, writer = await asyncio.wait_for(asyncio.open_connection(*address, **tls), timeout)
            self.reader, self.writer = reader, writer
            self.reader_task = asyncio.get_running_loop().create_task(self._read_loop(reader, writer))
            if sasl is not None:
                await self._login_or_close(sasl, timeout)
            self.authenticated = True

    async def _reauthenticate(self, sasl: SaslClient, timeout: float) -> None:
        """The session nears its end: log in again on this connection. Other senders wait on
        the connect lock meanwhile (the broker admits nothing but the SASL requests until the
        login completes); requests already in flight are answered first, in order."""
        self.authenticated = False
        await self._login_or_close(sasl, timeout)
        self.authenticated = True

    async def _login_or_close(self, sasl: SaslClient, timeout: float) -> None:
        """A login that fails (or times out) drops the connection."""
        try:
            await asyncio.wait_for(self._login(sasl), timeout)
        except BaseException:
            self.close()
            raise

    async def _login(self, sasl: SaslClient) -> None:
        """SaslHandshake v1, then SaslAuthenticate until the mechanism is done; a session
        lifetime in the answer (KIP-368) schedules the re-authentication, at 85% of it as
        Kafka's clients do at the earliest."""
        self.renew_at = None
        response = await self.send(SASL_HANDSHAKE, 1, {"mechanism": sasl.mechanism})
        if response.error_code:
            raise ConnectionError(f"SASL handshake with node {self.node_id} ({sasl.mechanism}): "
                                  f"error {int(response.error_code)}, mechanisms {list(response.mechanisms)}")
        steps, reply = sasl.exchange(), None
        while True:
            try:
                token = steps.send(reply)
            except StopIteration:
                return
            response = await self.send(SASL_AUTHENTICATE, 2, {"auth_bytes": token})
            if response.error_code:
                raise ConnectionError(f"SASL login to node {self.node_id} failed: {response.error_message}")
            reply = bytes(response.auth_bytes)
            lifetime_s = response.session_lifetime.total_seconds()
            if lifetime_s > 0:
                self.renew_at = time.monotonic() + REAUTH_AT * lifetime_s

    def send(self, api_key: int, version: int, body: Any,
             decoder: Callable[[bytes, int], Any] | None = None) -> asyncio.Future:
        """Write the request now (no await between numbering and writing keeps the order)."""
        cls = request_class(api_key, version)
        entity = body if isinstance(body, cls) else build(cls, body)
        out = io.BytesIO()
        entity_writer(cls)(out, entity)
        self.correlation_id = (self.correlation_id + 1) & 0x7FFFFFFF
        header = _REQUEST_HEAD.pack(api_key, version, self.correlation_id, len(self.client_id)) + self.client_id
        if request_header_version(api_key, version) >= 2:
            header += b"\x00"
        payload = header + out.getvalue()
        fut = asyncio.get_running_loop().create_future()
        self.in_flight.append(_InFlight(self.correlation_id, api_key, version, fut, decoder))
        self.writer.write(_SIZE.pack(len(payload)) + payload)
        return fut

    async def _read_loop(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        error: BaseException = ConnectionError(f"connection to node {self.node_id} closed")
        try:
            while True:
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                frame = await reader.readexactly(size)
                if not self.in_flight:
                    raise ConnectionError(f"unexpected response from node {self.node_id}")
                request = self.in_flight.popleft()
                (correlation_id,) = struct.unpack_from(">i", frame, 0)
                if correlation_id != request.correlation_id:
                    raise ConnectionError(f"correlation id {correlation_id} from node {self.node_id}, "
                                          f"expected {request.correlation_id}")
                pos = 4 + (1 if response_header_version(request.api_key, request.version) >= 1 else 0)
                try:
                    if request.decoder is not None:
                        response = request.decoder(frame, pos)
                    else:
                        response, _ = entity_reader(response_class(request.api_key, request.version))(frame, pos)
                except Exception as exc:
                    if not request.future.done():
                        request.future.set_exception(ConnectionError(f"unreadable response: {exc!r}"))
                    continue
                if not request.future.done():
                    request.future.set_result(response)
        except asyncio.CancelledError:
            raise
        except (asyncio.IncompleteReadError, ConnectionError, OSError, struct.error) as exc:
            error = ConnectionError(f"connection to node {self.node_id}: {exc!r}")
        finally:
            if self.writer is writer:
                self.close(error)

    def close(self, error: BaseException | None = None) -> None:
        self.authenticated = False
        writer, self.writer, self.reader = self.writer, None, None
        task, self.reader_task = self.reader_task, None
        if writer is not None:
            writer.close()
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        in_flight, self.in_flight = self.in_flight, deque()
        for request in in_flight:
            if not request.future.done():
                request.future.set_exception(error or ConnectionError(f"connection to node {self.node_id} closed"))


class NetworkClient:
    """``send_request(node_id, api_key, api_version, request) -> response``."""

    def __init__(self, client_id: str, resolve: Callable[[int], tuple[str, int] | None],
                 timeout: float = 30.0, ssl_context: ssl.SSLContext | None = None,
                 sasl: SaslClient | None = None) -> None:
        self.client_id = client_id
        self.resolve = resolve
        self.timeout = timeout
        self.ssl_context = ssl_context  # TLS to the peers' inter-broker listener (SSL, SASL_SSL)
        self.sasl = sasl  # this broker's login there (SASL_PLAINTEXT, SASL_SSL)
        self.connections: dict[int, _Connection] = {}

    @classmethod
    def to_peers(cls, client_id: str, resolve: Callable[[int], tuple[str, int] | None], config,
                 timeout: float = 30.0) -> NetworkClient:
        """A client for the peers' inter-broker listener, with its TLS and SASL login."""
        return cls(client_id, resolve, timeout, config.inter_broker_ssl_context(), config.inter_broker_sasl_client())

    async def send_request(self, node_id: int, api_key: int, api_version: int, request: Any,
                           timeout: float | None = None,
                           decoder: Callable[[bytes, int], Any] | None = None) -> Any:
        """``decoder(frame, body_offset)`` replaces kio's reader for a hot response."""
        timeout = self.timeout if timeout is None else timeout
        conn = self.connections.get(node_id)
        if conn is None:
            conn = self.connections[node_id] = _Connection(node_id, self.client_id)
        if not conn.ready:
            address = self.resolve(node_id)
            if address is None:
                raise ConnectionError(f"no address known for node {node_id}")
            try:
                await conn.ensure_connected(address, timeout, self.ssl_context, self.sasl)
            except (OSError, TimeoutError, ssl.SSLError) as exc:
                raise ConnectionError(f"cannot connect to node {node_id} at {address}: {exc!r}") from exc
        if not conn.ready:
            raise ConnectionError(f"connection to node {node_id} closed")
        fut = conn.send(api_key, api_version, request, decoder)
        writer = conn.writer
        try:
            await writer.drain()
        except (OSError, ConnectionError) as exc:
            conn.close(ConnectionError(f"connection to node {node_id}: {exc!r}"))
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except TimeoutError:
            # Responses come in order: a lost one means the connection is unusable.
            log.warning("inter_broker_request_timed_out", node_id=node_id, api_key=api_key, seconds=timeout)
            conn.close(TimeoutError(f"request to node {node_id} timed out"))
            raise

    def close(self) -> None:
        for conn in self.connections.values():
            conn.close()
        self.connections.clear()
