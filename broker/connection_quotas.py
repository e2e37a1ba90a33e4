"""Connection limits, as Kafka's ``SocketServer.ConnectionQuotas`` counts them.

Owns the broker's count of open client connections, in all and per client address, and the
decision whether a new connection may stay:

- ``max.connections.per.ip`` (default unlimited), with ``max.connections.per.ip.overrides``
  (``host:count,host:count``; a host name counts for the address it resolves to): a connection
  from an address that already has that many is closed at once, and the others from that
  address, and everyone else's, go on.
- ``max.connections`` (default unlimited) for the broker: a connection over it is closed; the
  inter-broker listener is exempt when the broker has other listeners, as Kafka protects it, so
  clients cannot lock the brokers out of each other.

All three are dynamic broker configs: read on every new connection, so an AlterConfigs applies
to the next one.

Differs from Kafka: over ``max.connections`` Kafka's acceptor stops accepting until a slot frees
(the client waits); here the connection is accepted and closed (the client reconnects after its
backoff). ``max.connection.creation.rate`` is not enforced.
"""

from __future__ import annotations

import functools
import socket
from collections import Counter


@functools.lru_cache(maxsize=16)
def parse_overrides(raw: str | None) -> dict[str, int]:
    """``host:count,...`` by address (a host name resolved once per distinct setting)."""
    out: dict[str, int] = {}
    for item in (raw or "").split(","):
        host, sep, count = item.strip().rpartition(":")
        if not sep or not host:
            continue
        try:
            address = socket.gethostbyname(host)
        except OSError:
            address = host
        out[address] = int(count)
    return out


class ConnectionQuotas:
    def __init__(self, config, inter_broker_listener: str | None, listener_count: int) -> None:
        self.config = config
        self.protected = inter_broker_listener if listener_count > 1 else None
        self.by_address: Counter[str] = Counter()
        self.total = 0

    def admit(self, listener: str | None, address: str) -> str | None:
        """Count the connection and return None, or say why it must be closed (not counted)."""
        per_ip = parse_overrides(self.config.get("max.connections.per.ip.overrides")).get(
            address, self.config["max.connections.per.ip"])
        if self.by_address[address] >= per_ip:
            return (f"Rejected connection from {address}, address already has the configured maximum "
                    f"of {per_ip} connections.")
        if listener != self.protected and self.total >= self.config["max.connections"]:
            return f"Rejected connection from {address}: the broker has its maximum of {self.total} connections."
        self.by_address[address] += 1
        self.total += 1
        return None

    def release(self, address: str) -> None:
        self.by_address[address] -= 1
        if self.by_address[address] <= 0:
            del self.by_address[address]
        self.total -= 1
