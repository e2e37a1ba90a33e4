"""Authorized operations: what the ``*_authorized_operations`` fields of Metadata,
DescribeCluster, DescribeGroups and DescribeTopicPartitions answer (KIP-430).

Owns the operation sets, as data. There is no authorizer yet: like a Kafka broker without
``authorizer.class.name``, every operation a resource type supports is allowed, so each field
is Kafka's ``Utils.to32BitField`` over the ``AclOperation`` codes of
``AclEntry.supportedOperations(resourceType)`` (``AuthHelper.authorizedOperations`` with no
authorizer). Checked against Apache Kafka 4.3.1: topic 3576, group 3400, cluster 8096.
A field the request did not ask for is Int32.MinValue, the schema's default.
"""

from __future__ import annotations

from enum import IntEnum


class AclOperation(IntEnum):
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


_op = AclOperation

# AclEntry.supportedOperations, per resource type.
TOPIC_SUPPORTED_OPERATIONS = frozenset({_op.READ, _op.WRITE, _op.CREATE, _op.DESCRIBE, _op.DELETE, _op.ALTER,
                                        _op.DESCRIBE_CONFIGS, _op.ALTER_CONFIGS})
GROUP_SUPPORTED_OPERATIONS = frozenset({_op.READ, _op.DESCRIBE, _op.DELETE, _op.DESCRIBE_CONFIGS,
                                        _op.ALTER_CONFIGS})
CLUSTER_SUPPORTED_OPERATIONS = frozenset({_op.CREATE, _op.CLUSTER_ACTION, _op.DESCRIBE_CONFIGS, _op.ALTER_CONFIGS,
                                          _op.IDEMPOTENT_WRITE, _op.ALTER, _op.DESCRIBE})

OPERATIONS_NOT_REQUESTED = -(1 << 31)  # Int32.MinValue


def to_32bit_field(operations: frozenset[AclOperation]) -> int:
    """Kafka's ``Utils.to32BitField``: bit ``code`` set for each operation."""
    return sum(1 << op for op in operations)


# No authorizer: everything supported is authorized.
TOPIC_AUTHORIZED_OPERATIONS = to_32bit_field(TOPIC_SUPPORTED_OPERATIONS)
GROUP_AUTHORIZED_OPERATIONS = to_32bit_field(GROUP_SUPPORTED_OPERATIONS)
CLUSTER_AUTHORIZED_OPERATIONS = to_32bit_field(CLUSTER_SUPPORTED_OPERATIONS)


def topic_operations(requested: bool) -> int:
    return TOPIC_AUTHORIZED_OPERATIONS if requested else OPERATIONS_NOT_REQUESTED


def group_operations(requested: bool) -> int:
    return GROUP_AUTHORIZED_OPERATIONS if requested else OPERATIONS_NOT_REQUESTED


def cluster_operations(requested: bool) -> int:
    return CLUSTER_AUTHORIZED_OPERATIONS if requested else OPERATIONS_NOT_REQUESTED
