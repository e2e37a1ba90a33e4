"""Broker epochs (KIP-903) on three nodes: a follower's fetch names the broker epoch of the
life it was sent in (Fetch v15 ``replica_state``), and the leader takes a follower back into
an ISR only on a fetch that names the broker's current epoch, so that a fetch from an earlier
life of a broker (whose log may since have lost its unflushed tail) cannot count as caught up.

The broker epoch is the create_revision of the broker's session key ``alive/<id>`` in etcd
(KRaft's is the offset of its registration record): new with every life of the broker.
"""

from __future__ import annotations

import asyncio
import time

import aetcd
import pytest

from tests.support.clients import create_topic
from tests.support.cluster import describe, produce_values, start_cluster, wait_for, wait_isr_complete
from tests.support.raw import RawClient

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # A paused follower leaves the ISR in 1.5 s but keeps its session (and so stays
    # registered and unfenced) for 30 s.
    c = start_cluster(str(tmp_path_factory.mktemp("broker-epochs")),
                      **{"broker.session.timeout.ms": "30000", "replica.lag.time.max.ms": "1500"})
    yield c
    c.stop()


def _broker_epoch(cluster, node_id: int) -> int:
    async def read() -> int:
        client = aetcd.Client(host="127.0.0.1", port=cluster.etcd_members[1].client_port)
        try:
            alive = await client.get(f"{cluster.prefix}/alive/{node_id}".encode())
            return alive.create_revision if alive is not None else -1  # -1: no session
        finally:
            await client.close()
    return asyncio.run(read())


def _partition(address: str, topic: str) -> tuple:
    """(topic id, leader epoch, log end offset) of partition 0, asked of its leader."""
    with RawClient(address) as c:
        t = c.call(3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                           "include_topic_authorized_operations": False}).topics[0]
        end = c.call(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]}).topics[0].partitions[0].offset
    return t.topic_id, t.partitions[0].leader_epoch, end


def _replica_fetch(address: str, topic_id, replica: int, broker_epoch: int, leader_epoch: int, offset: int) -> int:
    """A sessionless Fetch v15 as replica ``replica`` in its life ``broker_epoch``, caught up
    at ``offset``: the partition's error code."""
    with RawClient(address) as c:
        r = c.call(1, 15, {
            "replica_state": {"replica_id": replica, "replica_epoch": broker_epoch}, "max_wait": 0,
            "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic_id": topic_id, "partitions": [{
                "partition": 0, "current_leader_epoch": leader_epoch, "fetch_offset": offset,
                "last_fetched_epoch": leader_epoch, "log_start_offset": 0, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""})
    return r.responses[0].partitions[0].error_code


def _isr(cluster, topic: str) -> list[int]:
    return describe(cluster.bootstrap, topic)[0][2]


def test_only_a_fetch_of_the_brokers_current_life_takes_it_back_into_the_isr(cluster, topic_name):
    create_topic(cluster.bootstrap, topic_name, 1, replication_factor=3)
    parts = wait_isr_complete(cluster, topic_name)
    leader, replicas, _ = parts[0]
    followers = sorted(set(replicas) - {leader})
    assert len(followers) == 2, parts
    follower = followers[0]
    epoch = _broker_epoch(cluster, follower)
    assert epoch > 0
    paused = cluster.node(follower)
    paused.pause()  # it stops fetching; its session (and broker epoch) lives on
    try:
        # A follower at the log end is in sync however long ago it fetched (Kafka's
        # isCaughtUp): records it does not fetch take it out, within replica.lag.time.max.ms,
        # long before its session lapses.
        produce_values(cluster.bootstrap, topic_name, 3)
        wait_for(lambda: follower not in _isr(cluster, topic_name), 15, f"broker {follower} leaving the ISR")
        topic_id, leader_epoch, end = _partition(cluster.node(leader).address, topic_name)
        assert end == 3

        # Caught up, but in an earlier life: answered, and not taken into the ISR.
        assert _replica_fetch(cluster.node(leader).address, topic_id, follower, epoch - 1, leader_epoch, end) == 0
        deadline = time.monotonic() + 3  # an ISR write takes tens of ms: it would have shown by then
        while time.monotonic() < deadline:
            assert follower not in _isr(cluster, topic_name), "a fetch of an earlier life joined the ISR"
            time.sleep(0.2)

        # The same fetch in the broker's current life is.
        assert _broker_epoch(cluster, follower) == epoch, "the paused broker's session lapsed"
        assert _replica_fetch(cluster.node(leader).address, topic_id, follower, epoch, leader_epoch, end) == 0
        wait_for(lambda: follower in _isr(cluster, topic_name), 15, "the current life's fetch joining the ISR")
    finally:
        paused.resume()
    wait_isr_complete(cluster, topic_name)



def test_a_topic_deleted_and_made_again_under_its_name_replicates(cluster, topic_name):
    """Followers fetch by topic id: a topic deleted and created again with the same name (a
    new id) while the followers' sessions hold the old one is replicated in full, and the old
    topic's records are not in it."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    create_topic(cluster.bootstrap, topic_name, 2, replication_factor=3)
    wait_isr_complete(cluster, topic_name)
    produce_values(cluster.bootstrap, topic_name, 5)
    admin.delete_topics([topic_name], operation_timeout=30)[topic_name].result(60)
    wait_for(lambda: topic_name not in admin.list_topics(timeout=5).topics, 30, "the topic gone")
    create_topic(cluster.bootstrap, topic_name, 2, replication_factor=3)
    wait_isr_complete(cluster, topic_name)
    values = produce_values(cluster.bootstrap, topic_name, 7)
    wait_isr_complete(cluster, topic_name)
    leader = describe(cluster.bootstrap, topic_name)[0][0]
    assert _partition(cluster.node(leader).address, topic_name)[2] == len(values)  # not the old 5 + 7
