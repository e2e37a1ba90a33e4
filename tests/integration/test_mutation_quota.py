"""``controller_mutation_rate`` (KIP-599) against our broker and Apache Kafka 4.3.1 (``slow``) by the
same requests: with a quota of one partition a second for every user, a burst of eleven
partitions' credit, a request that finds credit below zero is refused per topic (CreateTopics
v6+, CreatePartitions v3+, DeleteTopics v5+) with THROTTLING_QUOTA_EXCEEDED and a throttle time,
and an older version is carried out and throttled instead.

Each request goes on a new connection: a throttled answer mutes its connection (KIP-219).
"""

from __future__ import annotations

import time
import uuid

import pytest

from protocol.errors import ErrorCode
from tests.support.parity import TARGETS, single_broker
from tests.support.raw import RawClient

THROTTLED = None  # Kafka answers THROTTLING_QUOTA_EXCEEDED without a message


@pytest.fixture(scope="module", params=TARGETS)
def bootstrap(request, tmp_path_factory):
    yield from single_broker(request.param, tmp_path_factory)


def _ms(throttle) -> int:
    return int(throttle.total_seconds() * 1000)


def _call(bootstrap: str, api_key: int, version: int, body: dict):
    with RawClient(bootstrap) as c:
        return c.call(api_key, version, body)


def _set_quota(bootstrap: str, rate: float | None) -> None:
    op = {"key": "controller_mutation_rate", "value": rate or 0.0, "remove": rate is None}
    resp = _call(bootstrap, 49, 1, {"validate_only": False, "entries": [
        {"entity": [{"entity_type": "user", "entity_name": None}], "ops": [op]}]})
    assert [e.error_code for e in resp.entries] == [0], resp


def _create(bootstrap: str, version: int, name: str, partitions: int, validate_only: bool = False):
    resp = _call(bootstrap, 19, version, {"timeout": 30000, "validate_only": validate_only, "topics": [
        {"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [], "configs": []}]})
    return _ms(resp.throttle_time), int(resp.topics[0].error_code), resp.topics[0].error_message


def _throttled_create(bootstrap: str, timeout: float = 15.0):
    """A one-partition CreateTopics v7 until the quota has reached the broker and refuses it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = _create(bootstrap, 7, f"probe-{uuid.uuid4().hex[:8]}", 12)
        if got[1] == ErrorCode.throttling_quota_exceeded:
            return got
    raise AssertionError("the controller mutation quota never applied")


def test_mutations_over_the_rate_are_refused_or_throttled_by_version(bootstrap):
    _set_quota(bootstrap, 1.0)
    try:
        throttle, code, message = _throttled_create(bootstrap)
        assert (code, message) == (ErrorCode.throttling_quota_exceeded, THROTTLED)
        assert 0 < throttle <= 12_000
        # Still out of credit: refused again, whatever the size; validate_only too.
        assert _create(bootstrap, 6, f"small-{uuid.uuid4().hex[:8]}", 1)[1:] == \
            (ErrorCode.throttling_quota_exceeded, THROTTLED)
        assert _create(bootstrap, 7, f"check-{uuid.uuid4().hex[:8]}", 1, validate_only=True)[1] == \
            ErrorCode.throttling_quota_exceeded
        # v5 does not know the error: the topic is created, and the answer throttles.
        old = f"old-{uuid.uuid4().hex[:8]}"
        throttle, code, _ = _create(bootstrap, 5, old, 1)
        assert code == 0 and throttle > 0
        resp = _call(bootstrap, 37, 3, {"timeout": 30000, "validate_only": False,
                                        "topics": [{"name": old, "count": 2, "assignments": None}]})
        assert [(int(r.error_code), r.error_message) for r in resp.results] == \
            [(ErrorCode.throttling_quota_exceeded, THROTTLED)] and _ms(resp.throttle_time) > 0
        resp = _call(bootstrap, 20, 6, {"timeout": 30000, "topics": [{"name": old, "topic_id": None}]})
        assert [int(r.error_code) for r in resp.responses] == [ErrorCode.throttling_quota_exceeded]
        resp = _call(bootstrap, 20, 4, {"timeout": 30000, "topic_names": [old]})
        assert [int(r.error_code) for r in resp.responses] == [0] and _ms(resp.throttle_time) > 0
    finally:
        _set_quota(bootstrap, None)


def test_without_a_quota_nothing_is_throttled(bootstrap):
    deadline = time.monotonic() + 15  # Kafka applies the removal of the quota asynchronously
    while True:
        throttle, code, _ = _create(bootstrap, 7, f"free-{uuid.uuid4().hex[:8]}", 50)
        if (throttle, code) == (0, 0) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert (throttle, code) == (0, 0)
    for _ in range(3):  # and stays so, however much is created
        assert _create(bootstrap, 7, f"free-{uuid.uuid4().hex[:8]}", 50)[:2] == (0, 0)
