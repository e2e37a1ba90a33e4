"""The transaction metadata of the ``__transaction_state`` partitions this broker leads
(Kafka's ``TransactionStateManager``).

Owns: the cache of :class:`TransactionMetadata` per partition, and through the runtime's
:class:`PartitionOwnership` which partitions are loading or owned at which coordinator epoch
(the partition's leader epoch); loading a partition
from its log in a worker thread (``COORDINATOR_LOAD_IN_PROGRESS`` meanwhile, progress
logged); ``append_transaction_to_log``, the only way a transition reaches memory; the
timed-out and expired transactional ids; unloading on resignation.

Differs from Kafka: no read/write state lock (one event loop; a partition is installed or
removed between two awaits); the last producer id/epoch are not persisted (value v0, as Kafka
3.x without transaction.version 1).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import structlog

from protocol import records as rb
from protocol.errors import ErrorCode

from ..runtime import (
    BackgroundTasks,
    PartitionOwnership,
    append_error,
    append_then_apply,
    error_name,
    load_partition,
    replay_latest,
)
from . import log as txn_log
from .services import TxnServices
from .state import IllegalTransition, TransactionMetadata, TxnState, TxnTransitMetadata

log = structlog.get_logger("coordinator.transaction")

TXN_TOPIC = "__transaction_state"
DEFAULT_REQUEST_TIMEOUT_MS = 30000


@dataclass(slots=True)
class CoordinatorEpochAndMetadata:
    coordinator_epoch: int
    meta: TransactionMetadata


# Loaded transactions in PrepareCommit/PrepareAbort: (coordinator epoch, metadata, Complete* transit).
PendingCompletion = Callable[[int, TransactionMetadata, TxnTransitMetadata], None]


class TransactionStateManager:
    def __init__(self, services: TxnServices) -> None:
        self.s = services
        # Freshness after a stall is the coordinator's check on admission (``_request_state``),
        # not this one's: a transition whose append completed is applied either way.
        self.ownership = PartitionOwnership()
        self.txns: dict[int, dict[str, TransactionMetadata]] = {}  # owned partition -> id -> metadata
        self.loads = BackgroundTasks("txn_state_manager")
        # Set by the coordinator: hands loaded Prepare* transactions to the marker channel.
        self.on_pending_completion: PendingCompletion | None = None

    # --- partitions -----------------------------------------------------------------------------

    def partition_count(self) -> int:
        return self.s.partition_count(TXN_TOPIC) or self.s.config("transaction.state.log.num.partitions")

    def partition_for(self, transactional_id: str) -> int:
        return txn_log.partition_for(transactional_id, self.partition_count())

    def topic_configs(self) -> dict[str, str]:
        """Kafka's ``transactionTopicConfigs``."""
        return {
            "cleanup.policy": "compact",
            "compression.type": "uncompressed",
            "unclean.leader.election.enable": "false",
            "min.insync.replicas": str(self.s.config("transaction.state.log.min.isr")),
            "segment.bytes": str(self.s.config("transaction.state.log.segment.bytes")),
        }

    @property
    def is_loading(self) -> bool:
        return self.ownership.is_loading

    @property
    def loading_count(self) -> int:
        return len(self.ownership.loading)

    def owned_partitions(self) -> list[int]:
        return sorted(self.ownership.owned)

    def holds(self, partition: int) -> bool:
        """Whether ``partition`` is owned or loading here."""
        return partition in self.ownership.owned or partition in self.ownership.loading

    def get_transaction_state(self, transactional_id: str) -> tuple[int, CoordinatorEpochAndMetadata | None]:
        """(error, metadata or None): LOAD_IN_PROGRESS while loading, NOT_COORDINATOR if not owned."""
        p = self.partition_for(transactional_id)
        error = self.ownership.status(p)
        if error:
            return error, None
        meta = self.txns[p].get(transactional_id)
        return 0, None if meta is None else CoordinatorEpochAndMetadata(self.ownership.owned[p], meta)

    def put_transaction_state_if_not_exists(self, meta: TransactionMetadata) -> tuple[int, CoordinatorEpochAndMetadata | None]:
        p = self.partition_for(meta.transactional_id)
        error = self.ownership.status(p)
        if error:
            return error, None
        existing = self.txns[p].setdefault(meta.transactional_id, meta)
        return 0, CoordinatorEpochAndMetadata(self.ownership.owned[p], existing)

    def _owned(self) -> Iterator[tuple[int, int, dict[str, TransactionMetadata]]]:
        """(partition, coordinator epoch, its transactions) of every owned partition."""
        for p, txns in list(self.txns.items()):
            epoch = self.ownership.epoch(p)
            if epoch is not None:
                yield p, epoch, txns

    def all_transactions(self) -> Iterator[tuple[int, TransactionMetadata]]:
        for _, epoch, txns in self._owned():
            for meta in list(txns.values()):
                yield epoch, meta

    def transaction_count(self) -> int:
        return sum(len(txns) for txns in self.txns.values())

    # --- election and resignation ------------------------------------------------------------------

    def install_empty(self, partition: int, coordinator_epoch: int) -> None:
        """A partition just created here: nothing to load."""
        self.ownership.own(partition, coordinator_epoch)
        self.txns[partition] = {}

    def start_loading(self, partition: int, coordinator_epoch: int) -> bool:
        """Kafka's ``loadTransactionsForTxnTopicPartition``: load in the background. False
        (nothing done) when the partition is already loading or owned at this epoch."""
        if not self.ownership.begin_load(partition, coordinator_epoch):
            return False
        self._unload(partition)
        self.loads.spawn(self._load(partition, coordinator_epoch))
        return True

    def remove_transactions_for_partition(self, partition: int, coordinator_epoch: int | None = None) -> None:
        """Kafka's ``removeTransactionsForTxnTopicPartition`` (resignation at ``coordinator_epoch``,
        or unconditionally); a resignation older than the current election changes nothing."""
        if self.ownership.resign(partition, coordinator_epoch) and not self.holds(partition):
            self._unload(partition)

    def _unload(self, partition: int) -> None:
        txns = self.txns.pop(partition, None)
        if txns is not None:
            log.info("txn_partition_unloaded", topic=TXN_TOPIC, partition=partition, transactional_ids=len(txns))

    async def _load(self, partition: int, coordinator_epoch: int) -> None:
        started = time.monotonic()

        def apply(result: tuple[dict[str, TxnTransitMetadata], int]) -> tuple[int, int, list]:
            transits, records = result
            txns: dict[str, TransactionMetadata] = {}
            pending: list[tuple[TransactionMetadata, TxnTransitMetadata]] = []
            now = self.s.now_ms()
            for txn_id, transit in transits.items():
                meta = txns[txn_id] = TransactionMetadata.from_transit(txn_id, transit)
                if meta.state.is_prepare:
                    pending.append((meta, meta.prepare_complete(now)))
            self.txns[partition] = txns
            return records, len(txns), pending

        # Owned (at this epoch) before the markers go, so that their Complete* append is not refused.
        loaded = await load_partition(self.ownership, partition, coordinator_epoch,
                                      lambda: self._read_partition(partition), apply, topic=TXN_TOPIC)
        if loaded is None:
            return
        records, ids, pending = loaded
        if records or pending:
            log.info("txn_partition_loaded", topic=TXN_TOPIC, partition=partition,
                     coordinator_epoch=coordinator_epoch, records=records, transactional_ids=ids,
                     to_complete=len(pending), seconds=round(time.monotonic() - started, 3))
        for meta, transit in pending:
            log.info("txn_completing_after_load", transactional_id=meta.transactional_id,
                     state=meta.state.state_name, producer_id=meta.producer_id,
                     producer_epoch=meta.producer_epoch, partitions=len(meta.partitions))
            if self.on_pending_completion is not None:
                self.on_pending_completion(coordinator_epoch, meta, transit)

    def _read_partition(self, partition: int) -> tuple[dict[str, TxnTransitMetadata], int]:
        """Replay one partition (worker thread): the last value per id wins, tombstones delete."""
        return replay_latest(self.s.read_batches(TXN_TOPIC, partition), txn_log.decode_key, txn_log.decode_value)

    async def stop(self) -> None:
        await self.loads.stop()
        self.ownership.clear()
        self.txns.clear()

    # --- appending ------------------------------------------------------------------------------

    async def append_transaction_to_log(self, transactional_id: str, coordinator_epoch: int,
                                        transit: TxnTransitMetadata, *, retry_on_error: bool = False) -> int:
        """Write a prepared transition (acks=all), then complete it in memory (Kafka's
        ``appendTransactionToLog``). On failure the pending state is reset, unless
        ``retry_on_error`` and COORDINATOR_NOT_AVAILABLE (the caller retries)."""
        error, found = self.get_transaction_state(transactional_id)
        if error:
            return error
        if found is None or found.coordinator_epoch != coordinator_epoch:
            return ErrorCode.not_coordinator
        p = self.partition_for(transactional_id)
        now = self.s.now_ms()
        batch = rb.build_batch([(txn_log.encode_key(transactional_id), txn_log.encode_value(transit, self.s.transaction_version()))],
                               timestamp=now)
        code = await self.s.append(TXN_TOPIC, p, bytes(batch), transit.txn_timeout_ms)
        error = append_error(code) if code else 0
        after_error, after = self.get_transaction_state(transactional_id)
        if not error:
            if after_error:
                error = after_error
            elif after is None or after.coordinator_epoch != coordinator_epoch:
                error = ErrorCode.not_coordinator
            else:
                try:
                    after.meta.complete_transition(transit)
                    return 0
                except IllegalTransition:
                    log.exception("txn_state_transition_failed", transactional_id=transactional_id)
                    after.meta.abort_pending()
                    return ErrorCode.unknown_server_error
            log.info("txn_state_transition_dropped", transactional_id=transactional_id,
                     state=transit.state.state_name, error=ErrorCode(error).name)
            return error
        log.warning("txn_state_append_failed", transactional_id=transactional_id, state=transit.state.state_name,
                    error=error_name(code), returned=error_name(error))
        if after is not None and after.coordinator_epoch == coordinator_epoch:
            if not (retry_on_error and error == ErrorCode.coordinator_not_available):
                after.meta.abort_pending()
        return error

    # --- timeouts and expiration -----------------------------------------------------------------

    def timed_out_transactions(self, now: int) -> list[tuple[str, int, int]]:
        """(transactional id, producer id, epoch) of every Ongoing transaction past its timeout."""
        out = []
        for _, _, txns in self._owned():
            for meta in txns.values():
                if (meta.state is TxnState.ONGOING and meta.pending_state is None
                        and not meta.is_distributed_two_phase_commit
                        and meta.txn_start_timestamp + meta.txn_timeout_ms < now):
                    out.append((meta.transactional_id, meta.producer_id, meta.producer_epoch))
        return out

    async def remove_expired_transactional_ids(self) -> list[str]:
        """Tombstone every idle id (Empty/Complete*, untouched for transactional.id.expiration.ms),
        one batch per partition; the ids leave the cache once their tombstones are durable."""
        now = self.s.now_ms()
        limit = self.s.config("transactional.id.expiration.ms")
        removed: list[str] = []
        for p, _, txns in self._owned():
            expired = [(meta, meta.prepare_dead()) for meta in txns.values()
                       if meta.pending_state is None and meta.state.is_expiration_allowed
                       and meta.txn_last_update_timestamp <= now - limit]
            if expired:
                removed += await self._tombstone(p, expired, now)
        return removed

    async def _tombstone(self, p: int, expired: list[tuple[TransactionMetadata, TxnTransitMetadata]],
                         now: int) -> list[str]:
        """Write the tombstones of ``expired`` (prepared Dead) to partition ``p``; the ids whose
        tombstone is durable, at the epoch it was written under, leave the cache."""
        batch = bytes(rb.build_batch([(txn_log.encode_key(m.transactional_id), None) for m, _ in expired],
                                     timestamp=now))
        timeout = self.s.config("request.timeout.ms") or DEFAULT_REQUEST_TIMEOUT_MS
        dropped: list[str] = []

        def apply() -> None:
            current = self.txns.get(p, {})
            for meta, transit in expired:
                if (current.get(meta.transactional_id) is meta and meta.pending_state is TxnState.DEAD
                        and meta.producer_epoch == transit.producer_epoch):
                    del current[meta.transactional_id]
                    dropped.append(meta.transactional_id)

        error = await append_then_apply(self.ownership, p, lambda: self.s.append(TXN_TOPIC, p, batch, timeout), apply)
        for meta, _ in expired:
            if meta.transactional_id not in dropped:
                log.warning("txn_id_expiry_failed", transactional_id=meta.transactional_id,
                            error=error_name(error), pending_state=str(meta.pending_state))
                meta.abort_pending()
        return dropped

