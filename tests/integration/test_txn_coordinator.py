"""Transaction coordinator over the wire (raw protocol, confluent-kafka): errors and state as
Kafka answers them, fencing, timeouts, expiry, and recovery of PrepareCommit after kill -9."""

from __future__ import annotations

import re
import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from protocol import records as rb
from protocol.errors import ErrorCode
from tests.integration.test_metrics import scrape
from tests.support.clients import consume_all, create_topic
from tests.support.raw import RawClient, produce_request
from tests.support.raw import describe_transaction as describe

RETRY = (ErrorCode.concurrent_transactions, ErrorCode.coordinator_load_in_progress,
         ErrorCode.coordinator_not_available, ErrorCode.not_coordinator)


def find_coordinator(c: RawClient, txn_id: str):
    deadline = time.monotonic() + 15
    while True:
        r = c.call(10, 4, {"key_type": 1, "coordinator_keys": [txn_id]}).coordinators[0]
        if r.error_code == 0 or time.monotonic() > deadline:
            return r
        time.sleep(0.05)


def init_pid(c: RawClient, txn_id: str, timeout_ms: int = 60000, version: int = 4, pid: int = -1, epoch: int = -1,
             retry=RETRY):
    """InitProducerId as a client does it: find the coordinator, retry the retriable errors."""
    find_coordinator(c, txn_id)
    fields = {"transactional_id": txn_id, "transaction_timeout": timeout_ms, "producer_id": pid, "producer_epoch": epoch}
    deadline = time.monotonic() + 15
    while True:
        r = c.call(22, version, fields)
        if r.error_code not in retry or time.monotonic() > deadline:
            return r
        time.sleep(0.05)


def add_partitions(c: RawClient, txn_id: str, pid: int, epoch: int, topic: str, version: int = 3,
                   partitions=(0,)) -> int | dict:
    r = c.call(24, version, {"v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
                             "v3_and_below_producer_epoch": epoch,
                             "v3_and_below_topics": [{"name": topic, "partitions": list(partitions)}]})
    codes = {(t.name, p.partition_index): p.partition_error_code
             for t in r.results_by_topic_v3_and_below for p in t.results_by_partition}
    return codes[(topic, partitions[0])] if len(codes) == 1 else codes


def end_txn(c: RawClient, txn_id: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
    return c.call(26, version, {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch,
                                "committed": commit}).error_code


def wait_state(c: RawClient, txn_id: str, state: str, timeout: float = 10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        d = describe(c, txn_id)
        if d.transaction_state == state:
            return d
        time.sleep(0.05)
    raise AssertionError(f"{txn_id} never reached {state}: {describe(c, txn_id)}")


def txn_produce(c: RawClient, topic: str, txn_id: str, pid: int, epoch: int, seq: int):
    batch = bytes(rb.build_batch([(b"k", b"v")], timestamp=int(time.time() * 1000), producer_id=pid,
                                 producer_epoch=epoch, base_sequence=seq, transactional=True))
    req = produce_request(topic, batch)
    req = type(req)(transactional_id=txn_id, acks=-1, timeout=req.timeout, topic_data=req.topic_data)
    return c.request(0, 9, req).responses[0].partition_responses[0].error_code


def read_committed_end(c: RawClient, topic: str) -> int:
    return c.call(2, 7, {"replica_id": -1, "isolation_level": 1, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                        "timestamp": -1}]}]}).topics[0].partitions[0].offset


@pytest.fixture
def topic(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    return topic_name


# --- FindCoordinator / InitProducerId ---------------------------------------------------------------

def test_find_coordinator_for_transactions_both_layouts(broker):
    with RawClient(broker.bootstrap) as c:
        r = find_coordinator(c, "some-txn")
        assert (r.error_code, r.node_id, f"{r.host}:{r.port}") == (0, 1, broker.bootstrap)
        v3 = c.call(10, 3, {"key": "some-txn", "key_type": 1})
        assert (v3.error_code, v3.port) == (0, r.port)
        assert c.call(10, 3, {"key": "", "key_type": 1}).error_code == 0  # as Kafka 4.3.1


def test_init_producer_id_argument_errors(broker, topic_name):
    with RawClient(broker.bootstrap) as c:
        find_coordinator(c, topic_name)
        assert init_pid(c, topic_name, timeout_ms=900_001).error_code == ErrorCode.invalid_transaction_timeout
        assert init_pid(c, topic_name, timeout_ms=0).error_code == ErrorCode.invalid_transaction_timeout
        assert init_pid(c, topic_name, pid=5, epoch=-1).error_code == ErrorCode.invalid_request
        assert init_pid(c, "").error_code == ErrorCode.invalid_request


def test_commit_cycle_and_idempotent_end_txn_retry(broker, topic):
    txn = f"{topic}-txn"
    with RawClient(broker.bootstrap) as c:
        r = init_pid(c, txn)
        assert r.error_code == 0 and r.producer_epoch == 0
        pid, epoch = r.producer_id, r.producer_epoch
        d = describe(c, txn)
        assert (d.transaction_state, d.transaction_start_time_ms, d.transaction_timeout_ms) == ("Empty", -1, 60000)
        assert end_txn(c, txn, pid, epoch, True) == ErrorCode.invalid_txn_state  # Empty
        assert add_partitions(c, txn, pid, epoch, topic) == 0
        assert describe(c, txn).transaction_state == "Ongoing"
        assert txn_produce(c, topic, txn, pid, epoch, 0) == 0
        assert end_txn(c, txn, pid, epoch, True) == 0
        wait_state(c, txn, "CompleteCommit")
        assert read_committed_end(c, topic) == 2  # the record and its COMMIT marker
        assert end_txn(c, txn, pid, epoch, True) == 0  # a retried commit
        assert end_txn(c, txn, pid, epoch, False) == ErrorCode.invalid_txn_state
        assert init_pid(c, txn).producer_epoch == 1  # next incarnation bumps the epoch


def test_add_partitions_with_an_unknown_partition_adds_nothing(broker, topic):
    txn = f"{topic}-txn"
    with RawClient(broker.bootstrap) as c:
        r = init_pid(c, txn)
        codes = add_partitions(c, txn, r.producer_id, r.producer_epoch, topic, partitions=(0, 7))
        assert codes == {(topic, 0): ErrorCode.operation_not_attempted, (topic, 7): ErrorCode.unknown_topic_or_partition}
        assert describe(c, txn).transaction_state == "Empty"


def test_verify_only_add_partitions_v4(broker, topic):
    txn = f"{topic}-txn"
    with RawClient(broker.bootstrap) as c:
        r = init_pid(c, txn)
        assert add_partitions(c, txn, r.producer_id, r.producer_epoch, topic) == 0
        create_topic(broker.bootstrap, f"{topic}-b", 1)
        resp = c.call(24, 4, {"transactions": [{
            "transactional_id": txn, "producer_id": r.producer_id, "producer_epoch": r.producer_epoch,
            "verify_only": True, "topics": [{"name": topic, "partitions": [0]}, {"name": f"{topic}-b", "partitions": [0]}]}]})
        codes = {(t.name, p.partition_index): p.partition_error_code
                 for t in resp.results_by_transaction[0].topic_results for p in t.results_by_partition}
        assert resp.error_code == 0
        assert codes == {(topic, 0): 0, (f"{topic}-b", 0): ErrorCode.transaction_abortable}
        assert describe(c, txn).transaction_state == "Ongoing"


def test_unverified_transactional_produce_is_refused(broker, topic):
    txn = f"{topic}-txn"
    with RawClient(broker.bootstrap) as c:
        r = init_pid(c, txn)
        # The partition was never added to the transaction (KIP-890 verification).
        assert txn_produce(c, topic, txn, r.producer_id, r.producer_epoch, 0) == ErrorCode.invalid_txn_state


# --- fencing -----------------------------------------------------------------------------------------

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
        assert read_committed_end(c, topic) == 2  # the aborted record and its ABORT marker
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
        find_coordinator(c, f"{topic}-nobody")
        assert add_partitions(c, f"{topic}-nobody", 12345, 0, topic) == ErrorCode.invalid_producer_id_mapping
        assert end_txn(c, f"{topic}-nobody", 12345, 0, True) == ErrorCode.invalid_producer_id_mapping
        assert describe(c, f"{topic}-nobody").error_code == ErrorCode.transactional_id_not_found


def test_kip360_bump_with_current_epoch(broker, topic):
    txn = f"{topic}-txn"
    with RawClient(broker.bootstrap) as c:
        r = init_pid(c, txn)
        bumped = init_pid(c, txn, pid=r.producer_id, epoch=r.producer_epoch)
        assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (0, r.producer_id, r.producer_epoch + 1)
        retried = init_pid(c, txn, pid=r.producer_id, epoch=r.producer_epoch)
        assert (retried.error_code, retried.producer_epoch) == (0, r.producer_epoch + 1)
        stale = init_pid(c, txn, pid=r.producer_id, epoch=r.producer_epoch + 5)
        assert stale.error_code == ErrorCode.producer_fenced
        assert init_pid(c, txn, version=3, pid=r.producer_id, epoch=r.producer_epoch + 5).error_code == \
            ErrorCode.invalid_producer_epoch


def test_confluent_kafka_producer_is_fenced_by_a_second_incarnation(broker, topic):
    txn = f"{topic}-cfk"
    conf = {"bootstrap.servers": broker.bootstrap, "transactional.id": txn, "linger.ms": 5}
    first = Producer(conf)
    first.init_transactions(20)
    first.begin_transaction()
    first.produce(topic, b"zombie")
    first.flush(10)
    second = Producer(conf)
    second.init_transactions(30)  # fences the first and aborts its transaction
    second.begin_transaction()
    second.produce(topic, b"winner")
    second.commit_transaction(30)
    with pytest.raises(KafkaException) as err:
        first.commit_transaction(10)
    assert err.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                        KafkaError.INVALID_PRODUCER_EPOCH)
    values = [m.value() for m in consume_all(broker.bootstrap, topic, 1, 1, **{"isolation.level": "read_committed"})]
    assert values == [b"winner"]


# --- timeouts, expiry, restart ------------------------------------------------------------------------

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
        assert read_committed_end(c, topic_name) == 2
    assert re.search(r"txn_forced_abort.*transaction timed out", b.output())
    text = scrape(b)
    assert re.search(r'kbroker_transaction_coordinator_events_total\{event="aborted",reason="transaction timed out"\} 1', text)


def test_idle_transactional_id_expires(own_broker, topic_name):
    b = own_broker(**{"transactional.id.expiration.ms": "1000",
                      "transaction.remove.expired.transaction.cleanup.interval.ms": "200"})
    create_topic(b.bootstrap, topic_name, 1)
    txn = f"{topic_name}-txn"
    with RawClient(b.bootstrap) as c:
        r = init_pid(c, txn)
        deadline = time.monotonic() + 10
        while describe(c, txn).error_code == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert describe(c, txn).error_code == ErrorCode.transactional_id_not_found
        assert add_partitions(c, txn, r.producer_id, r.producer_epoch, topic_name) == \
            ErrorCode.invalid_producer_id_mapping
    assert "txn_id_expired" in b.output()
    b.restart()  # the tombstone is durable: still gone after a restart
    with RawClient(b.bootstrap) as c:
        find_coordinator(c, txn)
        deadline = time.monotonic() + 10
        while describe(c, txn).error_code == ErrorCode.coordinator_load_in_progress and time.monotonic() < deadline:
            time.sleep(0.05)
        assert describe(c, txn).error_code == ErrorCode.transactional_id_not_found


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
        assert read_committed_end(c, topic_name) == 0  # no marker: the LSO is held
    b.kill9()
    b.overrides.pop("test.fault.points")
    b.start()
    with RawClient(b.bootstrap) as c:
        wait_state(c, txn, "CompleteCommit")
        assert read_committed_end(c, topic_name) == 2  # the record and its COMMIT marker
        nxt = init_pid(c, txn)
        assert (nxt.error_code, nxt.producer_id, nxt.producer_epoch) == (0, r.producer_id, r.producer_epoch + 1)
    assert "txn_completing_after_load" in b.output()


# --- describe / list -------------------------------------------------------------------------------------

def test_list_transactions_filters(broker, topic):
    txn = f"{topic}-txn"
    with RawClient(broker.bootstrap) as c:
        r = init_pid(c, txn)
        assert add_partitions(c, txn, r.producer_id, r.producer_epoch, topic) == 0
        resp = c.call(66, 1, {"state_filters": ["Ongoing", "Bogus"], "producer_id_filters": [r.producer_id],
                              "duration_filter": -1})
        assert resp.error_code == 0 and resp.unknown_state_filters == ("Bogus",)
        assert [(t.transactional_id, t.transaction_state) for t in resp.transaction_states] == [(txn, "Ongoing")]
        resp = c.call(66, 1, {"state_filters": [], "producer_id_filters": [r.producer_id],
                              "duration_filter": 3_600_000})
        assert resp.transaction_states == ()
        d = describe(c, txn)
        assert (d.transaction_state, d.producer_id, d.producer_epoch) == ("Ongoing", r.producer_id, r.producer_epoch)
        assert end_txn(c, txn, r.producer_id, r.producer_epoch, False) == 0


# --- offsets in a transaction --------------------------------------------------------------------------

def txn_offset_commit(c: RawClient, txn: str, group: str, pid: int, epoch: int, topic: str, offset: int,
                      version: int = 3) -> int:
    r = c.call(28, version, {"transactional_id": txn, "group_id": group, "producer_id": pid,
                             "producer_epoch": epoch, "generation_id": -1, "member_id": "",
                             "group_instance_id": None, "topics": [{"name": topic, "partitions": [
                                 {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
                                  "committed_metadata": ""}]}]})
    return r.topics[0].partitions[0].error_code


def committed(c: RawClient, group: str, topic: str, require_stable: bool = True):
    r = c.call(9, 7, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}],
                      "require_stable": require_stable})
    p = r.topics[0].partitions[0]
    return p.error_code, p.committed_offset


def test_offsets_commit_with_the_transaction(broker, topic):
    txn, group = f"{topic}-txn", f"{topic}-group"
    with RawClient(broker.bootstrap) as c:
        r = init_pid(c, txn)
        pid, epoch = r.producer_id, r.producer_epoch
        c.call(10, 3, {"key": group, "key_type": 0})
        # Not added with AddOffsetsToTxn first: refused by KIP-890 verification.
        assert txn_offset_commit(c, txn, group, pid, epoch, topic, 5) == ErrorCode.invalid_txn_state
        assert c.call(25, 3, {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch,
                              "group_id": group}).error_code == 0
        assert txn_offset_commit(c, txn, group, pid, epoch, topic, 5) == 0
        assert committed(c, group, topic) == (ErrorCode.unstable_offset_commit, -1)
        assert txn_offset_commit(c, txn, group, pid, epoch + 1, topic, 6) == ErrorCode.invalid_producer_epoch
        assert end_txn(c, txn, pid, epoch, True) == 0
        wait_state(c, txn, "CompleteCommit")
        assert committed(c, group, topic) == (0, 5)


def test_offsets_of_a_fenced_transaction_stay_aborted_when_their_append_completes_late(own_broker, topic_name):
    """Issue 18's lost write on a real broker: the TxnOffsetCommit's append is held (fault
    point, as a paused follower holds the high watermark) while a new incarnation's
    InitProducerId aborts the transaction; the append completes after the ABORT marker, and the
    new incarnation's first COMMIT (same producer id, bumped epoch) must not commit the aborted
    transaction's offsets."""
    b = own_broker(**{"test.fault.points": "group.txn.offsets.delay:3000"})
    create_topic(b.bootstrap, topic_name, 1)
    txn, group = f"{topic_name}-txn", f"{topic_name}-group"
    with RawClient(b.bootstrap, timeout=30) as old_client, RawClient(b.bootstrap, timeout=30) as c:
        old = init_pid(old_client, txn)
        old_client.call(10, 3, {"key": group, "key_type": 0})
        assert old_client.call(25, 3, {"transactional_id": txn, "producer_id": old.producer_id,
                                       "producer_epoch": old.producer_epoch, "group_id": group}).error_code == 0
        old_client.send_call(28, 3, {
            "transactional_id": txn, "group_id": group, "producer_id": old.producer_id,
            "producer_epoch": old.producer_epoch, "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": topic_name, "partitions": [{"partition_index": 0, "committed_offset": 7200,
                                                             "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
        new = init_pid(c, txn)
        assert new.error_code == 0 and new.producer_id == old.producer_id
        assert new.producer_epoch > old.producer_epoch
        held = old_client.receive(28, 3)  # completes after the ABORT marker
        assert held.topics[0].partitions[0].error_code == 0
        assert c.call(25, 3, {"transactional_id": txn, "producer_id": new.producer_id,
                              "producer_epoch": new.producer_epoch, "group_id": group}).error_code == 0
        assert end_txn(c, txn, new.producer_id, new.producer_epoch, True) == 0
        wait_state(c, txn, "CompleteCommit")
        assert committed(c, group, topic_name) == (0, -1)


# The verification guard (KIP-890 part 1): a batch or an offset commit verified as part of a
# transaction that a marker then ends must not open a transaction of its own. With the fault
# point, the coordinator's answer reaches the append 2 s late; the abort goes in between.
VERIFIED_LATE = {"test.fault.points": "txn.verification.delay:2000"}
VERIFICATION_TAKEN_UP_S = 0.5  # the held request is taken up first; nothing outside shows when


def _late_batch(producer_id: int, epoch: int) -> bytes:
    """The transaction's first batch, the one a fault point holds while the transaction ends."""
    return bytes(rb.build_batch([(b"k", b"late")], timestamp=int(time.time() * 1000), producer_id=producer_id,
                                producer_epoch=epoch, base_sequence=0, transactional=True))


def test_a_produce_verified_before_its_transaction_aborted_opens_no_transaction(own_broker, topic_name):
    b = own_broker(**VERIFIED_LATE)
    create_topic(b.bootstrap, topic_name, 1)
    txn = f"{topic_name}-txn"
    with RawClient(b.bootstrap, timeout=30) as delayed, RawClient(b.bootstrap, timeout=30) as c:
        r = init_pid(c, txn)
        pid, epoch = r.producer_id, r.producer_epoch
        assert add_partitions(c, txn, pid, epoch, topic_name) == 0
        batch = _late_batch(pid, epoch)
        req = produce_request(topic_name, batch)
        delayed.send(0, 9, type(req)(transactional_id=txn, acks=-1, timeout=req.timeout, topic_data=req.topic_data))
        time.sleep(VERIFICATION_TAKEN_UP_S)
        assert end_txn(c, txn, pid, epoch, False) == 0
        wait_state(c, txn, "CompleteAbort")
        late = delayed.receive(0, 9).responses[0].partition_responses[0]
        assert late.error_code == ErrorCode.invalid_txn_state
        # Nothing hangs open on the partition: the last stable offset is its end.
        hw = c.call(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic_name, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                                 "timestamp": -1}]}]}).topics[0].partitions[0].offset
        assert read_committed_end(c, topic_name) == hw


def test_an_offset_commit_verified_before_its_transaction_aborted_is_never_committed(own_broker, topic_name):
    """Without the guard the late offsets joined the producer's next transaction (same epoch
    in transaction version 1) and its COMMIT published them: a lost write."""
    b = own_broker(**VERIFIED_LATE)
    create_topic(b.bootstrap, topic_name, 1)
    txn, group = f"{topic_name}-txn", f"{topic_name}-group"
    with RawClient(b.bootstrap, timeout=30) as delayed, RawClient(b.bootstrap, timeout=30) as c:
        r = init_pid(c, txn)
        pid, epoch = r.producer_id, r.producer_epoch
        c.call(10, 3, {"key": group, "key_type": 0})
        add_offsets = {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch, "group_id": group}
        assert c.call(25, 3, add_offsets).error_code == 0
        delayed.send_call(28, 3, {
            "transactional_id": txn, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
            "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": topic_name, "partitions": [{"partition_index": 0, "committed_offset": 7200,
                                                             "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
        time.sleep(VERIFICATION_TAKEN_UP_S)
        assert end_txn(c, txn, pid, epoch, False) == 0
        wait_state(c, txn, "CompleteAbort")
        assert delayed.receive(28, 3).topics[0].partitions[0].error_code == ErrorCode.invalid_txn_state
        assert c.call(25, 3, add_offsets).error_code == 0
        assert end_txn(c, txn, pid, epoch, True) == 0
        wait_state(c, txn, "CompleteCommit")
        assert committed(c, group, topic_name) == (0, -1)


def test_txn_offset_commit_of_a_fenced_incarnation_is_refused_and_never_committed(broker, topic):
    txn, group = f"{topic}-txn", f"{topic}-group"
    with RawClient(broker.bootstrap) as c:
        old = init_pid(c, txn)
        c.call(10, 3, {"key": group, "key_type": 0})
        assert c.call(25, 3, {"transactional_id": txn, "producer_id": old.producer_id,
                              "producer_epoch": old.producer_epoch, "group_id": group}).error_code == 0
        new = init_pid(c, txn)
        assert new.error_code == 0 and new.producer_epoch > old.producer_epoch
        code = txn_offset_commit(c, txn, group, old.producer_id, old.producer_epoch, topic, 7200)
        assert code in (ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced)
        assert c.call(25, 3, {"transactional_id": txn, "producer_id": new.producer_id,
                              "producer_epoch": new.producer_epoch, "group_id": group}).error_code == 0
        assert end_txn(c, txn, new.producer_id, new.producer_epoch, True) == 0
        wait_state(c, txn, "CompleteCommit")
        assert committed(c, group, topic) == (0, -1)


def test_a_tv2_produce_held_past_the_end_of_its_transaction_never_joins_the_next(own_broker, topic_name):
    """Transaction version 2 (Produce v12, EndTxn v5): the produce's partition is added, its
    answer held by the fault point while the producer commits; the COMMIT marker (at the bumped
    epoch) lands first, so the held batch, at the old epoch, is refused. The next transaction,
    at the bumped epoch, commits only its own record."""
    from tests.integration.test_transaction_version2 import _end, _produce

    b = own_broker(**VERIFIED_LATE)
    create_topic(b.bootstrap, topic_name, 1)
    txn = f"{topic_name}-txn"
    with RawClient(b.bootstrap, timeout=30) as delayed, RawClient(b.bootstrap, timeout=30) as c:
        r = init_pid(c, txn)
        pid, epoch = r.producer_id, r.producer_epoch
        batch = _late_batch(pid, epoch)
        delayed.send_call(0, 12, {"transactional_id": txn, "acks": -1, "timeout": 30000, "topic_data": [
            {"name": topic_name, "partition_data": [{"index": 0, "records": batch}]}]})
        wait_state(c, txn, "Ongoing")  # the leader added the partition; its answer is held
        assert _end(c, txn, pid, epoch, commit=True) == (0, pid, epoch + 1)
        wait_state(c, txn, "CompleteCommit")
        late = delayed.receive(0, 12).responses[0].partition_responses[0]
        assert late.error_code in (ErrorCode.invalid_txn_state, ErrorCode.invalid_producer_epoch)
        assert _produce(c, topic_name, txn, pid, epoch + 1, 0) == 0  # held too, but nothing ends meanwhile
        assert _end(c, txn, pid, epoch + 1, commit=True) == (0, pid, epoch + 2)
        wait_state(c, txn, "CompleteCommit")
        records = consume_all(b.bootstrap, topic_name, 1, 10, timeout=3, **{"isolation.level": "read_committed"})
        assert [m.value() for m in records] == [b"v0"]  # the next transaction's record, never the late one
