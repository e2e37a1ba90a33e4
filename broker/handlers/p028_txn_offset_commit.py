"""TxnOffsetCommit: v0-4

Behavior:
- Offsets committed inside a transaction: appended to ``__consumer_offsets`` as a
  transactional batch and held pending by the group coordinator until the transaction's
  marker lands (COMMIT makes them visible, ABORT drops them); OffsetFetch with require_stable
  answers UNSTABLE_OFFSET_COMMIT meanwhile.
- KIP-447 fencing (v3+): a stale generation gets ILLEGAL_GENERATION, an unknown member
  UNKNOWN_MEMBER_ID, a stale producer epoch INVALID_PRODUCER_EPOCH.

Version notes:
- v2 committed leader epoch; v3 generation, member id, group instance id (KIP-447); v3+
  flexible; before v2 COORDINATOR_LOAD_IN_PROGRESS is answered as COORDINATOR_NOT_AVAILABLE.
"""

from coordinator.group.state import OffsetAndMetadata
from protocol.api import register
from protocol.errors import ErrorCode

from ..server import RequestContext


@register(28, 0, 4)
async def handle_txn_offset_commit(ctx: RequestContext, request) -> dict:
    offsets = {(t.name, p.partition_index): OffsetAndMetadata(
        offset=p.committed_offset, leader_epoch=getattr(p, "committed_leader_epoch", -1),
        metadata=p.committed_metadata or "")
        for t in request.topics for p in t.partitions}
    errors = await ctx.broker.group_coordinator.txn_offset_commit(
        group_id=request.group_id, producer_id=request.producer_id, producer_epoch=request.producer_epoch,
        member_id=getattr(request, "member_id", ""), group_instance_id=getattr(request, "group_instance_id", None),
        generation_id=getattr(request, "generation_id", -1), offsets=offsets)

    def code(tp) -> int:
        c = errors.get(tp, 0)
        if c == ErrorCode.coordinator_load_in_progress and ctx.api_version < 2:
            return ErrorCode.coordinator_not_available
        return c

    return {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                         "error_code": code((t.name, p.partition_index))}
                                        for p in t.partitions]}
        for t in request.topics]}
