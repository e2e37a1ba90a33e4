"""Producer ids expire from a partition's producer state (``producer.id.expiration.ms``, looked
for every ``producer.id.expiration.check.interval.ms``, as Kafka's periodic check): an idle
idempotent producer is forgotten, DescribeProducers stops listing it and it gets a fresh
sequence; a producer with an open transaction is kept however long it has been idle."""

from __future__ import annotations

from confluent_kafka import Producer

from tests.support.clients import create_topic
from tests.support.cluster import wait_for
from tests.support.eos_accept import describe_producers
from tests.support.raw import RawClient

EXPIRY = {"producer.id.expiration.ms": "4000", "producer.id.expiration.check.interval.ms": "200"}


def _listed(bootstrap: str, topic: str) -> set[int]:
    with RawClient(bootstrap) as c:
        return {p.producer_id for p in describe_producers(c, topic)}


def test_idle_producer_ids_expire_but_one_in_a_transaction_is_kept(own_broker, topic_name):
    b = own_broker(**EXPIRY)
    create_topic(b.bootstrap, topic_name, 1)
    open_txn = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": f"{topic_name}-txn"})
    open_txn.init_transactions(30)
    open_txn.begin_transaction()
    open_txn.produce(topic_name, b"in an open transaction")
    assert open_txn.flush(30) == 0
    idle = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True})
    idle.produce(topic_name, b"idempotent")  # after the transaction's record: it expires first
    assert idle.flush(30) == 0
    both = _listed(b.bootstrap, topic_name)
    assert len(both) == 2

    kept = wait_for(lambda: (left := _listed(b.bootstrap, topic_name)) != both and left, 30,
                    "the idle producer id to expire")
    assert len(kept) == 1, kept  # the transaction's: idle longer, but its transaction is open
    open_txn.commit_transaction(30)
    wait_for(lambda: not _listed(b.bootstrap, topic_name), 30, "the committed producer id to expire")
    idle.produce(topic_name, b"again")  # an expired producer id may write again (sequence restarts)
    assert idle.flush(30) == 0
