"""DeleteAcls: v1-3

Behavior:
- Deletes, for each filter, the ACLs it matches (the same matching as DescribeAcls, see
  :class:`security.acls.AclBindingFilter`) from the cluster metadata, and answers them
  per filter (an ACL matched by two filters is answered by both).
- No authorizer configured: SECURITY_DISABLED "No Authorizer is configured." for each filter.
- The caller needs ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED for each filter.
- A filter with a code Kafka does not know (UNKNOWN) does not parse in Kafka: the connection
  is closed.

Version notes:
- v0 was removed in Kafka 4.0; v1 pattern type; v2 flexible; v3 USER resource type.
"""

from protocol.api import register
from protocol.errors import ErrorCode, KafkaError
from security.acls import AclBindingFilter

from ..authorization import AclOperation, authorize_cluster
from ..request_context import CloseConnection, RequestContext


@register(31, 1, 3)
async def handle_delete_acls(ctx: RequestContext, request) -> dict:
    filters = [AclBindingFilter.from_wire(f) for f in request.filters]
    if any(f.is_unknown for f in filters):
        raise CloseConnection("DeleteAclsRequest contains UNKNOWN elements")
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return _all_failed(filters, ErrorCode.cluster_authorization_failed, "Request DeleteAcls is not authorized.")
    if ctx.services.authorizer is None:
        return _all_failed(filters, ErrorCode.security_disabled, "No Authorizer is configured.")
    existing = dict(ctx.services.metadata.acls)
    matched = [[(acl_id, acl) for acl_id, acl in existing.items() if f.matches(acl)] for f in filters]
    doomed = {acl_id for found in matched for acl_id, _ in found}
    if doomed:
        try:
            await ctx.services.control.acls.delete(doomed)
        except KafkaError as exc:
            return _all_failed(filters, exc.code, exc.message)
    return {"throttle_time": 0, "filter_results": [
        {"error_code": 0, "error_message": None, "matching_acls": [_matching(acl) for _, acl in found]}
        for found in matched]}


def _matching(acl) -> dict:
    return {"error_code": 0, "error_message": None, "resource_type": acl.resource_type,
            "resource_name": acl.resource_name, "pattern_type": acl.pattern_type, "principal": acl.principal,
            "host": acl.host, "operation": acl.operation, "permission_type": acl.permission_type}


def _all_failed(filters: list, code: ErrorCode, message: str) -> dict:
    return {"throttle_time": 0, "filter_results": [
        {"error_code": code, "error_message": message, "matching_acls": []} for _ in filters]}
