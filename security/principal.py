"""Who a connection is: Kafka's principals and how a TLS certificate becomes one.

Owns ``User:<name>`` principals (:data:`ANONYMOUS` on a listener that authenticates nobody), and Kafka's ``SslPrincipalMapper``:
the subject of a verified client certificate, as an RFC 2253 distinguished name (what Java's
``X500Principal.getName()`` gives), mapped by ``ssl.principal.mapping.rules``: a comma list of
``RULE:pattern/replacement/[LU]`` (the first rule whose pattern matches the whole name rewrites
it, ``L``/``U`` lower- or upper-case the result) and ``DEFAULT`` (the name unchanged).

Differs from Kafka: patterns and replacements are Python regular expressions (``$1`` in a
replacement is read as group 1, as Java writes it); a name no rule matches fails the handshake's
authentication, as Kafka's ``NoMatchingRule`` does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

USER_TYPE = "User"
ANONYMOUS_NAME = "ANONYMOUS"


def user(name: str) -> str:
    """The principal string the authorizer matches (``User:<name>``)."""
    return f"{USER_TYPE}:{name}"


ANONYMOUS = user(ANONYMOUS_NAME)  # every caller on a listener that authenticates nobody


class NoMatchingRule(ValueError):
    """No ``ssl.principal.mapping.rules`` rule matches a certificate's name."""


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if not self.pattern.fullmatch(name):
            return None
        out = self.pattern.sub(self.replacement, name)
        return out.lower() if self.case == "L" else out.upper() if self.case == "U" else out


_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?))\s*(?:,|$)")


def parse_rules(text: str) -> list[Rule]:
    """``ssl.principal.mapping.rules`` as Kafka's ``SslPrincipalMapper.parseRules`` reads it."""
    rules, pos, text = [], 0, text.strip()
    while pos < len(text):
        m = _RULE.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"Invalid rule: {text[pos:]}")
        if m.group(1):
            rules.append(Rule(None))
        else:
            replacement = re.sub(r"\$(\d)", r"\\g<\1>", m.group(3))
            try:
                rules.append(Rule(re.compile(m.group(2)), replacement, m.group(4)))
            except re.error as exc:
                raise ValueError(f"Invalid rule: {m.group(0).strip()}: {exc}") from None
        pos = m.end()
    return rules or [Rule(None)]


class SslPrincipalMapper:
    def __init__(self, rules: str = "DEFAULT") -> None:
        self.rules = parse_rules(rules)

    def principal_name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            name = rule.apply(distinguished_name)
            if name is not None:
                return name
        raise NoMatchingRule(f"No rules apply to {distinguished_name}, rules {self.rules}")


def certificate_subject(der: bytes) -> str:
    """The subject of a DER certificate as an RFC 2253 name (``CN=a,OU=b,O=c``)."""
    from cryptography import x509

    return x509.load_der_x509_certificate(der).subject.rfc4514_string()
