"""A Kafka-aware TCP proxy between the verifier's clients and the brokers, for network faults.

Owns: one listening port on 127.0.0.1 per broker address, the frame-level forwarding, the
rewriting of broker addresses in Metadata (3), FindCoordinator (10) and DescribeCluster (60)
responses so that clients keep talking through the proxy, and the run-time fault modes:

- ``normal()``: frames pass unchanged;
- ``delay((lo_ms, hi_ms))``: each request waits a uniform random time before it is forwarded
  (the connection's later requests wait behind it: order is kept);
- ``duplicate(p)``: a request is sent to the broker twice; the client sees only the first
  response (the extra one is dropped);
- ``reorder(p)``: a request is held back and sent after the connection's next request (or
  after ``hold_ms`` if none comes); responses still reach the client in the client's order.

Where it knowingly differs from Jepsen: Jepsen's Kafka test has no such proxy (it partitions
with iptables and never duplicates). Duplication and reordering here are of whole requests
on one connection, not of packets, so TCP stays intact and what is tested is how the broker
handles a request it sees twice or out of order (idempotent producer sequence checks,
retried EndTxn, ...). By default only the APIs whose duplicates a real client retry could
also produce are duplicated (see :data:`DUPLICABLE`): duplicating InitProducerId or
JoinGroup would only fence or confuse the client, not test the broker.

Frames a client sends that cannot be framed (negative or huge size, a header shorter than
8 bytes) close that client's connection only. A response that cannot be decoded for
rewriting is passed on unchanged (logged), so the client may then bypass the proxy.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import io
import random
import struct
import threading
from typing import Any

import structlog
from kio.serial import entity_reader, entity_writer

from protocol.api import request_header_version, response_class, response_header_version
from protocol.codec import parse_header, read_uvarint

log = structlog.get_logger("kbroker.verify.proxy")

PRODUCE, METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER = 0, 3, 10, 60
REWRITTEN = frozenset({METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER})
# Produce, Fetch, ListOffsets, Metadata, OffsetCommit, OffsetFetch, FindCoordinator, Heartbeat,
# AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit.
DUPLICABLE = frozenset({0, 1, 2, 3, 8, 9, 10, 12, 24, 25, 26, 28})
MAX_FRAME = 200 * 1024 * 1024
LISTEN_HOST = "127.0.0.1"


class BadFrame(Exception):
    """A client frame the proxy cannot forward: its connection is closed."""


@dataclasses.dataclass(frozen=True, slots=True)
class Mode:
    """The current fault mode; replaced as a whole (atomic across threads)."""

    name: str = "normal"
    delay_ms: tuple[float, float] = (0.0, 0.0)
    probability: float = 0.0
    hold_ms: float = 100.0
    api_keys: frozenset[int] = DUPLICABLE


@dataclasses.dataclass(slots=True)
class Stats:
    connections: int = 0
    requests: int = 0
    delayed: int = 0
    duplicated: int = 0
    reordered: int = 0
    dropped_responses: int = 0
    rewritten: int = 0
    bad_frames: int = 0

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


# --------------------------------------------------------------------------- frames
async def read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """One size-prefixed frame (without the prefix); None at a clean end of stream."""
    try:
        head = await reader.readexactly(4)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise BadFrame("truncated size prefix") from None
        return None
    (size,) = struct.unpack(">i", head)
    if size < 0 or size > MAX_FRAME:
        raise BadFrame(f"frame size {size}")
    try:
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        raise BadFrame("truncated frame") from None


def produce_acks(frame: bytes, version: int) -> int | None:
    """The ``acks`` of a Produce request (0: the broker sends no response); None if unreadable."""
    try:
        header = parse_header(frame, request_header_version(PRODUCE, version))
        pos = header.body_offset
        if version >= 3:  # transactional_id, a nullable (compact from v9) string
            if version >= 9:
                n, pos = read_uvarint(frame, pos)
                pos += max(n - 1, 0)
            else:
                (n,) = struct.unpack_from(">h", frame, pos)
                pos += 2 + max(n, 0)
        (acks,) = struct.unpack_from(">h", frame, pos)
        return acks
    except Exception:  # noqa: BLE001 - a request the broker will refuse anyway
        return None


def response_body_offset(frame: bytes, api_key: int, version: int) -> int:
    """Where the body starts: after the correlation id and, for header v1, its tagged fields."""
    pos = 4
    if response_header_version(api_key, version) >= 1:
        count, pos = read_uvarint(frame, pos)
        for _ in range(count):
            _tag, pos = read_uvarint(frame, pos)
            size, pos = read_uvarint(frame, pos)
            pos += size
    return pos


def rewrite_addresses(frame: bytes, api_key: int, version: int, mapping) -> tuple[bytes, set]:
    """Replace broker addresses in a Metadata / FindCoordinator / DescribeCluster response.

    ``mapping((host, port))`` returns the proxy's address for a broker's. Returns the new frame
    and the broker addresses seen (raises if the body cannot be decoded).
    """
    pos = response_body_offset(frame, api_key, version)
    cls = response_class(api_key, version)
    body, _ = entity_reader(cls)(frame, pos)
    seen: set[tuple[str, int]] = set()

    def swap(entity: Any) -> Any:
        if entity.port is None or entity.port < 0 or not entity.host:
            return entity
        addr = (entity.host, int(entity.port))
        seen.add(addr)
        host, port = mapping(addr)
        return dataclasses.replace(entity, host=host, port=type(entity.port)(port))

    if api_key in (METADATA, DESCRIBE_CLUSTER):
        body = dataclasses.replace(body, brokers=tuple(swap(b) for b in body.brokers))
    elif hasattr(body, "coordinators"):
        body = dataclasses.replace(body, coordinators=tuple(swap(c) for c in body.coordinators))
    else:
        body = swap(body)
    out = io.BytesIO()
    entity_writer(cls)(out, body)
    return frame[:pos] + out.getvalue(), seen


def broker_addresses(frame: bytes, api_key: int, version: int) -> set[tuple[str, int]]:
    """The broker addresses a response names (used to open listeners before rewriting)."""
    _, seen = rewrite_addresses(frame, api_key, version, lambda addr: addr)
    return seen


# --------------------------------------------------------------------------- one connection
class ProxiedConnection:
    """A client connection and its upstream broker connection, with the per-connection state
    that keeps responses in the client's order."""

    def __init__(self, proxy: KafkaProxy, client_r, client_w, upstream: tuple[str, int]) -> None:
        self.proxy = proxy
        self.client_r, self.client_w = client_r, client_w
        self.upstream = upstream
        self.up_r: asyncio.StreamReader | None = None
        self.up_w: asyncio.StreamWriter | None = None
        self.apis: dict[int, tuple[int, int]] = {}      # correlation id -> (api key, version)
        self.expected: dict[int, int] = {}              # correlation id -> responses still due
        self.order: collections.deque[int] = collections.deque()  # client order, awaiting responses
        self.ready: dict[int, bytes] = {}
        self.held: bytes | None = None
        self.held_timer: asyncio.TimerHandle | None = None
        self.closed = False

    async def run(self) -> None:
        try:
            self.up_r, self.up_w = await asyncio.wait_for(asyncio.open_connection(*self.upstream), 10)
        except (OSError, TimeoutError) as exc:
            log.debug("proxy upstream unreachable", upstream=self.upstream, error=str(exc))
            self.close()
            return
        tasks = [asyncio.ensure_future(self.pump_requests()), asyncio.ensure_future(self.pump_responses())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.held_timer is not None:
            self.held_timer.cancel()
        for w in (self.client_w, self.up_w):
            if w is not None:
                w.close()

    # -- requests: client -> broker
    async def pump_requests(self) -> None:
        try:
            while True:
                frame = await read_frame(self.client_r)
                if frame is None:
                    return
                await self.on_request(frame)
        except BadFrame as exc:
            self.proxy.stats.bad_frames += 1
            log.info("proxy closing a client connection", reason=str(exc), upstream=self.upstream)
        except (ConnectionError, OSError):
            pass

    async def on_request(self, frame: bytes) -> None:
        if len(frame) < 8:
            raise BadFrame("frame shorter than a request header")
        api_key, version, cid = struct.unpack_from(">hhi", frame, 0)
        self.proxy.stats.requests += 1
        mode = self.proxy.mode
        copies = 1
        if mode.name == "duplicate" and api_key in mode.api_keys and self.proxy.chance(mode.probability):
            copies = 2
            self.proxy.stats.duplicated += 1
        if not (api_key == PRODUCE and produce_acks(frame, version) == 0):
            self.apis[cid] = (api_key, version)
            self.expected[cid] = self.expected.get(cid, 0) + copies
            self.order.append(cid)
        if mode.name == "delay":
            self.proxy.stats.delayed += 1
            await asyncio.sleep(self.proxy.uniform(*mode.delay_ms) / 1000)
        packet = struct.pack(">i", len(frame)) + frame
        if mode.name == "reorder" and self.held is None and self.proxy.chance(mode.probability):
            self.proxy.stats.reordered += 1
            self.held = packet * copies
            self.held_timer = asyncio.get_running_loop().call_later(mode.hold_ms / 1000, self.release_held)
            return
        self.up_w.write(packet * copies)
        self.release_held()
        await self.up_w.drain()

    def release_held(self) -> None:
        if self.held is not None and not self.closed:
            self.up_w.write(self.held)
        self.held = None
        if self.held_timer is not None:
            self.held_timer.cancel()
            self.held_timer = None

    # -- responses: broker -> client
    async def pump_responses(self) -> None:
        try:
            while True:
                frame = await read_frame(self.up_r)
                if frame is None or len(frame) < 4:
                    return
                await self.on_response(frame)
        except BadFrame as exc:
            log.info("proxy: bad frame from the broker", reason=str(exc), upstream=self.upstream)
        except (ConnectionError, OSError):
            pass

    async def on_response(self, frame: bytes) -> None:
        (cid,) = struct.unpack_from(">i", frame, 0)
        due = self.expected.get(cid)
        if due is None:  # nothing we forwarded: pass it on as it is
            self.client_w.write(struct.pack(">i", len(frame)) + frame)
            await self.client_w.drain()
            return
        api_key, version = self.apis[cid]
        first = cid not in self.ready and cid in self.order
        if due <= 1:
            del self.expected[cid]
            self.apis.pop(cid, None)
        else:
            self.expected[cid] = due - 1
        if not first:
            self.proxy.stats.dropped_responses += 1
            return
        if api_key in REWRITTEN:
            frame = await self.proxy.rewrite(frame, api_key, version)
        self.ready[cid] = frame
        await self.flush()

    async def flush(self) -> None:
        out = []
        while self.order and self.order[0] in self.ready:
            frame = self.ready.pop(self.order.popleft())
            out.append(struct.pack(">i", len(frame)) + frame)
        if out:
            self.client_w.write(b"".join(out))
            await self.client_w.drain()


# --------------------------------------------------------------------------- the proxy
class KafkaProxy:
    """The proxy: ``start()`` runs it in a background thread with its own event loop."""

    def __init__(self, upstreams: list[tuple[str, int]] | str, seed: int | None = None) -> None:
        if isinstance(upstreams, str):
            upstreams = [_split_address(a) for a in upstreams.split(",") if a.strip()]
        self.upstreams = [(h, int(p)) for h, p in upstreams]
        self.mode = Mode()
        self.stats = Stats()
        self.rng = random.Random(seed)
        self.listeners: dict[tuple[str, int], int] = {}   # broker address -> proxy port
        self._servers: list[asyncio.base_events.Server] = []
        self._connections: set[ProxiedConnection] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._listen_lock: asyncio.Lock | None = None

    @classmethod
    def for_target(cls, target, seed: int | None = None) -> KafkaProxy:
        """A proxy in front of a started target's brokers (one listener each, in node order)."""
        return cls([target.broker_address(n) for n in target.node_ids()], seed=seed)

    # -- modes (thread-safe: one attribute assignment)
    def normal(self) -> None:
        self.mode = Mode()

    def delay(self, ms_range: tuple[float, float] = (20.0, 200.0)) -> None:
        lo, hi = ms_range
        self.mode = Mode("delay", delay_ms=(float(lo), float(hi)))

    def duplicate(self, probability: float = 0.5, api_keys: frozenset[int] | None = None) -> None:
        self.mode = Mode("duplicate", probability=probability,
                         api_keys=frozenset(api_keys) if api_keys is not None else DUPLICABLE)

    def reorder(self, probability: float = 0.5, hold_ms: float = 100.0) -> None:
        self.mode = Mode("reorder", probability=probability, hold_ms=hold_ms)

    def chance(self, p: float) -> bool:
        return p > 0 and self.rng.random() < p

    def uniform(self, lo: float, hi: float) -> float:
        return self.rng.uniform(lo, hi)

    # -- addresses
    @property
    def bootstrap(self) -> str:
        """The proxy's addresses for the upstream bootstrap servers, comma-separated."""
        return ",".join(f"{LISTEN_HOST}:{self.listeners[a]}" for a in self.upstreams)

    def address_for(self, upstream: tuple[str, int]) -> tuple[str, int] | None:
        port = self.listeners.get(upstream)
        return (LISTEN_HOST, port) if port else None

    # -- life cycle
    def start(self, timeout: float = 10.0) -> KafkaProxy:
        if self._thread is not None:
            return self
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._listen_lock = asyncio.Lock()
            self._loop.call_soon(ready.set)
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="kbroker-verify-proxy", daemon=True)
        self._thread.start()
        ready.wait(timeout)
        for upstream in self.upstreams:
            asyncio.run_coroutine_threadsafe(self._listen(upstream), self._loop).result(timeout)
        log.info("proxy started", bootstrap=self.bootstrap, upstreams=self.upstreams)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self._thread is None or self._loop is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout)
        except Exception as exc:  # noqa: BLE001 - stopping anyway
            log.warning("proxy shutdown", error=str(exc))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
        self._loop.close()
        self._thread, self._loop = None, None

    def __enter__(self) -> KafkaProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    async def _shutdown(self) -> None:
        for server in self._servers:
            server.close()
        for conn in list(self._connections):
            conn.close()
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not current]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._servers.clear()

    async def _listen(self, upstream: tuple[str, int]) -> int:
        async with self._listen_lock:
            port = self.listeners.get(upstream)
            if port:
                return port
            server = await asyncio.start_server(
                lambda r, w: self._serve(r, w, upstream), LISTEN_HOST, 0)
            port = server.sockets[0].getsockname()[1]
            self._servers.append(server)
            self.listeners[upstream] = port
            log.debug("proxy listening", port=port, upstream=upstream)
            return port

    async def _serve(self, reader, writer, upstream: tuple[str, int]) -> None:
        self.stats.connections += 1
        conn = ProxiedConnection(self, reader, writer, upstream)
        self._connections.add(conn)
        try:
            await conn.run()
        except asyncio.CancelledError:
            pass  # stop(): end quietly (asyncio's stream callback logs a cancelled handler task)
        finally:
            self._connections.discard(conn)

    async def rewrite(self, frame: bytes, api_key: int, version: int) -> bytes:
        """The response with every broker address replaced by this proxy's for it (a new
        listener is opened for a broker seen the first time)."""
        try:
            for addr in broker_addresses(frame, api_key, version):
                await self._listen(addr)
            frame, _ = rewrite_addresses(frame, api_key, version,
                                         lambda addr: (LISTEN_HOST, self.listeners[addr]))
            self.stats.rewritten += 1
        except Exception as exc:  # noqa: BLE001 - pass on what we cannot decode
            log.warning("proxy cannot rewrite a response", api_key=api_key, version=version, error=str(exc))
        return frame


def _split_address(address: str) -> tuple[str, int]:
    host, _, port = address.strip().rpartition(":")
    return host.strip("[]"), int(port)
