"""The broker's connection limits and creation rates, counted as Kafka's ConnectionQuotas counts
them, on a fake clock."""

import asyncio

import pytest

from broker.connection_quotas import ConnectionQuotas, ConnectionRefused
from metadata.controller.client_quotas import entity_key

UNLIMITED = 2**31 - 1


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _quotas(ip_quotas: dict | None = None, clock=None, **settings) -> ConnectionQuotas:
    config = {"max.connections": UNLIMITED, "max.connections.per.ip": UNLIMITED,
              "max.connection.creation.rate": UNLIMITED, "max.connections.per.ip.overrides": "", **settings}
    stored = {entity_key((("ip", ip),)): {"connection_creation_rate": rate} for ip, rate in (ip_quotas or {}).items()}
    return ConnectionQuotas(config, "BROKER", 2, lambda: stored, clock or Clock())


def test_per_address_limit_with_an_override_by_host_name():
    q = _quotas(**{"max.connections.per.ip": 1, "max.connections.per.ip.overrides": "localhost:2"})
    q.admit("CLIENT", "10.0.0.1")
    with pytest.raises(ConnectionRefused, match="maximum of 1 connections") as refused:
        q.admit("CLIENT", "10.0.0.1")
    assert refused.value.delay_s == 0  # closed at once
    q.admit("CLIENT", "127.0.0.1")
    q.admit("CLIENT", "127.0.0.1")
    with pytest.raises(ConnectionRefused):
        q.admit("CLIENT", "127.0.0.1")
    q.release("CLIENT", "10.0.0.1")
    q.admit("CLIENT", "10.0.0.1")
    assert q.total == 3


def test_over_max_connections_a_connection_waits_for_a_slot_and_peers_do_not():
    q = _quotas(**{"max.connections": 2})

    async def main():
        await q.acquire("CLIENT", "10.0.0.1")
        await q.acquire("CLIENT", "10.0.0.2")
        waiting = asyncio.ensure_future(q.acquire("CLIENT", "10.0.0.3"))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # Kafka's acceptor waits too: the client sees a slow connect
        await asyncio.wait_for(q.acquire("BROKER", "10.0.0.4"), 1)  # the protected listener gets in
        q.release("CLIENT", "10.0.0.1")
        await asyncio.sleep(0.05)
        assert not waiting.done()  # the peer's connection counts in the total as in Kafka
        q.release("BROKER", "10.0.0.4")
        await asyncio.wait_for(waiting, 1)
        assert q.total == 2 and q.by_address["10.0.0.3"] == 1

    asyncio.run(main())


def test_the_broker_creation_rate_delays_by_kafkas_formula_at_most_a_sample():
    clock = Clock()
    q = _quotas(clock=clock, **{"max.connection.creation.rate": 2})
    assert [q.creation_delay("CLIENT") for _ in range(20)] == [0.0] * 20  # 20 over a 10 s window: 2/s
    assert q.creation_delay("CLIENT") == pytest.approx(0.5)  # (2.1 - 2) / 2 * 10 s
    assert max(q.creation_delay("CLIENT") for _ in range(20)) == 1.0  # capped at one sample
    assert q.creation_delay("BROKER") == 0.0  # the inter-broker listener is exempt
    clock.now += 30
    assert q.creation_delay("CLIENT") == 0.0


def test_an_address_over_its_creation_rate_is_refused_late_and_not_counted():
    clock = Clock()
    q = _quotas({"10.0.0.9": 1.0, None: 5.0}, clock)
    assert q.ip_quota("10.0.0.9") == 1.0 and q.ip_quota("10.0.0.1") == 5.0  # its own, else the default
    for _ in range(10):  # ten over the ten-second window: 1/s
        q.admit("CLIENT", "10.0.0.9")
    with pytest.raises(ConnectionRefused, match="connection_creation_rate") as refused:
        q.admit("CLIENT", "10.0.0.9")
    assert 0 < refused.value.delay_s <= 1.0
    assert q.by_address["10.0.0.9"] == 10
    for _ in range(50):  # another address has its own rate
        q.admit("CLIENT", "10.0.0.1")
    clock.now += 30
    q.admit("CLIENT", "10.0.0.9")


def test_without_ip_quotas_nothing_is_rated():
    q = _quotas()
    assert q.ip_quota("10.0.0.1") is None
    for _ in range(1000):
        q.admit("CLIENT", "10.0.0.1")
    assert q.total == 1000


def test_a_listener_over_its_own_limit_waits_and_the_other_listeners_do_not():
    q = _quotas(**{"listener.name.client.max.connections": 1, "listener.name.broker.max.connections": 1})

    async def main():
        await q.acquire("CLIENT", "10.0.0.1")
        waiting = asyncio.ensure_future(q.acquire("CLIENT", "10.0.0.2"))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        await asyncio.wait_for(q.acquire("EXTERNAL", "10.0.0.3"), 1)  # no limit of its own
        await asyncio.wait_for(q.acquire("BROKER", "10.0.0.4"), 1)
        protected = asyncio.ensure_future(q.acquire("BROKER", "10.0.0.5"))
        await asyncio.sleep(0.05)
        assert not protected.done()  # the inter-broker listener is held to its own limit
        q.release("EXTERNAL", "10.0.0.3")
        await asyncio.sleep(0.05)
        assert not waiting.done()  # a slot of another listener is not this listener's
        q.release("CLIENT", "10.0.0.1")
        await asyncio.wait_for(waiting, 1)
        q.release("BROKER", "10.0.0.4")
        await asyncio.wait_for(protected, 1)
        assert q.by_listener == {"CLIENT": 1, "BROKER": 1, "EXTERNAL": 0} and q.total == 2

    asyncio.run(main())


def test_a_listener_creation_rate_throttles_that_listener_even_the_inter_broker_one():
    clock = Clock()
    q = _quotas(clock=clock, **{"listener.name.broker.max.connection.creation.rate": 2,
                                "max.connection.creation.rate": 100})
    assert [q.creation_delay("BROKER") for _ in range(20)] == [0.0] * 20
    assert q.creation_delay("BROKER") == pytest.approx(0.5)  # (2.1 - 2) / 2 * 10 s
    assert q.creation_delay("CLIENT") == 0.0  # another listener, under the broker's rate
    clock.now += 30
    assert q.creation_delay("BROKER") == 0.0


def test_listener_limit_keys_are_recognised_by_their_kafka_names():
    from broker.config import is_listener_limit, listener_limit_key

    assert listener_limit_key("EXTERNAL", "max.connections") == "listener.name.external.max.connections"
    assert is_listener_limit("listener.name.external.max.connections")
    assert is_listener_limit("listener.name.sasl_ssl.max.connection.creation.rate")
    assert not is_listener_limit("listener.name.external.ssl.keystore.location")
    assert not is_listener_limit("max.connections")
    assert not is_listener_limit("listener.name..max.connections")
