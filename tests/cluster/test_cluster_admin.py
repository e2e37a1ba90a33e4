"""Operator tools on the cluster: Kafka's own kafka-leader-election, kafka-reassign-partitions
and kafka-log-dirs, and confluent-kafka's elect_leaders."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.integration.test_kafka_tools import kafka, kafka_libs  # noqa: F401  (fixture)
from tests.support.clients import consume_all, create_topic
from tests.support.cluster import describe, produce_values, wait_for, wait_isr_complete

pytestmark = pytest.mark.kafka_tools


def test_reassignment_moves_a_replica_by_replication(healthy, kafka_libs, tmp_path):  # noqa: F811
    cluster = healthy
    topic = f"reassign-{uuid.uuid4().hex[:6]}"
    res = kafka("kafka-topics", "--bootstrap-server", cluster.bootstrap, "--create", "--topic", topic,
                "--replica-assignment", "1:2")
    assert f"Created topic {topic}." in res.stdout
    wait_isr_complete(cluster, topic)
    values = produce_values(cluster.bootstrap, topic, 3000)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [2, 3]}]}))
    res = kafka("kafka-reassign-partitions", "--bootstrap-server", cluster.bootstrap,
                "--reassignment-json-file", str(plan), "--execute")
    assert "Successfully started partition reassignment" in res.stdout, res.stdout + res.stderr

    def finished():
        out = kafka("kafka-reassign-partitions", "--bootstrap-server", cluster.bootstrap,
                    "--reassignment-json-file", str(plan), "--verify", check=False).stdout
        return "is completed" in out and out
    wait_for(finished, 90, "the reassignment to complete", interval=1.0)
    # --verify asks one broker; the one answering Metadata may apply the last change a moment later.
    leader, replicas, isr = wait_for(lambda: (p := describe(cluster.bootstrap, topic)[0])[1:] and
                                     sorted(p[1]) == [2, 3] and p, 30, "every broker to see the new replicas")
    assert sorted(replicas) == [2, 3] and sorted(isr) == [2, 3] and leader in (2, 3)
    wait_for(lambda: not _hosts(cluster.node(1), topic), 30, "broker 1 to delete its replica")
    # The new replica got the data by replication: with broker 2 down, broker 3 alone serves it.
    cluster.node(2).kill9()
    wait_for(lambda: describe(cluster.bootstrap, topic)[0][0] == 3, 30, "broker 3 to lead")
    got = consume_all(cluster.bootstrap, topic, 1, len(values), timeout=60)
    assert [m.value() for m in got] == values


def _hosts(node, topic: str) -> bool:
    import os
    return os.path.isdir(os.path.join(node.data_dir, f"{topic}-0"))


def test_preferred_leader_election_with_kafka_leader_election(healthy, kafka_libs):  # noqa: F811
    cluster = healthy
    topic = f"elect-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, partitions=2, replication_factor=3)
    wait_isr_complete(cluster, topic)
    res = kafka("kafka-leader-election", "--bootstrap-server", cluster.bootstrap,
                "--election-type", "preferred", "--topic", topic, "--partition", "0", check=False)
    assert "Valid replica already elected for partitions" in res.stdout + res.stderr, res.stdout + res.stderr
    leader, replicas, _ = describe(cluster.bootstrap, topic)[0]
    assert leader == replicas[0]


def test_unclean_election_is_not_needed_while_the_leader_lives(cluster):
    topic = f"unclean-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, partitions=1, replication_factor=3)
    wait_isr_complete(cluster, topic)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    from confluent_kafka import ElectionType
    f = admin.elect_leaders(ElectionType.UNCLEAN, [TopicPartition(topic, 0)])
    result = f.result(15)
    err = result[TopicPartition(topic, 0)]
    assert err is not None and err.name() == "ELECTION_NOT_NEEDED"


def test_kafka_log_dirs_lists_every_replica(cluster, kafka_libs):  # noqa: F811
    topic = f"logdirs-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, partitions=2, replication_factor=3)
    wait_isr_complete(cluster, topic)
    produce_values(cluster.bootstrap, topic, 200)
    res = kafka("kafka-log-dirs", "--bootstrap-server", cluster.bootstrap, "--describe",
                "--topic-list", topic)
    line = next(line for line in res.stdout.splitlines() if line.startswith("{"))
    report = json.loads(line)
    assert sorted(b["broker"] for b in report["brokers"]) == [1, 2, 3]
    for b in report["brokers"]:
        parts = {p["partition"]: p for d in b["logDirs"] for p in d["partitions"]}
        assert set(parts) == {f"{topic}-0", f"{topic}-1"}
        assert sum(p["size"] for p in parts.values()) > 0


def test_create_partitions_and_topic_configs_reach_every_broker(cluster):
    from confluent_kafka.admin import ConfigResource, NewPartitions

    topic = f"grow-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, partitions=2, replication_factor=3)
    wait_isr_complete(cluster, topic)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_partitions([NewPartitions(topic, 5)])[topic].result(15)
    parts = wait_isr_complete(cluster, topic)
    assert sorted(parts) == [0, 1, 2, 3, 4]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"retention.ms": "123456"})
    admin.alter_configs([resource])[resource].result(15)
    for node in cluster.nodes.values():  # each broker answers from its own metadata image
        one = AdminClient({"bootstrap.servers": node.address})
        res = ConfigResource(ConfigResource.Type.TOPIC, topic)
        wait_for(lambda one=one, res=res: one.describe_configs([res])[res].result(15)["retention.ms"].value
                 == "123456", 30, f"broker {node.node_id} to see the new config")


def test_a_group_config_set_through_one_broker_is_seen_by_every_broker(cluster):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    group = f"grp-cfg-{uuid.uuid4().hex[:6]}"
    first = min(cluster.nodes)
    admin = AdminClient({"bootstrap.servers": cluster.node(first).address})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(15)
    for node in cluster.nodes.values():
        one = AdminClient({"bootstrap.servers": node.address})
        res = ConfigResource(ResourceType.GROUP, group)
        wait_for(lambda one=one, res=res: one.describe_configs([res])[res].result(15)[
            "share.auto.offset.reset"].value == "earliest", 30, f"broker {node.node_id} to see the group config")


def test_a_topic_config_change_takes_effect_on_every_leader(cluster):
    """cleanup.policy=compact altered through one broker: the leaders on the others refuse
    keyless records at once (their logs take the new config from the metadata watch)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    from protocol import records as rb
    from protocol.errors import ErrorCode
    from tests.support.raw import RawClient, produce_request

    topic = f"compact-later-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, partitions=3, replication_factor=3)
    leaders = {p: leader for p, (leader, _, _) in wait_isr_complete(cluster, topic).items()}
    first = min(cluster.nodes)
    admin = AdminClient({"bootstrap.servers": cluster.node(first).address})
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(15)

    def refused(partition: int) -> bool:
        with RawClient(cluster.node(leaders[partition]).address) as c:
            batch = rb.build_batch([(None, b"no key")], timestamp=int(time.time() * 1000))
            request = produce_request(topic, bytes(batch), partition=partition)
            return c.request(0, 9, request).responses[0].partition_responses[0].error_code == \
                ErrorCode.invalid_record

    assert any(leader != first for leader in leaders.values()), leaders
    for partition in leaders:
        wait_for(lambda p=partition: refused(p), 10, f"the leader of partition {partition} to compact")


def test_delete_records_and_delete_topic_reach_the_followers(cluster):
    import os

    topic = f"gone-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, partitions=1, replication_factor=3)
    wait_isr_complete(cluster, topic)
    produce_values(cluster.bootstrap, topic, 500)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.delete_records([TopicPartition(topic, 0, 200)])[TopicPartition(topic, 0, 200)].result(15)
    leader = describe(cluster.bootstrap, topic)[0][0]
    # A follower that becomes leader keeps the deleted records deleted.
    cluster.node(leader).kill9()
    try:
        wait_for(lambda: describe(cluster.bootstrap, topic)[0][0] not in (leader, -1), 30, "failover")
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"w-{topic}"})
        try:
            wait_for(lambda: c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5) == (200, 500), 30,
                     "the new leader's log start offset 200")
        finally:
            c.close()
    finally:
        cluster.node(leader).start()
    admin.delete_topics([topic])[topic].result(15)
    for node in cluster.nodes.values():
        wait_for(lambda node=node: not os.path.isdir(os.path.join(node.data_dir, f"{topic}-0")), 30,
                 f"broker {node.node_id} to delete its replica")


def test_describe_quorum_names_the_same_controller_on_every_broker(cluster):
    from tests.support.raw import RawClient

    answers = {}
    for node in cluster.nodes.values():
        with RawClient(node.address) as c:  # this very broker answers, from its own image
            r = c.call(55, 2, {"topics": [{"topic_name": "__cluster_metadata",
                                           "partitions": [{"partition_index": 0}]}]})
        (p,) = r.topics[0].partitions
        answers[node.node_id] = (p.leader_id, p.leader_epoch)
        assert sorted(v.replica_id for v in p.current_voters) == sorted(cluster.nodes)
        # every voter is live here: none shows a lag or an unknown position (which monitoring
        # of kafka-metadata-quorum --replication would take for a voter falling behind)
        assert {v.log_end_offset for v in p.current_voters} == {p.high_watermark} and p.high_watermark > 0
        assert all(v.last_caught_up_timestamp > 0 for v in p.current_voters)
    assert len(set(answers.values())) == 1, answers
    assert answers[min(answers)][0] in cluster.nodes


def test_scram_credentials_altered_on_one_broker_are_described_by_every_broker(cluster):
    from tests.support.raw import RawClient

    user = f"scram-{uuid.uuid4().hex[:6]}"
    with RawClient(cluster.node(min(cluster.nodes)).address) as c:
        r = c.call(51, 0, {"deletions": [], "upsertions": [{"name": user, "mechanism": 2, "iterations": 8192,
                                                            "salt": b"salt", "salted_password": b"x" * 64}]})
        assert [(x.user, x.error_code) for x in r.results] == [(user, 0)]

    def described(node) -> list:
        with RawClient(node.address) as c:  # this broker's own image
            (result,) = c.call(50, 0, {"users": [{"name": user}]}).results
            return [(i.mechanism, i.iterations) for i in result.credential_infos]

    for node in cluster.nodes.values():
        wait_for(lambda node=node: described(node) == [(2, 8192)], 30, f"broker {node.node_id} to see {user}")


def test_client_quotas_altered_on_one_broker_are_described_by_every_broker(cluster):
    from tests.integration.test_client_quotas import alter
    from tests.integration.test_client_quotas import describe as describe_quotas

    user = f"quota-{uuid.uuid4().hex[:6]}"
    first = cluster.node(min(cluster.nodes))
    assert alter(first.address, [({"user": user}, {"producer_byte_rate": 1024.0})]) == [(0, None, {"user": user})]
    want = [((("user", user),), {"producer_byte_rate": 1024.0})]
    for node in cluster.nodes.values():   # each broker answers from its own metadata image
        wait_for(lambda node=node: describe_quotas(node.address, [("user", 0, user)]) == want, 30,
                 f"broker {node.node_id} to see the quota of {user}")
    assert alter(first.address, [({"user": user}, {"producer_byte_rate": None})]) == [(0, None, {"user": user})]
    for node in cluster.nodes.values():
        wait_for(lambda node=node: describe_quotas(node.address, [("user", 0, user)]) == [], 30,
                 f"broker {node.node_id} to forget the quota of {user}")


def test_client_quotas_never_throttle_replication(healthy, topic_name):
    """A default client-id quota far below what replication needs (10 KB/s consumed, 1% of a
    request thread), in force on every broker: a client under it is throttled, while 3 MB
    produced with acks=all by a client with a quota of its own are acknowledged and the
    followers, whose fetches Kafka exempts from client quotas, stay in the ISR."""
    from confluent_kafka import Consumer, Producer

    from tests.integration.test_client_quotas import alter
    from tests.integration.test_client_quotas import describe as describe_quotas

    cluster = healthy
    tight = {"consumer_byte_rate": 10240.0, "request_percentage": 1.0}
    fast = f"fast-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic_name, 1, replication_factor=3)
    wait_isr_complete(cluster, topic_name)
    entries = [({"client-id": None}, tight),
               ({"client-id": fast}, {"producer_byte_rate": 1e9, "request_percentage": 1e4})]
    first = cluster.node(min(cluster.nodes)).address
    assert [code for code, _, _ in alter(first, entries)] == [0, 0]
    try:
        for node in cluster.nodes.values():
            wait_for(lambda node=node: ((("client-id", "<default>"),), tight) in describe_quotas(node.address),
                     30, f"broker {node.node_id} to apply the default quota")
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "client.id": fast, "acks": "all",
                             "linger.ms": 5, "message.timeout.ms": 30000})
        errors: list = []
        for _ in range(300):
            producer.produce(topic_name, b"r" * 10_000, on_delivery=lambda err, _m: err and errors.append(err))
        assert producer.flush(45) == 0 and errors == []
        leader, replicas, isr = describe(cluster.bootstrap, topic_name)[0]
        assert sorted(isr) == sorted(replicas) and len(replicas) == 3

        throttles: list[int] = []
        reader = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"slow-{topic_name}",
                           "client.id": f"slow-{topic_name}", "auto.offset.reset": "earliest",
                           "throttle_cb": lambda event: throttles.append(event.throttle_time)})
        try:
            reader.assign([TopicPartition(topic_name, 0, 0)])
            deadline = time.monotonic() + 45
            while not any(t > 0 for t in throttles) and time.monotonic() < deadline:
                reader.poll(0.2)
        finally:
            reader.close()
        assert any(t > 0 for t in throttles), "the default quota throttled nobody"
    finally:
        alter(first, [({"client-id": None}, dict.fromkeys(tight)),
                       ({"client-id": fast}, {"producer_byte_rate": None, "request_percentage": None})])


def test_a_feature_level_changed_through_one_broker_is_answered_by_every_broker(cluster):
    """UpdateFeatures on one broker (a downgrade, then back): every broker's ApiVersions v4
    answers the new finalized level and a newer epoch, from its own image."""
    from tests.support.raw import RawClient

    def finalized(node) -> tuple[int, dict]:
        with RawClient(node.address) as c:
            r = c.call(18, 4, {"client_software_name": "t", "client_software_version": "1"})
        return r.finalized_features_epoch, {f.name: f.max_version_level for f in r.finalized_features}

    def update(level: int, upgrade_type: int) -> None:
        with RawClient(cluster.node(min(cluster.nodes)).address) as c:
            r = c.call(57, 1, {"timeout": 60000, "validate_only": False, "feature_updates": [
                {"feature": "transaction.version", "max_version_level": level, "upgrade_type": upgrade_type}]})
        assert (r.error_code, [x.error_code for x in r.results]) == (0, [0]), r

    for node in cluster.nodes.values():  # a new cluster stored transaction version 2 when it was created
        assert finalized(node)[1] == {"transaction.version": 2}
    epochs = {node.node_id: finalized(node)[0] for node in cluster.nodes.values()}
    update(0, 2)  # a safe downgrade to 0 removes the feature from the finalized set
    for node in cluster.nodes.values():
        wait_for(lambda node=node: (e := finalized(node))[1] == {} and e[0] > epochs[node.node_id], 30,
                 f"broker {node.node_id} to answer the downgrade")
    update(2, 1)  # back to where a new cluster starts: transaction version 2
    for node in cluster.nodes.values():
        wait_for(lambda node=node: finalized(node)[1] == {"transaction.version": 2}, 30,
                 f"broker {node.node_id} to answer the upgrade")


@pytest.mark.kafka_tools
def test_kafka_features_upgrades_and_downgrades_every_broker(cluster, kafka_libs):  # noqa: F811
    """Kafka's own ``kafka-features`` on three nodes: ``describe`` shows transaction.version
    supported 0-2 and finalized at 2; a ``downgrade`` to 1 through one broker and the
    ``upgrade`` back through another are answered by every broker's ApiVersions."""
    import re

    from tests.support.raw import RawClient

    def finalized(node) -> int:
        with RawClient(node.address) as c:
            r = c.call(18, 4, {"client_software_name": "t", "client_software_version": "1"})
        return next((f.max_version_level for f in r.finalized_features if f.name == "transaction.version"), 0)

    first, last = (cluster.node(n) for n in (min(cluster.nodes), max(cluster.nodes)))
    described = kafka("kafka-features", "--bootstrap-server", first.address, "describe").stdout
    row = next(line for line in described.splitlines() if "Feature: transaction.version" in line)
    assert dict(re.findall(r"(\w+): (\S+)", row)).items() >= {
        "SupportedMinVersion": "0", "SupportedMaxVersion": "2", "FinalizedVersionLevel": "2"}.items(), row

    def change(node, verb: str, level: int) -> None:
        res = kafka("kafka-features", "--bootstrap-server", node.address, verb, "--feature",
                    f"transaction.version={level}")
        assert f"transaction.version was {verb}d to {level}." in res.stdout, res.stdout
        for each in cluster.nodes.values():
            wait_for(lambda each=each: finalized(each) == level, 30, f"broker {each.node_id} to answer {level}")

    try:
        change(first, "downgrade", 1)
    finally:
        change(last, "upgrade", 2)
