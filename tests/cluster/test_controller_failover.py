"""The controller role moves on its own lease (``controller.quorum.fetch.timeout.ms``), not on
the dead broker's session: with a long broker session timeout, a killed controller is replaced
while its broker is still registered and unfenced, and CreateTopics works through the new one.

The order of events is what is checked (no timing assertion): the session here is 30 s, the
controller lease 2 s, so the new controller must come first.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.cluster import start_cluster, wait_for
from tests.support.raw import RawClient

SESSION_MS = 30000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(str(tmp_path_factory.mktemp("controller-failover")),
                      **{"broker.session.timeout.ms": str(SESSION_MS)})
    yield c
    c.stop()


def _describe(node) -> tuple[int, dict[int, bool]]:
    """(controller id, node id -> is_fenced) as ``node`` answers DescribeCluster v2."""
    with RawClient(node.address, timeout=5) as c:
        resp = c.call(60, 2, {"include_cluster_authorized_operations": False, "endpoint_type": 1,
                              "include_fenced_brokers": True})
    return resp.controller_id, {b.broker_id: b.is_fenced for b in resp.brokers}


def test_a_killed_controller_is_replaced_before_its_broker_is_fenced(cluster):
    first = cluster.nodes[1]
    controller = wait_for(lambda: (c := _describe(first)[0]) in cluster.nodes and c, 30, "a controller")
    survivor = next(n for i, n in cluster.nodes.items() if i != controller)
    cluster.node(controller).kill9()

    def replaced():
        now, brokers = _describe(survivor)
        return (now, brokers) if now not in (controller, -1) else None

    new_controller, brokers = wait_for(replaced, SESSION_MS / 1000, "a new controller")
    assert brokers.get(controller) is False, "the dead broker was fenced before its role moved"
    bootstrap = ",".join(n.address for i, n in cluster.nodes.items() if i != controller)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    name = f"after-controller-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(name, 1, 2)], operation_timeout=15)[name].result(30)
