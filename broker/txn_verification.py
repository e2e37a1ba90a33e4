"""KIP-890 verification (part 1) and implicit adds (part 2) sent to a transaction coordinator
on another broker, batched per coordinator node (Kafka's ``AddPartitionsToTxnManager``).

Owns the per-node queues: a verification for a (transactional id, producer id, epoch) joins the
node's next AddPartitionsToTxn v4 request (``verify_only``; without it, for the add of a
Produce v12+ or TxnOffsetCommit v5+, the coordinator adds the partitions under transaction
version 2), which carries every transaction queued for that node. One request per node is in
flight; what arrives meanwhile goes in the next. Two verifications of the same transactional
id in one batch merge their partitions.

Differs from Kafka: no inter-broker send thread (the event loop batches what arrived while the
previous request was in flight); an older producer epoch queued beside a newer one is answered
INVALID_PRODUCER_EPOCH at once, and a newer one replaces an older one, whose callers get
NETWORK_EXCEPTION (retriable), as Kafka answers them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import structlog

from protocol.errors import ErrorCode

log = structlog.get_logger("broker.txn_verification")

API_KEY, API_VERSION = 24, 4
REQUEST_TIMEOUT_S = 10

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class _Pending:
    producer_id: int
    producer_epoch: int
    partitions: set[TopicPartition] = field(default_factory=set)
    verify_only: bool = True
    result: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class AddPartitionsToTxnManager:
    def __init__(self, client) -> None:
        self.client = client  # broker.network_client.NetworkClient
        self.queued: dict[int, dict[str, _Pending]] = {}
        self.senders: dict[int, asyncio.Task] = {}

    async def verify(self, node_id: int, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[TopicPartition], *, add: bool = False) -> dict[TopicPartition, int]:
        """(topic, partition) -> error code (0: in the transaction) from the coordinator on
        ``node_id``. With ``add`` the partitions are added; an add merged with a verification
        of the same transaction adds both (what is in the transaction stays in it)."""
        batch = self.queued.setdefault(node_id, {})
        entry = batch.get(transactional_id)
        if entry is not None and (entry.producer_id, entry.producer_epoch) != (producer_id, producer_epoch):
            if entry.producer_id == producer_id and producer_epoch < entry.producer_epoch:
                return {tp: ErrorCode.invalid_producer_epoch for tp in partitions}
            _settle(entry.result, {tp: ErrorCode.network_exception for tp in entry.partitions})
            entry = None
        if entry is None:
            entry = batch[transactional_id] = _Pending(producer_id, producer_epoch)
        entry.partitions.update(partitions)
        entry.verify_only = entry.verify_only and not add
        sender = self.senders.get(node_id)
        if sender is None or sender.done():
            self.senders[node_id] = asyncio.get_running_loop().create_task(self._send_loop(node_id))
        results = await asyncio.shield(entry.result)
        return {tp: results.get(tp, ErrorCode.unknown_server_error) for tp in partitions}

    async def _send_loop(self, node_id: int) -> None:
        """Send what is queued for ``node_id``, one request at a time, until nothing is left."""
        await asyncio.sleep(0)  # let verifications of the same loop tick join the first request
        while self.queued.get(node_id):
            batch = self.queued.pop(node_id)
            try:
                await self._send(node_id, batch)
            except Exception:  # never leave a caller waiting
                log.exception("txn_verification_failed", node_id=node_id)
                for entry in batch.values():
                    _settle(entry.result, {tp: ErrorCode.unknown_server_error for tp in entry.partitions})

    async def _send(self, node_id: int, batch: dict[str, _Pending]) -> None:
        request = {"transactions": [_transaction(txn_id, e) for txn_id, e in batch.items()]}
        try:
            response = await self.client.send_request(node_id, API_KEY, API_VERSION, request,
                                                      timeout=REQUEST_TIMEOUT_S)
        except (ConnectionError, OSError, TimeoutError) as exc:
            log.warning("txn_verification_unreachable", node_id=node_id, error=str(exc))
            for entry in batch.values():
                _settle(entry.result, {tp: ErrorCode.coordinator_not_available for tp in entry.partitions})
            return
        by_txn = {r.transactional_id: r for r in response.results_by_transaction}
        for txn_id, entry in batch.items():
            if response.error_code:
                _settle(entry.result, {tp: response.error_code for tp in entry.partitions})
                continue
            out: dict[TopicPartition, int] = {}
            result = by_txn.get(txn_id)
            for topic in (result.topic_results if result is not None else ()):
                for part in topic.results_by_partition:
                    out[(topic.name, part.partition_index)] = part.partition_error_code
            _settle(entry.result, out)

    def close(self) -> None:
        for task in self.senders.values():
            task.cancel()
        for batch in self.queued.values():
            for entry in batch.values():
                _settle(entry.result, {tp: ErrorCode.coordinator_not_available for tp in entry.partitions})
        self.queued.clear()


def _transaction(transactional_id: str, entry: _Pending) -> dict:
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(entry.partitions):
        by_topic.setdefault(topic, []).append(index)
    return {"transactional_id": transactional_id, "producer_id": entry.producer_id,
            "producer_epoch": entry.producer_epoch, "verify_only": entry.verify_only,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}


def _settle(fut: asyncio.Future, result: dict) -> None:
    if not fut.done():
        fut.set_result(result)
