"""DeleteShareGroupOffsets: v0 (KIP-932)

Behavior:
- Deletes the share-partition state of every partition of each topic, so the next fetch
  starts again from ``share.auto.offset.reset``. An unknown group is GROUP_ID_NOT_FOUND (a
  classic or consumer group: "Group X is not a share group."), a
  group with members NON_EMPTY_GROUP, a coordinator problem its error code (top-level); an
  unknown topic UNKNOWN_TOPIC_OR_PARTITION per topic, a topic the group has no state for the
  same with "There is no offset information to delete." (``coordinator/share/admin.py``).
- With an authorizer: DELETE on the group, else GROUP_AUTHORIZATION_FAILED.

Version notes:
- v0 only.
"""

from protocol.api import register
from protocol.errors import ErrorCode

from ..authorization import AclOperation, ResourceType, authorize
from ..request_context import RequestContext


@register(92, 0, 0)
async def handle_delete_share_group_offsets(ctx: RequestContext, request) -> dict:
    if not authorize(ctx, AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "error_message": None,
                "responses": []}
    result = await ctx.services.share_offsets.delete(request.group_id, [t.topic_name for t in request.topics])
    return {"throttle_time": 0, **result}
