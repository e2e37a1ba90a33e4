"""SASL/OAUTHBEARER's server side (security/oauthbearer.py) without a network: signed tokens
checked against a JWKS file, the unsecured validator, the error challenge and its end, and the
session a token's expiry bounds."""

from __future__ import annotations

import json
import time

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from security import oauthbearer
from security.oauthbearer import INVALID_TOKEN, SECURED_HANDLERS, UNSECURED_HANDLER
from security.sasl import AuthenticationFailed, SaslServerAuthenticator, SaslServerConfig, check_listener

SECURED = sorted(SECURED_HANDLERS)[0]


def first_message(token: str, authzid: str = "") -> bytes:
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01\x01".encode()


@pytest.fixture
def issuer(tmp_path):
    """An RSA signing key, its JWKS file and a token minter."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [{**jwk, "kid": "k1", "alg": "RS256", "use": "sig"}]}))

    def mint(sub="alice", lifetime=60, kid="k1", signing_key=key, **claims):
        now = int(time.time())
        payload = {"sub": sub, "iat": now, "exp": now + lifetime, "aud": "kbroker", "iss": "https://idp", **claims}
        return jwt.encode(payload, signing_key, algorithm="RS256", headers={"kid": kid})

    mint.jwks_url = jwks.as_uri()
    return mint


def listener_config(issuer, **extra) -> dict:
    return {"listener.name.ext.sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.ext.oauthbearer.sasl.server.callback.handler.class": SECURED,
            "sasl.oauthbearer.jwks.endpoint.url": issuer.jwks_url,
            "sasl.oauthbearer.expected.audience": "kbroker", "sasl.oauthbearer.expected.issuer": "https://idp",
            **extra}


def login(validator, message: bytes, max_reauth_ms: int = 0) -> SaslServerAuthenticator:
    a = SaslServerAuthenticator(SaslServerConfig(("OAUTHBEARER",), {}, lambda _u, _m: None,
                                                 max_reauth_ms={"OAUTHBEARER": max_reauth_ms},
                                                 oauthbearer=validator))
    assert a.handshake("OAUTHBEARER")
    assert a.authenticate(message) == b""
    return a


def refused(validator, message: bytes) -> str:
    """The challenge an invalid token gets, then the failure the client's ^A answer ends in."""
    a = SaslServerAuthenticator(SaslServerConfig(("OAUTHBEARER",), {}, lambda _u, _m: None, oauthbearer=validator))
    a.handshake("OAUTHBEARER")
    assert a.authenticate(message) == INVALID_TOKEN.encode()
    assert not a.complete
    with pytest.raises(AuthenticationFailed) as failed:
        a.authenticate(b"\x01")
    assert str(failed.value) == INVALID_TOKEN
    return failed.value.detail


def test_a_signed_token_names_the_principal(issuer):
    from security.sasl import oauthbearer_validator

    check_listener(listener_config(issuer), "EXT")
    v = oauthbearer_validator(listener_config(issuer), "EXT")
    a = login(v, first_message(issuer()))
    assert a.complete and a.principal == "User:alice"
    assert login(v, first_message(issuer(sub="bob"), authzid="bob")).principal == "User:bob"
    # a session ends with its token, when sessions are bounded at all
    assert 55_000 <= login(v, first_message(issuer(lifetime=60)), max_reauth_ms=3_600_000).session_lifetime_ms <= 60_000
    assert login(v, first_message(issuer(lifetime=60)), max_reauth_ms=5_000).session_lifetime_ms == 5_000
    assert login(v, first_message(issuer(lifetime=60))).session_lifetime_ms == 0
    other = oauthbearer_validator(listener_config(issuer, **{"sasl.oauthbearer.sub.claim.name": "client_id"}), "EXT")
    assert login(other, first_message(issuer(client_id="svc-7"))).principal == "User:svc-7"


def test_bad_tokens_get_the_error_challenge(issuer):
    from security.sasl import oauthbearer_validator

    v = oauthbearer_validator(listener_config(issuer), "EXT")
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    for token, why in [(issuer(lifetime=-120), "expired"), (issuer(aud="someone-else"), "audience"),
                       (issuer(iss="https://evil"), "issuer"), (issuer(kid="k9"), "k9"),
                       (issuer(signing_key=stranger), "Signature"), (issuer(sub=""), "principal claim"),
                       (jwt.encode({"sub": "alice", "exp": time.time() + 60}, "", algorithm="none"), "algorithm")]:
        assert why.lower() in refused(v, first_message(token)).lower(), why
    with pytest.raises(AuthenticationFailed, match="authorization id"):
        login(v, first_message(issuer(), authzid="mallory"))
    with pytest.raises(AuthenticationFailed, match="client first message"):
        login(v, b"n,,auth=Bearer x")


def test_the_jwks_file_is_read_again_when_it_changes(issuer, tmp_path):
    from security.sasl import oauthbearer_validator

    v = oauthbearer_validator(listener_config(issuer), "EXT")
    rotated = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(rotated.public_key()))
    path = tmp_path / "jwks.json"
    keys = json.loads(path.read_text())["keys"]
    path.write_text(json.dumps({"keys": keys + [{**jwk, "kid": "k2", "alg": "RS256"}]}))
    assert login(v, first_message(issuer(kid="k2", signing_key=rotated))).principal == "User:alice"


def test_the_unsecured_validator_only_when_named():
    with pytest.raises(ValueError, match="OAUTHBEARER needs"):
        check_listener({"sasl.enabled.mechanisms": "OAUTHBEARER"}, "DEV")
    given = {"sasl.enabled.mechanisms": "OAUTHBEARER",
             "listener.name.dev.oauthbearer.sasl.server.callback.handler.class": UNSECURED_HANDLER,
             "listener.name.dev.oauthbearer.sasl.jaas.config":
                 "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                 'unsecuredValidatorRequiredScope="kafka";'}
    from security.sasl import oauthbearer_validator

    v = oauthbearer_validator(given, "DEV")
    assert isinstance(v, oauthbearer.UnsecuredJwtValidator)
    token = jwt.encode({"sub": "dev", "exp": time.time() + 60, "scope": "kafka other"}, "", algorithm="none")
    assert login(v, first_message(token)).principal == "User:dev"
    no_scope = jwt.encode({"sub": "dev", "exp": time.time() + 60}, "", algorithm="none")
    assert "scope" in refused(v, first_message(no_scope))
    no_exp = jwt.encode({"sub": "dev", "scope": "kafka"}, "", algorithm="none")
    assert "exp" in refused(v, first_message(no_exp))


def test_the_unsecured_login_makes_a_token_the_unsecured_validator_accepts():
    login = oauthbearer.UnsecuredLogin.from_jaas({
        "unsecuredLoginStringClaim_sub": "broker-1", "unsecuredLoginListClaim_scope": " kafka admin",
        "unsecuredLoginNumberClaim_level": "3", "unsecuredLoginLifetimeSeconds": "60"})
    token = login.token()
    claims = jwt.decode(token, options={"verify_signature": False})
    assert (claims["sub"], claims["scope"], claims["level"], claims["exp"] - claims["iat"]) == \
        ("broker-1", ["kafka", "admin"], 3.0, 60)
    validated = oauthbearer.UnsecuredJwtValidator(required_scope=("kafka",)).validate(token)
    assert validated.principal_name == "broker-1"
    server = oauthbearer.OAuthBearerServer(oauthbearer.UnsecuredJwtValidator())
    assert server.evaluate(oauthbearer.client_first_message(token)) == b""
    assert server.complete and server.authorization_id == "broker-1"
    with pytest.raises(ValueError, match="unsecuredLoginStringClaim_sub"):
        oauthbearer.UnsecuredLogin.from_jaas({})


def test_the_login_handler_reads_a_token_file_named_by_the_endpoint_url(tmp_path):
    (tmp_path / "token").write_text("header.claims.signature\n")
    given = {"listener.name.internal.oauthbearer.sasl.login.callback.handler.class": oauthbearer.LOGIN_HANDLER,
             "sasl.oauthbearer.token.endpoint.url": (tmp_path / "token").as_uri()}
    assert oauthbearer.login_for(given, "INTERNAL", {}).token() == "header.claims.signature"
    with pytest.raises(ValueError, match="token.endpoint.url"):
        oauthbearer.login_for({"sasl.login.callback.handler.class": oauthbearer.LOGIN_HANDLER}, "INTERNAL", {})
