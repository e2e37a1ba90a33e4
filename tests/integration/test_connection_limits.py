"""Connection limits (``max.connections.per.ip`` and its overrides, dynamic, as is
``max.connection.creation.rate``), against our broker
and Apache Kafka 4.3.1 (``slow``) alike: the connection over the limit is closed, the others
from that address and everyone else's keep working.

The test's clients connect from their own loopback address (127.0.0.2), so the brokers' own
connections (Kafka's broker to its controller) do not count against it.
"""

from __future__ import annotations

import time

import pytest

from tests.support.parity import TARGETS, single_broker
from tests.support.raw import RawClient

LIMIT = 3
CLIENT = "127.0.0.2"
SETTINGS = {"max.connections.per.ip": str(LIMIT)}


@pytest.fixture(scope="module", params=TARGETS)
def bootstrap(request, tmp_path_factory):
    yield from single_broker(request.param, tmp_path_factory, SETTINGS)


def _serves(c: RawClient) -> bool:
    try:
        return c.call(18, 3, {"client_software_name": "t", "client_software_version": "1"}).error_code == 0
    except OSError:  # ConnectionError, a reset, or a timeout: the broker let it go
        return False


def _open(bootstrap: str, n: int) -> list[RawClient]:
    return [RawClient(bootstrap, timeout=5, source=CLIENT) for _ in range(n)]


def test_the_connection_over_the_per_ip_limit_is_closed_and_the_rest_go_on(bootstrap):
    clients = _open(bootstrap, LIMIT)
    try:
        assert all(_serves(c) for c in clients)
        extra = RawClient(bootstrap, timeout=5, source=CLIENT)
        assert not _serves(extra)
        extra.close()
        assert all(_serves(c) for c in clients)
        with RawClient(bootstrap, timeout=5) as other:  # another address: its own count
            assert _serves(other)
        clients.pop().close()
        for _ in range(50):  # the broker notices the close on its own time
            again = RawClient(bootstrap, timeout=5, source=CLIENT)
            if _serves(again):
                clients.append(again)
                break
            again.close()
        assert len(clients) == LIMIT
    finally:
        for c in clients:
            c.close()


def test_an_override_for_the_address_applies_to_its_next_connection(bootstrap):
    with RawClient(bootstrap, timeout=5) as admin:
        resp = admin.call(44, 1, {"validate_only": False, "resources": [
            {"resource_type": 4, "resource_name": "", "configs": [
                {"name": "max.connections.per.ip.overrides", "config_operation": 0, "value": f"{CLIENT}:5"}]}]})
        assert [r.error_code for r in resp.responses] == [0], resp
        clients = []
        try:
            for _ in range(100):  # until the change has reached the connection quotas
                clients = _open(bootstrap, 5)
                if all(_serves(c) for c in clients):
                    break
                for c in clients:
                    c.close()
                clients = []
            assert len(clients) == 5
            extra = RawClient(bootstrap, timeout=5, source=CLIENT)
            assert not _serves(extra)
            extra.close()
        finally:
            for c in clients:
                c.close()
            admin.call(44, 1, {"validate_only": False, "resources": [
                {"resource_type": 4, "resource_name": "", "configs": [
                    {"name": "max.connections.per.ip.overrides", "config_operation": 1, "value": None}]}]})


def test_the_connection_creation_rate_is_a_dynamic_broker_config(bootstrap):
    """As Kafka's DynamicConnectionQuota: set and removed at run time (cluster default)."""
    def alter(op: int, value):
        return admin.call(44, 1, {"validate_only": False, "resources": [
            {"resource_type": 4, "resource_name": "", "configs": [
                {"name": "max.connection.creation.rate", "config_operation": op, "value": value}]}]})

    with RawClient(bootstrap, timeout=5) as admin:
        resp = alter(0, "1000")
        assert [r.error_code for r in resp.responses] == [0], resp
        try:
            for _ in range(50):  # Kafka applies it through its metadata log, a moment later
                described = admin.call(32, 4, {"resources": [{"resource_type": 4, "resource_name": "",
                                                               "configuration_keys": ["max.connection.creation.rate"]}],
                                               "include_synonyms": False, "include_documentation": False})
                values = [c.value for c in described.results[0].configs]
                if values:
                    break
                time.sleep(0.1)
            assert values == ["1000"]
        finally:
            assert [r.error_code for r in alter(1, None).responses] == [0]


@pytest.mark.parametrize("configs, message", [
    ({"max.connections.per.ip.overrides": f"{CLIENT}:x"}, 'For input string: "x"'),
    ({"max.connections.per.ip.overrides": "abc"},
     "Error parsing configuration property 'max.connections.per.ip.overrides': begin 0, end -1, length 3"),
    ({"max.connections.per.ip": "0"}, "requirement failed: max.connections.per.ip can be set to zero only if "
                                      "max.connections.per.ip.overrides property is set."),
    ({"max.connections": "0"}, "Invalid value org.apache.kafka.common.config.ConfigException: Invalid "
                               "max.connections 0 for configuration Invalid dynamic configuration"),
])
def test_limits_that_would_lock_every_client_out_are_refused(bootstrap, configs, message):
    """A setting Kafka cannot apply is refused with its message, validate_only or not, and
    every client (this one included) can still connect afterwards."""
    with RawClient(bootstrap, timeout=5) as admin:
        for validate_only in (True, False):
            resp = admin.call(44, 1, {"validate_only": validate_only, "resources": [
                {"resource_type": 4, "resource_name": "", "configs": [
                    {"name": name, "config_operation": 0, "value": value} for name, value in configs.items()]}]})
            assert [(r.error_code, r.error_message) for r in resp.responses] == [(42, message)]
    with RawClient(bootstrap, timeout=5) as again, RawClient(bootstrap, timeout=5, source=CLIENT) as client:
        assert _serves(again) and _serves(client)


def test_a_per_ip_limit_of_zero_is_kept_only_with_its_overrides(bootstrap):
    """max.connections.per.ip=0 with overrides is accepted; deleting the overrides while it
    stands is refused (both as Kafka's KafkaConfig requires), so the broker stays reachable."""
    def alter(configs: list[tuple[str, int, str | None]]):
        return admin.call(44, 1, {"validate_only": False, "resources": [
            {"resource_type": 4, "resource_name": "", "configs": [
                {"name": n, "config_operation": op, "value": v} for n, op, v in configs]}]})

    with RawClient(bootstrap, timeout=5) as admin:
        everyone = f"127.0.0.1:100,{CLIENT}:100"
        assert [r.error_code for r in alter([("max.connections.per.ip.overrides", 0, everyone),
                                             ("max.connections.per.ip", 0, "0")]).responses] == [0]
        try:
            for _ in range(50):  # Kafka applies it through its metadata log, a moment later
                described = admin.call(32, 4, {"resources": [{"resource_type": 4, "resource_name": "",
                                                               "configuration_keys": ["max.connections.per.ip"]}],
                                               "include_synonyms": False, "include_documentation": False})
                if [c.value for c in described.results[0].configs] == ["0"]:
                    break
                time.sleep(0.1)
            refused = alter([("max.connections.per.ip.overrides", 1, None)]).responses
            assert [r.error_code for r in refused] == [42]
            assert "can be set to zero only if max.connections.per.ip.overrides" in refused[0].error_message
        finally:
            assert [r.error_code for r in alter([("max.connections.per.ip", 1, None),
                                                 ("max.connections.per.ip.overrides", 1, None)]).responses] == [0]
