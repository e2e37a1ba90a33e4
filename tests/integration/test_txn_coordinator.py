"""Transaction coordinator over the wire (raw protocol): errors and state as Kafka answers them."""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass

import pytest

from protocol import records as rb
from protocol.errors import ErrorCode
from tests.support.clients import create_topic
from tests.support.raw import RawClient, produce_request


def init_pid(c: RawClient, txn_id: str, timeout_ms: int = 60000, version: int = 4, pid: int = -1, epoch: int = -1):
    fields = {"transactional_id": txn_id, "transaction_timeout": timeout_ms, "producer_id": pid, "producer_epoch": epoch}
    deadline = time.monotonic() + 15
    while True:
        r = c.call(22, version, fields)
        if r.error_code not in (ErrorCode.concurrent_transactions, ErrorCode.coordinator_load_in_progress) \
                or time.monotonic() > deadline:
            return r
        time.sleep(0.05)


def add_partitions(c: RawClient, txn_id: str, pid: int, epoch: int, topic: str, version: int = 3) -> int:
    r = c.call(24, version, {"v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
                             "v3_and_below_producer_epoch": epoch,
                             "v3_and_below_topics": [{"name": topic, "partitions": [0]}]})
    return r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code


def end_txn(c: RawClient, txn_id: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
    return c.call(26, version, {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch,
                                "committed": commit}).error_code


@dataclass
class Described:
    error_code: int
    transactional_id: str
    transaction_state: str
    transaction_timeout_ms: int
    transaction_start_time_ms: int
    producer_id: int
    producer_epoch: int


def describe(c: RawClient, txn_id: str) -> Described:
    """DescribeTransactions v0, parsed by hand: kio's reader refuses the start time -1 that
    Kafka sends for a transaction that has not started."""
    c.correlation_id += 1
    name = txn_id.encode()
    c.send_frame(RawClient.header(65, 0, c.correlation_id) + bytes([2, len(name) + 1]) + name + b"\x00")
    frame = c.recv_frame()
    pos = 4 + 1 + 4  # correlation id, header tags, throttle time
    pos += 1  # array length (one state)
    (error,) = struct.unpack_from(">h", frame, pos)
    pos += 2
    strings = []
    for _ in range(2):
        n = frame[pos] - 1
        strings.append(frame[pos + 1 : pos + 1 + n].decode())
        pos += 1 + n
    timeout, start, pid, epoch = struct.unpack_from(">iqqh", frame, pos)
    return Described(error, strings[0], strings[1], timeout, start, pid, epoch)


def wait_state(c: RawClient, txn_id: str, state: str, timeout: float = 10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        d = describe(c, txn_id)
        if d.transaction_state == state:
            return d
        time.sleep(0.05)
    raise AssertionError(f"{txn_id} never reached {state}: {describe(c, txn_id)}")


def txn_produce(c: RawClient, topic: str, txn_id: str, pid: int, epoch: int, seq: int):
    batch = bytes(rb.build_batch([(b"k", b"v")], timestamp=1, producer_id=pid, producer_epoch=epoch,
                                 base_sequence=seq, transactional=True))
    req = produce_request(topic, batch)
    req = type(req)(transactional_id=txn_id, acks=-1, timeout=req.timeout, topic_data=req.topic_data)
    return c.request(0, 9, req).responses[0].partition_responses[0].error_code


@pytest.fixture
def topic(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    return topic_name


def test_find_coordinator_for_transactions(broker):
    with RawClient(broker.bootstrap) as c:
        r = c.call(10, 4, {"key_type": 1, "coordinator_keys": ["some-txn"]})
        assert r.coordinators[0].error_code in (0, ErrorCode.coordinator_load_in_progress)
        assert c.call(10, 3, {"key": "", "key_type": 1}).error_code == ErrorCode.invalid_request


def test_timeout_above_max_is_invalid(broker, topic_name):
    with RawClient(broker.bootstrap) as c:
        assert init_pid(c, topic_name, timeout_ms=900_001).error_code == ErrorCode.invalid_transaction_timeout


def test_commit_cycle_and_idempotent_end_txn_retry(broker, topic):
    txn = f"{topic}-txn"
    with RawClient(broker.bootstrap) as c:
        r = init_pid(c, txn)
        assert r.error_code == 0 and r.producer_epoch == 0
        pid, epoch = r.producer_id, r.producer_epoch
        assert end_txn(c, txn, pid, epoch, True) == ErrorCode.invalid_txn_state  # Empty
        assert add_partitions(c, txn, pid, epoch, topic) == 0
        assert describe(c, txn).transaction_state == "Ongoing"
        assert txn_produce(c, topic, txn, pid, epoch, 0) == 0
        assert end_txn(c, txn, pid, epoch, True) == 0
        wait_state(c, txn, "CompleteCommit")
        assert end_txn(c, txn, pid, epoch, True) == 0  # a retried commit
        assert end_txn(c, txn, pid, epoch, False) == ErrorCode.invalid_txn_state
        assert init_pid(c, txn).producer_epoch == 1  # next incarnation bumps the epoch


def test_unverified_transactional_produce_is_refused(broker, topic):
    txn = f"{topic}-txn"
    with RawClient(broker.bootstrap) as c:
        r = init_pid(c, txn)
        # The partition was never added to the transaction (KIP-890 verification).
        assert txn_produce(c, topic, txn, r.producer_id, r.producer_epoch, 0) == ErrorCode.invalid_txn_state


def test_new_incarnation_fences_the_old_and_aborts_its_transaction(broker, topic):
    txn = f"{topic}-txn"
    with RawClient(broker.bootstrap) as c:
        old = init_pid(c, txn)
        assert add_partitions(c, txn, old.producer_id, old.producer_epoch, topic) == 0
        assert txn_produce(c, topic, txn, old.producer_id, old.producer_epoch, 0) == 0
        first = c.call(22, 4, {"transactional_id": txn, "transaction_timeout": 60000,
                               "producer_id": -1, "producer_epoch": -1})
        assert first.error_code == ErrorCode.concurrent_transactions
        new = init_pid(c, txn)
        assert new.error_code == 0 and new.producer_epoch == old.producer_epoch + 2
        assert describe(c, txn).transaction_state == "Empty"
        # The zombie: fenced on every coordinator call, by version.
        assert end_txn(c, txn, old.producer_id, old.producer_epoch, True) == ErrorCode.producer_fenced
        assert end_txn(c, txn, old.producer_id, old.producer_epoch, True, version=1) == \
            ErrorCode.invalid_producer_epoch
        assert add_partitions(c, txn, old.producer_id, old.producer_epoch, topic) == ErrorCode.producer_fenced
        assert add_partitions(c, txn, old.producer_id, old.producer_epoch, topic, version=1) == \
            ErrorCode.invalid_producer_epoch
        assert txn_produce(c, topic, txn, old.producer_id, old.producer_epoch, 1) == ErrorCode.invalid_producer_epoch


def test_unknown_producer_id_mapping(broker, topic):
    with RawClient(broker.bootstrap) as c:
        assert add_partitions(c, f"{topic}-nobody", 12345, 0, topic) == ErrorCode.invalid_producer_id_mapping
        assert describe(c, f"{topic}-nobody").error_code == ErrorCode.transactional_id_not_found


def test_kip360_bump_with_current_epoch(broker, topic):
    txn = f"{topic}-txn"
    with RawClient(broker.bootstrap) as c:
        r = init_pid(c, txn)
        bumped = init_pid(c, txn, pid=r.producer_id, epoch=r.producer_epoch)
        assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (0, r.producer_id, r.producer_epoch + 1)
        stale = init_pid(c, txn, pid=r.producer_id, epoch=r.producer_epoch + 5)
        assert stale.error_code == ErrorCode.producer_fenced
        assert init_pid(c, txn, version=3, pid=r.producer_id, epoch=r.producer_epoch + 5).error_code == \
            ErrorCode.invalid_producer_epoch


def test_stalled_transaction_is_aborted_on_timeout(own_broker, topic_name):
    b = own_broker(**{"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
    create_topic(b.bootstrap, topic_name, 1)
    txn = f"{topic_name}-txn"
    with RawClient(b.bootstrap) as c:
        r = init_pid(c, txn, timeout_ms=500)
        assert add_partitions(c, txn, r.producer_id, r.producer_epoch, topic_name) == 0
        assert txn_produce(c, topic_name, txn, r.producer_id, r.producer_epoch, 0) == 0
        d = wait_state(c, txn, "CompleteAbort")
        assert d.producer_epoch == r.producer_epoch + 1
        assert end_txn(c, txn, r.producer_id, r.producer_epoch, True) == ErrorCode.producer_fenced
    assert "transaction timed out" in b.output()


def test_prepare_commit_survives_kill9(own_broker, topic_name):
    b = own_broker(**{"test.fault.points": "txn.markers.pause"})
    create_topic(b.bootstrap, topic_name, 1)
    txn = f"{topic_name}-txn"
    with RawClient(b.bootstrap) as c:
        r = init_pid(c, txn)
        assert add_partitions(c, txn, r.producer_id, r.producer_epoch, topic_name) == 0
        assert txn_produce(c, topic_name, txn, r.producer_id, r.producer_epoch, 0) == 0
        assert end_txn(c, txn, r.producer_id, r.producer_epoch, True) == 0
        time.sleep(0.5)
        assert describe(c, txn).transaction_state == "PrepareCommit"
    b.kill9()
    b.overrides.pop("test.fault.points")
    b.start()
    with RawClient(b.bootstrap) as c:
        wait_state(c, txn, "CompleteCommit")
        lso = c.call(2, 7, {"replica_id": -1, "isolation_level": 1, "topics": [
            {"name": topic_name, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                                 "timestamp": -1}]}]}).topics[0].partitions[0].offset
        assert lso == 2  # the record and its COMMIT marker


def test_list_transactions_filters(broker, topic):
    txn = f"{topic}-txn"
    with RawClient(broker.bootstrap) as c:
        r = init_pid(c, txn)
        assert add_partitions(c, txn, r.producer_id, r.producer_epoch, topic) == 0
        resp = c.call(66, 1, {"state_filters": ["Ongoing", "Bogus"], "producer_id_filters": [r.producer_id],
                              "duration_filter": -1})
        assert resp.unknown_state_filters == ("Bogus",)
        assert [(t.transactional_id, t.transaction_state) for t in resp.transaction_states] == [(txn, "Ongoing")]
        assert end_txn(c, txn, r.producer_id, r.producer_epoch, False) == 0
