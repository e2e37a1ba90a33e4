"""UnregisterBroker: v0

Behavior:
- Removes a broker's registration (``kafka-cluster unregister --id N``), as KRaft's controller
  does for a broker that is gone for good: it no longer counts for replica placement or
  replication factors, and DescribeCluster stops listing it even with ``include_fenced_brokers``.
  Partitions keep it in their replica lists until they are reassigned, as in Kafka.
- A broker id that is not registered: BROKER_ID_NOT_REGISTERED. A broker that is still up
  registers again at once, as a KRaft broker re-registers when its heartbeat finds its
  registration gone.
- With an authorizer: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED.

Version notes:
- v0 only (flexible). Kafka's brokers forward it to the controller; any broker applies it here.
"""

from protocol.api import register
from protocol.errors import ErrorCode, KafkaError

from ..authorization import AclOperation, authorize_cluster
from ..request_context import RequestContext


@register(64, 0, 0)
async def handle_unregister_broker(ctx: RequestContext, request) -> dict:
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return _response(ErrorCode.cluster_authorization_failed, None)
    try:
        await ctx.services.control.cluster.unregister_broker(request.broker_id)
    except KafkaError as exc:
        return _response(exc.code, exc.message)
    return _response(0, None)


def _response(code: int, message: str | None) -> dict:
    return {"throttle_time": 0, "error_code": code, "error_message": message}
