"""Three brokers with SASL_SSL for clients and between brokers (``DevCluster(security=True)``,
what ``python -m tools.devcluster --security`` runs): replication, the brokers' own requests
(markers, KIP-890 verification) and coordinator failover work with every connection
authenticated, a transactional copier stays exactly-once while its coordinator is killed, and
the ACLs see the users (a SCRAM user without ACLs is refused, and cannot claim to be a replica
or write markers).
"""

from __future__ import annotations

import asyncio
import threading

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AclOperation, AdminClient, NewTopic

from protocol.errors import ErrorCode
from tests.support.clients import allow, consume_all, delivery_errors
from tests.support.cluster import FAST_FAILOVER, require_etcd, wait_for
from tests.support.copier import Copier, transform
from tools.devcluster import DevCluster

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    require_etcd()
    c = DevCluster(str(tmp_path_factory.mktemp("secure-cluster")), 3, overrides=dict(FAST_FAILOVER), security=True)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def admin_conf(c: DevCluster) -> dict:
    return c.security.client_config(c.bootstrap, "admin")


def read_committed(conf: dict, topic: str, partitions: int, expected: int, timeout: float = 30) -> list:
    import time

    consumer = Consumer({**conf, "group.id": f"rc-{topic}", "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got, deadline = [], time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        got += [m.value() for m in consumer.consume(100, 0.3) if m.error() is None]
    consumer.close()
    return got


def test_replicated_writes_and_user_acls_over_sasl_ssl(cluster, topic_name):
    admin = AdminClient(admin_conf(cluster))
    admin.create_topics([NewTopic(topic_name, 3, 3, config={"min.insync.replicas": "3"})])[topic_name].result(30)
    assert delivery_errors(admin_conf(cluster), topic_name, n=30) == []  # acks=all: replicated over SASL_SSL
    assert len(read_committed(admin_conf(cluster), topic_name, 3, 30)) == 30

    alice = cluster.security.client_config(cluster.bootstrap, "alice")  # SCRAM-SHA-512
    errors = delivery_errors(alice, topic_name, n=1, timeout=5)
    assert errors and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, errors
    allow(admin_conf(cluster), topic_name, "User:alice")
    assert delivery_errors(alice, topic_name, n=5) == []


def find_coordinator(cluster: DevCluster, transactional_id: str) -> int | None:
    """FindCoordinator (transaction) asked over SASL_SSL as admin of each live broker."""
    for node in cluster.nodes.values():
        if node.alive:
            try:
                response = cluster.security.call(node.host, node.port, 10, 4,
                                                 {"key_type": 1, "coordinator_keys": [transactional_id]})
            except OSError:
                continue
            entry = response.coordinators[0]
            if entry.error_code == 0 and cluster.node(entry.node_id).alive:
                return entry.node_id
    return None


def test_transactions_commit_across_a_killed_coordinator(cluster, topic_name):
    conf = admin_conf(cluster)
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic_name, 2, 3)])[topic_name].result(30)
    txid = f"tx-{topic_name}"

    def commit(first: int) -> None:
        p = Producer({**conf, "transactional.id": txid, "transaction.timeout.ms": 20000})
        p.init_transactions(60)
        p.begin_transaction()
        for i in range(first, first + 10):
            p.produce(topic_name, value=b"t%03d" % i, partition=i % 2)
        p.commit_transaction(60)

    commit(0)
    coordinator = wait_for(lambda: find_coordinator(cluster, txid), 30, f"the coordinator of {txid}")
    cluster.node(coordinator).kill9()
    try:
        commit(10)  # a new coordinator, found and loaded over the authenticated listeners
        got = read_committed(conf, topic_name, 2, 20)
        assert sorted(got) == [b"t%03d" % i for i in range(20)]
    finally:
        cluster.node(coordinator).start()
        wait_for(lambda: set(cluster.nodes) <= set(cluster.registered_brokers()), 60, "the node back")


def test_a_copier_stays_exactly_once_while_its_transaction_coordinator_is_killed(cluster, topic_name):
    """send_offsets_to_transaction over SASL_SSL; the transaction coordinator is killed -9 after
    a few commits and stays down until the copier has committed on its successor."""
    conf, partitions, records = admin_conf(cluster), 3, 1500
    admin = AdminClient(conf)
    source, sink = f"{topic_name}-in", f"{topic_name}-out"
    for name in (source, sink):
        admin.create_topics([NewTopic(name, partitions, 3)])[name].result(30)
    values = [b"in-%05d" % i for i in range(records)]
    p = Producer({**conf, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    for i, v in enumerate(values):
        p.produce(source, value=v, partition=i % partitions)
    assert p.flush(60) == 0
    del p
    txid = f"copier-{topic_name}"
    client = {k: v for k, v in conf.items() if k != "bootstrap.servers"}
    copier = Copier(cluster.bootstrap, source, sink, txid, txid, batch=50, config=client)
    killed: list[int] = []
    failures: list[BaseException] = []

    def chaos() -> None:
        try:
            wait_for(lambda: copier.commits >= 3, 120, "the copier's first commits")
            node = wait_for(lambda: find_coordinator(cluster, txid), 30, f"the coordinator of {txid}")
            cluster.node(node).kill9()
            killed.append(node)
            at_kill = copier.commits
            wait_for(lambda: copier.commits >= at_kill + 3, 180, "commits on the new coordinator")
        except BaseException as exc:  # surfaced by the test
            failures.append(exc)
        finally:
            if killed:
                cluster.node(killed[0]).start()

    thread = threading.Thread(target=chaos, daemon=True)
    thread.start()
    try:
        copier.run_until({q: len(range(q, records, partitions)) for q in range(partitions)}, timeout=400)
        thread.join(240)
    finally:
        copier.close()
        wait_for(lambda: set(cluster.nodes) <= set(cluster.registered_brokers()), 90, "every node back")
    assert not failures, failures[0]
    assert killed, "the coordinator was never killed"
    out = consume_all(cluster.bootstrap, sink, partitions, records, timeout=120,
                      **{**client, "isolation.level": "read_committed"})
    got = sorted(m.value() for m in out)
    assert got == sorted(transform(v) for v in values), (
        f"{len(got)} records for {records} inputs: one lost or duplicated (aborts: {copier.aborts})")


def test_a_normal_user_cannot_fetch_as_a_replica_or_write_markers(cluster, topic_name):
    """Authenticated as alice (SCRAM, Read on the topic), not a broker: a fetch claiming a replica
    id is TOPIC_AUTHORIZATION_FAILED and WriteTxnMarkers CLUSTER_AUTHORIZATION_FAILED, as Kafka
    answers a principal without ClusterAction; the admin's markers are accepted."""
    from broker.network_client import NetworkClient
    from security.sasl import SaslClient
    from security.ssl_factory import client_context, ssl_settings

    admin = AdminClient(admin_conf(cluster))
    admin.create_topics([NewTopic(topic_name, 1, 3)])[topic_name].result(30)
    allow(admin_conf(cluster), topic_name, "User:alice", AclOperation.READ)
    leader = wait_for(lambda: next((p.leader for p in admin.list_topics(topic_name, timeout=10)
                                    .topics[topic_name].partitions.values() if p.leader >= 0), None),
                      30, "a leader")
    node, security = cluster.node(leader), cluster.security
    markers = {"markers": [{"producer_id": 4242, "producer_epoch": 0, "transaction_result": False,
                            "topics": [{"name": topic_name, "partition_indexes": [0]}], "coordinator_epoch": 0}]}
    fetch = {"replica_id": (leader % 3) + 1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
             "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
             "topics": [{"topic": topic_name, "partitions": [{
                 "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}
    tls = client_context(ssl_settings({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(security.ca.pem)}))

    async def calls():
        def client(mechanism: str, user: str) -> NetworkClient:
            return NetworkClient(user, lambda _n: (node.host, node.port), 10, tls,
                                 SaslClient(mechanism, user, security.passwords[user]))

        alice, admin_user = client("SCRAM-SHA-512", "alice"), client("PLAIN", "admin")
        try:
            return (await alice.send_request(1, 27, 1, markers), await alice.send_request(1, 1, 12, fetch),
                    await admin_user.send_request(1, 27, 1, markers))
        finally:
            alice.close()
            admin_user.close()

    refused, as_replica, accepted = asyncio.run(calls())
    assert refused.markers[0].topics[0].partitions[0].error_code == ErrorCode.cluster_authorization_failed
    assert as_replica.responses[0].partitions[0].error_code == ErrorCode.topic_authorization_failed
    assert accepted.markers[0].topics[0].partitions[0].error_code == ErrorCode.none
