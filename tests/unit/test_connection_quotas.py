"""The broker's connection limits, counted as Kafka's ConnectionQuotas counts them."""

from broker.connection_quotas import ConnectionQuotas


def _quotas(**settings) -> ConnectionQuotas:
    config = {"max.connections": 2**31 - 1, "max.connections.per.ip": 2**31 - 1,
              "max.connections.per.ip.overrides": "", **settings}
    return ConnectionQuotas(config, "BROKER", listener_count=2)


def test_per_address_limit_with_an_override_by_host_name():
    q = _quotas(**{"max.connections.per.ip": 1, "max.connections.per.ip.overrides": "localhost:2"})
    assert q.admit("CLIENT", "10.0.0.1") is None
    assert "maximum of 1 connections" in q.admit("CLIENT", "10.0.0.1")
    assert q.admit("CLIENT", "127.0.0.1") is None and q.admit("CLIENT", "127.0.0.1") is None
    assert q.admit("CLIENT", "127.0.0.1") is not None
    q.release("10.0.0.1")
    assert q.admit("CLIENT", "10.0.0.1") is None
    assert q.total == 3


def test_the_broker_limit_spares_the_inter_broker_listener():
    q = _quotas(**{"max.connections": 2})
    assert q.admit("CLIENT", "10.0.0.1") is None and q.admit("CLIENT", "10.0.0.2") is None
    assert q.admit("CLIENT", "10.0.0.3") is not None
    assert q.admit("BROKER", "10.0.0.4") is None  # peers still get in
    q.release("10.0.0.1")
    q.release("10.0.0.4")
    assert q.admit("CLIENT", "10.0.0.3") is None
