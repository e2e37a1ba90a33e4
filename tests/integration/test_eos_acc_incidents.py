"""EOS acceptance 7: the incidents of seed-digest section 8, as single-broker tests.

Each incident that can happen on one broker has a test named after it:

- 8.1 power loss -> ProducerFencedException. The stall variant (the transaction outlives
  transaction.timeout.ms, the coordinator aborts it with an epoch bump, the producer's
  next call is fenced) is ``test_eos_acc_fencing.py::test_8_1_*``; the kill -9 variants (the
  broker is down longer than the timeout / shorter with a long timeout; retried batches
  deduplicated across the unclean restart) are ``test_eos_acc_restart.py::test_8_1_*``.
- 8.4 "transaction failed but message committed": (a) and (b) (transactional.id
  expiration) are ``test_eos_acc_expiry.py::test_8_4_*``; (c) EndTxn(COMMIT) after a timeout
  abort is ``test_eos_acc_fencing.py::test_8_4_c_*``.
- 8.5 zombie fencing with a fixed vs a random transactional.id:
  ``test_eos_acc_fencing.py::test_8_5_*`` (exact offsets, epochs and markers) and
  ``test_zombie_fencing_*`` per client.
- 8.6 transaction.timeout.ms below the check interval: ``test_eos_acc_fencing.py::test_8_6_*``.
- 8.7 initTransactions on a cold broker / blocked coordinator discovery: here; while the
  transaction log loads after a restart: ``test_eos_acc_restart.py::test_8_7_*``.
- 8.8 message too large inside a transaction: here.

Those that cannot happen on one broker:

- 8.2 "the client hasn't received acknowledgment ... can no longer retry": needs acks=-1
  requests that time out because followers do not replicate (ISR, min.insync.replicas);
  a single broker acknowledges acks=-1 on its own append. (The deduplication it relies on
  is tested on the wire in test_eos_acc_raw.py and across kill -9 in test_eos_acc_restart.py.)
- 8.3 REQUEST_TIMED_OUT when brokers cannot reach each other: needs an inter-broker
  network partition, leader movement and ISR shrinking.
- 8.9 metadata fetch taking minutes: needs partitions whose leader is on a down broker
  (LEADER_NOT_AVAILABLE while the others answer).
- 8.10 thread-safety and API misuse: client-side rules (one open transaction per producer,
  commit/abort once). The broker-side part, that the coordinator does not depend on the
  order of requests from different producers, is what every test with two interleaved
  producers exercises (test_eos_acc_visibility.py, test_eos_acc_fencing.py).

Target: ``KBROKER_EOS_TARGET=kafka`` for a real Apache Kafka, else our broker (8.7 starts a
fresh broker of the target's kind).
"""

from __future__ import annotations

import re
import time

import pytest

from protocol.errors import ErrorCode
from tests.support import eos_accept
from tests.support.eos_accept import (
    add_partitions,
    batch,
    call,
    cf_producer,
    create_topic,
    drain,
    end_txn,
    fresh_broker,
    init_producer_id,
    produce,
    raw,
    values_of,
    wait_stable,
)

eos_broker = eos_accept.eos_broker  # the module's broker fixture

COORDINATOR_NOT_READY = {ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress}


# --------------------------------------------------------------------------- 8.7

def test_8_7_first_init_transactions_on_a_cold_broker_succeeds(own_broker, topic_name):
    """The first FindCoordinator(TRANSACTION) creates __transaction_state and keeps answering
    (COORDINATOR_NOT_AVAILABLE / LOAD_IN_PROGRESS, promptly) until the coordinator is
    ready; a client's initTransactions rides over it and the first transaction commits."""
    with fresh_broker(own_broker) as b, raw(b.bootstrap, timeout=5) as c:
        seen = []
        deadline = time.monotonic() + 30
        while True:
            t0 = time.monotonic()
            r = call(c, 10, 3, {"key": f"{topic_name}-tx", "key_type": 1})
            assert time.monotonic() - t0 < 3, "FindCoordinator must answer promptly while the coordinator is not ready"
            seen.append(r.error_code)
            if r.error_code == ErrorCode.none:
                break
            assert r.error_code in COORDINATOR_NOT_READY, r
            assert time.monotonic() < deadline, f"no coordinator after 30 s: {seen[-5:]}"
            time.sleep(0.05)
        create_topic(b.bootstrap, topic_name, 1)
        p = cf_producer(b.bootstrap, f"{topic_name}-tx2")  # its own id: a second cold key lookup
        p.init_transactions(60)
        p.begin_transaction()
        p.produce(topic_name, b"first", partition=0)
        p.commit_transaction(30)
        wait_stable(b.bootstrap, topic_name)
        assert values_of(drain(b.bootstrap, topic_name)) == [b"first"]


def test_8_7_single_broker_with_transaction_log_rf_3_fails_clearly(own_broker, topic_name):
    """transaction.state.log.replication.factor=3 on one broker: FindCoordinator keeps
    answering COORDINATOR_NOT_AVAILABLE promptly (no hang), initTransactions times out, and
    the broker log says why (the replication factor cannot be met)."""
    from confluent_kafka import KafkaException

    with fresh_broker(own_broker, **{"transaction.state.log.replication.factor": "3"}) as b:
        with raw(b.bootstrap, timeout=5) as c:
            for _ in range(5):
                t0 = time.monotonic()
                r = call(c, 10, 3, {"key": f"{topic_name}-tx", "key_type": 1})
                assert time.monotonic() - t0 < 3
                assert r.error_code == ErrorCode.coordinator_not_available, r
                time.sleep(0.3)
        p = cf_producer(b.bootstrap, f"{topic_name}-tx")
        with pytest.raises(KafkaException):
            p.init_transactions(5)
        lines = [ln for ln in b.log_text().splitlines()
                 if "__transaction_state" in ln and re.search(r"replication[ _.-]?factor", ln, re.I)
                 and not ln.startswith("\t")]
        assert lines, "the broker log must say that __transaction_state cannot get its replication factor"


# --------------------------------------------------------------------------- 8.8

SMALL_MAX = 10_000  # the topic's max.message.bytes


def test_8_8_message_too_large_in_transaction_is_abortable_confluent(eos_broker, topic_name):
    """The broker enforces max.message.bytes (MESSAGE_TOO_LARGE) even when the client's
    own limit is higher; in a transaction that is an abortable error: the commit fails,
    abort works, the producer commits again, and read_committed has each committed
    record once."""
    from confluent_kafka import KafkaError, KafkaException

    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 1, {"max.message.bytes": str(SMALL_MAX)})
    p = cf_producer(bs, f"{topic_name}-tx")
    p.init_transactions(30)
    p.begin_transaction()
    reports = []
    p.produce(topic_name, b"ok-before", partition=0, on_delivery=lambda e, m: reports.append(e))
    assert p.flush(30) == 0
    p.produce(topic_name, b"x" * (3 * SMALL_MAX), partition=0, on_delivery=lambda e, m: reports.append(e))
    p.flush(30)
    assert reports[0] is None
    assert reports[1] is not None and reports[1].code() == KafkaError.MSG_SIZE_TOO_LARGE, reports
    with pytest.raises(KafkaException) as exc:
        p.commit_transaction(30)
    assert exc.value.args[0].txn_requires_abort() and not exc.value.args[0].fatal(), exc.value.args[0]
    p.abort_transaction(30)
    # librdkafka counts the refused message's sequence as used, so its next transaction
    # fails once with OUT_OF_ORDER_SEQUENCE_NUMBER (abortable); the abort bumps the epoch
    # and the retry commits. The broker side (the refusal consumes no sequence) is pinned
    # by the raw test below.
    for _attempt in range(3):
        p.begin_transaction()
        p.produce(topic_name, b"ok-after", partition=0)
        try:
            p.commit_transaction(30)
            break
        except KafkaException as exc:
            err = exc.args[0]
            assert err.txn_requires_abort() and not err.fatal(), err
            p.abort_transaction(30)
    else:
        raise AssertionError("the producer could not commit again after MESSAGE_TOO_LARGE")
    wait_stable(bs, topic_name)
    assert values_of(drain(bs, topic_name)) == [b"ok-after"]
    assert values_of(drain(bs, topic_name, isolation="read_uncommitted")) == [b"ok-before", b"ok-after"]


def test_8_8_message_too_large_in_transaction_raw(eos_broker, topic_name):
    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 1, {"max.message.bytes": str(SMALL_MAX)})
    txid = f"{topic_name}-tx"
    with raw(bs) as c:
        r = init_producer_id(c, txid)
        pid, e = r.producer_id, r.producer_epoch
        assert add_partitions(c, txid, pid, e, {topic_name: [0]}) == {(topic_name, 0): ErrorCode.none}
        assert produce(c, topic_name, batch([b"small"], pid, e, 0, transactional=True), txid).error_code == 0
        big = produce(c, topic_name, batch([b"x" * (3 * SMALL_MAX)], pid, e, 1, transactional=True), txid)
        assert big.error_code == ErrorCode.message_too_large, big
        # the refused batch did not consume its sequence: 1 is still next
        assert produce(c, topic_name, batch([b"small2"], pid, e, 1, transactional=True), txid).error_code == 0
        assert end_txn(c, txid, pid, e, commit=False) == ErrorCode.none
        r = init_producer_id(c, txid, producer_id=pid, producer_epoch=e, retry=[ErrorCode.concurrent_transactions])
        assert r.error_code == ErrorCode.none, r
        pid, e = r.producer_id, r.producer_epoch
        assert add_partitions(c, txid, pid, e, {topic_name: [0]},
                              retry=[ErrorCode.concurrent_transactions]) == {(topic_name, 0): ErrorCode.none}
        assert produce(c, topic_name, batch([b"after"], pid, e, 0, transactional=True), txid).error_code == 0
        assert end_txn(c, txid, pid, e, commit=True) == ErrorCode.none
    wait_stable(bs, topic_name)
    assert values_of(drain(bs, topic_name)) == [b"after"]
