"""The brokers a compatibility suite runs against, started fresh for each run.

Four targets, the same for every suite:

- ``kbroker``: one kbroker node, the embedded single-node default (no etcd).
- ``kbroker-cluster``: three kbroker nodes and etcd on loopback (RF 3 for internal topics).
- ``kafka`` / ``kafka-cluster``: Apache Kafka 4.3.1 in KRaft mode, one node or three, from the
  jars ``compat/kafka/fetch.sh`` caches; the same suites run against them for the reference counts.

A suite passes its broker settings (``BROKER_CONFIG``) to every target, so both systems see the
same configuration. Each target is stopped by pid when the ``with`` block ends.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

KBROKER = ("kbroker", "kbroker-cluster")
KAFKA = ("kafka", "kafka-cluster")
TARGETS = KBROKER + KAFKA


@dataclass(frozen=True)
class Target:
    name: str
    bootstrap: str
    nodes: int

    @property
    def is_cluster(self) -> bool:
        return self.nodes > 1

    @property
    def is_kbroker(self) -> bool:
        return self.name in KBROKER


@contextlib.contextmanager
def started(name: str, config: dict[str, str] | None = None,
            workdir: Path | None = None) -> Iterator[Target]:
    """Start target ``name`` with broker ``config``; yield it; stop it."""
    config = dict(config or {})
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"compat-{name}-")))
        workdir.mkdir(parents=True, exist_ok=True)
        if name == "kbroker":
            yield _kbroker(stack, workdir, config)
        elif name == "kbroker-cluster":
            yield _kbroker_cluster(stack, workdir, config)
        elif name == "kafka":
            yield _kafka(stack, workdir, config)
        elif name == "kafka-cluster":
            yield _kafka_cluster(stack, workdir, config)
        else:
            raise ValueError(f"unknown target {name!r}; one of {', '.join(TARGETS)}")


def _kbroker(stack: contextlib.ExitStack, workdir: Path, config: dict[str, str]) -> Target:
    from tests.support.broker_process import BrokerProcess

    broker = BrokerProcess(str(workdir / "data"), config)
    # Set statically, as the Kafka target does (and most suites' broker templates): a client
    # describing the broker's configs then sees STATIC_BROKER_CONFIG on both systems.
    broker.overrides.setdefault("advertised.listeners", f"PLAINTEXT://{broker.bootstrap}")
    stack.callback(broker.stop)
    broker.start()
    return Target("kbroker", broker.bootstrap, 1)


def _kbroker_cluster(stack: contextlib.ExitStack, workdir: Path, config: dict[str, str]) -> Target:
    from tools.devcluster import DevCluster

    cluster = DevCluster(str(workdir / "cluster"), 3, overrides={
        "default.replication.factor": "3", "min.insync.replicas": "2", **config})
    for node in cluster.nodes.values():  # static, as on the Kafka targets (see _kbroker)
        node.overrides.setdefault("advertised.listeners", f"PLAINTEXT://{node.address}")
    stack.callback(cluster.stop)
    cluster.start()
    return Target("kbroker-cluster", cluster.bootstrap, 3)


def _kafka(stack: contextlib.ExitStack, workdir: Path, config: dict[str, str]) -> Target:
    from compat.kafka.kraft import KafkaBroker

    broker = KafkaBroker(workdir=workdir / "kafka", extra_config=config)
    stack.callback(broker.stop)
    broker.start()
    return Target("kafka", broker.bootstrap, 1)


def _kafka_cluster(stack: contextlib.ExitStack, workdir: Path, config: dict[str, str]) -> Target:
    from compat.kafka.kraft_cluster import KafkaCluster

    cluster = KafkaCluster(n_nodes=3, workdir=workdir / "kafka-cluster", extra_config={
        "default.replication.factor": "3", "min.insync.replicas": "2", **config})
    stack.callback(cluster.stop)
    cluster.start()
    return Target("kafka-cluster", cluster.bootstrap, 3)
