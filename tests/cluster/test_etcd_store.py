"""The etcd metadata store against a real etcd: compare-and-swap, the watched image, a full
reload when the watch resumes below etcd's compaction point, and etcd over TLS (client
certificates) or with etcd's own users."""

from __future__ import annotations

import asyncio
import contextlib
import json

import aetcd
import pytest

from metadata.etcd.client import ETCD_ERRORS, EtcdClient, EtcdSecurity
from metadata.etcd.store import EtcdMetadataStore, RegistrationConflict
from metadata.image import MetadataCache
from metadata.records import BrokerRegistration
from tests.support.cluster import require_etcd
from tools.devcluster import DevCluster


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    require_etcd()
    cluster = DevCluster(str(tmp_path_factory.mktemp("etcd-only")), nodes=0)
    cluster.start_etcd()
    yield cluster.etcd_endpoints
    cluster.stop_etcd()


def etcd_store(node_id: int, endpoints: str, **settings) -> EtcdMetadataStore:
    """A broker's store over its own image (``store.image``)."""
    return EtcdMetadataStore(MetadataCache(node_id), endpoints, **settings)


async def _wait(condition, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_watch_resumes_after_compaction_with_a_full_reload(etcd, tmp_path):
    async def scenario():
        store = etcd_store(1, etcd, prefix="/compaction-test", session_timeout_ms=3000)
        changes = []
        store.image.listeners.append(lambda parts, deleted: changes.append((set(parts), set(deleted))))
        await store.start(BrokerRegistration(1, "127.0.0.1", 1, None, "a"))
        try:
            await store.create_topic("kept", [[1]], {})
            await store.create_topic("gone", [[1]], {})
            # The watch is down (as during an etcd outage) while the cluster moves on ...
            watch_task = store._tasks[1]
            watch_task.cancel()
            await asyncio.wait([watch_task])
            other = aetcd.Client(host="127.0.0.1", port=int(etcd.split(",")[0].rsplit(":", 1)[1]))
            await other.delete_prefix(b"/compaction-test/topics/gone")
            await other.delete_prefix(b"/compaction-test/partitions/gone/")
            raw = json.loads((await other.get(b"/compaction-test/partitions/kept/0")).value)
            raw["leader_epoch"] = 7
            put = await other.put(b"/compaction-test/partitions/kept/0", json.dumps(raw).encode())
            # ... and etcd compacts past the revision the image stopped at.
            await other.compact(put.header.revision)
            await other.close()
            assert store.revision < put.header.revision
            changes.clear()
            store._tasks[1] = asyncio.get_running_loop().create_task(store.loader.watch_loop())
            await _wait(lambda: "gone" not in store.image.topics
                        and store.image.partition("kept", 0).leader_epoch == 7)
            assert any(("gone", 0) in parts and "gone" in deleted for parts, deleted in changes)
            assert any(("kept", 0) in parts for parts, _ in changes)
        finally:
            await store.stop()

    asyncio.run(scenario())


def test_a_partition_changes_only_at_the_revision_it_was_read(etcd):
    async def scenario():
        store = etcd_store(1, etcd, prefix="/cas-test", session_timeout_ms=3000)
        await store.start(BrokerRegistration(1, "127.0.0.1", 1, None, "a"))
        try:
            topic = await store.create_topic("t", [[1]], {})
            state = topic.partitions[0]
            from dataclasses import replace
            first = await store.alter_partitions([("t", 0, replace(state, leader_epoch=1), state.mod_revision)],
                                                 wait=True)
            stale = await store.alter_partitions([("t", 0, replace(state, leader_epoch=2), state.mod_revision)],
                                                 wait=True)
            assert first == {("t", 0)} and stale == set()
            assert store.image.partition("t", 0).leader_epoch == 1
            epoch = await store.campaign()
            assert epoch > 0
            await _wait(lambda: store.image.controller_id == 1)
            current = store.image.partition("t", 0)
            wrong = await store.alter_partitions([("t", 0, replace(current, leader_epoch=5), current.mod_revision)],
                                                 controller_epoch=epoch + 1000)
            assert wrong == set()
        finally:
            await store.stop()

    asyncio.run(scenario())


@contextlib.contextmanager
def own_etcd(tmp_path, security: bool = False):
    """An etcd of the test's own (the secure development cluster's when ``security``)."""
    require_etcd()
    cluster = DevCluster(str(tmp_path), nodes=0, security=security)
    cluster.start_etcd()
    try:
        yield cluster
    finally:
        cluster.stop_etcd()


async def _store_works_and_others_are_refused(port: int, prefix: str, security: EtcdSecurity,
                                              refused: aetcd.Client) -> None:
    """A store with ``security`` registers and creates a topic; ``refused`` cannot even read."""
    store = etcd_store(1, f"127.0.0.1:{port}", prefix=prefix, session_timeout_ms=3000, security=security)
    await store.start(BrokerRegistration(1, "127.0.0.1", 1, None, "a"))
    try:
        await store.create_topic("t", [[1]], {})
        assert "t" in store.image.topics
    finally:
        await store.stop()
    with pytest.raises(ETCD_ERRORS):
        await refused.get(f"{prefix}/cluster_id".encode())
    await refused.close()


def test_etcd_over_tls_with_client_certificates(tmp_path):
    """The secure development cluster's etcd: TLS, and only clients with a certificate from its
    CA. A broker's store with the certificate works; a client without one is refused."""
    with own_etcd(tmp_path, security=True) as cluster:
        sec = cluster.security
        mine = EtcdSecurity(str(sec.ca.pem), str(sec.etcd_client_cert.cert), str(sec.etcd_client_cert.key))
        port = cluster.etcd_members[1].client_port
        anonymous = EtcdClient("127.0.0.1", port, EtcdSecurity(ca_file=str(sec.ca.pem)), timeout=5)
        asyncio.run(_store_works_and_others_are_refused(port, "/tls-test", mine, anonymous))


def test_etcd_users_and_passwords(tmp_path):
    """etcd's role-based authentication: the store logs in with metadata.etcd.username/password;
    a client without them is refused."""
    from aetcd import rpc

    async def enable_auth(port: int) -> None:
        admin = aetcd.Client(host="127.0.0.1", port=port)
        await admin.connect()
        auth = rpc.AuthStub(admin.channel)
        await auth.UserAdd(rpc.AuthUserAddRequest(name="root", password="root-secret"))
        await auth.UserGrantRole(rpc.AuthUserGrantRoleRequest(user="root", role="root"))
        await auth.AuthEnable(rpc.AuthEnableRequest())
        await admin.close()

    with own_etcd(tmp_path) as cluster:
        port = cluster.etcd_members[1].client_port
        asyncio.run(enable_auth(port))
        anonymous = aetcd.Client(host="127.0.0.1", port=port, timeout=5)
        asyncio.run(_store_works_and_others_are_refused(
            port, "/auth-test", EtcdSecurity(username="root", password="root-secret"), anonymous))


def test_a_starting_broker_is_registered_but_fenced_until_it_unfences(etcd):
    """As KRaft's: the registration is visible at once, the broker counts as unfenced (may lead)
    only once it says it is ready."""
    async def scenario():
        stores = [etcd_store(n, etcd, prefix="/fence-test", session_timeout_ms=3000) for n in (1, 2)]
        await stores[0].start(BrokerRegistration(1, "127.0.0.1", 1, None, "a"))
        await stores[1].start(BrokerRegistration(2, "127.0.0.1", 2, None, "b"))
        try:
            await _wait(lambda: set(stores[1].image.registered) == {1, 2})
            assert 1 not in stores[1].image.brokers and 2 not in stores[0].image.brokers
            await stores[0].unfence()
            await _wait(lambda: 1 in stores[1].image.brokers and 1 in stores[0].image.brokers)
            assert 2 not in stores[1].image.brokers  # the other one still starts
        finally:
            for store in stores:
                await store.stop()

    asyncio.run(scenario())


def test_a_restart_ends_its_crashed_predecessors_session_and_only_that_one(etcd):
    """A broker that knows its previous life is gone (its log directory's lock was free)
    registers at once instead of waiting out that life's lease; a session of any other
    incarnation of its node.id is still waited out and refused."""
    async def crashed(incarnation: str) -> EtcdMetadataStore:
        store = etcd_store(1, etcd, prefix="/restart-test", session_timeout_ms=60000)
        await store.start(BrokerRegistration(1, "127.0.0.1", 1, None, incarnation))
        for task in store._tasks:  # the process dies: no keepalive, no revoke
            task.cancel()
        await asyncio.wait(store._tasks)
        await store.client.close()
        return store

    async def scenario():
        await crashed("first-life")
        observer = etcd_store(2, etcd, prefix="/restart-test", session_timeout_ms=60000)
        await observer.start(BrokerRegistration(2, "127.0.0.1", 2, None, "observer"))
        impostor, restarted = (etcd_store(1, etcd, prefix="/restart-test", session_timeout_ms=60000)
                               for _ in range(2))
        try:
            # A session that is not the lock's last owner's is not ended: 60 s of lease left.
            with pytest.raises(RegistrationConflict):
                await impostor.start(BrokerRegistration(1, "127.0.0.1", 1, None, "impostor"), wait_s=1,
                                     predecessor="other-life")
            await restarted.start(BrokerRegistration(1, "127.0.0.1", 1, None, "second-life"), wait_s=1,
                                  predecessor="first-life")
            assert restarted.loader._alive[1] == "second-life fenced"
            await _wait(lambda: observer.loader._alive.get(1) == "second-life fenced")
            assert observer.image.registered[1].incarnation_id == "second-life"
        finally:
            await impostor.client.close()
            await restarted.stop()
            await observer.stop()

    asyncio.run(scenario())
