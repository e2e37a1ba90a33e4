"""Raw-protocol behaviours that clients depend on: epochs, topic ids, auto-create, sessions,
ListOffsets specials, idempotent sequences."""

from __future__ import annotations

import uuid

import pytest

from protocol import records as rb
from protocol.errors import ErrorCode
from tests.support.clients import create_topic
from tests.support.raw import RawClient


def metadata(c: RawClient, names, version=12, allow_auto=True):
    topics = None if names is None else [{"name": n, "topic_id": uuid.UUID(int=0)} for n in names]
    return c.call(3, version, {"topics": topics, "allow_auto_topic_creation": allow_auto,
                               "include_topic_authorized_operations": False})


def fetch(c: RawClient, topic_id, offset=0, leader_epoch=-1, version=16, session_id=0, session_epoch=-1, **kw):
    return c.call(1, version, {
        "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "session_id": session_id,
        "session_epoch": session_epoch,
        "topics": [{"topic_id": topic_id, "topic": kw.get("topic", ""), "partitions": [
            {"partition": 0, "current_leader_epoch": leader_epoch, "fetch_offset": offset,
             "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": []})


def produce(c: RawClient, topic: str, batch: bytes, version=9):
    resp = c.call(0, version, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    return resp.responses[0].partition_responses[0]


def idem_batch(pid: int, epoch: int, seq: int, n: int = 2) -> bytes:
    return bytes(rb.build_batch([(b"k", b"v%d" % i) for i in range(n)], timestamp=1_700_000_000_000,
                                producer_id=pid, producer_epoch=epoch, base_sequence=seq))


@pytest.fixture
def topic(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    return topic_name


def test_metadata_null_lists_all_and_empty_lists_none(broker, topic):
    with RawClient(broker.bootstrap) as c:
        assert topic in {t.name for t in metadata(c, None).topics}
        assert metadata(c, []).topics == ()
        # v0: an empty list means all topics.
        assert topic in {t.name for t in c.call(3, 0, {"topics": []}).topics}


def test_auto_create_answers_leader_not_available_then_exists(broker, topic_name):
    with RawClient(broker.bootstrap) as c:
        first = metadata(c, [topic_name]).topics[0]
        assert first.error_code == ErrorCode.leader_not_available
        second = metadata(c, [topic_name]).topics[0]
        assert second.error_code == ErrorCode.none and len(second.partitions) == 1


def test_no_auto_create_when_request_forbids_it(broker, topic_name):
    with RawClient(broker.bootstrap) as c:
        t = metadata(c, [topic_name], allow_auto=False).topics[0]
        assert t.error_code == ErrorCode.unknown_topic_or_partition
        assert metadata(c, [topic_name], allow_auto=False).topics[0].error_code == \
            ErrorCode.unknown_topic_or_partition


def test_illegal_topic_name(broker):
    with RawClient(broker.bootstrap) as c:
        assert metadata(c, ["bad/name"]).topics[0].error_code == ErrorCode.invalid_topic_exception


def test_unknown_topic_id_in_metadata_and_fetch(broker):
    unknown = uuid.uuid4()
    with RawClient(broker.bootstrap) as c:
        resp = c.call(3, 12, {"topics": [{"name": None, "topic_id": unknown}],
                              "allow_auto_topic_creation": False})
        assert resp.topics[0].error_code == ErrorCode.unknown_topic_id
        part = fetch(c, unknown).responses[0].partitions[0]
        assert part.error_code == ErrorCode.unknown_topic_id


def test_recreated_topic_gets_new_id(broker, topic):
    from tests.support.clients import admin

    with RawClient(broker.bootstrap) as c:
        old_id = metadata(c, [topic]).topics[0].topic_id
    client = admin(broker.bootstrap)
    client.delete_topics([topic], operation_timeout=10)[topic].result(15)
    create_topic(broker.bootstrap, topic, 1)
    with RawClient(broker.bootstrap) as c:
        new_id = metadata(c, [topic]).topics[0].topic_id
        assert new_id != old_id
        assert fetch(c, old_id).responses[0].partitions[0].error_code == ErrorCode.unknown_topic_id


def test_leader_epoch_fencing_in_fetch(own_broker, topic_name):
    b = own_broker()
    create_topic(b.bootstrap, topic_name, 1)
    b.restart()  # leader epoch 1, so that 0 is a real older epoch
    with RawClient(b.bootstrap) as c:
        t = metadata(c, [topic_name]).topics[0]
        epoch = t.partitions[0].leader_epoch
        assert epoch >= 1
        assert fetch(c, t.topic_id, leader_epoch=epoch).responses[0].partitions[0].error_code == 0
        assert fetch(c, t.topic_id, leader_epoch=epoch - 1).responses[0].partitions[0].error_code == \
            ErrorCode.fenced_leader_epoch
        assert fetch(c, t.topic_id, leader_epoch=epoch + 1).responses[0].partitions[0].error_code == \
            ErrorCode.unknown_leader_epoch


def test_leader_epoch_bumped_on_every_start(own_broker, topic_name):
    b = own_broker()
    create_topic(b.bootstrap, topic_name, 1)
    epochs = []
    for _ in range(3):
        with RawClient(b.bootstrap) as c:
            epochs.append(metadata(c, [topic_name]).topics[0].partitions[0].leader_epoch)
        b.restart()
    assert epochs == sorted(set(epochs)) and len(epochs) == 3


def test_an_unknown_fetch_session_is_not_found_unless_closed(broker, topic):
    """Kafka's FetchManager: an incremental fetch (epoch > 0) of an unknown session is
    FETCH_SESSION_ID_NOT_FOUND; closing one (epoch -1) answers sessionless, whether it existed
    or not (tests/integration/test_fetch_sessions.py has the rest)."""
    with RawClient(broker.bootstrap) as c:
        t = metadata(c, [topic]).topics[0]
        resp = fetch(c, t.topic_id, session_id=1234, session_epoch=1)
        assert (resp.error_code, resp.session_id, resp.responses) == (ErrorCode.fetch_session_id_not_found, 0, ())
        closed = fetch(c, t.topic_id, session_id=1234)
        assert closed.error_code == 0 and closed.session_id == 0 and len(closed.responses) == 1


def test_fetch_returns_first_batch_past_byte_limits(broker, topic):
    big = bytes(rb.build_batch([(b"k", b"x" * 50_000)], timestamp=1))
    with RawClient(broker.bootstrap) as c:
        assert produce(c, topic, big).error_code == 0
        t = metadata(c, [topic]).topics[0]
        resp = c.call(1, 16, {"max_wait": 0, "min_bytes": 1, "max_bytes": 100, "topics": [
            {"topic_id": t.topic_id, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                     "partition_max_bytes": 100}]}],
            "forgotten_topics_data": []})
        records = resp.responses[0].partitions[0].records
        assert records and len(records) == len(big)


def test_fetch_out_of_range(broker, topic):
    with RawClient(broker.bootstrap) as c:
        t = metadata(c, [topic]).topics[0]
        assert fetch(c, t.topic_id, offset=10_000).responses[0].partitions[0].error_code == \
            ErrorCode.offset_out_of_range


def test_list_offsets_specials(broker, topic):
    with RawClient(broker.bootstrap) as c:
        for i, ts in enumerate([1000, 5000, 3000]):
            batch = bytes(rb.build_batch([(b"k", b"v")], timestamp=ts))
            assert produce(c, topic, batch).base_offset == i

        def lookup(ts):
            resp = c.call(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                                "timestamp": ts}]}]})
            p = resp.topics[0].partitions[0]
            return p.error_code, p.offset, p.timestamp

        assert lookup(-2) == (0, 0, -1)
        assert lookup(-1) == (0, 3, -1)
        assert lookup(-3) == (0, 1, 5000)
        assert lookup(2000) == (0, 1, 5000)
        assert lookup(4000) == (0, 1, 5000)
        assert lookup(9000) == (0, -1, -1)


def test_idempotent_retry_inside_window_gets_original_offset(broker, topic):
    with RawClient(broker.bootstrap) as c:
        init = c.call(22, 4, {"transactional_id": None, "transaction_timeout": 60000,
                              "producer_id": -1, "producer_epoch": -1})
        pid, epoch = init.producer_id, init.producer_epoch
        offsets = [produce(c, topic, idem_batch(pid, epoch, seq * 2)).base_offset for seq in range(6)]
        retry = produce(c, topic, idem_batch(pid, epoch, 6))  # the 4th batch, resent
        assert (retry.error_code, retry.base_offset) == (0, offsets[3])
        too_old = produce(c, topic, idem_batch(pid, epoch, 0))  # outside the 5-batch window
        assert too_old.error_code == ErrorCode.out_of_order_sequence_number
        gap = produce(c, topic, idem_batch(pid, epoch, 20))
        assert gap.error_code == ErrorCode.out_of_order_sequence_number
        stale = produce(c, topic, idem_batch(pid, epoch - 1 if epoch else -2, 12))
        assert stale.error_code in (ErrorCode.invalid_producer_epoch,)
        nxt = produce(c, topic, idem_batch(pid, epoch, 12))
        assert nxt.error_code == 0 and nxt.base_offset == offsets[-1] + 2


def test_producer_ids_are_never_reused_across_restarts(own_broker):
    b = own_broker()
    seen = set()
    for _ in range(2):
        with RawClient(b.bootstrap) as c:
            for _ in range(5):
                pid = c.call(22, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                     "producer_id": -1, "producer_epoch": -1}).producer_id
                assert pid not in seen
                seen.add(pid)
        b.restart(kill=True)


def test_produce_v2_is_refused_with_unsupported_version(broker, topic):
    import struct

    with RawClient(broker.bootstrap) as c:
        name = topic.encode()
        body = struct.pack(">hii", 1, 5000, 1) + struct.pack(">h", len(name)) + name + \
            struct.pack(">iii", 1, 0, 0)
        c.send_frame(RawClient.header(0, 2, 9, header_version=1) + body)
        frame = c.recv_frame()
    assert frame is not None
    (cid, n_topics) = struct.unpack_from(">ii", frame, 0)
    assert (cid, n_topics) == (9, 1)
    pos = 8 + 2 + len(name)
    (n_parts, index, error) = struct.unpack_from(">iih", frame, pos)
    assert (n_parts, index, error) == (1, 0, ErrorCode.unsupported_version)
