"""The metadata store's client against a real three-member etcd: a broker's store keeps working
through the loss of the member it talks to (killed, paused, or left without a quorum).

Each case checks what a broker depends on, not only that calls succeed: the session (its lease,
whose create_revision is the broker epoch) outlives the failover; the image's watch resumes on
the next member from the revision it had applied, with no change skipped or applied twice and no
full reload; a write whose answer was lost is resolved by reading it back and applied once; a
member without a leader refuses at once instead of serving stale reads.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from metadata.etcd.client import FailoverEtcdClient, StoreUnavailable
from metadata.etcd.store import EtcdMetadataStore
from metadata.image import MetadataCache
from metadata.records import BrokerRegistration
from protocol.errors import ErrorCode, KafkaError
from tests.support.cluster import require_etcd
from tools.devcluster import DevCluster


@pytest.fixture(scope="module")
def etcd3(tmp_path_factory):
    """Three etcd members and no brokers."""
    require_etcd()
    cluster = DevCluster(str(tmp_path_factory.mktemp("etcd3")), nodes=0, etcd_members=3)
    cluster.start_etcd()
    yield cluster
    cluster.stop_etcd()


@pytest.fixture
def members(etcd3):
    """The module's members, all up and unpaused before and after the test."""
    def restore():
        for m in etcd3.etcd_members.values():
            m.resume()
        etcd3.start_etcd()
    restore()
    yield etcd3
    restore()


def member_of(cluster: DevCluster, address: str):
    return next(m for m in cluster.etcd_members.values() if m.address == address)


async def _wait(condition, timeout: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def started_store(cluster: DevCluster, node_id: int, prefix: str, ttl_ms: int = 2000) -> EtcdMetadataStore:
    store = EtcdMetadataStore(MetadataCache(node_id), cluster.etcd_endpoints, prefix=prefix,
                              session_timeout_ms=ttl_ms, endpoint_sync_ms=0)
    await store.start(BrokerRegistration(node_id, "127.0.0.1", node_id, None, f"life-{node_id}"))
    return store


def test_the_session_and_the_watch_survive_the_member_in_use_killed(members):
    """kill -9 of the member the store uses, while topics are created through another store:
    the lease lives on (same broker epoch, past several TTLs), the watch resumes on another member
    from its revision (no reload), and every topic reaches the image exactly once."""
    async def scenario():
        store = await started_store(members, 1, "/failover-kill")
        writer = await started_store(members, 2, "/failover-kill")
        seen: list[tuple[str, int]] = []
        store.image.listeners.append(lambda parts, _deleted: seen.extend(sorted(parts)))
        try:
            await store.unfence()
            epoch = store.image.broker_epoch(1)
            assert epoch > 0
            victim = member_of(members, store.client.address)
            created = []
            for i in range(30):
                if i == 10:
                    victim.kill9()
                await writer.create_topic(f"t{i}", [[1, 2]], {})
                created.append(f"t{i}")
            await _wait(lambda: all(name in store.image.topics for name in created), what="every topic in the image")
            assert store.client.address != victim.address
            assert store.loader.reloads == 1, "the watch was opened again, not the image reloaded"
            assert store.loader.watch_reopened >= 1
            assert sorted(seen) == sorted((name, 0) for name in created), "each change applied exactly once"
            await asyncio.sleep(3 * store.session.ttl)  # several TTLs on the surviving members
            assert store.session.connected
            assert store.image.broker_epoch(1) == epoch, "the session (and its broker epoch) lived on"
            assert writer.image.brokers.keys() >= {1}
        finally:
            await store.stop()
            await writer.stop()

    asyncio.run(scenario())


def test_a_paused_member_is_left_and_a_write_sent_to_it_is_applied_once(members):
    """SIGSTOP of the member in use just before a create: the request goes unanswered, the
    client moves on, reads back whether the write was applied, and sends it again only if not.
    Once the paused member resumes, the topic still exists once, with the id the create got."""
    async def scenario():
        store = await started_store(members, 1, "/failover-pause")
        try:
            victim = member_of(members, store.client.address)
            victim.pause()
            started = time.monotonic()
            topic = await store.create_topic("paused", [[1]], {})
            took = time.monotonic() - started
            assert store.client.address != victim.address
            victim.resume()
            reader = FailoverEtcdClient(members.etcd_endpoints)
            try:
                got = await reader.get(b"/failover-pause/topics/paused")
                assert got is not None and topic.topic_id.encode() in got.value
                await asyncio.sleep(1)  # anything the resumed member still had queued is applied by now
                again = await reader.get(b"/failover-pause/topics/paused")
                assert again.value == got.value and again.version == 1, "the create was applied once"
            finally:
                await reader.close()
            assert took < 15
        finally:
            await store.stop()

    asyncio.run(scenario())


def test_a_member_without_a_quorum_refuses_at_once_and_the_store_resumes_with_it(members):
    """Two members of three killed: the one left has no leader and refuses every call (no
    stale read, no hanging); writes answer a clear error; when a majority is back the session
    and the watch carry on by themselves."""
    async def scenario():
        store = await started_store(members, 1, "/failover-quorum", ttl_ms=3000)
        try:
            await store.unfence()
            epoch = store.image.broker_epoch(1)
            keep = member_of(members, store.client.address)
            others = [m for m in members.etcd_members.values() if m is not keep]
            for m in others:
                m.kill9()
            lone = FailoverEtcdClient(keep.address, call_timeout=2)
            try:
                began = time.monotonic()
                with pytest.raises(StoreUnavailable, match="no leader"):
                    await lone.get(b"/failover-quorum/cluster_id", timeout=4)
                assert time.monotonic() - began < 5
            finally:
                await lone.close()
            store.writer.write_timeout_s = 4  # (15 s in a broker)
            with pytest.raises(KafkaError) as refused:
                await store.create_topic("during", [[1]], {})
            assert refused.value.code == ErrorCode.request_timed_out
            assert "metadata store unreachable" in refused.value.message
            await _wait(lambda: not store.session.connected, what="the session to see the store gone")
            members.start_etcd()
            await _wait(lambda: store.session.connected, 30, "the session to reach the store again")
            await store.create_topic("after", [[1]], {})
            assert "after" in store.image.topics and "during" not in store.image.topics
            assert store.image.broker_epoch(1) == epoch, "the lease outlived the lost quorum"
        finally:
            await store.stop()

    asyncio.run(scenario())


def test_members_added_later_are_found_in_the_member_list(members):
    """A store configured with one member learns the others from the cluster's member list
    (as etcd's own client's AutoSync), so it survives that member's loss."""
    async def scenario():
        first = members.etcd_members[1]
        client = FailoverEtcdClient(first.address)
        try:
            assert await client.sync_endpoints()
            assert sorted(f"{h}:{p}" for h, p in client.endpoints) == sorted(
                m.address for m in members.etcd_members.values())
            first.kill9()
            assert await client.get(b"/anything") is None
            assert client.address != first.address
        finally:
            await client.close()

    asyncio.run(scenario())
