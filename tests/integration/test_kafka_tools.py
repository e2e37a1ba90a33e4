"""Apache Kafka's own CLI tools (4.3.1, from Maven Central) against a broker.

The broker comes from the ``broker`` fixture (tests/conftest.py; an object with
``.bootstrap == "127.0.0.1:PORT"``).  If ``KBROKER_TEST_BOOTSTRAP`` is set, that address
is used instead and the ``broker`` fixture is never instantiated, e.g. against a real
Apache Kafka started with ``python compat/kafka/kraft.py``::

    B=$(python compat/kafka/kraft.py &)   # prints 127.0.0.1:PORT
    KBROKER_TEST_BOOTSTRAP=127.0.0.1:PORT pytest -m kafka_tools tests/integration/test_kafka_tools.py

The tools run through ``compat/kafka/kafka-run.sh`` (jars resolved once by
``compat/kafka/fetch.sh``, cached in ~/.cache/kbroker).  Every test uses its own
uniquely-named topic, so the module can run repeatedly against a long-lived broker and
works whatever scope the ``broker`` fixture has.

APIs the tools send (Java client 4.3.1, seen with compat/kafka/log4j2-requests.xml
against Kafka 4.3.1; a broker advertising lower maxima gets those versions instead):
  kafka-topics --create     ApiVersions, Metadata, CreateTopics
  kafka-topics --describe   + DescribeTopicPartitions (falls back to Metadata when not
                            advertised), DescribeCluster (falls back to Metadata),
                            DescribeConfigs (required), ListPartitionReassignments
                            (UNSUPPORTED_VERSION is tolerated)
  kafka-topics --alter      CreatePartitions
  kafka-configs --describe  DescribeConfigs;  --alter: IncrementalAlterConfigs
  console producer          InitProducerId (idempotent by default), Produce
  console consumer          FindCoordinator, JoinGroup, SyncGroup, OffsetFetch,
                            ListOffsets, Fetch, (Heartbeat, OffsetCommit), LeaveGroup
  kafka-transactions        ListTransactions / DescribeTransactions (+FindCoordinator
                            key_type 1) / DescribeProducers
  kafka-get-offsets         DescribeTopicPartitions, DescribeCluster, ListOffsets
  kafka-consumer-groups --delete-offsets   FindCoordinator, Metadata, OffsetDelete
(details and the client's version ranges: compat/kafka/README.md)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
KAFKA_DIR = REPO / "compat" / "kafka"
KAFKA_RUN = KAFKA_DIR / "kafka-run.sh"
FETCH = KAFKA_DIR / "fetch.sh"

TOOL_TIMEOUT = 90  # seconds per CLI invocation (JVM start is ~1 s)
# The topics' replication factor: 1 here; compat/kafka_tools runs these scenarios on three-node
# clusters (min.insync.replicas=2, so acks=all needs RF >= 2) with 3.
REPLICATION_FACTOR = 1
# Client settings for a secure listener, none here; compat/kafka_tools sets both on its SASL_SSL
# and mTLS targets: a properties file every tool gets as ``--command-config`` (all the tools used
# take that option in 4.3.1) and the confluent-kafka clients' settings (librdkafka's names).
COMMAND_CONFIG: Path | None = None
CLIENT_CONFIG: dict[str, str] = {}

pytestmark = [
    pytest.mark.kafka_tools,
    pytest.mark.skipif(
        shutil.which("java") is None,
        reason="Java (17+) is not installed: Kafka's CLI tools need a JVM (apt-get install openjdk-17-jre-headless)",
    ),
]


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def kafka_libs() -> Path:
    """Resolve the Kafka jars (cached after the first run; a no-op then)."""
    if shutil.which("mvn") is None and not os.environ.get("KAFKA_CACHE"):
        cache = Path.home() / ".cache/kbroker/kafka-4.3.1/.complete"
        if not cache.exists():
            pytest.fail("Maven (mvn) is needed once to fetch Apache Kafka's jars: apt-get install maven")
    res = subprocess.run([str(FETCH)], capture_output=True, text=True, timeout=900, check=False)
    assert res.returncode == 0, f"fetch.sh failed:\n{res.stderr}"
    libs = Path(res.stdout.strip().splitlines()[-1])
    assert any(libs.glob("kafka-tools-*.jar")), f"no kafka-tools jar in {libs}"
    return libs


@pytest.fixture
def bootstrap(request, kafka_libs) -> str:
    """KBROKER_TEST_BOOTSTRAP if set, else the project's ``broker`` fixture."""
    addr = os.environ.get("KBROKER_TEST_BOOTSTRAP")
    if addr:
        return addr
    return request.getfixturevalue("broker").bootstrap


@pytest.fixture
def topic() -> str:
    return f"kt-{uuid.uuid4().hex[:10]}"


# --------------------------------------------------------------------------- helpers
def kafka(tool: str, *args: str, input: str | None = None, timeout: float = TOOL_TIMEOUT,
          check: bool = True, command_config: Path | None = None) -> subprocess.CompletedProcess:
    """Run a Kafka tool via kafka-run.sh; stdout/stderr captured as text. ``command_config``
    (default: ``COMMAND_CONFIG``, none) is given as ``--command-config`` before the other
    arguments (kafka-transactions takes it only before its sub-command)."""
    config = command_config or COMMAND_CONFIG
    cmd = [str(KAFKA_RUN), tool, *(("--command-config", str(config)) if config else ()), *args]
    try:
        res = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout,
                             stdin=None if input is not None else subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{tool} timed out after {timeout}s: {' '.join(args)}\n"
                    f"stdout:\n{e.stdout}\nstderr:\n{e.stderr}")
    if check:
        assert res.returncode == 0, (
            f"{tool} {' '.join(args)} exited {res.returncode}\n"
            f"stdout:\n{res.stdout}\nstderr:\n{res.stderr}"
        )
    return res


def topics(bootstrap: str, *args: str, **kw) -> subprocess.CompletedProcess:
    return kafka("kafka-topics", "--bootstrap-server", bootstrap, *args, **kw)


def create_topic(bootstrap: str, name: str, partitions: int, *extra: str) -> None:
    res = topics(bootstrap, "--create", "--topic", name, "--partitions", str(partitions),
                 "--replication-factor", str(REPLICATION_FACTOR), *extra)
    assert res.stdout.strip() == f"Created topic {name}.", res.stdout + res.stderr


_PART_RE = re.compile(
    r"^\s*Topic:\s*(?P<topic>\S+)\s+Partition:\s*(?P<p>\d+)\s+Leader:\s*(?P<leader>\S+)"
    r"\s+Replicas:\s*(?P<replicas>\S+)\s+Isr:\s*(?P<isr>\S*)"
)
_HEAD_RE = re.compile(
    r"^Topic:\s*(?P<topic>\S+)\s+TopicId:\s*(?P<id>\S+)\s+PartitionCount:\s*(?P<count>\d+)"
    r"\s+ReplicationFactor:\s*(?P<rf>\d+)"
)


def describe(bootstrap: str, name: str) -> tuple[dict, list[dict]]:
    """Parse `kafka-topics --describe` into (header, [partition rows])."""
    out = topics(bootstrap, "--describe", "--topic", name).stdout
    header, parts = None, []
    for line in out.splitlines():
        if m := _HEAD_RE.match(line):
            header = m.groupdict()
        elif m := _PART_RE.match(line):
            parts.append(m.groupdict())
    assert header is not None, f"no 'Topic: ... PartitionCount:' header in:\n{out}"
    return header, parts


def describe_until(bootstrap: str, name: str, count: int, timeout: float = 15.0):
    """Metadata propagates asynchronously in Kafka; poll until PartitionCount == count."""
    deadline = time.monotonic() + timeout
    while True:
        header, parts = describe(bootstrap, name)
        if int(header["count"]) == count and len(parts) == count or time.monotonic() > deadline:
            return header, parts
        time.sleep(0.5)


def assert_partitions_led(header: dict, parts: list[dict], name: str, count: int) -> None:
    assert header["topic"] == name
    assert int(header["count"]) == count, header
    assert int(header["rf"]) == REPLICATION_FACTOR, header
    assert header["id"] not in ("", "AAAAAAAAAAAAAAAAAAAAAA"), f"null topic id: {header}"
    assert sorted(int(p["p"]) for p in parts) == list(range(count)), parts
    for p in parts:
        assert p["topic"] == name
        assert p["leader"].lstrip("-").isdigit() and int(p["leader"]) >= 0, f"no leader: {p}"
        assert p["leader"] in p["replicas"].split(","), p
        assert p["leader"] in p["isr"].split(","), p


# --------------------------------------------------------------------------- kafka-topics
def test_topics_create_and_describe(bootstrap, topic):
    create_topic(bootstrap, topic, 6)
    header, parts = describe_until(bootstrap, topic, 6)
    assert_partitions_led(header, parts, topic, 6)


def test_topics_alter_partitions(bootstrap, topic):
    create_topic(bootstrap, topic, 6)
    header, _ = describe_until(bootstrap, topic, 6)
    topic_id = header["id"]
    res = topics(bootstrap, "--alter", "--topic", topic, "--partitions", "8")
    assert "Error" not in res.stdout + res.stderr, res.stdout + res.stderr
    header, parts = describe_until(bootstrap, topic, 8)
    assert_partitions_led(header, parts, topic, 8)
    assert header["id"] == topic_id, "topic id changed by --alter"
    # Shrinking is refused by Kafka ("The topic ... currently has 8 partition(s); 4 would not be an increase").
    res = topics(bootstrap, "--alter", "--topic", topic, "--partitions", "4", check=False)
    assert res.returncode != 0
    assert "8 partition" in res.stdout + res.stderr, res.stdout + res.stderr


def test_topics_list(bootstrap):
    names = sorted(f"kt-list-{uuid.uuid4().hex[:8]}-{i}" for i in range(3))
    for n in names:
        create_topic(bootstrap, n, 1)
    deadline = time.monotonic() + 15
    while True:
        listed = topics(bootstrap, "--list").stdout.splitlines()
        if set(names) <= set(listed) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert set(names) <= set(listed), listed
    assert listed == sorted(listed), "kafka-topics --list prints names sorted"
    excl = topics(bootstrap, "--list", "--exclude-internal").stdout.splitlines()
    assert set(names) <= set(excl)
    assert not [n for n in excl if n.startswith("__")], excl


def test_topics_create_existing_fails(bootstrap, topic):
    create_topic(bootstrap, topic, 2)
    res = topics(bootstrap, "--create", "--topic", topic, "--partitions", "2",
                 "--replication-factor", str(REPLICATION_FACTOR), check=False)
    assert res.returncode != 0
    assert f"Topic '{topic}' already exists" in res.stdout + res.stderr, res.stdout + res.stderr
    # --if-not-exists turns that into a quiet success
    topics(bootstrap, "--create", "--if-not-exists", "--topic", topic, "--partitions", "2",
           "--replication-factor", str(REPLICATION_FACTOR))


def test_topics_describe_missing_topic_fails(bootstrap):
    name = f"kt-missing-{uuid.uuid4().hex[:8]}"
    res = topics(bootstrap, "--describe", "--topic", name, check=False)
    assert res.returncode != 0
    assert f"Topic '{name}' does not exist" in res.stdout + res.stderr, res.stdout + res.stderr


# --------------------------------------------------------------------------- console producer/consumer
N_RECORDS = 100


def _keyed_lines(n: int = N_RECORDS) -> list[str]:
    # 10 keys; value carries a global sequence number so per-key order can be checked
    return [f"key{i % 10}\tvalue-{i:03d}-{uuid.uuid4().hex[:6]}" for i in range(n)]


def _produce(bootstrap: str, topic: str, lines: list[str], *extra: str) -> None:
    res = kafka("kafka-console-producer", "--bootstrap-server", bootstrap, "--topic", topic,
                "--reader-property", "parse.key=true",
                "--reader-property", "key.separator=\t",
                *extra,
                input="".join(line + "\n" for line in lines))
    assert "ERROR" not in res.stderr, res.stderr


def _check_consumed(res: subprocess.CompletedProcess, sent: list[str]) -> None:
    out_lines = res.stdout.splitlines()
    assert len(out_lines) == len(sent), (
        f"got {len(out_lines)} records, want {len(sent)}; consumer stderr:\n{res.stderr}")
    assert sorted(out_lines) == sorted(sent)
    # per-key (hence per-partition) order is preserved
    by_key: dict[str, list[str]] = {}
    for line in out_lines:
        k, v = line.split("\t", 1)
        by_key.setdefault(k, []).append(v)
    for k, vs in by_key.items():
        assert vs == sorted(vs), f"key {k} out of order: {vs}"


def test_console_produce_consume_keyed(bootstrap, topic):
    create_topic(bootstrap, topic, 6)
    describe_until(bootstrap, topic, 6)
    sent = _keyed_lines()
    _produce(bootstrap, topic, sent)  # acks=all + enable.idempotence=true are the defaults
    res = kafka("kafka-console-consumer", "--bootstrap-server", bootstrap, "--topic", topic,
                "--from-beginning", "--max-messages", str(N_RECORDS), "--timeout-ms", "30000",
                "--formatter-property", "print.key=true",
                "--formatter-property", "key.separator=\t",
                timeout=120)
    _check_consumed(res, sent)
    assert f"Processed a total of {N_RECORDS} messages" in res.stderr, res.stderr
    # keys were spread over several of the 6 partitions by the default partitioner
    _check_leaders_hold_data(bootstrap, topic, N_RECORDS)


def _check_leaders_hold_data(bootstrap: str, topic: str, total: int) -> None:
    res = kafka("kafka-get-offsets", "--bootstrap-server", bootstrap, "--topic", topic,
                "--time", "-1")
    ends = {}
    for line in res.stdout.split():
        t, p, off = line.rsplit(":", 2)
        assert t == topic
        ends[int(p)] = int(off)
    assert sorted(ends) == list(range(6)), res.stdout
    assert sum(ends.values()) == total, ends
    assert sum(1 for v in ends.values() if v) >= 2, f"all keys in one partition? {ends}"


def test_console_consumer_single_partition_no_group(bootstrap, topic):
    """--partition/--offset: plain Fetch + ListOffsets, no consumer group involved."""
    create_topic(bootstrap, topic, 1)
    describe_until(bootstrap, topic, 1)
    sent = _keyed_lines(20)
    _produce(bootstrap, topic, sent, "--command-property", "acks=1")
    res = kafka("kafka-console-consumer", "--bootstrap-server", bootstrap, "--topic", topic,
                "--partition", "0", "--offset", "earliest",
                "--max-messages", "20", "--timeout-ms", "30000",
                "--formatter-property", "print.key=true",
                "--formatter-property", "key.separator=\t",
                timeout=120)
    assert res.stdout.splitlines() == sent, res.stderr  # one partition: total order
    # and from an offset in the middle
    res = kafka("kafka-console-consumer", "--bootstrap-server", bootstrap, "--topic", topic,
                "--partition", "0", "--offset", "15",
                "--max-messages", "5", "--timeout-ms", "30000",
                "--formatter-property", "print.key=true",
                "--formatter-property", "key.separator=\t",
                timeout=120)
    assert res.stdout.splitlines() == sent[15:], res.stderr


def test_console_producer_is_idempotent_by_default(bootstrap, topic):
    """The console producer registers a producer id (InitProducerId) and the partition
    keeps its state: visible through DescribeProducers (kafka-transactions)."""
    create_topic(bootstrap, topic, 1)
    describe_until(bootstrap, topic, 1)
    _produce(bootstrap, topic, _keyed_lines(10))
    res = kafka("kafka-transactions", "--bootstrap-server", bootstrap, "describe-producers",
                "--topic", topic, "--partition", "0")
    lines = [line.split() for line in res.stdout.splitlines() if line.strip()]
    assert lines[0][:4] == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence"], res.stdout
    rows = lines[1:]
    assert len(rows) == 1, res.stdout
    pid, epoch, _coord_epoch, last_seq = rows[0][:4]
    assert int(pid) >= 0 and int(epoch) >= 0
    assert int(last_seq) == 9, f"10 records from one idempotent producer -> last sequence 9: {res.stdout}"


# --------------------------------------------------------------------------- kafka-configs
def test_configs_describe_topic(bootstrap, topic):
    create_topic(bootstrap, topic, 1, "--config", "retention.ms=123456",
                 "--config", "cleanup.policy=compact")
    describe_until(bootstrap, topic, 1)
    res = kafka("kafka-configs", "--bootstrap-server", bootstrap, "--describe",
                "--entity-type", "topics", "--entity-name", topic)
    out = res.stdout
    assert f"Dynamic configs for topic {topic} are:" in out, out
    assert re.search(r"^\s+retention\.ms=123456 sensitive=false", out, re.MULTILINE), out
    assert re.search(r"^\s+cleanup\.policy=compact sensitive=false", out, re.MULTILINE), out
    # the short form (--topic) gives the same answer
    res2 = kafka("kafka-configs", "--bootstrap-server", bootstrap, "--describe", "--topic", topic)
    assert "retention.ms=123456" in res2.stdout, res2.stdout


def test_topics_create_with_every_kind_of_topic_config(bootstrap, topic):
    """kafka-topics --create --config with configs Kafka 4.x knows (max.compaction.lag.ms was
    once refused here); a bad value is refused with Kafka's message on the command line."""
    res = kafka("kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic,
                "--partitions", "1", "--config", "cleanup.policy=compact",
                "--config", "max.compaction.lag.ms=600000", "--config", "segment.jitter.ms=100",
                "--config", "message.timestamp.after.max.ms=60000")
    assert f"Created topic {topic}." in res.stdout, res.stdout
    out = kafka("kafka-configs", "--bootstrap-server", bootstrap, "--describe",
                "--entity-type", "topics", "--entity-name", topic).stdout
    assert re.search(r"^\s+max\.compaction\.lag\.ms=600000 ", out, re.MULTILINE), out
    bad = kafka("kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic + "-bad",
                "--partitions", "1", "--config", "max.compaction.lag.ms=0", check=False)
    assert bad.returncode != 0
    assert "Invalid value 0 for configuration max.compaction.lag.ms: Value must be at least 1" in bad.stdout + bad.stderr


def test_configs_describe_all_has_defaults(bootstrap, topic):
    create_topic(bootstrap, topic, 1)
    describe_until(bootstrap, topic, 1)
    res = kafka("kafka-configs", "--bootstrap-server", bootstrap, "--describe", "--all",
                "--entity-type", "topics", "--entity-name", topic)
    out = res.stdout
    assert f"All configs for topic {topic} are:" in out, out
    found = dict(re.findall(r"^\s+([a-z0-9.]+)=(\S*) sensitive=", out, re.MULTILINE))
    for key in ("cleanup.policy", "retention.ms", "segment.bytes", "max.message.bytes",
                "min.insync.replicas"):
        assert key in found, f"{key} missing from --all:\n{out}"
    assert found["cleanup.policy"] == "delete"


def test_configs_alter_then_describe(bootstrap, topic):
    create_topic(bootstrap, topic, 1)
    describe_until(bootstrap, topic, 1)
    res = kafka("kafka-configs", "--bootstrap-server", bootstrap, "--alter",
                "--entity-type", "topics", "--entity-name", topic,
                "--add-config", "retention.ms=3600000,max.message.bytes=200000")
    assert f"Completed updating config for topic {topic}." in res.stdout, res.stdout
    out = kafka("kafka-configs", "--bootstrap-server", bootstrap, "--describe",
                "--entity-type", "topics", "--entity-name", topic).stdout
    assert re.search(r"^\s+retention\.ms=3600000 ", out, re.MULTILINE), out
    assert re.search(r"^\s+max\.message\.bytes=200000 ", out, re.MULTILINE), out
    kafka("kafka-configs", "--bootstrap-server", bootstrap, "--alter",
          "--entity-type", "topics", "--entity-name", topic, "--delete-config", "retention.ms")
    out = kafka("kafka-configs", "--bootstrap-server", bootstrap, "--describe",
                "--entity-type", "topics", "--entity-name", topic).stdout
    assert "retention.ms=" not in out, out
    assert "max.message.bytes=200000" in out, out


# --------------------------------------------------------------------------- kafka-transactions
def test_transactions_list_and_describe(bootstrap, topic):
    ck = pytest.importorskip("confluent_kafka")
    create_topic(bootstrap, topic, 1)
    describe_until(bootstrap, topic, 1)
    txn_id = f"kt-txn-{uuid.uuid4().hex[:8]}"
    p = ck.Producer({"bootstrap.servers": bootstrap, **CLIENT_CONFIG, "transactional.id": txn_id})
    p.init_transactions(10)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, key=b"k", value=f"v{i}".encode())
    p.commit_transaction(30)

    res = kafka("kafka-transactions", "--bootstrap-server", bootstrap, "list")
    lines = [line.split() for line in res.stdout.splitlines() if line.strip()]
    assert lines[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], res.stdout
    mine = [row for row in lines[1:] if row[0] == txn_id]
    assert len(mine) == 1, res.stdout
    assert mine[0][3] in ("CompleteCommit", "Empty"), mine

    res = kafka("kafka-transactions", "--bootstrap-server", bootstrap, "describe",
                "--transactional-id", txn_id)
    hdr, *rows = [line.split("\t") for line in res.stdout.splitlines() if line.strip()]
    hdr = [h.strip() for h in hdr]
    row = dict(zip(hdr, (c.strip() for c in rows[0])))
    assert row["TransactionalId"] == txn_id, res.stdout
    assert row["ProducerId"] == mine[0][2]
    assert row["TransactionState"] in ("CompleteCommit", "Empty"), row
    del p


def _status_rows(stdout: str) -> list[list[str]]:
    """The TOPIC / PARTITION / STATUS table of ``kafka-consumer-groups --delete-offsets``."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:3] == ["TOPIC", "PARTITION", "STATUS"])
    return [[cell.strip() for cell in line.split(None, 2)] for line in lines[start + 1:] if line.strip()]


def test_consumer_groups_delete_offsets(bootstrap, topic):
    ck = pytest.importorskip("confluent_kafka")
    create_topic(bootstrap, topic, 2)
    describe_until(bootstrap, topic, 2)
    group = f"kt-group-{uuid.uuid4().hex[:8]}"
    c = ck.Consumer({"bootstrap.servers": bootstrap, **CLIENT_CONFIG, "group.id": group,
                     "enable.auto.commit": False})
    c.commit(offsets=[ck.TopicPartition(topic, 0, 5), ck.TopicPartition(topic, 1, 6)], asynchronous=False)

    def groups(*args: str) -> subprocess.CompletedProcess:
        return kafka("kafka-consumer-groups", "--bootstrap-server", bootstrap, "--group", *args)

    res = groups(group, "--topic", f"{topic}:1", "--topic", f"{topic}-missing", "--delete-offsets")
    assert f"Request succeeded for deleting offsets from group {group}." in res.stdout, res.stdout
    assert _status_rows(res.stdout) == [
        [f"{topic}-missing", "-", "Error: org.apache.kafka.common.errors.UnknownTopicOrPartitionException: "
                                  "This server does not host this topic-partition."],
        [topic, "1", "Successful"]]
    committed = c.committed([ck.TopicPartition(topic, 0), ck.TopicPartition(topic, 1)], timeout=20)
    assert [tp.offset for tp in committed] == [5, ck.OFFSET_INVALID]
    c.close()

    res = groups(f"{group}-unknown", "--topic", topic, "--delete-offsets")
    assert "Error: The group id does not exist." in res.stdout, res.stdout
    assert [row[:2] for row in _status_rows(res.stdout)] == [[topic, "0"], [topic, "1"]]


def test_configs_describe_client_metrics_lists_none(bootstrap):
    """kafka-configs lists client-metrics resources through ListConfigResources v1."""
    res = kafka("kafka-configs", "--bootstrap-server", bootstrap, "--describe", "--entity-type", "client-metrics")
    assert res.stdout.strip() == "", res.stdout


def test_reassign_partitions_with_log_dirs(bootstrap, topic, tmp_path):
    """A reassignment JSON with ``log_dirs`` sends AlterReplicaLogDirs: the broker's own log
    directory (as DescribeLogDirs names it) is accepted, any other is LOG_DIR_NOT_FOUND."""
    from tests.support.raw import RawClient

    create_topic(bootstrap, topic, 1)
    describe_until(bootstrap, topic, 1)
    with RawClient(bootstrap) as raw:
        [log_dir] = [d.log_dir for d in raw.call(35, 4, {"topics": None}).results]
    _, [part] = describe(bootstrap, topic)
    leader = int(part["leader"])

    def reassign(directory: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        plan = tmp_path / "plan.json"
        plan.write_text(f'{{"version":1,"partitions":[{{"topic":"{topic}","partition":0,'
                        f'"replicas":[{leader}],"log_dirs":["{directory}"]}}]}}')
        return kafka("kafka-reassign-partitions", "--bootstrap-server", bootstrap,
                     "--reassignment-json-file", str(plan), *args, check=check)

    res = reassign(log_dir, "--execute")
    assert f"Successfully started moving log directory to {log_dir} for replica {topic}-0 with broker {leader}" \
        in res.stdout, res.stdout
    res = reassign(log_dir, "--verify")
    assert f"Reassignment of replica {topic}-0-{leader} completed successfully." in res.stdout, res.stdout
    res = reassign(log_dir + "-elsewhere", "--execute", check=False)
    assert res.returncode == 1 and "LogDirNotFoundException" in res.stdout, res.stdout + res.stderr


def test_metadata_quorum_describes_the_controller(bootstrap):
    """kafka-metadata-quorum reads DescribeQuorum: the controller leads, every broker votes."""
    status = kafka("kafka-metadata-quorum", "--bootstrap-server", bootstrap, "describe", "--status").stdout
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    leader = int(fields["LeaderId"])
    assert leader >= 0 and int(fields["LeaderEpoch"]) >= 1 and int(fields["HighWatermark"]) >= 1
    assert f'"id": {leader}' in fields["CurrentVoters"] and fields["CurrentObservers"] == "[]"
    replication = kafka("kafka-metadata-quorum", "--bootstrap-server", bootstrap, "describe",
                        "--replication").stdout
    rows = [line.split() for line in replication.splitlines()[1:] if line.strip()]
    assert [row[-1] for row in rows if int(row[0]) == leader] == ["Leader"]


def test_configs_for_a_group(bootstrap):
    """kafka-configs --entity-type groups (4.x) sets, describes and deletes a group config."""
    group = f"kt-group-{uuid.uuid4().hex[:8]}"
    base = ("--bootstrap-server", bootstrap, "--entity-type", "groups", "--entity-name", group)
    kafka("kafka-configs", *base, "--alter", "--add-config", "share.auto.offset.reset=earliest")
    assert "share.auto.offset.reset=earliest" in kafka("kafka-configs", *base, "--describe").stdout
    bad = kafka("kafka-configs", *base, "--alter", "--add-config", "share.record.lock.duration.ms=10", check=False)
    assert bad.returncode != 0 and "Value must be at least 1000" in bad.stdout + bad.stderr
    kafka("kafka-configs", *base, "--alter", "--delete-config", "share.auto.offset.reset")
    assert "share.auto.offset.reset" not in kafka("kafka-configs", *base, "--describe").stdout


def _features(bootstrap: str) -> dict[str, dict[str, str]]:
    out = kafka("kafka-features", "--bootstrap-server", bootstrap, "describe").stdout
    rows = {}
    for line in out.splitlines():
        fields = dict(re.findall(r"(\w+): (\S+)", line))
        if "Feature" in fields:
            rows[fields["Feature"]] = fields
    return rows


def test_features_describe_upgrade_and_downgrade(bootstrap):
    """kafka-features: transaction.version is described with its supported range and finalized
    level; an upgrade past the supported maximum is refused with Kafka's reason, a downgrade
    and the upgrade back change the level every describe then shows."""
    tv = _features(bootstrap)["transaction.version"]
    top, level = int(tv["SupportedMaxVersion"]), int(tv["FinalizedVersionLevel"])
    assert (int(tv["SupportedMinVersion"]), top, level) == (0, 2, 2)  # a new cluster is on TV2
    refused = kafka("kafka-features", "--bootstrap-server", bootstrap, "upgrade", "--feature",
                    f"transaction.version={top + 1}", check=False)
    assert refused.returncode != 0 and f"only supports versions 0-{top}" in refused.stdout + refused.stderr
    try:
        res = kafka("kafka-features", "--bootstrap-server", bootstrap, "downgrade", "--feature",
                    f"transaction.version={level - 1}")
        assert f"transaction.version was downgraded to {level - 1}." in res.stdout
        assert int(_features(bootstrap)["transaction.version"]["FinalizedVersionLevel"]) == level - 1
    finally:
        res = kafka("kafka-features", "--bootstrap-server", bootstrap, "upgrade", "--feature",
                    f"transaction.version={level}")
    assert f"transaction.version was upgraded to {level}." in res.stdout
    assert int(_features(bootstrap)["transaction.version"]["FinalizedVersionLevel"]) == level
