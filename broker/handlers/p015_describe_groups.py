"""DescribeGroups: v0-5

Behavior:
- For each group: its state (Empty, PreparingRebalance, CompletingRebalance, Stable, Dead),
  protocol type, and its members (id, group.instance.id, client id and host). Only a Stable
  group reports the selected protocol and each member's metadata and assignment, as Kafka.
- A group this coordinator does not know is reported as Dead with no error (v0-5).
- Authorized operations (v3+, when asked, for a group answered without error): READ, DELETE,
  DESCRIBE, DESCRIBE_CONFIGS and ALTER_CONFIGS (3400: there is no authorizer), as Kafka 4.3.

Version notes:
- v1 throttle time; v3 authorized operations (KIP-430); v4 group.instance.id; v5 flexible.
"""

from protocol.api import register

from ..authorization import group_operations
from ..server import RequestContext


@register(15, 0, 5)
async def handle_describe_groups(ctx: RequestContext, request) -> dict:
    include_ops = ctx.api_version >= 3 and bool(getattr(request, "include_authorized_operations", False))
    coordinator = ctx.services.group_coordinator
    groups = []
    for group_id in request.groups:
        described = coordinator.describe_group(group_id)
        described["authorized_operations"] = group_operations(include_ops and described["error_code"] == 0)
        groups.append(described)
    return {"throttle_time": 0, "groups": groups}
