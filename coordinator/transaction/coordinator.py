"""The transaction coordinator (Kafka's TransactionCoordinator + TransactionStateManager +
TransactionMarkerChannelManager, for transaction version 1).

Owns: the metadata of every transactional id whose ``__transaction_state`` partition this
broker leads (loaded from the log at start, COORDINATOR_LOAD_IN_PROGRESS meanwhile); the RPC
semantics of InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, KIP-890 partition
verification, DescribeTransactions and ListTransactions; the marker channel, which sends
WriteTxnMarkers to each partition's leader over the network (also when that is this broker)
and retries until every partition has its marker, then writes CompleteCommit/CompleteAbort;
aborting timed-out transactions (with an epoch bump that fences the stalled producer) and
expiring idle transactional ids.

Every transition is prepared, appended to ``__transaction_state``, and only then applied.

Differs from Kafka: one coordinator epoch per partition = that partition's leader epoch; a
failed or fenced marker send is retried until the transaction completes (no separate queue
for unknown leaders); transaction version 2 (KIP-890 part 2) is not offered.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

import structlog

from coordinator.group.metadata import partition_for
from protocol import records as rb
from protocol.errors import ErrorCode

from . import log as txn_log
from .state import MAX_PRODUCER_EPOCH, NO_PRODUCER_EPOCH, IllegalTransition, TransactionMetadata, TxnState

log = structlog.get_logger("coordinator.transaction")

TXN_TOPIC = "__transaction_state"
WRITE_TXN_MARKERS = 27
MARKER_WAIT_S = 0.05
RETRY_MARKER_ERRORS = {
    ErrorCode.unknown_topic_or_partition, ErrorCode.not_leader_or_follower,
    ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append,
    ErrorCode.request_timed_out, ErrorCode.kafka_storage_error,
}


def now_ms() -> int:
    return int(time.time() * 1000)


class TxnServices(Protocol):
    """What the coordinator needs from the broker, handed in at construction."""

    node_id: int

    def config(self, key: str) -> Any: ...
    def ensure_topic(self, name: str, partitions: int, configs: dict[str, str]) -> None: ...
    def topic_partitions(self, name: str) -> int | None: ...
    def append(self, topic: str, partition: int, records: bytes) -> int: ...
    def partition_batches(self, topic: str, partition: int): ...
    def leader_epoch(self, topic: str, partition: int) -> int: ...
    def leader_of(self, topic: str, partition: int) -> tuple[int, str, int] | None: ...
    def generate_producer_id(self) -> int: ...
    async def send_request(self, host: str, port: int, api_key: int, api_version: int, body: dict) -> Any: ...
    def count(self, metric: str, reason: str) -> None: ...
    async def flush(self, topic: str, partition: int) -> None: ...


class TransactionCoordinator:
    def __init__(self, services: TxnServices) -> None:
        self.s = services
        self.txns: dict[str, TransactionMetadata] = {}
        self.loading: set[int] = set()
        self.owned: set[int] = set()
        self.marker_tasks: dict[str, asyncio.Task] = {}
        self.tasks: list[asyncio.Task] = []
        self.paused_markers = "txn.markers.pause" in (self.s.config("test.fault.points") or "")

    # --- lifecycle and ownership ----------------------------------------------------------------

    @property
    def num_partitions(self) -> int:
        return self.s.topic_partitions(TXN_TOPIC) or self.s.config("transaction.state.log.num.partitions")

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    async def start(self) -> None:
        n = self.s.topic_partitions(TXN_TOPIC)
        if n:
            self.loading = set(range(n))
            self.tasks.append(asyncio.get_running_loop().create_task(self._load_all(n)))
        interval = self.s.config("transaction.abort.timed.out.transaction.cleanup.interval.ms") / 1000
        self.tasks.append(asyncio.get_running_loop().create_task(self._every(interval, self.abort_timed_out)))
        expire = self.s.config("transaction.remove.expired.transaction.cleanup.interval.ms") / 1000
        self.tasks.append(asyncio.get_running_loop().create_task(self._every(expire, self.expire_ids)))

    async def stop(self) -> None:
        for task in [*self.tasks, *self.marker_tasks.values()]:
            task.cancel()

    async def _every(self, seconds: float, fn) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                fn()
            except Exception:
                log.exception("txn_background_task_failed", task=fn.__name__)

    def _ensure_topic(self) -> None:
        if self.s.topic_partitions(TXN_TOPIC) is None:
            n = self.s.config("transaction.state.log.num.partitions")
            self.s.ensure_topic(TXN_TOPIC, n, {
                "cleanup.policy": "compact",
                "segment.bytes": str(self.s.config("transaction.state.log.segment.bytes")),
                "min.insync.replicas": str(self.s.config("transaction.state.log.min.isr")),
            })
            self.owned = set(range(n))

    def coordinator_error(self, transactional_id: str | None) -> int:
        """0 when this broker coordinates the id (FindCoordinator key_type 1)."""
        if not transactional_id:
            return ErrorCode.invalid_request
        self._ensure_topic()
        p = self.partition_for(transactional_id)
        if p in self.loading:
            return ErrorCode.coordinator_load_in_progress
        if p not in self.owned:
            return ErrorCode.not_coordinator
        return 0

    # --- loading --------------------------------------------------------------------------------

    async def _load_all(self, n: int) -> None:
        started = time.monotonic()
        log.info("txn_coordinator_load_started", partitions=n)
        loaded = 0
        for p in range(n):
            state = await asyncio.to_thread(self._read_partition, p)
            for txn_id, transit in state.items():
                self.txns[txn_id] = TransactionMetadata.from_transit(txn_id, transit)
            loaded += len(state)
            self.owned.add(p)
            self.loading.discard(p)
            if (p + 1) % 10 == 0:
                log.info("txn_coordinator_load_progress", partitions_done=p + 1, partitions=n,
                         transactional_ids=loaded)
        log.info("txn_coordinator_loaded", transactional_ids=loaded,
                 seconds=round(time.monotonic() - started, 3))
        for meta in list(self.txns.values()):
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                log.info("txn_completing_after_load", transactional_id=meta.transactional_id,
                         state=meta.state.state_name)
                self._send_markers(meta)

    def _read_partition(self, p: int) -> dict:
        state: dict = {}
        for batch in self.s.partition_batches(TXN_TOPIC, p):
            header, records = rb.decode_records(batch)
            if header.is_control:
                continue
            for rec in records:
                if rec.key is None:
                    continue
                txn_id = txn_log.decode_key(rec.key)
                if rec.value is None:
                    state.pop(txn_id, None)
                else:
                    state[txn_id] = txn_log.decode_value(rec.value)
        return state

    # --- appending transitions ---------------------------------------------------------------------

    async def _append(self, meta: TransactionMetadata, transit, *, tombstone: bool = False) -> int:
        """Write a prepared transition; complete it in memory only once it is in the log."""
        p = self.partition_for(meta.transactional_id)
        value = None if tombstone else txn_log.encode_value(transit)
        batch = rb.build_batch([(txn_log.encode_key(meta.transactional_id), value)], timestamp=now_ms())
        try:
            self.s.append(TXN_TOPIC, p, bytes(batch))
            await self.s.flush(TXN_TOPIC, p)
        except Exception as exc:
            meta.abort_pending()
            log.warning("txn_state_append_failed", transactional_id=meta.transactional_id, error=str(exc))
            return ErrorCode.coordinator_not_available
        meta.complete_transition(transit)
        return 0

    def _check_owner(self, transactional_id: str | None) -> int:
        if not transactional_id:
            return ErrorCode.invalid_request
        return self.coordinator_error(transactional_id)

    # --- InitProducerId ------------------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int, expected_pid: int,
                               expected_epoch: int) -> tuple[int, int, int]:
        """(error, producer id, epoch)."""
        error = self._check_owner(transactional_id)
        if error:
            return error, -1, -1
        if timeout_ms <= 0 or timeout_ms > self.s.config("transaction.max.timeout.ms"):
            return ErrorCode.invalid_transaction_timeout, -1, -1
        meta = self.txns.get(transactional_id)
        if meta is None:
            meta = self.txns[transactional_id] = TransactionMetadata(
                transactional_id, self.s.generate_producer_id(), txn_timeout_ms=timeout_ms)
        await self._await_markers(meta)
        if meta.pending_state is not None:
            return ErrorCode.concurrent_transactions, -1, -1
        if expected_pid >= 0 and not self._is_valid_expected(meta, expected_pid, expected_epoch):
            self._fenced(meta, "stale producer id/epoch in InitProducerId")
            return ErrorCode.producer_fenced, -1, -1
        state = meta.state
        if state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return ErrorCode.concurrent_transactions, -1, -1
        if state is TxnState.ONGOING:
            # A new incarnation: fence the old one by aborting its transaction at epoch + 1;
            # the caller retries on CONCURRENT_TRANSACTIONS until the abort is complete.
            self._fenced(meta, "new incarnation with the same transactional.id")
            await self._fence_and_abort(meta, "new incarnation")
            return ErrorCode.concurrent_transactions, -1, -1
        if state is TxnState.DEAD or state is TxnState.PREPARE_EPOCH_FENCE:
            return ErrorCode.concurrent_transactions, -1, -1
        # Empty / CompleteCommit / CompleteAbort: next epoch, or a new producer id.
        if meta.producer_epoch >= MAX_PRODUCER_EPOCH - 1 and (
                expected_pid < 0 or expected_epoch == meta.producer_epoch):
            pid, epoch = self.s.generate_producer_id(), 0
            log.info("txn_producer_id_rotated", transactional_id=transactional_id, reason="epoch exhausted")
            self.s.count("rotated", "epoch exhausted")
        elif expected_pid >= 0 and expected_epoch not in (NO_PRODUCER_EPOCH, meta.producer_epoch):
            if expected_epoch != meta.last_producer_epoch:
                self._fenced(meta, "stale epoch in InitProducerId")
                return ErrorCode.producer_fenced, -1, -1
            pid, epoch = meta.producer_id, meta.producer_epoch  # a retried bump: same answer
        else:
            pid, epoch = meta.producer_id, meta.producer_epoch + 1
        transit = meta.prepare_init(pid, epoch, timeout_ms, now_ms())
        error = await self._append(meta, transit)
        if error:
            return error, -1, -1
        return 0, meta.producer_id, meta.producer_epoch

    @staticmethod
    def _is_valid_expected(meta: TransactionMetadata, pid: int, epoch: int) -> bool:
        if pid == meta.producer_id and epoch == meta.producer_epoch:
            return True
        # A retry of a bump that already succeeded.
        return (pid == meta.producer_id and epoch == meta.last_producer_epoch) or \
            (pid == meta.last_producer_id and epoch == meta.last_producer_epoch)

    def _fenced(self, meta: TransactionMetadata, reason: str) -> None:
        log.info("txn_producer_fenced", transactional_id=meta.transactional_id,
                 producer_id=meta.producer_id, producer_epoch=meta.producer_epoch, reason=reason)
        self.s.count("fenced", reason)

    async def _fence_and_abort(self, meta: TransactionMetadata, reason: str) -> int:
        """PrepareEpochFence (epoch + 1 in memory), then PrepareAbort at that epoch, markers."""
        try:
            meta.prepare_fence_epoch()
        except IllegalTransition as exc:
            log.warning("txn_fence_refused", transactional_id=meta.transactional_id, error=str(exc))
            return ErrorCode.concurrent_transactions
        transit = meta.prepare_abort_or_commit(False, now_ms())
        error = await self._append(meta, transit)
        if error:
            return error
        log.info("txn_aborted", transactional_id=meta.transactional_id, producer_id=meta.producer_id,
                 producer_epoch=meta.producer_epoch, reason=reason)
        self.s.count("aborted", reason)
        self._send_markers(meta)
        return 0

    # --- AddPartitionsToTxn / AddOffsetsToTxn -------------------------------------------------------

    def _check_producer(self, meta: TransactionMetadata | None, pid: int, epoch: int) -> int:
        if meta is None or meta.producer_id != pid:
            return ErrorCode.invalid_producer_id_mapping
        if meta.producer_epoch != epoch:
            return ErrorCode.producer_fenced
        if meta.pending_state is not None:
            return ErrorCode.concurrent_transactions
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return ErrorCode.concurrent_transactions
        return 0

    async def add_partitions(self, transactional_id: str, pid: int, epoch: int,
                             partitions: set[tuple[str, int]]) -> int:
        error = self._check_owner(transactional_id)
        if error:
            return error
        meta = self.txns.get(transactional_id)
        await self._await_markers(meta)
        error = self._check_producer(meta, pid, epoch)
        if error:
            return error
        if meta.state is TxnState.ONGOING and partitions <= meta.partitions:
            return 0
        if meta.state is TxnState.DEAD:
            return ErrorCode.invalid_producer_id_mapping
        transit = meta.prepare_add_partitions(partitions, now_ms())
        return await self._append(meta, transit)

    async def _await_markers(self, meta: TransactionMetadata | None) -> None:
        """A producer that starts its next transaction while the last one's markers are still
        being written would get CONCURRENT_TRANSACTIONS and back off; the markers usually
        land within a millisecond, so wait briefly for them first."""
        if meta is None:
            return
        task = self.marker_tasks.get(meta.transactional_id)
        if task is not None and not task.done() and not self.paused_markers:
            await asyncio.wait({task}, timeout=MARKER_WAIT_S)

    def offsets_partition(self, group_id: str) -> tuple[str, int]:
        n = self.s.topic_partitions("__consumer_offsets") or self.s.config("offsets.topic.num.partitions")
        return "__consumer_offsets", partition_for(group_id, n)

    # --- KIP-890 part 1 -----------------------------------------------------------------------------

    async def verify_partitions(self, transactional_id: str | None, pid: int, epoch: int,
                                partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """0 for each partition already in the producer's ongoing transaction."""
        error = self._check_owner(transactional_id)
        meta = self.txns.get(transactional_id or "")
        if not error:
            if meta is None or meta.producer_id != pid:
                error = ErrorCode.invalid_producer_id_mapping
            elif meta.producer_epoch != epoch:
                error = ErrorCode.producer_fenced
        if error:
            return {tp: error for tp in partitions}
        ongoing = meta.state is TxnState.ONGOING and meta.pending_state is None
        return {tp: 0 if ongoing and tp in meta.partitions else ErrorCode.transaction_abortable
                for tp in partitions}

    # --- EndTxn -----------------------------------------------------------------------------------

    async def end_transaction(self, transactional_id: str, pid: int, epoch: int, commit: bool) -> int:
        error = self._check_owner(transactional_id)
        if error:
            return error
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != pid:
            return ErrorCode.invalid_producer_id_mapping
        if epoch != meta.producer_epoch:
            return ErrorCode.producer_fenced
        if meta.pending_state is not None:
            return ErrorCode.concurrent_transactions
        state = meta.state
        if state is TxnState.ONGOING:
            transit = meta.prepare_abort_or_commit(commit, now_ms())
            error = await self._append(meta, transit)
            if error:
                return error
            if not commit:
                self.s.count("aborted", "client abort")
            self._send_markers(meta)
            return 0
        if state is TxnState.COMPLETE_COMMIT:
            return 0 if commit else ErrorCode.invalid_txn_state
        if state is TxnState.COMPLETE_ABORT:
            return 0 if not commit else ErrorCode.invalid_txn_state
        if state is TxnState.PREPARE_COMMIT:
            return ErrorCode.concurrent_transactions if commit else ErrorCode.invalid_txn_state
        if state is TxnState.PREPARE_ABORT:
            return ErrorCode.concurrent_transactions if not commit else ErrorCode.invalid_txn_state
        return ErrorCode.invalid_txn_state

    # --- the marker channel ---------------------------------------------------------------------------

    def _send_markers(self, meta: TransactionMetadata) -> None:
        txn_id = meta.transactional_id
        if txn_id in self.marker_tasks and not self.marker_tasks[txn_id].done():
            return
        self.marker_tasks[txn_id] = asyncio.get_running_loop().create_task(self._complete(meta))

    async def _complete(self, meta: TransactionMetadata) -> None:
        commit = meta.state is TxnState.PREPARE_COMMIT
        pid, epoch = meta.producer_id, meta.producer_epoch
        coordinator_epoch = self.s.leader_epoch(TXN_TOPIC, self.partition_for(meta.transactional_id))
        pending = set(meta.partitions)
        backoff = 0.05
        while pending:
            if self.paused_markers:
                await asyncio.sleep(0.2)
                continue
            by_leader: dict[tuple[str, int], list[tuple[str, int]]] = {}
            for tp in list(pending):
                leader = self.s.leader_of(*tp)
                if leader is None:
                    if self.s.topic_partitions(tp[0]) is None:
                        pending.discard(tp)  # the topic is gone: nothing to mark
                    continue
                by_leader.setdefault((leader[1], leader[2]), []).append(tp)
            for (host, port), tps in by_leader.items():
                outcome = await self._send_to_leader(host, port, pid, epoch, commit, coordinator_epoch, tps)
                if outcome is None:
                    continue  # disconnected: retry
                for tp, code in outcome.items():
                    if code == 0 or code in (ErrorCode.unsupported_for_message_format, ErrorCode.unsupported_version):
                        pending.discard(tp)
                    elif code in (ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced):
                        log.warning("txn_markers_cancelled", transactional_id=meta.transactional_id,
                                    error=ErrorCode(code).name, partition=tp)
                        return
                    elif code not in RETRY_MARKER_ERRORS:
                        log.error("txn_marker_unexpected_error", transactional_id=meta.transactional_id,
                                  error=ErrorCode(code).name, partition=tp)
            if pending:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
        while True:
            transit = meta.prepare_complete(now_ms())
            if not await self._append(meta, transit):
                return
            await asyncio.sleep(1)

    async def _send_to_leader(self, host: str, port: int, pid: int, epoch: int, commit: bool,
                              coordinator_epoch: int, tps: list[tuple[str, int]]) -> dict | None:
        topics: dict[str, list[int]] = {}
        for topic, p in tps:
            topics.setdefault(topic, []).append(p)
        body = {"markers": [{"producer_id": pid, "producer_epoch": epoch, "transaction_result": commit,
                             "coordinator_epoch": coordinator_epoch,
                             "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]}]}
        try:
            resp = await self.s.send_request(host, port, WRITE_TXN_MARKERS, 1, body)
        except (TimeoutError, OSError, ConnectionError) as exc:
            log.info("txn_marker_send_failed", host=host, port=port, error=str(exc))
            return None
        out = {}
        for m in resp.markers:
            for t in m.topics:
                for part in t.partitions:
                    out[(t.name, part.partition_index)] = int(part.error_code)
        return out

    # --- timeouts and expiry -----------------------------------------------------------------------------

    def abort_timed_out(self) -> None:
        now = now_ms()
        for meta in list(self.txns.values()):
            if (meta.state is TxnState.ONGOING and meta.pending_state is None
                    and meta.txn_start_timestamp >= 0
                    and now - meta.txn_start_timestamp > meta.txn_timeout_ms):
                self._fenced(meta, "transaction timed out")
                asyncio.get_running_loop().create_task(self._fence_and_abort(meta, "transaction timed out"))

    def expire_ids(self) -> None:
        now = now_ms()
        limit = self.s.config("transactional.id.expiration.ms")
        for meta in list(self.txns.values()):
            if (meta.pending_state is None
                    and meta.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
                    and meta.txn_last_update_timestamp >= 0
                    and now - meta.txn_last_update_timestamp > limit):
                asyncio.get_running_loop().create_task(self._expire(meta))

    async def _expire(self, meta: TransactionMetadata) -> None:
        transit = meta.prepare_dead(now_ms())
        if not await self._append(meta, transit, tombstone=True):
            self.txns.pop(meta.transactional_id, None)
            log.info("txn_id_expired", transactional_id=meta.transactional_id, reason="expired id")
            self.s.count("expired", "transactional.id.expiration.ms")

    # --- describe / list -----------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> dict:
        error = self._check_owner(transactional_id)
        meta = self.txns.get(transactional_id)
        if not error and (meta is None or meta.state is TxnState.DEAD):
            error = ErrorCode.transactional_id_not_found
        if error:
            return {"error_code": error, "transactional_id": transactional_id, "transaction_state": "",
                    "transaction_timeout": 0, "transaction_start_time": -1, "producer_id": -1,
                    "producer_epoch": -1, "topics": []}
        topics: dict[str, list[int]] = {}
        for t, p in sorted(meta.partitions):
            topics.setdefault(t, []).append(p)
        return {"error_code": 0, "transactional_id": transactional_id,
                "transaction_state": meta.state.state_name, "transaction_timeout": meta.txn_timeout_ms,
                "transaction_start_time": meta.txn_start_timestamp, "producer_id": meta.producer_id,
                "producer_epoch": meta.producer_epoch,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]}

    def list(self, states: list[str], producer_ids: list[int], min_duration_ms: int = -1) -> tuple[list, list]:
        known = {s.state_name for s in TxnState}
        unknown = [s for s in states if s not in known]
        wanted = {s for s in states if s in known}
        now = now_ms()
        out = []
        for meta in self.txns.values():
            if meta.state is TxnState.DEAD:
                continue
            if wanted and meta.state.state_name not in wanted:
                continue
            if producer_ids and meta.producer_id not in producer_ids:
                continue
            # As Kafka: on every state (an Empty id's start time is -1, so it always passes).
            if min_duration_ms >= 0 and now - meta.txn_start_timestamp <= min_duration_ms:
                continue
            out.append({"transactional_id": meta.transactional_id, "producer_id": meta.producer_id,
                        "transaction_state": meta.state.state_name})
        return out, unknown


__all__ = ["TransactionCoordinator", "TxnServices", "TXN_TOPIC", "NO_PRODUCER_EPOCH"]
