"""The ACL authorizer: Kafka's ``StandardAuthorizer`` decision rules over the cluster's ACLs.

Owns the decision "may this principal, from this host, perform this operation on this
resource", as ``StandardAuthorizerData.authorize`` makes it:

- a principal listed in ``super.users`` may do anything;
- the ACLs that apply to a resource are the LITERAL ones with its exact name, the PREFIXED
  ones whose name starts it, and the LITERAL ``*`` wildcard of its type; of those, the ones
  whose principal is the caller's or ``User:*`` and whose host is the caller's or ``*``;
- an ACL for ALL matches every operation; an ALLOW ACL for READ, WRITE, DELETE or ALTER also
  allows DESCRIBE, one for ALTER_CONFIGS also DESCRIBE_CONFIGS (a DENY implies nothing);
- any matching DENY wins over any ALLOW; with no match the answer is DENIED if the resource
  has ACLs at all (for anyone), else ``allow.everyone.if.no.acl.found`` (default false).

``authorize_by_resource_type`` is the default ``Authorizer.authorizeByResourceType`` (is the
caller allowed the operation on at least one resource of a type), used by InitProducerId.

The ACL set is the metadata image's (``MetadataCache.acls``); :meth:`StandardAuthorizer.reload`
re-indexes it whenever the image's ACLs change.

Differs from Kafka: the index is a dict of literal names and a list of prefixes per resource
type rather than Kafka's reverse-name-sorted set, and there is no audit log.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field

from .acls import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
)

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

_op = AclOperation
IMPLIES_DESCRIBE = frozenset({_op.DESCRIBE, _op.READ, _op.WRITE, _op.DELETE, _op.ALTER})
IMPLIES_DESCRIBE_CONFIGS = frozenset({_op.DESCRIBE_CONFIGS, _op.ALTER_CONFIGS})


def java_host_address(address: str) -> str:
    """An IP address as Java's ``InetAddress.getHostAddress`` writes it (the form ACL hosts
    are compared with): IPv6 uncompressed, without leading zeros (``0:0:0:0:0:0:0:1``)."""
    if ":" not in address:
        return address
    try:
        exploded = ipaddress.IPv6Address(address.split("%", 1)[0]).exploded
    except ValueError:
        return address
    return ":".join(format(int(group, 16), "x") for group in exploded.split(":"))


def parse_super_users(raw: str | None) -> frozenset[str]:
    """``super.users``: principals separated by semicolons (``User:alice;User:bob``)."""
    return frozenset(p.strip() for p in (raw or "").split(";") if p.strip())


@dataclass(slots=True)
class _TypeIndex:
    literal: dict[str, list[StandardAcl]] = field(default_factory=dict)
    prefixed: list[StandardAcl] = field(default_factory=list)


class StandardAuthorizer:
    def __init__(self, super_users: frozenset[str], allow_if_no_acl: bool) -> None:
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self._index: dict[ResourceType, _TypeIndex] = {}
        self._acls: tuple[StandardAcl, ...] = ()

    def reload(self, acls: Iterable[StandardAcl]) -> None:
        acls = tuple(acls)
        index: dict[ResourceType, _TypeIndex] = {}
        for acl in acls:
            section = index.setdefault(acl.resource_type, _TypeIndex())
            if acl.pattern_type == PatternType.PREFIXED:
                section.prefixed.append(acl)
            else:
                section.literal.setdefault(acl.resource_name, []).append(acl)
        self._index = index
        self._acls = acls

    def authorize(self, principal: str, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        section = self._index.get(resource_type)
        if section is None:
            return self.allow_if_no_acl
        has_resource_acls = False
        allowed = False
        candidates = [*section.literal.get(name, ()),
                      *(a for a in section.prefixed if name.startswith(a.resource_name)),
                      *(section.literal.get(WILDCARD, ()) if name != WILDCARD else ())]
        for acl in candidates:
            has_resource_acls = True
            result = _result(acl, principal, host, operation)
            if result is AclPermissionType.DENY:
                return False
            if result is AclPermissionType.ALLOW:
                allowed = True
        if allowed:
            return True
        return False if has_resource_acls else self.allow_if_no_acl

    def authorize_by_resource_type(self, principal: str, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """Allowed ``operation`` on at least one resource of ``resource_type`` (Kafka's default
        ``Authorizer.authorizeByResourceType``)."""
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        deny = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        allow = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        for acl in self._acls:
            if acl.resource_type != resource_type or acl.host not in (host, WILDCARD):
                continue
            if acl.principal not in (principal, WILDCARD_PRINCIPAL) or acl.operation not in (operation, _op.ALL):
                continue
            if acl.permission_type == AclPermissionType.DENY:
                if acl.pattern_type == PatternType.LITERAL and acl.resource_name == WILDCARD:
                    return False
                deny[acl.pattern_type].add(acl.resource_name)
            elif acl.pattern_type == PatternType.LITERAL and acl.resource_name == WILDCARD:
                return True
            else:
                allow[acl.pattern_type].add(acl.resource_name)
        for pattern_type, names in allow.items():
            for name in names:
                if pattern_type == PatternType.LITERAL and name in deny[PatternType.LITERAL]:
                    continue
                if not any(name[:i] in deny[PatternType.PREFIXED] for i in range(1, len(name) + 1)):
                    return True
        return False

    def authorized_operations(self, principal: str, host: str, supported: Iterable[AclOperation],
                              resource_type: ResourceType, name: str) -> frozenset[AclOperation]:
        """The supported operations the caller may perform on a resource (KIP-430)."""
        return frozenset(op for op in supported if self.authorize(principal, host, op, resource_type, name))


def _result(acl: StandardAcl, principal: str, host: str, operation: AclOperation) -> AclPermissionType | None:
    """Kafka's ``StandardAuthorizerData.findResult``: None when the ACL does not apply."""
    if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
        return None
    if acl.host != WILDCARD and acl.host != host:
        return None
    if acl.operation != _op.ALL:
        if acl.permission_type == AclPermissionType.ALLOW:
            if operation == _op.DESCRIBE:
                if acl.operation not in IMPLIES_DESCRIBE:
                    return None
            elif operation == _op.DESCRIBE_CONFIGS:
                if acl.operation not in IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif operation != acl.operation:
                return None
        elif operation != acl.operation:
            return None
    return acl.permission_type
