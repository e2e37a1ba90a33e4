"""An exactly-once check for stream-processing applications, under repeated kill -9.

The application under test (Quix Streams, faust-streaming, ...) reads JSON records
``{"key": k, "seq": i}`` keyed by ``k`` from an input topic, keeps a per-key count in its own
state store (backed by a changelog topic) and writes ``{"seq": i, "count": n}`` under the same key
to an output topic, with the framework's exactly-once mode. The harness:

1. creates both topics and produces ``keys x per_key`` input records (``seq`` 0.. per key, one key
   always on one partition, so its order is the partition's);
2. starts the application and kills it with SIGKILL ``kills`` times, each incarnation at a
   random moment after the group's committed offsets first moved under it (so in the middle of
   its transactions, not while it waits to join), then lets the last incarnation run until the
   committed offsets reach the end of the input;
3. waits until no transaction is open on the output (the last stable offset reaches the high
   watermark: a killed incarnation's transaction stays open until the coordinator aborts it
   at its timeout, when the framework gives each process a new transactional.id), then reads
   the output with read_committed and checks its history, per key in offset order: every
   input ``seq`` exactly once and in order, and ``count`` running 1, 2, 3, ... without a gap or a
   repeat (a count restored from a stale state or a changelog that lost a write shows as one).

What the application must do is given by ``app_command`` (the argv of one incarnation, which
reads ``COMPAT_BOOTSTRAP``, ``COMPAT_INPUT``, ``COMPAT_OUTPUT``, ``COMPAT_GROUP`` and
``COMPAT_STATE_DIR`` from its environment).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import time
import uuid
import venv
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import structlog

log = structlog.get_logger("compat.stream_eos")


# The broker settings and matrix features of every stream-processor row.
BROKER_CONFIG: dict[str, str] = {
    "auto.create.topics.enable": "false",  # the frameworks create their changelog topics themselves
    "group.initial.rebalance.delay.ms": "0",
    "transaction.state.log.num.partitions": "5",
    "offsets.topic.num.partitions": "5",
}
FEATURES = {feature: [r"."] for feature in
            ("bootstrap", "produce", "consume", "groups", "transactions", "read_committed")}


def own_venv(cache: Path, requirement: str, extra: tuple[str, ...] = ()) -> Path:
    """The python of a virtual environment of the framework's own (made once under ``cache``):
    the frameworks pin clients the project's venv must not be downgraded to. ``extra``: more
    requirements (a test suite's), installed once as a set."""
    python = cache / "venv" / "bin" / "python"
    if not python.exists():
        venv.create(cache / "venv", with_pip=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", requirement], check=True)
    if extra:
        stamp = cache / "venv" / f".extra-{hashlib.sha256(' '.join(extra).encode()).hexdigest()[:12]}"
        if not stamp.exists():
            subprocess.run([str(python), "-m", "pip", "install", "-q", requirement, *extra], check=True)
            stamp.touch()
    return python


@dataclass
class Scenario:
    keys: int = 40
    per_key: int = 150
    partitions: int = 4
    replication_factor: int = 1
    kills: int = 4
    # An incarnation is killed this long after its first commit, so in the middle of its work.
    kill_after_s: tuple[float, float] = (0.3, 2.5)
    progress_timeout_s: float = 120.0
    finish_timeout_s: float = 240.0
    stable_timeout_s: float = 180.0  # the application's transaction timeout and then some
    seed: int = field(default_factory=lambda: random.randrange(1 << 30))


@dataclass
class Verdict:
    inputs: int
    outputs: int
    missing: list[str]
    duplicated: list[str]
    out_of_order: list[str]
    bad_counts: list[str]
    kills: int
    seconds: float

    @property
    def lossless(self) -> bool:
        """Every input in the output at least once (duplicates aside)."""
        return not self.missing

    @property
    def exact(self) -> bool:
        return not (self.missing or self.duplicated or self.out_of_order or self.bad_counts) \
            and self.outputs == self.inputs

    def summary(self) -> dict:
        return {"exact": self.exact, "inputs": self.inputs, "outputs": self.outputs, "kills": self.kills,
                "seconds": round(self.seconds, 1), "missing": self.missing[:20],
                "duplicated": self.duplicated[:20], "out_of_order": self.out_of_order[:20],
                "bad_counts": self.bad_counts[:20]}


def _client_config(bootstrap: str, security: dict[str, str] | None) -> dict[str, str]:
    return {"bootstrap.servers": bootstrap, **(security or {})}


def _create_topics(conf: dict, names: list[str], partitions: int, rf: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(conf)
    futures = admin.create_topics([NewTopic(n, partitions, rf) for n in names], operation_timeout=30)
    for future in futures.values():
        future.result(60)


def _produce_input(conf: dict, topic: str, scenario: Scenario) -> int:
    from confluent_kafka import Producer

    producer = Producer({**conf, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    for seq in range(scenario.per_key):
        for k in range(scenario.keys):
            key = f"key-{k:03d}"
            producer.produce(topic, key=key, value=json.dumps({"key": key, "seq": seq}))
        producer.poll(0)
    assert producer.flush(120) == 0, "the input could not be produced"
    return scenario.keys * scenario.per_key


def _input_end(conf: dict, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**conf, "group.id": f"probe-{uuid.uuid4().hex[:6]}"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in range(partitions)}
    finally:
        consumer.close()


def _committed(conf: dict, group: str, topic: str, partitions: int, timeout_s: float = 60.0) -> dict[int, int]:
    """The group's committed offsets (-1001: none), retried while the coordinator moves or loads."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    # read_uncommitted: an OffsetFetch that does not require stable offsets, so that a killed
    # incarnation's pending transactional offsets do not hold the answer until they resolve.
    consumer = Consumer({**conf, "group.id": group, "enable.auto.commit": False,
                         "isolation.level": "read_uncommitted"})
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=15)
                return {tp.partition: tp.offset for tp in tps}
            except KafkaException:  # NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, a timeout
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()


def _wait_stable(conf: dict, topic: str, partitions: int, timeout_s: float) -> None:
    """Until the last stable offset of every partition is its high watermark."""
    from confluent_kafka import Consumer, TopicPartition

    committed = Consumer({**conf, "group.id": f"lso-{uuid.uuid4().hex[:6]}", "isolation.level": "read_committed"})
    uncommitted = Consumer({**conf, "group.id": f"hw-{uuid.uuid4().hex[:6]}", "isolation.level": "read_uncommitted"})
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            lso = [committed.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1]
                   for p in range(partitions)]
            hw = [uncommitted.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1]
                  for p in range(partitions)]
            if lso == hw:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"transactions still open on {topic} after {timeout_s} s: LSO {lso}, HW {hw}")
            time.sleep(1.0)
    finally:
        committed.close()
        uncommitted.close()


def _read_output(conf: dict, topic: str, partitions: int) -> list[tuple[str, dict]]:
    """Every committed output record, per partition in offset order."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**conf, "group.id": f"check-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[int, list[tuple[int, str, dict]]] = defaultdict(list)
    done: set[int] = {p for p, end in ends.items() if end == 0}
    deadline = time.monotonic() + 120
    try:
        while len(done) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                # read_committed stops at the last stable offset: past it are only markers
                for p in range(partitions):
                    position = consumer.position([TopicPartition(topic, p)])[0].offset
                    if position >= ends[p]:
                        done.add(p)
                continue
            if msg.error():
                continue
            out[msg.partition()].append((msg.offset(), msg.key().decode(), json.loads(msg.value())))
            if msg.offset() + 1 >= ends[msg.partition()]:
                done.add(msg.partition())
    finally:
        consumer.close()
    return [(key, value) for p in sorted(out) for _, key, value in sorted(out[p], key=lambda r: r[0])]


def verify(records: list[tuple[str, dict]], scenario: Scenario, kills: int, seconds: float) -> Verdict:
    by_key: dict[str, list[dict]] = defaultdict(list)
    for key, value in records:
        by_key[key].append(value)
    missing, duplicated, out_of_order, bad_counts = [], [], [], []
    for k in range(scenario.keys):
        key = f"key-{k:03d}"
        seqs = [v.get("seq") for v in by_key.get(key, [])]
        counts = [v.get("count") for v in by_key.get(key, [])]
        seen = set(seqs)
        missing += [f"{key}#{s}" for s in range(scenario.per_key) if s not in seen]
        duplicated += sorted({f"{key}#{s}" for s in seqs if seqs.count(s) > 1})
        if seqs != sorted(seqs):
            out_of_order.append(key)
        if counts != list(range(1, len(counts) + 1)):
            bad_counts.append(f"{key}: {counts[:12]}{'...' if len(counts) > 12 else ''}")
    return Verdict(scenario.keys * scenario.per_key, len(records), missing, duplicated, out_of_order,
                   bad_counts, kills, seconds)


def _start(app_command: list[str], env: dict[str, str], logfile: Path, incarnation: int) -> subprocess.Popen:
    with open(logfile, "a") as out:
        out.write(f"\n==== incarnation {incarnation} {time.strftime('%H:%M:%S')} ====\n")
        out.flush()
        return subprocess.Popen(app_command, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: only what it started
    proc.wait(30)


def _app_failed(proc: subprocess.Popen, logfile: Path) -> RuntimeError:
    tail = "\n".join(logfile.read_text(errors="replace").splitlines()[-25:])
    return RuntimeError(f"the application exited with {proc.returncode}; {logfile} ends:\n{tail}")


def _wait_progress(proc: subprocess.Popen, conf: dict, group: str, topic: str, scenario: Scenario,
                   before: dict[int, int], logfile: Path) -> None:
    deadline = time.monotonic() + scenario.progress_timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise _app_failed(proc, logfile)
        if _committed(conf, group, topic, scenario.partitions) != before:
            return
        time.sleep(0.3)
    raise TimeoutError(f"the application committed nothing within {scenario.progress_timeout_s} s; see {logfile}")


def run(app_command: list[str], app_env: dict[str, str], bootstrap: str, workdir: Path,
        scenario: Scenario, security: dict[str, str] | None = None) -> Verdict:
    rng = random.Random(scenario.seed)
    conf = _client_config(bootstrap, security)
    run_id = uuid.uuid4().hex[:8]
    topics = {"COMPAT_INPUT": f"eos-in-{run_id}", "COMPAT_OUTPUT": f"eos-out-{run_id}"}
    group = f"eos-app-{run_id}"
    _create_topics(conf, list(topics.values()), scenario.partitions, scenario.replication_factor)
    inputs = _produce_input(conf, topics["COMPAT_INPUT"], scenario)
    ends = _input_end(conf, topics["COMPAT_INPUT"], scenario.partitions)
    env = {**os.environ, **app_env, **topics, "COMPAT_BOOTSTRAP": bootstrap, "COMPAT_GROUP": group,
           "COMPAT_STATE_DIR": str(workdir / "state")}
    logfile = workdir / "app.log"
    log.info("stream_eos_start", inputs=inputs, kills=scenario.kills, seed=scenario.seed, log=str(logfile))
    started = time.monotonic()
    kills = 0
    committed = _committed(conf, group, topics["COMPAT_INPUT"], scenario.partitions)
    for incarnation in range(scenario.kills):
        if committed == ends:
            break  # nothing left to interrupt
        proc = _start(app_command, env, logfile, incarnation)
        try:
            _wait_progress(proc, conf, group, topics["COMPAT_INPUT"], scenario, committed, logfile)
            time.sleep(rng.uniform(*scenario.kill_after_s))
        finally:
            _kill(proc)
        kills += 1
        committed = _committed(conf, group, topics["COMPAT_INPUT"], scenario.partitions)
        log.info("stream_eos_killed", incarnation=incarnation, committed=committed)
    proc = _start(app_command, env, logfile, scenario.kills)
    try:
        deadline = time.monotonic() + scenario.finish_timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise _app_failed(proc, logfile)
            if _committed(conf, group, topics["COMPAT_INPUT"], scenario.partitions) == ends:
                break
            time.sleep(1.0)
        else:
            raise TimeoutError(f"the group did not commit the whole input within {scenario.finish_timeout_s} s")
    finally:
        _kill(proc)
    _wait_stable(conf, topics["COMPAT_OUTPUT"], scenario.partitions, scenario.stable_timeout_s)
    seconds = time.monotonic() - started
    verdict = verify(_read_output(conf, topics["COMPAT_OUTPUT"], scenario.partitions), scenario, kills, seconds)
    (workdir / "verdict.json").write_text(json.dumps(verdict.summary(), indent=2))
    log.info("stream_eos_done", **verdict.summary())
    return verdict
