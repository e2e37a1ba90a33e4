"""kbroker installed as other projects install it: the wheel, its ``testing`` extra and fixtures.

A fresh virtual environment outside the repository gets the wheel built from this checkout;
a small user project with its own ``tools`` and ``storage`` packages (names kbroker's broker
uses too) runs its tests on the pytest fixtures: produce and consume, a consumer group, a
transactional consume-transform-produce, a three-broker failover, and every example of
``docs/testing.md`` as written there. Checked: the user's packages stay theirs, the tests
pass, a failing test's report carries the broker's log, the installed commands work from that
project, and no broker or etcd process outlives the test session.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tools.devcluster import etcd_binary

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = re.compile(r"```python\n# (test_\w+\.py)\n(.*?)```", re.S)
DOC_CLIENTS = ["aiokafka", "kafka-python", "pytest-asyncio"]  # what the examples use besides the extra

USER_TESTS = '''
import os
import uuid

import tools
import storage
from confluent_kafka import Consumer, Producer, TopicPartition

PIDS = os.environ["PID_FILE"]


def record_pids(*pids):
    with open(PIDS, "a") as f:
        f.write("".join(f"{pid}\\n" for pid in pids))


def test_our_packages_stay_ours():
    assert tools.OWNER == "user" and storage.OWNER == "user"


def test_produce_and_consume(kafka_broker, kafka_topic):
    record_pids(kafka_broker.pid)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    for i in range(10):
        producer.produce(kafka_topic, key=str(i), value=f"v{i}")
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap_servers, "group.id": "g-" + kafka_topic,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([kafka_topic])
    seen = []
    for _ in range(200):
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            seen.append(msg.value().decode())
            consumer.commit(msg, asynchronous=False)
        if len(seen) == 10:
            break
    committed = consumer.committed([TopicPartition(kafka_topic, 0)], timeout=10)
    consumer.close()
    assert seen == [f"v{i}" for i in range(10)]
    assert committed[0].offset == 10


def test_transaction_copies_exactly_once(kafka_broker, kafka_topic_factory):
    source, sink = kafka_topic_factory(partitions=2), kafka_topic_factory(partitions=2)
    bootstrap = kafka_broker.bootstrap_servers
    seed = Producer({"bootstrap.servers": bootstrap})
    for i in range(20):
        seed.produce(source, value=str(i), partition=i % 2)
    assert seed.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "copier-" + source,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.subscribe([source])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "copier-" + source})
    producer.init_transactions(30)
    producer.begin_transaction()
    copied = 0
    for _ in range(300):
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            producer.produce(sink, value=str(int(msg.value()) * 10), partition=msg.partition())
            copied += 1
        if copied == 20:
            break
    producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                         consumer.consumer_group_metadata(), 30)
    producer.commit_transaction(30)
    consumer.close()
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader-" + sink,
                       "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    reader.subscribe([sink])
    out = []
    for _ in range(300):
        msg = reader.poll(0.2)
        if msg is not None and msg.error() is None:
            out.append(int(msg.value()))
        if len(out) == 20:
            break
    reader.close()
    assert sorted(out) == [i * 10 for i in range(20)]


def test_failover_keeps_acknowledged_records(kafka_cluster):
    record_pids(*kafka_cluster.etcd_pids.values(), *(kafka_cluster.pid(i) for i in kafka_cluster.node_ids))
    topic = kafka_cluster.create_topic(partitions=1, config={"min.insync.replicas": "2"})
    producer = Producer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "acks": "all",
                         "enable.idempotence": True})
    producer.produce(topic, value=b"before")
    assert producer.flush(30) == 0
    kafka_cluster.kill(1)
    producer.produce(topic, value=b"after")
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values = []
    for _ in range(300):
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            values.append(msg.value())
        if len(values) == 2:
            break
    consumer.close()
    kafka_cluster.start_broker(1)
    assert values == [b"before", b"after"]
'''


FAILING_TEST = '''
def test_fails_with_the_broker_log_in_its_report(kafka_broker, kafka_topic):
    assert kafka_topic == "something else"
'''


def _run(cmd: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert done.returncode == 0, f"{cmd} exited with {done.returncode}:\n{done.stdout[-6000:]}\n{done.stderr[-6000:]}"
    return done.stdout


def _user_project(root: Path) -> Path:
    project = root / "user-project"
    for package in ("tools", "storage"):
        (project / package).mkdir(parents=True)
        (project / package / "__init__.py").write_text('OWNER = "user"\n')
    (project / "tests").mkdir()
    (project / "tests" / "test_app.py").write_text(USER_TESTS)
    examples = EXAMPLE.findall((REPO / "docs" / "testing.md").read_text())
    assert len(examples) >= 5, "docs/testing.md lost its examples"
    for filename, code in examples:
        (project / "tests" / filename).write_text(code)
    (project / "failing").mkdir()
    (project / "failing" / "test_fails.py").write_text(FAILING_TEST)
    (project / "pyproject.toml").write_text(textwrap.dedent("""
        [tool.pytest.ini_options]
        pythonpath = ["."]
        kbroker_cluster_config = ["broker.session.timeout.ms=3000"]
    """))
    return project


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by a dead parent) does not count
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return True


def _processes_in(directory: Path) -> list[int]:
    """Processes whose working directory is ``directory`` (every broker runs from kbroker's app root)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if Path(os.readlink(proc / "cwd")) == directory and _alive(int(proc.name)):
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


@pytest.mark.skipif(etcd_binary() is None, reason="etcd is not installed (make tools installs it)")
def test_wheel_with_testing_extra_serves_a_user_project(tmp_path):
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(REPO)], tmp_path, 600)
    wheel = next(dist.glob("kbroker-*.whl"))
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, 120)
    python = str(venv / "bin" / "python")
    _run([python, "-m", "pip", "install", "-q", f"{wheel}[testing]", *DOC_CLIENTS], tmp_path, 900)

    installed = Path(_run([python, "-c", "import kbroker, sys; print(kbroker.__file__)"], tmp_path, 60).strip())
    assert installed.is_relative_to(venv)
    for name in ("tools", "storage", "broker", "protocol"):  # nothing generic at the top level
        probe = f"import importlib.util as u; print(u.find_spec({name!r}) is None)"
        assert _run([python, "-c", probe], tmp_path, 60).strip() == "True", name

    project = _user_project(tmp_path)
    help_text = _run([str(venv / "bin" / "kbroker"), "--help"], project, 60)
    assert "Kafka-compatible broker" in help_text
    pid_file = tmp_path / "pids"
    env = {**os.environ, "PID_FILE": str(pid_file)}
    env.pop("PYTHONPATH", None)
    out = _run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], project, 900, env)
    tests = len(re.findall(r"^def test_", USER_TESTS, re.M)) + len(EXAMPLE.findall((REPO / "docs" / "testing.md").read_text()))
    assert f"{tests} passed" in out, out

    failed = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "failing"], cwd=project,
                            capture_output=True, text=True, timeout=300, env=env)
    assert failed.returncode == 1, failed.stdout[-4000:]
    assert "kbroker log during the test" in failed.stdout and "topic_created" in failed.stdout, failed.stdout[-4000:]

    pids = [int(line) for line in pid_file.read_text().split()]
    assert len(pids) == 7  # the single broker, and the cluster's three etcd members and three brokers
    assert [pid for pid in pids if _alive(pid)] == []
    app = venv.glob("lib/python*/site-packages/kbroker/_app")
    assert _processes_in(next(app)) == []  # brokers restarted by the tests (new pids) are gone too


OWNER = '''
import sys
from kbroker.cluster import EmbeddedCluster

cluster = EmbeddedCluster(nodes=1).start()
print(*cluster.etcd_pids.values(), cluster.pid(1), flush=True)
sys.stdin.read()  # until killed
'''


@pytest.mark.skipif(etcd_binary() is None, reason="etcd is not installed (make tools installs it)")
def test_a_cluster_whose_owner_is_killed_outright_leaves_no_process_behind(tmp_path):
    """The ``kafka_cluster`` fixture's EmbeddedCluster: etcd and its brokers get a parent-death
    signal, so a test run killed -9 (a CI timeout) leaves neither behind, as a single broker's."""
    owner = subprocess.Popen([sys.executable, "-c", OWNER], cwd=tmp_path, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        pids = [int(p) for p in owner.stdout.readline().split()]
        assert len(pids) == 2 and all(_alive(p) for p in pids), pids
    finally:
        owner.kill()
        owner.wait(10)
    from tests.support.cluster import wait_for

    wait_for(lambda: not any(_alive(p) for p in pids), 30, "etcd and the broker to die with their owner")
