"""AlterShareGroupOffsets: v0 (KIP-932)

Behavior:
- Sets the share-partition start offset of each partition (its in-flight state is dropped);
  the next ShareFetch starts there. A group with members is NON_EMPTY_GROUP, a classic or
  consumer group GROUP_ID_NOT_FOUND "Group X is not a share group.", a coordinator problem
  its error code (top-level); an unknown topic or partition
  UNKNOWN_TOPIC_OR_PARTITION per partition (``coordinator/share/admin.py``).
- With an authorizer: READ on the group, else GROUP_AUTHORIZATION_FAILED.

Version notes:
- v0 only.
"""

from protocol.api import register
from protocol.errors import ErrorCode

from ..authorization import AclOperation, ResourceType, authorize
from ..request_context import RequestContext


@register(91, 0, 0)
async def handle_alter_share_group_offsets(ctx: RequestContext, request) -> dict:
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "error_message": None,
                "responses": []}
    topics = [(t.topic_name, [(p.partition_index, p.start_offset) for p in t.partitions]) for t in request.topics]
    result = await ctx.services.share_offsets.alter(request.group_id, topics)
    return {"throttle_time": 0, **result}
