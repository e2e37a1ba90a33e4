"""Bad input on the wire gets exactly what Apache Kafka gives, and the broker keeps serving."""

from __future__ import annotations

import os
import struct

import pytest
from confluent_kafka import Producer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.produce.v9.request import ProduceRequest

from protocol import records as rb
from protocol.errors import ErrorCode
from tests.support.clients import consume_all, create_topic
from tests.support.raw import RawClient, good_batch, produce_request


def produce_error(broker, topic: str, records: bytes) -> int:
    with RawClient(broker.bootstrap) as c:
        resp = c.request(0, 9, produce_request(topic, records))
    return resp.responses[0].partition_responses[0].error_code


def assert_broker_serves(broker, topic: str) -> None:
    """A fresh client still produces and reads back through the same broker."""
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    marker = os.urandom(8).hex().encode()
    p.produce(topic, value=marker, partition=0)
    assert p.flush(15) == 0
    got = consume_all(broker.bootstrap, topic, 1, expected=10**9, timeout=3)
    assert marker in [m.value() for m in got]


@pytest.fixture(scope="module")
def topic(broker):
    name = "bad-input"
    create_topic(broker.bootstrap, name, 1)
    return name


def test_random_bytes_close_only_that_connection(broker, topic):
    with RawClient(broker.bootstrap) as bystander, RawClient(broker.bootstrap) as c:
        c.send_bytes(struct.pack(">i", 20) + os.urandom(20))
        assert c.is_closed_by_peer()
        # The other connection is untouched.
        from kio.schema.api_versions.v3.request import ApiVersionsRequest
        resp = bystander.request(18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        assert resp.error_code == ErrorCode.none
    assert_broker_serves(broker, topic)


def test_size_prefix_above_limit_closes_connection(broker, topic):
    with RawClient(broker.bootstrap) as c:
        c.send_bytes(struct.pack(">i", 104857600 + 1) + b"\x00" * 16)
        assert c.is_closed_by_peer()


def test_negative_size_prefix_closes_connection(broker):
    with RawClient(broker.bootstrap) as c:
        c.send_bytes(struct.pack(">i", -5))
        assert c.is_closed_by_peer()


def test_truncated_frame_then_close_leaves_broker_serving(broker, topic):
    with RawClient(broker.bootstrap) as c:
        c.send_bytes(struct.pack(">i", 100) + RawClient.header(18, 3, 1)[:6])
    assert_broker_serves(broker, topic)


def test_truncated_body_closes_connection(broker):
    with RawClient(broker.bootstrap) as c:
        # A Metadata v12 header whose body stops mid-field.
        c.send_frame(RawClient.header(3, 12, 1) + b"\x05\x02")
        assert c.is_closed_by_peer()


def test_unknown_api_key_closes_connection(broker):
    with RawClient(broker.bootstrap) as c:
        c.send_frame(struct.pack(">hhih", 999, 0, 1, -1))
        assert c.is_closed_by_peer()


def test_unsupported_version_closes_connection(broker):
    with RawClient(broker.bootstrap) as c:
        c.send_frame(RawClient.header(3, 99, 1, header_version=2))
        assert c.is_closed_by_peer()


def test_unsupported_api_versions_version_gets_v0_error(broker):
    with RawClient(broker.bootstrap) as c:
        c.send_frame(struct.pack(">hhih", 18, 127, 42, -1) + b"\x00")  # header v2
        frame = c.recv_frame()
    assert frame is not None
    correlation_id, error, count = struct.unpack_from(">ihi", frame, 0)
    assert (correlation_id, error, count) == (42, ErrorCode.unsupported_version, 1)
    key, lo, hi = struct.unpack_from(">hhh", frame, 10)
    assert (key, lo, hi) == (18, 0, 4)
    assert len(frame) == 16  # v0 layout: no throttle time, header v0


def test_bad_crc_is_corrupt_message(broker, topic):
    batch = good_batch()
    batch[-1] ^= 0xFF
    assert produce_error(broker, topic, bytes(batch)) == ErrorCode.corrupt_message
    assert_broker_serves(broker, topic)


def test_magic_1_is_invalid_record(broker, topic):
    batch = good_batch()
    batch[rb.MAGIC_OFFSET] = 1
    assert produce_error(broker, topic, bytes(batch)) == ErrorCode.invalid_record


def test_two_batches_in_one_partition_is_invalid_record(broker, topic):
    assert produce_error(broker, topic, bytes(good_batch() + good_batch())) == ErrorCode.invalid_record


def test_produce_to_unknown_topic(broker):
    assert produce_error(broker, "no-such-topic-xyz", bytes(good_batch())) == \
        ErrorCode.unknown_topic_or_partition


def test_acks0_error_closes_connection(broker, topic):
    batch = good_batch()
    batch[-1] ^= 0xFF
    with RawClient(broker.bootstrap) as c:
        import io

        from kio.serial import entity_writer
        out = io.BytesIO()
        entity_writer(ProduceRequest)(out, produce_request(topic, bytes(batch), acks=0))
        c.send_frame(RawClient.header(0, 9, 1) + out.getvalue())
        assert c.is_closed_by_peer()


def test_acknowledged_records_survive_bad_input(broker, topic):
    with RawClient(broker.bootstrap) as c:
        resp = c.request(0, 9, produce_request(topic, bytes(good_batch(5))))
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.none
    for junk in (os.urandom(50), struct.pack(">i", 8) + b"\xff" * 8):
        with RawClient(broker.bootstrap) as c:
            c.send_bytes(junk)
    got = consume_all(broker.bootstrap, topic, 1, expected=10**9, timeout=3)
    offsets = {m.offset() for m in got}
    assert set(range(part.base_offset, part.base_offset + 5)) <= offsets


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(api_key=st.sampled_from([0, 1, 2, 3, 8, 9, 10, 11, 12, 14, 18, 19, 22, 23, 32, 60]),
       version=st.integers(min_value=-1, max_value=20),
       body=st.binary(max_size=300))
def test_fuzzed_frames_never_break_the_broker(broker, topic, api_key, version, body):
    """Random bodies under real headers: the broker answers or closes, and never dies."""
    with RawClient(broker.bootstrap, timeout=5) as c:
        try:
            c.send_frame(struct.pack(">hhih", api_key, version, 7, -1) + body)
            c.recv_frame()
        except OSError:
            pass
    assert broker.is_alive()


def test_fuzz_batches_leave_a_working_broker(broker, topic):
    """After the fuzzing above, a fresh client still produces and consumes."""
    assert broker.is_alive()
    assert_broker_serves(broker, topic)
