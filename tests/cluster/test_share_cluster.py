"""Share-partition state on three nodes: written by the partition leader through the share
coordinator (``__share_group_state``, possibly on another broker), read by the next leader."""

from __future__ import annotations

import time
import uuid

from protocol.errors import ErrorCode
from tests.integration.test_share_fetch import ACCEPT, RELEASE, Member
from tests.support.clients import create_topic
from tests.support.cluster import describe, produce_values, wait_for, wait_isr_complete

RETRIABLE = {ErrorCode.not_leader_or_follower, ErrorCode.coordinator_not_available,
             ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator,
             ErrorCode.unknown_topic_or_partition}


def _leader(cluster, topic: str) -> int:
    return wait_for(lambda: describe(cluster.bootstrap, topic)[0][0] if describe(cluster.bootstrap, topic)[0][0] >= 0
                    else None, 60, f"a leader for {topic}-0")


def _acquire(cluster, topic: str, group: str, topic_id, want: int, timeout: float = 60.0) -> tuple[Member, list]:
    """A member on the partition's leader, fetching until ``want`` records are acquired."""
    deadline = time.monotonic() + timeout
    got: list[tuple[int, int]] = []
    member = None
    while time.monotonic() < deadline:
        leader = _leader(cluster, topic)
        if member is None:
            member = Member(cluster.node(leader).address, group, topic_id)
        try:
            resp = member.fetch(max_wait_ms=500)
        except (ConnectionError, OSError):
            member.close()
            member = None
            continue
        p = resp.responses[0].partitions[0] if resp.responses else None
        if p is not None and p.error_code in RETRIABLE:
            member.close()
            member = None
            time.sleep(0.2)
            continue
        assert resp.error_code == 0 and (p is None or p.error_code == 0), resp
        if p is not None:
            got += [(o, r.delivery_count) for r in p.acquired_records for o in range(r.first_offset, r.last_offset + 1)]
        if len(got) >= want:
            return member, got
    raise AssertionError(f"acquired {got}, wanted {want}")


def test_acknowledged_records_stay_acknowledged_on_the_next_leader(healthy):
    cluster = healthy
    topic = f"share-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, 1, replication_factor=3)
    wait_isr_complete(cluster, topic)
    topic_id = wait_for(lambda: _topic_id(cluster, topic), 30, "the topic id")
    group = f"g-{uuid.uuid4().hex[:8]}"
    member, got = _acquire(cluster, topic, group, topic_id, 0)  # the share-partition starts at the end
    produce_values(cluster.bootstrap, topic, 4)
    member.close()
    member, got = _acquire(cluster, topic, group, topic_id, 4)
    assert got == [(0, 1), (1, 1), (2, 1), (3, 1)]
    acked = member.acknowledge({0: [(0, 1, [ACCEPT]), (2, 2, [RELEASE])]})
    assert acked.responses[0].partitions[0].error_code == 0
    old = _leader(cluster, topic)
    cluster.node(old).kill9()
    member.close()
    wait_for(lambda: describe(cluster.bootstrap, topic)[0][0] not in (-1, old), 60, "a new leader")
    member, got = _acquire(cluster, topic, group, topic_id, 2)
    assert got == [(2, 2), (3, 2)]
    member.close()


def _topic_id(cluster, topic: str):
    from tests.support.raw import RawClient

    with RawClient(cluster.bootstrap.split(",")[0]) as c:
        meta = c.call(3, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    t = meta.topics[0]
    return t.topic_id if t.error_code == 0 else None
