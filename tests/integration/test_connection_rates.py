"""Connections over ``max.connections`` wait, and an address over its ``connection_creation_rate``
(KIP-612) is refused, against our broker and Apache Kafka 4.3.1 (``slow``) alike.

Over ``max.connections`` neither broker closes the new connection: it is not served until another
one closes (Kafka's acceptor stops accepting). Over an ip quota's creation rate the connection is
closed unserved, while other addresses connect as before.

The test's clients connect from their own loopback address (127.0.0.2).
"""

from __future__ import annotations

import socket

import pytest

from tests.support.parity import TARGETS, single_broker
from tests.support.raw import RawClient

LIMIT = 3
CLIENT = "127.0.0.2"
API_VERSIONS = {"client_software_name": "t", "client_software_version": "1"}


@pytest.fixture(scope="module", params=TARGETS)
def bootstrap(request, tmp_path_factory):
    yield from single_broker(request.param, tmp_path_factory, {"max.connections": str(LIMIT)})


def _serves(c: RawClient) -> bool:
    try:
        return c.call(18, 3, API_VERSIONS).error_code == 0
    except OSError:  # ConnectionError, a reset, or a timeout: the broker let it go
        return False


def _set_rate(bootstrap: str, rate: float | None, ip: str = CLIENT) -> None:
    op = {"key": "connection_creation_rate", "value": rate or 0.0, "remove": rate is None}
    with RawClient(bootstrap, source=None if ip == CLIENT else CLIENT) as c:
        resp = c.call(49, 1, {"validate_only": False, "entries": [
            {"entity": [{"entity_type": "ip", "entity_name": ip}], "ops": [op]}]})
    assert [e.error_code for e in resp.entries] == [0], resp


def test_a_connection_over_max_connections_waits_for_a_free_slot(bootstrap):
    clients = [RawClient(bootstrap, timeout=10, source=CLIENT) for _ in range(LIMIT)]
    waiting = RawClient(bootstrap, timeout=10, source=CLIENT)
    try:
        assert all(_serves(c) for c in clients)
        waiting.send_call(18, 3, API_VERSIONS)
        waiting.sock.settimeout(2)
        with pytest.raises(socket.timeout):  # neither answered nor closed: it waits
            waiting.sock.recv(1, socket.MSG_PEEK)
        clients.pop().close()
        waiting.sock.settimeout(30)
        assert waiting.receive(18, 3).error_code == 0
    finally:
        for c in clients + [waiting]:
            c.close()


@pytest.mark.parametrize("entity, rated, other", [(CLIENT, CLIENT, None), ("localhost", None, CLIENT)],
                         ids=["address", "host-name"])
def test_an_address_over_its_connection_creation_rate_is_refused(bootstrap, entity, rated, other):
    """By its address, or by a host name resolving to it (Kafka resolves the ip entity)."""
    _set_rate(bootstrap, 1.0, entity)  # ten connections over the ten-second window, then refusals
    try:
        outcomes = []
        for _ in range(40):  # Kafka applies a new quota asynchronously
            with RawClient(bootstrap, timeout=10, source=rated) as c:
                outcomes.append(_serves(c))
            if not outcomes[-1]:
                break
        assert outcomes[0] and not outcomes[-1], outcomes
        with RawClient(bootstrap, timeout=10, source=other) as c:  # another address is not rated
            assert _serves(c)
    finally:
        _set_rate(bootstrap, None, entity)
