"""The versions added to reach Apache Kafka 4.3.1's ranges, over a real socket, pinned to the
answers a real Kafka 4.3.1 broker gives to the same raw requests (each also passes against
``compat/kafka/kraft.py``; KIP-1166's follower long poll is shown on the cluster, in
``tests/cluster/test_cluster_wire.py``): Produce 12-13, Fetch 17-18,
ListOffsets 8-11, Metadata 13, FindCoordinator 6, DescribeLogDirs 5."""

from __future__ import annotations

import base64
import time
import uuid

import pytest

from protocol import records as rb
from protocol.errors import ErrorCode
from tests.support.clients import create_topic
from tests.support.raw import RawClient

# What Kafka 4.3.1 advertises for the APIs this branch raised (ApiVersions v3, KRaft broker).
KAFKA_4_3_RANGES = {0: (0, 13), 1: (4, 18), 2: (1, 11), 3: (0, 13), 10: (0, 6), 35: (1, 5)}


@pytest.fixture
def topic(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    return topic_name


def topic_id(c: RawClient, topic: str) -> uuid.UUID:
    resp = c.call(3, 13, {"topics": [{"name": topic, "topic_id": uuid.UUID(int=0)}],
                          "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    assert resp.error_code == ErrorCode.none
    return resp.topics[0].topic_id


def batch(timestamp: int = 1_700_000_000_000) -> bytes:
    return bytes(rb.build_batch([(b"k", b"v")], timestamp=timestamp))


def produce_by_id(c: RawClient, tid: uuid.UUID | None, records: bytes, acks: int = -1):
    return c.call(0, 13, {"transactional_id": None, "acks": acks, "timeout": 5000, "topic_data": [
        {"topic_id": tid, "partition_data": [{"index": 0, "records": records}]}]})


def fetch(c: RawClient, tid: uuid.UUID, version: int, offset: int = 0, max_wait: int = 0,
          min_bytes: int = 0, replica_id: int = -1, **partition_fields):
    return c.call(1, version, fetch_fields(tid, offset, max_wait, min_bytes, replica_id, **partition_fields))


def fetch_fields(tid: uuid.UUID, offset: int = 0, max_wait: int = 0, min_bytes: int = 0, replica_id: int = -1,
                 **partition_fields) -> dict:
    """A Fetch v12+ request for partition 0 of ``tid``, as kio field names."""
    return {
        "replica_state": {"replica_id": replica_id, "replica_epoch": -1},
        "max_wait": max_wait, "min_bytes": min_bytes, "max_bytes": 1 << 20, "session_id": 0,
        "session_epoch": -1, "forgotten_topics_data": [],
        "topics": [{"topic_id": tid, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
             "partition_max_bytes": 1 << 20, **partition_fields}]}]}


def list_offset(c: RawClient, topic: str, version: int, timestamp: int, isolation: int = 0):
    resp = c.call(2, version, {"replica_id": -1, "isolation_level": isolation, "timeout": 1000,
                               "topics": [{"name": topic, "partitions": [
                                   {"partition_index": 0, "current_leader_epoch": -1,
                                    "timestamp": timestamp}]}]})
    p = resp.topics[0].partitions[0]
    return int(p.error_code), p.offset, p.timestamp, getattr(p, "leader_epoch", None)


def test_api_versions_reach_kafka_4_3(broker):
    with RawClient(broker.bootstrap) as c:
        resp = c.call(18, 3, {"client_software_name": "t", "client_software_version": "1"})
    ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert {key: ranges[key] for key in KAFKA_4_3_RANGES} == KAFKA_4_3_RANGES


def test_produce_v13_by_topic_id_answers_by_id(broker, topic):
    with RawClient(broker.bootstrap) as c:
        tid = topic_id(c, topic)
        offsets = []
        for _ in range(2):
            resp = produce_by_id(c, tid, batch())
            assert resp.responses[0].topic_id == tid
            p = resp.responses[0].partition_responses[0]
            assert p.error_code == ErrorCode.none
            offsets.append(p.base_offset)
        assert offsets == [0, 1]
        # The records landed in the topic the id names.
        part = fetch(c, tid, 18).responses[0].partitions[0]
        assert [h.base_offset for _, h in rb.iter_batches(part.records)] == [0, 1]


@pytest.mark.parametrize("tid", [uuid.uuid4(), None], ids=["unknown", "zero"])
def test_produce_v13_unknown_topic_id(broker, tid):
    with RawClient(broker.bootstrap) as c:
        resp = produce_by_id(c, tid, batch())
    topic_resp = resp.responses[0]
    assert topic_resp.topic_id == tid
    p = topic_resp.partition_responses[0]
    assert (p.error_code, p.base_offset, p.log_start_offset, p.error_message) == \
        (ErrorCode.unknown_topic_id, -1, -1, None)


def test_produce_v12_is_v11_by_name(broker, topic):
    with RawClient(broker.bootstrap) as c:
        resp = c.call(0, 12, {"transactional_id": None, "acks": 1, "timeout": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": batch()}]}]})
    assert resp.responses[0].name == topic
    p = resp.responses[0].partition_responses[0]
    assert (p.error_code, p.base_offset) == (ErrorCode.none, 0)


@pytest.mark.parametrize("version", [17, 18])
def test_consumer_fetch_v17_v18(broker, topic, version):
    with RawClient(broker.bootstrap) as c:
        tid = topic_id(c, topic)
        produce_by_id(c, tid, batch())
        # A consumer leaves the new tagged fields at their defaults; sent anyway they change nothing.
        resp = fetch(c, tid, version, replica_directory_id=uuid.uuid4(), high_watermark=0)
    assert resp.error_code == ErrorCode.none
    part = resp.responses[0].partitions[0]
    assert (part.error_code, part.high_watermark) == (ErrorCode.none, 1)
    assert [h.base_offset for _, h in rb.iter_batches(part.records)] == [0]


def test_fetch_from_a_broker_outside_the_assignment_is_refused(broker, topic):
    """Kafka's leader refuses a follower fetch from a broker that is no replica of the
    partition (one a reassignment removed, or added before the leader saw it) so that it
    retries: UNKNOWN_LEADER_EPOCH when the fetch names the leader epoch, else
    NOT_LEADER_OR_FOLLOWER (the answers of a Kafka 4.3.1 broker to replica id 99)."""
    with RawClient(broker.bootstrap, timeout=15) as c:
        tid = topic_id(c, topic)
        produce_by_id(c, tid, batch())
        for epoch, code in ((-1, ErrorCode.not_leader_or_follower), (0, ErrorCode.unknown_leader_epoch)):
            part = fetch(c, tid, 18, offset=1, replica_id=99, current_leader_epoch=epoch).responses[0].partitions[0]
            assert (part.error_code, part.high_watermark) == (code, -1)
        assert fetch(c, tid, 18, offset=1).responses[0].partitions[0].high_watermark == 1


def test_list_offsets_special_timestamps_by_version(broker, topic):
    """Kafka 4.3.1's answers, error/offset/timestamp/leader epoch, for each special timestamp:
    below the version that introduced it, UNSUPPORTED_VERSION (35) for the partition."""
    with RawClient(broker.bootstrap) as c:
        tid = topic_id(c, topic)
        for ts in (1000, 5000, 3000):
            produce_by_id(c, tid, batch(ts))
        unsupported = (35, -1, -1, -1)
        assert list_offset(c, topic, 6, -3) == unsupported
        assert list_offset(c, topic, 7, -3) == (0, 1, 5000, 0)
        assert list_offset(c, topic, 7, -4) == unsupported
        assert list_offset(c, topic, 3, -4) == (35, -1, -1, None)  # no leader epoch before v4
        for version in (8, 9, 10, 11):
            assert list_offset(c, topic, version, -1) == (0, 3, -1, 0)
            assert list_offset(c, topic, version, -2) == (0, 0, -1, 0)
            # -4 earliest local: without tiered storage, the log start offset.
            assert list_offset(c, topic, version, -4) == (0, 0, -1, 0)
        assert list_offset(c, topic, 8, -5) == unsupported
        # -5 latest tiered and -6 earliest pending upload: nothing is tiered, so no offset.
        for version in (9, 10, 11):
            assert list_offset(c, topic, version, -5) == (0, -1, -1, -1)
        assert list_offset(c, topic, 10, -6) == unsupported
        assert list_offset(c, topic, 11, -6) == (0, -1, -1, -1)
        assert list_offset(c, topic, 11, -6, isolation=1) == (0, -1, -1, -1)
        for version in (1, 7, 11):
            assert list_offset(c, topic, version, -7)[0] == ErrorCode.unsupported_version
        assert list_offset(c, topic, 11, 2000) == (0, 1, 5000, 0)


def test_metadata_v13_top_level_error_code(broker, topic):
    """The top-level error code is NONE, also when a requested topic has an error."""
    with RawClient(broker.bootstrap) as c:
        tid = topic_id(c, topic)
        by_id = c.call(3, 13, {"topics": [{"name": None, "topic_id": tid}],
                               "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
        unknown = c.call(3, 13, {"topics": [{"name": None, "topic_id": uuid.uuid4()}],
                                 "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
        everything = c.call(3, 13, {"topics": None, "allow_auto_topic_creation": False,
                                    "include_topic_authorized_operations": False})
    assert [(t.error_code, t.name, len(t.partitions)) for t in by_id.topics] == [(ErrorCode.none, topic, 1)]
    assert [t.error_code for t in unknown.topics] == [ErrorCode.unknown_topic_id]
    assert topic in {t.name for t in everything.topics}
    assert (by_id.error_code, unknown.error_code, everything.error_code) == (ErrorCode.none,) * 3


def test_find_coordinator_v6_share_key_names_the_share_coordinator(broker):
    """A well-formed share-partition key names the leader of its ``__share_group_state``
    partition (this broker); malformed ones are INVALID_REQUEST, as Kafka 4.3.1 answers."""
    topic_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    with RawClient(broker.bootstrap) as c:
        share = c.call(10, 6, {"key_type": 2, "coordinator_keys": [f"g:{uuid.uuid4()}:0", "garbage"]})
        assert [(k.error_code, k.node_id, k.host, k.port) for k in share.coordinators] == \
            [(ErrorCode.invalid_request, -1, "", -1)] * 2
        for _ in range(50):  # the state topic is created on first use
            (found,) = c.call(10, 6, {"key_type": 2, "coordinator_keys": [f"g:{topic_id}:0"]}).coordinators
            if found.error_code == ErrorCode.none:
                break
            time.sleep(0.1)
        assert (found.error_code, found.node_id) == (ErrorCode.none, 1)
        group = c.call(10, 6, {"key_type": 0, "coordinator_keys": ["g1"]})
        for _ in range(50):  # the offsets topic is created on first use
            if group.coordinators[0].error_code == ErrorCode.none:
                break
            time.sleep(0.1)
            group = c.call(10, 6, {"key_type": 0, "coordinator_keys": ["g1"]})
        assert group.coordinators[0].error_code == ErrorCode.none and group.coordinators[0].node_id >= 0


def test_describe_log_dirs_v5_is_not_cordoned(broker, topic):
    with RawClient(broker.bootstrap) as c:
        resp = c.call(35, 5, {"topics": [{"topic": topic, "partitions": [0]}]})
    assert resp.error_code == ErrorCode.none
    [result] = resp.results
    assert (result.error_code, result.is_cordoned) == (ErrorCode.none, False)
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in result.topics] == [(topic, [0])]


def test_kafka_python_infers_kafka_4_3(broker):
    """kafka-python guesses the broker's release from ApiVersions; DescribeLogDirs v5 and
    ListOffsets v11 are its markers for 4.3 and 4.2 (before this branch it guessed 3.8)."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        assert admin._client.check_version() == (4, 3)
    finally:
        admin.close()


def test_list_offsets_earliest_answers_the_epoch_of_the_first_record(own_broker, topic_name):
    """After a restart (a new leader epoch) -2 and -4 answer the epoch the log start offset was
    written in, -1 the current one (Kafka's fetchOffsetByTimestamp)."""
    b = own_broker()
    create_topic(b.bootstrap, topic_name, 1)
    with RawClient(b.bootstrap) as c:
        produce_by_id(c, topic_id(c, topic_name), batch())
        first_epoch = list_offset(c, topic_name, 11, -2)[3]
    b.restart()
    with RawClient(b.bootstrap) as c:
        assert list_offset(c, topic_name, 11, -2) == (0, 0, -1, first_epoch)
        assert list_offset(c, topic_name, 11, -4) == (0, 0, -1, first_epoch)
        error, offset, _, current_epoch = list_offset(c, topic_name, 11, -1)
        assert (error, offset) == (0, 1) and current_epoch > first_epoch
