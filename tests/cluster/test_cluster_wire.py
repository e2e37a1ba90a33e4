"""Raw requests to the wrong replica: what a broker that does not lead answers (with the
current leader, KIP-951), leader-epoch fencing, and a topic larger than one etcd transaction."""

from __future__ import annotations

import datetime
import socket
import uuid

import pytest
from kio.schema.produce.v11.request import PartitionProduceData, ProduceRequest, TopicProduceData

from protocol import records as rb
from protocol.errors import ErrorCode
from tests.support.clients import create_topic
from tests.support.cluster import describe, wait_for, wait_isr_complete
from tests.support.raw import RawClient, good_batch


def _produce_v11(address: str, topic: str):
    request = ProduceRequest(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
                             topic_data=(TopicProduceData(name=topic, partition_data=(
                                 PartitionProduceData(index=0, records=bytes(good_batch())),)),))
    with RawClient(address) as c:
        return c.request(0, 11, request)


def _produce_v13(address: str, topic_id: uuid.UUID):
    """Produce v13 names the topic by id (KIP-516)."""
    with RawClient(address) as c:
        return c.call(0, 13, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
            {"topic_id": topic_id, "partition_data": [{"index": 0, "records": bytes(good_batch())}]}]})


def _fetch_v12(address: str, topic: str, current_leader_epoch: int = -1):
    with RawClient(address) as c:
        return c.call(1, 12, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "",
            "topics": [{"topic": topic, "partitions": [{
                "partition": 0, "current_leader_epoch": current_leader_epoch, "fetch_offset": 0,
                "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})


def test_a_follower_refuses_produce_and_fetch_and_names_the_leader(cluster):
    topic = f"wire-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, partitions=1, replication_factor=3)
    leader, replicas, _ = wait_isr_complete(cluster, topic)[0]
    follower = next(r for r in replicas if r != leader)
    epoch = _fetch_v12(cluster.node(leader).address, topic).responses[0].partitions[0]
    assert epoch.error_code == 0

    resp = _produce_v11(cluster.node(follower).address, topic)
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.not_leader_or_follower
    assert part.current_leader.leader_id == leader
    assert [(n.node_id, n.port) for n in resp.node_endpoints] == [(leader, cluster.node(leader).port)]

    fetched = _fetch_v12(cluster.node(follower).address, topic).responses[0].partitions[0]
    assert fetched.error_code == ErrorCode.not_leader_or_follower
    assert fetched.current_leader.leader_id == leader
    assert _produce_v11(cluster.node(leader).address, topic).responses[0].partition_responses[0].error_code == 0


def test_a_follower_refuses_produce_v13_by_topic_id_and_names_the_leader(cluster):
    topic = f"wire13-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, partitions=1, replication_factor=3)
    leader, replicas, _ = wait_isr_complete(cluster, topic)[0]
    follower = next(r for r in replicas if r != leader)
    with RawClient(cluster.node(follower).address) as c:
        md = c.call(3, 13, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                            "include_topic_authorized_operations": False})
    topic_id = md.topics[0].topic_id

    resp = _produce_v13(cluster.node(follower).address, topic_id)
    assert resp.responses[0].topic_id == topic_id
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.not_leader_or_follower
    assert part.current_leader.leader_id == leader
    assert [(n.node_id, n.port) for n in resp.node_endpoints] == [(leader, cluster.node(leader).port)]
    ok = _produce_v13(cluster.node(leader).address, topic_id).responses[0].partition_responses[0]
    assert (ok.error_code, ok.base_offset) == (0, 0)


def test_leader_epochs_fence_stale_and_future_clients(healthy):
    cluster = healthy
    topic = f"epochs-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, partitions=1, replication_factor=3)
    first = wait_isr_complete(cluster, topic)[0][0]
    cluster.node(first).kill9()  # a failover: the new leader's epoch is 1
    leader = wait_for(lambda: (ld := describe(cluster.bootstrap, topic)[0][0]) not in (first, -1) and ld,
                      30, "a new leader")
    address = cluster.node(leader).address
    with RawClient(address) as c:
        md = c.call(3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                            "include_topic_authorized_operations": False})
    epoch = md.topics[0].partitions[0].leader_epoch
    assert epoch >= 1
    assert _fetch_v12(address, topic, epoch).responses[0].partitions[0].error_code == 0
    stale = _fetch_v12(address, topic, epoch - 1).responses[0].partitions[0]
    assert stale.error_code == ErrorCode.fenced_leader_epoch
    future = _fetch_v12(address, topic, epoch + 1).responses[0].partitions[0]
    assert future.error_code == ErrorCode.unknown_leader_epoch


def test_a_topic_larger_than_one_etcd_transaction(cluster):
    topic = f"wide-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, partitions=300, replication_factor=2)
    parts = wait_isr_complete(cluster, topic, timeout=90)
    assert sorted(parts) == list(range(300))
    assert all(len(replicas) == 2 for _, replicas, _ in parts.values())
    assert describe(cluster.bootstrap, topic)[299][0] >= 0


def test_kip_1166_a_follower_behind_the_high_watermark_is_answered_at_once(cluster):
    """Fetch v18: a follower whose high watermark is behind the leader's gets an answer at
    once, even with no new data; one that is current long-polls until data arrives."""
    from tests.integration.test_api_versions import batch, fetch, fetch_fields, produce_by_id, topic_id

    topic = f"kip1166-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, partitions=1, replication_factor=3)
    leader, replicas, _ = wait_isr_complete(cluster, topic)[0]
    follower = next(r for r in replicas if r != leader)
    with RawClient(cluster.node(leader).address, timeout=20) as c, \
            RawClient(cluster.node(leader).address) as producer:
        tid = topic_id(c, topic)
        assert produce_by_id(producer, tid, batch()).responses[0].partition_responses[0].error_code == 0
        wait_for(lambda: fetch(c, tid, 18).responses[0].partitions[0].high_watermark == 1, 30, "high watermark 1")

        behind = fetch(c, tid, 18, offset=1, max_wait=60_000, min_bytes=1, replica_id=follower,
                       high_watermark=0).responses[0].partitions[0]  # parked, it would outlast the socket timeout
        assert (behind.error_code, behind.high_watermark, bytes(behind.records or b"")) == (0, 1, b"")

        c.send_call(1, 18, fetch_fields(tid, offset=1, max_wait=60_000, min_bytes=1, replica_id=follower,
                                        high_watermark=1))
        c.sock.settimeout(1.0)
        with pytest.raises(TimeoutError):
            c.sock.recv(1, socket.MSG_PEEK)  # current: it waits for data
        c.sock.settimeout(20)
        assert produce_by_id(producer, tid, batch(), acks=1).responses[0].partition_responses[0].error_code == 0
        current = c.receive(1, 18).responses[0].partitions[0]
        assert current.error_code == 0
        assert [h.base_offset for _, h in rb.iter_batches(bytes(current.records))] == [1]
