"""Client quotas enforced: produce and fetch byte rates (Kafka's ``ClientQuotaManager``, KIP-13/55/219),
the request-time percentage (``ClientRequestQuotaManager``, KIP-124) and the controller mutation
rate (``ControllerMutationQuotaManager``, KIP-599).

Owns the rate each quota entity used and the throttle time that follows from it. The quotas are
the ones AlterClientQuotas stored (``producer_byte_rate``, ``consumer_byte_rate``); a request's
entity is resolved as Kafka's default quota callback does, most specific first: user and
client-id, user and default client-id, user, default user and client-id, default user and
default client-id, default user, client-id, default client-id. Until a quota of a kind has been
set, nothing is measured for it; from then on (until a restart, as Kafka's ``quotasEnabled``)
a client no quota names is measured too, under Kafka's metric tags for it (its client id, or
its user where only user quotas exist), so its history counts once a quota names it.

The rate is Kafka's: bytes over ``quota.window.num`` (11) samples of ``quota.window.size.seconds``
(1 s), divided by the elapsed window, which counts at least ``quota.window.num - 1`` full samples
(so a fresh client gets ten seconds' worth before it is throttled). Over the quota, the throttle
time is ``(rate - quota) / quota * window``, unbounded, as Kafka's ``ClientQuotaManager``. The
handler puts it in the response's ``throttle_time_ms`` and the connection reads nothing more
from the client until it has passed (KIP-219's channel mute). A consumer's fetch reads at most
``quota.window.num - 1`` windows' worth of its quota (Kafka's ``getMaxValueInQuotaWindow``), so a
fetch never needs more than the quota allows at once; a throttled fetch is answered empty and
its bytes are not counted, as Kafka's ``KafkaApis`` does.

``request_percentage`` counts the time a request held the event loop (Kafka: the request
handler and network threads' time): its handler's steps between awaits, timed by
:class:`RequestTime`, plus decoding and encoding, as percent-seconds, so the rate is the
percentage of one thread the client used. The throttle time follows the same formula, capped at
one sample (``quota.window.size.seconds``) as Kafka's ``boundedThrottleTime``. Cluster actions
(WriteTxnMarkers, AlterPartition), follower fetches and acks=0 produces are exempt; a produce
or fetch answers the larger of its byte-rate and request throttles.

``controller_mutation_rate`` counts partitions created (CreateTopics, CreatePartitions) and
deleted (DeleteTopics) in a token bucket of ``quota.window.num`` seconds' worth of the rate,
refilled at the rate (Kafka's ``TokenBucket``). A request that finds the bucket below zero is
refused per topic with THROTTLING_QUOTA_EXCEEDED and the time until the bucket is back at zero
(strict: CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+, the versions whose clients
understand the error); a request that finds credit is done even if it takes the bucket below
zero. Older versions are never refused, only throttled afterwards (Kafka's permissive quota).

Connection-creation rates (``connection_creation_rate``, ``max.connection.creation.rate``) are
counted by ``broker/connection_quotas.py`` with the same :class:`Sensor` and :func:`throttle_s`.

Each quota's sensor (and mutation bucket) is named by Kafka's metric tags, the client's user and
client id as far as the quota's entity names them (:func:`_candidates`), so that a default quota
applies to every user or client id on its own, and is exposed per entity as Kafka's JMX metrics
are: ``kafka_server_produce_byte_rate`` / ``_throttle_time``, ``kafka_server_fetch_*`` and
``kafka_server_request_request_time`` / ``_throttle_time`` with ``user`` and ``client_id`` labels
(:func:`collect_quota_metrics`); the sum of throttle times by kind is
``kafka_server_quota_throttle_time``.

An entity's sensor (or bucket) is dropped after ``SENSOR_EXPIRATION_S`` (an hour) without a
request, as Kafka expires its quota sensors; looked for every ``SWEEP_INTERVAL_S``.

Differs from Kafka: an entity's ``throttle_time`` metric is the throttle time of its latest
request, where Kafka's is the average over the quota window.
"""

from __future__ import annotations

import time
import types
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, TypeVar

from metadata.controller.client_quotas import CLIENT_ID, USER, entity_key, entity_of

PRODUCE, FETCH = "producer_byte_rate", "consumer_byte_rate"
REQUEST = "request_percentage"
MUTATION = "controller_mutation_rate"
THROTTLED = "The throttling quota has been exceeded."
WINDOWS, WINDOW_S = 11, 1.0
MAX_THROTTLE_S = (2**31 - 1) / 1000  # throttle_time_ms is an int32
SENSOR_EXPIRATION_S = 3600.0  # Kafka's ClientQuotaManager.InactiveSensorExpirationTimeSeconds
SWEEP_INTERVAL_S = 30.0       # how often Kafka's Metrics looks for expired sensors


Tags = tuple[str, str]  # (user, client id) of a quota's sensor, "" where the quota names none


def _candidates(user: str, client_id: str) -> list[tuple[str, Tags]]:
    """(entity key, sensor tags) of the quotas that may hold a client's, most specific first.

    The tags are Kafka's ``DefaultQuotaCallback.quotaMetricTags``: the client's own user and
    client id for the parts the quota's entity names, a default included, and "" for the
    others. They name the sensor, so every user (or client id) under a default quota has a rate
    of its own, and a user's clients share their user quota's."""
    u, c = (USER, user), (CLIENT_ID, client_id)
    du, dc = (USER, None), (CLIENT_ID, None)
    both, users, clients = (user, client_id), (user, ""), ("", client_id)
    return [(entity_key(e), tags) for e, tags in (((u, c), both), ((u, dc), both), ((u,), users),
                                                  ((du, c), both), ((du, dc), both), ((du,), users),
                                                  ((c,), clients), ((dc,), clients))]


def _shape(key: str) -> tuple[bool, bool]:
    """Whether a quota entity names a user, and a client id (defaults included)."""
    types = {t for t, _ in entity_of(key)}
    return USER in types, CLIENT_ID in types


def _unquoted_tags(shapes: frozenset[tuple[bool, bool]], user: str, client_id: str) -> Tags:
    """Kafka's ``quotaMetricTags`` for a client no quota names: by the one kind of entity that
    holds quotas, else its client id."""
    if shapes == {(True, True)}:
        return user, client_id
    if shapes == {(True, False)}:
        return user, ""
    return "", client_id


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


def throttle_s(sensor: Sensor, limit: float, now: float, cap_s: float) -> float:
    """Seconds to throttle a sensor over ``limit`` (0: within it): Kafka's
    ``QuotaUtils.throttleTime``, ``(rate - limit) / limit * window``, at most ``cap_s``."""
    if limit <= 0:
        return min(cap_s, WINDOWS * WINDOW_S)
    rate = sensor.rate(now)
    if rate <= limit:
        return 0.0
    return min((rate - limit) / limit * sensor.window(now), cap_s, MAX_THROTTLE_S)


class QuotaManager:
    """Quotas of one kind, resolved per (user, client id) as Kafka's default callback does."""

    def __init__(self, kind: str, quotas: Callable[[], Mapping[str, Mapping[str, float]]],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kind = kind
        self.quotas = quotas  # the cluster's stored quotas, read at each request
        self.clock = clock
        self.last_used: dict[Tags, float] = {}
        self._next_sweep = clock() + SWEEP_INTERVAL_S
        self._shapes: frozenset[tuple[bool, bool]] = frozenset()  # sticky until restart, as Kafka's
        self._shapes_checked = float("-inf")

    def _touch(self, tags: Tags, now: float) -> None:
        self.last_used[tags] = now
        self._sweep(now)

    def _sweep(self, now: float) -> None:
        """Drop the sensors of entities idle for ``SENSOR_EXPIRATION_S``, as Kafka's sensor
        expiration does, so that a broker seeing ever new client ids keeps no state for them."""
        if now < self._next_sweep:
            return
        self._next_sweep = now + SWEEP_INTERVAL_S
        for tags in [t for t, used in self.last_used.items() if now - used > SENSOR_EXPIRATION_S]:
            del self.last_used[tags]
            self._drop(tags)

    def _drop(self, tags: Tags) -> None:
        """Forget one entity's sensor state."""

    def quota_for(self, user: str, client_id: str) -> tuple[Tags, float] | None:
        """(sensor tags, bytes per second) of the quota that applies, or None."""
        stored = self.quotas()
        if not stored:
            return None
        for key, tags in _candidates(user, client_id):
            limit = stored.get(key, {}).get(self.kind)
            if limit is not None:
                return tags, limit
        return None

    def sensor_for(self, user: str, client_id: str) -> tuple[Tags, float | None] | None:
        """(sensor tags, limit or None) the client's usage is counted under: its quota's, else,
        once any quota of this kind has been set since start-up (Kafka's ``quotasEnabled``),
        a sensor of its own with no limit, whose history counts as soon as a quota names it.
        None: nothing is counted."""
        found = self.quota_for(user, client_id)
        if found is not None:
            return found
        shapes = self._enabled_shapes()
        if not shapes:
            return None
        return _unquoted_tags(shapes, user, client_id), None

    def _enabled_shapes(self) -> frozenset[tuple[bool, bool]]:
        """The entity shapes (names a user, names a client id) that have held a quota of this
        kind since start-up; looked at once a second, as only unquoted clients ask."""
        now = self.clock()
        if now >= self._shapes_checked + 1.0:
            self._shapes_checked = now
            found = {_shape(key) for key, quotas in self.quotas().items() if self.kind in quotas}
            if not found <= self._shapes:
                self._shapes = self._shapes | found
        return self._shapes


class ClientQuotaManager(QuotaManager):
    """A rate quota of one kind (``producer_byte_rate``, ``consumer_byte_rate`` in bytes;
    ``request_percentage`` in percent-seconds), throttling for at most ``max_throttle_s``
    (byte rates: unbounded, as Kafka's ``ClientQuotaManager.throttleTime``)."""

    def __init__(self, kind: str, quotas: Callable[[], Mapping[str, Mapping[str, float]]],
                 clock: Callable[[], float] = time.monotonic, max_throttle_s: float = float("inf")) -> None:
        super().__init__(kind, quotas, clock)
        self.sensors: dict[Tags, Sensor] = {}
        self.throttled_ms: dict[Tags, int] = {}  # each sensor's latest throttle time (the metric)
        self.max_throttle_s = max_throttle_s

    def record(self, user: str, client_id: str, size: float) -> int:
        """Count ``size`` for the client; the throttle time in ms (0: within its quota)."""
        found = self.sensor_for(user, client_id)
        if found is None:
            return 0
        tags, limit = found
        now = self.clock()
        self._touch(tags, now)
        sensor = self.sensors.setdefault(tags, Sensor())
        sensor.record(size, now)
        seconds = 0.0 if limit is None else throttle_s(sensor, limit, now, self.max_throttle_s)
        ms = self.throttled_ms[tags] = int(seconds * 1000)
        return ms

    def max_value_in_window(self, user: str, client_id: str) -> float:
        """Kafka's ``getMaxValueInQuotaWindow``: the most one request can use without being
        throttled whatever came before (a fetch's bytes are bounded by it); inf: no quota."""
        found = self.quota_for(user, client_id)
        return float("inf") if found is None else found[1] * (WINDOWS - 1) * WINDOW_S

    def rates(self) -> list[tuple[Tags, float, int]]:
        """(tags, rate, latest throttle time in ms) of every sensor, for the metrics."""
        now = self.clock()
        self._sweep(now)
        return [(tags, sensor.rate(now), self.throttled_ms.get(tags, 0)) for tags, sensor in self.sensors.items()]

    def _drop(self, tags: Tags) -> None:
        self.sensors.pop(tags, None)
        self.throttled_ms.pop(tags, None)

    def unrecord(self, user: str, client_id: str, size: int) -> None:
        """Take back bytes that were not sent after all (a throttled fetch's)."""
        found = self.sensor_for(user, client_id)
        if found is not None and found[0] in self.sensors:
            self.sensors[found[0]].record(-size, self.clock())


def request_quota_manager(quotas: Callable[[], Mapping[str, Mapping[str, float]]],
                          clock: Callable[[], float] = time.monotonic) -> ClientQuotaManager:
    """``request_percentage``: throttles of at most one sample, as Kafka's request quota."""
    return ClientQuotaManager(REQUEST, quotas, clock, max_throttle_s=WINDOW_S)


T = TypeVar("T")


class RequestTime:
    """The time one request held the event loop: its handler's steps between awaits (timed
    by :meth:`run`) and whatever the connection adds (:meth:`add`), in seconds. The part up to
    :meth:`take` is what the quota throttles on; the rest is counted afterwards, unthrottled,
    as Kafka counts the network thread's time."""

    __slots__ = ("busy", "taken", "throttled", "_since")

    def __init__(self) -> None:
        self.busy = 0.0
        self.taken = 0.0
        self.throttled = False  # the quota has seen (and throttled on) the time up to ``taken``
        self._since: float | None = None

    def add(self, seconds: float) -> None:
        self.busy += seconds

    def so_far(self) -> float:
        running = time.perf_counter() - self._since if self._since is not None else 0.0
        return self.busy + running

    def take(self) -> float:
        """The time not yet taken, now taken."""
        now = self.so_far()
        untaken, self.taken = now - self.taken, now
        return untaken

    def run(self, coro: Coroutine[Any, Any, T]) -> Awaitable[T]:
        return self._drive(coro)

    @types.coroutine
    def _drive(self, coro):
        """Step ``coro`` as a task would, timing each step (a plain pass-through of what it
        awaits, cancellation included)."""
        value, error = None, None
        while True:
            self._since = time.perf_counter()
            try:
                step = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as done:
                return done.value
            finally:
                self.busy += time.perf_counter() - self._since
                self._since = None
            try:
                value, error = (yield step), None
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # noqa: BLE001  (cancellation goes to the handler)
                value, error = None, exc


class TokenBucket:
    """Kafka's ``TokenBucket``: credits up to the rate times the quota window, refilled at the rate."""

    def __init__(self, now: float) -> None:
        self.tokens: float | None = None  # full on first use
        self.last = now

    def credits(self, rate: float, now: float) -> float:
        burst = rate * WINDOWS * WINDOW_S
        self.tokens = burst if self.tokens is None else min(burst, self.tokens + rate * (now - self.last))
        self.last = now
        return self.tokens


class ThrottlingQuotaExceeded(Exception):
    def __init__(self, throttle_ms: int) -> None:
        super().__init__(THROTTLED)
        self.throttle_ms = throttle_ms


class ControllerMutationQuotaManager(QuotaManager):
    """``controller_mutation_rate``: partitions created or deleted per second (KIP-599)."""

    def __init__(self, quotas: Callable[[], Mapping[str, Mapping[str, float]]],
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(MUTATION, quotas, clock)
        self.buckets: dict[Tags, TokenBucket] = {}

    def record(self, user: str, client_id: str, mutations: int, strict: bool) -> int:
        """Take ``mutations`` partitions from the client's bucket; the throttle time in ms that
        follows (0: in credit). Strict, a bucket already below zero refuses the mutations
        (:class:`ThrottlingQuotaExceeded`) and is left as it was."""
        found = self.quota_for(user, client_id)
        if found is None:
            return 0
        tags, rate = found
        now = self.clock()
        self._touch(tags, now)
        bucket = self.buckets.setdefault(tags, TokenBucket(now))
        if rate <= 0:
            if strict:
                raise ThrottlingQuotaExceeded(int(WINDOWS * WINDOW_S * 1000))
            return int(WINDOWS * WINDOW_S * 1000)
        credits = bucket.credits(rate, now)
        if strict and credits < 0:
            raise ThrottlingQuotaExceeded(_refill_ms(credits, rate))
        bucket.tokens -= mutations
        return _refill_ms(bucket.tokens, rate)

    def _drop(self, tags: Tags) -> None:
        self.buckets.pop(tags, None)

    def throttle_ms(self, user: str, client_id: str) -> int:
        """How long until the client's bucket is back at zero (0: in credit)."""
        found = self.quota_for(user, client_id)
        if found is None or found[0] not in self.buckets or found[1] <= 0:
            return 0
        return _refill_ms(self.buckets[found[0]].credits(found[1], self.clock()), found[1])


def _refill_ms(credits: float, rate: float) -> int:
    return 0 if credits >= 0 else round(-credits / rate * 1000)


def user_name(principal: str) -> str:
    """The quota user of a principal (``User:alice`` -> ``alice``), as Kafka's sanitized name."""
    return principal.partition(":")[2] or principal


# Kafka's JMX type of each quota kind, and its rate attribute (kafka.server:type=Produce,user=..,client-id=..)
QUOTA_METRICS = {PRODUCE: ("produce", "byte_rate"), FETCH: ("fetch", "byte_rate"), REQUEST: ("request", "request_time")}


def collect_quota_metrics(managers: Mapping[str, QuotaManager]):
    """Prometheus families of every measured quota entity (a collector's ``collect``)."""
    from prometheus_client.core import GaugeMetricFamily

    for kind, (jmx_type, rate_name) in QUOTA_METRICS.items():
        manager = managers.get(kind)
        if not isinstance(manager, ClientQuotaManager):
            continue
        rate = GaugeMetricFamily(f"kafka_server_{jmx_type}_{rate_name}",
                                 f"{kind} used per second by the quota entity", labels=["user", "client_id"])
        throttle = GaugeMetricFamily(f"kafka_server_{jmx_type}_throttle_time",
                                     "Milliseconds the quota entity's latest request was throttled",
                                     labels=["user", "client_id"])
        for (user, client_id), value, ms in manager.rates():
            rate.add_metric([user, client_id], value)
            throttle.add_metric([user, client_id], ms)
        yield rate
        yield throttle
