"""The controller role moves on its own lease (``controller.quorum.fetch.timeout.ms``), not on
the dead broker's session: with a long broker session timeout, a killed controller is replaced
while its broker is still registered and unfenced, and CreateTopics works through the new one.
An admin client made right after the kill is never sent to the dead controller: Metadata names
the broker that answered it.

The order of events is what is checked (no timing assertion): the session here is 30 s, the
controller lease 2 s, so the new controller must come first.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.cluster import quorum_leader, start_cluster, wait_for
from tests.support.raw import RawClient

SESSION_MS = 30000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(str(tmp_path_factory.mktemp("controller-failover")),
                      **{"broker.session.timeout.ms": str(SESSION_MS)})
    yield c
    c.stop()


def _describe(node) -> tuple[int, dict[int, bool]]:
    """(controller id, node id -> is_fenced) as ``node`` answers DescribeQuorum and
    DescribeCluster v2."""
    with RawClient(node.address, timeout=5) as c:
        resp = c.call(60, 2, {"include_cluster_authorized_operations": False, "endpoint_type": 1,
                              "include_fenced_brokers": True})
    return quorum_leader(node.address), {b.broker_id: b.is_fenced for b in resp.brokers}


def test_a_killed_controller_is_replaced_before_its_broker_is_fenced(cluster):
    first = cluster.nodes[1]
    controller = wait_for(lambda: (c := _describe(first)[0]) in cluster.nodes and c, 30, "a controller")
    survivor = next(n for i, n in cluster.nodes.items() if i != controller)
    bootstrap = ",".join(n.address for i, n in cluster.nodes.items() if i != controller)
    cluster.node(controller).kill9()

    # An admin client made at once is sent to a broker it reached, not to the dead controller,
    # which is still registered and unfenced (librdkafka waited on it until it timed out).
    admin = AdminClient({"bootstrap.servers": bootstrap})
    name = f"at-once-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(name, 1, 2)], request_timeout=20)[name].result(30)

    def replaced():
        now, brokers = _describe(survivor)
        return (now, brokers) if now not in (controller, -1) else None

    new_controller, brokers = wait_for(replaced, SESSION_MS / 1000, "a new controller")
    assert brokers.get(controller) is False, "the dead broker was fenced before its role moved"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    name = f"after-controller-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(name, 1, 2)], operation_timeout=15)[name].result(30)


def test_a_whole_cluster_stopped_at_once_stops_in_bounded_time(tmp_path):
    """SIGTERM to every broker at once, with a transaction open and a consumer group: each one's
    controlled shutdown must not wait on peers that are shutting down too, and every broker
    gets to close its logs (``broker_stopped``)."""
    import os
    import signal
    import time

    from confluent_kafka import Consumer, Producer

    from tests.support.clients import create_topic

    c = start_cluster(str(tmp_path))
    try:
        for i in range(3):
            create_topic(c.bootstrap, f"stop-all-{i}", partitions=6, replication_factor=3)
        p = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": "stop-all"})
        p.init_transactions(30)
        p.begin_transaction()
        for i in range(50):
            p.produce("stop-all-0", b"open-%d" % i)
        assert p.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "stop-all", "auto.offset.reset": "earliest"})
        consumer.subscribe(["stop-all-1"])
        consumer.poll(5)
        for node in c.nodes.values():
            os.kill(node.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 90  # generous: a hang is what this looks for
        for node in c.nodes.values():
            node.proc.wait(max(1.0, deadline - time.monotonic()))
            assert node.proc.returncode == 0, node.output()[-2000:]
            out = node.output()
            assert "broker_stopped" in out
            # Each one saw the others leave and stopped waiting, rather than waiting out
            # controlled.shutdown.timeout.ms for leaders that could move nowhere.
            assert "timed_out=True" not in out, out[-2000:]
    finally:
        c.kill()
