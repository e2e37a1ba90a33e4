"""Transaction version 2 (KIP-890 part 2) over the wire, the same requests against ours and
Apache Kafka 4.3.1: the produce and the offset commit add their partitions themselves, every
EndTxn v5 bumps the epoch and answers it, a retried EndTxn gets the same answer, a delayed
produce of an ended transaction is refused, an empty abort bumps too, and a transaction
version 1 producer (EndTxn v4, AddPartitionsToTxn) runs beside it unchanged."""

from __future__ import annotations

import time

import pytest

from protocol import records as rb
from protocol.errors import ErrorCode as E
from tests.support.clients import create_topic
from tests.support.parity import TARGETS, single_broker
from tests.support.raw import RawClient
from tests.support.raw import describe_transaction as describe

# What a client retries; a new topic's leader may not be known everywhere yet (Kafka).
RETRY = (E.concurrent_transactions, E.coordinator_load_in_progress, E.coordinator_not_available,
         E.not_coordinator, E.not_enough_replicas, E.not_leader_or_follower, E.unknown_topic_or_partition)


@pytest.fixture(scope="module", params=TARGETS)
def bootstrap(request, tmp_path_factory):
    yield from single_broker(request.param, tmp_path_factory)


@pytest.fixture
def topic(bootstrap, request):
    name = f"tv2-{request.node.name[:40].replace('[', '-').replace(']', '')}-{time.monotonic_ns() % 10**6}"
    create_topic(bootstrap, name, partitions=2)
    return name


def _retrying(fn, what: str, timeout: float = 20, pause: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        result = fn()
        code = result if isinstance(result, int) else result[0]
        if code not in RETRY or time.monotonic() > deadline:
            return result
        time.sleep(pause)


def _init(c: RawClient, txn: str) -> tuple[int, int]:
    _retrying(lambda: c.call(10, 4, {"key_type": 1, "coordinator_keys": [txn]}).coordinators[0].error_code,
              "FindCoordinator")
    r = _retrying(lambda: (lambda r: (r.error_code, r))(c.call(22, 5, {
        "transactional_id": txn, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1})),
        "InitProducerId")[1]
    assert r.error_code == 0, r
    return r.producer_id, r.producer_epoch


def _produce(c: RawClient, topic: str, txn: str, pid: int, epoch: int, seq: int, partition: int = 0,
             version: int = 12) -> int:
    batch = bytes(rb.build_batch([(b"k%d" % seq, b"v%d" % seq)], timestamp=int(time.time() * 1000),
                                 producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True))
    request = {"transactional_id": txn, "acks": -1, "timeout": 10000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]}
    return _retrying(lambda: c.call(0, version, request).responses[0].partition_responses[0].error_code,
                     "Produce")


def _end(c: RawClient, txn: str, pid: int, epoch: int, commit: bool, version: int = 5,
         pause: float = 0.05) -> tuple[int, int, int]:
    def once():
        r = c.call(26, version, {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch,
                                 "committed": commit})
        return r.error_code, getattr(r, "producer_id", -1), getattr(r, "producer_epoch", -1)
    return _retrying(once, "EndTxn", pause=pause)


def _wait_state(c: RawClient, txn: str, state: str) -> None:
    deadline = time.monotonic() + 20
    while (d := describe(c, txn)).transaction_state != state:
        assert time.monotonic() < deadline, f"{txn} never reached {state}: {d}"
        time.sleep(0.05)


def _read_committed(c: RawClient, topic: str, partition: int = 0) -> tuple[int, int]:
    """(last stable offset, records visible to read_committed) of one partition."""
    last_stable_offset, _, visible = read_committed_state(c, topic, partition)
    return last_stable_offset, visible


def read_committed_state(c: RawClient, topic: str, partition: int = 0) -> tuple[int, int, int]:
    """(last stable offset, high watermark, records visible to read_committed) of one partition."""
    r = c.call(1, 12, {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 1,
                       "session_id": 0, "session_epoch": -1, "topics": [
                           {"topic": topic, "partitions": [{"partition": partition, "fetch_offset": 0,
                                                            "partition_max_bytes": 1 << 20}]}]})
    p = r.responses[0].partitions[0]
    data = bytes(p.records or b"")
    # As a read_committed consumer: a producer's batches from an aborted transaction's first
    # offset up to that producer's next control batch are skipped.
    pending = sorted((a.first_offset, a.producer_id) for a in (p.aborted_transactions or ()))
    aborting: set[int] = set()
    visible = 0
    for _, header in rb.iter_batches(memoryview(data)):
        while pending and pending[0][0] <= header.base_offset:
            aborting.add(pending.pop(0)[1])
        if header.is_control:
            aborting.discard(header.producer_id)
        elif header.producer_id not in aborting:
            visible += header.record_count
    return p.last_stable_offset, p.high_watermark, visible


def test_a_tv2_transaction_adds_its_partitions_and_every_end_bumps_the_epoch(bootstrap, topic):
    txn = f"{topic}-txn"
    with RawClient(bootstrap) as c:
        pid, epoch = _init(c, txn)
        assert _produce(c, topic, txn, pid, epoch, 0) == 0  # no AddPartitionsToTxn: v12 adds it
        _wait_state(c, txn, "Ongoing")
        assert describe(c, txn).partitions == [(topic, 0)]
        assert _end(c, txn, pid, epoch, commit=True) == (0, pid, epoch + 1)
        # The response was lost: the retry at the old epoch gets the same answer.
        assert _end(c, txn, pid, epoch, commit=True) == (0, pid, epoch + 1)
        _wait_state(c, txn, "CompleteCommit")
        assert describe(c, txn).producer_epoch == epoch + 1
        assert _read_committed(c, topic) == (2, 1)  # the batch and its marker
        # A produce of the ended transaction arriving late is refused with the old epoch, on
        # the partition the transaction wrote and on one it never touched.
        assert _produce(c, topic, txn, pid, epoch, 1) == E.invalid_producer_epoch
        assert _produce(c, topic, txn, pid, epoch, 0, partition=1) == E.invalid_producer_epoch
        assert _read_committed(c, topic, 1) == (0, 0)
        # The next transaction runs at the bumped epoch, its sequences from 0.
        assert _produce(c, topic, txn, pid, epoch + 1, 0, partition=1) == 0
        assert _end(c, txn, pid, epoch + 1, commit=False) == (0, pid, epoch + 2)
        _wait_state(c, txn, "CompleteAbort")
        assert _read_committed(c, topic, 1) == (2, 0)


def test_tv2_end_txn_state_table(bootstrap, topic):
    """Kafka's table for Empty/Complete*: an abort at the current epoch bumps even with nothing
    to abort, a commit there is INVALID_TXN_STATE, a retry at the epoch before is NONE for the
    same outcome and PRODUCER_FENCED from Empty."""
    txn = f"{topic}-txn"
    with RawClient(bootstrap) as c:
        pid, epoch = _init(c, txn)
        assert _end(c, txn, pid, epoch, commit=True)[0] == E.invalid_txn_state  # Empty
        assert _end(c, txn, pid, epoch, commit=False) == (0, pid, epoch + 1)  # empty abort
        _wait_state(c, txn, "CompleteAbort")
        assert _end(c, txn, pid, epoch, commit=False) == (0, pid, epoch + 1)  # its retry
        assert _end(c, txn, pid, epoch, commit=True)[0] == E.invalid_txn_state
        assert _end(c, txn, pid, epoch + 1, commit=True)[0] == E.invalid_txn_state
        assert _end(c, txn, pid, epoch + 1, commit=False) == (0, pid, epoch + 2)
        _wait_state(c, txn, "CompleteAbort")
        assert _end(c, txn, pid, epoch + 5, commit=False)[0] == E.producer_fenced
        assert _end(c, txn, pid + 1, epoch + 2, commit=False)[0] == E.invalid_producer_id_mapping


def test_tv2_offsets_join_the_transaction_with_txn_offset_commit_v5(bootstrap, topic):
    txn, group = f"{topic}-txn", f"{topic}-group"
    with RawClient(bootstrap) as c:
        pid, epoch = _init(c, txn)
        _retrying(lambda: c.call(10, 4, {"key_type": 0, "coordinator_keys": [group]}).coordinators[0].error_code,
                  "FindCoordinator")
        assert _produce(c, topic, txn, pid, epoch, 0) == 0
        assert _txn_offset_commit(c, txn, group, pid, epoch, topic, 42) == 0  # no AddOffsetsToTxn
        assert len(describe(c, txn).partitions) == 2  # the topic's and the group's offsets partition
        assert _end(c, txn, pid, epoch, commit=True) == (0, pid, epoch + 1)
        _wait_state(c, txn, "CompleteCommit")
        deadline = time.monotonic() + 20
        while committed_offset(c, group, topic) != 42:  # the marker reaches the offsets partition asynchronously
            assert time.monotonic() < deadline
            time.sleep(0.05)


def _txn_offset_commit(c: RawClient, txn: str, group: str, pid: int, epoch: int, topic: str, offset: int,
                       version: int = 5) -> int:
    """TxnOffsetCommit (v5) of ``offset`` for ``topic``-0 (retried while the coordinator moves)."""
    fields = {"transactional_id": txn, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
              "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                         "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
    if version >= 3:
        fields.update({"generation_id": -1, "member_id": "", "group_instance_id": None})
    return _retrying(lambda: c.call(28, version, fields).topics[0].partitions[0].error_code, "TxnOffsetCommit")


def test_a_tv1_offset_commit_outside_its_transaction_is_refused_by_version(bootstrap, topic):
    """KIP-890 part 1: TxnOffsetCommit without AddOffsetsToTxn (the group's offsets partition
    not in the transaction) is TRANSACTION_ABORTABLE from v4, INVALID_TXN_STATE before, which a
    Java producer on v4 takes as abortable, not fatal."""
    seen = {}
    with RawClient(bootstrap) as c:
        for version in (2, 3, 4):
            txn, group = f"{topic}-v{version}", f"{topic}-group-v{version}"
            pid, epoch = _init(c, txn)
            _retrying(lambda group=group: c.call(10, 4, {"key_type": 0, "coordinator_keys": [group]})
                      .coordinators[0].error_code, "FindCoordinator")
            r = c.call(24, 3, {"v3_and_below_transactional_id": txn, "v3_and_below_producer_id": pid,
                               "v3_and_below_producer_epoch": epoch,
                               "v3_and_below_topics": [{"name": topic, "partitions": [0]}]})
            assert r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
            seen[version] = E(_txn_offset_commit(c, txn, group, pid, epoch, topic, 7, version=version))
    assert seen == {2: E.invalid_txn_state, 3: E.invalid_txn_state, 4: E.transaction_abortable}


def committed_offset(c: RawClient, group: str, topic: str) -> int:
    """``group``'s committed offset of ``topic``-0 (OffsetFetch with require_stable; -1: none)."""
    r = c.call(9, 7, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}],
                      "require_stable": True})
    if r.error_code or not r.topics:  # COORDINATOR_LOAD_IN_PROGRESS while the partition loads
        return -1
    return r.topics[0].partitions[0].committed_offset


def test_a_tv1_producer_runs_beside_unchanged(bootstrap, topic):
    """EndTxn v4 keeps the epoch (and answers no producer id), AddPartitionsToTxn v3 adds, and
    a Produce v11 is verified."""
    txn = f"{topic}-txn"
    with RawClient(bootstrap) as c:
        pid, epoch = _init(c, txn)
        r = c.call(24, 3, {"v3_and_below_transactional_id": txn, "v3_and_below_producer_id": pid,
                           "v3_and_below_producer_epoch": epoch,
                           "v3_and_below_topics": [{"name": topic, "partitions": [0]}]})
        assert r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
        assert _produce(c, topic, txn, pid, epoch, 0, version=11) == 0
        assert _end(c, txn, pid, epoch, commit=True, version=4)[0] == 0
        _wait_state(c, txn, "CompleteCommit")
        assert describe(c, txn).producer_epoch == epoch
        # Without AddPartitionsToTxn a v11 produce is not part of any transaction.
        assert _produce(c, topic, txn, pid, epoch, 1, partition=1, version=11) == E.transaction_abortable
