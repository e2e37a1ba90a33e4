"""kcat (Debian's ``kcat``, librdkafka's CLI) scenarios against a target, each with assertions.

Each scenario is a function ``(ctx) -> None`` that raises when kcat's output or exit status is
not what Kafka gives: metadata as JSON, keyed / header / fixed-partition produce, formatted
consume, ``read_committed`` skipping a transaction a confluent-kafka producer aborted, a
balanced (``-G``) consumer committing its offsets, idempotent produce and offsets by timestamp.
Every kcat call has a timeout (``_kcat`` from the integration test), so a hung scenario fails.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from tests.integration.test_kcat import _kcat, _lines

log = structlog.get_logger("compat.kcat")

SUITE = "kcat"
BROKER_CONFIG: dict[str, str] = {"group.initial.rebalance.delay.ms": "0"}
FAST = True
# Not SASL_SSL with SCRAM: kcat's librdkafka (2.0.2) puts its own nonce in front of the server's
# again in the client-final message (librdkafka#4895, fixed in 2.6.1), which Kafka 4.x refuses
# as kbroker does (RFC 5802's nonce check). FINDINGS.md has it.
SECURITY = ("mtls",)
FEATURES = {
    "bootstrap": [r"metadata"],
    "produce": [r"produce"],
    "consume": [r"consume", r"produce"],
    "groups": [r"group"],
    "idempotence": [r"idempotent"],
    "transactions": [r"read_committed"],
    "read_committed": [r"read_committed"],
    "admin": [r"metadata", r"query_offsets"],
}
PARTITIONS = 3


@dataclass
class Ctx:
    bootstrap: str
    nodes: int
    security: dict[str, str] = field(default_factory=dict)  # librdkafka's, on a secure target

    def conf(self) -> dict[str, str]:
        """A confluent-kafka client's settings for the target."""
        return {"bootstrap.servers": self.bootstrap, **self.security}

    def x(self) -> list[str]:
        """The same settings as kcat's ``-X`` options."""
        return [arg for k, v in self.security.items() for arg in ("-X", f"{k}={v}")]

    def topic(self, partitions: int = PARTITIONS) -> str:
        """A fresh topic with ``partitions`` partitions, replicated on every node (at most 3)."""
        from confluent_kafka.admin import AdminClient, NewTopic

        name = f"kcat-{uuid.uuid4().hex[:10]}"
        admin = AdminClient(self.conf())
        admin.create_topics([NewTopic(name, partitions, min(self.nodes, 3))])[name].result(30)
        self._wait_known(name, partitions)
        return name

    def _wait_known(self, topic: str, partitions: int, timeout: float = 30) -> None:
        """Until every node's Metadata has the topic with leaders: a cluster's brokers learn
        of a new topic a little after CreateTopics answers (Kafka too), and kcat asks any."""
        deadline = time.monotonic() + timeout
        for node in self.bootstrap.split(","):
            while True:
                meta = json.loads(_kcat("-b", node, *self.x(), "-L", "-J", "-t", topic))
                (t,) = meta["topics"]
                if "error" not in t and len(t["partitions"]) == partitions and \
                        all(p["leader"] >= 0 for p in t["partitions"]):
                    break
                assert time.monotonic() < deadline, f"{node} does not know {topic}: {t}"
                time.sleep(0.2)

    def kcat(self, *args: str, stdin: bytes | None = None, timeout: float = 60) -> bytes:
        return _kcat("-b", self.bootstrap, *self.x(), *args, stdin=stdin, timeout=timeout)

    def consume(self, topic: str, fmt: str, *extra: str) -> list[str]:
        out = self.kcat("-C", "-t", topic, "-e", "-o", "beginning", "-f", fmt, *extra)
        return out.decode().splitlines()


def prepare() -> str:
    kcat = shutil.which("kcat")
    if kcat is None:
        raise RuntimeError("kcat is not installed (apt-get install -y kcat)")
    version = subprocess.run([kcat, "-V"], capture_output=True, text=True, timeout=10).stdout
    line = next(line for line in version.splitlines() if line.startswith("Version"))
    # "Version 1.7.1 (JSON, ..., librdkafka 2.0.2 builtin.features=...)"
    rdkafka = line.split("librdkafka ", 1)[1].split()[0]
    return f"kcat {line.split()[1]} (librdkafka {rdkafka})"


def metadata_json(ctx: Ctx) -> None:
    topic = ctx.topic()
    meta = json.loads(ctx.kcat("-L", "-J", "-t", topic))
    ids = sorted(b["id"] for b in meta["brokers"])
    assert len(ids) == ctx.nodes, meta["brokers"]
    assert meta["controllerid"] in ids, meta
    (t,) = meta["topics"]
    assert t["topic"] == topic and "error" not in t, t
    assert sorted(p["partition"] for p in t["partitions"]) == list(range(PARTITIONS)), t
    for p in t["partitions"]:
        assert p["leader"] in ids, p
        assert len(p["replicas"]) == min(ctx.nodes, 3), p
        assert sorted(r["id"] for r in p["isrs"]) == sorted(r["id"] for r in p["replicas"]), p


def produce_keys(ctx: Ctx) -> None:
    topic, lines = ctx.topic(), _lines(300)
    ctx.kcat("-P", "-t", topic, "-K", ":", stdin=b"".join(k + b":" + v + b"\n" for k, v in lines))
    got = ctx.consume(topic, "%k:%s\n")
    assert sorted(got) == sorted((k + b":" + v).decode() for k, v in lines)


def produce_headers(ctx: Ctx) -> None:
    topic = ctx.topic()
    ctx.kcat("-P", "-t", topic, "-H", "trace=abc", "-H", "n=1", stdin=b"one\ntwo\n")
    got = ctx.consume(topic, "%h|%s\n")
    assert sorted(got) == ["trace=abc,n=1|one", "trace=abc,n=1|two"], got


def produce_partition(ctx: Ctx) -> None:
    topic = ctx.topic()
    ctx.kcat("-P", "-t", topic, "-p", "2", stdin=b"x\ny\nz\n")
    got = ctx.consume(topic, "%p %o %s\n")
    assert got == ["2 0 x", "2 1 y", "2 2 z"], got
    only = ctx.kcat("-C", "-t", topic, "-p", "2", "-o", "1", "-e", "-f", "%s\n").decode()
    assert only.splitlines() == ["y", "z"], only


def consume_format(ctx: Ctx) -> None:
    topic = ctx.topic(1)
    before = int(time.time() * 1000)
    ctx.kcat("-P", "-t", topic, "-K", ":", stdin=b"k1:v1\nk2:v2\n")
    got = ctx.consume(topic, "%t|%p|%o|%k|%K|%s|%S|%T\n")
    rows = [line.split("|") for line in got]
    assert [r[:7] for r in rows] == [[topic, "0", "0", "k1", "2", "v1", "2"],
                                     [topic, "0", "1", "k2", "2", "v2", "2"]], rows
    assert all(before - 5000 <= int(r[7]) <= time.time() * 1000 + 5000 for r in rows), rows
    envelopes = [json.loads(line) for line in ctx.kcat(
        "-C", "-t", topic, "-e", "-o", "beginning", "-J").decode().splitlines()]
    assert [(e["offset"], e["key"], e["payload"]) for e in envelopes] == \
        [(0, "k1", "v1"), (1, "k2", "v2")], envelopes


def _transactions(ctx: Ctx, topic: str) -> None:
    """Commit a, abort b, commit c (three records each) with a confluent-kafka producer."""
    from confluent_kafka import Producer

    p = Producer({**ctx.conf(), "transactional.id": f"kcat-{topic}"})
    p.init_transactions(30)
    for name, commit in (("a", True), ("b", False), ("c", True)):
        p.begin_transaction()
        for i in range(3):
            p.produce(topic, f"{name}{i}".encode(), partition=0)
        p.flush(30)
        (p.commit_transaction if commit else p.abort_transaction)(30)


def read_committed(ctx: Ctx) -> None:
    topic = ctx.topic(1)
    _transactions(ctx, topic)
    committed = ctx.consume(topic, "%s\n", "-X", "isolation.level=read_committed")
    assert committed == ["a0", "a1", "a2", "c0", "c1", "c2"], committed
    everything = ctx.consume(topic, "%s\n", "-X", "isolation.level=read_uncommitted")
    assert everything == ["a0", "a1", "a2", "b0", "b1", "b2", "c0", "c1", "c2"], everything


def transactional_produce(ctx: Ctx) -> None:
    """kcat's own ``-X transactional.id``: all input lines in one committed transaction."""
    topic = ctx.topic(1)
    ctx.kcat("-P", "-t", topic, "-X", f"transactional.id=kcat-tx-{topic}", stdin=b"t1\nt2\n")
    got = ctx.consume(topic, "%o %s\n", "-X", "isolation.level=read_committed")
    assert got == ["0 t1", "1 t2"], got  # offset 2 is the commit marker


def group_consume(ctx: Ctx) -> None:
    topic, group = ctx.topic(), f"kcat-g-{uuid.uuid4().hex[:8]}"
    ctx.kcat("-P", "-t", topic, "-K", ":", stdin=b"".join(b"k%d:v%d\n" % (i, i) for i in range(30)))
    out = ctx.kcat("-G", group, "-X", "auto.offset.reset=earliest", "-e", "-f", "%s\n", topic,
                   timeout=90).decode().splitlines()
    assert sorted(out) == sorted(f"v{i}" for i in range(30)), out
    committed = _committed(ctx, group, topic)
    ends = _ends(ctx, topic)
    assert committed == ends, (committed, ends)
    again = ctx.kcat("-G", group, "-e", "-f", "%s\n", topic, timeout=90).decode().splitlines()
    assert again == [], again  # resumes from the committed offsets


def _committed(ctx: Ctx, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({**ctx.conf(), "group.id": group})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def _ends(ctx: Ctx, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({**ctx.conf(), "group.id": "kcat-ends"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in range(PARTITIONS)}
    finally:
        c.close()


def idempotent_produce(ctx: Ctx) -> None:
    topic = ctx.topic()
    lines = b"".join(b"i%03d\n" % i for i in range(200))
    ctx.kcat("-P", "-t", topic, "-X", "enable.idempotence=true", "-X", "linger.ms=20", stdin=lines)
    got = ctx.consume(topic, "%s\n")
    assert sorted(got) == [f"i{i:03d}" for i in range(200)], len(got)


def query_offsets(ctx: Ctx) -> None:
    topic = ctx.topic(1)
    ctx.kcat("-P", "-t", topic, "-p", "0", stdin=b"old1\nold2\n")
    time.sleep(1.1)
    cut = int(time.time() * 1000)
    time.sleep(0.1)
    ctx.kcat("-P", "-t", topic, "-p", "0", stdin=b"new1\n")
    answer = json.loads(ctx.kcat("-Q", "-J", "-t", f"{topic}:0:{cut}"))
    assert answer[topic]["0"]["offset"] == 2, answer
    future = json.loads(ctx.kcat("-Q", "-J", "-t", f"{topic}:0:{cut + 3_600_000}"))
    assert future[topic]["0"]["offset"] == -1, future  # no record that late: end (-1)


SCENARIOS: dict[str, Callable[[Ctx], None]] = {f.__name__: f for f in (
    metadata_json, produce_keys, produce_headers, produce_partition, consume_format,
    read_committed, transactional_produce, group_consume, idempotent_produce, query_offsets)}


def run(target, workdir: Path, fast: bool) -> dict[str, str]:
    """Every scenario (they take a few seconds each, so fast runs them all)."""
    ctx, results = Ctx(target.bootstrap, target.nodes, target.librdkafka_security), {}
    for name, scenario in SCENARIOS.items():
        try:
            scenario(ctx)
            results[name] = "passed"
        except Exception as e:  # a failing scenario is recorded, the next one still runs
            log.warning("kcat_scenario_failed", test=name, error=repr(e)[:2000],
                        where=traceback.format_exc(limit=3)[-1500:])
            results[name] = "failed"
    return results
