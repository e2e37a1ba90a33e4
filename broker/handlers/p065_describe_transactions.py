"""DescribeTransactions: v0

Behavior:
- For each transactional id this broker coordinates: its state name (Empty, Ongoing,
  PrepareCommit, ...), timeout, start time (-1 before the first transaction), producer id
  and epoch, and partitions (KIP-664).
- Unknown (or expiring) id: TRANSACTIONAL_ID_NOT_FOUND; "" INVALID_REQUEST; not coordinated
  here: NOT_COORDINATOR; partition loading: COORDINATOR_LOAD_IN_PROGRESS. Errors carry zeros
  in the other fields, as in Kafka.
- With an authorizer: DESCRIBE on the transactional id, else
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED.

Version notes:
- v0 only (flexible).
"""

from protocol.api import register
from protocol.errors import ErrorCode

from ..authorization import AclOperation, ResourceType, authorize
from ..request_context import RequestContext


@register(65, 0, 0)
async def handle_describe_transactions(ctx: RequestContext, request) -> dict:
    coordinator = ctx.services.txn_coordinator
    return {"throttle_time": 0,
            "transaction_states": [coordinator.describe(t) if authorize(ctx, AclOperation.DESCRIBE,
                                                                        ResourceType.TRANSACTIONAL_ID, t)
                                   else _refused(t) for t in request.transactional_ids]}


def _refused(transactional_id: str) -> dict:
    return {"error_code": ErrorCode.transactional_id_authorization_failed, "transactional_id": transactional_id,
            "transaction_state": "", "transaction_timeout": 0, "transaction_start_time": 0, "producer_id": 0,
            "producer_epoch": 0, "topics": []}
