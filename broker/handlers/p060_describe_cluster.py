"""DescribeCluster: v0-2

Behavior:
- Returns the cluster id, the controller id (this broker while it is unfenced, which serves
  admin requests itself; a KRaft broker reports a random live broker; the metadata quorum's
  leader is DescribeQuorum's) and the live brokers' endpoints on the listener the request
  arrived on (a broker without that listener is left out, as in Kafka).
- ``include_cluster_authorized_operations``: with no authorizer every cluster operation is
  allowed (8096, see :mod:`broker.authorization`), as Kafka; otherwise INT32_MIN.
- v1 ``endpoint_type``: BROKERS (1) is answered; CONTROLLERS (2) gets MISMATCHED_ENDPOINT_TYPE
  (this is a broker endpoint) and any other value UNSUPPORTED_ENDPOINT_TYPE (INVALID_REQUEST on
  v0), as Kafka's AuthHelper.computeDescribeClusterResponse.
- v2 ``include_fenced_brokers``: the registered brokers whose session lapsed (down, or not yet
  back) are listed too, with ``is_fenced`` set, as KRaft lists them; otherwise only unfenced
  brokers are.

Version notes:
- v0 flexible; v1 endpoint_type in request and response; v2 fenced brokers (KIP-1073).
"""

from protocol.api import register
from protocol.errors import ErrorCode

from ..authorization import cluster_operations
from ..request_context import RequestContext

BROKER_ENDPOINT, CONTROLLER_ENDPOINT = 1, 2


@register(60, 0, 2)
async def handle_describe_cluster(ctx: RequestContext, request) -> dict:
    b = ctx.services
    endpoint_type = getattr(request, "endpoint_type", BROKER_ENDPOINT)
    if endpoint_type != BROKER_ENDPOINT:
        if endpoint_type == CONTROLLER_ENDPOINT:
            code = ErrorCode.mismatched_endpoint_type
            message = "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER"
        else:
            code = ErrorCode.unsupported_endpoint_type
            message = f"Unsupported endpoint type {endpoint_type}"
        if ctx.api_version == 0:
            code = ErrorCode.invalid_request
        return {"throttle_time": 0, "error_code": code, "error_message": message,
                "endpoint_type": BROKER_ENDPOINT, "cluster_id": "", "controller_id": -1, "brokers": []}
    return {
        "throttle_time": 0, "error_code": 0, "error_message": None,
        "endpoint_type": BROKER_ENDPOINT,
        "cluster_id": b.cluster_id,
        "controller_id": b.metadata.controller_for_clients(b.node_id),
        "brokers": [{"broker_id": n, "host": host, "port": port, "rack": rack,
                     "is_fenced": n not in b.metadata.brokers}
                    for n, host, port, rack in b.metadata.brokers_on(
                        ctx.listener, include_fenced=getattr(request, "include_fenced_brokers", False))],
        "cluster_authorized_operations": cluster_operations(request.include_cluster_authorized_operations, ctx),
    }
