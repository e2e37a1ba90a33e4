"""A transactional id whose producer epoch is exhausted moves to a new producer id (Kafka's
``TransactionCoordinator`` on InitProducerId), end to end: a real client, a real broker
restarted over a ``__transaction_state`` whose last record for the id carries the epoch one
short of the maximum, as 32766 earlier incarnations would have left it."""

from __future__ import annotations

import os
import time

from confluent_kafka import Producer

from coordinator.transaction import log as txn_log
from coordinator.transaction.state import (
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TxnState,
    TxnTransitMetadata,
)
from protocol import records as rb
from storage.log import Log, LogConfig
from tests.support.clients import consume_all, create_topic
from tests.support.eos import wait_until
from tests.support.raw import RawClient, describe_transaction

TXN_TOPIC = "__transaction_state"


def _commit_one(bootstrap: str, txid: str, topic: str, value: bytes) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txid})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, value)
    p.commit_transaction(30)


def _completed(bootstrap: str, txid: str):
    """The id's description once its last transaction's markers are written."""
    with RawClient(bootstrap) as c:
        return wait_until(lambda: (d := describe_transaction(c, txid)).transaction_state == "CompleteCommit" and d,
                          10, "the commit's markers")


def _rewrite_epoch(log_dir: str, txid: str, producer_id: int, epoch: int) -> None:
    """Append the id's next record (Complete, no partitions) at ``epoch`` to its partition,
    with the broker stopped."""
    log, _ = Log.open(os.path.join(log_dir, f"{TXN_TOPIC}-0"), TXN_TOPIC, 0, LogConfig())
    now = int(time.time() * 1000)
    transit = TxnTransitMetadata(producer_id, NO_PRODUCER_ID, epoch, NO_PRODUCER_EPOCH, 60000,
                                 TxnState.COMPLETE_COMMIT, frozenset(), now, now)
    batch = rb.build_batch([(txn_log.encode_key(txid), txn_log.encode_value(transit, 2))], timestamp=now)
    log.append_as_leader(bytes(batch), leader_epoch=max(log.leader_epochs.latest_epoch, 0))
    log.close()


def test_an_exhausted_epoch_moves_the_id_to_a_new_producer_id(own_broker, topic_name):
    b = own_broker(**{"transaction.state.log.num.partitions": "1"})  # the id's partition is 0
    create_topic(b.bootstrap, topic_name, 1)
    txid = f"exhausted-{topic_name}"
    _commit_one(b.bootstrap, txid, topic_name, b"before")
    # EndTxn answers once PrepareCommit is logged; the markers follow. Stopped before they
    # land, the record below (Complete, as 32766 finished incarnations would leave it) would
    # orphan the transaction in the topic and hold its last stable offset forever.
    before = _completed(b.bootstrap, txid)
    assert before.error_code == 0 and before.producer_epoch < 5
    assert b.stop() == 0

    _rewrite_epoch(b.log_dir, txid, before.producer_id, MAX_PRODUCER_EPOCH - 1)
    b.start()
    with RawClient(b.bootstrap) as c:
        loaded = describe_transaction(c, txid)
    assert (loaded.producer_id, loaded.producer_epoch) == (before.producer_id, MAX_PRODUCER_EPOCH - 1)

    _commit_one(b.bootstrap, txid, topic_name, b"after")  # InitProducerId finds the epoch exhausted
    after = _completed(b.bootstrap, txid)
    assert after.producer_id != before.producer_id, "the exhausted producer id was kept"
    assert after.producer_epoch < 5, f"the new producer id starts over: epoch {after.producer_epoch}"
    got = consume_all(b.bootstrap, topic_name, 1, expected=2, timeout=30, **{"isolation.level": "read_committed"})
    assert [m.value() for m in got] == [b"before", b"after"]
