"""aiokafka's test fixtures re-pointed at a running broker (imported at the end of its conftest.py).

aiokafka's ``tests/conftest.py`` starts a Docker container with the ``--docker-image`` it is given
and hands its ports to the test classes (``setup_test_class``). Here the same fixtures answer
with the compat target instead: ``kafka_server`` is the broker at ``COMPAT_BOOTSTRAP``, ``docker``
is none, nothing is pulled. The fixtures that need the container's shell (``acl_manager``,
``kafka_config``, ``kerberos_utils``: ``kafka-acls.sh`` and ``kafka-configs.sh`` through ``docker
exec``, and Kerberos) are inert; the runner does not run the SASL tests that use them, nor the
SSL ones (the certificates are made inside the container).
"""

from __future__ import annotations

import os
import pathlib

import pytest

KafkaServer = None  # the suite's own dataclass, set by the lines the runner appends to its conftest


def _address() -> tuple[str, int]:
    host, _, port = os.environ["COMPAT_BOOTSTRAP"].split(",")[0].rpartition(":")
    return host, int(port)


@pytest.fixture(scope="session")
def docker():
    yield None


@pytest.fixture(scope="session")
def kafka_image(request):
    return request.config.getoption("--docker-image")


@pytest.fixture(scope="session")
def ssl_folder(tmp_path_factory):
    return pathlib.Path(tmp_path_factory.mktemp("no-ssl"))


@pytest.fixture(scope="session")
def kafka_server(kafka_image, docker):
    host, port = _address()
    # The listeners the container would add (SSL, SASL) do not exist here: port 0 for each.
    return KafkaServer(host, port, 0, 0, 0, None)


@pytest.fixture(scope="class")
def acl_manager(kafka_server):
    return None


@pytest.fixture(scope="class")
def kafka_config(kafka_server):
    return None


@pytest.fixture(scope="class")
def kerberos_utils(kafka_server):
    return None


def pytest_collection_modifyitems(config, items):
    """Only the tests that talk to a broker: the suite's unit tests say nothing about one."""
    if os.environ.get("COMPAT_BROKER_TESTS_ONLY"):
        keep = [item for item in items if "kafka_server" in getattr(item, "fixturenames", ())]
        config.hook.pytest_deselected(items=[item for item in items if item not in keep])
        items[:] = keep
