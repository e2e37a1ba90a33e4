"""Authorization as request handlers ask for it: one call per check, and the
``*_authorized_operations`` fields of Metadata, DescribeCluster, DescribeGroups and
DescribeTopicPartitions (KIP-430).

With no authorizer (``authorizer.class.name`` unset), like a Kafka broker without one, every
check passes at the cost of one attribute test, and each operations field is Kafka's
``Utils.to32BitField`` over the ``AclOperation`` codes of
``AclEntry.supportedOperations(resourceType)``: topic 3576, group 3400, cluster 8096 (checked
against Apache Kafka 4.3.1). With the StandardAuthorizer (:mod:`security.authorizer`) the
caller is the connection's principal (a TLS client certificate's mapped subject, else
``User:ANONYMOUS``; no SASL yet) from the connection's address, and each field holds the supported operations it is allowed. A field
the request did not ask for is Int32.MinValue, the schema's default.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from protocol.errors import ErrorCode, KafkaError
from security.acls import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from .request_context import RequestContext

__all__ = ["UNAUTHORIZED_GROUP", "refused_state_request", "AclOperation", "ResourceType", "authorize", "authorize_cluster", "denied", "filter_authorized", "topic_describe_filter", "check_config_resource",
           "topic_operations", "group_operations", "cluster_operations"]

_op = AclOperation
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                                           ResourceType.TRANSACTIONAL_ID)

# AclEntry.supportedOperations, per resource type.
TOPIC_SUPPORTED_OPERATIONS = frozenset({_op.READ, _op.WRITE, _op.CREATE, _op.DESCRIBE, _op.DELETE, _op.ALTER,
                                        _op.DESCRIBE_CONFIGS, _op.ALTER_CONFIGS})
GROUP_SUPPORTED_OPERATIONS = frozenset({_op.READ, _op.DESCRIBE, _op.DELETE, _op.DESCRIBE_CONFIGS,
                                        _op.ALTER_CONFIGS})
CLUSTER_SUPPORTED_OPERATIONS = frozenset({_op.CREATE, _op.CLUSTER_ACTION, _op.DESCRIBE_CONFIGS, _op.ALTER_CONFIGS,
                                          _op.IDEMPOTENT_WRITE, _op.ALTER, _op.DESCRIBE})

OPERATIONS_NOT_REQUESTED = -(1 << 31)  # Int32.MinValue


def to_32bit_field(operations: Iterable[AclOperation]) -> int:
    """Kafka's ``Utils.to32BitField``: bit ``code`` set for each operation."""
    return sum(1 << op for op in operations)


# No authorizer: everything supported is authorized.
TOPIC_AUTHORIZED_OPERATIONS = to_32bit_field(TOPIC_SUPPORTED_OPERATIONS)
GROUP_AUTHORIZED_OPERATIONS = to_32bit_field(GROUP_SUPPORTED_OPERATIONS)
CLUSTER_AUTHORIZED_OPERATIONS = to_32bit_field(CLUSTER_SUPPORTED_OPERATIONS)


# What a describe of a modern group (ConsumerGroupDescribe, ShareGroupDescribe) says of a group
# the caller may not DESCRIBE: the error and nothing of the group.
UNAUTHORIZED_GROUP = {"error_code": ErrorCode.group_authorization_failed, "error_message": None, "group_state": "",
                      "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "", "members": []}


def refused_state_request(request, **partition_defaults) -> dict:
    """A share-group state RPC (83-86) from a caller without CLUSTER_ACTION:
    CLUSTER_AUTHORIZATION_FAILED for every partition, as Kafka."""
    return {"results": [{"topic_id": t.topic_id, "partitions": [
        {"partition": p.partition, "error_code": ErrorCode.cluster_authorization_failed, "error_message": None,
         **partition_defaults} for p in t.partitions]} for t in request.topics]}


def authorize(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
    """May the request's caller perform ``operation`` on the resource (always, with no authorizer)."""
    authorizer = ctx.services.authorizer
    return authorizer is None or authorizer.authorize(ctx.principal, ctx.client_host, operation,
                                                      resource_type, name)


def authorize_cluster(ctx: RequestContext, operation: AclOperation) -> bool:
    return authorize(ctx, operation, CLUSTER, CLUSTER_NAME)


def authorize_by_resource_type(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType) -> bool:
    """Allowed ``operation`` on at least one resource of the type (InitProducerId, KIP-679)."""
    authorizer = ctx.services.authorizer
    return authorizer is None or authorizer.authorize_by_resource_type(ctx.principal, ctx.client_host,
                                                                       operation, resource_type)


def filter_authorized(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType,
                      names: Iterable[str]) -> set[str]:
    """The names (of one type) the caller may perform ``operation`` on: Kafka's ``filterByAuthorized``."""
    names = set(names)
    if ctx.services.authorizer is None:
        return names
    return {n for n in names if authorize(ctx, operation, resource_type, n)}


def topic_describe_filter(ctx: RequestContext) -> Callable[[Iterable[str]], set[str]] | None:
    """The topic names, of those given, the caller may DESCRIBE, as a function that outlives the
    request (the consumer group coordinator filters regex matches with it, as Kafka's
    ``TopicRegexResolver``); None with no authorizer."""
    if ctx.services.authorizer is None:
        return None
    services, principal, host = ctx.services, ctx.principal, ctx.client_host

    def describable(names: Iterable[str]) -> set[str]:
        authorizer = services.authorizer
        return {n for n in names if authorizer is None or authorizer.authorize(principal, host, _op.DESCRIBE, TOPIC, n)}
    return describable


_NOTHING: frozenset[str] = frozenset()


def denied(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType,
           names: Iterable[str | None]) -> frozenset[str] | set[str]:
    """The names the caller may NOT perform ``operation`` on (empty at once with no authorizer:
    the hot Produce / Fetch paths pay one attribute test)."""
    if ctx.services.authorizer is None:
        return _NOTHING
    return {n for n in set(names) if n is not None and not authorize(ctx, operation, resource_type, n)}


# Config resource type (DescribeConfigs / AlterConfigs codes) -> the ACL resource checked, and
# the error when refused, as Kafka's ConfigAdminManager / AuthHelper.
_CONFIG_RESOURCES = {2: (TOPIC, ErrorCode.topic_authorization_failed),
                     4: (CLUSTER, ErrorCode.cluster_authorization_failed),
                     8: (CLUSTER, ErrorCode.cluster_authorization_failed),
                     32: (GROUP, ErrorCode.group_authorization_failed)}


def check_config_resource(ctx: RequestContext, operation: AclOperation, config_resource_type: int,
                          name: str) -> None:
    """Raise the authorization error of a config resource the caller may not describe / alter."""
    entry = _CONFIG_RESOURCES.get(int(config_resource_type))
    if entry is None or ctx.services.authorizer is None:
        return
    resource_type, code = entry
    if not authorize(ctx, operation, resource_type, CLUSTER_NAME if resource_type == CLUSTER else name):
        raise KafkaError(code, None)


def _operations(ctx: RequestContext | None, supported: frozenset[AclOperation], all_allowed: int,
                resource_type: ResourceType, name: str | None) -> int:
    authorizer = None if ctx is None else ctx.services.authorizer
    if authorizer is None:
        return all_allowed
    return to_32bit_field(authorizer.authorized_operations(ctx.principal, ctx.client_host, supported,
                                                           resource_type, name or ""))


def topic_operations(requested: bool, ctx: RequestContext | None = None, name: str | None = None) -> int:
    if not requested:
        return OPERATIONS_NOT_REQUESTED
    return _operations(ctx, TOPIC_SUPPORTED_OPERATIONS, TOPIC_AUTHORIZED_OPERATIONS, TOPIC, name)


def group_operations(requested: bool, ctx: RequestContext | None = None, group_id: str | None = None) -> int:
    if not requested:
        return OPERATIONS_NOT_REQUESTED
    return _operations(ctx, GROUP_SUPPORTED_OPERATIONS, GROUP_AUTHORIZED_OPERATIONS, GROUP, group_id)


def cluster_operations(requested: bool, ctx: RequestContext | None = None) -> int:
    if not requested:
        return OPERATIONS_NOT_REQUESTED
    return _operations(ctx, CLUSTER_SUPPORTED_OPERATIONS, CLUSTER_AUTHORIZED_OPERATIONS, CLUSTER, CLUSTER_NAME)
