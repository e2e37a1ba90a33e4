"""Digest 8.4 (a) and (b): transactional.id expiration, which the incident was blamed on.

(a) An id idle (no open transaction) for longer than transactional.id.expiration.ms is
    removed: the old producer's next AddPartitionsToTxn / EndTxn gets
    INVALID_PRODUCER_ID_MAPPING (never a silent success), nothing it sends becomes visible,
    and re-initialising gives a new producer id that works (raw protocol and
    confluent-kafka, whose client treats the error as abortable and re-initialises).
(b) An id with an open transaction never expires, however long it idles: only the
    transaction timeout aborts it, with an epoch bump (same producer id, epoch + 1).

The broker runs with transactional.id.expiration.ms=3000 and a 500 ms expiration scan.
Target: ``KBROKER_EOS_TARGET=kafka`` for a real Apache Kafka, else our broker.
"""

from __future__ import annotations

import time

import pytest

from protocol.errors import ErrorCode
from tests.support import eos_accept
from tests.support.eos_accept import (
    ABORT_SCAN_MS,
    add_partitions,
    batch,
    cf_producer,
    create_topic,
    describe_transaction,
    drain,
    end_txn,
    init_producer_id,
    produce,
    raw,
    txn_state,
    values_of,
    wait_stable,
    wait_until,
)

EXPIRATION_MS = 3000
EOS_BROKER_CONFIG = {
    "transactional.id.expiration.ms": str(EXPIRATION_MS),
    "transaction.remove.expired.transaction.cleanup.interval.ms": "500",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": str(ABORT_SCAN_MS),
}

eos_broker = eos_accept.eos_broker  # the module's broker fixture


def wait_expired(c, txid: str) -> None:
    wait_until(lambda: describe_transaction(c, txid).error_code == ErrorCode.transactional_id_not_found,
               EXPIRATION_MS / 1000 + 15, f"{txid} to expire", interval=0.25)


@pytest.mark.parametrize("reinit", ["fresh", "kip360"])
def test_8_4_a_expired_transactional_id_is_invalid_mapping_then_new_pid_raw(eos_broker, topic_name, reinit):
    """``reinit``: InitProducerId with -1/-1 (a new producer instance) or with the old
    producer id and epoch (what a KIP-360 client such as librdkafka or the Java producer
    sends to recover); both must get a new producer id, not a fence."""
    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 1)
    txid = f"{topic_name}-tx"
    with raw(bs) as c:
        r = init_producer_id(c, txid)
        pid, e = r.producer_id, r.producer_epoch
        assert add_partitions(c, txid, pid, e, {topic_name: [0]}) == {(topic_name, 0): ErrorCode.none}
        assert produce(c, topic_name, batch([b"one"], pid, e, 0, transactional=True), txid).error_code == 0
        assert end_txn(c, txid, pid, e, commit=True) == ErrorCode.none
        wait_until(lambda: txn_state(c, txid) == "CompleteCommit", 15, "CompleteCommit")
        idle_from = time.monotonic()
        wait_expired(c, txid)
        assert time.monotonic() - idle_from >= EXPIRATION_MS / 1000 - 1.0, "expired before the expiration time"

        assert add_partitions(c, txid, pid, e, {topic_name: [0]}) == \
            {(topic_name, 0): ErrorCode.invalid_producer_id_mapping}
        assert end_txn(c, txid, pid, e, commit=True) == ErrorCode.invalid_producer_id_mapping

        if reinit == "fresh":
            r = init_producer_id(c, txid)
        else:
            r = init_producer_id(c, txid, producer_id=pid, producer_epoch=e)
        assert r.error_code == ErrorCode.none, r
        assert r.producer_id != pid, "a re-initialised expired id must get a new producer id"
        pid2, e2 = r.producer_id, r.producer_epoch
        assert add_partitions(c, txid, pid2, e2, {topic_name: [0]}) == {(topic_name, 0): ErrorCode.none}
        assert produce(c, topic_name, batch([b"two"], pid2, e2, 0, transactional=True), txid).error_code == 0
        assert end_txn(c, txid, pid2, e2, commit=True) == ErrorCode.none
    wait_stable(bs, topic_name)
    assert values_of(drain(bs, topic_name)) == [b"one", b"two"]


def test_8_4_a_expired_transactional_id_confluent(eos_broker, topic_name):
    from confluent_kafka import KafkaException

    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 1)
    txid = f"{topic_name}-tx"
    p = cf_producer(bs, txid)
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic_name, b"one", partition=0)
    p.commit_transaction(30)
    with raw(bs) as c:
        pid = describe_transaction(c, txid).producer_id
        wait_expired(c, txid)

    p.begin_transaction()
    p.produce(topic_name, b"lost", partition=0)
    try:
        p.commit_transaction(30)
    except KafkaException as exc:
        err = exc.args[0]
        assert err.txn_requires_abort() and not err.fatal(), err
        p.abort_transaction(30)
    else:
        raise AssertionError("a transaction on an expired transactional id must not commit silently")
    p.begin_transaction()
    p.produce(topic_name, b"two", partition=0)
    p.commit_transaction(30)
    with raw(bs) as c:
        d = describe_transaction(c, txid)
        assert d.error_code == ErrorCode.none and d.producer_id != pid, d
    wait_stable(bs, topic_name)
    assert values_of(drain(bs, topic_name)) == [b"one", b"two"]


def test_8_4_b_open_transaction_never_expires_only_times_out(eos_broker, topic_name):
    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 1)
    txid = f"{topic_name}-tx"
    timeout_ms = 3 * EXPIRATION_MS
    with raw(bs) as c:
        r = init_producer_id(c, txid, timeout_ms=timeout_ms)
        pid, e = r.producer_id, r.producer_epoch
        assert add_partitions(c, txid, pid, e, {topic_name: [0]}) == {(topic_name, 0): ErrorCode.none}
        began = time.monotonic()
        assert produce(c, topic_name, batch([b"open"], pid, e, 0, transactional=True), txid).error_code == 0
        time.sleep(2 * EXPIRATION_MS / 1000)  # idle well past the expiration time
        d = describe_transaction(c, txid)
        assert (d.error_code, d.transaction_state, d.producer_id, d.producer_epoch) == (ErrorCode.none, "Ongoing", pid, e), d
        wait_until(lambda: txn_state(c, txid) == "CompleteAbort", timeout_ms / 1000 + 15, "the timeout abort",
                   interval=0.05)
        assert time.monotonic() - began >= timeout_ms / 1000 - 0.5
        d = describe_transaction(c, txid)
        assert (d.producer_id, d.producer_epoch) == (pid, e + 1), d
        assert end_txn(c, txid, pid, e, commit=True) == ErrorCode.producer_fenced
    wait_stable(bs, topic_name)
    assert values_of(drain(bs, topic_name)) == []
