"""Per-record produce errors (KIP-467) and record timestamp bounds, as Kafka 4.3.1 answers them.

A batch with refused records is refused as a whole: INVALID_RECORD (or INVALID_TIMESTAMP) with
``record_errors`` naming each refused record's index in the batch and an ``error_message`` in
LogValidator's words, so clients fail the refused records with the broker's error and the others
with "an invalid record in the same batch". Checked with raw Produce v9 and with librdkafka.
"""

from __future__ import annotations

import time

from confluent_kafka import Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from protocol import records as rb
from protocol.errors import ErrorCode
from tests.support.clients import admin, create_topic
from tests.support.raw import RawClient, produce_request

KEYLESS = "Compacted topic cannot accept message without key in topic partition {}-0"


def produce_raw(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes]], timestamp: int):
    with RawClient(bootstrap) as c:
        batch = rb.build_batch(records, timestamp=timestamp)
        return c.request(0, 9, produce_request(topic, bytes(batch))).responses[0].partition_responses[0]


def end_offset(bootstrap: str, topic: str) -> int:
    with RawClient(bootstrap) as c:
        r = c.call(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
        return r.topics[0].partitions[0].offset


def now_ms() -> int:
    return int(time.time() * 1000)


def test_keyless_records_on_a_compacted_topic_are_named(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, config={"cleanup.policy": "compact"})
    part = produce_raw(broker.bootstrap, topic_name,
                       [(b"k0", b"v0"), (None, b"v1"), (b"k2", b"v2"), (None, b"v3")], now_ms())
    reason = KEYLESS.format(topic_name)
    assert part.error_code == ErrorCode.invalid_record
    assert [(e.batch_index, e.batch_index_error_message) for e in part.record_errors] == [(1, reason), (3, reason)]
    assert part.error_message == (
        "One or more records have been rejected due to 2 record errors in total, and only showing "
        f"the first three errors at most: [RecordError(batchIndex=1, message='{reason}'), "
        f"RecordError(batchIndex=3, message='{reason}')]")
    assert (part.base_offset, part.log_start_offset) == (-1, 0)
    assert end_offset(broker.bootstrap, topic_name) == 0  # nothing of the batch was appended


def test_error_message_shows_at_most_three_record_errors(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, config={"cleanup.policy": "compact,delete"})
    part = produce_raw(broker.bootstrap, topic_name, [(None, b"v%d" % i) for i in range(5)], now_ms())
    assert [e.batch_index for e in part.record_errors] == [0, 1, 2, 3, 4]
    assert "due to 5 record errors in total" in part.error_message
    assert part.error_message.count("RecordError(") == 3


def test_librdkafka_fails_the_invalid_records_and_flags_their_batch_mates(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, config={"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 200})
    results = {}
    for i in range(4):
        producer.produce(topic_name, key=None if i % 2 else b"k%d" % i, value=b"v%d" % i,
                         on_delivery=lambda err, msg: results.__setitem__(msg.value(), err.code() if err else None))
    assert producer.flush(30) == 0
    # -138 is librdkafka's _INVALID_DIFFERENT_RECORD: failed because of another record in the batch.
    assert results == {b"v0": -138, b"v1": ErrorCode.invalid_record, b"v2": -138, b"v3": ErrorCode.invalid_record}


def test_a_timestamp_beyond_message_timestamp_after_max_ms_is_refused(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    now = now_ms()
    future = now + 2 * 3_600_000  # the default bound is one hour ahead
    part = produce_raw(broker.bootstrap, topic_name, [(b"k", b"v")], future)
    assert part.error_code == ErrorCode.invalid_timestamp
    assert part.error_message == "One or more records have been rejected due to invalid timestamp"
    [error] = part.record_errors
    assert error.batch_index == 0
    assert error.batch_index_error_message.startswith(
        f"Timestamp {future} of message with offset 0 is out of range. The timestamp should be within [")
    low, high = (int(x) for x in error.batch_index_error_message.rsplit("[", 1)[1].rstrip("]").split(", "))
    assert low < -(1 << 62)  # now - Long.MAX_VALUE, wrapped as Java wraps it
    assert now + 3_600_000 <= high < future
    assert produce_raw(broker.bootstrap, topic_name, [(b"k", b"v")], now).error_code == 0


def test_timestamp_bounds_follow_the_topic_configs(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, config={"message.timestamp.before.max.ms": "60000",
                                                       "message.timestamp.after.max.ms": "86400000"})
    now = now_ms()
    assert produce_raw(broker.bootstrap, topic_name, [(b"k", b"v")], now + 7_200_000).error_code == 0
    part = produce_raw(broker.bootstrap, topic_name, [(b"a", b"ok"), (b"b", b"stale")], now)
    assert part.error_code == 0
    old = produce_raw(broker.bootstrap, topic_name, [(b"k", b"v")], now - 600_000)
    assert old.error_code == ErrorCode.invalid_timestamp and len(old.record_errors) == 1
    # LogAppendTime topics take the broker's clock: any producer timestamp is fine.
    resource = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("message.timestamp.type", "LogAppendTime", incremental_operation=AlterConfigOpType.SET)])
    client = admin(broker.bootstrap)
    for future in client.incremental_alter_configs([resource]).values():
        future.result(30)
    assert produce_raw(broker.bootstrap, topic_name, [(b"k", b"v")], now - 600_000).error_code == 0
