"""TLS for listeners and for the broker's own connections, from Kafka's ``ssl.*`` keys.

Owns reading the keys (each globally, or for one listener as ``listener.name.<name>.ssl.*``,
which wins, as Kafka's ``ListenerName.configPrefix`` does) into an :class:`ssl.SSLContext`
(Kafka's ``DefaultSslEngineFactory``): key stores and trust stores as PEM files, inline PEM
(``ssl.keystore.key`` with ``ssl.keystore.certificate.chain``, ``ssl.truststore.certificates``)
or PKCS12; ``ssl.client.auth``; ``ssl.enabled.protocols``; ``ssl.cipher.suites``; and, for
the broker's outgoing connections, ``ssl.endpoint.identification.algorithm``.

A listener's key store and trust store files are watched (:class:`StoreWatcher`): when one
changes on disk, the listener's context loads it again, so new connections get the rotated
certificate without a restart (connections already open keep theirs, as in Kafka). AlterConfigs
on ``listener.name.<name>.ssl.keystore.location`` and the other :data:`DYNAMIC_STORE_KEYS` does
the same with new settings (:func:`reconfigure`), refused unless the new stores load and, as
Kafka checks, the certificate keeps its subject and subject alternative names
(``ssl.allow.dn.changes``, ``ssl.allow.san.changes``).

Differs from Kafka: a JKS store (Kafka's default type) stops start-up with how to convert it,
because Python's ``ssl`` reads PEM and, through ``cryptography``, PKCS12; cipher suites apply
to TLS 1.2 (OpenSSL chooses TLS 1.3's) and may be given in Kafka's (IANA) or OpenSSL's names.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass

# Kafka's key names and defaults (SslConfigs / BrokerSecurityConfigs).
SSL_DEFAULTS: dict[str, str] = {
    "ssl.keystore.type": "JKS",
    "ssl.keystore.location": "",
    "ssl.keystore.password": "",
    "ssl.key.password": "",
    "ssl.keystore.key": "",
    "ssl.keystore.certificate.chain": "",
    "ssl.truststore.type": "JKS",
    "ssl.truststore.location": "",
    "ssl.truststore.password": "",
    "ssl.truststore.certificates": "",
    "ssl.client.auth": "none",
    "ssl.protocol": "TLSv1.3",
    "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
    "ssl.cipher.suites": "",
    "ssl.endpoint.identification.algorithm": "https",
    "ssl.principal.mapping.rules": "DEFAULT",
    "ssl.allow.dn.changes": "false",
    "ssl.allow.san.changes": "false",
}
# What AlterConfigs may change on a running listener (per broker, listener-prefixed), as Kafka's
# DynamicListenerConfig / SslFactory.reconfigure allow.
DYNAMIC_STORE_KEYS = ("ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
                      "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.truststore.type",
                      "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates")
CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
LISTENER_PREFIX = "listener.name."


class SslConfigError(ValueError):
    """A TLS setting that cannot work; the message is one line naming the key."""


def is_ssl_key(name: str) -> bool:
    """An ``ssl.*`` key, globally or under ``listener.name.<listener>.``."""
    if name.startswith(LISTENER_PREFIX):
        name = name[len(LISTENER_PREFIX):].partition(".")[2]
    return name in SSL_DEFAULTS


@dataclass(frozen=True)
class SslSettings:
    """The ``ssl.*`` values that apply to one listener (or to the broker's own connections)."""

    values: Mapping[str, str]
    listener: str | None = None

    def __getitem__(self, key: str) -> str:
        return self.values[key]


def ssl_settings(given: Mapping[str, str], listener: str | None = None) -> SslSettings:
    """The settings of ``listener``: its ``listener.name.<name>.ssl.*`` keys over the global
    ``ssl.*`` keys over Kafka's defaults."""
    values = dict(SSL_DEFAULTS)
    for key in SSL_DEFAULTS:
        if key in given:
            values[key] = given[key]
        if listener is not None and (scoped := f"{LISTENER_PREFIX}{listener.lower()}.{key}") in given:
            values[key] = given[scoped]
    return SslSettings(values, listener)


# --- contexts ---------------------------------------------------------------------------------------

def server_context(s: SslSettings) -> ssl.SSLContext:
    """The listener's context: its key store (required), trust store and client authentication."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _protocols(ctx, s)
    if not _load_key_store(ctx, s):
        raise SslConfigError(f"the SSL listener {s.listener or ''} needs a key store: set "
                             "ssl.keystore.location (with ssl.keystore.type) or ssl.keystore.key and "
                             "ssl.keystore.certificate.chain".replace("  ", " "))
    mode = s["ssl.client.auth"].strip().lower()
    if mode not in CLIENT_AUTH:
        raise SslConfigError(f"Invalid value {s['ssl.client.auth']!r} for configuration ssl.client.auth: "
                             "expected one of none, requested, required")
    ctx.verify_mode = CLIENT_AUTH[mode]
    trusted = _load_trust_store(ctx, s)
    if mode != "none" and not trusted:
        raise SslConfigError(f"ssl.client.auth={mode} needs a trust store to verify client certificates: "
                             "set ssl.truststore.location or ssl.truststore.certificates")
    return ctx


def client_context(s: SslSettings) -> ssl.SSLContext:
    """The broker's context for connecting to a TLS listener (its peers' inter-broker one)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _protocols(ctx, s)
    if not _load_trust_store(ctx, s):
        ctx.load_default_certs()
    _load_key_store(ctx, s)  # presented when the server asks for a certificate
    algorithm = s["ssl.endpoint.identification.algorithm"].strip().lower()
    ctx.check_hostname = algorithm == "https"
    if algorithm not in ("", "https"):
        raise SslConfigError(f"Invalid value {algorithm!r} for configuration "
                             "ssl.endpoint.identification.algorithm: expected https or empty")
    return ctx


class StoreWatcher:
    """Reloads a context's stores when their files change (by modification time and size)."""

    def __init__(self, ctx: ssl.SSLContext, settings: SslSettings) -> None:
        self.ctx, self.settings = ctx, settings
        self.paths = [p for p in (settings["ssl.keystore.location"].strip(),
                                  settings["ssl.truststore.location"].strip()) if p]
        self.seen = self._stamps()

    def _stamps(self) -> dict[str, tuple[int, int] | None]:
        out = {}
        for path in self.paths:
            try:
                st = os.stat(path)
                out[path] = (st.st_mtime_ns, st.st_size)
            except OSError:
                out[path] = None
        return out

    def retarget(self, settings: SslSettings) -> None:
        """Watch the stores of new settings (after a dynamic update)."""
        self.settings = settings
        self.paths = [p for p in (settings["ssl.keystore.location"].strip(),
                                  settings["ssl.truststore.location"].strip()) if p]
        self.seen = self._stamps()

    def check(self) -> bool:
        """True when the stores changed and were loaded again; SslConfigError when a changed
        store cannot be used (the context keeps what it had)."""
        stamps = self._stamps()
        if stamps == self.seen:
            return False
        self.seen = stamps
        server_context(self.settings)  # the new stores must work before the live context takes them
        _load_key_store(self.ctx, self.settings)
        _load_trust_store(self.ctx, self.settings)
        return True


def dynamic_store_listener(name: str) -> str | None:
    """The listener of a ``listener.name.<listener>.<store key>`` AlterConfigs may change."""
    if not name.startswith(LISTENER_PREFIX):
        return None
    listener, _, key = name[len(LISTENER_PREFIX):].partition(".")
    return listener.upper() if listener and key in DYNAMIC_STORE_KEYS else None


def check_reconfiguration(old: SslSettings, new: SslSettings) -> None:
    """SslConfigError unless ``new`` makes a working server context whose certificate has
    ``old``'s subject and subject alternative names (Kafka's ``SslFactory`` validation)."""
    server_context(new)
    before, after = leaf_certificate(old), leaf_certificate(new)
    if before is None or after is None:
        return
    if new["ssl.allow.dn.changes"].strip().lower() != "true" and before.subject != after.subject:
        raise SslConfigError(f"Keystore DistinguishedName does not match: existing={before.subject.rfc4514_string()}, "
                             f"new={after.subject.rfc4514_string()}")
    if new["ssl.allow.san.changes"].strip().lower() != "true" and _sans(before) != _sans(after):
        raise SslConfigError(f"Keystore SubjectAltNames do not match: existing={sorted(_sans(before))}, "
                             f"new={sorted(_sans(after))}")


def reconfigure(ctx: ssl.SSLContext, new: SslSettings) -> None:
    """Load ``new``'s stores into the live context (checked first: on error it keeps its own).
    The trust store's certificates are added to those the context trusts already."""
    server_context(new)
    _load_key_store(ctx, new)
    _load_trust_store(ctx, new)


def leaf_certificate(s: SslSettings):
    """The key store's own certificate (None without a key store)."""
    from cryptography import x509

    if s["ssl.keystore.certificate.chain"].strip():
        return x509.load_pem_x509_certificates(s["ssl.keystore.certificate.chain"].encode())[0]
    location = s["ssl.keystore.location"].strip()
    if not location:
        return None
    if s["ssl.keystore.type"].strip().upper() == "PKCS12":
        return _pkcs12(location, s["ssl.keystore.password"])[1]
    with open(location, "rb") as f:
        return x509.load_pem_x509_certificates(f.read())[0]


def _sans(cert) -> set[str]:
    from cryptography import x509

    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return set()
    return {str(name.value) for name in ext.value}


def _protocols(ctx: ssl.SSLContext, s: SslSettings) -> None:
    names = [p.strip() for p in s["ssl.enabled.protocols"].split(",") if p.strip()]
    unknown = [p for p in names if p not in PROTOCOLS]
    if not names or unknown:
        raise SslConfigError(f"Invalid value {s['ssl.enabled.protocols']!r} for configuration "
                             f"ssl.enabled.protocols: supported are {', '.join(PROTOCOLS)}")
    versions = sorted(PROTOCOLS[p] for p in names)
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    suites = [c.strip() for c in s["ssl.cipher.suites"].split(",") if c.strip()]
    if suites:
        try:
            ctx.set_ciphers(":".join(openssl_cipher_name(c) for c in suites))
        except ssl.SSLError:
            raise SslConfigError(f"Invalid value {s['ssl.cipher.suites']!r} for configuration "
                                 "ssl.cipher.suites: none of these suites is available") from None


def openssl_cipher_name(name: str) -> str:
    """Kafka's (IANA) TLS 1.2 suite name in OpenSSL's spelling; OpenSSL names pass unchanged."""
    if not name.startswith("TLS_") or "_WITH_" not in name:
        return name
    kx, _, cipher = name[len("TLS_"):].partition("_WITH_")
    kx = {"ECDHE_RSA": "ECDHE-RSA", "ECDHE_ECDSA": "ECDHE-ECDSA", "DHE_RSA": "DHE-RSA", "RSA": ""}.get(kx, kx)
    parts = cipher.split("_")  # AES_128_GCM_SHA256, CHACHA20_POLY1305_SHA256
    if parts[0] == "AES":
        body = f"AES{parts[1]}-{parts[2]}-{parts[3]}" if parts[2] == "GCM" else f"AES{parts[1]}-{parts[-1]}"
        body = body.replace("-CBC-", "-")
    elif parts[0] == "CHACHA20":
        body = "CHACHA20-POLY1305"
    else:
        body = "-".join(parts)
    return f"{kx}-{body}" if kx else body


# --- stores ---------------------------------------------------------------------------------------

def _load_key_store(ctx: ssl.SSLContext, s: SslSettings) -> bool:
    """The certificate chain and private key, from a file or inline; False when none is set."""
    key_password = s["ssl.key.password"] or None
    if s["ssl.keystore.key"].strip():
        if not s["ssl.keystore.certificate.chain"].strip():
            raise SslConfigError("ssl.keystore.key is set without ssl.keystore.certificate.chain")
        _with_pem_file(s["ssl.keystore.certificate.chain"].strip() + "\n" + s["ssl.keystore.key"].strip() + "\n",
                       lambda path: _load_chain(ctx, path, path, key_password, "ssl.keystore.key"))
        return True
    location = s["ssl.keystore.location"].strip()
    if not location:
        return False
    kind = s["ssl.keystore.type"].strip().upper()
    _readable(location, "ssl.keystore.location")
    if kind == "PEM":
        _load_chain(ctx, location, location, key_password, "ssl.keystore.location")
    elif kind == "PKCS12":
        pem = _pkcs12_key_store(location, s["ssl.keystore.password"], key_password)
        _with_pem_file(pem, lambda path: _load_chain(ctx, path, path, None, "ssl.keystore.location"))
    else:
        raise SslConfigError(_jks_message(kind, location, "ssl.keystore.type"))
    return True


def _load_trust_store(ctx: ssl.SSLContext, s: SslSettings) -> bool:
    if s["ssl.truststore.certificates"].strip():
        _load_verify(ctx, cadata=s["ssl.truststore.certificates"], key="ssl.truststore.certificates")
        return True
    location = s["ssl.truststore.location"].strip()
    if not location:
        return False
    kind = s["ssl.truststore.type"].strip().upper()
    _readable(location, "ssl.truststore.location")
    if kind == "PEM":
        _load_verify(ctx, cafile=location, key="ssl.truststore.location")
    elif kind == "PKCS12":
        _load_verify(ctx, cadata=_pkcs12_trust_store(location, s["ssl.truststore.password"]),
                     key="ssl.truststore.location")
    else:
        raise SslConfigError(_jks_message(kind, location, "ssl.truststore.type"))
    return True


def _load_chain(ctx: ssl.SSLContext, certfile: str, keyfile: str, password: str | None, key: str) -> None:
    try:
        ctx.load_cert_chain(certfile, keyfile, password=password)
    except ssl.SSLError as exc:
        hint = " (or ssl.key.password is wrong)" if "BAD_DECRYPT" in str(exc) or "bad decrypt" in str(exc) else ""
        raise SslConfigError(f"{key}: no usable certificate chain and private key{hint}: {exc.reason or exc}") \
            from None


def _load_verify(ctx: ssl.SSLContext, *, key: str, cafile: str | None = None, cadata: str | None = None) -> None:
    try:
        ctx.load_verify_locations(cafile=cafile, cadata=cadata)
    except (ssl.SSLError, ValueError) as exc:
        raise SslConfigError(f"{key}: no usable trusted certificates: {exc}") from None


def _readable(path: str, key: str) -> None:
    if not os.access(path, os.R_OK):
        raise SslConfigError(f"Invalid value {path!r} for configuration {key}: the file cannot be read")


def _jks_message(kind: str, location: str, key: str) -> str:
    if kind == "JKS":
        return (f"{location}: JKS stores are not supported; set {key}=PKCS12 after converting it with "
                f"`keytool -importkeystore -srckeystore {location} -destkeystore store.p12 "
                "-deststoretype PKCS12`, or use PEM")
    return f"Invalid value {kind!r} for configuration {key}: expected PEM or PKCS12"


def _with_pem_file(pem: str, use: Callable[[str], None]) -> None:
    """``ssl`` loads a chain only from a file: a private one (0600), removed at once."""
    fd, path = tempfile.mkstemp(prefix="kbroker-tls-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(pem)
        use(path)
    finally:
        os.unlink(path)


def _pkcs12(location: str, password: str):
    from cryptography.hazmat.primitives.serialization import pkcs12

    with open(location, "rb") as f:
        data = f.read()
    try:
        return pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except ValueError as exc:
        raise SslConfigError(f"{location}: cannot read the PKCS12 store (wrong password?): {exc}") from None


def _pkcs12_key_store(location: str, store_password: str, key_password: str | None) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    key, cert, chain = _pkcs12(location, store_password)
    if key is None or cert is None:
        raise SslConfigError(f"{location}: the PKCS12 key store holds no private key and certificate")
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    return pem + "".join(c.public_bytes(Encoding.PEM).decode() for c in [cert, *(chain or [])])


def _pkcs12_trust_store(location: str, password: str) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding

    _, cert, chain = _pkcs12(location, password)
    certs = [c for c in [cert, *(chain or [])] if c is not None]
    if not certs:
        raise SslConfigError(f"{location}: the PKCS12 trust store holds no certificate")
    return "".join(c.public_bytes(Encoding.PEM).decode() for c in certs)
