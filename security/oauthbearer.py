"""SASL/OAUTHBEARER on the broker (RFC 7628, KIP-255, KIP-768): the client's bearer token is a JWT.

Owns both sides of the mechanism. The server side: the client's first message (``n,[a=<authzid>],^Aauth=Bearer
<jwt>^A...^A^A``), the validation of its token and the principal it names. Two validators, chosen
as Kafka chooses them, by ``listener.name.<listener>.oauthbearer.sasl.server.callback.handler.class``:

- Kafka's ``OAuthBearerValidatorCallbackHandler``: a signed JWT (RS*/PS*/ES*), its key from the JSON
  Web Key Set at ``sasl.oauthbearer.jwks.endpoint.url`` (a ``file:`` URL, re-read when the file
  changes, or http(s), fetched at start-up and again after ``sasl.oauthbearer.jwks.endpoint.refresh.ms``
  or for a key id it does not know); ``exp`` required, ``sasl.oauthbearer.expected.audience`` and
  ``sasl.oauthbearer.expected.issuer`` checked when set, ``sasl.oauthbearer.clock.skew.seconds`` of
  leeway; the principal is ``User:<sasl.oauthbearer.sub.claim.name>`` (default ``sub``).
- Kafka's ``OAuthBearerUnsecuredValidatorCallbackHandler`` (development only): an unsigned JWT
  (``alg: none``), with the JAAS options ``unsecuredValidatorPrincipalClaimName``,
  ``unsecuredValidatorRequiredScope`` and ``unsecuredValidatorAllowableClockSkewMs``.

The login side is the broker's own token for its peers' inter-broker listener, chosen as Kafka
chooses its login callback handler: ``OAuthBearerLoginCallbackHandler`` (KIP-768) when
``sasl.oauthbearer.token.endpoint.url`` is set (a ``file:`` URL holding a token, or an http(s)
endpoint answering the client-credentials grant for the JAAS ``clientId``/``clientSecret``),
else the unsecured login (``OAuthBearerUnsecuredLoginCallbackHandler``, unsigned tokens from
the JAAS line's ``unsecuredLoginStringClaim_sub`` and friends).

A token that fails gets Kafka's error challenge (``{"status":"invalid_token"}``); the client's
``^A`` answer to it then ends the exchange with SASL_AUTHENTICATION_FAILED. A valid token's
expiry bounds the session (KIP-368) when ``connections.max.reauth.ms`` is set.

Differs from Kafka: the unsecured validator is never the default (Kafka falls back to it when no
handler class is set); a listener that enables OAUTHBEARER must name its validator. Extensions
in the client's message are accepted and ignored, as Kafka's default handlers do. An http(s)
key set is fetched synchronously (at start-up, then at most once per refresh interval).
"""

from __future__ import annotations

import base64
import json
import os
import re
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field

MECHANISM = "OAUTHBEARER"
SECURED_HANDLERS = frozenset({
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler",
})
UNSECURED_HANDLER = ("org.apache.kafka.common.security.oauthbearer.internals.unsecured."
                     "OAuthBearerUnsecuredValidatorCallbackHandler")
SIGNED_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")
INVALID_TOKEN = json.dumps({"status": "invalid_token"}, separators=(",", ":"))
KEYS = ("sasl.oauthbearer.jwks.endpoint.url", "sasl.oauthbearer.expected.audience",
        "sasl.oauthbearer.expected.issuer", "sasl.oauthbearer.clock.skew.seconds",
        "sasl.oauthbearer.sub.claim.name", "sasl.oauthbearer.scope.claim.name",
        "sasl.oauthbearer.jwks.endpoint.refresh.ms", "sasl.oauthbearer.token.endpoint.url",
        "sasl.login.callback.handler.class")
_FIRST = re.compile(rb"^n,(?:a=([^,]*))?,\x01((?:[A-Za-z]+=[\x21-\x7e \t]*\x01)*)\x01$")


class InvalidToken(Exception):
    """The bearer token is not acceptable (the reason goes to the log, not the client)."""


@dataclass(frozen=True)
class ValidatedToken:
    principal_name: str
    expires_at: float  # seconds since the epoch


# --- the key set --------------------------------------------------------------------------------

class JwksSource:
    """The JSON Web Key Set at a ``file:`` or http(s) URL, loaded again when it may have changed."""

    def __init__(self, url: str, refresh_s: float = 3600.0) -> None:
        self.url = url
        self.refresh_s = refresh_s
        self.path = urllib.request.url2pathname(url[len("file:"):]) if url.startswith("file:") else None
        self._stamp: float | None = None
        self._loaded_at = 0.0
        self._keys: dict[str | None, object] = {}
        self._load()

    def _load(self) -> None:
        import jwt

        if self.path is not None:
            self._stamp = os.stat(self.path).st_mtime
            with open(self.path, "rb") as f:
                raw = f.read()
        else:
            with urllib.request.urlopen(self.url, timeout=5) as r:  # noqa: S310 - the operator's URL
                raw = r.read()
        keys = jwt.PyJWKSet.from_json(raw.decode()).keys
        self._keys = {k.key_id: k for k in keys}
        self._loaded_at = time.monotonic()

    def _stale(self) -> bool:
        if self.path is not None:
            try:
                return os.stat(self.path).st_mtime != self._stamp
            except OSError:
                return False
        return time.monotonic() - self._loaded_at >= self.refresh_s

    def key(self, kid: str | None):
        """The signing key for ``kid`` (a key set of one key also serves tokens without one)."""
        # An unknown key id may be a rotation: look again, but not more often than this (a
        # fetch over http(s) blocks the event loop, and anyone can send a token with any kid).
        retry_s = 1.0 if self.path is not None else 30.0
        if self._stale() or (kid not in self._keys and time.monotonic() - self._loaded_at > retry_s):
            try:
                self._load()
            except (OSError, ValueError) as exc:
                raise InvalidToken(f"the JWKS at {self.url} cannot be read: {exc}") from None
        if kid in self._keys:
            return self._keys[kid]
        if kid is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        raise InvalidToken(f"no key with id {kid!r} in the JWKS at {self.url}")


# --- validators ---------------------------------------------------------------------------------

@dataclass
class SignedJwtValidator:
    """Kafka's ``OAuthBearerValidatorCallbackHandler`` (its ``BrokerJwtValidator``)."""

    jwks: JwksSource
    audience: tuple[str, ...] = ()
    issuer: str | None = None
    clock_skew_s: int = 30
    sub_claim: str = "sub"

    def validate(self, token: str) -> ValidatedToken:
        import jwt

        try:
            header = jwt.get_unverified_header(token)
            alg = header.get("alg")
            if alg not in SIGNED_ALGORITHMS:
                raise InvalidToken(f"algorithm {alg!r} is not accepted")
            claims = jwt.decode(token, self.jwks.key(header.get("kid")), algorithms=[alg],
                                audience=list(self.audience) or None, issuer=self.issuer,
                                leeway=self.clock_skew_s,
                                options={"require": ["exp"], "verify_aud": bool(self.audience)})
        except jwt.PyJWTError as exc:
            raise InvalidToken(str(exc)) from None
        return ValidatedToken(_principal_name(claims, self.sub_claim), float(claims["exp"]))


@dataclass
class UnsecuredJwtValidator:
    """Kafka's ``OAuthBearerUnsecuredValidatorCallbackHandler``: unsigned tokens, for development."""

    principal_claim: str = "sub"
    required_scope: tuple[str, ...] = ()
    clock_skew_s: float = 0.0
    scope_claim: str = "scope"

    def validate(self, token: str) -> ValidatedToken:
        parts = token.split(".")
        if len(parts) != 3 or parts[2]:
            raise InvalidToken("an unsecured token has three parts and no signature")
        header, claims = _json_part(parts[0]), _json_part(parts[1])
        if header.get("alg") != "none":
            raise InvalidToken(f"an unsecured token's algorithm must be 'none', not {header.get('alg')!r}")
        exp = claims.get("exp")
        if not isinstance(exp, (int, float)):
            raise InvalidToken("the token has no expiration time (exp)")
        if exp + self.clock_skew_s < time.time():
            raise InvalidToken("the token has expired")
        scope = claims.get(self.scope_claim, [])
        granted = set(scope.split() if isinstance(scope, str) else scope)
        missing = [s for s in self.required_scope if s not in granted]
        if missing:
            raise InvalidToken(f"the token's scope lacks {missing}")
        return ValidatedToken(_principal_name(claims, self.principal_claim), float(exp))


def _json_part(part: str) -> dict:
    try:
        value = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    except (ValueError, UnicodeDecodeError):
        raise InvalidToken("the token is not base64url-encoded JSON") from None
    if not isinstance(value, dict):
        raise InvalidToken("the token's header and claims must be JSON objects")
    return value


def _principal_name(claims: Mapping, claim: str) -> str:
    name = claims.get(claim)
    if not isinstance(name, str) or not name.strip():
        raise InvalidToken(f"the token has no principal claim {claim!r}")
    return name


Validator = SignedJwtValidator | UnsecuredJwtValidator


# --- the login side (the broker's own token for its peers) ------------------------------------------

UNSECURED_LOGIN_PREFIXES = ("unsecuredLoginStringClaim_", "unsecuredLoginNumberClaim_", "unsecuredLoginListClaim_")
LOGIN_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"


@dataclass
class UnsecuredLogin:
    """Kafka's ``OAuthBearerUnsecuredLoginCallbackHandler``: an unsigned JWT (``alg: none``) made
    from the JAAS options ``unsecuredLogin{String,Number,List}Claim_<name>``,
    ``unsecuredLoginPrincipalClaimName`` (``sub``) and ``unsecuredLoginLifetimeSeconds`` (3600)."""

    claims: dict
    lifetime_s: int = 3600

    @classmethod
    def from_jaas(cls, options: Mapping[str, str]) -> UnsecuredLogin:
        claims: dict = {}
        for key, value in options.items():
            for prefix in UNSECURED_LOGIN_PREFIXES:
                if key.startswith(prefix):
                    name = key[len(prefix):]
                    claims[name] = (float(value) if "Number" in prefix else
                                    (value.split(value[0])[1:] if value else []) if "List" in prefix else value)
        principal = options.get("unsecuredLoginPrincipalClaimName", "sub")
        if not isinstance(claims.get(principal), str):
            raise ValueError(f"OAUTHBEARER's unsecured login needs unsecuredLoginStringClaim_{principal}=\"<name>\" "
                             "in its sasl.jaas.config")
        return cls(claims, int(options.get("unsecuredLoginLifetimeSeconds", "3600")))

    def token(self) -> str:
        now = int(time.time())
        claims = {"iat": now, "exp": now + self.lifetime_s, **self.claims}
        return f"{_b64url({'alg': 'none'})}.{_b64url(claims)}."


@dataclass
class EndpointLogin:
    """Kafka's ``OAuthBearerLoginCallbackHandler`` (KIP-768): the token from
    ``sasl.oauthbearer.token.endpoint.url``, a ``file:`` URL (a token made elsewhere, re-read at
    each login) or http(s), where the JAAS ``clientId`` / ``clientSecret`` (and ``scope``) get one
    by the client-credentials grant."""

    url: str
    client_id: str = ""
    client_secret: str = ""
    scope: str = ""

    def token(self) -> str:
        if self.url.startswith("file:"):
            with urllib.request.urlopen(self.url, timeout=10) as f:  # noqa: S310  (a configured file)
                return f.read().decode().strip()
        form = {"grant_type": "client_credentials", **({"scope": self.scope} if self.scope else {})}
        basic = base64.b64encode(f"{self.client_id}:{self.client_secret}".encode()).decode()
        req = urllib.request.Request(self.url, data=urllib.parse.urlencode(form).encode(), headers={
            "Authorization": f"Basic {basic}", "Content-Type": "application/x-www-form-urlencoded"})
        with urllib.request.urlopen(req, timeout=10) as f:  # noqa: S310  (the configured endpoint)
            return json.loads(f.read())["access_token"]


def login_for(given: Mapping[str, str], listener: str, jaas_options: Mapping[str, str]) -> UnsecuredLogin | EndpointLogin:
    """The broker's token source for ``listener``, as Kafka picks its login callback handler."""
    prefix = f"listener.name.{listener.lower()}.oauthbearer."

    def setting(name: str) -> str | None:
        return given.get(prefix + name, given.get(name))

    handler = setting("sasl.login.callback.handler.class")
    url = setting("sasl.oauthbearer.token.endpoint.url")
    if handler == LOGIN_HANDLER or url:
        if not url:
            raise ValueError(f"listener {listener}: {LOGIN_HANDLER.rsplit('.', 1)[1]} needs "
                             "sasl.oauthbearer.token.endpoint.url")
        return EndpointLogin(url, jaas_options.get("clientId", ""), jaas_options.get("clientSecret", ""),
                             jaas_options.get("scope", ""))
    return UnsecuredLogin.from_jaas(jaas_options)


def client_first_message(token: str) -> bytes:
    """RFC 7628's initial client response, as Kafka's OAuthBearerClientInitialResponse writes it."""
    return b"n,,\x01auth=Bearer " + token.encode() + b"\x01\x01"


def _b64url(value: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(value, separators=(",", ":")).encode()).rstrip(b"=").decode()


# --- configuration --------------------------------------------------------------------------------

def is_oauthbearer_key(rest: str) -> bool:
    """A key (after any ``listener.name.<listener>.`` prefix) this mechanism reads."""
    return (rest in KEYS or rest.startswith("oauthbearer.sasl.oauthbearer.")
            or rest in ("sasl.server.callback.handler.class", "oauthbearer.sasl.server.callback.handler.class",
                        "oauthbearer.sasl.login.callback.handler.class"))


def validator_for(given: Mapping[str, str], listener: str, jaas_options: Mapping[str, str]) -> Validator:
    """The listener's validator, or ValueError (one line) for a setting that cannot work."""
    prefix = f"listener.name.{listener.lower()}.oauthbearer."

    def setting(name: str, default: str | None = None) -> str | None:
        return given.get(prefix + name, given.get(name, default))

    handler = setting("sasl.server.callback.handler.class")
    if handler in SECURED_HANDLERS:
        url = setting("sasl.oauthbearer.jwks.endpoint.url")
        if not url:
            raise ValueError(f"listener {listener}: OAUTHBEARER's {handler.rsplit('.', 1)[1]} needs "
                             "sasl.oauthbearer.jwks.endpoint.url (a file: or https: URL of the JSON Web Key Set)")
        try:
            jwks = JwksSource(url, int(setting("sasl.oauthbearer.jwks.endpoint.refresh.ms", "3600000")) / 1000)
        except (OSError, ValueError) as exc:
            raise ValueError(f"listener {listener}: cannot load the JWKS at {url}: {exc}") from None
        audience = tuple(a.strip() for a in (setting("sasl.oauthbearer.expected.audience") or "").split(",")
                         if a.strip())
        return SignedJwtValidator(jwks, audience, setting("sasl.oauthbearer.expected.issuer") or None,
                                  int(setting("sasl.oauthbearer.clock.skew.seconds", "30")),
                                  setting("sasl.oauthbearer.sub.claim.name", "sub"))
    if handler == UNSECURED_HANDLER:
        return UnsecuredJwtValidator(
            jaas_options.get("unsecuredValidatorPrincipalClaimName", "sub"),
            tuple(jaas_options.get("unsecuredValidatorRequiredScope", "").split()),
            int(jaas_options.get("unsecuredValidatorAllowableClockSkewMs", "0")) / 1000,
            jaas_options.get("unsecuredValidatorScopeClaimName", "scope"))
    raise ValueError(f"listener {listener}: OAUTHBEARER needs {prefix}sasl.server.callback.handler.class="
                     f"{sorted(SECURED_HANDLERS)[0]} (with sasl.oauthbearer.jwks.endpoint.url), or "
                     f"{UNSECURED_HANDLER} for development")


# --- the mechanism ---------------------------------------------------------------------------------

@dataclass
class OAuthBearerServer:
    """One exchange: the client's first message, or after a refusal the client's ``^A``."""

    validator: Validator
    complete: bool = False
    authorization_id: str = ""
    expires_at: float | None = None
    error: str | None = field(default=None, repr=False)  # the challenge sent for an invalid token
    reason: str | None = None  # why it was invalid (logged, never sent)

    def evaluate(self, token: bytes) -> bytes:
        from .sasl import AuthenticationFailed

        if self.error is not None:  # the client's answer to our error challenge
            raise AuthenticationFailed(self.error, detail=self.reason)
        m = _FIRST.match(token)
        if m is None:
            raise AuthenticationFailed("Invalid OAUTHBEARER client first message")
        pairs = dict(p.split(b"=", 1) for p in m.group(2).split(b"\x01") if p)
        auth = pairs.get(b"auth", b"").decode("ascii", "replace")
        if not auth.startswith("Bearer "):
            raise AuthenticationFailed("Invalid OAUTHBEARER client first message: no bearer token")
        try:
            valid = self.validator.validate(auth[len("Bearer "):].strip())
        except InvalidToken as exc:
            self.error, self.reason = INVALID_TOKEN, str(exc)
            return INVALID_TOKEN.encode()
        authzid = m.group(1).decode() if m.group(1) else ""
        if authzid and authzid != valid.principal_name:
            raise AuthenticationFailed(f"Authentication failed: Client requested an authorization id ({authzid}) "
                                       f"that is different from the token's principal name ({valid.principal_name})")
        self.authorization_id, self.expires_at, self.complete = valid.principal_name, valid.expires_at, True
        return b""
