"""EOS acceptance 6, on the wire: duplicate detection, sequence gaps and stale epochs.

- An idempotent or transactional batch retried while it is among the producer's last 5
  batches on the partition is acknowledged with its original offset and not appended
  again; retried once it has left that window, or sent with a sequence gap, it gets
  OUT_OF_ORDER_SEQUENCE_NUMBER (errata 43, 45).
- A stale producer epoch: Produce answers INVALID_PRODUCER_EPOCH (every version; Produce
  has no PRODUCER_FENCED). The coordinator APIs answer PRODUCER_FENCED on new versions and
  INVALID_PRODUCER_EPOCH on old ones: InitProducerId < 4, AddPartitionsToTxn < 2,
  AddOffsetsToTxn < 2, EndTxn < 2 (errata 42).
- InitProducerId validates transaction.timeout.ms against transaction.max.timeout.ms.
- A transactional batch that repeats the sequences of a batch from a transaction that has
  already ended (same producer epoch) is OUT_OF_ORDER_SEQUENCE_NUMBER, not a duplicate: a
  client that rewinds its sequences after an abort (librdkafka, for messages it purged) must
  not have its new records acknowledged at the offsets of aborted ones. Apache Kafka answers
  such a batch as a duplicate (the test pins both).

Target: ``KBROKER_EOS_TARGET=kafka`` for a real Apache Kafka, else our broker.
"""

from __future__ import annotations

import pytest

from protocol.errors import ErrorCode
from tests.support import eos_accept
from tests.support.eos_accept import (
    IS_KAFKA,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    add_partitions,
    batch,
    call,
    create_topic,
    drain,
    end_txn,
    init_producer_id,
    list_offset,
    produce,
    raw,
    values_of,
    wait_stable,
)

eos_broker = eos_accept.eos_broker  # the module's broker fixture

OOS = ErrorCode.out_of_order_sequence_number


@pytest.mark.parametrize("mode", ["idempotent", "transactional"])
def test_retry_inside_window_gets_original_offset_outside_or_gap_out_of_order(eos_broker, topic_name, mode):
    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 1)
    transactional = mode == "transactional"
    txid = f"{topic_name}-tx" if transactional else None
    with raw(bs) as c:
        r = init_producer_id(c, txid)
        assert r.error_code == ErrorCode.none, r
        pid, epoch = r.producer_id, r.producer_epoch
        if transactional:
            assert add_partitions(c, txid, pid, epoch, {topic_name: [0]}) == {(topic_name, 0): ErrorCode.none}

        def send(i: int, seq: int | None = None):
            values = [b"b%d-0" % i, b"b%d-1" % i]
            return produce(c, topic_name, batch(values, pid, epoch, 2 * i if seq is None else seq,
                                                transactional=transactional), txid)

        batches = [bytes(batch([b"b%d-0" % i, b"b%d-1" % i], pid, epoch, 2 * i, transactional=transactional))
                   for i in range(6)]
        for i, b in enumerate(batches):
            resp = produce(c, topic_name, b, txid)
            assert (resp.error_code, resp.base_offset) == (ErrorCode.none, 2 * i), resp
        hw = list_offset(c, topic_name, 0, READ_UNCOMMITTED)
        assert hw == 12

        # b1..b5 are the last five: retried byte for byte, each is acked at its first offset
        for i in (5, 1, 3):
            resp = produce(c, topic_name, batches[i], txid)
            assert (resp.error_code, resp.base_offset) == (ErrorCode.none, 2 * i), (i, resp)
        assert list_offset(c, topic_name, 0, READ_UNCOMMITTED) == hw, "a duplicate was appended"

        # b0 has left the window
        assert produce(c, topic_name, batches[0], txid).error_code == OOS
        # a gap: the next sequence is 12
        assert send(7, seq=13).error_code == OOS
        assert send(7, seq=14).error_code == OOS
        # the producer is not broken by the refusals: sequence 12 goes on
        resp = send(6)
        assert (resp.error_code, resp.base_offset) == (ErrorCode.none, 12), resp
        assert list_offset(c, topic_name, 0, READ_UNCOMMITTED) == 14
        if transactional:
            assert end_txn(c, txid, pid, epoch, commit=True) == ErrorCode.none
    wait_stable(bs, topic_name)
    expected = [b"b%d-%d" % (i, j) for i in range(7) for j in range(2)]
    assert values_of(drain(bs, topic_name, isolation="read_committed")) == expected
    assert values_of(drain(bs, topic_name, isolation="read_uncommitted")) == expected


def _transaction_on_a_new_topic(c, bs: str, topic: str, txid: str) -> tuple[int, int]:
    """A one-partition topic and a transaction of ``txid`` that holds its partition: (pid, epoch)."""
    create_topic(bs, topic, 1)
    r = init_producer_id(c, txid)
    assert add_partitions(c, txid, r.producer_id, r.producer_epoch, {topic: [0]}) == {(topic, 0): ErrorCode.none}
    return r.producer_id, r.producer_epoch


def test_batch_repeating_an_ended_transactions_sequences_is_not_a_duplicate(eos_broker, topic_name):
    """Transaction 1 appends sequences 0-2 and is aborted; transaction 2 of the same epoch sends
    three other records as sequences 0-2 (what librdkafka does when the abort purged messages
    whose produce it believed had failed). Taking them for a retry would acknowledge them at the
    aborted records' offsets and commit nothing: a lost write."""
    bs = eos_broker.bootstrap
    txid = f"{topic_name}-tx"
    with raw(bs) as c:
        pid, e = _transaction_on_a_new_topic(c, bs, topic_name, txid)
        aborted = batch([b"a0", b"a1", b"a2"], pid, e, 0, transactional=True)
        assert produce(c, topic_name, aborted, txid).error_code == ErrorCode.none
        assert end_txn(c, txid, pid, e, commit=False) == ErrorCode.none
        assert add_partitions(c, txid, pid, e, {topic_name: [0]},
                              retry=[ErrorCode.concurrent_transactions]) == {(topic_name, 0): ErrorCode.none}
        resp = produce(c, topic_name, batch([b"b0", b"b1", b"b2"], pid, e, 0, transactional=True), txid)
        if IS_KAFKA:  # Kafka's duplicate check: the aborted batch's offset, nothing appended
            assert (resp.error_code, resp.base_offset) == (ErrorCode.none, 0), resp
            assert end_txn(c, txid, pid, e, commit=True) == ErrorCode.none
            wait_stable(bs, topic_name)
            assert values_of(drain(bs, topic_name, isolation="read_committed")) == []
            return
        assert resp.error_code == OOS, resp
        assert list_offset(c, topic_name, 0, READ_UNCOMMITTED) == 4, "nothing appended after the marker"
        # the client aborts and bumps its epoch (KIP-360), then its records go in at sequence 0
        assert end_txn(c, txid, pid, e, commit=False) == ErrorCode.none
        r = init_producer_id(c, txid, producer_id=pid, producer_epoch=e, retry=[ErrorCode.concurrent_transactions])
        assert (r.error_code, r.producer_id, r.producer_epoch) == (ErrorCode.none, pid, e + 1), r
        assert add_partitions(c, txid, pid, e + 1, {topic_name: [0]},
                              retry=[ErrorCode.concurrent_transactions]) == {(topic_name, 0): ErrorCode.none}
        resp = produce(c, topic_name, batch([b"b0", b"b1", b"b2"], pid, e + 1, 0, transactional=True), txid)
        assert resp.error_code == ErrorCode.none, resp
        assert end_txn(c, txid, pid, e + 1, commit=True) == ErrorCode.none
    wait_stable(bs, topic_name)
    assert values_of(drain(bs, topic_name, isolation="read_committed")) == [b"b0", b"b1", b"b2"]


def test_stale_epoch_produce_is_invalid_producer_epoch_idempotent(eos_broker, topic_name):
    """An idempotent producer bumps its epoch itself (KIP-360): epoch + 1 at sequence 0
    is accepted, and the old epoch is refused from then on, on every Produce version."""
    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 1)
    with raw(bs) as c:
        r = init_producer_id(c, None)
        pid = r.producer_id
        assert produce(c, topic_name, batch([b"a"], pid, 0, 0)).base_offset == 0
        assert produce(c, topic_name, batch([b"b"], pid, 1, 0)).base_offset == 1
        for version in (3, 7, 9):
            resp = produce(c, topic_name, batch([b"stale"], pid, 0, 1), version=version)
            assert resp.error_code == ErrorCode.invalid_producer_epoch, (version, resp)
        assert produce(c, topic_name, batch([b"c"], pid, 1, 1)).base_offset == 2
    assert values_of(drain(bs, topic_name, isolation="read_uncommitted")) == [b"a", b"b", b"c"]


def test_stale_epoch_produce_is_invalid_producer_epoch_transactional(eos_broker, topic_name):
    bs = eos_broker.bootstrap
    txid = f"{topic_name}-tx"
    with raw(bs) as c:
        pid, e = _transaction_on_a_new_topic(c, bs, topic_name, txid)
        assert produce(c, topic_name, batch([b"old"], pid, e, 0, transactional=True), txid).error_code == 0
        assert end_txn(c, txid, pid, e, commit=True) == ErrorCode.none
        r = init_producer_id(c, txid, retry=[ErrorCode.concurrent_transactions])
        assert (r.producer_id, r.producer_epoch) == (pid, e + 1)
        assert add_partitions(c, txid, pid, e + 1, {topic_name: [0]},
                              retry=[ErrorCode.concurrent_transactions]) == {(topic_name, 0): ErrorCode.none}
        for version in (3, 9):
            resp = produce(c, topic_name, batch([b"stale"], pid, e, 1, transactional=True), txid, version=version)
            assert resp.error_code == ErrorCode.invalid_producer_epoch, (version, resp)
        assert produce(c, topic_name, batch([b"new"], pid, e + 1, 0, transactional=True), txid).error_code == 0
        assert end_txn(c, txid, pid, e + 1, commit=True) == ErrorCode.none
    wait_stable(bs, topic_name)
    assert values_of(drain(bs, topic_name, isolation="read_committed")) == [b"old", b"new"]


@pytest.fixture
def fenced_id(eos_broker, topic_name):
    """A transactional id at epoch e + 2 (three InitProducerIds): (txid, pid, e)."""
    txid = f"{topic_name}-tx"
    with raw(eos_broker.bootstrap) as c:
        first = init_producer_id(c, txid)
        assert first.error_code == ErrorCode.none, first
        for _ in range(2):
            r = init_producer_id(c, txid, retry=[ErrorCode.concurrent_transactions])
            assert r.error_code == ErrorCode.none, r
        assert (r.producer_id, r.producer_epoch) == (first.producer_id, first.producer_epoch + 2)
    return txid, first.producer_id, first.producer_epoch


@pytest.mark.parametrize("version,expected", [(3, ErrorCode.invalid_producer_epoch),
                                              (4, ErrorCode.producer_fenced),
                                              (5, ErrorCode.producer_fenced)])
def test_stale_epoch_init_producer_id_by_version(eos_broker, fenced_id, version, expected):
    txid, pid, e = fenced_id
    with raw(eos_broker.bootstrap) as c:
        r = init_producer_id(c, txid, producer_id=pid, producer_epoch=e, version=version)
        assert r.error_code == expected, r


@pytest.mark.parametrize("version,expected", [(0, ErrorCode.invalid_producer_epoch),
                                              (1, ErrorCode.invalid_producer_epoch),
                                              (2, ErrorCode.producer_fenced),
                                              (3, ErrorCode.producer_fenced)])
def test_stale_epoch_add_partitions_to_txn_by_version(eos_broker, fenced_id, topic_name, version, expected):
    txid, pid, e = fenced_id
    create_topic(eos_broker.bootstrap, topic_name, 1)
    with raw(eos_broker.bootstrap) as c:
        assert add_partitions(c, txid, pid, e, {topic_name: [0]}, version=version) == {(topic_name, 0): expected}


@pytest.mark.parametrize("version,expected", [(0, ErrorCode.invalid_producer_epoch),
                                              (1, ErrorCode.invalid_producer_epoch),
                                              (2, ErrorCode.producer_fenced),
                                              (3, ErrorCode.producer_fenced)])
def test_stale_epoch_add_offsets_to_txn_by_version(eos_broker, fenced_id, topic_name, version, expected):
    txid, pid, e = fenced_id
    with raw(eos_broker.bootstrap) as c:
        r = call(c, 25, version, {"transactional_id": txid, "producer_id": pid, "producer_epoch": e,
                                  "group_id": f"{topic_name}-g"})
        assert r.error_code == expected, r


@pytest.mark.parametrize("version,expected", [(0, ErrorCode.invalid_producer_epoch),
                                              (1, ErrorCode.invalid_producer_epoch),
                                              (2, ErrorCode.producer_fenced),
                                              (3, ErrorCode.producer_fenced),
                                              (4, ErrorCode.producer_fenced)])
@pytest.mark.parametrize("commit", [True, False])
def test_stale_epoch_end_txn_by_version(eos_broker, fenced_id, version, expected, commit):
    txid, pid, e = fenced_id
    with raw(eos_broker.bootstrap) as c:
        assert end_txn(c, txid, pid, e, commit=commit, version=version) == expected


def test_init_producer_id_validates_transaction_timeout(eos_broker, topic_name):
    """0 < transaction.timeout.ms <= transaction.max.timeout.ms (default 900000)."""
    with raw(eos_broker.bootstrap) as c:
        for bad in (900_001, 0, -1):
            r = init_producer_id(c, f"{topic_name}-{bad}", timeout_ms=bad)
            assert r.error_code == ErrorCode.invalid_transaction_timeout, (bad, r)
        assert init_producer_id(c, f"{topic_name}-ok", timeout_ms=900_000).error_code == ErrorCode.none


def test_end_txn_and_add_partitions_with_unknown_producer_id(eos_broker, fenced_id, topic_name):
    """The id's producer id is another: INVALID_PRODUCER_ID_MAPPING, not a fence."""
    txid, pid, e = fenced_id
    create_topic(eos_broker.bootstrap, topic_name, 1)
    with raw(eos_broker.bootstrap) as c:
        assert add_partitions(c, txid, pid + 100_000, e + 2, {topic_name: [0]}) == \
            {(topic_name, 0): ErrorCode.invalid_producer_id_mapping}
        assert end_txn(c, txid, pid + 100_000, e + 2, commit=True) == ErrorCode.invalid_producer_id_mapping
        assert end_txn(c, f"{txid}-never-initialised", pid, e, commit=True) == \
            ErrorCode.invalid_producer_id_mapping
        assert list_offset(c, topic_name, 0, READ_COMMITTED) == 0
