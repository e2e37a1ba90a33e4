"""DescribeClientQuotas: v0-1

Behavior:
- Answers the quotas AlterClientQuotas stored (cluster metadata) that match the filter, as
  Kafka 4.3.1's ``ClientQuotasImage.describe`` (metadata/controller/client_quotas.py):
  EXACT matches a name, DEFAULT the type's default entity, SPECIFIED any entity with that type;
  ``strict`` keeps entities with exactly the filtered types; no component lists every entity
  (none when strict). Each entry carries its entity (null name = default) and its values.
- The filter is checked as Kafka checks it (answers compared with a real one): entity types are
  ``user``, ``client-id`` and ``ip``, another is UNSUPPORTED_VERSION; an empty or repeated
  entity type, an exact match without a name, a default or specified match with one, an unknown
  match type and an ``ip`` component combined with ``user`` or ``client-id`` are
  INVALID_REQUEST, each with Kafka's message and null entries. A success carries an empty
  error message, as Kafka's does.
- With an authorizer: DESCRIBE_CONFIGS on the cluster, else CLUSTER_AUTHORIZATION_FAILED.

Version notes:
- v1 is flexible.
"""

from metadata.controller import client_quotas
from protocol.api import register
from protocol.errors import ErrorCode

from ..authorization import AclOperation, authorize_cluster
from ..request_context import RequestContext


@register(48, 0, 1)
async def handle_describe_client_quotas(ctx: RequestContext, request) -> dict:
    if not authorize_cluster(ctx, AclOperation.DESCRIBE_CONFIGS):
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                "error_message": None, "entries": None}
    try:
        entries = client_quotas.describe(ctx.services.metadata.client_quotas, request.components, request.strict)
    except client_quotas.FilterError as e:
        return {"throttle_time": 0, "error_code": e.code, "error_message": e.message, "entries": None}
    return {"throttle_time": 0, "error_code": 0, "error_message": "", "entries": entries}
