"""The SASL state machine and mechanisms (security/sasl.py) without a network: JAAS lines,
PLAIN's checks, SCRAM against stored credentials (driven by scramp's client), and which
requests each state admits."""

from __future__ import annotations

import os

import pytest
from scramp import ScramClient

from security import scram
from security.sasl import (
    ALLOWED,
    AuthenticationFailed,
    IllegalSaslState,
    SaslServerAuthenticator,
    SaslServerConfig,
    SaslState,
    check_listener,
    max_reauth_ms,
    parse_jaas,
    plain_users,
)

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="a\\"quoted\\";pw";')


def test_jaas_lines():
    module, options = parse_jaas(JAAS)
    assert module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert options["username"] == "admin" and options["user_alice"] == 'a"quoted";pw'
    assert plain_users(JAAS) == {"admin": "admin-secret", "alice": 'a"quoted";pw'}
    for bad in ("PlainLoginModule", 'PlainLoginModule required user_a="x"', 'M required a="x" b;'):
        with pytest.raises(ValueError):
            parse_jaas(bad)


def test_listener_checks():
    given = {"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
             "listener.name.ext.plain.sasl.jaas.config": JAAS}
    assert check_listener(given, "EXT") == ("PLAIN", "SCRAM-SHA-512")
    with pytest.raises(ValueError, match="PLAIN needs"):
        check_listener(given, "OTHER")
    with pytest.raises(ValueError, match="GSSAPI is not supported"):
        check_listener({"listener.name.x.sasl.enabled.mechanisms": "GSSAPI"}, "X")
    with pytest.raises(ValueError, match="OAUTHBEARER needs listener.name.x.oauthbearer.sasl.server.callback"):
        check_listener({"listener.name.x.sasl.enabled.mechanisms": "OAUTHBEARER"}, "X")


def authenticator(credentials=None) -> SaslServerAuthenticator:
    credentials = credentials or {}
    return SaslServerAuthenticator(SaslServerConfig(
        ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"), plain_users(JAAS),
        lambda user, mechanism: credentials.get(user, {}).get(mechanism)))


def test_the_state_table_admits_only_the_sasl_requests_in_turn():
    a = authenticator()
    a.check_allowed(18)
    a.check_allowed(17)
    for key in (0, 1, 3, 36):
        with pytest.raises(IllegalSaslState):
            a.check_allowed(key)
    assert not a.handshake("GSSAPI") and a.state is SaslState.HANDSHAKE_OR_VERSIONS
    assert a.handshake("PLAIN") and a.state is SaslState.AUTHENTICATE
    with pytest.raises(IllegalSaslState):
        a.check_allowed(17)
    assert ALLOWED[SaslState.AUTHENTICATE] == {36}
    assert a.authenticate(b"\x00admin\x00admin-secret") == b""
    assert a.complete and a.principal == "User:admin"
    a.check_allowed(0)  # everything, once authenticated


@pytest.mark.parametrize("token, message", [
    (b"\x00admin\x00wrong", "Invalid username or password"),
    (b"\x00nobody\x00admin-secret", "Invalid username or password"),  # the same words: no user probing
    (b"\x00admin\x00", "password not specified"),
    (b"admin-secret", "expected 3 tokens"),
    (b"alice\x00admin\x00admin-secret", "authorization id that is different"),
])
def test_plain_refusals(token, message):
    a = authenticator()
    a.handshake("PLAIN")
    with pytest.raises(AuthenticationFailed, match=message):
        a.authenticate(token)
    assert a.state is SaslState.FAILED and a.principal is None


def scram_credential(mechanism: scram.ScramMechanism, password: str, iterations: int = 4096) -> dict:
    salt = os.urandom(16)
    return scram.derive(mechanism, salt, scram.salted_password(mechanism, password, salt, iterations), iterations)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_against_stored_credentials(mechanism):
    stored = mechanism.replace("-", "_")
    creds = {"carol": {stored: scram_credential(scram.ScramMechanism[stored], "carol-secret")}}

    def login(username: str, password: str) -> SaslServerAuthenticator:
        a = authenticator(creds)
        assert a.handshake(mechanism)
        client = ScramClient([mechanism], username, password)
        server_first = a.authenticate(client.get_client_first().encode())
        client.set_server_first(server_first.decode())
        server_final = a.authenticate(client.get_client_final().encode())
        client.set_server_final(server_final.decode())  # the server proved it knows the key too
        return a

    assert login("carol", "carol-secret").principal == "User:carol"
    for user, password in (("carol", "wrong"), ("mallory", "carol-secret")):
        with pytest.raises(AuthenticationFailed, match=f"invalid credentials with SASL mechanism {mechanism}"):
            login(user, password)


def _reauthenticator(max_reauth_ms: int = 1500) -> SaslServerAuthenticator:
    return SaslServerAuthenticator(SaslServerConfig(
        ("PLAIN", "SCRAM-SHA-256"), plain_users(JAAS), lambda _u, _m: None,
        max_reauth_ms={"PLAIN": max_reauth_ms, "SCRAM-SHA-256": 0}))


def test_reauthentication_keeps_mechanism_and_principal():
    """KIP-368: a SaslHandshake on an authenticated connection starts a re-authentication that
    must use the same mechanism and end in the same principal; not twice within a second."""
    a = _reauthenticator()
    assert a.handshake("PLAIN") and a.authenticate(b"\x00alice\x00a\"quoted\";pw") == b""
    assert a.complete and a.session_lifetime_ms == 1500
    assert a.begin_reauthentication(now=100.0)
    assert not a.complete and a.reauthenticating.principal == "User:alice"
    with pytest.raises(IllegalSaslState):
        a.check_allowed(0)  # nothing but the SASL requests while re-authenticating
    assert a.handshake("PLAIN")
    a.authenticate(b"\x00alice\x00a\"quoted\";pw")
    assert a.complete and a.principal == "User:alice" and a.reauthenticating is None
    assert not a.begin_reauthentication(now=100.5)  # within a second of the last one
    assert a.begin_reauthentication(now=101.0)
    a.handshake("PLAIN")
    with pytest.raises(AuthenticationFailed, match="Cannot change principals during re-authentication from "
                                                   "User:alice: User:admin"):
        a.authenticate(b"\x00admin\x00admin-secret")
    assert a.state is SaslState.FAILED

    b = _reauthenticator()
    b.handshake("PLAIN")
    b.authenticate(b"\x00admin\x00admin-secret")
    assert b.begin_reauthentication(now=1.0) and b.handshake("SCRAM-SHA-256")
    with pytest.raises(AuthenticationFailed, match="not supported for re-authentication of mechanism 'PLAIN'"):
        b.authenticate(b"n,,n=admin,r=abc")


def test_max_reauth_ms_is_read_per_listener_and_mechanism():
    given = {"connections.max.reauth.ms": "60000",
             "listener.name.ext.scram-sha-512.connections.max.reauth.ms": "5000",
             "sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256"}
    assert max_reauth_ms(given, "EXT", "SCRAM-SHA-512") == 5000
    assert max_reauth_ms(given, "EXT", "SCRAM-SHA-256") == 60000
    assert max_reauth_ms({}, "EXT", "PLAIN") == 0
    with pytest.raises(ValueError, match="Invalid value -1 for configuration connections.max.reauth.ms"):
        check_listener({**given, "connections.max.reauth.ms": "-1"}, "INT")
