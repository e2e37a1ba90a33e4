"""A producer over its ``producer_byte_rate`` gets its quota and no more, and a producer without one
keeps its rate beside it: our broker and Apache Kafka 4.3.1 by the same script. The rate test
runs for more than a minute, so it is ``slow`` on both (``make parity`` runs it on both sides);
the rude-client test runs on ours in ``make test``.

Two confluent-kafka producers on one broker: ``limited`` (quota 1 MB/s for its client id) sends
as fast as it can; ``free`` (no quota) offers 3 MB/s, paced. Counted: the bytes each had
acknowledged in the ``SECONDS`` after a warm-up of one quota window (``WARMUP``: a fresh client
may send ten seconds' worth at once, on both brokers alike, which over 30 s alone makes 1.3x the
quota), and the throttle times the limited one was told (librdkafka's ``throttle_cb``).
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from tests.support.parity import TARGETS, single_broker
from tests.support.raw import RawClient

SECONDS = 30.0
WARMUP = 11.0  # quota.window.num x quota.window.size.seconds
QUOTA = 1024 * 1024  # bytes per second
FREE_RATE = 3 * 1024 * 1024
VALUE = b"q" * 10_000


@pytest.fixture(scope="module", params=TARGETS)
def bootstrap(request, tmp_path_factory):
    yield from single_broker(request.param, tmp_path_factory)


def _set_quota(bootstrap: str, client_id: str, rate: float = QUOTA, key: str = "producer_byte_rate") -> None:
    with RawClient(bootstrap) as c:
        resp = c.call(49, 1, {"validate_only": False, "entries": [
            {"entity": [{"entity_type": "client-id", "entity_name": client_id}],
             "ops": [{"key": key, "value": float(rate), "remove": False}]}]})
    assert [e.error_code for e in resp.entries] == [0], resp


class Sender(threading.Thread):
    def __init__(self, bootstrap: str, topic: str, client_id: str, rate: float | None, deadline: float) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self.throttles: list[int] = []
        self.producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "acks": 1,
                                  "linger.ms": 5, "compression.type": "none",
                                  "throttle_cb": lambda event: self.throttles.append(event.throttle_time)})
        self.topic, self.rate, self.deadline = topic, rate, deadline
        self.counted_from = deadline - SECONDS
        self.acked = 0
        self.errors: list = []

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.errors.append(err)
        elif self.counted_from <= time.monotonic() <= self.deadline:
            self.acked += len(msg.value())

    def run(self) -> None:
        started, sent = time.monotonic(), 0
        while time.monotonic() < self.deadline:
            if self.rate is not None and sent > (time.monotonic() - started) * self.rate:
                self.producer.poll(0.01)
                continue
            try:
                self.producer.produce(self.topic, VALUE, callback=self._delivered)
                sent += len(VALUE)
            except BufferError:
                self.producer.poll(0.05)
            self.producer.poll(0)
        self.producer.flush(30)
        # Its throttle callback holds this thread: without the reference dropped, the cycle keeps
        # the client (and its reconnect attempts) alive after the broker is gone.
        self.producer = None


@pytest.mark.slow
@pytest.mark.parity_slow
def test_a_limited_producer_gets_its_quota_and_an_unlimited_one_keeps_its_rate(bootstrap):
    from tests.support.clients import create_topic

    topic = f"quota-rate-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 2)
    limited_id = f"limited-{uuid.uuid4().hex[:6]}"
    _set_quota(bootstrap, limited_id)
    time.sleep(2)  # Kafka applies a new quota asynchronously
    deadline = time.monotonic() + WARMUP + SECONDS
    limited = Sender(bootstrap, topic, limited_id, None, deadline)
    free = Sender(bootstrap, topic, f"free-{uuid.uuid4().hex[:6]}", FREE_RATE, deadline)
    for s in (limited, free):
        s.start()
    for s in (limited, free):
        s.join(WARMUP + SECONDS + 60)
    assert not limited.errors and not free.errors, (limited.errors[:3], free.errors[:3])
    limited_rate, free_rate = limited.acked / SECONDS, free.acked / SECONDS
    assert 0.8 * QUOTA <= limited_rate <= 1.2 * QUOTA, f"limited producer: {limited_rate / QUOTA:.2f} x its quota"
    assert any(t > 0 for t in limited.throttles), "the limited producer was never told to back off"
    assert free_rate >= 0.9 * FREE_RATE, f"unlimited producer: {free_rate / FREE_RATE:.2f} x what it offered"
    assert not any(t > 0 for t in free.throttles)


RUDE_QUOTA = 256 * 1024  # bytes per second
RUDE_SECONDS = 6.0


def test_a_client_that_ignores_its_throttle_gains_nothing(bootstrap):
    """A raw client that sends its next Produce as soon as the last one is answered, whatever
    ``throttle_time_ms`` said: the broker mutes its connection for that long (KIP-219), so over
    ``RUDE_SECONDS`` it gets no more than its quota allows over the quota window and that time
    (without the mute it would get a hundred times that on loopback)."""
    from protocol import records as rb
    from tests.support.clients import create_topic
    from tests.support.raw import produce_request

    topic = f"quota-rude-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 1)
    rude = f"rude-{uuid.uuid4().hex[:6]}"
    _set_quota(bootstrap, rude, RUDE_QUOTA)
    time.sleep(2)  # Kafka applies a new quota asynchronously
    batch = bytes(rb.build_batch([(None, b"r" * 100_000)], timestamp=int(time.time() * 1000)))
    acked, throttles = 0, []
    with RawClient(bootstrap, timeout=30) as c:
        c.client_id = rude
        deadline = time.monotonic() + RUDE_SECONDS
        while time.monotonic() < deadline:
            r = c.request(0, 9, produce_request(topic, batch, acks=1))
            assert r.responses[0].partition_responses[0].error_code == 0, r
            acked += len(batch)
            throttles.append(r.throttle_time.total_seconds())
    allowed = RUDE_QUOTA * (RUDE_SECONDS + WARMUP)  # a fresh client's burst, then the quota
    assert acked <= 1.2 * allowed, f"{acked / allowed:.2f} x what the quota allows"
    assert max(throttles) > 0, "never told to back off"


def _produce_raw(bootstrap: str, topic: str, client_id: str, size: int, batches: int = 1) -> list[float]:
    """``batches`` Produce requests of one ``size``-byte record each from ``client_id`` on one
    connection (closed afterwards, so a mute costs nothing); their throttle times in seconds."""
    from protocol import records as rb
    from tests.support.raw import produce_request

    batch = bytes(rb.build_batch([(None, b"p" * size)], timestamp=int(time.time() * 1000)))
    throttles = []
    with RawClient(bootstrap, timeout=60) as c:
        c.client_id = client_id
        for _ in range(batches):
            r = c.request(0, 9, produce_request(topic, batch, acks=1))
            assert r.responses[0].partition_responses[0].error_code == 0, r
            throttles.append(r.throttle_time.total_seconds())
    return throttles


def test_a_byte_rate_throttle_is_as_long_as_the_excess_takes_to_drain(bootstrap):
    """400 KB at once against 10 KB/s: (40 KB/s over the ten-second window - 10) / 10 x 10 s,
    30 s; Kafka bounds only the request quota's throttle (one window), not a byte rate's."""
    from tests.support.clients import create_topic

    topic = f"quota-long-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 1)
    client = f"long-{uuid.uuid4().hex[:6]}"
    _set_quota(bootstrap, client, 10_000)
    time.sleep(2)  # Kafka applies a new quota asynchronously
    (throttle,) = _produce_raw(bootstrap, topic, client, 400_000)
    assert 25 <= throttle <= 35, throttle


def test_a_client_measured_before_its_quota_is_throttled_on_what_it_sent(bootstrap):
    """Once a producer quota exists, every client's bytes are measured (Kafka's quotasEnabled):
    a client sending 300 KB unthrottled, then given a 20 KB/s quota, is throttled on its next
    small request for what it sent before."""
    from tests.support.clients import create_topic

    topic = f"quota-history-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 1)
    _set_quota(bootstrap, f"someone-else-{uuid.uuid4().hex[:6]}", 10_000)
    time.sleep(2)  # Kafka applies a new quota asynchronously
    client = f"history-{uuid.uuid4().hex[:6]}"
    assert _produce_raw(bootstrap, topic, client, 100_000, batches=3) == [0, 0, 0]
    _set_quota(bootstrap, client, 20_000)
    time.sleep(2)
    (throttle,) = _produce_raw(bootstrap, topic, client, 10_000)
    assert throttle > 2, throttle  # (310 KB / 10 s - 20 KB/s) / 20 KB/s x 10 s: about 5.5 s


def test_a_fetch_larger_than_the_quota_allows_at_once_still_gets_records(bootstrap):
    """A consumer at 50 KB/s asking for 1 MB at a time is given at most ten seconds' worth of
    its quota per fetch (Kafka's getMaxValueInQuotaWindow), so it moves on; without that bound
    every fetch would read 600 KB, be throttled, answered empty and never get anything."""
    from tests.support.clients import create_topic

    topic = f"quota-fetch-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 1)
    _produce_raw(bootstrap, topic, "quota-fetch-producer", 60_000, batches=10)
    client = f"consumer-{uuid.uuid4().hex[:6]}"
    _set_quota(bootstrap, client, 50_000, key="consumer_byte_rate")
    time.sleep(2)  # Kafka applies a new quota asynchronously
    got = []
    with RawClient(bootstrap, timeout=60) as c:
        c.client_id = client
        for _ in range(4):  # each throttled answer mutes the connection for its throttle time
            resp = c.call(1, 12, {
                "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
                "topics": [{"topic": topic, "partitions": [
                    {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                     "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})
            got.append(sum(len(p.records or b"") for t in resp.responses for p in t.partitions))
            if got[-1]:
                break
    assert got[-1] > 0, got
    assert got[-1] <= 10 * 50_000 + 61_000, got  # ten seconds' worth, and the batch that crosses it
