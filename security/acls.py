"""Access control lists: the ACL record, filters over it, and the rules a new ACL must meet.

Owns Kafka's ACL vocabulary as data (``ResourceType``, ``PatternType``, ``AclOperation``,
``AclPermissionType`` with Kafka's codes), :class:`StandardAcl` (one ACL as the cluster
metadata stores it), :class:`AclBindingFilter` (DescribeAcls / DeleteAcls filters, with
Kafka's ``ResourcePatternFilter.matches`` / ``AccessControlEntryFilter.matches`` rules for
ANY and MATCH) and the validation of CreateAcls (``AclApis.handleCreateAcls`` then
``AclControlManager.validateNewAcl``, the same messages).

Differs from Kafka: an ACL's id is derived from its content (a UUID v5) instead of a random
UUID: two brokers creating the same ACL at once write the same metadata key, which is how
Kafka's controller keeps one copy (its ``existingAcls`` set).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import IntEnum

from protocol.errors import ErrorCode, KafkaError

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"
_ACL_ID_NAMESPACE = uuid.UUID("6b0b6d2e-9a44-4b8e-8f0d-6b6172a6c501")


class _Coded(IntEnum):
    @classmethod
    def from_code(cls, code: int):
        """Kafka's ``fromCode``: a code it does not know is UNKNOWN."""
        try:
            return cls(code)
        except ValueError:
            return cls(0)


class ResourceType(_Coded):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Coded):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_Coded):
    """Kafka's ``org.apache.kafka.common.acl.AclOperation`` codes."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(_Coded):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


@dataclass(frozen=True, slots=True)
class StandardAcl:
    """One ACL: a resource pattern and an access control entry (Kafka's ``StandardAcl``)."""
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    @property
    def acl_id(self) -> str:
        """Content-derived id: the metadata key of this ACL."""
        return str(uuid.uuid5(_ACL_ID_NAMESPACE, "\x00".join(map(str, self.to_json()))))

    def to_json(self) -> list:
        return [int(self.resource_type), self.resource_name, int(self.pattern_type), self.principal,
                self.host, int(self.operation), int(self.permission_type)]

    @classmethod
    def from_json(cls, raw: list) -> StandardAcl:
        rt, name, pt, principal, host, op, perm = raw
        return cls(ResourceType(rt), name, PatternType(pt), principal, host, AclOperation(op),
                   AclPermissionType(perm))

    @classmethod
    def from_wire(cls, entry) -> StandardAcl:
        """From a CreateAcls creation (codes Kafka does not know become UNKNOWN)."""
        return cls(ResourceType.from_code(entry.resource_type), entry.resource_name,
                   PatternType.from_code(entry.resource_pattern_type), entry.principal, entry.host,
                   AclOperation.from_code(entry.operation), AclPermissionType.from_code(entry.permission_type))

    @property
    def is_unknown(self) -> bool:
        """Kafka's ``AclBinding.isUnknown``: such a request does not parse."""
        return UNKNOWN in (self.resource_type, self.pattern_type, self.operation, self.permission_type)


UNKNOWN = 0


def is_binding(acl: StandardAcl) -> bool:
    """Whether Kafka can build an ``AclBinding`` of it (its constructors refuse ANY and MATCH)."""
    return (acl.resource_type != ResourceType.ANY and acl.pattern_type not in (PatternType.ANY, PatternType.MATCH)
            and acl.operation != AclOperation.ANY and acl.permission_type != AclPermissionType.ANY)


def validate_new_acl(acl: StandardAcl) -> None:
    """Raise INVALID_REQUEST as Kafka's broker (AclApis) then controller (AclControlManager) do."""
    if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        raise KafkaError(ErrorCode.invalid_request,
                         f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if acl.resource_name == "":
        raise KafkaError(ErrorCode.invalid_request, "Invalid empty resource name")
    if acl.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise KafkaError(ErrorCode.invalid_request, f"Invalid resourceType {acl.resource_type.name}")
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise KafkaError(ErrorCode.invalid_request, f"Invalid patternType {acl.pattern_type.name}")
    if acl.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise KafkaError(ErrorCode.invalid_request, f"Invalid operation {acl.operation.name}")
    if acl.permission_type not in (AclPermissionType.DENY, AclPermissionType.ALLOW):
        raise KafkaError(ErrorCode.invalid_request, f"Invalid permissionType {acl.permission_type.name}")
    if ":" not in acl.principal:
        raise KafkaError(ErrorCode.invalid_request,
                         f"Could not parse principal from `{acl.principal}` (no colon is present separating "
                         "the principal type from the principal name)")


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """A DescribeAcls / DeleteAcls filter: None names match anything, ANY codes any value."""
    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission_type: AclPermissionType

    @classmethod
    def from_wire(cls, f) -> AclBindingFilter:
        return cls(ResourceType.from_code(f.resource_type_filter), f.resource_name_filter,
                   PatternType.from_code(f.pattern_type_filter), f.principal_filter, f.host_filter,
                   AclOperation.from_code(f.operation), AclPermissionType.from_code(f.permission_type))

    @property
    def is_unknown(self) -> bool:
        return UNKNOWN in (self.resource_type, self.pattern_type, self.operation, self.permission_type)

    def matches(self, acl: StandardAcl) -> bool:
        return self._pattern_matches(acl) and self._entry_matches(acl)

    def _pattern_matches(self, acl: StandardAcl) -> bool:
        """Kafka's ``ResourcePatternFilter.matches``; MATCH finds the ACLs that would apply to
        the named resource (exact literal, the ``*`` literal, covering prefixes)."""
        if self.resource_type != ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != acl.pattern_type:
            return False
        if self.resource_name is None:
            return True
        if self.pattern_type in (PatternType.ANY, acl.pattern_type):
            return self.resource_name == acl.resource_name
        if acl.pattern_type == PatternType.LITERAL:
            return self.resource_name == acl.resource_name or acl.resource_name == WILDCARD
        return self.resource_name.startswith(acl.resource_name)

    def _entry_matches(self, acl: StandardAcl) -> bool:
        """Kafka's ``AccessControlEntryFilter.matches``."""
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != acl.operation:
            return False
        return self.permission_type == AclPermissionType.ANY or self.permission_type == acl.permission_type
