"""SASL on a connection: Kafka's ``SaslServerAuthenticator`` state machine and its mechanisms.

Owns what a SASL_PLAINTEXT or SASL_SSL connection may do before it has authenticated, as a
table (:data:`ALLOWED`): ApiVersions and SaslHandshake first, then SaslAuthenticate until the
mechanism is done; any other request closes the connection, as Kafka's
``IllegalSaslStateException`` does. Mechanisms: PLAIN (users from the listener's JAAS line,
``user_<name>="<password>"``, Kafka's ``PlainServerCallbackHandler``), SCRAM-SHA-256/512
(the credentials AlterUserScramCredentials stores, verified with ``scramp``) and OAUTHBEARER
(JWTs, :mod:`.oauthbearer`).

Failures answer SASL_AUTHENTICATION_FAILED with Kafka's generic messages (nothing says whether
the user exists); the connection then closes after ``connection.failed.authentication.delay.ms``.

The client side (:class:`SaslClient`) is the broker's own login to its peers' SASL
inter-broker listener, with ``sasl.mechanism.inter.broker.protocol`` and the ``username`` and
``password`` of that listener's JAAS line for the mechanism, as a Kafka broker logs in; with
OAUTHBEARER, the token of the listener's login handler (:func:`.oauthbearer.login_for`: the
unsecured login's claims from the JAAS line, or ``sasl.oauthbearer.token.endpoint.url``).

Re-authentication (KIP-368): with ``connections.max.reauth.ms`` (globally, or per listener and
mechanism as ``listener.name.<listener>.<mechanism>.connections.max.reauth.ms``) a completed
login is a session of that length, told to the client in SaslAuthenticate v1+. A SaslHandshake
on an authenticated connection starts a re-authentication, with the same mechanism and ending
in the same principal (else it fails and the connection closes); a credential deleted since
then fails it. Past its session a connection that has not re-authenticated is closed at its
next request, as Kafka's ``Processor`` does.

OAUTHBEARER's tokens are validated by :mod:`.oauthbearer`.

Token framing follows the SaslHandshake version, as Kafka's: after v1 the tokens travel in
SaslAuthenticate requests; after v0 (pre-1.0 clients) each token is a bare size-prefixed frame
each way, a failure has no answer and only closes the connection, and the session's end closes
it because such a client cannot re-authenticate.

Differs from Kafka: no GSSAPI (nor the pre-KIP-43 GSSAPI token without any handshake).
"""

from __future__ import annotations

import base64
import enum
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from . import oauthbearer
from .principal import user

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
PLAIN = "PLAIN"
SCRAM_MECHANISMS = {"SCRAM-SHA-256": "SCRAM_SHA_256", "SCRAM-SHA-512": "SCRAM_SHA_512"}
SUPPORTED_MECHANISMS = (PLAIN, *SCRAM_MECHANISMS, oauthbearer.MECHANISM)


class SaslState(enum.Enum):
    HANDSHAKE_OR_VERSIONS = "handshake_or_versions"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"
    FAILED = "failed"


# Requests a connection may send in each state (Kafka's SaslServerAuthenticator).
ALLOWED: dict[SaslState, frozenset[int]] = {
    SaslState.HANDSHAKE_OR_VERSIONS: frozenset({API_VERSIONS, SASL_HANDSHAKE}),
    SaslState.AUTHENTICATE: frozenset({SASL_AUTHENTICATE}),
    SaslState.COMPLETE: frozenset(),  # everything: the gate is open
    SaslState.FAILED: frozenset(),
}


class AuthenticationFailed(Exception):
    """The client's credentials are wrong; the message is the one Kafka sends back, the
    ``detail`` (if any) only goes to the broker's log."""

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail


class IllegalSaslState(Exception):
    """A request the SASL state machine does not allow now (the connection is closed)."""


# --- JAAS --------------------------------------------------------------------------------------

_JAAS_OPTION = re.compile(r'\s*([A-Za-z0-9_.\-]+)\s*=\s*(?:"((?:\\.|[^"\\])*)"|([^\s;"]+))')


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """``<LoginModule> <flag> key="value" ...;`` (one entry, as Kafka's ``sasl.jaas.config``):
    (login module class, options)."""
    text = text.strip()
    m = re.match(r"([A-Za-z0-9_.$]+)\s+(required|requisite|sufficient|optional)\b", text)
    if m is None or not text.endswith(";"):
        raise ValueError("expected '<LoginModule> required key=\"value\" ...;'")
    options, pos, body = {}, 0, text[m.end():-1]
    while pos < len(body.rstrip()):
        o = _JAAS_OPTION.match(body, pos)
        if o is None:
            raise ValueError(f"cannot read the JAAS options at {body[pos:pos + 30]!r}")
        value = o.group(2) if o.group(2) is not None else o.group(3)
        options[o.group(1)] = re.sub(r"\\(.)", r"\1", value)
        pos = o.end()
    return m.group(1), options


# --- configuration ---------------------------------------------------------------------------------

SASL_DEFAULTS = {"sasl.enabled.mechanisms": "GSSAPI", "sasl.mechanism.inter.broker.protocol": "GSSAPI"}
MAX_REAUTH = "connections.max.reauth.ms"  # 0: sessions never expire (Kafka's default)
LISTENER_PREFIX = "listener.name."
# Kafka refuses a re-authentication that starts within a second of the previous one.
MIN_REAUTH_INTERVAL_S = 1.0


def is_sasl_key(name: str) -> bool:
    """``sasl.enabled.mechanisms`` and the like, globally or per listener, and a listener's
    ``listener.name.<listener>.<mechanism>.sasl.jaas.config``."""
    if name in SASL_DEFAULTS or name in ("sasl.jaas.config", MAX_REAUTH) or oauthbearer.is_oauthbearer_key(name):
        return True
    if not name.startswith(LISTENER_PREFIX):
        return False
    rest = name[len(LISTENER_PREFIX):].partition(".")[2]
    return (rest in SASL_DEFAULTS or rest.endswith((".sasl.jaas.config", f".{MAX_REAUTH}"))
            or oauthbearer.is_oauthbearer_key(rest))


def enabled_mechanisms(given: Mapping[str, str], listener: str) -> tuple[str, ...]:
    raw = given.get(f"{LISTENER_PREFIX}{listener.lower()}.sasl.enabled.mechanisms",
                    given.get("sasl.enabled.mechanisms", SASL_DEFAULTS["sasl.enabled.mechanisms"]))
    return tuple(m.strip().upper() for m in raw.split(",") if m.strip())


def jaas_config(given: Mapping[str, str], listener: str, mechanism: str) -> str | None:
    """The JAAS line of ``mechanism`` on ``listener`` (Kafka reads it only per listener and
    mechanism on a broker; ``sasl.jaas.config`` is the fallback)."""
    return given.get(f"{LISTENER_PREFIX}{listener.lower()}.{mechanism.lower()}.sasl.jaas.config",
                     given.get("sasl.jaas.config"))


def max_reauth_ms(given: Mapping[str, str], listener: str, mechanism: str) -> int:
    """The session length of a login with ``mechanism`` on ``listener`` (0: no expiry), or
    ValueError."""
    name = f"{LISTENER_PREFIX}{listener.lower()}.{mechanism.lower()}.{MAX_REAUTH}"
    raw = given.get(name, given.get(MAX_REAUTH, "0"))
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"Invalid value {raw} for configuration {MAX_REAUTH}: must be a number of "
                         "milliseconds, at least 0")
    return value


def plain_users(jaas: str | None) -> dict[str, str]:
    """PLAIN's users: the JAAS line's ``user_<name>="<password>"`` options."""
    if not jaas:
        return {}
    _, options = parse_jaas(jaas)
    return {k[len("user_"):]: v for k, v in options.items() if k.startswith("user_")}


def check_listener(given: Mapping[str, str], listener: str) -> tuple[str, ...]:
    """The listener's mechanisms, or ValueError (one line) for a setting that cannot work."""
    mechanisms = enabled_mechanisms(given, listener)
    if not mechanisms:
        raise ValueError(f"listener {listener}: sasl.enabled.mechanisms is empty")
    unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
    if unsupported:
        raise ValueError(f"listener {listener}: SASL mechanism {unsupported[0]} is not supported (set "
                         f"sasl.enabled.mechanisms to some of {', '.join(SUPPORTED_MECHANISMS)})")
    if PLAIN in mechanisms:
        jaas = jaas_config(given, listener, PLAIN)
        if not jaas:
            raise ValueError(f"listener {listener}: PLAIN needs listener.name.{listener.lower()}.plain."
                             "sasl.jaas.config with its users (user_<name>=\"<password>\")")
        try:
            plain_users(jaas)
        except ValueError as exc:
            raise ValueError(f"listener {listener}: invalid sasl.jaas.config for PLAIN: {exc}") from None
    for mechanism in mechanisms:
        max_reauth_ms(given, listener, mechanism)
    if oauthbearer.MECHANISM in mechanisms:
        oauthbearer_validator(given, listener)
    return mechanisms


def oauthbearer_validator(given: Mapping[str, str], listener: str) -> oauthbearer.Validator:
    """The listener's OAUTHBEARER token validator (its JAAS line holds the unsecured one's
    options), or ValueError."""
    jaas = jaas_config(given, listener, oauthbearer.MECHANISM)
    try:
        options = parse_jaas(jaas)[1] if jaas else {}
    except ValueError as exc:
        raise ValueError(f"listener {listener}: invalid sasl.jaas.config for OAUTHBEARER: {exc}") from None
    return oauthbearer.validator_for(given, listener, options)


def inter_broker_client(given: Mapping[str, str], listener: str) -> SaslClient:
    """The broker's own credentials for ``listener`` (its inter-broker one), or ValueError."""
    mechanism = given.get("sasl.mechanism.inter.broker.protocol",
                          SASL_DEFAULTS["sasl.mechanism.inter.broker.protocol"]).strip().upper()
    if mechanism not in (PLAIN, *SCRAM_MECHANISMS, oauthbearer.MECHANISM):
        raise ValueError(f"sasl.mechanism.inter.broker.protocol={mechanism} is not supported (use one of "
                         f"{', '.join((PLAIN, *SCRAM_MECHANISMS, oauthbearer.MECHANISM))})")
    if mechanism not in enabled_mechanisms(given, listener):
        raise ValueError(f"sasl.mechanism.inter.broker.protocol={mechanism} is not enabled on the inter-broker "
                         f"listener {listener}")
    jaas = jaas_config(given, listener, mechanism)
    options = parse_jaas(jaas)[1] if jaas else {}
    if mechanism == oauthbearer.MECHANISM:
        try:
            return SaslClient(mechanism, token_source=oauthbearer.login_for(given, listener, options))
        except ValueError as exc:
            raise ValueError(f"listener.name.{listener.lower()}.oauthbearer.sasl.jaas.config: {exc}") from None
    if not options.get("username") or "password" not in options:
        raise ValueError(f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config needs the "
                         "broker's own username=\"...\" password=\"...\" to log in to its peers")
    return SaslClient(mechanism, options["username"], options["password"])


# --- mechanisms ----------------------------------------------------------------------------------

class PlainServer:
    """RFC 4616: one token ``authzid NUL authcid NUL passwd``; users from the JAAS options."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self.users = users
        self.complete = False
        self.authorization_id = ""

    def evaluate(self, token: bytes) -> bytes:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise AuthenticationFailed(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, username, password = (p.decode("utf-8", "replace") for p in parts)
        if not username:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        expected = self.users.get(username)
        if expected is None or not _equal(expected, password):
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id that is "
                                       "different from username")
        self.authorization_id, self.complete = username, True
        return b""


class ScramServer:
    """RFC 5802 through ``scramp``, against stored {salt, stored_key, server_key, iterations}."""

    def __init__(self, mechanism: str, credential_of: Callable[[str], dict | None]) -> None:
        from scramp import ScramMechanism

        self.mechanism = mechanism
        self.credential_of = credential_of
        self.server = ScramMechanism(mechanism).make_server(self._auth_info)
        self.step = 0
        self.complete = False
        self.authorization_id = ""

    def _auth_info(self, sasl_name: str):
        username = sasl_name.replace("=2C", ",").replace("=3D", "=")
        credential = self.credential_of(username)
        if credential is None:
            raise AuthenticationFailed(self._failure())
        self.authorization_id = username
        return (base64.b64decode(credential["salt"]), base64.b64decode(credential["stored_key"]),
                base64.b64decode(credential["server_key"]), int(credential["iterations"]))

    def _failure(self) -> str:
        return (f"Authentication failed during authentication due to invalid credentials with SASL "
                f"mechanism {self.mechanism}")

    def evaluate(self, token: bytes) -> bytes:
        from scramp import ScramException

        try:
            if self.step == 0:
                self.step = 1
                self.server.set_client_first(token.decode("utf-8"))
                return self.server.get_server_first().encode()
            if self.step == 1:
                self.step = 2
                self.server.set_client_final(token.decode("utf-8"))
                self.complete = True
                return self.server.get_server_final().encode()
        except (ScramException, UnicodeDecodeError, ValueError) as exc:  # a bad proof or a malformed message
            raise AuthenticationFailed(self._failure(), detail=str(exc)) from None
        raise AuthenticationFailed("Unexpected SASL token after the SCRAM exchange")


def _equal(a: str, b: str) -> bool:
    import hmac

    return hmac.compare_digest(a.encode(), b.encode())


class SaslClient:
    """A SASL login as a client: the tokens to send, given the server's answers. OAUTHBEARER
    takes its bearer token from ``token_source`` (security.oauthbearer) at each login."""

    def __init__(self, mechanism: str, username: str = "", password: str = "", token_source=None) -> None:
        self.mechanism, self.username, self.password = mechanism, username, password
        self.token_source = token_source

    def exchange(self):
        """A generator: yields each token to send and receives the server's reply."""
        if self.mechanism == PLAIN:
            yield b"\x00" + self.username.encode() + b"\x00" + self.password.encode()
            return
        if self.mechanism == oauthbearer.MECHANISM:
            challenge = yield oauthbearer.client_first_message(self.token_source.token())
            if challenge:  # the server's error challenge: acknowledged, and the login fails
                yield b"\x01"
            return
        from scramp import ScramClient

        client = ScramClient([self.mechanism], self.username, self.password)
        server_first = yield client.get_client_first().encode()
        client.set_server_first(server_first.decode())
        server_final = yield client.get_client_final().encode()
        client.set_server_final(server_final.decode())  # the peer proved it holds the credential


# --- the authenticator of one connection -----------------------------------------------------------

@dataclass
class SaslServerConfig:
    """What a SASL listener accepts: its mechanisms, PLAIN's users, SCRAM's credentials."""

    mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str]
    scram_credentials: Callable[[str, str], dict | None]  # (user, stored mechanism name) -> credential
    max_reauth_ms: Mapping[str, int] = field(default_factory=dict)  # mechanism -> session length (0: none)
    oauthbearer: oauthbearer.Validator | None = None  # the listener's token validator


@dataclass(frozen=True)
class Reauthentication:
    """What a re-authentication must keep: the session's mechanism and principal."""

    mechanism: str
    principal: str


class SaslServerAuthenticator:
    """One connection's SASL exchange: handshake, tokens, the authenticated principal."""

    def __init__(self, config: SaslServerConfig) -> None:
        self.config = config
        self.state = SaslState.HANDSHAKE_OR_VERSIONS
        self.mechanism: str | None = None
        self.server: PlainServer | ScramServer | oauthbearer.OAuthBearerServer | None = None
        self.principal: str | None = None
        self.reauthenticating: Reauthentication | None = None
        self.last_reauth_start: float | None = None
        self.raw_tokens = False  # SaslHandshake v0: tokens as bare size-prefixed frames

    @property
    def complete(self) -> bool:
        return self.state is SaslState.COMPLETE

    @property
    def awaiting_raw_token(self) -> bool:
        """The next frame is a bare SASL token, not a request (after a v0 SaslHandshake)."""
        return self.raw_tokens and self.state is SaslState.AUTHENTICATE

    @property
    def session_lifetime_ms(self) -> int:
        """The completed login's session length (0: it never expires): ``connections.max.reauth.ms``,
        and no longer than the credential's own expiry (an OAUTHBEARER token's), as Kafka's."""
        lifetime = self.config.max_reauth_ms.get(self.mechanism or "", 0)
        expires_at = getattr(self.server, "expires_at", None)
        if lifetime and expires_at is not None:
            lifetime = max(1, min(lifetime, int((expires_at - time.time()) * 1000)))
        return lifetime

    def begin_reauthentication(self, now: float) -> bool:
        """A SaslHandshake arrived on an authenticated connection: start a re-authentication
        (False, and the handshake is answered ILLEGAL_SASL_STATE, within a second of the last)."""
        if not self.complete or self.principal is None or self.mechanism is None:
            return False
        if self.last_reauth_start is not None and now - self.last_reauth_start < MIN_REAUTH_INTERVAL_S:
            return False
        self.last_reauth_start = now
        self.reauthenticating = Reauthentication(self.mechanism, self.principal)
        self.state, self.server = SaslState.HANDSHAKE_OR_VERSIONS, None
        return True

    def check_allowed(self, api_key: int) -> None:
        if self.state is SaslState.COMPLETE:
            return
        if api_key not in ALLOWED[self.state]:
            raise IllegalSaslState(f"Unexpected Kafka request of type {api_key} during SASL "
                                   f"{self.state.value}")

    def handshake(self, mechanism: str, version: int = 1) -> bool:
        """SaslHandshake: False (UNSUPPORTED_SASL_MECHANISM) for a mechanism not enabled;
        ``version`` 0 makes the tokens that follow bare frames."""
        if mechanism not in self.config.mechanisms:
            return False
        self.mechanism = mechanism
        self.raw_tokens = version == 0
        if mechanism == PLAIN:
            self.server = PlainServer(self.config.plain_users)
        elif mechanism == oauthbearer.MECHANISM:
            self.server = oauthbearer.OAuthBearerServer(self.config.oauthbearer)
        else:
            stored = SCRAM_MECHANISMS[mechanism]
            self.server = ScramServer(mechanism, lambda name: self.config.scram_credentials(name, stored))
        self.state = SaslState.AUTHENTICATE
        return True

    def authenticate(self, token: bytes) -> bytes:
        """SaslAuthenticate: the server's token; AuthenticationFailed ends the exchange."""
        assert self.server is not None
        try:
            self._check_reauth_mechanism()
            reply = self.server.evaluate(token)
            if self.server.complete:
                self._complete(user(self.server.authorization_id))
        except AuthenticationFailed:
            self.state = SaslState.FAILED
            raise
        return reply

    def _check_reauth_mechanism(self) -> None:
        previous = self.reauthenticating
        if previous is not None and previous.mechanism != self.mechanism:
            raise AuthenticationFailed(f"SASL mechanism '{self.mechanism}' requested by client is not supported "
                                       f"for re-authentication of mechanism '{previous.mechanism}'")

    def _complete(self, principal: str) -> None:
        previous = self.reauthenticating
        if previous is not None and previous.principal != principal:
            raise AuthenticationFailed(f"Cannot change principals during re-authentication from "
                                       f"{previous.principal}: {principal}")
        self.principal, self.reauthenticating = principal, None
        self.state = SaslState.COMPLETE
