"""Kafka's Java copier on transaction version 2 while its coordinator and the output's leaders
are killed -9 or paused and restarted, one victim still down when the next fault comes, and the
copier itself is killed -9 and replaced by a new incarnation, once while a broker is paused:
every input record is in the read_committed output exactly once, and the copier, a stock Kafka
4.3.1 client, never sees a fatal error. The long variant (``slow``) copies five times as much
through ten faults, with a new fault seed each run (in the failure message)."""

from __future__ import annotations

import functools
import random
import shutil
import subprocess
import time
import uuid

import pytest

from tests.integration.test_tv2_clients import KAFKA_RUN, read_committed
from tests.support.clients import create_topic
from tests.support.cluster import (
    TRANSACTION,
    coordinator_node,
    describe,
    produce_values,
    restore,
    start_cluster,
    wait_internal_isr_complete,
    wait_isr_complete,
)

OUTPUT_PARTITIONS = 3

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="Java (17+) is needed for Kafka's copier")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(str(tmp_path_factory.mktemp("tv2-chaos")))
    yield c
    c.stop()


def _copier(bootstrap: str, source: str, sink: str, txn_id: str, records: int) -> subprocess.Popen:
    return subprocess.Popen(
        [str(KAFKA_RUN), "org.apache.kafka.tools.TransactionalMessageCopier", "--broker-list", bootstrap,
         "--input-topic", source, "--input-partition", "0", "--output-topic", sink, "--consumer-group", txn_id,
         "--transactional-id", txn_id, "--max-messages", str(records), "--transaction-size", "50",
         "--transaction-timeout", "20000", "--enable-random-aborts", "--use-group-metadata"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.parametrize("records, rounds, seed", [
    (4000, 4, 7),
    pytest.param(15000, 10, None, marks=pytest.mark.slow, id="long"),
])
def test_java_tv2_copier_is_exactly_once_under_overlapping_broker_and_copier_faults(cluster, tmp_path, records, rounds, seed):
    seed = random.randrange(1 << 30) if seed is None else seed
    print(f"fault seed {seed}")
    rng = random.Random(seed)
    run = uuid.uuid4().hex[:6]
    source, sink, txn_id = f"tv2-chaos-in-{run}", f"tv2-chaos-out-{run}", f"tv2-chaos-copier-{run}"
    create_topic(cluster.bootstrap, source, 1, replication_factor=3)
    create_topic(cluster.bootstrap, sink, OUTPUT_PARTITIONS, replication_factor=3)
    wait_isr_complete(cluster, source)
    wait_isr_complete(cluster, sink)
    values = produce_values(cluster.bootstrap, source, records)
    start = functools.partial(_copier, cluster.bootstrap, source, sink, txn_id, records)
    copier, logs, faults = start(), [], []

    def next_incarnation(copier: subprocess.Popen) -> subprocess.Popen:
        """Kill the copier -9 (mid-transaction, most likely) and start its next incarnation,
        whose InitProducerId fences the open transaction of the killed one."""
        copier.kill()
        logs.append(copier.communicate()[0])
        faults.append(("copier kill9", len(logs)))
        return start()

    try:
        time.sleep(2)
        for round_ in range(rounds):
            if copier.poll() is not None:
                break
            coordinator = coordinator_node(cluster, txn_id, TRANSACTION)
            leaders = {leader for leader, _, _ in describe(cluster.bootstrap, sink).values()}
            victim = cluster.node(coordinator if round_ % 2 == 0 else rng.choice(sorted(leaders)))
            if round_ % 4 == 0:  # a new incarnation fences the old one while a broker is paused
                victim.pause()
                faults.append(("pause", victim.node_id))
                copier = next_incarnation(copier)
                time.sleep(4)
                victim.resume()
            else:
                victim.kill9()
                faults.append(("kill9", victim.node_id))
                if round_ % 4 == 3:
                    copier = next_incarnation(copier)
                time.sleep(3)
                if round_ % 4 != 2:  # one victim in four stays down through the next fault
                    victim.start()
            time.sleep(rng.uniform(1, 3))
        restore(cluster)
        out, _ = copier.communicate(timeout=300)
    finally:
        if copier.poll() is None:
            copier.kill()
            out = copier.communicate()[0]
        restore(cluster)
    logs.append(out)  # kept beside the brokers' logs for a failed run
    (tmp_path / "copier.log").write_text("\n==== next incarnation ====\n".join(logs))
    assert copier.returncode == 0, (faults, out[-4000:])
    assert ("copier kill9", 1) in faults, f"the copier finished before the first fault: {faults}"
    wait_internal_isr_complete(cluster)
    output = read_committed(cluster.bootstrap, sink, records, OUTPUT_PARTITIONS, timeout=90)
    missing, duplicates = sorted(set(values) - set(output)), len(output) - len(set(output))
    assert not missing and not duplicates, (seed, faults, f"missing {len(missing)} (first {missing[:5]}), "
                                                    f"duplicates {duplicates}")
    assert sorted(output) == values
