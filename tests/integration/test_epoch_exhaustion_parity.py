"""A producer epoch exhausted over the wire by transaction version 2's bumps, the same requests
against ours and Apache Kafka 4.3.1 (no fault point: 32766 empty aborts, each EndTxn v5 bumping
the epoch, as KIP-890 part 2 has it).

The abort at epoch MAX - 1 moves the transactional id to a new producer id at epoch 0, and a
retry of it gets the same answer; from then on the old producer id is refused (Produce v12 and
EndTxn), and the new one transacts. Slow on both sides (about 20 s on ours, 80 s on Kafka's
single broker); ``make parity`` runs it on both."""

from __future__ import annotations

import time

import pytest

from coordinator.transaction.state import MAX_PRODUCER_EPOCH
from protocol.errors import ErrorCode as E
from tests.integration.test_transaction_version2 import _end, _init, _produce
from tests.support.clients import consume_all, create_topic
from tests.support.parity import SLOW_TARGETS, single_broker
from tests.support.raw import RawClient

LAST_BUMPED = MAX_PRODUCER_EPOCH - 1  # Kafka never bumps past Short.MaxValue - 1


@pytest.fixture(scope="module", params=SLOW_TARGETS)
def bootstrap(request, tmp_path_factory):
    yield from single_broker(request.param, tmp_path_factory)


def _abort_until_the_id_moves(c: RawClient, txn: str, pid: int) -> tuple[int, int, int]:
    """Empty EndTxn v5 aborts from epoch 0 on, each answered with the next epoch of ``pid``,
    until one answers another producer id: (the epoch it was sent at, new id, new epoch).
    An abort sent while the previous one's markers are still written is answered
    CONCURRENT_TRANSACTIONS (a replicated __transaction_state takes a few ms): retried at once."""
    epoch = 0
    for _ in range(MAX_PRODUCER_EPOCH + 1):
        error, answered_pid, answered_epoch = _end(c, txn, pid, epoch, commit=False, pause=0.002)
        assert error == 0, (epoch, E(error))
        if answered_pid != pid:
            return epoch, answered_pid, answered_epoch
        assert answered_epoch == epoch + 1, (epoch, answered_epoch)
        epoch = answered_epoch
    raise AssertionError(f"{pid} was never moved to a new producer id")


# What each step answers; the same on both brokers.
EXPECTED = {
    "the abort that moved the id": (LAST_BUMPED, 0),   # (the epoch it was sent at, the new epoch)
    "its retry": (0, "the new id", 0),
    "old id: Produce": E.invalid_producer_id_mapping,
    "old id: EndTxn commit (the other outcome)": E.invalid_txn_state,
    "new id: Produce": E.none,
    "new id: EndTxn commit": (0, "the new id", 1),
    "old id: EndTxn abort after the new id's commit": E.invalid_producer_id_mapping,
    "read_committed": [b"v0"],
}


def test_an_exhausted_epoch_moves_the_id_and_fences_the_old_producer_id(bootstrap):
    topic = f"exhausted-{time.monotonic_ns() % 10**8}"
    create_topic(bootstrap, topic, partitions=1)
    txn = f"{topic}-txn"
    seen: dict[str, object] = {}
    with RawClient(bootstrap, timeout=30) as c:
        pid, epoch = _init(c, txn)
        assert epoch == 0
        sent_at, new_pid, new_epoch = _abort_until_the_id_moves(c, txn, pid)
        assert new_pid != pid

        def end(producer_id: int, producer_epoch: int, commit: bool) -> tuple:
            error, answered, answered_epoch = _end(c, txn, producer_id, producer_epoch, commit)
            return error, "the new id" if answered == new_pid else answered, answered_epoch

        seen["the abort that moved the id"] = (sent_at, new_epoch)
        seen["its retry"] = end(pid, LAST_BUMPED, commit=False)
        seen["old id: Produce"] = E(_produce(c, topic, txn, pid, LAST_BUMPED, 0))
        seen["old id: EndTxn commit (the other outcome)"] = E(end(pid, LAST_BUMPED, commit=True)[0])
        seen["new id: Produce"] = E(_produce(c, topic, txn, new_pid, 0, 0))
        seen["new id: EndTxn commit"] = end(new_pid, 0, commit=True)
        seen["old id: EndTxn abort after the new id's commit"] = E(end(pid, LAST_BUMPED, commit=False)[0])
    got = consume_all(bootstrap, topic, 1, expected=1, timeout=30, **{"isolation.level": "read_committed"})
    seen["read_committed"] = [m.value() for m in got]
    assert seen == EXPECTED
