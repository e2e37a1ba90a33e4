"""EOS acceptance 3 and 4: zombie fencing, and the coordinator's transaction timeout.

3. A second producer with the same transactional.id fences the first: its
   InitProducerId aborts the first producer's open transaction, the first producer's next
   coordinator call fails as fenced (fatal, not abortable), none of its records ever
   become visible to read_committed (they are in the log: read_uncommitted sees them), and
   the second producer completes its own transactions. With confluent-kafka, kafka-python
   and aiokafka (aiokafka speaks the v0 transactional APIs, so it only recognises the
   fence if the broker answers INVALID_PRODUCER_EPOCH there, errata 42).
4. Digest 8.1: a producer that begins a transaction and stalls past transaction.timeout.ms
   is aborted by the coordinator (epoch bump, ABORT marker at the bumped epoch) and its
   next call fails as fenced, never as a silent success.

Also the raw-protocol incident tests whose assertions are exact epochs and markers:
8.5 (the same id fences with an ABORT at epoch+1 and the new producer at epoch+2;
different ids do not fence and the open transaction holds the LSO), 8.4 (c) (EndTxn
COMMIT after a timeout abort is PRODUCER_FENCED, never NONE), 8.6 (a transaction timeout
below the abort-scan interval still fires, at the interval's granularity).

The coordinator's timed-out-transaction scan runs every second here, and
transaction.max.timeout.ms is 60 s (a client asking for more is refused at
initTransactions). Both targets get EOS_BROKER_CONFIG.
Target: ``KBROKER_EOS_TARGET=kafka`` for a real Apache Kafka, else our broker.
"""

from __future__ import annotations

import time
import warnings

import pytest

from protocol.errors import ErrorCode
from tests.support import eos_accept
from tests.support.eos_accept import (
    ABORT_SCAN_MS,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    add_partitions,
    batch,
    cf_producer,
    create_topic,
    describe_transaction,
    drain,
    end_txn,
    fetch_batches,
    init_producer_id,
    list_offset,
    markers,
    produce,
    raw,
    txn_state,
    values_of,
    wait_until,
)

eos_broker = eos_accept.eos_broker  # the module's broker fixture

MAX_TIMEOUT_MS = 60000
EOS_BROKER_CONFIG = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": str(ABORT_SCAN_MS),
                     "transaction.max.timeout.ms": str(MAX_TIMEOUT_MS)}

STALL_TIMEOUT_MS = 2000


def vals(tag: str, n: int = 4) -> list[bytes]:
    return [f"{tag}{i}".encode() for i in range(n)]


def assert_zombie_outcome(bs: str, topic: str, written: list[bytes] | None = None) -> None:
    """z* (the fenced producer's; ``written`` of them reached the log) were aborted; g* (the
    new one's) committed."""
    wait_until(lambda: list_offset_pair(bs, topic)[0] == list_offset_pair(bs, topic)[1], 20,
               "the partition to become stable")
    rc = values_of(drain(bs, topic, isolation="read_committed"))
    assert not set(rc) & set(vals("z")), "a fenced producer's records became visible to read_committed"
    assert rc == vals("g")
    ru = values_of(drain(bs, topic, isolation="read_uncommitted"))
    assert [v for v in ru if v.startswith(b"z")] == (vals("z") if written is None else written)


def list_offset_pair(bs: str, topic: str) -> tuple[int, int]:
    with raw(bs) as c:
        return list_offset(c, topic, 0, READ_COMMITTED), list_offset(c, topic, 0, READ_UNCOMMITTED)


def is_fenced_confluent(err) -> bool:
    from confluent_kafka import KafkaError

    return err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)


# --------------------------------------------------------------------------- 3. zombie fencing

def test_zombie_fencing_confluent(eos_broker, topic_name):
    from confluent_kafka import KafkaException

    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 1)
    txid = f"{topic_name}-tx"
    zombie = cf_producer(bs, txid)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    for v in vals("z"):
        zombie.produce(topic_name, v, partition=0)
    assert zombie.flush(30) == 0

    fresh = cf_producer(bs, txid)
    fresh.init_transactions(30)  # fences the zombie and aborts its open transaction

    with pytest.raises(KafkaException) as exc:
        zombie.commit_transaction(30)
    err = exc.value.args[0]
    assert is_fenced_confluent(err) and err.fatal() and not err.txn_requires_abort(), err
    with pytest.raises(KafkaException):
        zombie.begin_transaction()  # fatal: the zombie stays unusable

    for round_ in range(2):
        fresh.begin_transaction()
        for v in vals("g")[round_ * 2:round_ * 2 + 2]:
            fresh.produce(topic_name, v, partition=0)
        fresh.commit_transaction(30)
    assert_zombie_outcome(bs, topic_name)


def test_zombie_fencing_confluent_zombie_keeps_producing(eos_broker, topic_name):
    """The zombie's next move is a produce, not EndTxn: the records are refused (stale
    epoch), the producer goes fatal, and nothing of it becomes visible."""
    from confluent_kafka import KafkaException

    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 1)
    txid = f"{topic_name}-tx"
    zombie = cf_producer(bs, txid)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic_name, b"z0", partition=0)
    assert zombie.flush(30) == 0
    fresh = cf_producer(bs, txid)
    fresh.init_transactions(30)

    delivery = []
    for v in vals("z")[1:]:
        zombie.produce(topic_name, v, partition=0, on_delivery=lambda err, msg: delivery.append(err))
    fatal = []
    try:
        zombie.flush(30)  # librdkafka may raise the fatal error from here already
    except (KafkaException, SystemError) as exc:
        fatal.append(exc)
    assert delivery and all(e is not None for e in delivery), delivery
    with pytest.raises(KafkaException) as exc:
        zombie.commit_transaction(30)
    err = exc.value.args[0]
    assert is_fenced_confluent(err) and err.fatal(), err

    fresh.begin_transaction()
    for v in vals("g"):
        fresh.produce(topic_name, v, partition=0)
    fresh.commit_transaction(30)
    # The fatal producer keeps the error of its delivery callback, whose traceback holds this
    # frame and both producers: without a close they would outlive the broker and log.
    with warnings.catch_warnings():  # its close tries an abort, which is fenced too
        warnings.simplefilter("ignore", RuntimeWarning)
        zombie.close()
    fresh.close()
    assert_zombie_outcome(bs, topic_name, written=[b"z0"])


def test_zombie_fencing_kafka_python(eos_broker, topic_name):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError, ProducerFencedError

    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 1)
    txid = f"{topic_name}-tx"
    zombie = KafkaProducer(bootstrap_servers=bs, transactional_id=txid)
    zombie.init_transactions()
    zombie.begin_transaction()
    for v in vals("z"):
        zombie.send(topic_name, v, partition=0)
    zombie.flush()

    fresh = KafkaProducer(bootstrap_servers=bs, transactional_id=txid)
    fresh.init_transactions()

    with pytest.raises(ProducerFencedError):
        zombie.commit_transaction()
    with pytest.raises(KafkaError):
        zombie.begin_transaction()
    zombie.close(timeout=5)

    for round_ in range(2):
        fresh.begin_transaction()
        for v in vals("g")[round_ * 2:round_ * 2 + 2]:
            fresh.send(topic_name, v, partition=0)
        fresh.commit_transaction()
    fresh.close()
    assert_zombie_outcome(bs, topic_name)


async def test_zombie_fencing_aiokafka(eos_broker, topic_name):
    import asyncio

    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import ProducerFenced

    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 1)
    txid = f"{topic_name}-tx"
    zombie = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=txid)
    await zombie.start()
    await zombie.begin_transaction()
    futures = [await zombie.send(topic_name, v, partition=0) for v in vals("z")]
    await asyncio.gather(*futures)

    fresh = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=txid)
    await fresh.start()
    try:
        with pytest.raises(ProducerFenced):
            await asyncio.wait_for(zombie.commit_transaction(), 30)
        for round_ in range(2):
            async with fresh.transaction():
                for v in vals("g")[round_ * 2:round_ * 2 + 2]:
                    await fresh.send(topic_name, v, partition=0)
    finally:
        await fresh.stop()
        try:
            await asyncio.wait_for(zombie.stop(), 10)
        except Exception:  # noqa: BLE001 - a fenced producer's stop may re-raise the fence
            pass
    await asyncio.to_thread(assert_zombie_outcome, bs, topic_name)


# --------------------------------------------------------------------------- 4. / 8.1 timeout abort

def stall_until_aborted(bs: str, txid: str, topic: str, began: float, epoch_before: int) -> None:
    """Wait for the coordinator's timeout abort and check its traces: not before the
    timeout, the epoch bumped, an ABORT marker at the bumped epoch, nothing visible."""
    with raw(bs) as c:
        wait_until(lambda: txn_state(c, txid) == "CompleteAbort", STALL_TIMEOUT_MS / 1000 + 15,
                   f"the coordinator to abort {txid} on timeout", interval=0.1)
        elapsed = time.monotonic() - began
        assert elapsed >= STALL_TIMEOUT_MS / 1000 - 0.2, f"aborted after {elapsed:.2f}s, before the timeout"
        after = describe_transaction(c, txid)
        assert after.producer_epoch > epoch_before, "the timeout abort must bump the epoch (fence)"
        wait_until(lambda: list_offset(c, topic, 0, READ_COMMITTED) == list_offset(c, topic, 0, READ_UNCOMMITTED),
                   15, "the ABORT marker")
        ms = markers(fetch_batches(c, topic)[0])
        assert [(t, e) for _, _, e, t in ms] == [(CONTROL_ABORT, after.producer_epoch)], ms
    assert values_of(drain(bs, topic, isolation="read_committed")) == []


def test_8_1_stalled_transaction_aborted_by_timeout_and_fenced_confluent(eos_broker, topic_name):
    from confluent_kafka import KafkaException

    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 1)
    txid = f"{topic_name}-tx"
    p = cf_producer(bs, txid, **{"transaction.timeout.ms": STALL_TIMEOUT_MS})
    p.init_transactions(30)
    with raw(bs) as c:
        epoch = describe_transaction(c, txid).producer_epoch
    p.begin_transaction()
    began = time.monotonic()
    for v in vals("s"):
        p.produce(topic_name, v, partition=0)
    assert p.flush(10) == 0
    stall_until_aborted(bs, txid, topic_name, began, epoch)
    with pytest.raises(KafkaException) as exc:
        p.commit_transaction(30)
    err = exc.value.args[0]
    assert is_fenced_confluent(err) and err.fatal(), err
    assert values_of(drain(bs, topic_name, isolation="read_committed")) == []


def test_8_1_stalled_transaction_aborted_by_timeout_and_fenced_kafka_python(eos_broker, topic_name):
    from kafka import KafkaProducer
    from kafka.errors import ProducerFencedError

    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 1)
    txid = f"{topic_name}-tx"
    p = KafkaProducer(bootstrap_servers=bs, transactional_id=txid, transaction_timeout_ms=STALL_TIMEOUT_MS)
    p.init_transactions()
    with raw(bs) as c:
        epoch = describe_transaction(c, txid).producer_epoch
    p.begin_transaction()
    began = time.monotonic()
    for v in vals("s"):
        p.send(topic_name, v, partition=0)
    p.flush()
    stall_until_aborted(bs, txid, topic_name, began, epoch)
    with pytest.raises(ProducerFencedError):
        p.commit_transaction()
    p.close(timeout=5)
    assert values_of(drain(bs, topic_name, isolation="read_committed")) == []


async def test_8_1_stalled_transaction_aborted_by_timeout_and_fenced_aiokafka(eos_broker, topic_name):
    import asyncio

    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import ProducerFenced

    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 1)
    txid = f"{topic_name}-tx"
    p = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=txid, transaction_timeout_ms=STALL_TIMEOUT_MS)
    await p.start()
    try:
        with raw(bs) as c:
            epoch = describe_transaction(c, txid).producer_epoch
        await p.begin_transaction()
        began = time.monotonic()
        futures = [await p.send(topic_name, v, partition=0) for v in vals("s")]
        await asyncio.gather(*futures)
        await asyncio.to_thread(stall_until_aborted, bs, txid, topic_name, began, epoch)
        with pytest.raises(ProducerFenced):
            await asyncio.wait_for(p.commit_transaction(), 30)
    finally:
        try:
            await asyncio.wait_for(p.stop(), 10)
        except Exception:  # noqa: BLE001 - a fenced producer's stop may re-raise the fence
            pass
    assert values_of(await asyncio.to_thread(drain, bs, topic_name, isolation="read_committed")) == []


# --------------------------------------------------------------------------- raw: 8.5, 8.4 (c), 8.6

def begin_raw(c, txid: str, topic: str, timeout_ms: int = 60000) -> tuple[int, int]:
    r = init_producer_id(c, txid, timeout_ms)
    assert r.error_code == ErrorCode.none, r
    assert add_partitions(c, txid, r.producer_id, r.producer_epoch, {topic: [0]},
                          retry=[ErrorCode.concurrent_transactions]) == {(topic, 0): ErrorCode.none}
    return r.producer_id, r.producer_epoch


def test_8_5_same_transactional_id_fences_with_abort_at_epoch_plus_one(eos_broker, topic_name):
    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 1)
    txid = f"{topic_name}-tx"
    with raw(bs) as p1, raw(bs) as p2:
        pid, e = begin_raw(p1, txid, topic_name)
        first = produce(p1, topic_name, batch([b"z0", b"z1"], pid, e, 0, transactional=True), txid)
        assert (first.error_code, first.base_offset) == (ErrorCode.none, 0)

        # producer 2, same id: aborts producer 1's transaction (ABORT at e+1), gets e+2
        r = init_producer_id(p2, txid, retry=[ErrorCode.concurrent_transactions])
        assert r.error_code == ErrorCode.none, r
        assert (r.producer_id, r.producer_epoch) == (pid, e + 2)
        wait_until(lambda: list_offset(p2, topic_name, 0, READ_COMMITTED) == 3, 15, "the ABORT marker at offset 2")
        assert markers(fetch_batches(p2, topic_name)[0]) == [(2, pid, e + 1, CONTROL_ABORT)]

        # producer 1 after the fence
        late = produce(p1, topic_name, batch([b"z2"], pid, e, 2, transactional=True), txid)
        assert late.error_code == ErrorCode.invalid_producer_epoch, late
        assert add_partitions(p1, txid, pid, e, {topic_name: [0]}) == {(topic_name, 0): ErrorCode.producer_fenced}
        assert end_txn(p1, txid, pid, e, commit=True) == ErrorCode.producer_fenced

        # producer 2 completes its own transaction
        assert add_partitions(p2, txid, pid, e + 2, {topic_name: [0]}) == {(topic_name, 0): ErrorCode.none}
        ok = produce(p2, topic_name, batch([b"g0"], pid, e + 2, 0, transactional=True), txid)
        assert (ok.error_code, ok.base_offset) == (ErrorCode.none, 3)
        assert end_txn(p2, txid, pid, e + 2, commit=True) == ErrorCode.none
        wait_until(lambda: list_offset(p2, topic_name, 0, READ_COMMITTED) == 5, 15, "the COMMIT marker at offset 4")
        batches, _ = fetch_batches(p2, topic_name)
        assert markers(batches) == [(2, pid, e + 1, CONTROL_ABORT), (4, pid, e + 2, CONTROL_COMMIT)]
        assert [(h.base_offset, h.producer_epoch) for h, _ in batches if not h.is_control] == [(0, e), (3, e + 2)]
    assert values_of(drain(bs, topic_name, isolation="read_committed")) == [b"g0"]


def test_8_5_different_transactional_ids_do_not_fence(eos_broker, topic_name):
    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 1)
    with raw(bs) as p1, raw(bs) as p2:
        a, b = f"{topic_name}-a", f"{topic_name}-b"
        pid1, e1 = begin_raw(p1, a, topic_name)
        assert produce(p1, topic_name, batch([b"a0"], pid1, e1, 0, transactional=True), a).base_offset == 0
        pid2, e2 = begin_raw(p2, b, topic_name)
        assert pid2 != pid1
        assert produce(p2, topic_name, batch([b"b0"], pid2, e2, 0, transactional=True), b).base_offset == 1
        assert end_txn(p2, b, pid2, e2, commit=True) == ErrorCode.none
        wait_until(lambda: list_offset(p2, topic_name, 0, READ_UNCOMMITTED) == 3, 15, "b's COMMIT marker")
        # a's open transaction still holds the LSO; b's committed record waits behind it
        time.sleep(0.5)
        assert list_offset(p2, topic_name, 0, READ_COMMITTED) == 0
        assert txn_state(p1, a) == "Ongoing"
        assert values_of(drain(bs, topic_name, isolation="read_committed")) == []
        # and a can still commit: nothing fenced it
        assert produce(p1, topic_name, batch([b"a1"], pid1, e1, 1, transactional=True), a).error_code == 0
        assert end_txn(p1, a, pid1, e1, commit=True) == ErrorCode.none
        wait_until(lambda: list_offset(p1, topic_name, 0, READ_COMMITTED) == 5, 15, "a's COMMIT marker")
    assert values_of(drain(bs, topic_name, isolation="read_committed")) == [b"a0", b"b0", b"a1"]


def test_8_4_c_commit_after_timeout_abort_is_fenced_not_success(eos_broker, topic_name):
    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 1)
    txid = f"{topic_name}-tx"
    with raw(bs) as c:
        pid, e = begin_raw(c, txid, topic_name, timeout_ms=1000)
        assert produce(c, topic_name, batch([b"x"], pid, e, 0, transactional=True), txid).error_code == 0
        wait_until(lambda: txn_state(c, txid) == "CompleteAbort", 15, "the timeout abort")
        assert describe_transaction(c, txid).producer_epoch == e + 1
        assert end_txn(c, txid, pid, e, commit=True) == ErrorCode.producer_fenced  # v3
        assert end_txn(c, txid, pid, e, commit=True, version=1) == ErrorCode.invalid_producer_epoch
        assert end_txn(c, txid, pid, e, commit=False) == ErrorCode.producer_fenced
        assert txn_state(c, txid) == "CompleteAbort"
    assert values_of(drain(bs, topic_name, isolation="read_committed")) == []


def test_8_6_timeout_below_scan_interval_fires_at_interval_granularity(eos_broker, topic_name):
    """transaction.timeout.ms (200 ms) below the abort-scan interval (1 s) is not ignored:
    the abort comes after the timeout, within about timeout + interval."""
    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 1)
    txid = f"{topic_name}-tx"
    timeout_ms = 200
    with raw(bs) as c:
        pid, e = begin_raw(c, txid, topic_name, timeout_ms=timeout_ms)
        began = time.monotonic()
        assert produce(c, topic_name, batch([b"x"], pid, e, 0, transactional=True), txid).error_code == 0
        wait_until(lambda: txn_state(c, txid) in ("PrepareAbort", "CompleteAbort"), 15, "the timeout abort",
                   interval=0.02)
        elapsed = time.monotonic() - began
        slack = 2.0
        assert timeout_ms / 1000 - 0.05 <= elapsed <= (timeout_ms + ABORT_SCAN_MS) / 1000 + slack, elapsed
        wait_until(lambda: txn_state(c, txid) == "CompleteAbort", 15, "CompleteAbort")
        assert describe_transaction(c, txid).producer_epoch == e + 1


def test_transaction_timeout_above_broker_max_is_refused(eos_broker, topic_name):
    """transaction.timeout.ms above transaction.max.timeout.ms: INVALID_TRANSACTION_TIMEOUT,
    fatal for the client (raw: the id is not created)."""
    from confluent_kafka import KafkaError, KafkaException

    bs = eos_broker.bootstrap
    p = cf_producer(bs, f"{topic_name}-tx", **{"transaction.timeout.ms": 2 * MAX_TIMEOUT_MS})
    with pytest.raises(KafkaException) as exc:
        p.init_transactions(30)
    err = exc.value.args[0]
    assert err.code() == KafkaError.INVALID_TRANSACTION_TIMEOUT and err.fatal(), err
    with raw(bs) as c:
        r = init_producer_id(c, f"{topic_name}-raw", timeout_ms=MAX_TIMEOUT_MS + 1)
        assert r.error_code == ErrorCode.invalid_transaction_timeout, r
        assert describe_transaction(c, f"{topic_name}-raw").error_code == ErrorCode.transactional_id_not_found
        assert init_producer_id(c, f"{topic_name}-raw", timeout_ms=MAX_TIMEOUT_MS).error_code == ErrorCode.none
