"""TLS settings as Kafka reads them (security/ssl_factory.py) and certificate principals
(security/principal.py): key and trust stores in each supported form, per-listener keys,
one-line errors, a real handshake, and ssl.principal.mapping.rules as Kafka's
SslPrincipalMapperTest exercises them."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from security.authenticator import ListenerSecurity
from security.principal import NoMatchingRule, SslPrincipalMapper, parse_rules
from security.ssl_factory import (
    SslConfigError,
    client_context,
    is_ssl_key,
    openssl_cipher_name,
    server_context,
    ssl_settings,
)
from tools.dev_ca import DevCA


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    ca = DevCA(tmp_path_factory.mktemp("tls"))
    ca.server = ca.issue("broker", cn="broker1", hosts=("127.0.0.1", "localhost"))
    ca.locked = ca.issue("locked", cn="broker2", hosts=("127.0.0.1",), key_password="key-secret")
    ca.client = ca.issue("client", cn="alice", ou="eng", o="kbroker")
    return ca


def pem_server(ca, **extra) -> dict[str, str]:
    return {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(ca.server.bundle), **extra}


def test_keys_globally_and_per_listener():
    assert is_ssl_key("ssl.keystore.location") and is_ssl_key("listener.name.external.ssl.client.auth")
    assert not is_ssl_key("ssl.nonsense") and not is_ssl_key("listener.name.external.log.dirs")
    s = ssl_settings({"ssl.client.auth": "requested", "listener.name.external.ssl.client.auth": "required"},
                     "EXTERNAL")
    assert s["ssl.client.auth"] == "required"
    assert ssl_settings({"ssl.client.auth": "requested"}, "INTERNAL")["ssl.client.auth"] == "requested"
    assert ssl_settings({}, "X")["ssl.keystore.type"] == "JKS"  # Kafka's default


def test_key_store_forms(ca):
    assert server_context(ssl_settings(pem_server(ca))).verify_mode == ssl.CERT_NONE
    inline = {"ssl.keystore.type": "PEM", "ssl.keystore.key": ca.server.key.read_text(),
              "ssl.keystore.certificate.chain": ca.server.cert.read_text()}
    server_context(ssl_settings(inline))
    server_context(ssl_settings({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(ca.locked.bundle),
                                 "ssl.key.password": "key-secret"}))
    p12 = ca.pkcs12("broker", "store-secret")
    server_context(ssl_settings({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(p12),
                                 "ssl.keystore.password": "store-secret"}))


@pytest.mark.parametrize("settings, message", [
    ({}, "needs a key store"),
    ({"ssl.keystore.type": "JKS", "ssl.keystore.location": "{bundle}"}, "keytool -importkeystore"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "/nonexistent.pem"}, "cannot be read"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "{locked}", "ssl.key.password": "wrong"},
     "ssl.keystore.location"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.key": "{key}"}, "without ssl.keystore.certificate.chain"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "{bundle}", "ssl.client.auth": "required"},
     "needs a trust store"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "{bundle}", "ssl.client.auth": "always"},
     "expected one of none, requested, required"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "{bundle}", "ssl.enabled.protocols": "TLSv1"},
     "ssl.enabled.protocols"),
    ({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "{p12}", "ssl.keystore.password": "nope"},
     "wrong password"),
])
def test_bad_settings_are_one_line_errors(ca, settings, message):
    paths = {"bundle": str(ca.server.bundle), "locked": str(ca.locked.bundle), "key": ca.server.key.read_text(),
             "p12": str(ca.pkcs12("broker", "store-secret"))}
    settings = {k: v.format(**paths) if k != "ssl.keystore.key" else paths["key"] for k, v in settings.items()}
    with pytest.raises(SslConfigError) as exc:
        server_context(ssl_settings(settings, "EXTERNAL"))
    assert message in str(exc.value) and "\n" not in str(exc.value).strip()


def test_kafka_cipher_suite_names_become_openssl_names():
    assert openssl_cipher_name("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256") == "ECDHE-RSA-AES128-GCM-SHA256"
    assert openssl_cipher_name("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384") == "ECDHE-ECDSA-AES256-GCM-SHA384"
    assert openssl_cipher_name("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256") == "ECDHE-RSA-CHACHA20-POLY1305"
    assert openssl_cipher_name("ECDHE-RSA-AES128-GCM-SHA256") == "ECDHE-RSA-AES128-GCM-SHA256"


def test_cipher_suites_restrict_tls12(ca):
    ctx = server_context(ssl_settings(pem_server(ca, **{
        "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"})))
    tls12 = [c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert tls12 == ["ECDHE-ECDSA-AES128-GCM-SHA256"]
    with pytest.raises(SslConfigError, match="ssl.cipher.suites"):
        server_context(ssl_settings(pem_server(ca, **{"ssl.cipher.suites": "TLS_NOPE_WITH_NOTHING"})))


async def _handshake(server: ssl.SSLContext, client: ssl.SSLContext, security: ListenerSecurity) -> str:
    """A real TLS handshake on loopback; the principal the listener gives the client."""
    principal: asyncio.Future = asyncio.get_running_loop().create_future()

    async def on_client(reader, writer):
        try:
            principal.set_result(security.authenticate(writer.get_extra_info("ssl_object")))
        except Exception as exc:  # noqa: BLE001 - handed to the test
            principal.set_exception(exc)
        writer.close()

    srv = await asyncio.start_server(on_client, "127.0.0.1", 0, ssl=server)
    port = srv.sockets[0].getsockname()[1]
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="127.0.0.1")
        result = await asyncio.wait_for(principal, 10)
        writer.close()
        return result
    finally:
        srv.close()


async def test_a_verified_client_certificate_is_the_principal(ca):
    settings = ssl_settings({**pem_server(ca), "ssl.client.auth": "required", "ssl.truststore.type": "PEM",
                             "ssl.truststore.location": str(ca.pem)})
    client = client_context(ssl_settings({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.pem),
                                          "ssl.keystore.type": "PEM", "ssl.keystore.location": str(ca.client.bundle)}))
    security = ListenerSecurity("SSL", server_context(settings))
    assert ca.client.subject == "CN=alice,OU=eng,O=kbroker"
    assert await _handshake(security.ssl_context, client, security) == "User:CN=alice,OU=eng,O=kbroker"
    mapped = ListenerSecurity("SSL", security.ssl_context, SslPrincipalMapper("RULE:^CN=(.*?),.*$/$1/U"))
    assert await _handshake(mapped.ssl_context, client, mapped) == "User:ALICE"
    # Server authentication only: the client presents nothing and is ANONYMOUS.
    one_way = ListenerSecurity("SSL", server_context(ssl_settings(pem_server(ca))))
    anonymous_client = client_context(ssl_settings({"ssl.truststore.type": "PEM",
                                                    "ssl.truststore.location": str(ca.pem)}))
    assert await _handshake(one_way.ssl_context, anonymous_client, one_way) == "User:ANONYMOUS"


async def test_endpoint_identification_checks_the_broker_name(ca):
    security = ListenerSecurity("SSL", server_context(ssl_settings(pem_server(ca))))
    trust = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.pem)}
    assert client_context(ssl_settings(trust)).check_hostname
    other = DevCA(ca.dir / "other")
    untrusted = client_context(ssl_settings({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(other.pem)}))
    with pytest.raises(ssl.SSLError):
        await _handshake(security.ssl_context, untrusted, security)
    no_check = client_context(ssl_settings({**trust, "ssl.endpoint.identification.algorithm": ""}))
    assert not no_check.check_hostname


# Kafka's SslPrincipalMapperTest.
RULES = ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
         "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,DEFAULT")


@pytest.mark.parametrize("name, expected", [
    ("CN=Duke,OU=ServiceUsers,O=Org,C=US", "Duke"),
    ("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US", "duke@sme"),
    ("cn=duke,ou=javasoft,o=sun", "DUKE"),
    ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),
])
def test_mapping_rules(name, expected):
    assert SslPrincipalMapper(RULES).principal_name(name) == expected


def test_mapping_rules_without_a_match_or_malformed():
    with pytest.raises(NoMatchingRule):
        SslPrincipalMapper("RULE:^CN=(.*)$/$1/").principal_name("OU=x")
    with pytest.raises(ValueError):
        parse_rules("RULE:^CN=(.*$/$1/")
    with pytest.raises(ValueError):
        parse_rules("RULES:nonsense")
    assert SslPrincipalMapper("").principal_name("CN=a") == "CN=a"


def test_a_dynamic_store_update_keeps_the_certificates_identity(ca):
    """AlterConfigs on a listener's stores (Kafka's SslFactory validation): the new stores must
    load, and the certificate keep its subject and alternative names unless
    ssl.allow.dn.changes / ssl.allow.san.changes say otherwise."""
    from security.ssl_factory import check_reconfiguration, dynamic_store_listener

    assert dynamic_store_listener("listener.name.external.ssl.keystore.location") == "EXTERNAL"
    assert dynamic_store_listener("listener.name.external.ssl.client.auth") is None  # not a store key
    assert dynamic_store_listener("ssl.keystore.location") is None  # per listener only
    old = ssl_settings(pem_server(ca), "EXTERNAL")
    same = ca.issue("same-identity", cn="broker1", hosts=("127.0.0.1", "localhost"))
    check_reconfiguration(old, ssl_settings(pem_server(ca, **{"ssl.keystore.location": str(same.bundle)})))
    renamed = ca.issue("renamed", cn="broker9", hosts=("127.0.0.1", "localhost"))
    with pytest.raises(SslConfigError, match="DistinguishedName does not match"):
        check_reconfiguration(old, ssl_settings(pem_server(ca, **{"ssl.keystore.location": str(renamed.bundle)})))
    check_reconfiguration(old, ssl_settings(pem_server(ca, **{"ssl.keystore.location": str(renamed.bundle),
                                                               "ssl.allow.dn.changes": "true"})))
    moved = ca.issue("moved", cn="broker1", hosts=("10.0.0.1",))
    with pytest.raises(SslConfigError, match="SubjectAltNames do not match"):
        check_reconfiguration(old, ssl_settings(pem_server(ca, **{"ssl.keystore.location": str(moved.bundle)})))
    with pytest.raises(SslConfigError):
        check_reconfiguration(old, ssl_settings(pem_server(ca, **{"ssl.keystore.location": str(ca.pem)})))
