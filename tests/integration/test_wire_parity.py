"""Bad input on the wire: our broker answers exactly as Apache Kafka 4.3.1 does.

Each case is sent to our broker and to a real single-node KRaft Kafka (jars from Maven
Central, ``compat/kafka``) in the same run; the outcomes (error code, or closed connection,
or the raw bytes of the ApiVersions fallback) must be identical; error messages too where a case
compares them.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import uuid
from pathlib import Path

import pytest

from protocol import records as rb
from tests.support.clients import create_topic
from tests.support.raw import RawClient, good_batch, produce_request

pytestmark = pytest.mark.kafka_tools
REPO = Path(__file__).resolve().parents[2]
TOPIC = "wire-parity"


@pytest.fixture(scope="module")
def apache_kafka():
    if shutil.which("java") is None:
        pytest.skip("Java is not installed: Apache Kafka cannot run here")
    fetched = subprocess.run(["bash", str(REPO / "compat/kafka/fetch.sh")], capture_output=True,
                             text=True, timeout=900, check=False)
    assert fetched.returncode == 0, fetched.stderr[-2000:]
    from compat.kafka.kraft import kraft_broker

    with kraft_broker() as kb:
        create_topic(kb.bootstrap, TOPIC, 1)
        _wait_until_writable(kb.bootstrap)
        yield kb.bootstrap


@pytest.fixture(scope="module")
def ours(broker):
    create_topic(broker.bootstrap, TOPIC, 1)
    return broker.bootstrap


def _wait_until_writable(bootstrap: str, timeout: float = 30.0) -> None:
    """Right after CreateTopics Kafka may still answer NOT_LEADER_OR_FOLLOWER."""
    import time

    deadline = time.monotonic() + timeout
    while _produce_outcome(bootstrap, bytes(good_batch())) != "none":
        assert time.monotonic() < deadline, "Apache Kafka never accepted a produce"
        time.sleep(0.2)


def _produce_outcome(bootstrap: str, records: bytes, version: int = 9) -> str:
    with RawClient(bootstrap) as c:
        try:
            resp = c.request(0, version, produce_request(TOPIC, records))
        except ConnectionError:
            return "closed"
    return resp.responses[0].partition_responses[0].error_code.name


def _frame_outcome(bootstrap: str, frame: bytes) -> bytes | str:
    with RawClient(bootstrap) as c:
        c.send_frame(frame)
        reply = c.recv_frame()
    return "closed" if reply is None else reply


def _bad_crc() -> bytes:
    b = good_batch()
    b[-1] ^= 0xFF
    return bytes(b)


def _magic(m: int) -> bytes:
    b = good_batch()
    b[rb.MAGIC_OFFSET] = m
    return bytes(b)


PRODUCE_CASES = {
    "bad_crc": lambda: (_bad_crc(), 9),
    "magic_1": lambda: (_magic(1), 9),
    "magic_0": lambda: (_magic(0), 9),
    "two_batches": lambda: (bytes(good_batch() + good_batch()), 9),
    "truncated_batch": lambda: (bytes(good_batch()[:-5]), 9),
    "zstd_before_v7": lambda: (bytes(rb.build_batch([(b"k", b"v")], compression=4)), 6),
    "good": lambda: (bytes(good_batch()), 9),
}

FRAME_CASES = {
    "unknown_api_key": struct.pack(">hhih", 999, 0, 1, -1),
    "metadata_v99": RawClient.header(3, 99, 1, header_version=2),
    "api_versions_v127": struct.pack(">hhih", 18, 127, 42, -1) + b"\x00",
    "api_versions_v127_unreadable_header": struct.pack(">hhih", 18, 127, 42, -1),
    "api_versions_v5_with_body": struct.pack(">hhih", 18, 5, 43, 3) + b"abc\x00\x02a\x021\x00",
    "metadata_truncated_body": RawClient.header(3, 12, 1) + b"\x05\x02",
}


@pytest.mark.parametrize("case", sorted(PRODUCE_CASES))
def test_produce_error_matches_apache_kafka(case, ours, apache_kafka):
    records, version = PRODUCE_CASES[case]()
    assert _produce_outcome(ours, records, version) == _produce_outcome(apache_kafka, records, version)


@pytest.mark.parametrize("case", sorted(FRAME_CASES))
def test_frame_handling_matches_apache_kafka(case, ours, apache_kafka):
    frame = FRAME_CASES[case]
    assert _frame_outcome(ours, frame) == _frame_outcome(apache_kafka, frame)


# --- the versions raised to Kafka 4.3.1's ranges ------------------------------------------------

OFFSETS_TOPIC = "wire-parity-offsets"
SPECIAL_TIMESTAMPS = (-1, -2, -3, -4, -5, -6, -7, 2000)


def _offsets_topic(bootstrap: str) -> str:
    """A topic holding three records stamped 1000, 5000, 3000 (the same on both brokers)."""
    import time

    create_topic(bootstrap, OFFSETS_TOPIC, 1)
    deadline = time.monotonic() + 30
    for ts in (1000, 5000, 3000):
        batch = bytes(rb.build_batch([(b"k", b"v")], timestamp=ts))
        while True:
            with RawClient(bootstrap) as c:
                resp = c.request(0, 9, produce_request(OFFSETS_TOPIC, batch))
            if resp.responses[0].partition_responses[0].error_code == 0:
                break
            assert time.monotonic() < deadline, "the offsets topic never became writable"
            time.sleep(0.2)
    return bootstrap


def _list_offsets_table(bootstrap: str) -> dict:
    """(version, timestamp) -> (error code, offset, timestamp, leader epoch)."""
    table = {}
    with RawClient(bootstrap) as c:
        for version in range(1, 12):
            for ts in SPECIAL_TIMESTAMPS:
                resp = c.call(2, version, {"replica_id": -1, "isolation_level": 0, "timeout": 1000,
                                           "topics": [{"name": OFFSETS_TOPIC, "partitions": [
                                               {"partition_index": 0, "current_leader_epoch": -1,
                                                "timestamp": ts}]}]})
                p = resp.topics[0].partitions[0]
                table[version, ts] = (int(p.error_code), p.offset, p.timestamp, getattr(p, "leader_epoch", None))
    return table


def test_list_offsets_special_timestamps_match_apache_kafka(ours, apache_kafka):
    """Every ListOffsets version 1-11 with every special timestamp (-1 latest, -2 earliest,
    -3 max timestamp, -4 earliest local, -5 latest tiered, -6 earliest pending upload, -7
    undefined) and an ordinary one: the same error, offset, timestamp and leader epoch."""
    assert _list_offsets_table(_offsets_topic(ours)) == _list_offsets_table(_offsets_topic(apache_kafka))


def _produce_v13_outcome(bootstrap: str, topic_id) -> tuple:
    with RawClient(bootstrap) as c:
        resp = c.call(0, 13, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
            {"topic_id": topic_id, "partition_data": [{"index": 0, "records": bytes(good_batch())}]}]})
    topic = resp.responses[0]
    p = topic.partition_responses[0]
    return topic.topic_id == topic_id, p.error_code.name, p.base_offset, p.log_start_offset


@pytest.mark.parametrize("topic_id", [uuid.UUID(int=0x1234), None], ids=["unknown", "zero"])
def test_produce_v13_unknown_topic_id_matches_apache_kafka(topic_id, ours, apache_kafka):
    assert _produce_v13_outcome(ours, topic_id) == _produce_v13_outcome(apache_kafka, topic_id)


SHARE_KEY = "g:AAAAAAAAAAAAAAAAAAAAAA:0"  # groupId:topicId:partition, a well-formed share key


def _find_share_coordinator(bootstrap: str, version: int, keys: list[str]) -> list:
    with RawClient(bootstrap) as c:
        if version >= 4:
            resp = c.call(10, version, {"key_type": 2, "coordinator_keys": keys})
            return [(k.error_code.name, k.node_id, k.host, k.port) for k in resp.coordinators]
        resp = c.call(10, version, {"key_type": 2, "key": keys[0]})
        return [(resp.error_code.name, resp.node_id, resp.host, resp.port)]


@pytest.mark.parametrize("version, keys", [
    (1, [SHARE_KEY]), (3, [SHARE_KEY]), (4, [SHARE_KEY]), (5, [SHARE_KEY]),
    (6, ["g", "g:not-a-topic-id:0", "g:AAAAAAAAAAAAAAAAAAAAAA:x"]),
])
def test_find_coordinator_share_key_type_matches_apache_kafka(version, keys, ours, apache_kafka):
    """INVALID_REQUEST below v6 and for a malformed key at v6. (A well-formed key at v6 is
    where we differ: Kafka names its share coordinator, we have none; see p010's docstring.)"""
    assert _find_share_coordinator(ours, version, keys) == _find_share_coordinator(apache_kafka, version, keys)


def _metadata_v13_outcome(bootstrap: str) -> tuple:
    with RawClient(bootstrap) as c:
        resp = c.call(3, 13, {"topics": [{"name": TOPIC, "topic_id": uuid.UUID(int=0)}],
                              "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    return resp.error_code.name, [(t.error_code.name, t.name, len(t.partitions)) for t in resp.topics]


def test_metadata_v13_matches_apache_kafka(ours, apache_kafka):
    assert _metadata_v13_outcome(ours) == _metadata_v13_outcome(apache_kafka)


def _fetch_by_id_outcome(bootstrap: str, version: int, topic_id) -> tuple:
    with RawClient(bootstrap) as c:
        resp = c.call(1, version, {
            "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "session_id": 0, "session_epoch": -1,
            "forgotten_topics_data": [], "topics": [{"topic_id": topic_id, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "partition_max_bytes": 1024}]}]})
    return resp.error_code.name, [(t.topic_id == topic_id, [p.error_code.name for p in t.partitions])
                                  for t in resp.responses]


@pytest.mark.parametrize("version", [13, 16, 17, 18])
@pytest.mark.parametrize("topic_id", [uuid.UUID(int=0x1234), None], ids=["unknown", "zero"])
def test_fetch_unknown_topic_id_matches_apache_kafka(version, topic_id, ours, apache_kafka):
    assert _fetch_by_id_outcome(ours, version, topic_id) == _fetch_by_id_outcome(apache_kafka, version, topic_id)


def _list_offsets_missing_topic(bootstrap: str) -> list:
    """Which comes first, the unknown topic or the timestamp the version does not allow."""
    out = []
    with RawClient(bootstrap) as c:
        for version, ts in ((7, -4), (8, -4), (11, -7), (11, -5)):
            resp = c.call(2, version, {"replica_id": -1, "isolation_level": 0, "timeout": 1000,
                                       "topics": [{"name": "wire-parity-missing", "partitions": [
                                           {"partition_index": 0, "current_leader_epoch": -1, "timestamp": ts}]}]})
            out.append((version, ts, resp.topics[0].partitions[0].error_code.name))
    return out


def test_list_offsets_on_a_missing_topic_matches_apache_kafka(ours, apache_kafka):
    assert _list_offsets_missing_topic(ours) == _list_offsets_missing_topic(apache_kafka)


def _delete_by_name_and_id(bootstrap: str) -> tuple:
    """One topic given twice in a DeleteTopics v6, by its name and by its id: what is answered,
    and whether it is still there."""
    name = f"wire-parity-twice-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, name, 1)
    with RawClient(bootstrap) as c:
        md = c.call(3, 12, {"topics": [{"name": name, "topic_id": None}], "allow_auto_topic_creation": False,
                            "include_topic_authorized_operations": False})
        topic_id = md.topics[0].topic_id
        r = c.call(20, 6, {"topics": [{"name": name, "topic_id": None}, {"name": None, "topic_id": topic_id}],
                           "timeout": 30000})
        after = c.call(3, 12, {"topics": [{"name": name, "topic_id": None}], "allow_auto_topic_creation": False,
                               "include_topic_authorized_operations": False})
    return [(x.name == name, x.topic_id == topic_id, x.error_code.name) for x in r.responses], \
        after.topics[0].error_code.name


def test_delete_topics_by_name_and_id_at_once_matches_apache_kafka(ours, apache_kafka):
    assert _delete_by_name_and_id(ours) == _delete_by_name_and_id(apache_kafka)


def _create_topics_refusal(bootstrap: str, partitions: int, replication_factor: int) -> tuple[str, str | None]:
    with RawClient(bootstrap) as c:
        r = c.call(19, 7, {"topics": [{"name": f"refused-{uuid.uuid4().hex[:6]}", "num_partitions": partitions,
                                       "replication_factor": replication_factor, "assignments": [],
                                       "configs": []}], "timeout_ms": 10000, "validate_only": True})
    return r.topics[0].error_code.name, r.topics[0].error_message


@pytest.mark.parametrize("partitions, replication_factor", [(0, 1), (-2, 1), (1, 0), (1, -2), (1, 2)])
def test_create_topics_refusals_match_apache_kafka_with_their_messages(partitions, replication_factor, ours,
                                                                      apache_kafka):
    assert _create_topics_refusal(ours, partitions, replication_factor) == \
        _create_topics_refusal(apache_kafka, partitions, replication_factor)


def _elect_leaders_outcome(bootstrap: str) -> list:
    """ElectLeaders PREFERRED where the preferred replica leads, and on a partition and a topic
    that do not exist: the codes and the messages ``kafka-leader-election`` prints."""
    with RawClient(bootstrap) as c:
        r = c.call(43, 2, {"election_type": 0, "topic_partitions": [{"topic": TOPIC, "partitions": [0, 7]},
                                                                     {"topic": "wire-parity-missing", "partitions": [0]}],
                           "timeout_ms": 10000})
    return sorted((t.topic, p.partition_id, p.error_code.name, p.error_message)
                  for t in r.replica_election_results for p in t.partition_result)


def test_elect_leaders_errors_match_apache_kafka_with_their_messages(ours, apache_kafka):
    assert _elect_leaders_outcome(ours) == _elect_leaders_outcome(apache_kafka)


def _find_coordinator_errors(bootstrap: str) -> list:
    with RawClient(bootstrap) as c:
        out = []
        for version, body in ((3, {"key_type": 2, "key": SHARE_KEY}), (4, {"key_type": 2, "coordinator_keys": [SHARE_KEY]}),
                              (6, {"key_type": 2, "coordinator_keys": ["g"]}),
                              (4, {"key_type": 7, "coordinator_keys": ["g"]})):
            r = c.call(10, version, body)
            rows = r.coordinators if version >= 4 else [r]
            out += [(version, x.error_code.name, x.error_message) for x in rows]
    return out


def test_find_coordinator_errors_match_apache_kafka_with_their_messages(ours, apache_kafka):
    assert _find_coordinator_errors(ours) == _find_coordinator_errors(apache_kafka)
