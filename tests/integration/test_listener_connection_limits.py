"""A listener's own connection limit (``listener.name.<listener>.max.connections``, KIP-402),
against our broker and Apache Kafka 4.3.1 (``slow``) alike: a connection over it is not served
until a slot on that listener frees (Kafka's acceptor stops accepting), then it is; and the
limit changes at run time as a per-broker dynamic config.
"""

from __future__ import annotations

import socket
import time

import pytest

from tests.support.parity import TARGETS, single_broker
from tests.support.raw import RawClient

LIMIT = 3
KEY = "listener.name.plaintext.max.connections"


@pytest.fixture(scope="module", params=TARGETS)
def bootstrap(request, tmp_path_factory):
    yield from single_broker(request.param, tmp_path_factory, {KEY: str(LIMIT)})


def _api_versions(c: RawClient) -> int:
    return c.call(18, 3, {"client_software_name": "t", "client_software_version": "1"}).error_code


def _served(c: RawClient) -> bool:
    try:
        return _api_versions(c) == 0
    except OSError:  # a timeout: not let in (yet)
        return False


def _alter(admin: RawClient, broker_id: str, op: int, value: str | None):
    return admin.call(44, 1, {"validate_only": False, "resources": [
        {"resource_type": 4, "resource_name": broker_id, "configs": [
            {"name": KEY, "config_operation": op, "value": value}]}]})


def _broker_id(bootstrap: str) -> str:
    with RawClient(bootstrap, timeout=5) as c:
        return str(c.call(3, 12, {"topics": [], "allow_auto_topic_creation": False}).brokers[0].node_id)


def _wait_served(c: RawClient, answered: list) -> None:
    """``c``'s request, sent while the listener was full, is answered once a slot frees."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            answered.append(c.receive(18, 3).error_code)
            return
        except TimeoutError:
            continue


def test_a_connection_over_the_listener_limit_waits_for_a_slot_on_it(bootstrap):
    clients = []
    try:
        for _ in range(100):  # the broker notices the closed probe on its own time
            clients = [RawClient(bootstrap, timeout=2) for _ in range(LIMIT)]
            if all(_served(c) for c in clients):
                break
            for c in clients:
                c.close()
            clients = []
        assert len(clients) == LIMIT
        extra = RawClient(bootstrap, timeout=1)
        extra.send_call(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        with pytest.raises(socket.timeout):
            extra.receive(18, 3)  # accepted by the kernel, not read by the broker
        assert all(_served(c) for c in clients)  # the ones in keep working
        clients.pop().close()
        answered: list[int] = []
        _wait_served(extra, answered)
        assert answered == [0]
        clients.append(extra)
    finally:
        for c in clients:
            c.close()


def test_the_listener_limit_is_a_dynamic_per_broker_config(bootstrap):
    broker_id = _broker_id(bootstrap)
    with RawClient(bootstrap, timeout=5) as admin:
        assert [r.error_code for r in _alter(admin, broker_id, 0, "-1").responses] == [42]  # INVALID_REQUEST
        assert [r.error_code for r in _alter(admin, broker_id, 0, str(LIMIT + 2)).responses] == [0]
        try:
            clients = []
            for _ in range(100):  # until the change has reached the acceptor
                clients = [RawClient(bootstrap, timeout=2) for _ in range(LIMIT + 1)]
                if all(_served(c) for c in clients):
                    break
                for c in clients:
                    c.close()
                clients = []
                time.sleep(0.1)
            assert len(clients) == LIMIT + 1  # the admin's connection and these: LIMIT + 2
            for c in clients:
                c.close()
        finally:
            assert [r.error_code for r in _alter(admin, broker_id, 1, None).responses] == [0]
