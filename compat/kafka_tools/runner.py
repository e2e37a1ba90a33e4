"""Apache Kafka's own CLI tools (4.3.1 jars) against a target: the compat suite "kafka-tools".

Each scenario is a test id with assertions on the tool's output and exit code. The tools run
through ``compat/kafka/kafka-run.sh`` (fast JVM start flags, one JVM per call, each call bounded
by ``tests.integration.test_kafka_tools.TOOL_TIMEOUT``). The scenarios that
``tests/integration/test_kafka_tools.py`` already has are called from there unchanged; the
hanging-transaction writer and the table parser come from
``tests/integration/test_transactions_cli.py``. Scenarios of tools that only make sense with
several brokers (leader election, reassignment, log dirs) are recorded "skipped" on one node.

The fast subset is the ``kafka-transactions`` commands (list, describe, describe-producers,
find-hanging, abort) on one scenario: an open transaction of a real transactional producer and a
hanging transaction (a transactional batch its coordinator never heard of, 20.5 minutes old).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from compat.results import FAILED, PASSED, SKIPPED
from tests.integration import test_kafka_tools as kt
from tests.integration import test_transactions_cli as txcli

log = structlog.get_logger("compat.kafka_tools")

SUITE = "kafka-tools"
FAST = True
# A raw client writes a transactional batch without AddPartitionsToTxn (a hanging transaction,
# what find-hanging and abort are for): Kafka's partition verification must be off for that.
BROKER_CONFIG = {"transaction.partition.verification.enable": "false"}
# Every tool takes the target's Java client settings as --command-config, the confluent-kafka
# helpers librdkafka's and the raw writer of the hanging transaction logs in itself (TLS, SCRAM).
SECURITY = ("sasl-ssl", "mtls")

FEATURES = {
    "bootstrap": [r"^topics_list$", r"^log_dirs"],
    "produce": [r"^console_", r"^perf_test"],
    "consume": [r"^console_"],
    "groups": [r"^groups_"],
    "idempotence": [r"console_producer_is_idempotent", r"^perf_test$"],
    "transactions": [r"^transactions_", r"perf_test_transactional", r"read_committed"],
    "read_committed": [r"read_committed"],
    "admin": [r"^topics_", r"^configs_", r"^groups_", r"^get_offsets", r"^leader_election", r"^reassign",
              r"^log_dirs"],
}


@dataclass
class Ctx:
    """One run against one target; scenarios share lazily built fixtures through it."""
    bootstrap: str
    nodes: int
    workdir: Path
    security: object = None  # the target's ClientSecurity on a secure target
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    shared: dict = field(default_factory=dict)

    def conf(self, **extra) -> dict:
        """A confluent-kafka client's settings for the target, and ``extra``."""
        return {"bootstrap.servers": self.bootstrap,
                **(self.security.librdkafka() if self.security else {}), **extra}

    def topic(self, what: str) -> str:
        return f"kt-{what}-{uuid.uuid4().hex[:8]}"

    def once(self, key: str, build: Callable[[], object]):
        """``build()``'s result, built by the first scenario that needs it; a failed build fails
        the later scenarios at once with the same error (rather than retrying for as long)."""
        if key not in self.shared:
            try:
                self.shared[key] = build()
            except (Exception, kt.pytest.fail.Exception) as e:
                self.shared[key] = e
                raise
        if isinstance(self.shared[key], BaseException):
            raise AssertionError(f"the shared {key!r} setup failed: {self.shared[key]!r}"[:3000])
        return self.shared[key]


# --------------------------------------------------------------------------- helpers
def tool(ctx: Ctx, name: str, *args: str, check: bool = True, **kw):
    return kt.kafka(name, "--bootstrap-server", ctx.bootstrap, *args, check=check, **kw)


def rows(out: str) -> list[list[str]]:
    """Whitespace-separated table lines (blank lines dropped)."""
    return [line.split() for line in out.splitlines() if line.strip()]


def leader_address(ctx: Ctx, topic: str, partition: int) -> str:
    """host:port of the partition's leader (a raw client must write there)."""
    from confluent_kafka.admin import AdminClient

    md = AdminClient(ctx.conf()).list_topics(topic, timeout=15)
    broker = md.brokers[md.topics[topic].partitions[partition].leader]
    return f"{broker.host}:{broker.port}"


def broker_ids(ctx: Ctx) -> list[int]:
    from confluent_kafka.admin import AdminClient

    return sorted(AdminClient(ctx.conf()).list_topics(timeout=15).brokers)


def create(ctx: Ctx, topic: str, partitions: int, rf: int | None = None, *extra: str) -> None:
    rf = rf or kt.REPLICATION_FACTOR
    res = kt.topics(ctx.bootstrap, "--create", "--topic", topic, "--partitions", str(partitions),
                    "--replication-factor", str(rf), *extra)
    assert res.stdout.strip() == f"Created topic {topic}.", res.stdout + res.stderr
    kt.describe_until(ctx.bootstrap, topic, partitions)


def txn_producer(ctx: Ctx, txn_id: str):
    import confluent_kafka as ck

    p = ck.Producer(ctx.conf(**{"transactional.id": txn_id, "linger.ms": 0,
                                "transaction.timeout.ms": 60000}))
    p.init_transactions(30)
    return p


def end_offsets(ctx: Ctx, topic: str, time_arg: str) -> dict[int, int]:
    """kafka-get-offsets --time ``time_arg``: partition -> offset ("topic:partition:offset" lines)."""
    out = tool(ctx, "kafka-get-offsets", "--topic", topic, "--time", time_arg).stdout
    result = {}
    for line in out.split():
        t, p, off = line.rsplit(":", 2)
        assert t == topic, out
        result[int(p)] = int(off)
    return result


# --------------------------------------------------------------------------- kafka-topics
def topics_create_with_configs(ctx: Ctx) -> None:
    topic = ctx.topic("cfg")
    create(ctx, topic, 2, None, "--config", "cleanup.policy=compact", "--config", "retention.ms=123456",
           "--config", "max.compaction.lag.ms=86400000", "--config", "min.cleanable.dirty.ratio=0.3")
    out = tool(ctx, "kafka-configs", "--describe", "--entity-type", "topics", "--entity-name", topic).stdout
    for kv in ("cleanup.policy=compact", "retention.ms=123456", "max.compaction.lag.ms=86400000",
               "min.cleanable.dirty.ratio=0.3"):
        assert re.search(rf"^\s+{re.escape(kv)} sensitive=false", out, re.MULTILINE), (kv, out)
    header = kt.topics(ctx.bootstrap, "--describe", "--topic", topic).stdout.splitlines()[0]
    assert "max.compaction.lag.ms=86400000" in header, header


def topics_delete(ctx: Ctx) -> None:
    topic = ctx.topic("del")
    create(ctx, topic, 2)
    res = kt.topics(ctx.bootstrap, "--delete", "--topic", topic)
    assert res.stdout.strip() == "" and "ERROR" not in res.stderr, res.stdout + res.stderr
    deadline = time.monotonic() + 15
    while topic in kt.topics(ctx.bootstrap, "--list").stdout.split():
        assert time.monotonic() < deadline, f"{topic} still listed 15 s after --delete"
        time.sleep(0.5)
    res = kt.topics(ctx.bootstrap, "--delete", "--topic", topic, check=False)
    assert res.returncode != 0 and f"Topic '{topic}' does not exist" in res.stdout + res.stderr, \
        res.stdout + res.stderr


# --------------------------------------------------------------------------- kafka-configs (broker)
def _broker_configs(ctx: Ctx) -> tuple[str, ...]:
    return ("kafka-configs", "--entity-type", "brokers", "--entity-name", str(broker_ids(ctx)[0]))


def configs_broker_describe_all(ctx: Ctx) -> None:
    base = _broker_configs(ctx)
    out = tool(ctx, base[0], "--describe", "--all", *base[1:]).stdout
    assert f"All configs for broker {base[-1]} are:" in out, out
    found = dict(re.findall(r"^\s+([a-z0-9.]+)=(\S*) sensitive=", out, re.MULTILINE))
    for key in ("num.partitions", "log.retention.hours", "message.max.bytes", "auto.create.topics.enable"):
        assert key in found, f"{key} missing from --describe --all:\n{out[:2000]}"


def _broker_add_delete(ctx: Ctx, key: str, value: str) -> None:
    """--add-config key=value on one broker: described as a DYNAMIC_BROKER_CONFIG; --delete-config
    removes it."""
    base = _broker_configs(ctx)
    res = tool(ctx, base[0], "--alter", *base[1:], "--add-config", f"{key}={value}")
    assert f"Completed updating config for broker {base[-1]}." in res.stdout, res.stdout + res.stderr
    out = tool(ctx, base[0], "--describe", *base[1:]).stdout
    assert f"Dynamic configs for broker {base[-1]} are:" in out, out
    assert re.search(rf"^\s+{re.escape(key)}={value} sensitive=false synonyms=\{{DYNAMIC_BROKER_CONFIG:"
                     rf"{re.escape(key)}={value}", out, re.MULTILINE), out
    tool(ctx, base[0], "--alter", *base[1:], "--delete-config", key)
    out = tool(ctx, base[0], "--describe", *base[1:]).stdout
    assert f"{key}=" not in out, out


def configs_broker_add_delete_config(ctx: Ctx) -> None:
    _broker_add_delete(ctx, "message.max.bytes", "2000000")


def configs_broker_dynamic_log_cleaner_threads(ctx: Ctx) -> None:
    _broker_add_delete(ctx, "log.cleaner.threads", "2")  # per-broker dynamic in Kafka


# --------------------------------------------------------------------------- console producer / consumer
def console_consumer_read_committed(ctx: Ctx) -> None:
    """A transaction committed, one aborted, one committed: read_committed prints the committed
    records only, read_uncommitted all of them."""
    topic = ctx.topic("rc")
    create(ctx, topic, 1)
    p = txn_producer(ctx, f"kt-rc-{ctx.tag}")
    for tag, commit in (("a", True), ("b", False), ("c", True)):
        p.begin_transaction()
        for i in range(3):
            p.produce(topic, key=f"k{tag}".encode(), value=f"{tag}{i}".encode(), partition=0)
        assert p.flush(30) == 0
        (p.commit_transaction if commit else p.abort_transaction)(30)

    def consume(isolation: str, n: int) -> list[str]:
        res = tool(ctx, "kafka-console-consumer", "--topic", topic, "--from-beginning", "--max-messages", str(n),
                   "--timeout-ms", "15000", "--isolation-level", isolation, "--formatter-property", "print.key=true",
                   "--formatter-property", "key.separator=:", check=False)
        return res.stdout.splitlines()

    committed = ["ka:a0", "ka:a1", "ka:a2", "kc:c0", "kc:c1", "kc:c2"]
    assert consume("read_committed", 100) == committed  # runs to --timeout-ms: nothing more is visible
    assert consume("read_uncommitted", 9) == ["ka:a0", "ka:a1", "ka:a2", "kb:b0", "kb:b1", "kb:b2", *committed[3:]]


# --------------------------------------------------------------------------- kafka-consumer-groups
def _group(ctx: Ctx) -> tuple[str, str]:
    """A group that consumed a 2-partition topic (7 + 3 records) to the end and left."""
    def build():
        topic, group = ctx.topic("grp"), f"kt-group-{ctx.tag}"
        create(ctx, topic, 2)
        import confluent_kafka as ck

        p = ck.Producer(ctx.conf())
        for i in range(10):
            p.produce(topic, key=b"k", value=f"v{i}".encode(), partition=0 if i < 7 else 1)
        assert p.flush(30) == 0
        res = tool(ctx, "kafka-console-consumer", "--topic", topic, "--group", group, "--from-beginning",
                   "--max-messages", "10", "--timeout-ms", "20000")
        assert len(res.stdout.splitlines()) == 10, res.stdout + res.stderr
        return topic, group
    return ctx.once("group", build)


def _describe_group(ctx: Ctx, group: str) -> dict[int, list[str]]:
    """partition -> [CURRENT-OFFSET, LOG-END-OFFSET, LAG] from --describe."""
    out = tool(ctx, "kafka-consumer-groups", "--describe", "--group", group).stdout
    table = rows(out)
    header = next(r for r in table if r[0] == "GROUP")
    assert header[:6] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"], out
    return {int(r[2]): r[3:6] for r in table if r[0] == group}


def groups_list(ctx: Ctx) -> None:
    _, group = _group(ctx)
    assert group in tool(ctx, "kafka-consumer-groups", "--list").stdout.split()


def groups_describe(ctx: Ctx) -> None:
    _, group = _group(ctx)
    assert _describe_group(ctx, group) == {0: ["7", "7", "0"], 1: ["3", "3", "0"]}


def groups_reset_offsets_to_earliest(ctx: Ctx) -> None:
    topic, group = _group(ctx)
    out = tool(ctx, "kafka-consumer-groups", "--reset-offsets", "--to-earliest", "--execute", "--group", group,
               "--topic", topic).stdout
    table = rows(out)
    assert table[0] == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], out
    assert sorted(table[1:]) == [[group, topic, "0", "0"], [group, topic, "1", "0"]], out
    assert _describe_group(ctx, group) == {0: ["0", "7", "7"], 1: ["0", "3", "3"]}


def groups_delete_offsets(ctx: Ctx) -> None:
    topic, group = _group(ctx)
    res = tool(ctx, "kafka-consumer-groups", "--delete-offsets", "--group", group, "--topic", topic)
    assert f"Request succeeded for deleting offsets from group {group}." in res.stdout, res.stdout + res.stderr
    table = rows(res.stdout)
    assert sorted(r for r in table if r[0] == topic) == [[topic, "0", "Successful"], [topic, "1", "Successful"]], \
        res.stdout


def groups_delete(ctx: Ctx) -> None:
    _, group = _group(ctx)
    res = tool(ctx, "kafka-consumer-groups", "--delete", "--group", group)
    assert f"Deletion of requested consumer groups ('{group}') was successful." in res.stdout, \
        res.stdout + res.stderr
    assert group not in tool(ctx, "kafka-consumer-groups", "--list").stdout.split()


# --------------------------------------------------------------------------- kafka-transactions
@dataclass
class TxnScenario:
    topic: str
    txn_id: str
    producer: object
    hanging: tuple[int, int, int]  # (producer id, epoch, offset) at partition 0
    old_ts: int


def _txn(ctx: Ctx) -> TxnScenario:
    """An open transaction of a real producer on partition 1 and a hanging one at partition 0."""
    def build():
        topic, txn_id = ctx.topic("txn"), f"kt-txn-{ctx.tag}"
        create(ctx, topic, 2)
        p = txn_producer(ctx, txn_id)
        p.begin_transaction()
        p.produce(topic, key=b"k", value=b"open", partition=1)
        assert p.flush(30) == 0
        old_ts = int(time.time() * 1000) - txcli.AGE_MS
        hanging = txcli.write_hanging(leader_address(ctx, topic, 0), topic, 0, old_ts, None,
                                      security=ctx.security)
        return TxnScenario(topic, txn_id, p, hanging, old_ts)
    return ctx.once("txn", build)


def transactions_list(ctx: Ctx) -> None:
    s = _txn(ctx)
    table = txcli.table(tool(ctx, "kafka-transactions", "list").stdout)
    assert table[0] == txcli.LIST_HEADERS, table
    mine = [r for r in table[1:] if r[0] == s.txn_id]
    assert len(mine) == 1 and mine[0][3] == "Ongoing", table


def transactions_describe(ctx: Ctx) -> None:
    s = _txn(ctx)
    table = txcli.table(tool(ctx, "kafka-transactions", "describe", "--transactional-id", s.txn_id).stdout)
    assert table[0] == txcli.DESCRIBE_HEADERS and len(table) == 2, table
    row = dict(zip(txcli.DESCRIBE_HEADERS, table[1]))
    assert row["TransactionalId"] == s.txn_id and row["TransactionState"] == "Ongoing", row
    assert row["TransactionTimeoutMs"] == "60000" and row["TopicPartitions"] == f"{s.topic}-1", row
    res = tool(ctx, "kafka-transactions", "describe", "--transactional-id", f"kt-never-{ctx.tag}", check=False)
    assert res.returncode == 1 and "the ID could not be found" in res.stdout + res.stderr, res.stdout + res.stderr


def transactions_describe_producers(ctx: Ctx) -> None:
    s = _txn(ctx)
    table = txcli.table(tool(ctx, "kafka-transactions", "describe-producers", "--topic", s.topic,
                             "--partition", "0").stdout)
    assert table[0] == txcli.PRODUCERS_HEADERS, table
    pid, epoch, offset = s.hanging
    assert table[1:] == [[str(pid), str(epoch), "-1", "0", str(s.old_ts), str(offset)]], table


def transactions_find_hanging(ctx: Ctx) -> None:
    """The hanging one is found; the real producer's open transaction (its coordinator knows it)
    is not, even with a 0-minute timeout."""
    s = _txn(ctx)
    for extra in ([], ["--max-transaction-timeout", "0"]):
        table = txcli.table(tool(ctx, "kafka-transactions", "find-hanging", "--topic", s.topic, *extra).stdout)
        assert table[0] == txcli.HANGING_HEADERS, table
        pid, epoch, offset = s.hanging
        assert [r[:7] for r in table[1:]] == [[s.topic, "0", str(pid), str(epoch), "-1", str(offset),
                                                str(s.old_ts)]], table


def transactions_abort(ctx: Ctx) -> None:
    s = _txn(ctx)
    pid, _, offset = s.hanging
    res = tool(ctx, "kafka-transactions", "abort", "--topic", s.topic, "--partition", "0",
               "--start-offset", str(offset))
    assert res.stdout == "", res.stdout
    table = txcli.table(tool(ctx, "kafka-transactions", "find-hanging", "--topic", s.topic).stdout)
    assert table[1:] == [], table
    prod = txcli.table(tool(ctx, "kafka-transactions", "describe-producers", "--topic", s.topic,
                            "--partition", "0").stdout)
    assert [(r[0], r[5]) for r in prod[1:]] == [(str(pid), "None")], prod
    assert end_offsets(ctx, s.topic, "-1")[0] == offset + 2  # the record and the ABORT marker


# --------------------------------------------------------------------------- perf test, get-offsets
def _perf(ctx: Ctx, topic: str, *extra: str) -> str:
    res = kt.kafka("kafka-producer-perf-test", "--bootstrap-server", ctx.bootstrap, "--topic", topic,
                   "--num-records", "500", "--record-size", "100", "--throughput", "-1",
                   "--command-property", "acks=all", "linger.ms=5", *extra)
    last = res.stdout.strip().splitlines()[-1]
    assert re.match(r"500 records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency", last), \
        res.stdout + res.stderr
    return res.stdout


def perf_test(ctx: Ctx) -> None:
    topic = ctx.topic("perf")
    create(ctx, topic, 1)
    _perf(ctx, topic)
    assert end_offsets(ctx, topic, "-1") == {0: 500}


def perf_test_transactional(ctx: Ctx) -> None:
    topic = ctx.topic("perftx")
    create(ctx, topic, 1)
    _perf(ctx, topic, "--transactional-id", f"kt-perf-{ctx.tag}", "--transaction-duration-ms", "100")
    res = tool(ctx, "kafka-console-consumer", "--topic", topic, "--from-beginning", "--max-messages", "500",
               "--timeout-ms", "15000", "--isolation-level", "read_committed")
    assert len(res.stdout.splitlines()) == 500, res.stderr
    end = end_offsets(ctx, topic, "-1")[0]
    assert end > 500, f"no transaction markers after 500 transactional records: end offset {end}"


def get_offsets(ctx: Ctx) -> None:
    topic = ctx.topic("offs")
    create(ctx, topic, 2)
    import confluent_kafka as ck

    p = ck.Producer(ctx.conf())
    base = int(time.time() * 1000) - 60_000
    for i, ts in enumerate((base, base + 5000, base + 3000)):
        p.produce(topic, value=f"v{i}".encode(), partition=0, timestamp=ts)
    p.produce(topic, value=b"x", partition=1, timestamp=base)
    assert p.flush(30) == 0
    for latest in ("-1", "latest"):
        assert end_offsets(ctx, topic, latest) == {0: 3, 1: 1}, latest
    for earliest in ("-2", "earliest"):
        assert end_offsets(ctx, topic, earliest) == {0: 0, 1: 0}, earliest
    assert end_offsets(ctx, topic, "-3") == {0: 1, 1: 0}  # max timestamp: offset of base+5000
    assert end_offsets(ctx, topic, "max-timestamp") == {0: 1, 1: 0}
    assert end_offsets(ctx, topic, str(base + 4000)) == {0: 1}  # first ts >= it; none in 1: not printed
    out = tool(ctx, "kafka-get-offsets", "--topic-partitions", f"{topic}:1", "--time", "-1").stdout
    assert out.split() == [f"{topic}:1:1"], out


# --------------------------------------------------------------------------- cluster only
def leader_election_preferred(ctx: Ctx) -> None:
    topic = ctx.topic("elect")
    create(ctx, topic, 2, ctx.nodes)
    res = tool(ctx, "kafka-leader-election", "--election-type", "preferred", "--topic", topic, "--partition", "0")
    out = res.stdout
    # The preferred leader normally leads already: Kafka says so (ELECTION_NOT_NEEDED).
    assert re.search(rf"(Successfully completed leader election \(PREFERRED\) for partitions {topic}-0"
                     rf"|Valid replica already elected for partitions {topic}-0)", out), out + res.stderr
    res = tool(ctx, "kafka-leader-election", "--election-type", "preferred", "--all-topic-partitions")
    assert "Error" not in res.stdout + res.stderr, res.stdout + res.stderr


def _assignment(ctx: Ctx, topic: str) -> dict[int, list[int]]:
    _, parts = kt.describe(ctx.bootstrap, topic)
    return {int(p["p"]): [int(r) for r in p["replicas"].split(",")] for p in parts}


def reassign_partitions(ctx: Ctx) -> None:
    topic = ctx.topic("reassign")
    create(ctx, topic, 2, 2)
    ids = broker_ids(ctx)
    move = ctx.workdir / "topics-to-move.json"
    move.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    out = tool(ctx, "kafka-reassign-partitions", "--generate", "--topics-to-move-json-file", str(move),
               "--broker-list", ",".join(map(str, ids))).stdout
    current, proposed = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert {p["partition"] for p in current["partitions"]} == {0, 1}, out
    assert all(len(p["replicas"]) == 2 and set(p["replicas"]) <= set(ids) for p in proposed["partitions"]), out
    before = _assignment(ctx, topic)
    # Partition 0 onto the two brokers it is not on first (a real move), partition 1 unchanged.
    target = [b for b in ids if b != before[0][0]][:2]
    plan = ctx.workdir / "reassign.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": target, "log_dirs": ["any", "any"]}]}))
    res = tool(ctx, "kafka-reassign-partitions", "--execute", "--reassignment-json-file", str(plan))
    assert f"Successfully started partition reassignment for {topic}-0" in res.stdout, res.stdout + res.stderr
    deadline = time.monotonic() + 30
    while True:
        out = tool(ctx, "kafka-reassign-partitions", "--verify", "--reassignment-json-file", str(plan)).stdout
        if f"Reassignment of partition {topic}-0 is completed." in out:
            break
        assert time.monotonic() < deadline, out
        time.sleep(1)
    deadline = time.monotonic() + 15
    while sorted(_assignment(ctx, topic)[0]) != sorted(target):
        assert time.monotonic() < deadline, (_assignment(ctx, topic), target)
        time.sleep(0.5)
    assert _assignment(ctx, topic)[1] == before[1]


def log_dirs(ctx: Ctx) -> None:
    topic = ctx.topic("logdirs")
    create(ctx, topic, 2, ctx.nodes)
    import confluent_kafka as ck

    p = ck.Producer(ctx.conf())
    for i in range(20):
        p.produce(topic, value=b"x" * 100, partition=i % 2)
    assert p.flush(30) == 0
    out = tool(ctx, "kafka-log-dirs", "--describe", "--topic-list", topic).stdout
    assert "Querying brokers for log directories information" in out, out
    data = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    brokers = {b["broker"]: b for b in data["brokers"]}
    assert sorted(brokers) == broker_ids(ctx), data
    for b in brokers.values():
        parts = {p["partition"]: p for d in b["logDirs"] for p in d["partitions"]}
        assert set(parts) == {f"{topic}-0", f"{topic}-1"}, (b["broker"], parts)  # RF = nodes: every broker
        assert all(p["size"] > 0 for p in parts.values()), parts


# --------------------------------------------------------------------------- the list
def _reused(fn) -> Callable[[Ctx], None]:
    """A scenario of tests/integration/test_kafka_tools.py, called with (bootstrap[, topic])."""
    def scenario(ctx: Ctx) -> None:
        nargs = fn.__code__.co_argcount
        fn(*[ctx.bootstrap, f"kt-{uuid.uuid4().hex[:10]}"][:nargs])
    return scenario


# id -> (scenario, in the fast subset, needs several brokers)
SCENARIOS: dict[str, tuple[Callable[[Ctx], None], bool, bool]] = {
    "topics_create_and_describe": (_reused(kt.test_topics_create_and_describe), False, False),
    "topics_create_with_configs": (topics_create_with_configs, False, False),
    "topics_create_existing_fails": (_reused(kt.test_topics_create_existing_fails), False, False),
    "topics_describe_missing_topic_fails": (_reused(kt.test_topics_describe_missing_topic_fails), False, False),
    "topics_list": (_reused(kt.test_topics_list), False, False),
    "topics_alter_partitions": (_reused(kt.test_topics_alter_partitions), False, False),
    "topics_delete": (topics_delete, False, False),
    "configs_topic_describe": (_reused(kt.test_configs_describe_topic), False, False),
    "configs_topic_describe_all": (_reused(kt.test_configs_describe_all_has_defaults), False, False),
    "configs_topic_add_delete_config": (_reused(kt.test_configs_alter_then_describe), False, False),
    "configs_broker_describe_all": (configs_broker_describe_all, False, False),
    "configs_broker_add_delete_config": (configs_broker_add_delete_config, False, False),
    "configs_broker_dynamic_log_cleaner_threads": (configs_broker_dynamic_log_cleaner_threads, False, False),
    "console_produce_consume_keyed": (_reused(kt.test_console_produce_consume_keyed), False, False),
    "console_consumer_partition_offset": (_reused(kt.test_console_consumer_single_partition_no_group), False, False),
    "console_producer_is_idempotent": (_reused(kt.test_console_producer_is_idempotent_by_default), False, False),
    "console_consumer_read_committed": (console_consumer_read_committed, False, False),
    "groups_list": (groups_list, False, False),
    "groups_describe": (groups_describe, False, False),
    "groups_reset_offsets_to_earliest": (groups_reset_offsets_to_earliest, False, False),
    "groups_delete_offsets": (groups_delete_offsets, False, False),
    "groups_delete": (groups_delete, False, False),
    "transactions_list": (transactions_list, True, False),
    "transactions_describe": (transactions_describe, True, False),
    "transactions_describe_producers": (transactions_describe_producers, True, False),
    "transactions_find_hanging": (transactions_find_hanging, True, False),
    "transactions_abort": (transactions_abort, True, False),
    "transactions_list_describe_committed": (_reused(kt.test_transactions_list_and_describe), True, False),
    "perf_test": (perf_test, False, False),
    "perf_test_transactional": (perf_test_transactional, False, False),
    "get_offsets": (get_offsets, False, False),
    "leader_election_preferred": (leader_election_preferred, False, True),
    "reassign_partitions": (reassign_partitions, False, True),
    "log_dirs": (log_dirs, False, True),
}


def prepare() -> str:
    """Resolve the Kafka jars (a no-op when cached)."""
    from compat.kafka.kraft import fetch_kafka

    fetch_kafka()
    return "Apache Kafka tools 4.3.1"


def run(target, workdir: Path, fast: bool) -> dict[str, str]:
    ctx = Ctx(target.bootstrap, target.nodes, workdir, target.security)
    # Clusters run with min.insync.replicas=2: acks=all (the tools' and clients' default) needs
    # topics of RF >= 2 there, on Kafka as on kbroker.
    kt.REPLICATION_FACTOR = min(3, target.nodes)
    # A secure target: every tool call (here and in the reused scenarios) gets the target's Java
    # client settings as --command-config, the reused scenarios' confluent-kafka clients its
    # librdkafka settings; a plain target gets neither.
    kt.COMMAND_CONFIG = target.security.java_file(workdir / "client.properties") if target.security else None
    kt.CLIENT_CONFIG = target.librdkafka_security
    results = {}
    try:
        for test, (scenario, in_fast, cluster_only) in SCENARIOS.items():
            if fast and not in_fast:
                continue
            if cluster_only and not target.is_cluster:
                results[test] = SKIPPED
                continue
            start = time.monotonic()
            try:
                scenario(ctx)
                results[test], detail = PASSED, ""
            except (Exception, kt.pytest.fail.Exception) as e:  # pytest.fail raises a BaseException
                results[test], detail = FAILED, f"{type(e).__name__}: {e}"[:3000]
            log.info("kafka_tools_test", target=target.name, test=test, outcome=results[test],
                     seconds=round(time.monotonic() - start, 1), detail=detail)
    finally:
        if isinstance(ctx.shared.get("txn"), TxnScenario):
            ctx.shared["txn"].producer.abort_transaction(30)
    return results
