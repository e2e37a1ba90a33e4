"""A share group moves with its ``__consumer_offsets`` partition: after the coordinator's broker
is killed -9, the new coordinator has loaded the group (members, epochs, assignment) from the
replicated share-group records, and its members go on heartbeating at their epoch."""

from __future__ import annotations

import uuid

from tests.integration.test_share_groups import assigned, heartbeat
from tests.support.clients import create_topic
from tests.support.cluster import GROUP, coordinator_node, wait_for, wait_internal_isr_complete
from tests.support.eos_accept import RETRIABLE_COORDINATOR
from tests.support.raw import RawClient


def _describe(address: str, group: str):
    with RawClient(address, timeout=10) as c:
        return c.call(77, 1, {"group_ids": [group], "include_authorized_operations": False}).groups[0]


def _join(cluster, group: str, member: str, topic: str) -> int:
    """The member's first heartbeat, on whichever broker coordinates the group once it has loaded
    its ``__consumer_offsets`` partition (a broker the previous test restarted may still be
    loading it, or may have just handed its leadership back); returns that broker's node id."""
    def attempt():
        node = coordinator_node(cluster, group, GROUP)
        with RawClient(cluster.node(node).address, timeout=10) as c:
            code = heartbeat(c, group, member, 0, [topic]).error_code
        assert code == 0 or code in RETRIABLE_COORDINATOR, f"heartbeat answered {code}"
        return code == 0 and (node,)  # a tuple: node 0 is falsy
    return wait_for(attempt, 60, f"{member} to join {group}")[0]


def test_share_group_is_loaded_by_the_new_coordinator_after_a_kill(healthy):
    cluster = healthy
    tag = uuid.uuid4().hex[:6]
    topic, group = f"share-fo-{tag}", f"share-fo-{tag}"
    create_topic(cluster.bootstrap, topic, partitions=2, replication_factor=3)
    wait_internal_isr_complete(cluster)
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    node = _join(cluster, group, a, topic)
    with RawClient(cluster.node(node).address, timeout=10) as c:
        assert heartbeat(c, group, b, 0, [topic]).error_code == 0
        assert heartbeat(c, group, a, 1).member_epoch == 2
    before = _describe(cluster.node(node).address, group)
    cluster.node(node).kill9()
    successor = coordinator_node(cluster, group, GROUP, timeout=60)
    assert successor != node
    after = wait_for(lambda: (d := _describe(cluster.node(successor).address, group)).error_code == 0 and d,
                     60, "the share group on the new coordinator")
    assert (after.group_epoch, after.assignment_epoch, after.group_state) == (2, 2, "Stable")
    assert assigned(after) == assigned(before)
    with RawClient(cluster.node(successor).address, timeout=10) as c:
        again = heartbeat(c, group, b, 2)
        assert (again.error_code, again.member_epoch) == (0, 2)
