"""Coordinators move with the leadership of their internal partitions (issue acceptance 1, 4, 5).

A transactional copier (consume-transform-produce with send_offsets_to_transaction,
read_committed) runs while the broker that is its transaction coordinator, or its group
coordinator, is killed -9 every few commits; each time the node comes back and every internal
partition regains its full ISR before the next kill. The output must hold every input exactly
once and the group's committed offsets must match the input's end. A consumer group of three
members keeps consuming when its coordinator's broker dies; offsets deleted with OffsetDelete
stay deleted when the group coordinator fails over. The transactions tools ask the right broker.
"""

from __future__ import annotations

import threading
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.integration.test_kafka_tools import kafka_libs  # noqa: F401  (fixture)
from tests.integration.test_transactions_cli import kafkas, ok, table
from tests.support.clients import consume_all, create_topic
from tests.support.cluster import (
    GROUP,
    TRANSACTION,
    coordinator_node,
    wait_for,
    wait_internal_isr_complete,
    wait_isr_complete,
    wait_preferred_leaders,
)
from tests.support.copier import Copier, transform

PARTITIONS = 3
RECORDS = 6000
KILLS = 2


def _topic(cluster, name: str, partitions: int = PARTITIONS) -> None:
    create_topic(cluster.bootstrap, name, partitions, replication_factor=3)
    wait_isr_complete(cluster, name)


def _fill(cluster, topic: str, n: int) -> list[bytes]:
    values = [b"in-%07d" % i for i in range(n)]
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5})
    for i, v in enumerate(values):
        p.produce(topic, key=v, value=v, partition=i % PARTITIONS)
    assert p.flush(60) == 0
    return values


class Chaos(threading.Thread):
    """Kill -9 the current coordinator (of ``key``) after every ``every`` commits of the copier;
    once FindCoordinator names another live broker, restart the node and wait for full
    internal ISRs before the next kill.

    The node stays down only until its coordinator role has moved, not until the copier has
    committed on the new coordinator: librdkafka's send_offsets_to_transaction() can wait
    forever for a cached group coordinator that stays down (librdkafka#5456, #5511)."""

    def __init__(self, cluster, copier: Copier, key: str, key_type: int, kills: int, every: int) -> None:
        super().__init__(daemon=True)
        self.cluster, self.copier, self.key, self.key_type = cluster, copier, key, key_type
        self.kills, self.every = kills, every
        self.killed: list[int] = []
        self.failure: BaseException | None = None
        self.stop_event = threading.Event()

    def run(self) -> None:
        try:
            for k in range(self.kills):
                target = self.every * (k + 1)
                while self.copier.commits < target:
                    if self.stop_event.wait(0.05):
                        return
                node = coordinator_node(self.cluster, self.key, self.key_type)
                self.cluster.node(node).kill9()
                self.killed.append(node)
                moved = coordinator_node(self.cluster, self.key, self.key_type, timeout=60)
                assert moved != node, f"the coordinator stayed on the dead node {node}"
                self.cluster.node(node).start()
                self.cluster.wait_registered(set(self.cluster.nodes), 60)
                wait_internal_isr_complete(self.cluster)
        except BaseException as exc:  # surfaced by the test
            self.failure = exc


@pytest.mark.parametrize("role", ["transaction", "group"])
def test_copier_is_exactly_once_while_its_coordinator_is_killed(healthy, role):
    _copy_under_chaos(healthy, role, RECORDS, KILLS)


@pytest.mark.slow
@pytest.mark.parametrize("role", ["transaction", "group"])
def test_copier_over_100k_records_is_exactly_once_while_its_coordinator_is_killed(healthy, role):
    _copy_under_chaos(healthy, role, 100_000, 6)


def _copy_under_chaos(cluster, role: str, records: int, kills: int) -> None:
    tag = uuid.uuid4().hex[:6]
    source, sink = f"src-{role}-{tag}", f"dst-{role}-{tag}"
    _topic(cluster, source)
    _topic(cluster, sink)
    values = _fill(cluster, source, records)
    group, txn_id = f"copier-{tag}", f"copier-{tag}"
    copier = Copier(cluster.bootstrap, source, sink, group, txn_id, batch=max(records // 40, 50))
    key, key_type = (txn_id, TRANSACTION) if role == "transaction" else (group, GROUP)
    chaos = Chaos(cluster, copier, key, key_type, kills, every=max(40 // (kills + 1), 2))
    chaos.start()
    end = {p: len(range(p, records, PARTITIONS)) for p in range(PARTITIONS)}  # _fill's round robin
    try:
        copier.run_until(end, timeout=300 + records / 100)
        chaos.join(180)
    finally:
        chaos.stop_event.set()
        copier.close()
    assert chaos.failure is None, chaos.failure
    assert len(chaos.killed) == kills, f"the coordinator was killed {len(chaos.killed)} times"
    out = consume_all(cluster.bootstrap, sink, PARTITIONS, records, timeout=120,
                      **{"isolation.level": "read_committed"})
    got = sorted(m.value() for m in out)
    assert len(got) == records, f"{len(got)} records for {records} inputs (aborts: {copier.aborts})"
    assert got == sorted(transform(v) for v in values), "a record lost or duplicated"
    check = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    committed = check.committed([TopicPartition(source, p) for p in range(PARTITIONS)], 30)
    check.close()
    assert {tp.partition: tp.offset for tp in committed} == end


def test_group_of_three_rebalances_on_the_new_coordinator_and_keeps_its_offsets(healthy):
    cluster = healthy
    tag = uuid.uuid4().hex[:6]
    topic, group = f"grp-{tag}", f"grp-{tag}"
    _topic(cluster, topic, 6)
    first = [b"a-%05d" % i for i in range(3000)]
    second = [b"b-%05d" % i for i in range(3000)]
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i, v in enumerate(first):
        p.produce(topic, value=v, partition=i % 6)
    assert p.flush(30) == 0

    seen: list[bytes] = []
    lock = threading.Lock()
    stop = threading.Event()

    def member(n: int) -> None:
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                      "enable.auto.commit": True, "auto.commit.interval.ms": 200, "session.timeout.ms": 10000,
                      "heartbeat.interval.ms": 500, "client.id": f"member-{n}"})
        c.subscribe([topic])
        try:
            while not stop.is_set():
                for m in c.consume(500, 0.2):
                    if m.error() is None:
                        with lock:
                            seen.append(m.value())
        finally:
            c.close()

    threads = [threading.Thread(target=member, args=(n,), daemon=True) for n in range(3)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: len(set(seen)) >= len(first), 90, "the first half consumed")
        node = coordinator_node(cluster, group, GROUP)
        cluster.node(node).kill9()
        new = coordinator_node(cluster, group, GROUP, timeout=60)
        assert new != node
        for i, v in enumerate(second):
            p.produce(topic, value=v, partition=i % 6)
        assert p.flush(60) == 0
        wait_for(lambda: set(seen) >= set(first + second), 120, "every record consumed after the failover")
        # The group is served by the new coordinator: Stable, three members.
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})  # outlives its futures
        desc = wait_for(lambda: (d := admin.describe_consumer_groups([group])[group].result(30)).members
                        and len(d.members) == 3 and str(d.state) == "ConsumerGroupState.STABLE" and d, 60,
                        "three members in a Stable group")
        assert desc.coordinator.id == new
        # The members' auto-commits (every 200 ms) reach the end on the new coordinator.
        wait_for(lambda: _committed_total(cluster, group, topic, 6) == len(first) + len(second), 60,
                 "the group's committed offsets at the end")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    # Committed offsets survive the members: a new member of the group starts at the end.
    assert _committed_total(cluster, group, topic, 6) == len(first) + len(second)


def _committed_total(cluster, group: str, topic: str, partitions: int) -> int:
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        return sum(max(tp.offset, 0) for tp in c.committed([TopicPartition(topic, q) for q in range(partitions)], 10))
    finally:
        c.close()


def test_deleted_offsets_stay_deleted_after_a_group_coordinator_failover(healthy):
    """OffsetDelete's tombstones are replicated (acks=all) before the offsets are forgotten,
    so the coordinator that takes over after a kill -9 loads them deleted."""
    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient
    from kafka.errors import NoError

    cluster = healthy
    tag = uuid.uuid4().hex[:6]
    topic, group = f"odel-{tag}", f"odel-{tag}"
    _topic(cluster, topic, 2)
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 6)], asynchronous=False)
    c.close()
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        assert admin.delete_group_offsets(group, [KTP(topic, 0)]) == {KTP(topic, 0): NoError}
    finally:
        admin.close()
    node = coordinator_node(cluster, group, GROUP)
    cluster.node(node).kill9()
    assert coordinator_node(cluster, group, GROUP, timeout=60) != node
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        committed = wait_for(lambda: c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], 10), 60,
                             "the offsets from the new coordinator")
    finally:
        c.close()
    assert [tp.offset for tp in committed] == [-1001, 6]  # OFFSET_INVALID: still deleted


@pytest.mark.kafka_tools
def test_transactions_tools_ask_the_right_broker(healthy, kafka_libs):  # noqa: F811
    """kbroker-transactions and Kafka's kafka-transactions against the cluster: list, describe
    and find-hanging reach each transactional id's coordinator, describe-producers and abort
    reach each partition's leader."""
    cluster = healthy
    bs = cluster.bootstrap
    tag = uuid.uuid4().hex[:6]
    topic = f"tools-{tag}"
    _topic(cluster, topic)
    ids = [f"tools-{tag}-{n}" for n in range(6)]  # spread over the coordinators
    producers = []
    for n, txn_id in enumerate(ids):
        p = Producer({"bootstrap.servers": bs, "transactional.id": txn_id})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(topic, value=txn_id.encode(), partition=n % PARTITIONS)
        assert p.flush(30) == 0
        producers.append(p)
    wait_preferred_leaders(cluster, "__transaction_state")  # coordinators stay where they are
    coordinators = {t: coordinator_node(cluster, t, TRANSACTION) for t in ids}
    for tool in (lambda *a: ok(bs, *a), lambda *a: _kafka_ok(bs, *a)):
        rows = {r[0]: r for r in table(tool("list"))[1:]}
        for txn_id in ids:
            assert rows[txn_id][1] == str(coordinators[txn_id]) and rows[txn_id][3] == "Ongoing", rows.get(txn_id)
        for txn_id in ids:
            head, row = table(tool("describe", "--transactional-id", txn_id))
            described = dict(zip(head, row))
            assert (described["CoordinatorId"], described["TransactionState"]) == \
                (str(coordinators[txn_id]), "Ongoing"), described
        # Every open transaction is a candidate (timeout 0); asking each one's coordinator
        # shows it ongoing with that partition, so none is hanging.
        assert table(tool("find-hanging", "--topic", topic, "--max-transaction-timeout", "0"))[1:] == []
    # Abort the open transactions on partition 0 with ours, on partition 1 with Kafka's tool.
    for partition, tool in ((0, lambda *a: ok(bs, *a)), (1, lambda *a: _kafka_ok(bs, *a))):
        open_before = [r for r in table(ok(bs, "describe-producers", "--topic", topic, "--partition",
                                            str(partition)))[1:] if r[5] != "None"]
        assert len(open_before) == 2, open_before
        for r in open_before:
            tool("abort", "--topic", topic, "--partition", str(partition), "--start-offset", r[5])
        rows = table(ok(bs, "describe-producers", "--topic", topic, "--partition", str(partition)))[1:]
        assert all(r[5] == "None" for r in rows), rows
    for p in producers:
        p.abort_transaction(30)  # partition 2's; those aborted by the tools fail harmlessly or pass


def _kafka_ok(bs: str, *args: str) -> str:
    res = kafkas(bs, *args)
    assert res.returncode == 0, f"{args}: {res.stdout}\n{res.stderr}"
    return res.stdout


def test_consumer_group_member_keeps_its_epoch_when_the_coordinator_moves(healthy):
    """KIP-848: the group's records (member, target and current assignment, epochs) are
    replicated in __consumer_offsets, so the coordinator that takes over after a kill -9 knows
    the member at its epoch with its partitions: its next heartbeat is not fenced."""
    from tests.integration.test_consumer_groups_848 import _heartbeat, _join
    from tests.support.raw import RawClient

    cluster = healthy
    tag = uuid.uuid4().hex[:6]
    topic, group = f"cg848-{tag}", f"cg848-{tag}"
    _topic(cluster, topic, 3)
    node = coordinator_node(cluster, group, GROUP)
    wait_internal_isr_complete(cluster)
    with RawClient(cluster.node(node).address) as c:
        member_id, epoch, owned = _join(c, group, topic, None)
    cluster.node(node).kill9()
    new = coordinator_node(cluster, group, GROUP, timeout=60)
    assert new != node

    def heartbeat():
        with RawClient(cluster.node(new).address) as c:
            r = _heartbeat(c, group, member_id, epoch, topics=[topic], owned=owned)
        return r if r.error_code == 0 else None
    resp = wait_for(heartbeat, 60, "a heartbeat answered by the new coordinator")
    assert (resp.member_id, resp.member_epoch) == (member_id, epoch)
    assert sorted(resp.assignment.topic_partitions[0].partitions) == [0, 1, 2]


def test_offset_commit_in_flight_when_its_client_disconnects_still_completes(healthy):
    """A client that disconnects while its OffsetCommit waits for replication does not strand
    the commit: like Kafka's purgatory, the broker finishes the write and drops the answer.
    Before, the abandoned commit stayed pending and every later require_stable OffsetFetch
    answered UNSTABLE_OFFSET_COMMIT, so a consumer rejoining after a network outage never got
    its committed offsets (librdkafka's 0049-consume_conn_close)."""
    from protocol.errors import ErrorCode
    from tests.integration.test_txn_coordinator import committed
    from tests.support.raw import RawClient

    cluster = healthy
    tag = uuid.uuid4().hex[:6]
    topic, group = f"ocdc-{tag}", f"ocdc-{tag}"
    _topic(cluster, topic, 1)
    node = coordinator_node(cluster, group, GROUP)
    wait_internal_isr_complete(cluster)  # so the follower paused below is in the ISR
    follower = cluster.node(next(n for n in cluster.nodes if n != node))
    commit = {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 42,
                                                   "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
    with RawClient(cluster.node(node).address) as observer:
        follower.pause()  # acks=all now waits for it: the commit stays in flight
        try:
            with RawClient(cluster.node(node).address) as client:
                client.send_call(8, 8, commit)
                wait_for(lambda: committed(observer, group, topic)[0] == ErrorCode.unstable_offset_commit, 10,
                         "the commit in flight (UNSTABLE_OFFSET_COMMIT)")
        finally:
            follower.resume()
        assert wait_for(lambda: committed(observer, group, topic) == (0, 42), 60,
                        "the commit to complete after its client left") is True


def test_a_group_coordinator_resumed_from_a_pause_does_not_answer_from_stale_offsets(healthy):
    """A coordinator stopped past its session lost the group to another broker, where the
    group committed again. The OffsetFetch waiting in its socket is the first thing it reads
    when it resumes: it must not answer with the offsets it held before the pause (a consumer
    would re-read what the group had committed past, a copier copy it twice), but
    NOT_COORDINATOR until its metadata has caught up with etcd."""
    from protocol.errors import ErrorCode
    from tests.integration.test_txn_coordinator import committed
    from tests.support.eos import find_coordinator
    from tests.support.raw import RawClient

    cluster = healthy
    tag = uuid.uuid4().hex[:6]
    topic, group = f"stale-{tag}", f"stale-{tag}"
    _topic(cluster, topic, 1)
    wait_internal_isr_complete(cluster)
    old_id = coordinator_node(cluster, group, GROUP)
    old = cluster.node(old_id)

    def commit(c: RawClient, offset: int) -> int:
        return c.call(8, 8, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                       "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
        ).topics[0].partitions[0].error_code

    def new_coordinator():
        for node_id, node in cluster.nodes.items():
            if node_id == old_id:
                continue
            with RawClient(node.address, timeout=5) as c:
                entry = find_coordinator(c, group, GROUP, deadline_s=2)
            if entry.error_code == 0 and entry.node_id != old_id:
                return entry.node_id
        return None

    with RawClient(old.address) as c:
        assert commit(c, 10) == 0
    with RawClient(old.address, timeout=60) as stale:
        old.pause()
        try:
            new_id = wait_for(new_coordinator, 60, "another broker to become the group's coordinator")
            with RawClient(cluster.node(new_id).address) as c:
                wait_for(lambda: commit(c, 20) == 0, 30, "the commit on the new coordinator")
            stale.send_call(9, 7, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}],
                                   "require_stable": True})
        finally:
            old.resume()
        answer = stale.receive(9, 7)
    stale_offset = answer.topics[0].partitions[0].committed_offset if answer.topics else None
    assert answer.error_code == ErrorCode.not_coordinator or stale_offset == 20, (answer.error_code, stale_offset)
    with RawClient(cluster.node(new_id).address) as c:
        assert committed(c, group, topic) == (0, 20)
