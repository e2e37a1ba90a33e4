"""DescribeUserScramCredentials: v0

Behavior:
- No users named (null or empty): every user with a SCRAM credential, each with its mechanisms
  and iteration counts (never the salt or keys). A named user without credentials gets
  RESOURCE_NOT_FOUND, a user named twice DUPLICATE_RESOURCE, each with Kafka's message
  (``ScramImage.describe``); the top-level error is NONE.
- Answered by any broker from its metadata image.
- With an authorizer: DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED.

Version notes:
- v0 is flexible.
"""

from protocol.api import register
from protocol.errors import ErrorCode
from security import scram

from ..authorization import AclOperation, authorize_cluster
from ..request_context import RequestContext


@register(50, 0, 0)
async def handle_describe_user_scram_credentials(ctx: RequestContext, request) -> dict:
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "error_message": None,
                "results": []}
    users = None if request.users is None else [u.name for u in request.users]
    return {"throttle_time": 0, "error_code": 0, "error_message": None,
            "results": scram.describe(ctx.services.metadata.scram_credentials, users)}
