"""Two listeners on one broker: each answers with its own advertised endpoints (Kafka's model).

Metadata, DescribeCluster and FindCoordinator asked through INTERNAL advertise INTERNAL's port;
through EXTERNAL, EXTERNAL's; and a client bootstrapped on either produces and consumes.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from tests.support.broker_process import BrokerProcess
from tests.support.clients import consume_all
from tools.devcluster import free_port


@pytest.fixture
def two_listener_broker(tmp_path):
    proc = BrokerProcess(str(tmp_path / "data"))
    proc.external_port = free_port()
    proc.overrides.update({
        "listeners": f"INTERNAL://127.0.0.1:{proc.port},EXTERNAL://127.0.0.1:{proc.external_port}",
        "advertised.listeners": f"INTERNAL://127.0.0.1:{proc.port},EXTERNAL://localhost:{proc.external_port}",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
    })
    proc.start()
    yield proc
    proc.kill9()


def test_each_listener_advertises_its_own_endpoint(two_listener_broker, topic_name):
    b = two_listener_broker
    for bootstrap, host, port in ((f"127.0.0.1:{b.port}", "127.0.0.1", b.port),
                                  (f"127.0.0.1:{b.external_port}", "localhost", b.external_port)):
        admin = AdminClient({"bootstrap.servers": bootstrap})
        md = admin.list_topics(timeout=10)
        assert [(n.id, n.host, n.port) for n in md.brokers.values()] == [(1, host, port)]
        cluster = admin.describe_cluster().result(10)
        assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(1, host, port)]
        group = admin.describe_consumer_groups([f"g-{port}"])[f"g-{port}"].result(10)
        assert (group.coordinator.host, group.coordinator.port) == (host, port)

    external = f"localhost:{b.external_port}"
    p = Producer({"bootstrap.servers": external, "acks": "all"})
    for i in range(10):
        p.produce(topic_name, value=b"v%d" % i)
    assert p.flush(30) == 0
    got = consume_all(external, topic_name, 1, 10)
    assert sorted(m.value() for m in got) == [b"v%d" % i for i in range(10)]
