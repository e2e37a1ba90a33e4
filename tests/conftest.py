"""Shared fixtures: brokers as real separate processes, real clients over real sockets."""

from __future__ import annotations

import gc
import uuid

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.unavailable import summary_line


def pytest_collection_finish(session) -> None:
    # What collection imported lives for the whole run: out of the collector's way, so that the
    # collection after each module (below) visits only what the tests made.
    gc.freeze()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    line = summary_line(config)
    if line:
        terminalreporter.write_line(line, yellow=True, bold=True)


@pytest.fixture(scope="module", autouse=True)
def _release_clients():
    """Destroy the module's leftover clients when it ends. A librdkafka client caught in a
    reference cycle (a delivery or throttle callback bound to an object that holds the client)
    lives until the garbage collector runs, retrying a broker that is long gone and printing
    connection errors, some of them after the session's summary."""
    yield
    gc.collect()


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    """One broker shared by the tests that do not restart or break it."""
    proc = BrokerProcess(str(tmp_path_factory.mktemp("shared-broker") / "data"))
    proc.start()
    yield proc
    proc.stop()
    assert proc.proc.returncode == 0, proc.output()[-4000:]


@pytest.fixture
def own_broker(tmp_path):
    """A broker for one test, free to be killed and restarted."""
    procs = []

    def make(**overrides: str) -> BrokerProcess:
        proc = BrokerProcess(str(tmp_path / f"data{len(procs)}"), overrides)
        procs.append(proc)
        return proc.start()

    yield make
    for proc in procs:
        proc.kill9()


@pytest.fixture
def topic_name(request) -> str:
    return f"{request.node.name[:60].replace('[', '-').replace(']', '')}-{uuid.uuid4().hex[:6]}"
