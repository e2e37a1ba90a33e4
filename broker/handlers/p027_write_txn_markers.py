"""WriteTxnMarkers: v1-2

Behavior:
- Sent by a transaction coordinator (ours, over the network path even when the leader is
  this broker) or by an admin tool aborting a hanging transaction: for each marker, a
  COMMIT or ABORT control batch (value: version 0, coordinator epoch) is appended to every
  listed partition led here; the last stable offset advances and an ABORT that ends a
  transaction on the partition gets an aborted-transaction index entry.
- Per partition: UNKNOWN_TOPIC_OR_PARTITION if not hosted here; INVALID_PRODUCER_EPOCH for
  an older producer epoch (for a transaction version 2 marker, one not newer than the
  producer's, unless it repeats a marker already written); TRANSACTION_COORDINATOR_FENCED for
  an older coordinator epoch.
- Markers on ``__consumer_offsets`` partitions make the group coordinator materialize
  (COMMIT) or drop (ABORT) the producer's pending transactional offsets; a COMMIT applies
  only offsets written at its transaction's producer epoch (the marker's, or the one before
  it under transaction version 2, whose coordinator bumps the epoch to end a transaction).
  Until the group coordinator has loaded the partition the marker is refused with
  NOT_LEADER_OR_FOLLOWER (Kafka 4 translates its runtime's load errors so), which the
  transaction coordinator retries.
- Appended with acks=all, as Kafka does: the answer waits until each marker is replicated to
  the ISR (REQUEST_TIMED_OUT after request.timeout.ms); a partition led elsewhere answers
  NOT_LEADER_OR_FOLLOWER.
- With an authorizer: CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED for
  every partition.

Version notes:
- v0 is gone from Kafka 4.x (KIP-896); v1 is flexible; v2 carries each marker's transaction
  version (KIP-1228), 0 below v2.
"""

import asyncio

from coordinator.group.metadata import OFFSETS_TOPIC
from protocol.api import register
from protocol.errors import ErrorCode, KafkaError

from ..authorization import AclOperation, authorize_cluster
from ..request_context import RequestContext


@register(27, 1, 2)
async def handle_write_txn_markers(ctx: RequestContext, request) -> dict:
    broker = ctx.services
    rm = broker.replica_manager
    results = []
    waiting = []
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return _all_failed(request, ErrorCode.cluster_authorization_failed)
    for marker in request.markers:
        version = getattr(marker, "transaction_version", 0)
        # The epoch the transaction's data and offsets were written at.
        txn_epoch = marker.producer_epoch - 1 if version >= 2 else marker.producer_epoch
        topics = []
        for t in marker.topics:
            parts = []
            for index in t.partition_indexes:
                try:
                    offsets = broker.group_coordinator.offsets if t.name == OFFSETS_TOPIC else None
                    if offsets is not None and not offsets.accepts_txn_markers(index):
                        raise KafkaError(ErrorCode.not_leader_or_follower)
                    info = rm.append_marker(t.name, index, marker.producer_id, marker.producer_epoch,
                                            marker.coordinator_epoch, marker.transaction_result, version)
                    if offsets is not None:  # no await since the append: the same partition state
                        offsets.complete_txn_offset_commits(index, marker.producer_id,
                                                            marker.transaction_result, txn_epoch)
                    parts.append({"partition_index": index, "error_code": 0})
                    waiter = rm.delayed_produce(t.name, index, info.last_offset + 1)
                    if waiter is not None:
                        waiting.append((parts[-1], waiter))
                except KafkaError as exc:
                    broker.metrics.errors.labels("WriteTxnMarkers", exc.code.name).inc()
                    parts.append({"partition_index": index, "error_code": exc.code})
            topics.append({"name": t.name, "partitions": parts})
        results.append({"producer_id": marker.producer_id, "topics": topics})
    flush = [rm.get(t.name, i).log for m in request.markers for t in m.topics
             for i in t.partition_indexes if (t.name, i) in rm.partitions and rm.needs_flush(t.name, i)]
    if flush:
        await rm.flush(flush)
    await _await_replication(waiting, broker.config["request.timeout.ms"] / 1000)
    return {"markers": results}


def _all_failed(request, code: ErrorCode) -> dict:
    return {"markers": [{"producer_id": m.producer_id, "topics": [
        {"name": t.name, "partitions": [{"partition_index": i, "error_code": code} for i in t.partition_indexes]}
        for t in m.topics]} for m in request.markers]}


async def _await_replication(waiting: list, timeout_s: float) -> None:
    """Markers are written with acks=all, as Kafka writes them: answer once replicated."""
    if not waiting:
        return
    done, _ = await asyncio.wait([w for _, w in waiting], timeout=timeout_s)
    for result, waiter in waiting:
        if waiter not in done:
            result["error_code"] = ErrorCode.request_timed_out
        elif waiter.result():
            result["error_code"] = waiter.result()
