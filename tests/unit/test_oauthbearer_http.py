"""SASL/OAUTHBEARER against an identity provider over http: the broker fetches the JSON Web Key
Set from ``sasl.oauthbearer.jwks.endpoint.url`` (and again after its refresh interval, which is
how a rotated signing key is found), and gets its own inter-broker token from
``sasl.oauthbearer.token.endpoint.url`` by the client-credentials grant. A real HTTP server on
loopback plays the provider."""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from security.oauthbearer import SECURED_HANDLERS, EndpointLogin, InvalidToken
from security.sasl import oauthbearer_validator


class Provider:
    """Signing keys published as a JWKS at /jwks, and a token endpoint at /token."""

    def __init__(self) -> None:
        self.keys: dict[str, rsa.RSAPrivateKey] = {}
        self.jwks_fetches = 0
        self.grants: list[tuple[str, dict]] = []  # (Authorization header, form)
        self.add_key("k1")

    def add_key(self, kid: str) -> None:
        self.keys[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def jwks(self) -> bytes:
        keys = [{**json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(k.public_key())), "kid": kid, "alg": "RS256"}
                for kid, k in self.keys.items()]
        return json.dumps({"keys": keys}).encode()

    def mint(self, kid: str = "k1", sub: str = "alice") -> str:
        now = int(time.time())
        return jwt.encode({"sub": sub, "iat": now, "exp": now + 60, "aud": "kbroker", "iss": "https://idp"},
                          self.keys[kid], algorithm="RS256", headers={"kid": kid})


@pytest.fixture
def provider():
    state = Provider()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            if self.path != "/jwks":
                return self.send_error(404)
            state.jwks_fetches += 1
            self._answer(state.jwks())

        def do_POST(self):  # noqa: N802
            form = dict(urllib.parse.parse_qsl(self.rfile.read(int(self.headers["Content-Length"])).decode()))
            state.grants.append((self.headers.get("Authorization", ""), form))
            if self.path != "/token" or form.get("grant_type") != "client_credentials":
                return self.send_error(400)
            self._answer(json.dumps({"access_token": state.mint(sub="broker-1"), "token_type": "Bearer",
                                     "expires_in": 60}).encode())

        def _answer(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    server.server_close()
    thread.join(5)


def validator(provider, refresh_ms: int = 3_600_000):
    return oauthbearer_validator({
        "listener.name.ext.sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.ext.oauthbearer.sasl.server.callback.handler.class": sorted(SECURED_HANDLERS)[0],
        "sasl.oauthbearer.jwks.endpoint.url": f"{provider.url}/jwks",
        "sasl.oauthbearer.jwks.endpoint.refresh.ms": str(refresh_ms),
        "sasl.oauthbearer.expected.audience": "kbroker", "sasl.oauthbearer.expected.issuer": "https://idp",
    }, "EXT")


def test_a_token_is_checked_against_the_key_set_the_provider_serves(provider):
    v = validator(provider)
    assert v.validate(provider.mint(sub="alice")).principal_name == "alice"
    assert v.validate(provider.mint(sub="bob")).principal_name == "bob"
    assert provider.jwks_fetches == 1  # fetched once, not per login
    forged = jwt.encode({"sub": "mallory", "exp": int(time.time()) + 60, "aud": "kbroker", "iss": "https://idp"},
                        rsa.generate_private_key(public_exponent=65537, key_size=2048), algorithm="RS256",
                        headers={"kid": "k1"})
    with pytest.raises(InvalidToken):
        v.validate(forged)


def test_a_rotated_signing_key_is_found_after_the_refresh_interval(provider):
    v = validator(provider, refresh_ms=200)
    provider.add_key("k2")
    token = provider.mint(kid="k2")
    deadline = time.monotonic() + 10
    while True:  # refused until the key set is fetched again, then accepted
        try:
            assert v.validate(token).principal_name == "alice"
            break
        except InvalidToken:
            assert time.monotonic() < deadline, "the rotated key was never fetched"
            time.sleep(0.05)
    assert provider.jwks_fetches >= 2


def test_the_broker_gets_its_own_token_by_the_client_credentials_grant(provider):
    token = EndpointLogin(f"{provider.url}/token", "broker-1", "s3cret", "kafka").token()
    assert validator(provider).validate(token).principal_name == "broker-1"
    (authorization, form), = provider.grants
    assert authorization == "Basic " + base64.b64encode(b"broker-1:s3cret").decode()
    assert form == {"grant_type": "client_credentials", "scope": "kafka"}
