"""AlterUserScramCredentials: v0

Behavior:
- Deletions and upsertions of (user, mechanism) credentials, checked as Kafka's
  ``ScramControlManager``: an empty user name is UNACCEPTABLE_CREDENTIAL, an unknown mechanism
  UNSUPPORTED_SASL_MECHANISM, fewer than 4096 or more than 16384 iterations
  UNACCEPTABLE_CREDENTIAL ("Too few iterations" / "Too many iterations"), deleting a credential
  that does not exist RESOURCE_NOT_FOUND, a user altered twice in one request (even for two
  mechanisms) DUPLICATE_RESOURCE. One result per user.
- The valid alterations are stored together in the cluster metadata: the salt, StoredKey,
  ServerKey and iterations (the salted password is not kept).
- With an authorizer: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED for each user.

Version notes:
- v0 is flexible.
"""

from protocol.api import register
from protocol.errors import ErrorCode

from ..authorization import AclOperation, authorize_cluster
from ..request_context import RequestContext


@register(51, 0, 0)
async def handle_alter_user_scram_credentials(ctx: RequestContext, request) -> dict:
    if not authorize_cluster(ctx, AclOperation.ALTER):
        users = [d.name for d in request.deletions] + [u.name for u in request.upsertions]
        return {"throttle_time": 0, "results": [
            {"user": u, "error_code": ErrorCode.cluster_authorization_failed, "error_message": None}
            for u in dict.fromkeys(users)]}
    outcomes = await ctx.services.control.scram.alter(request.deletions, request.upsertions)
    return {"throttle_time": 0, "results": [
        {"user": o.user, "error_code": o.error_code, "error_message": o.error_message} for o in outcomes]}
