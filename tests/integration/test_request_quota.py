"""``request_percentage`` (KIP-124) against our broker and Apache Kafka 4.3.1 (``slow``) by the same
requests: a client-id with a quota of 0.01 % of one thread is throttled within a few dozen
requests, with a throttle of at most one quota sample (1 s) in Metadata, Produce and
ListOffsets answers alike, while another client-id on the same broker is not throttled.
"""

from __future__ import annotations

import time
import uuid

import pytest

from protocol import records as rb
from tests.support.parity import TARGETS, single_broker
from tests.support.raw import RawClient, produce_request

QUOTA = 0.01  # percent of one thread: a millisecond over the ten-second window


@pytest.fixture(scope="module", params=TARGETS)
def bootstrap(request, tmp_path_factory):
    yield from single_broker(request.param, tmp_path_factory)


def _ms(throttle) -> int:
    return int(throttle.total_seconds() * 1000)


def _set_quota(bootstrap: str, client_id: str, value: float | None) -> None:
    op = {"key": "request_percentage", "value": value or 0.0, "remove": value is None}
    with RawClient(bootstrap) as c:
        resp = c.call(49, 1, {"validate_only": False, "entries": [
            {"entity": [{"entity_type": "client-id", "entity_name": client_id}], "ops": [op]}]})
    assert [e.error_code for e in resp.entries] == [0], resp


def _create_topic(bootstrap: str, name: str) -> None:
    with RawClient(bootstrap) as c:
        resp = c.call(19, 7, {"timeout": 30000, "validate_only": False, "topics": [
            {"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}]})
    assert [t.error_code for t in resp.topics] == [0]


def _metadata(c: RawClient, topic: str) -> int:
    return _ms(c.call(3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                              "include_topic_authorized_operations": False}).throttle_time)


def _list_offsets(c: RawClient, topic: str) -> int:
    return _ms(c.call(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]}
    ).throttle_time)


def _produce(c: RawClient, topic: str) -> int:
    r = c.request(0, 9, produce_request(topic, bytes(rb.build_batch([(b"k", b"v")], timestamp=1_700_000_000_000)),
                                         acks=1))
    assert r.responses[0].partition_responses[0].error_code == 0
    return _ms(r.throttle_time)


@pytest.mark.parametrize("request_kind", [_metadata, _list_offsets, _produce])
def test_a_client_over_its_request_quota_is_throttled_and_others_are_not(bootstrap, request_kind):
    client_id = f"busy-{uuid.uuid4().hex[:8]}"
    topic = f"request-quota-{uuid.uuid4().hex[:8]}"
    _create_topic(bootstrap, topic)
    _set_quota(bootstrap, client_id, QUOTA)
    try:
        throttles = []
        deadline = time.monotonic() + 30  # Kafka applies a new quota asynchronously
        with RawClient(bootstrap, timeout=30) as c:
            c.client_id = client_id
            while time.monotonic() < deadline and not any(throttles):
                throttles.append(request_kind(c, topic))
        assert any(throttles), f"never throttled in {len(throttles)} requests"
        assert max(throttles) <= 1000, throttles  # at most one quota sample
        with RawClient(bootstrap) as other:
            other.client_id = f"idle-{uuid.uuid4().hex[:8]}"
            assert [request_kind(other, topic) for _ in range(5)] == [0] * 5
    finally:
        _set_quota(bootstrap, client_id, None)
