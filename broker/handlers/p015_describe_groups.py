"""DescribeGroups: v0-6

Behavior:
- For each group: its state (Empty, PreparingRebalance, CompletingRebalance, Stable, Dead),
  protocol type, and its members (id, group.instance.id, client id and host). Only a Stable
  group reports the selected protocol and each member's metadata and assignment, as Kafka.
- A group this coordinator does not know is reported as Dead with no error (v0-5), or with
  GROUP_ID_NOT_FOUND and "Group <id> not found." (v6+, KIP-1043), as Kafka 4.3.
- A group of another type (a KIP-848 consumer group, a share group) is not a classic group:
  Dead with no error (v0-5), or GROUP_ID_NOT_FOUND and "Group <id> is not a classic group."
  (v6+), as Kafka 4.3.1.
- Authorized operations (v3+, when asked, for a group answered without error): READ, DELETE,
  DESCRIBE, DESCRIBE_CONFIGS and ALTER_CONFIGS (3400) with no authorizer, else those of them
  the caller is allowed, as Kafka 4.3.
- With an authorizer: DESCRIBE on the group, else GROUP_AUTHORIZATION_FAILED; the authorized
  operations are those the caller is allowed.

Version notes:
- v1 throttle time; v3 authorized operations (KIP-430); v4 group.instance.id; v5 flexible;
  v6 error message and GROUP_ID_NOT_FOUND for an unknown group (KIP-1043).
"""

from coordinator.group.state import GroupState
from protocol.api import register
from protocol.errors import ErrorCode

from ..authorization import AclOperation, ResourceType, authorize, group_operations
from ..request_context import RequestContext


@register(15, 0, 6)
async def handle_describe_groups(ctx: RequestContext, request) -> dict:
    include_ops = ctx.api_version >= 3 and bool(getattr(request, "include_authorized_operations", False))
    coordinator = ctx.services.group_coordinator
    groups = []
    for group_id in request.groups:
        described = coordinator.describe_group(group_id)
        message = described.pop("error_message", None) or f"Group {group_id} not found."
        if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            described = {**described, "error_code": ErrorCode.group_authorization_failed, "group_state": "",
                         "protocol_type": "", "protocol_data": "", "members": []}
        if ctx.api_version >= 6 and described["error_code"] == 0 and described["group_state"] == GroupState.DEAD.value:
            described.update(error_code=ErrorCode.group_id_not_found, error_message=message)
        described["authorized_operations"] = group_operations(include_ops and described["error_code"] == 0, ctx,
                                                            group_id)
        groups.append(described)
    return {"throttle_time": 0, "groups": groups}
