"""Connection limits and connection-creation rates, as Kafka's ``SocketServer.ConnectionQuotas``
counts them (KIP-402, KIP-612).

Owns the broker's count of open client connections, in all and per client address, the rates
at which they are created, and the decision whether (and when) a new connection may start:

- ``max.connection.creation.rate`` (default unlimited) for the broker, and ``max.connections``
  (default unlimited): a new connection over either waits before its first request is read,
  as Kafka's acceptor stops accepting (the client just sees a slow connect): until the rate is
  back under its quota (at most one quota sample, 1 s, per connection) and until a slot frees.
  The inter-broker listener is exempt from both when the broker has other listeners, as Kafka
  protects it, so clients cannot lock the brokers out of each other.
- ``connection_creation_rate`` per client address (a client quota on an ``ip`` entity, or the
  default ``ip`` entity; KIP-612): a connection over it is not counted and is closed once its
  throttle time has passed, as Kafka's acceptor closes a throttled socket late, so that a
  client reconnecting in a loop is slowed down.
- ``max.connections.per.ip`` (default unlimited), with ``max.connections.per.ip.overrides``
  (``host:count,host:count``; a host name counts for the address it resolves to): a connection
  from an address that already has that many is closed at once, and the others from that
  address, and everyone else's, go on. Settings Kafka refuses (overrides it cannot parse,
  ``max.connections.per.ip`` 0 without overrides, a dynamic ``max.connections`` or creation
  rate of 0) are refused at start-up and when altered (``config.check_connection_settings``).
- ``listener.name.<listener>.max.connections`` and
  ``listener.name.<listener>.max.connection.creation.rate`` (KIP-402's listener limits, default
  unlimited): the same waits, counted per listener, and binding on the inter-broker listener too
  (its own limit is how an operator bounds it). Static in ``server.properties``, or dynamic per
  broker or cluster-wide.

The broker settings are dynamic broker configs and the ip quotas client quotas: read on every
new connection, so a change applies to the next one.

Differs from Kafka: over ``max.connections`` because the limit was lowered, Kafka also closes
its least recently used connections, which this does not.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import time
from collections import Counter
from collections.abc import Callable, Mapping

from metadata.controller.client_quotas import IP, entity_key, entity_of

from .config import listener_limit_key, parse_overrides_setting
from .quotas import WINDOW_S, Sensor, throttle_s

CONNECTION_CREATION_RATE = "connection_creation_rate"
UNLIMITED = 2**31 - 1


class ConnectionRefused(Exception):
    """The connection may not stay: closed after ``delay_s`` (0: at once)."""

    def __init__(self, reason: str, delay_s: float = 0.0) -> None:
        super().__init__(reason)
        self.delay_s = delay_s


@functools.lru_cache(maxsize=16)
def parse_overrides(raw: str | None) -> dict[str, int]:
    """The overrides by address (a host name resolved once per distinct setting); a setting
    that does not parse (refused when set, so only a hand-edited file) counts as none."""
    try:
        hosts = parse_overrides_setting(raw)
    except ValueError:
        return {}
    return {_resolve(host): count for host, count in hosts.items()}


@functools.lru_cache(maxsize=256)
def _resolve(host: str) -> str:
    """The address of a host name (Kafka's ``InetAddress.getByName``); itself if unresolvable."""
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host


class ConnectionQuotas:
    def __init__(self, config, inter_broker_listener: str | None, listener_count: int,
                 client_quotas: Callable[[], Mapping[str, Mapping[str, float]]] = dict,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.protected = inter_broker_listener if listener_count > 1 else None
        self.client_quotas = client_quotas  # the cluster's stored quotas (ip entities)
        self.clock = clock
        self.by_address: Counter[str] = Counter()
        self.by_listener: Counter[str | None] = Counter()
        self.total = 0
        self.broker_rate = Sensor()
        self.listener_rates: dict[str | None, Sensor] = {}
        self.ip_rates: dict[str, Sensor] = {}
        self._slot_freed = asyncio.Event()

    async def acquire(self, listener: str | None, address: str) -> None:
        """Wait, as Kafka's acceptor does, until the creation rates and connection counts (the
        listener's, then the broker's) let the connection in; then count it, or raise
        :class:`ConnectionRefused`."""
        delay = self.creation_delay(listener)
        if delay:
            await asyncio.sleep(delay)
        while not self.slot_available(listener):
            self._slot_freed.clear()
            await self._slot_freed.wait()
        self.admit(listener, address)

    def listener_limit(self, listener: str | None, name: str) -> int:
        if listener is None:
            return UNLIMITED
        value = self.config.get(listener_limit_key(listener, name))
        return UNLIMITED if value is None else int(value)

    def creation_delay(self, listener: str | None) -> float:
        """Count the connection in its listener's and the broker's creation rates; seconds to
        wait (0: none), the larger of the two throttles as in Kafka."""
        now = self.clock()
        delay = 0.0
        limit = self.listener_limit(listener, "max.connection.creation.rate")
        if limit < UNLIMITED:
            sensor = self.listener_rates.setdefault(listener, Sensor())
            sensor.record(1, now)
            delay = throttle_s(sensor, limit, now, WINDOW_S)
        limit = self.config["max.connection.creation.rate"]
        if listener == self.protected or limit >= UNLIMITED:
            return delay
        self.broker_rate.record(1, now)
        return max(delay, throttle_s(self.broker_rate, limit, now, WINDOW_S))

    def slot_available(self, listener: str | None) -> bool:
        if self.by_listener[listener] >= self.listener_limit(listener, "max.connections"):
            return False
        return listener == self.protected or self.total < self.config["max.connections"]

    def admit(self, listener: str | None, address: str) -> None:
        """Check the address's creation rate and count, then count the connection; or raise
        :class:`ConnectionRefused` (not counted)."""
        self._record_ip_rate(address)
        per_ip = parse_overrides(self.config.get("max.connections.per.ip.overrides")).get(
            address, self.config["max.connections.per.ip"])
        if self.by_address[address] >= per_ip:
            raise ConnectionRefused(f"Rejected connection from {address}, address already has the configured "
                                    f"maximum of {per_ip} connections.")
        self.by_address[address] += 1
        self.by_listener[listener] += 1
        self.total += 1

    def _record_ip_rate(self, address: str) -> None:
        limit = self.ip_quota(address)
        if limit is None:
            return
        now = self.clock()
        sensor = self.ip_rates.setdefault(address, Sensor())
        sensor.record(1, now)
        delay = throttle_s(sensor, limit, now, WINDOW_S)
        if delay:
            sensor.record(-1, now)  # not accepted: not counted (Kafka un-records it too)
            raise ConnectionRefused(f"Throttling {address} for {int(delay * 1000)} ms: over its "
                                    f"{CONNECTION_CREATION_RATE} of {limit:g}/s", delay)

    def ip_quota(self, address: str) -> float | None:
        """The address's ``connection_creation_rate``: its own (an ip entity naming the address,
        or a host name resolving to it, as Kafka resolves the entity), else the default ip
        entity's."""
        stored = self.client_quotas()
        if not stored:
            return None
        limit = stored.get(entity_key(((IP, address),)), {}).get(CONNECTION_CREATION_RATE)
        if limit is not None:
            return limit
        default = None
        for key, quotas in stored.items():
            limit = quotas.get(CONNECTION_CREATION_RATE)
            if limit is None:
                continue
            entity = entity_of(key)
            if len(entity) != 1 or entity[0][0] != IP:
                continue
            name = entity[0][1]
            if name is None:
                default = limit
            elif name != address and _resolve(name) == address:
                return limit
        return default

    def release(self, listener: str | None, address: str) -> None:
        self.by_address[address] -= 1
        if self.by_address[address] <= 0:
            del self.by_address[address]
        self.by_listener[listener] -= 1
        self.total -= 1
        self._slot_freed.set()
