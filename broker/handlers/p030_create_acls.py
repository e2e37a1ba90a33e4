"""CreateAcls: v1-3

Behavior:
- Stores each valid ACL in the cluster metadata (the embedded store or etcd), from where
  every broker's authorizer takes it; an ACL that exists already is a success. Answers one
  result per creation, in order.
- Each creation is checked as Kafka's AclApis and AclControlManager check it, with their
  INVALID_REQUEST messages: a CLUSTER resource not named ``kafka-cluster``, an empty name,
  a principal without a ``Type:`` prefix. A success carries an empty error message.
- A creation with resource type ANY, pattern type ANY or MATCH, operation ANY or permission
  ANY fails the whole request with UNKNOWN_SERVER_ERROR and no message: Kafka 4.3.1 cannot
  build such a binding (its constructors throw) and answers so (compared with a real one).
- No authorizer configured: SECURITY_DISABLED "No Authorizer is configured." for each.
- The caller needs ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED for each.
- A creation with a code Kafka does not know (UNKNOWN) does not parse in Kafka: the
  connection is closed.

Version notes:
- v0 was removed in Kafka 4.0; v1 pattern type; v2 flexible; v3 USER resource type.
"""

from protocol.api import register
from protocol.errors import ErrorCode, KafkaError
from security.acls import StandardAcl, is_binding, validate_new_acl

from ..authorization import AclOperation, authorize_cluster
from ..request_context import CloseConnection, RequestContext


@register(30, 1, 3)
async def handle_create_acls(ctx: RequestContext, request) -> dict:
    acls = [StandardAcl.from_wire(c) for c in request.creations]
    if any(acl.is_unknown for acl in acls):
        raise CloseConnection("CreateAclsRequest contains UNKNOWN elements")
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return _all_failed(acls, ErrorCode.cluster_authorization_failed, "Request CreateAcls is not authorized.")
    if ctx.services.authorizer is None:
        return _all_failed(acls, ErrorCode.security_disabled, "No Authorizer is configured.")
    if any(not is_binding(acl) for acl in acls):
        # Kafka cannot even build the binding (ANY / MATCH): the whole request fails.
        return _all_failed(acls, ErrorCode.unknown_server_error, None)
    results, valid = [], []
    for acl in acls:
        try:
            validate_new_acl(acl)
            valid.append(acl)
            results.append({"error_code": 0, "error_message": ""})
        except KafkaError as exc:
            results.append({"error_code": exc.code, "error_message": exc.message})
    if valid:
        try:
            await ctx.services.control.acls.create(valid)
        except KafkaError as exc:
            results = [r if r["error_code"] else {"error_code": exc.code, "error_message": exc.message}
                       for r in results]
    return {"throttle_time": 0, "results": results}


def _all_failed(acls: list, code: ErrorCode, message: str | None) -> dict:
    return {"throttle_time": 0, "results": [{"error_code": code, "error_message": message} for _ in acls]}
