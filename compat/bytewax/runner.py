"""Bytewax's Kafka input and output connectors against a target.

Bytewax gets a virtual environment of its own (``~/.cache/kbroker/bytewax-<version>/venv``, made
once from PyPI with its ``kafka`` extra). One scenario, recorded as one test,
``read_transform_write``: 3000 keyed records on a 3-partition topic, the dataflow of
``dataflow.py`` (read to the end, upper-case, write), and a check that the output holds every
input record once, transformed, under its key. On the secure targets (SASL_SSL with SCRAM, and
mutual TLS) the dataflow's connectors and the harness's clients take the target's settings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

from compat import stream_eos

SUITE = "bytewax"
VERSION = "0.21.1"
HERE = Path(__file__).resolve().parent
CACHE = Path.home() / ".cache" / "kbroker" / f"bytewax-{VERSION}"
PYTHON = CACHE / "venv" / "bin" / "python"
RECORDS, PARTITIONS = 3000, 3

BROKER_CONFIG: dict[str, str] = {"group.initial.rebalance.delay.ms": "0"}
FAST = False
SECURITY = ("sasl-ssl", "mtls")
FEATURES = {"bootstrap": [r"."], "produce": [r"."], "consume": [r"."]}


def prepare() -> str:
    stream_eos.own_venv(CACHE, f"bytewax[kafka]=={VERSION}")
    return f"bytewax {VERSION}"


def _records(conf: dict, topic: str) -> Counter:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**conf, "group.id": f"check-{uuid.uuid4().hex[:6]}"})
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(PARTITIONS)}
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen: Counter = Counter()
    read = 0
    try:
        while read < sum(ends.values()):
            msg = consumer.poll(5)
            if msg is None:
                break
            if msg.error() is None:
                seen[(msg.key(), msg.value())] += 1
                read += 1
    finally:
        consumer.close()
    return seen


def run(target, workdir: Path, fast: bool) -> dict[str, str]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    security = target.librdkafka_security
    conf = {"bootstrap.servers": target.bootstrap, **security}
    names = {"COMPAT_INPUT": f"bytewax-in-{uuid.uuid4().hex[:6]}", "COMPAT_OUTPUT": f"bytewax-out-{uuid.uuid4().hex[:6]}"}
    admin = AdminClient(conf)
    for future in admin.create_topics([NewTopic(n, PARTITIONS, min(3, target.nodes)) for n in names.values()]).values():
        future.result(60)
    producer = Producer({**conf, "acks": "all"})
    expected = Counter()
    for i in range(RECORDS):
        key, value = f"k{i % 50}".encode(), f"value-{i}".encode()
        producer.produce(names["COMPAT_INPUT"], key=key, value=value)
        expected[(key, value.upper())] += 1
    assert producer.flush(60) == 0
    log = workdir / "dataflow.log"
    with open(log, "w") as out:
        done = subprocess.run([str(PYTHON), "-m", "bytewax.run", "dataflow:flow"], cwd=HERE, stdout=out,
                              stderr=subprocess.STDOUT, timeout=300,
                              env={**os.environ, **names, "COMPAT_BOOTSTRAP": target.bootstrap,
                                   "COMPAT_CLIENT_CONFIG": json.dumps(security)})
    if done.returncode != 0:
        print(f"bytewax: the dataflow exited with {done.returncode}; see {log}", file=sys.stderr)
        return {"read_transform_write": "failed"}
    got = _records(conf, names["COMPAT_OUTPUT"])
    ok = got == expected
    if not ok:
        print(f"bytewax: {sum(got.values())} output records, {len(expected - got)} missing, "
              f"{len(got - expected)} unexpected", file=sys.stderr)
    return {"read_transform_write": "passed" if ok else "failed"}
