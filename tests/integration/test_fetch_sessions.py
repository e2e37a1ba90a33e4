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


# --- sessions over several topics, isolation levels and concurrent fetches --------------------


def _create(bootstrap: str, partitions: int) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"sessions-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # referenced until the future is done
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    with RawClient(bootstrap) as c:  # until its partitions are led
        for _ in range(100):
            if all(e == 0 for _, e, _, _ in _fetch(c, name, SESSIONLESS, dict.fromkeys(range(partitions), 0),
                                                   max_wait=0)[2]):
                break
    return name


def _fetch_many(c: RawClient, session: tuple[int, int], topics: list[tuple[object, list[tuple[int, int]]]],
                forget: list[tuple[object, list[int]]] = (), version: int = 12, isolation: int = 0,
                max_wait: int = 100):
    """One Fetch naming each topic (a name, or from v13 a topic id) with its (partition, fetch
    offset) pairs as given, duplicates included: (error, session id, [(topic, partition, error,
    high watermark, log start offset, first offset of the records or None)])."""
    def by(t):
        return {"topic_id": t} if version >= 13 else {"topic": t}

    body = {
        "replica_id": -1, "max_wait": max_wait, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": isolation, "session_id": session[0], "session_epoch": session[1], "rack_id": "",
        "topics": [{**by(t), "partitions": [
            {"partition": p, "current_leader_epoch": -1, "fetch_offset": offset, "last_fetched_epoch": -1,
             "log_start_offset": -1, "partition_max_bytes": 1 << 20} for p, offset in pairs]}
            for t, pairs in topics],
        "forgotten_topics_data": [{**by(t), "partitions": list(ps)} for t, ps in forget],
    }
    resp = c.call(FETCH, version, body)
    return int(resp.error_code), resp.session_id, [
        (t.topic_id if version >= 13 else t.topic, p.partition_index, int(p.error_code), p.high_watermark,
         p.log_start_offset, _first_offset(p.records)) for t in resp.responses for p in t.partitions]


def _first_offset(records) -> int | None:
    from protocol import records as rb

    for _, header in rb.iter_batches(bytes(records or b"")):
        return header.base_offset
    return None


def _topic_id(bootstrap: str, topic: str) -> uuid.UUID:
    with RawClient(bootstrap) as c:
        md = c.call(3, 12, {"topics": [{"name": topic, "topic_id": uuid.UUID(int=0)}],
                            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    return md.topics[0].topic_id


def test_incremental_answers_keep_the_sessions_order(bootstrap):
    """Whatever order partitions changed or were named in, an incremental answer lists them in
    the session's order (a partition that returned records then moves to its end)."""
    topic = _create(bootstrap, 12)
    _produce(bootstrap, topic, dict.fromkeys(range(12), 1))
    with RawClient(bootstrap) as c:
        _, sid, _ = _fetch_many(c, FULL, [(topic, [(p, 1) for p in range(12)])], max_wait=0)
        try:
            _produce(bootstrap, topic, {9: 1})
            _produce(bootstrap, topic, {2: 1})
            assert [p for _, p, *_ in _fetch_many(c, (sid, 1), [])[2]] == [2, 9]
            # 7 and 3 named in that order and moved back to offset 0 (2 and 9 moved past what
            # they returned): answered 3, 7
            moves = [(7, 0), (3, 0), (9, 2), (2, 2)]
            assert [p for _, p, *_ in _fetch_many(c, (sid, 2), [(topic, moves)])[2]] == [3, 7]
        finally:
            _close(c, topic, sid)


def test_unknown_topics_are_answered_after_the_others(bootstrap, topic):
    """Partitions of a topic the broker does not have come after those it reads, in the answer
    and so in the session; a partition named twice is read once, where it was first named, at
    the offset it was named with last."""
    _produce(bootstrap, topic, {0: 3})
    _produce(bootstrap, topic, {0: 2})  # a batch of its own at offset 3
    missing = f"no-such-{uuid.uuid4().hex[:6]}"
    with RawClient(bootstrap) as c:
        error, sid, parts = _fetch_many(c, FULL, [(topic, [(0, 0)]), (missing, [(0, 0)]), (topic, [(2, 0)])],
                                        max_wait=0)
        try:
            assert error == 0 and sid != 0
            assert [(t, p, e) for t, p, e, *_ in parts] == [
                (topic, 0, 0), (topic, 2, 0), (missing, 0, ErrorCode.unknown_topic_or_partition)]
            _produce(bootstrap, topic, {2: 1, 0: 1})
            assert [(t, p) for t, p, *_ in _fetch_many(c, (sid, 1), [])[2]] == [(topic, 0), (topic, 2), (missing, 0)]
        finally:
            _close(c, topic, sid)
        _, _, parts = _fetch_many(c, SESSIONLESS, [(topic, [(0, 0), (0, 3)])], max_wait=0)
        assert [(p, first) for _, p, _, _, _, first in parts] == [(0, 3)]


def test_a_log_start_offset_moved_by_delete_records_is_told(bootstrap, topic):
    _produce(bootstrap, topic, {0: 5})
    with RawClient(bootstrap) as c:
        _, sid, _ = _fetch_many(c, FULL, [(topic, [(0, 5), (1, 0)])], max_wait=0)
        try:
            assert _fetch_many(c, (sid, 1), [], max_wait=0)[2] == []
            resp = c.call(21, 2, {"topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 3}]}],
                                  "timeout_ms": 10000})
            assert resp.topics[0].partitions[0].error_code == 0
            assert _fetch_many(c, (sid, 2), [])[2] == [(topic, 0, 0, 5, 3, None)]
        finally:
            _close(c, topic, sid)


def test_a_session_read_committed_then_read_uncommitted_reads_past_the_open_transaction(bootstrap, topic):
    """What a read_committed fetch read to its end (the last stable offset) is not the end for
    a read_uncommitted fetch of the same session."""
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"sessions-{uuid.uuid4().hex[:6]}"})
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(3):
        txn.produce(topic, value=b"open-%d" % i, partition=0)
    assert txn.flush(30) == 0
    try:
        with RawClient(bootstrap) as c:
            _, sid, parts = _fetch_many(c, FULL, [(topic, [(0, 0)])], isolation=1, max_wait=0)
            try:
                assert parts == [(topic, 0, 0, 3, 0, None)]  # nothing below the last stable offset
                assert _fetch_many(c, (sid, 1), [], isolation=1, max_wait=0)[2] == []
                assert _fetch_many(c, (sid, 2), [], isolation=0, max_wait=0)[2] == [(topic, 0, 0, 3, 0, 0)]
            finally:
                _close(c, topic, sid)
    finally:
        txn.abort_transaction(30)


def test_a_session_partition_of_a_topic_made_again_is_an_inconsistent_topic_id(bootstrap):
    """By topic id (v13+), a session holds the topic it was given: once that topic is deleted
    and another made under its name, its partitions answer INCONSISTENT_TOPIC_ID rather than
    the new topic's records."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.support.cluster import wait_for

    topic = _create(bootstrap, 2)
    old_id = _topic_id(bootstrap, topic)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    with RawClient(bootstrap) as c:
        _, sid, _ = _fetch_many(c, FULL, [(old_id, [(0, 0), (1, 0)])], version=13, max_wait=0)
        epoch = 1
        try:
            admin.delete_topics([topic])[topic].result(30)

            def made_again() -> bool:
                try:
                    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
                    return True
                except Exception:  # noqa: BLE001  (Kafka deletes in the background: TOPIC_ALREADY_EXISTS meanwhile)
                    return False

            wait_for(made_again, 60, "the topic made again", interval=0.5)
            wait_for(lambda: _topic_id(bootstrap, topic) not in (old_id, uuid.UUID(int=0)), 30, "its new id")
            _produce(bootstrap, topic, {0: 1, 1: 1})
            for _ in range(2):  # on every fetch, not just once
                error, answered, parts = _fetch_many(c, (sid, epoch), [], version=13)
                epoch += 1
                assert (error, answered) == (0, sid)
                assert [(t, p, e) for t, p, e, *_ in parts] == [
                    (old_id, 0, ErrorCode.inconsistent_topic_id), (old_id, 1, ErrorCode.inconsistent_topic_id)]
        finally:
            _fetch_many(c, (sid, CLOSE), [], version=13, max_wait=0)


def test_a_fetch_overtaken_by_another_of_its_session_answers_invalid_epoch(bootstrap, topic):
    """Two fetches of one session at once (a client retrying): the one that waited finds the
    session moved on and answers INVALID_FETCH_SESSION_EPOCH when data arrives, not a stale
    answer after its whole wait; with its session closed meanwhile it answers what arrived."""
    import threading
    import time

    with RawClient(bootstrap) as a, RawClient(bootstrap) as b:
        _, sid, _ = _fetch_many(a, FULL, [(topic, [(0, 0), (1, 0)])], max_wait=0)
        result: dict = {}

        def waiting(epoch: int, named=()) -> threading.Thread:
            t = threading.Thread(target=lambda: result.update(a=_fetch_many(a, (sid, epoch), list(named),
                                                                            max_wait=5000)))
            t.start()
            time.sleep(0.5)  # its request is in before the other one's (either order answers 71)
            return t

        t = waiting(1)
        assert _fetch_many(b, (sid, 2), [], max_wait=0)[:2] == (0, sid)
        _produce(bootstrap, topic, {0: 2})
        t.join(30)
        assert result["a"] == (ErrorCode.invalid_fetch_session_epoch, sid, []) or \
            result["a"][:2] == (ErrorCode.invalid_fetch_session_epoch, 0)
        t = waiting(3, [(topic, [(0, 2)])])  # past p0's records: it waits
        assert _fetch_many(b, (sid, CLOSE), [], max_wait=0)[:2] == (0, 0)
        _produce(bootstrap, topic, {1: 1})
        t.join(30)
        error, answered, parts = result["a"]
        assert error == 0 and [(p, first) for _, p, _, _, _, first in parts if first is not None] == [(1, 0)]
