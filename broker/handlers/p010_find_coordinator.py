"""FindCoordinator: v0-5

Behavior:
- key_type 0 (group): this broker, after creating ``__consumer_offsets`` (compacted,
  ``offsets.topic.num.partitions`` partitions) on first use, as Kafka does.
- key_type 1 (transaction): this broker, after creating ``__transaction_state`` on first use;
  COORDINATOR_LOAD_IN_PROGRESS while its partition is being loaded.
- Any other key type: INVALID_REQUEST.

Version notes:
- v1 key type, error message; v3 flexible; v4 batched ``coordinator_keys`` (one result per key).
"""

from protocol.api import register
from protocol.errors import ErrorCode

from ..server import RequestContext

GROUP, TRANSACTION = 0, 1


def _lookup(ctx: RequestContext, key: str, key_type: int) -> dict:
    broker = ctx.broker
    if key_type == GROUP:
        code = broker.group_coordinator.coordinator_error(key)
    elif key_type == TRANSACTION:
        code = broker.txn_coordinator.coordinator_error(key)
    else:
        code = ErrorCode.invalid_request
    if code:
        return {"key": key, "error_code": code, "error_message": ErrorCode(code).name,
                "node_id": -1, "host": "", "port": -1}
    return {"key": key, "error_code": 0, "error_message": None, "node_id": broker.node_id,
            "host": broker.host, "port": broker.port}


@register(10, 0, 5)
async def handle_find_coordinator(ctx: RequestContext, request) -> dict:
    key_type = getattr(request, "key_type", GROUP)
    if ctx.api_version >= 4:
        return {"throttle_time": 0,
                "coordinators": [_lookup(ctx, k, key_type) for k in request.coordinator_keys]}
    result = _lookup(ctx, request.key, key_type)
    result["throttle_time"] = 0
    return result
