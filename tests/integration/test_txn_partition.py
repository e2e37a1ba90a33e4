"""Partition side of transactions over the wire: markers, LSO, read_committed consumers.

Transactional batches are written by a raw client and their markers by WriteTxnMarkers (as
an admin tool aborting a hanging transaction would), with verification switched off, so
these tests pin the partition side independently of the transaction coordinator.
"""

from __future__ import annotations

import pytest

from protocol import records as rb
from protocol.errors import ErrorCode
from tests.support.clients import consume_all, create_topic
from tests.support.raw import RawClient, produce_request


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory):
    from tests.support.broker_process import BrokerProcess

    proc = BrokerProcess(str(tmp_path_factory.mktemp("txn-partition") / "data"),
                         {"transaction.partition.verification.enable": "false"})
    proc.start()
    yield proc
    proc.stop()


def txn_batch(pid: int, epoch: int, seq: int, values: list[bytes]) -> bytes:
    return bytes(rb.build_batch([(b"k", v) for v in values], timestamp=1_700_000_000_000,
                                producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                transactional=True))


def produce_txn(c: RawClient, topic: str, batch: bytes):
    req = produce_request(topic, batch)
    req = type(req)(transactional_id="raw-txn", acks=req.acks, timeout=req.timeout, topic_data=req.topic_data)
    return c.request(0, 9, req).responses[0].partition_responses[0]


def write_marker(c: RawClient, topic: str, pid: int, epoch: int, commit: bool, coordinator_epoch: int = 0):
    resp = c.call(27, 1, {"markers": [{"producer_id": pid, "producer_epoch": epoch,
                                       "transaction_result": commit, "coordinator_epoch": coordinator_epoch,
                                       "topics": [{"name": topic, "partition_indexes": [0]}]}]})
    return resp.markers[0].topics[0].partitions[0].error_code


def list_offset(c: RawClient, topic: str, isolation: int) -> int:
    resp = c.call(2, 7, {"replica_id": -1, "isolation_level": isolation, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    return resp.topics[0].partitions[0].offset


def new_pid(c: RawClient) -> int:
    return c.call(22, 4, {"transactional_id": None, "transaction_timeout": 60000,
                          "producer_id": -1, "producer_epoch": -1}).producer_id


def values(msgs) -> list[bytes]:
    return [m.value() for m in msgs]


def test_committed_visible_aborted_never_open_holds_lso(txn_broker, topic_name):
    bs = txn_broker.bootstrap
    create_topic(bs, topic_name, 1)
    with RawClient(bs) as c:
        committed, aborted, open_ = new_pid(c), new_pid(c), new_pid(c)
        assert produce_txn(c, topic_name, txn_batch(committed, 0, 0, [b"c1", b"c2"])).error_code == 0
        assert produce_txn(c, topic_name, txn_batch(aborted, 0, 0, [b"a1"])).error_code == 0
        assert write_marker(c, topic_name, aborted, 0, commit=False) == 0
        assert write_marker(c, topic_name, committed, 0, commit=True) == 0
        assert produce_txn(c, topic_name, txn_batch(open_, 0, 0, [b"o1"])).error_code == 0
        # 0-1 committed, 2 aborted, 3 ABORT, 4 COMMIT, 5 open
        assert list_offset(c, topic_name, 1) == 5
        assert list_offset(c, topic_name, 0) == 6
    rc = consume_all(bs, topic_name, 1, expected=2, timeout=10, **{"isolation.level": "read_committed"})
    assert values(rc) == [b"c1", b"c2"]
    ru = consume_all(bs, topic_name, 1, expected=4, timeout=10, **{"isolation.level": "read_uncommitted"})
    assert values(ru) == [b"c1", b"c2", b"a1", b"o1"]
    with RawClient(bs) as c:
        assert write_marker(c, topic_name, open_, 0, commit=True) == 0
        assert list_offset(c, topic_name, 1) == 7
    rc = consume_all(bs, topic_name, 1, expected=3, timeout=10, **{"isolation.level": "read_committed"})
    assert values(rc) == [b"c1", b"c2", b"o1"]


def test_aborted_transactions_survive_kill9(own_broker, topic_name):
    b = own_broker(**{"transaction.partition.verification.enable": "false"})
    create_topic(b.bootstrap, topic_name, 1)
    with RawClient(b.bootstrap) as c:
        pids = [new_pid(c) for _ in range(4)]
        for i, pid in enumerate(pids):
            assert produce_txn(c, topic_name, txn_batch(pid, 0, 0, [b"v%d" % i])).error_code == 0
            assert write_marker(c, topic_name, pid, 0, commit=i % 2 == 0) == 0
        open_pid = new_pid(c)
        assert produce_txn(c, topic_name, txn_batch(open_pid, 0, 0, [b"open"])).error_code == 0
    b.restart(kill=True)
    with RawClient(b.bootstrap) as c:
        assert list_offset(c, topic_name, 1) == 8  # held by the open transaction
        assert write_marker(c, topic_name, open_pid, 0, commit=False) == 0
    rc = consume_all(b.bootstrap, topic_name, 1, expected=2, timeout=10, **{"isolation.level": "read_committed"})
    assert values(rc) == [b"v0", b"v2"]


def test_marker_epoch_errors(txn_broker, topic_name):
    bs = txn_broker.bootstrap
    create_topic(bs, topic_name, 1)
    with RawClient(bs) as c:
        pid = new_pid(c)
        assert produce_txn(c, topic_name, txn_batch(pid, 2, 0, [b"x"])).error_code == 0
        assert write_marker(c, topic_name, pid, 2, commit=True, coordinator_epoch=3) == 0
        assert write_marker(c, topic_name, pid, 1, commit=True, coordinator_epoch=3) == \
            ErrorCode.invalid_producer_epoch
        assert write_marker(c, topic_name, pid, 2, commit=True, coordinator_epoch=2) == \
            ErrorCode.transaction_coordinator_fenced
        resp = c.call(27, 1, {"markers": [{"producer_id": pid, "producer_epoch": 2, "transaction_result": True,
                                           "coordinator_epoch": 3,
                                           "topics": [{"name": "no-such-topic", "partition_indexes": [0]}]}]})
        assert resp.markers[0].topics[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition


def test_non_transactional_write_during_open_transaction(txn_broker, topic_name):
    bs = txn_broker.bootstrap
    create_topic(bs, topic_name, 1)
    with RawClient(bs) as c:
        pid = new_pid(c)
        assert produce_txn(c, topic_name, txn_batch(pid, 0, 0, [b"x"])).error_code == 0
        plain = bytes(rb.build_batch([(b"k", b"y")], timestamp=1, producer_id=pid, producer_epoch=0,
                                     base_sequence=1))
        resp = c.request(0, 9, produce_request(topic_name, plain))
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.invalid_txn_state


def test_transactional_batch_without_transactional_id(txn_broker, topic_name):
    bs = txn_broker.bootstrap
    create_topic(bs, topic_name, 1)
    with RawClient(bs) as c:
        resp = c.request(0, 9, produce_request(topic_name, txn_batch(new_pid(c), 0, 0, [b"x"])))
        assert resp.responses[0].partition_responses[0].error_code == \
            ErrorCode.transactional_id_authorization_failed
