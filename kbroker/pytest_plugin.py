"""pytest fixtures for tests against a real kbroker (installed with ``pip install kbroker[testing]``).

- ``kafka_broker`` (session): one :class:`~kbroker.EmbeddedBroker`; ``kafka_broker.bootstrap_servers``.
  Its settings come from the ``kafka_broker_config`` fixture (override it in a conftest.py) and the
  ``kbroker_config`` ini option (``key=value`` lines).
- ``kafka_topic`` (function): a fresh one-partition topic on ``kafka_broker``, deleted afterwards.
- ``kafka_topic_factory`` (function): ``kafka_topic_factory(partitions=3, config={...})`` makes
  more; all are deleted when the test ends.
- ``kafka_cluster`` (session): an :class:`~kbroker.EmbeddedCluster` of three nodes, a broker and
  an etcd member each, with ``kill(node_id)``, ``stop_broker``, ``start_broker``, ``pause``,
  ``resume``, ``kill_etcd_member`` and ``start_etcd_member``.

When a test that uses a broker fails, the lines the broker logged during that test are added
to the report. Every broker is stopped by pid when the session ends.
"""

from __future__ import annotations

import pytest

from .admin import topic_name
from .embedded import EmbeddedBroker

_LOG_OFFSETS = pytest.StashKey[dict]()
_STARTED: list = []  # brokers and clusters of this session's fixtures, for the log offsets


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("kbroker_config", "broker settings (key=value per line) for the kafka_broker fixture",
                  type="linelist", default=[])
    parser.addini("kbroker_cluster_config", "broker settings (key=value per line) for kafka_cluster",
                  type="linelist", default=[])


def _ini_config(config: pytest.Config, name: str) -> dict[str, str]:
    pairs = {}
    for line in config.getini(name):
        key, sep, value = line.partition("=")
        if not sep:
            raise pytest.UsageError(f"{name}: expected key=value, got {line!r}")
        pairs[key.strip()] = value.strip()
    return pairs


@pytest.fixture(scope="session")
def kafka_broker_config(pytestconfig: pytest.Config) -> dict[str, str]:
    """Settings of the session's broker; override this fixture to change them."""
    return _ini_config(pytestconfig, "kbroker_config")


@pytest.fixture(scope="session")
def kafka_broker(kafka_broker_config):
    broker = EmbeddedBroker(kafka_broker_config)
    _STARTED.append(broker)
    broker.start()
    yield broker
    broker.close()


@pytest.fixture(scope="session")
def kafka_cluster_config(pytestconfig: pytest.Config) -> dict[str, str]:
    return _ini_config(pytestconfig, "kbroker_cluster_config")


@pytest.fixture(scope="session")
def kafka_cluster(kafka_cluster_config):
    from .cluster import EmbeddedCluster

    cluster = EmbeddedCluster(3, kafka_cluster_config)
    _STARTED.append(cluster)
    cluster.start()
    yield cluster
    cluster.close()


@pytest.fixture
def kafka_topic_factory(request: pytest.FixtureRequest, kafka_broker):
    created: list[str] = []

    def make(name: str | None = None, partitions: int = 1, config: dict[str, str] | None = None) -> str:
        topic = kafka_broker.create_topic(name or topic_name(request.node.name), partitions, config=config)
        created.append(topic)
        return topic

    yield make
    if created and kafka_broker.alive:
        kafka_broker.delete_topics(*created)


@pytest.fixture
def kafka_topic(kafka_topic_factory) -> str:
    return kafka_topic_factory()


def _logs(owners):
    """(label, log path) of every broker of these fixtures' values."""
    from .cluster import EmbeddedCluster

    for value in owners:
        if isinstance(value, EmbeddedBroker):
            yield "kbroker", value.log_path
        elif isinstance(value, EmbeddedCluster):
            for node_id in value.node_ids:
                yield f"kbroker broker {node_id}", value.log_path(node_id)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    """Where each log stood before the test's fixtures ran (a broker started now logs from 0)."""
    item.stash[_LOG_OFFSETS] = {path: path.stat().st_size if path.exists() else 0 for _, path in _logs(_STARTED)}
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    from .process import log_tail

    offsets = item.stash.get(_LOG_OFFSETS, {})
    for label, path in _logs(getattr(item, "funcargs", {}).values()):
        tail = log_tail(path, offsets.get(path, 0))
        if tail:
            report.sections.append((f"{label} log during the test ({path})", tail))
