"""Three brokers with SASL_SSL for clients and between brokers (``DevCluster(security=True)``,
what ``python -m tools.devcluster --security`` runs): replication, the brokers' own requests
(markers, KIP-890 verification) and coordinator failover work with every connection
authenticated, and the ACLs see the users (a SCRAM user without ACLs is refused).
"""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.clients import allow, delivery_errors
from tests.support.cluster import FAST_FAILOVER, require_etcd, wait_for
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
