"""AlterClientQuotas: v0-1

Behavior:
- Each entry sets or removes quota keys of one entity (``user``, ``client-id`` or ``ip``
  components; a null name is the type's default), checked as Kafka 4.3.1's
  ``ClientQuotaControlManager`` with its messages (metadata/controller/client_quotas.py):
  an empty entity, an unknown entity type, an empty name, ``ip`` combined with ``user`` or
  ``client-id``, an ip that does not resolve, an unknown key for the entity's kind, a value not
  above 0, a fraction for an integral key (``producer_byte_rate``, ``consumer_byte_rate``,
  ``connection_creation_rate``) are INVALID_REQUEST for that entity; a key given twice in one
  entry or an entity given twice is "Ignoring duplicate entity". One result per distinct entity.
- The valid alterations are stored together in the cluster metadata; ``validate_only`` stores
  nothing. DescribeClientQuotas reads them back; broker/quotas.py and
  broker/connection_quotas.py enforce them from the next request or connection on.
- With an authorizer: ALTER_CONFIGS on the cluster, else CLUSTER_AUTHORIZATION_FAILED for each
  entry.

Version notes:
- v1 is flexible.
"""

from metadata.controller import client_quotas
from protocol.api import register
from protocol.errors import ErrorCode

from ..authorization import AclOperation, authorize_cluster
from ..request_context import RequestContext


@register(49, 0, 1)
async def handle_alter_client_quotas(ctx: RequestContext, request) -> dict:
    if not authorize_cluster(ctx, AclOperation.ALTER_CONFIGS):
        return {"throttle_time": 0, "entries": [
            {"error_code": ErrorCode.cluster_authorization_failed, "error_message": None,
             "entity": [{"entity_type": c.entity_type, "entity_name": c.entity_name} for c in e.entity]}
            for e in request.entries]}
    outcomes = await ctx.services.control.quotas.alter(request.entries, request.validate_only)
    return {"throttle_time": 0, "entries": [
        {"error_code": o.error_code, "error_message": o.error_message,
         "entity": client_quotas.response_entity(o.entity)} for o in outcomes]}
