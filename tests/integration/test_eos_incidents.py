"""EOS acceptance 7, second part: single-broker versions of the digest section 8 incidents
that test_eos_acc_incidents.py lists as not reproducible on one broker, plus two extras.

The other EOS modules (test_eos_acc_*.py, written in parallel) cover 8.1 (stall and kill -9
variants), 8.4 a/b/c, 8.5, 8.6 (scan every second), 8.7 and 8.8. Here:

8.2  "The client hasn't received acknowledgment for some previously sent messages and can no
     longer retry them": one broker cannot lose its followers, but its acks can stop coming.
     The broker process is frozen (SIGSTOP) until a transactional producer's batches pass
     message.timeout.ms: the producer must abort (abortable, not fatal) and bump its epoch
     (KIP-360 InitProducerId with its id and epoch, which the broker must accept), and
     read_committed holds every committed record once and none of the expired ones, which the
     frozen broker may still append when it runs again.
     test_8_2_expired_batches_abort_the_transaction_no_duplicates
8.3  REQUEST_TIMED_OUT between brokers, then "invalid transition COMMITTING -> ABORTING": no
     inter-broker network on one broker, but a commit can time out (frozen broker). The
     commit is retried as a commit and succeeds once; the client refuses an abort meanwhile;
     on the wire, once EndTxn(COMMIT) was answered the broker never lets the transaction
     abort (CONCURRENT_TRANSACTIONS, then INVALID_TXN_STATE), and vice versa.
     test_8_3_commit_timeout_is_retried_not_aborted, test_8_3_abort_after_commit_is_refused
8.6  with Kafka's default scan interval (10 s) and a 2 s timeout: aborted within 2-12 s
     (plus slack), never before. test_8_6_timeout_below_default_check_interval
8.9  partitions cannot be offline while their only broker answers; what is testable: Metadata
     stays prompt while transactions and markers run, and right after an unclean restart
     while the coordinator reloads. test_8_9_metadata_prompt_during_transactions,
     test_8_9_metadata_prompt_after_restart (our broker only: needs a restart)
8.10 one transaction fed by several sender threads and committed once; concurrent
     transactional producers interleaving on the same partitions; API misuse (a second begin,
     EndTxn without a transaction). test_8_10_*

Brokers: ``eos_broker`` (ours: the shared broker; Kafka: its defaults with a 1 s scan) and
``eos_configured``/``own_broker`` where a test needs other settings. SIGSTOP/SIGCONT only go
to broker processes these fixtures started. ``KBROKER_EOS_TARGET=kafka`` runs all but the
restart test against Apache Kafka 4.3.1.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from confluent_kafka import KafkaError, KafkaException

from protocol.errors import ErrorCode
from tests.support import eos, eos_accept
from tests.support.clients import create_topic
from tests.support.eos import (
    add_partitions,
    batch,
    cf_producer,
    data_batches,
    describe_transaction,
    drain,
    end_txn,
    init_producer_id,
    lso_hw,
    paused,
    produce,
    raw,
    values_of,
    wait_until,
)

# fixtures (module-scoped broker, per-test configured broker, the Kafka pool behind both)
eos_broker, eos_configured, kafka_pool = eos.eos_broker, eos.eos_configured, eos.kafka_pool
restartable_broker = eos_accept.restartable_broker  # one to kill -9 and restart, on either target


def vals(tag: str, n: int) -> list[bytes]:
    return [b"%s%d" % (tag.encode(), i) for i in range(n)]


def stable(bs: str, topic: str, partition: int = 0, timeout: float = 20.0) -> int:
    """Wait until no transaction is open or unmarked on the partition; the high watermark."""
    def check():
        lso, hw = lso_hw(bs, topic, partition)
        return hw if lso == hw else None
    return wait_until(check, timeout, f"{topic}-{partition} to become stable")


def produce_all(p, topic: str, values: list[bytes], partition: int = 0) -> None:
    for v in values:
        p.produce(topic, v, partition=partition)


# =========================================================================== 8.2
def test_8_2_expired_batches_abort_the_transaction_no_duplicates(eos_broker, topic_name):
    """Batches whose acks never come within delivery (message) timeout expire; the
    transactional producer must then abort (abortable, not fatal), the broker accepts the
    client's epoch bump (KIP-360 InitProducerId with its producer id and epoch), and
    read_committed holds the committed records exactly once and none of the expired ones,
    though the frozen broker may still append them once it runs again."""
    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 1)
    p = cf_producer(bs, f"{topic_name}-tx", **{"message.timeout.ms": 3000, "request.timeout.ms": 2000,
                                                "socket.timeout.ms": 2000, "transaction.timeout.ms": 30000})
    p.init_transactions(30)
    p.begin_transaction()
    produce_all(p, topic_name, vals("ok", 5))
    p.commit_transaction(30)
    p.begin_transaction()
    produce_all(p, topic_name, vals("pre", 5))
    assert p.flush(10) == 0
    errors = []
    with paused(eos_broker):
        for v in vals("lost", 5):
            p.produce(topic_name, v, partition=0, on_delivery=lambda err, _m: errors.append(err))
        end = time.monotonic() + 8  # message.timeout.ms is 3 s; the JVM's KRaft session is 9 s
        while len(errors) < 5 and time.monotonic() < end:
            p.poll(0.2)
    assert [e.code() if e else None for e in errors] == [KafkaError._MSG_TIMED_OUT] * 5, errors
    with pytest.raises(KafkaException) as exc:
        p.commit_transaction(30)
    err = exc.value.args[0]
    assert err.txn_requires_abort() and not err.fatal(), err
    p.abort_transaction(30)
    p.begin_transaction()
    produce_all(p, topic_name, vals("after", 5))
    p.commit_transaction(30)

    stable(bs, topic_name)
    assert values_of(drain(bs, topic_name)) == vals("ok", 5) + vals("after", 5)
    # the next transaction ran at a bumped epoch from sequence 0
    data = [b for b in data_batches(eos_broker.log_dir, topic_name) if b.control is None]
    first = {b.values[0]: b for b in data}
    assert first[b"after0"].producer_id == first[b"ok0"].producer_id
    assert first[b"after0"].producer_epoch == first[b"ok0"].producer_epoch + 1
    assert first[b"after0"].base_sequence == 0


# =========================================================================== 8.3
def test_8_3_commit_timeout_is_retried_not_aborted(eos_broker, topic_name):
    """commit_transaction times out (broker frozen): a retriable error, an abort is refused by
    the client while the commit is in progress, and retrying the commit succeeds once."""
    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 1)
    p = cf_producer(bs, f"{topic_name}-tx")
    p.init_transactions(30)
    p.begin_transaction()
    produce_all(p, topic_name, vals("c", 5))
    assert p.flush(10) == 0
    with paused(eos_broker):
        with pytest.raises(KafkaException) as exc:
            p.commit_transaction(2)
        err = exc.value.args[0]
        assert err.retriable() and not err.fatal() and not err.txn_requires_abort(), err
        with pytest.raises(KafkaException):
            p.abort_transaction(1)  # librdkafka: "conflicting commit_transaction API call in progress"
    # Retry only once the broker has completed the commit. librdkafka (2.16) pairs each step
    # of a resumed commit_transaction with "the next API result"; an EndTxn answer landing
    # between those steps shifts the pairing by one, so commit_transaction returns before its
    # last step and the next begin_transaction "succeeds" without starting a transaction.
    with raw(bs) as c:
        wait_until(lambda: describe_transaction(c, f"{topic_name}-tx").transaction_state == "CompleteCommit",
                   30, "the commit to complete on the broker")
    p.commit_transaction(30)
    p.begin_transaction()
    produce_all(p, topic_name, vals("d", 2))
    p.commit_transaction(30)
    stable(bs, topic_name)
    assert values_of(drain(bs, topic_name)) == vals("c", 5) + vals("d", 2)


def test_8_3_abort_after_commit_is_refused(eos_broker, topic_name):
    """Once EndTxn(COMMIT) was answered, EndTxn(ABORT) at the same epoch never succeeds:
    CONCURRENT_TRANSACTIONS while the commit completes, then INVALID_TXN_STATE; a retried
    COMMIT is answered NONE. Same the other way round."""
    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 1)
    txn_id = f"{topic_name}-tx"
    with raw(bs) as c:
        r = init_producer_id(c, txn_id)
        pid, e = r.producer_id, r.producer_epoch
        for i, (first, then) in enumerate(((True, False), (False, True))):
            assert add_partitions(c, txn_id, pid, e, {topic_name: [0]}) == {(topic_name, 0): ErrorCode.none}
            assert produce(c, topic_name, batch([b"x%d" % i], pid, e, i, transactional=True), txn_id).error_code == 0
            assert end_txn(c, txn_id, pid, e, commit=first) == ErrorCode.none
            assert end_txn(c, txn_id, pid, e, commit=then) in (
                ErrorCode.concurrent_transactions, ErrorCode.invalid_txn_state)
            assert end_txn(c, txn_id, pid, e, commit=first, retry=[ErrorCode.concurrent_transactions]) == \
                ErrorCode.none
            assert end_txn(c, txn_id, pid, e, commit=then) == ErrorCode.invalid_txn_state
            done = "CompleteCommit" if first else "CompleteAbort"
            assert describe_transaction(c, txn_id).transaction_state == done
    stable(bs, topic_name)
    assert values_of(drain(bs, topic_name)) == [b"x0"]


# =========================================================================== 8.6
def test_8_6_timeout_below_default_check_interval(eos_configured, topic_name):
    """Kafka's default scan interval (10 s) with a 2 s transaction timeout: the abort comes
    after the timeout and within timeout + interval (plus slack), never before."""
    b = eos_configured({"transaction.abort.timed.out.transaction.cleanup.interval.ms": "10000"})
    bs = b.bootstrap
    create_topic(bs, topic_name, 1)
    txn_id = f"{topic_name}-tx"
    with raw(bs) as c:
        r = init_producer_id(c, txn_id, 2000)
        pid, e = r.producer_id, r.producer_epoch
        assert add_partitions(c, txn_id, pid, e, {topic_name: [0]}) == {(topic_name, 0): ErrorCode.none}
        began = time.monotonic()
        assert produce(c, topic_name, batch([b"x"], pid, e, 0, transactional=True), txn_id).error_code == 0
        wait_until(lambda: describe_transaction(c, txn_id).transaction_state in ("PrepareAbort", "CompleteAbort"),
                   20, "the timeout abort", interval=0.05)
        elapsed = time.monotonic() - began
        assert 2.0 - 0.1 <= elapsed <= 2.0 + 10.0 + 2.0, elapsed
        assert describe_transaction(c, txn_id).producer_epoch == e + 1


# =========================================================================== 8.9
def test_8_9_metadata_prompt_during_transactions(eos_broker, topic_name):
    """Metadata round trips stay short while a transactional producer commits and aborts
    transactions (markers being written) on the same broker."""
    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 3)
    stop = threading.Event()
    failures: list = []
    done = [0]

    def work():
        try:
            p = cf_producer(bs, f"{topic_name}-tx")
            p.init_transactions(30)
            i = 0
            while not stop.is_set():
                p.begin_transaction()
                for k in range(50):
                    p.produce(topic_name, b"%d-%d" % (i, k), partition=k % 3)
                if i % 3 == 2:
                    p.flush(30)
                    p.abort_transaction(30)
                else:
                    p.commit_transaction(30)
                i += 1
                done[0] = i
        except Exception as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    t = threading.Thread(target=work, daemon=True)
    t.start()
    worst = 0.0
    try:
        time.sleep(0.5)
        with raw(bs) as c:
            for _ in range(40):
                t0 = time.monotonic()
                md = c.call(3, 12, {"topics": [{"name": topic_name}, {"name": "__transaction_state"}],
                                    "allow_auto_topic_creation": False})
                worst = max(worst, time.monotonic() - t0)
                assert all(tp.error_code == ErrorCode.none for tp in md.topics), md
                time.sleep(0.05)
    finally:
        stop.set()
        t.join(60)
    assert not failures, failures
    assert done[0] >= 3, f"only {done[0]} transactions ran while Metadata was measured"
    assert worst < 2.0, f"a Metadata request took {worst:.2f}s"


def test_8_9_metadata_prompt_after_restart(restartable_broker, topic_name):
    """kill -9 with a few hundred transactions in __transaction_state and open ones in the
    data partitions: once the restarted broker listens, Metadata answers at once and
    FindCoordinator answers promptly (NONE or "not ready") until the coordinator is back."""
    b = restartable_broker()
    bs = b.bootstrap
    create_topic(bs, topic_name, 4)
    producers = []
    for k in range(4):
        p = cf_producer(bs, f"{topic_name}-tx{k}")
        p.init_transactions(30)
        for n in range(60):
            p.begin_transaction()
            for part in range(4):
                p.produce(topic_name, b"%d-%d-%d" % (k, n, part), partition=part)
            p.commit_transaction(30)
        p.begin_transaction()
        p.produce(topic_name, b"open-%d" % k, partition=k)
        assert p.flush(10) == 0
        producers.append(p)
    b.kill9()
    b.start()
    with raw(bs, timeout=5) as c:
        t0 = time.monotonic()
        md = c.call(3, 12, {"topics": [{"name": topic_name}], "allow_auto_topic_creation": False})
        assert time.monotonic() - t0 < 2.0, "the first Metadata after the restart was slow"
        assert md.topics[0].error_code == ErrorCode.none and len(md.topics[0].partitions) == 4, md
        deadline = time.monotonic() + 30
        while True:
            t0 = time.monotonic()
            coord = c.call(10, 4, {"key_type": 1, "coordinator_keys": [f"{topic_name}-tx0"]}).coordinators[0]
            assert time.monotonic() - t0 < 2.0, "FindCoordinator must not wait for the coordinator's load"
            if coord.error_code == ErrorCode.none:
                break
            assert coord.error_code in (ErrorCode.coordinator_load_in_progress,
                                        ErrorCode.coordinator_not_available), coord
            assert time.monotonic() < deadline, "the coordinator did not come back within 30 s"
            time.sleep(0.05)
        # Kafka's FindCoordinator may name the broker before it leads and has loaded the
        # partition: the open transaction is described once it has, retried as a client does.
        not_ready = (ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator,
                     ErrorCode.coordinator_not_available)
        loaded = wait_until(lambda: (d := describe_transaction(c, f"{topic_name}-tx0")).error_code
                            not in not_ready and d, 30, "the coordinator's load")
        assert (loaded.error_code, loaded.transaction_state) == (ErrorCode.none, "Ongoing"), loaded


# =========================================================================== 8.10
def test_8_10_one_transaction_many_sender_threads(eos_broker, topic_name):
    """send() from four threads into one transaction, committed once: every record exactly once."""
    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 2)
    p = cf_producer(bs, f"{topic_name}-tx")
    p.init_transactions(30)
    p.begin_transaction()

    def send(tag: int) -> None:
        for i in range(250):
            while True:
                try:
                    p.produce(topic_name, b"t%d-%d" % (tag, i), partition=i % 2)
                    break
                except BufferError:
                    time.sleep(0.01)

    threads = [threading.Thread(target=send, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    p.commit_transaction(30)
    for part in range(2):
        stable(bs, topic_name, part)
    got = values_of(drain(bs, topic_name, 2))
    assert Counter(got) == Counter(b"t%d-%d" % (k, i) for k in range(4) for i in range(250))


def test_8_10_concurrent_producers_interleave_exactly_once(eos_broker, topic_name):
    """Four transactional producers (distinct ids) in threads, every third transaction
    aborted: the coordinator keeps them apart; read_committed = exactly the committed ones."""
    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 2)
    committed: list[bytes] = []
    lock = threading.Lock()
    failures: list = []

    def run(k: int) -> None:
        try:
            p = cf_producer(bs, f"{topic_name}-tx{k}")
            p.init_transactions(30)
            for n in range(9):
                values = [b"p%d-t%d-%d" % (k, n, i) for i in range(20)]
                p.begin_transaction()
                for i, v in enumerate(values):
                    p.produce(topic_name, v, partition=(i + k) % 2)
                if n % 3 == 2:
                    p.flush(30)
                    p.abort_transaction(30)
                else:
                    p.commit_transaction(30)
                    with lock:
                        committed.extend(values)
        except Exception as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not failures, failures
    for part in range(2):
        stable(bs, topic_name, part)
    got = values_of(drain(bs, topic_name, 2))
    assert len(committed) == 4 * 6 * 20
    assert Counter(got) == Counter(committed)
    assert len(values_of(drain(bs, topic_name, 2, isolation="read_uncommitted"))) == 4 * 9 * 20


def test_8_10_misuse_end_without_transaction_is_invalid_txn_state(eos_broker, topic_name):
    """Only one open transaction per producer: a second begin is refused by the client; on
    the wire, EndTxn with no transaction (Empty) or the wrong command for a finished one is
    INVALID_TXN_STATE, and changes nothing."""
    bs = eos_broker.bootstrap
    create_topic(bs, topic_name, 1)
    p = cf_producer(bs, f"{topic_name}-tx")
    p.init_transactions(30)
    p.begin_transaction()
    with pytest.raises(KafkaException):
        p.begin_transaction()
    p.produce(topic_name, b"one", partition=0)
    p.commit_transaction(30)
    txn_id = f"{topic_name}-raw"
    with raw(bs) as c:
        r = init_producer_id(c, txn_id)
        pid, e = r.producer_id, r.producer_epoch
        assert end_txn(c, txn_id, pid, e, commit=True) == ErrorCode.invalid_txn_state
        assert end_txn(c, txn_id, pid, e, commit=False) == ErrorCode.invalid_txn_state
        assert describe_transaction(c, txn_id).transaction_state == "Empty"
        assert add_partitions(c, txn_id, pid, e, {topic_name: [0]}) == {(topic_name, 0): ErrorCode.none}
        assert produce(c, topic_name, batch([b"two"], pid, e, 0, transactional=True), txn_id).error_code == 0
        assert end_txn(c, txn_id, pid, e, commit=True) == ErrorCode.none
    stable(bs, topic_name)
    assert values_of(drain(bs, topic_name)) == [b"one", b"two"]
