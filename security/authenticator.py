"""Who a new connection is, by its listener's security protocol (Kafka's channel builders).

Owns :class:`ListenerSecurity`: a listener's protocol, its TLS context and how a connection on
it gets its principal. PLAINTEXT authenticates nobody (``User:ANONYMOUS``); SSL maps the
verified client certificate's subject through ``ssl.principal.mapping.rules``, and a client
that presented none is ``User:ANONYMOUS``, as Kafka's ``SslAuthenticator`` does.

SASL_PLAINTEXT and SASL_SSL connections start unauthenticated and get their principal from the
SASL exchange (:mod:`.sasl`); until it completes, only the SASL state machine's requests are
served.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from .principal import ANONYMOUS, SslPrincipalMapper, certificate_subject, user
from .sasl import SaslServerAuthenticator, SaslServerConfig


@dataclass(frozen=True)
class ListenerSecurity:
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    principal_mapper: SslPrincipalMapper = field(default_factory=SslPrincipalMapper)
    sasl: SaslServerConfig | None = None  # SASL_PLAINTEXT / SASL_SSL

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def sasl_authenticator(self) -> SaslServerAuthenticator | None:
        """A new connection's SASL exchange (None: the listener does not use SASL)."""
        return SaslServerAuthenticator(self.sasl) if self.sasl is not None else None

    def authenticate(self, ssl_object: ssl.SSLObject | None) -> str:
        """The principal of a connection whose handshake (if any) is done; NoMatchingRule
        when a certificate's name matches no mapping rule (the connection is refused)."""
        if self.protocol == "SSL" and ssl_object is not None:
            der = ssl_object.getpeercert(binary_form=True)
            if der:
                return user(self.principal_mapper.principal_name(certificate_subject(der)))
        return ANONYMOUS


PLAINTEXT = ListenerSecurity()
