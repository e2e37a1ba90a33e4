"""Fetch sessions (KIP-227) on the wire: the same request sequences against our broker and Apache
Kafka 4.3.1 (``slow``) give the same error codes and the same partitions, in the same order.

Each target is one broker with room for sixteen sessions (``max.incremental.fetch.session.cache.slots
=16``: two in each of Kafka's eight cache shards, which new sessions fill in turn). Every test
closes the sessions it opens, so the next one finds the cache empty.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from protocol.errors import ErrorCode
from tests.integration.test_kafka_tools import kafka_libs  # noqa: F401  (fixture)
from tests.support.parity import TARGETS, single_broker
from tests.support.raw import RawClient

SLOTS = {"max.incremental.fetch.session.cache.slots": "16"}
FETCH = 1
SESSIONLESS, FULL, CLOSE = (0, -1), (0, 0), -1


@pytest.fixture(scope="module", params=TARGETS)
def bootstrap(request, tmp_path_factory):
    yield from single_broker(request.param, tmp_path_factory, SLOTS)


@pytest.fixture
def topic(bootstrap):
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"sessions-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # referenced until the future is done
    admin.create_topics([NewTopic(name, 3, 1)])[name].result(30)
    with RawClient(bootstrap) as c:  # until the partitions are led
        for _ in range(100):
            if _fetch(c, name, SESSIONLESS, {0: 0, 1: 0, 2: 0}, max_wait=0)[2] and all(
                    e == 0 for _, e, _, _ in _fetch(c, name, SESSIONLESS, {0: 0, 1: 0, 2: 0}, max_wait=0)[2]):
                break
    return name


def _produce(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for partition, n in counts.items():
        for i in range(n):
            p.produce(topic, value=b"r%d" % i, partition=partition)
    assert p.flush(30) == 0


def _fetch(c: RawClient, topic: str, session: tuple[int, int], partitions: dict[int, int],
           forget: list[int] = (), max_wait: int = 100, version: int = 12, topic_id: uuid.UUID | None = None,
           replica_id: int = -1):
    """One Fetch: (error code, session id, [(partition, error, high watermark, has records)])."""
    by = {"topic_id": topic_id} if version >= 13 else {"topic": topic}
    body = {
        "replica_id": replica_id, "max_wait": max_wait, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": session[0], "session_epoch": session[1], "rack_id": "",
        "topics": [{**by, "partitions": [
            {"partition": p, "current_leader_epoch": -1, "fetch_offset": offset, "last_fetched_epoch": -1,
             "log_start_offset": -1, "partition_max_bytes": 1 << 20} for p, offset in partitions.items()]}]
        if partitions else [],
        "forgotten_topics_data": [{**by, "partitions": list(forget)}] if forget else [],
    }
    resp = c.call(FETCH, version, body)
    parts = [(p.partition_index, int(p.error_code), p.high_watermark, bool(p.records))
             for t in resp.responses for p in t.partitions]
    return int(resp.error_code), resp.session_id, parts


def _close(c: RawClient, topic: str, session_id: int) -> None:
    if session_id:
        _fetch(c, topic, (session_id, CLOSE), {}, max_wait=0)


def test_full_then_incremental_answers_only_what_changed(bootstrap, topic):
    _produce(bootstrap, topic, {0: 5})
    with RawClient(bootstrap) as c:
        error, sid, parts = _fetch(c, topic, FULL, {0: 0, 1: 0, 2: 0})
        assert error == 0 and sid != 0
        assert parts == [(0, 0, 5, True), (1, 0, 0, False), (2, 0, 0, False)]
        try:
            # p0's position moves to 5: nothing is new anywhere, so nothing is answered.
            assert _fetch(c, topic, (sid, 1), {0: 5}) == (0, sid, [])
            _produce(bootstrap, topic, {1: 2})
            assert _fetch(c, topic, (sid, 2), {}) == (0, sid, [(1, 0, 2, True)])
            # p2 forgotten: its new record is not answered; p1 at its end: nothing either.
            assert _fetch(c, topic, (sid, 3), {1: 2}, forget=[2]) == (0, sid, [])
            _produce(bootstrap, topic, {2: 1})
            assert _fetch(c, topic, (sid, 4), {}) == (0, sid, [])
            # p2 added back: a partition new to the session is always answered once.
            assert _fetch(c, topic, (sid, 5), {2: 1}) == (0, sid, [(2, 0, 1, False)])
        finally:
            _close(c, topic, sid)


def test_partitions_that_returned_records_are_read_last_next_time(bootstrap, topic):
    with RawClient(bootstrap) as c:
        _, sid, _ = _fetch(c, topic, FULL, {0: 0, 1: 0, 2: 0}, max_wait=0)
        try:
            _produce(bootstrap, topic, {0: 1, 2: 1})
            assert [p for p, *_ in _fetch(c, topic, (sid, 1), {})[2]] == [0, 2]
            _produce(bootstrap, topic, {0: 1, 1: 1, 2: 1})
            # the session's order is now 1, 0, 2; positions stay where the client left them
            assert [p for p, *_ in _fetch(c, topic, (sid, 2), {0: 1, 2: 1})[2]] == [1, 0, 2]
        finally:
            _close(c, topic, sid)


def test_session_errors(bootstrap, topic):
    with RawClient(bootstrap) as c:
        _, sid, _ = _fetch(c, topic, FULL, {0: 0}, max_wait=0)
        assert _fetch(c, topic, (sid, 7), {}) == (ErrorCode.invalid_fetch_session_epoch, 0, [])
        assert _fetch(c, topic, (sid, 1), {}, max_wait=0)[:2] == (0, sid)  # the epoch did not move
        unknown = (sid % 1000) + 1 if sid > 1000 else sid + 1000
        assert _fetch(c, topic, (unknown, 1), {}) == (ErrorCode.fetch_session_id_not_found, 0, [])
        with RawClient(bootstrap) as c13:  # made without topic ids, used with them
            md = c13.call(3, 12, {"topics": [{"name": topic, "topic_id": uuid.UUID(int=0)}],
                                  "allow_auto_topic_creation": False,
                                  "include_topic_authorized_operations": False})
            tid = md.topics[0].topic_id
            assert _fetch(c13, topic, (sid, 2), {}, version=13, topic_id=tid) == \
                (ErrorCode.fetch_session_topic_id_error, 0, [])
        # Closing answers sessionless (every requested partition, session id 0); then it is gone.
        error, closed_sid, parts = _fetch(c, topic, (sid, CLOSE), {0: 0, 1: 0}, max_wait=0)
        assert (error, closed_sid, [p for p, *_ in parts]) == (0, 0, [0, 1])
        assert _fetch(c, topic, (sid, 2), {}) == (ErrorCode.fetch_session_id_not_found, 0, [])


def test_a_full_fetch_naming_a_session_replaces_it(bootstrap, topic):
    with RawClient(bootstrap) as c:
        _, first, _ = _fetch(c, topic, FULL, {0: 0}, max_wait=0)
        _, second, _ = _fetch(c, topic, (first, 0), {1: 0}, max_wait=0)
        try:
            assert second not in (0, first)
            assert _fetch(c, topic, (first, 1), {}) == (ErrorCode.fetch_session_id_not_found, 0, [])
        finally:
            _close(c, topic, second)


def test_a_full_cache_creates_no_session_for_a_consumer(bootstrap, topic):
    with RawClient(bootstrap) as c:
        opened = [_fetch(c, topic, FULL, {0: 0}, max_wait=0)[1] for _ in range(16)]
        try:
            assert all(opened)
            error, sid, parts = _fetch(c, topic, FULL, {0: 0, 1: 0, 2: 0}, max_wait=0)
            assert (error, sid, len(parts)) == (0, 0, 3)  # answered in full, without a session
        finally:
            for sid in opened:
                _close(c, topic, sid)
        again = _fetch(c, topic, FULL, {0: 0}, max_wait=0)[1]
        _close(c, topic, again)
        assert again != 0  # room again


@pytest.mark.kafka_tools
def test_the_java_consumer_fetches_in_an_incremental_session(own_broker, kafka_libs, topic_name):  # noqa: F811
    """Kafka's console consumer (the Java client 4.3) reads through a fetch session of its own:
    none is cached before it runs (librdkafka, which produced, fetches without one), one holding
    its three partitions while it runs, and none once it has closed it on exit."""
    import re
    import subprocess

    from tests.integration.test_kafka_tools import KAFKA_RUN
    from tests.integration.test_metrics import scrape
    from tests.support.clients import create_topic
    from tests.support.cluster import wait_for

    b = own_broker()

    def cached() -> tuple[float, float]:
        text = scrape(b)
        return tuple(float(re.search(rf"^kafka_server_fetchsessioncache_{name} (\S+)", text, re.M).group(1))
                     for name in ("numincrementalfetchsessions", "numincrementalfetchpartitionscached"))

    create_topic(b.bootstrap, topic_name, 3)
    p = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(30):
        p.produce(topic_name, value=f"r{i:02d}".encode(), partition=i % 3)
    assert p.flush(20) == 0
    assert cached() == (0.0, 0.0)
    consumer = subprocess.Popen([str(KAFKA_RUN), "kafka-console-consumer", "--bootstrap-server", b.bootstrap,
                                 "--topic", topic_name, "--from-beginning", "--timeout-ms", "8000"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        wait_for(lambda: cached() == (1.0, 3.0), 60, "the Java consumer's session")
        out, err = consumer.communicate(timeout=90)
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait(10)
    assert sorted(out.split()) == sorted(f"r{i:02d}" for i in range(30)), err[-2000:]
    assert cached() == (0.0, 0.0)  # closed (session epoch -1) when the consumer closed
