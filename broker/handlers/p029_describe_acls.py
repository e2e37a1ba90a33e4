"""DescribeAcls: v1-3

Behavior:
- Answers the ACLs matching the filter (:class:`security.acls.AclBindingFilter`: ANY
  resource type, pattern type, operation or permission; a null name, principal or host
  matches any; MATCH finds every ACL that applies to the named resource: the literal one,
  the ``*`` wildcard and the covering prefixes), grouped by resource pattern; a success
  carries an empty error message, as Kafka's.
- No authorizer configured: SECURITY_DISABLED "No Authorizer is configured on the broker".
- The caller needs DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
- A filter with a code Kafka does not know (UNKNOWN) does not parse in Kafka: the connection
  is closed.

Version notes:
- v0 was removed in Kafka 4.0; v1 pattern type; v2 flexible; v3 USER resource type.
"""

from protocol.api import register
from protocol.errors import ErrorCode
from security.acls import AclBindingFilter

from ..authorization import AclOperation, authorize_cluster
from ..request_context import CloseConnection, RequestContext


@register(29, 1, 3)
async def handle_describe_acls(ctx: RequestContext, request) -> dict:
    acl_filter = AclBindingFilter.from_wire(request)
    if acl_filter.is_unknown:
        raise CloseConnection("DescribeAclsRequest contains UNKNOWN elements")
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return _error(ErrorCode.cluster_authorization_failed, "Request DescribeAcls is not authorized.")
    if ctx.services.authorizer is None:
        return _error(ErrorCode.security_disabled, "No Authorizer is configured on the broker")
    resources: dict[tuple, list] = {}
    for acl in ctx.services.metadata.acls.values():
        if acl_filter.matches(acl):
            resources.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(
                {"principal": acl.principal, "host": acl.host, "operation": acl.operation,
                 "permission_type": acl.permission_type})
    return {"throttle_time": 0, "error_code": 0, "error_message": "",
            "resources": [{"resource_type": rt, "resource_name": name, "pattern_type": pt, "acls": acls}
                          for (rt, name, pt), acls in resources.items()]}


def _error(code: ErrorCode, message: str) -> dict:
    return {"throttle_time": 0, "error_code": code, "error_message": message, "resources": []}
