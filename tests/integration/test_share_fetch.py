"""ShareFetch / ShareAcknowledge (KIP-932) on the wire: acquisition, acknowledgement types,
delivery counts, lock expiry, share sessions, and share-partition state across a restart."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.errors import ErrorCode
from tests.support.raw import RawClient

ACCEPT, RELEASE, REJECT, RENEW = 1, 2, 3, 4


def _create_topic(bootstrap: str, partitions: int = 1) -> tuple[str, uuid.UUID]:
    name = f"share-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)
    with RawClient(bootstrap) as c:
        for _ in range(100):
            meta = c.call(3, 12, {"topics": [{"name": name}], "allow_auto_topic_creation": False})
            t = meta.topics[0]
            if t.error_code == 0 and t.partitions and all(p.leader_id >= 0 for p in t.partitions):
                return name, t.topic_id
            time.sleep(0.1)
    raise AssertionError(f"topic {name} not ready")


def _produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for v in values:
        p.produce(topic, v, partition=partition)
    assert p.flush(10) == 0


class Member:
    """One share-group member speaking ShareFetch v2 on its own connection."""

    def __init__(self, bootstrap: str, group: str, topic_id: uuid.UUID, partitions=(0,)) -> None:
        self.client = RawClient(bootstrap)
        self.group = group
        self.member_id = uuid.uuid4().hex[:22]
        self.topic_id = topic_id
        self.partitions = partitions
        self.epoch = 0

    def fetch(self, acks: dict[int, list] | None = None, max_wait_ms: int = 200, max_records: int = 500,
              epoch: int | None = None):
        acks = acks or {}
        parts = [{"partition_index": p,
                  "acknowledgement_batches": [{"first_offset": f, "last_offset": last, "acknowledge_types": t}
                                              for f, last, t in acks.get(p, [])]}
                 for p in (self.partitions if self.epoch == 0 else acks)]
        resp = self.client.call(78, 2, {
            "group_id": self.group, "member_id": self.member_id,
            "share_session_epoch": self.epoch if epoch is None else epoch,
            "max_wait": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": max_records,
            "batch_size": max_records, "topics": [{"topic_id": self.topic_id, "partitions": parts}] if parts else [],
            "forgotten_topics_data": []})
        if resp.error_code == 0 and epoch is None:
            self.epoch += 1
        return resp

    def acknowledge(self, acks: dict[int, list], epoch: int | None = None):
        resp = self.client.call(79, 2, {
            "group_id": self.group, "member_id": self.member_id,
            "share_session_epoch": self.epoch if epoch is None else epoch,
            "topics": [{"topic_id": self.topic_id, "partitions": [
                {"partition_index": p, "acknowledgement_batches": [
                    {"first_offset": f, "last_offset": last, "acknowledge_types": t} for f, last, t in batches]}
                for p, batches in acks.items()]}]})
        if resp.error_code == 0 and epoch is None:
            self.epoch += 1
        return resp

    def poll(self, want: int, timeout: float = 10.0, acks=None) -> list[tuple[int, int, int]]:
        """Fetch until ``want`` records are acquired: (partition, offset, delivery count)."""
        got: list[tuple[int, int, int]] = []
        deadline = time.monotonic() + timeout
        while len(got) < want and time.monotonic() < deadline:
            resp = self.fetch(acks)
            acks = None
            assert resp.error_code == 0, resp
            for t in resp.responses:
                for p in t.partitions:
                    assert p.error_code == 0, p
                    for r in p.acquired_records:
                        got += [(p.partition_index, o, r.delivery_count)
                                for o in range(r.first_offset, r.last_offset + 1)]
        return got

    def close(self) -> None:
        self.client.close()


@pytest.fixture
def share_topic(broker):
    return _create_topic(broker.bootstrap)


def _member(broker, topic_id, group=None) -> Member:
    m = Member(broker.bootstrap, group or f"g-{uuid.uuid4().hex[:8]}", topic_id)
    resp = m.fetch()  # opens the session; the share-partition starts at the end (latest)
    assert resp.error_code == 0 and not resp.responses[0].partitions[0].acquired_records
    return m


def test_acquired_records_accepted_are_not_redelivered(broker, share_topic):
    name, topic_id = share_topic
    m = _member(broker, topic_id)
    _produce(broker.bootstrap, name, [b"a", b"b", b"c"])
    got = m.poll(3)
    assert got == [(0, 0, 1), (0, 1, 1), (0, 2, 1)]
    resp = m.acknowledge({0: [(0, 2, [ACCEPT])]})
    assert resp.error_code == 0
    assert resp.responses[0].partitions[0].error_code == 0
    assert m.poll(1, timeout=1.0) == []
    m.close()


def test_release_redelivers_with_a_higher_delivery_count(broker, share_topic):
    name, topic_id = share_topic
    m = _member(broker, topic_id)
    _produce(broker.bootstrap, name, [b"a", b"b"])
    assert m.poll(2) == [(0, 0, 1), (0, 1, 1)]
    got = m.poll(1, acks={0: [(0, 1, [RELEASE, ACCEPT])]})
    assert got == [(0, 0, 2)]
    m.close()


def test_reject_archives_and_a_second_ack_is_invalid_record_state(broker, share_topic):
    name, topic_id = share_topic
    m = _member(broker, topic_id)
    _produce(broker.bootstrap, name, [b"a"])
    assert m.poll(1) == [(0, 0, 1)]
    assert m.acknowledge({0: [(0, 0, [REJECT])]}).responses[0].partitions[0].error_code == 0
    again = m.acknowledge({0: [(0, 0, [ACCEPT])]})
    assert again.responses[0].partitions[0].error_code == ErrorCode.invalid_record_state
    assert m.poll(1, timeout=1.0) == []
    m.close()


def test_records_acquired_by_one_member_are_not_given_to_another(broker, share_topic):
    name, topic_id = share_topic
    group = f"g-{uuid.uuid4().hex[:8]}"
    a = _member(broker, topic_id, group)
    b = _member(broker, topic_id, group)
    _produce(broker.bootstrap, name, [b"x"])
    assert a.poll(1) == [(0, 0, 1)]
    assert b.poll(1, timeout=1.0) == []
    other = b.acknowledge({0: [(0, 0, [ACCEPT])]})
    assert other.responses[0].partitions[0].error_code == ErrorCode.invalid_record_state
    a.close()  # a closed connection ends the session and releases its records
    assert b.poll(1) == [(0, 0, 2)]
    b.close()


def test_a_fetch_left_waiting_by_a_closed_connection_acquires_nothing(broker, share_topic):
    """The broker finishes a request whose client disconnected (only the answer is dropped),
    but a ShareFetch whose session ended with its connection must not acquire records for a
    member that is gone: they would stay locked until the acquisition lock expired."""
    name, topic_id = share_topic
    group = f"g-{uuid.uuid4().hex[:8]}"
    gone, other = _member(broker, topic_id, group), _member(broker, topic_id, group)
    gone.client.send_call(78, 2, {
        "group_id": group, "member_id": gone.member_id, "share_session_epoch": gone.epoch, "max_wait": 10000,
        "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 500, "batch_size": 500, "topics": [],
        "forgotten_topics_data": []})
    time.sleep(0.2)  # let the broker take up the long poll (were it still queued, it would be dropped)
    gone.close()
    _produce(broker.bootstrap, name, [b"x"])
    assert other.poll(1) == [(0, 0, 1)]
    other.close()


def test_a_fetch_answers_the_first_share_partition_loaded_without_waiting_for_the_others(broker):
    """Kafka's DelayedShareFetch completes when the first of its share-partitions finishes
    initializing, with what is acquirable then: two fresh partitions are answered one per fetch
    (librdkafka's 0179 relies on it)."""
    name, topic_id = _create_topic(broker.bootstrap, partitions=2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    with RawClient(broker.bootstrap) as c:
        altered = c.call(44, 1, {"resources": [{"resource_type": 32, "resource_name": group, "configs": [
            {"name": "share.auto.offset.reset", "config_operation": 0, "value": "earliest"}]}],
            "validate_only": False})
        assert altered.responses[0].error_code == 0
    for partition in (0, 1):
        _produce(broker.bootstrap, name, [b"r%d" % i for i in range(5)], partition=partition)
    m = Member(broker.bootstrap, group, topic_id, partitions=(0, 1))
    answered = []
    for _ in range(2):
        resp = m.fetch(max_wait_ms=5000)
        assert resp.error_code == 0
        answered.append({p.partition_index: sum(r.last_offset - r.first_offset + 1 for r in p.acquired_records)
                         for p in resp.responses[0].partitions if p.acquired_records})
    assert [list(a.values()) for a in answered] == [[5], [5]]
    assert set(answered[0]) | set(answered[1]) == {0, 1}
    m.close()


def test_a_reopened_session_keeps_the_members_acquired_records(broker, share_topic):
    """Kafka's ShareSessionCache.remove on epoch 0: the old session goes, the member's records
    stay acquired by it and are acknowledged in the new session."""
    name, topic_id = share_topic
    m = _member(broker, topic_id)
    _produce(broker.bootstrap, name, [b"a"])
    assert m.poll(1) == [(0, 0, 1)]
    m.epoch = 0
    reopened = m.fetch(max_wait_ms=100)
    assert reopened.error_code == 0 and not reopened.responses[0].partitions[0].acquired_records
    assert m.acknowledge({0: [(0, 0, [ACCEPT])]}).responses[0].partitions[0].error_code == 0
    m.close()


def test_share_session_epochs(broker, share_topic):
    _, topic_id = share_topic
    m = Member(broker.bootstrap, "g-epochs", topic_id)
    assert m.fetch(epoch=1).error_code == ErrorCode.share_session_not_found
    assert m.acknowledge({0: [(0, 0, [ACCEPT])]}, epoch=0).error_code == ErrorCode.invalid_share_session_epoch
    assert m.fetch().error_code == 0
    assert m.fetch(epoch=5).error_code == ErrorCode.invalid_share_session_epoch
    assert m.fetch().error_code == 0
    assert m.fetch(epoch=-1).error_code == 0
    assert m.fetch(epoch=2).error_code == ErrorCode.share_session_not_found
    m.close()


def test_unknown_topic_id_is_answered_per_partition(broker):
    m = Member(broker.bootstrap, "g-unknown", uuid.uuid4())
    resp = m.fetch()
    assert resp.error_code == 0
    assert resp.responses[0].partitions[0].error_code == ErrorCode.unknown_topic_id
    m.close()


def test_lock_expiry_makes_records_available_and_delivery_limit_archives(own_broker):
    b = own_broker(**{"group.share.record.lock.duration.ms": "1000",
                      "group.share.min.record.lock.duration.ms": "1000",
                      "group.share.delivery.count.limit": "2"})
    name, topic_id = _create_topic(b.bootstrap)
    m = _member(b, topic_id)
    _produce(b.bootstrap, name, [b"poison"])
    assert m.poll(1) == [(0, 0, 1)]
    assert m.poll(1) == [(0, 0, 2)]  # the lock expired: delivered again
    # The second lock expires too: at the delivery-count limit the record is archived.
    assert m.poll(1, timeout=3.0) == []
    m.close()


def test_a_renewed_lock_expires_at_its_new_deadline(own_broker):
    b = own_broker(**{"group.share.record.lock.duration.ms": "1000",
                      "group.share.min.record.lock.duration.ms": "1000"})
    name, topic_id = _create_topic(b.bootstrap)
    group = f"g-{uuid.uuid4().hex[:8]}"
    a = _member(b, topic_id, group)
    _produce(b.bootstrap, name, [b"kept", b"renewed"])
    assert a.poll(2) == [(0, 0, 1), (0, 1, 1)]
    assert a.acknowledge({0: [(1, 1, [RENEW])]}).responses[0].partitions[0].error_code == 0
    time.sleep(2.5)  # past both deadlines: offset 0's original one and offset 1's renewed one
    other = Member(b.bootstrap, group, topic_id)
    assert other.poll(2, timeout=0.5) == [(0, 0, 2), (0, 1, 2)]
    a.close()
    other.close()


def test_share_partition_state_survives_a_restart(own_broker):
    b = own_broker()
    name, topic_id = _create_topic(b.bootstrap)
    group = f"g-{uuid.uuid4().hex[:8]}"
    m = _member(b, topic_id, group)
    _produce(b.bootstrap, name, [b"0", b"1", b"2", b"3"])
    assert [o for _, o, _ in m.poll(4)] == [0, 1, 2, 3]
    assert m.acknowledge({0: [(0, 1, [ACCEPT]), (2, 2, [RELEASE])]}).responses[0].partitions[0].error_code == 0
    b.restart(kill=True)  # offset 3 still acquired: its lock dies with the broker
    m.close()
    m = Member(b.bootstrap, group, topic_id)
    assert m.poll(2) == [(0, 2, 2), (0, 3, 2)]
    m.close()


def _describe(bootstrap: str, group: str, topic: str) -> tuple:
    with RawClient(bootstrap) as c:
        resp = c.call(90, 1, {"groups": [{"group_id": group, "topics": [{"topic_name": topic, "partitions": [0]}]}]})
    g = resp.groups[0]
    assert g.error_code == 0, g
    p = g.topics[0].partitions[0]
    return p.error_code, p.start_offset, p.lag


def test_share_group_offsets_are_described_altered_and_deleted(broker, share_topic):
    name, topic_id = share_topic
    group = f"g-{uuid.uuid4().hex[:8]}"
    assert _describe(broker.bootstrap, group, name) == (0, -1, -1)  # never fetched
    m = _member(broker, topic_id, group)
    _produce(broker.bootstrap, name, [b"0", b"1", b"2"])
    assert len(m.poll(3)) == 3
    assert m.acknowledge({0: [(0, 1, [ACCEPT])]}).responses[0].partitions[0].error_code == 0
    assert _describe(broker.bootstrap, group, name) == (0, 2, 1)
    m.fetch(epoch=-1)
    m.close()
    with RawClient(broker.bootstrap) as c:
        altered = c.call(91, 0, {"group_id": group, "topics": [
            {"topic_name": name, "partitions": [{"partition_index": 0, "start_offset": 0}]},
            {"topic_name": "no-such-topic", "partitions": [{"partition_index": 0, "start_offset": 0}]}]})
    assert altered.error_code == 0
    assert [t.partitions[0].error_code for t in altered.responses] == [0, ErrorCode.unknown_topic_or_partition]
    assert _describe(broker.bootstrap, group, name)[:2] == (0, 0)
    again = Member(broker.bootstrap, group, topic_id)
    assert [o for _, o, _ in again.poll(3)] == [0, 1, 2]
    again.close()
    assert _describe(broker.bootstrap, group, "no-such-topic") == (0, -1, -1)  # as Kafka: no error
