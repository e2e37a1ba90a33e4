"""One broker of either kind for the parity tests that run the same requests against ours and
Apache Kafka 4.3.1: the module fixture's ``params`` and the broker it yields."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tools.devcluster import free_port

# The parity run (``make parity``) sets KBROKER_EOS_TARGET=kafka for every parity module: the
# modules of tests/support/eos*.py then run against Kafka, and these params are Kafka's alone.
PARITY_RUN = os.environ.get("KBROKER_EOS_TARGET", "").strip().lower() == "kafka"
KAFKA = pytest.param("kafka", marks=[pytest.mark.slow, pytest.mark.kafka_parity])

# ``params`` for a module fixture: ours always (Kafka in the slow runs), Kafka alone in the parity run.
TARGETS = [KAFKA] if PARITY_RUN else ["kbroker", KAFKA]
# The same for a module too long for ``make test`` even on ours: slow on both; ``make parity``
# still runs it on both sides (its kbroker run selects ``parity_slow``).
SLOW_TARGETS = [KAFKA] if PARITY_RUN else [
    pytest.param("kbroker", marks=[pytest.mark.slow, pytest.mark.parity_slow]), KAFKA]


def single_broker(target: str, tmp_path_factory, settings: dict[str, str] | None = None) -> Iterator[str]:
    """A fresh broker of ``target`` with ``settings`` (Kafka's names); yields its bootstrap."""
    settings = dict(settings or {})
    if target == "kbroker":
        from tests.support.broker_process import BrokerProcess

        b = BrokerProcess(str(tmp_path_factory.mktemp("parity")), overrides=settings)
        b.start()
        try:
            yield b.bootstrap
        finally:
            b.stop()
        return
    from compat.kafka.kraft import KafkaBroker

    kb = KafkaBroker(port=free_port(), controller_port=free_port(), heap_opts="-Xmx512m -Xms256m",
                     extra_config=settings).start()
    try:
        yield kb.bootstrap
    finally:
        kb.stop()


# Kafka's three KRaft nodes as the cluster tests run ours: a fenced broker noticed in seconds,
# internal topics at RF 3, transactions needing two in sync.
KAFKA_THREE_NODE_CONFIG = {
    "broker.heartbeat.interval.ms": "500", "broker.session.timeout.ms": "3000",
    "offsets.topic.replication.factor": "3", "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2", "group.initial.rebalance.delay.ms": "0"}


def three_nodes(target: str, tmp_path_factory, name: str) -> Iterator:
    """A fresh three-node cluster of ``target``: ours (tools.devcluster) or Kafka's; both have
    ``bootstrap`` and ``nodes`` (node id -> ``address``, ``alive``, ``kill9()``, ``start()``)."""
    if target == "kbroker":
        from tests.support.cluster import start_cluster

        cluster = start_cluster(str(tmp_path_factory.mktemp(name)))
        try:
            yield cluster
        finally:
            cluster.stop()
        return
    from compat.kafka.kraft_cluster import kraft_cluster

    with kraft_cluster(nodes=3, extra_config=KAFKA_THREE_NODE_CONFIG) as kc:
        yield kc
