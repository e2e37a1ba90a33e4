"""A broker killed -9 and started again at once (a supervisor restarting a crashed process)
rejoins without waiting out the session its previous life left behind: the log directory's
lock, free again, proves that life is over, so the new one ends its session in etcd and the
controller hands over its leaderships then, not when the lease expires.

Kafka 4.3.1 waits the session out instead (the new incarnation's BrokerRegistration gets
DUPLICATE_BROKER_REGISTRATION until ``broker.session.timeout.ms`` has passed). The session
here is 30 s, so a restart that waited would show it in the log.
"""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.clients import consume_all
from tests.support.cluster import describe, produce_values, start_cluster, wait_isr_complete

TOPIC = "quick-restart"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(str(tmp_path_factory.mktemp("quick-restart")), **{"broker.session.timeout.ms": "30000"})
    yield c
    c.stop()


def test_a_broker_restarted_right_after_kill9_ends_its_previous_session_and_rejoins(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC].result(30)
    wait_isr_complete(cluster, TOPIC)
    acked = produce_values(cluster.bootstrap, TOPIC, 300)
    victim = cluster.node(describe(cluster.bootstrap, TOPIC)[0][0])

    victim.kill9()
    victim.start()  # at once: the killed life's session has most of its 30 s left

    this_life = victim.output().rsplit("==== start", 1)[-1]
    assert "previous_session_ended" in this_life
    assert "waiting_for_previous_registration" not in this_life
    parts = wait_isr_complete(cluster, TOPIC, timeout=120)
    assert all(victim.node_id in isr for _, _, isr in parts.values())
    acked += produce_values(cluster.bootstrap, TOPIC, 300)  # and it serves again
    read = [m.value() for m in consume_all(cluster.bootstrap, TOPIC, 1, len(acked))]
    assert read == acked
