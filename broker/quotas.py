"""Client quotas enforced: produce and fetch byte rates (Kafka's ``ClientQuotaManager``, KIP-13/55/219).

Owns the rate each quota entity used and the throttle time that follows from it. The quotas are
the ones AlterClientQuotas stored (``producer_byte_rate``, ``consumer_byte_rate``); a request's
entity is resolved as Kafka's default quota callback does, most specific first: user and
client-id, user and default client-id, user, default user and client-id, default user and
default client-id, default user, client-id, default client-id. Requests whose user and client-id
match no quota are not measured at all.

The rate is Kafka's: bytes over ``quota.window.num`` (11) samples of ``quota.window.size.seconds``
(1 s), divided by the elapsed window, which counts at least ``quota.window.num - 1`` full samples
(so a fresh client gets ten seconds' worth before it is throttled). Over the quota, the throttle
time is ``(rate - quota) / quota * window``, capped at the full window, as Kafka's
``QuotaUtils.throttleTime``. The handler puts it in the response's ``throttle_time_ms`` and the
connection reads nothing more from the client until it has passed (KIP-219's channel mute). A
throttled fetch is answered empty and its bytes are not counted, as Kafka's ``KafkaApis`` does.

Differs from Kafka: no request-percentage, controller-mutation or connection-rate quotas yet; the
rate is kept per broker (as in Kafka: quotas are per broker) and not exposed as Kafka's
per-entity ``Produce``/``Fetch`` quota metrics, only as ``kafka_server_quota_throttle_time``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping

from coordinator.controller.client_quotas import CLIENT_ID, USER, entity_key

PRODUCE, FETCH = "producer_byte_rate", "consumer_byte_rate"
WINDOWS, WINDOW_S = 11, 1.0


def _candidates(user: str, client_id: str) -> list[str]:
    """The entity keys that may hold a client's quota, most specific first."""
    u, c = (USER, user), (CLIENT_ID, client_id)
    du, dc = (USER, None), (CLIENT_ID, None)
    return [entity_key(e) for e in ((u, c), (u, dc), (u,), (du, c), (du, dc), (du,), (c,), (dc,))]


class Sensor:
    """One entity's bytes in the last ``WINDOWS`` samples of ``WINDOW_S`` (Kafka's ``Rate``)."""

    def __init__(self) -> None:
        self.samples: deque[list[float]] = deque()  # [sample start, bytes]

    def _expire(self, now: float) -> None:
        while self.samples and now - self.samples[0][0] >= WINDOWS * WINDOW_S:
            self.samples.popleft()

    def record(self, value: float, now: float) -> None:
        self._expire(now)
        if not self.samples or now - self.samples[-1][0] >= WINDOW_S:
            self.samples.append([now, 0.0])
        self.samples[-1][1] += value

    def window(self, now: float) -> float:
        elapsed = now - self.samples[0][0] if self.samples else 0.0
        full = int(elapsed / WINDOW_S)
        if full < WINDOWS - 1:
            elapsed += (WINDOWS - 1 - full) * WINDOW_S
        return elapsed

    def rate(self, now: float) -> float:
        self._expire(now)
        return sum(v for _, v in self.samples) / self.window(now)


class ClientQuotaManager:
    """The byte-rate quota of one kind (``producer_byte_rate`` or ``consumer_byte_rate``)."""

    def __init__(self, kind: str, quotas: Callable[[], Mapping[str, Mapping[str, float]]],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kind = kind
        self.quotas = quotas  # the cluster's stored quotas, read at each request
        self.clock = clock
        self.sensors: dict[str, Sensor] = {}

    def quota_for(self, user: str, client_id: str) -> tuple[str, float] | None:
        """(entity key, bytes per second) of the quota that applies, or None."""
        stored = self.quotas()
        if not stored:
            return None
        for key in _candidates(user, client_id):
            limit = stored.get(key, {}).get(self.kind)
            if limit is not None:
                return key, limit
        return None

    def record(self, user: str, client_id: str, size: int) -> int:
        """Count ``size`` bytes for the client; the throttle time in ms (0: within its quota)."""
        found = self.quota_for(user, client_id)
        if found is None:
            return 0
        key, limit = found
        now = self.clock()
        sensor = self.sensors.setdefault(key, Sensor())
        sensor.record(size, now)
        rate = sensor.rate(now)
        if rate <= limit or limit <= 0:
            return 0 if limit > 0 else int(WINDOWS * WINDOW_S * 1000)
        window = sensor.window(now)
        return int(min((rate - limit) / limit * window, WINDOWS * WINDOW_S) * 1000)

    def unrecord(self, user: str, client_id: str, size: int) -> None:
        """Take back bytes that were not sent after all (a throttled fetch's)."""
        found = self.quota_for(user, client_id)
        if found is not None and found[0] in self.sensors:
            self.sensors[found[0]].record(-size, self.clock())


def user_name(principal: str) -> str:
    """The quota user of a principal (``User:alice`` -> ``alice``), as Kafka's sanitized name."""
    return principal.partition(":")[2] or principal
