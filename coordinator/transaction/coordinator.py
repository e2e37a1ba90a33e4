"""The transaction coordinator (Kafka's ``TransactionCoordinator``, transaction versions 0-2).

Owns the request semantics of InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
KIP-890 partition verification, DescribeTransactions and ListTransactions for the
transactional ids whose ``__transaction_state`` partition this broker leads; the periodic abort
of timed-out transactions (with an epoch bump that fences the stalled producer) and the expiry
of idle transactional ids. State lives in :mod:`.state_manager` (every transition is prepared,
appended to ``__transaction_state``, and only then applied); outcomes reach the partitions
through :mod:`.markers`. Checks come in Kafka's order with Kafka's error codes; method names
follow Kafka's (``handleInitProducerId`` -> :meth:`init_producer_id`, ...).

Cluster-ready: the coordinator is told which partitions it leads (:meth:`on_election` /
:meth:`on_resignation`, at start for every partition led here), the coordinator epoch is the
partition's leader epoch, FindCoordinator answers the partition's leader, and markers go to
each partition's leader by node id.

Transaction version 2 (KIP-890 part 2) is chosen per request, as Kafka chooses it: EndTxn v5
and the brokers' AddPartitionsToTxn v4+ (a Produce v12+ or TxnOffsetCommit v5+ adding its
partition) are TV2, older versions TV1; aborts the coordinator starts itself (a fence, a
timeout) use the cluster's finalized ``transaction.version``. A TV2 commit or abort bumps the
epoch and answers the new producer id and epoch; a retried one (the epoch just before) answers
them again.

Test fault point (config ``test.fault.points``): ``txn.first.producer.epoch:<n>`` gives a new
transactional id epoch ``n`` at its first InitProducerId instead of 0, as ``n`` earlier
incarnations would have, so that epoch exhaustion can be reached over the wire.

Differs from Kafka: a producer starting its next transaction while the last one's markers are
still in flight waits up to ``MARKER_WAIT_S`` for them before being answered
CONCURRENT_TRANSACTIONS (Kafka answers at once and the client backs off, typically 20-100 ms).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import structlog

from protocol.errors import ErrorCode

from ..runtime import (
    BackgroundTasks,
    CoordinatorTimer,
    LoadProgress,
    LoopTimer,
    ensure_internal_topic,
    error_name,
    fault_points,
    sleep_on,
)
from .markers import TransactionMarkerChannel
from .services import TxnServices
from .state import (
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    IllegalTransition,
    TransactionMetadata,
    TxnState,
    TxnTransitMetadata,
    is_epoch_exhausted,
    supports_epoch_bump,
)
from .state_manager import TXN_TOPIC, CoordinatorEpochAndMetadata, TransactionStateManager

log = structlog.get_logger("coordinator.transaction")

MARKER_WAIT_S = 0.05
TWO_PHASE_COMMIT_TIMEOUT_MS = 2**31 - 1  # Integer.MAX_VALUE: a 2PC transaction never times out
RF_WARNING_INTERVAL_S = 10.0
FIRST_EPOCH_FAULT = "txn.first.producer.epoch"  # test fault point (module docstring)

# Reasons, as logged and as the ``reason`` label of the coordinator event counter.
NEW_INCARNATION = "new incarnation"
TIMED_OUT = "transaction timed out"
EPOCH_EXHAUSTED = "epoch exhausted"
EXPIRED_ID = "expired id"


@dataclass(slots=True)
class _EndTxn:
    """An EndTxn (or forced abort) whose Prepare* transition is prepared, not yet written."""

    transactional_id: str
    coordinator_epoch: int
    producer_id: int
    producer_epoch: int
    commit: bool
    transit: TxnTransitMetadata

    @property
    def bumps_epoch(self) -> bool:
        return supports_epoch_bump(self.transit.client_transaction_version)


# What an EndTxn answers: (error, producer id, epoch); the id and epoch only under TV2.
EndTxnResult = tuple[int, int, int]


def _end_error(code: int) -> EndTxnResult:
    return code, NO_PRODUCER_ID, NO_PRODUCER_EPOCH


class TransactionCoordinator:
    def __init__(self, services: TxnServices, timer: CoordinatorTimer | None = None) -> None:
        self.s = services
        self.state = TransactionStateManager(services)
        # The marker channel's back-offs and the periodic timeout and expiration passes run on
        # ``timer``: the loop's, or a unit test's fake clock.
        self.timer: CoordinatorTimer = timer or LoopTimer()
        self.markers = TransactionMarkerChannel(services, self.state, self.timer)
        self.state.on_pending_completion = self.markers.add_markers_to_send
        self.active = False
        self.tasks = BackgroundTasks("transaction-coordinator", self.timer)
        # Ids fenced by an abort we started: the incarnation's retry is not a second fence.
        self._fenced_by_abort: dict[str, int] = {}
        self._rf_warned_at = float("-inf")

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Load every ``__transaction_state`` partition led here, start the timers."""
        self.active = True
        led = self.s.led_partitions(TXN_TOPIC)
        if led:
            progress = LoadProgress("txn_coordinator", TXN_TOPIC, len(led))
            for p, epoch in sorted(led.items()):
                self.on_election(p, epoch)
            self.tasks.spawn(self._log_load_progress(progress))
        self.tasks.every(self.s.config("transaction.abort.timed.out.transaction.cleanup.interval.ms"),
                         self.abort_timed_out_transactions)
        self.tasks.every(self.s.config("transaction.remove.expired.transaction.cleanup.interval.ms"),
                         self.remove_expired_transactional_ids)

    async def stop(self) -> None:
        self.active = False
        await self.tasks.stop()
        await self.markers.stop()
        await self.state.stop()

    def on_election(self, partition: int, coordinator_epoch: int) -> None:
        """This broker now leads ``__transaction_state`` ``partition`` (Kafka's onElection)."""
        if self.state.start_loading(partition, coordinator_epoch):
            log.debug("txn_coordinator_elected", partition=partition, coordinator_epoch=coordinator_epoch)
            self.markers.remove_markers_for_partition(partition)

    def on_resignation(self, partition: int, coordinator_epoch: int | None = None) -> None:
        """Leadership of ``partition`` moved away (Kafka's onResignation)."""
        log.info("txn_coordinator_resigned", partition=partition, coordinator_epoch=coordinator_epoch)
        self.state.remove_transactions_for_partition(partition, coordinator_epoch)
        self.markers.remove_markers_for_partition(partition)

    def partitions_changed(self, partitions: set[tuple[str, int]]) -> None:
        """The cluster metadata of ``partitions`` changed (leaders, ISRs): markers in flight to
        a broker that no longer leads one of them go to the new leader."""
        self.markers.partitions_changed(partitions)

    async def _log_load_progress(self, progress: LoadProgress) -> None:
        """The partitions load in the state manager's tasks: poll how many are left."""
        while self.state.is_loading:
            await sleep_on(self.timer, 1000 * min(progress.interval_s, 0.05 * (1 + time.monotonic() - progress.started)))
            if self.state.is_loading:
                progress.report(progress.partitions - self.state.loading_count)
        progress.finished(transactional_ids=self.state.transaction_count(),
                          completing=len(self.markers.pending))

    # --- FindCoordinator ----------------------------------------------------------------------------

    def _ensure_topic(self) -> int:
        """Create ``__transaction_state`` on first use, as Kafka does on FindCoordinator."""
        if self.s.partition_count(TXN_TOPIC) is not None:
            return 0
        n = self.s.config("transaction.state.log.num.partitions")
        replication_factor = self.s.config("transaction.state.log.replication.factor") or 1
        registered = self.s.registered_broker_count()
        if replication_factor > registered:
            # Kafka's auto-creation fails the same way (INVALID_REPLICATION_FACTOR) and
            # FindCoordinator keeps answering COORDINATOR_NOT_AVAILABLE: say why, now and then.
            now = time.monotonic()
            if now - self._rf_warned_at >= RF_WARNING_INTERVAL_S:
                self._rf_warned_at = now
                log.error("txn_topic_replication_factor_unavailable", topic=TXN_TOPIC,
                          replication_factor=replication_factor, registered_brokers=registered,
                          hint=f"{TXN_TOPIC} needs transaction.state.log.replication.factor="
                               f"{replication_factor} registered brokers; lower it or start more brokers")
            return ErrorCode.coordinator_not_available
        try:
            ensure_internal_topic(self.s, TXN_TOPIC, n, self.state.topic_configs(), replication_factor,
                                  self.state.install_empty)
        except Exception as exc:
            log.warning("txn_topic_create_failed", topic=TXN_TOPIC, error=str(exc))
            return ErrorCode.coordinator_not_available
        return 0

    def coordinator_node(self, transactional_id: str) -> tuple[int, int]:
        """FindCoordinator key_type 1: (error, node id of the leader of the id's partition)."""
        if not self.active:
            return ErrorCode.coordinator_not_available, -1
        error = self._ensure_topic()
        if error:
            return error, -1
        leader = self.s.leader(TXN_TOPIC, self.state.partition_for(transactional_id))
        if leader is None or leader[0] < 0:
            return ErrorCode.coordinator_not_available, -1
        return 0, leader[0]

    def coordinator_error(self, transactional_id: str) -> int:
        """0 when the id has a coordinator (FindCoordinator), else the error code."""
        return self.coordinator_node(transactional_id)[0]

    def _request_state(self, transactional_id: str) -> tuple[int, CoordinatorEpochAndMetadata | None]:
        """``get_transaction_state`` for a request being admitted: also NOT_COORDINATOR while
        this broker's metadata is suspect after a stall (the id's partition may have moved and
        this copy of its state be stale; the client finds the coordinator again)."""
        if not self.s.metadata_is_current():
            return ErrorCode.not_coordinator, None
        return self.state.get_transaction_state(transactional_id)

    def is_coordinator_for(self, transactional_id: str) -> bool:
        """Whether this broker holds the id's partition (loaded or loading)."""
        return self.state.holds(self.state.partition_for(transactional_id))

    # --- InitProducerId ---------------------------------------------------------------------------

    def _valid_timeout(self, timeout_ms: int) -> bool:
        return 0 < timeout_ms <= self.s.config("transaction.max.timeout.ms")

    async def init_producer_id(self, transactional_id: str | None, timeout_ms: int,
                               expected: tuple[int, int] | None = None, *, enable_two_phase_commit: bool = False,
                               keep_prepared_txn: bool = False) -> tuple[int, int, int]:
        """Kafka's ``handleInitProducerId``: (error, producer id, epoch). ``expected`` is the
        KIP-360 (producer id, epoch) the producer had, None if it sent -1/-1. A two-phase
        commit producer (KIP-939) needs ``transaction.two.phase.commit.enable`` and gets no
        timeout; keeping a prepared transaction is not supported (nor in Kafka 4.3.1)."""
        if transactional_id is None:
            return 0, self.s.generate_producer_id(), 0
        if transactional_id == "":
            return ErrorCode.invalid_request, -1, -1
        if enable_two_phase_commit and not self.s.config("transaction.two.phase.commit.enable"):
            return ErrorCode.transactional_id_authorization_failed, -1, -1
        if keep_prepared_txn:
            return ErrorCode.unsupported_version, -1, -1
        if enable_two_phase_commit:
            timeout_ms = TWO_PHASE_COMMIT_TIMEOUT_MS
        elif not self._valid_timeout(timeout_ms):
            return ErrorCode.invalid_transaction_timeout, -1, -1
        error, found = self._request_state(transactional_id)
        if not error and found is not None and found.meta.pending_state is not None:
            await self.markers.wait_for_completion(transactional_id, MARKER_WAIT_S)
            error, found = self.state.get_transaction_state(transactional_id)
        if error:
            return error, -1, -1
        if found is None:
            meta = TransactionMetadata(transactional_id, self.s.generate_producer_id(), txn_timeout_ms=timeout_ms,
                                       producer_epoch=self._first_epoch_fault_point() - 1,
                                       txn_last_update_timestamp=self.s.now_ms())
            error, found = self.state.put_transaction_state_if_not_exists(meta)
            if error:
                return error, -1, -1
        coordinator_epoch, meta = found.coordinator_epoch, found.meta
        outcome = self._prepare_init_producer_id_transit(meta, timeout_ms, expected)
        if isinstance(outcome, int):
            return outcome, -1, -1
        if outcome is None:  # PrepareEpochFence: abort the ongoing transaction at epoch + 1
            end = self._prepare_fence_abort(meta)
            if isinstance(end, int):
                return end or ErrorCode.concurrent_transactions, -1, -1
            self._fence_event(meta, NEW_INCARNATION, aborted=True, new_epoch=end.producer_epoch)
            self._fenced_by_abort[transactional_id] = end.producer_epoch
            error, _, _ = await self._complete_end_transaction(end)
            return error or ErrorCode.concurrent_transactions, -1, -1
        previous_epoch = meta.producer_epoch
        error = await self.state.append_transaction_to_log(transactional_id, coordinator_epoch, outcome)
        if error:
            log.info("txn_init_producer_id_failed", transactional_id=transactional_id, error=ErrorCode(error).name)
            return error, -1, -1
        self._after_init(meta, outcome, previous_epoch, expected)
        return 0, outcome.producer_id, outcome.producer_epoch

    def _first_epoch_fault_point(self) -> int:
        """The epoch a new transactional id starts at: 0, or the test fault point's (module
        docstring), capped below exhaustion's MAX - 1 so that the id can still transact once."""
        first = fault_points(self.s.config("test.fault.points")).get(FIRST_EPOCH_FAULT)
        if not first:
            return 0
        log.warning("txn_first_producer_epoch_set_by_fault_point", epoch=int(first))
        return min(int(first), MAX_PRODUCER_EPOCH - 2)

    def _prepare_init_producer_id_transit(self, meta: TransactionMetadata, timeout_ms: int,
                                          expected: tuple[int, int] | None) -> TxnTransitMetadata | int | None:
        """Kafka's ``prepareInitProducerIdTransit``: a transit to write, an error, or None when
        an ongoing transaction must first be fenced (PrepareEpochFence is now pending)."""
        if meta.pending_state is not None:
            return ErrorCode.concurrent_transactions
        if expected is not None and not self._is_valid_producer_id(meta, *expected):
            return ErrorCode.producer_fenced
        state = meta.state
        if state.is_prepare:
            return ErrorCode.concurrent_transactions
        if state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            now = self.s.now_ms()
            if meta.is_producer_epoch_exhausted and (expected is None or expected[1] == meta.producer_epoch):
                return meta.prepare_producer_id_rotation(self.s.generate_producer_id(), timeout_ms, now,
                                                         record_last_epoch=expected is not None)
            transit = meta.prepare_increment_producer_epoch(timeout_ms, None if expected is None else expected[1], now)
            if transit is None:
                log.info("txn_stale_init_producer_id", transactional_id=meta.transactional_id,
                         expected_epoch=expected[1], producer_epoch=meta.producer_epoch,
                         last_producer_epoch=meta.last_producer_epoch)
                return ErrorCode.producer_fenced
            return transit
        if state is TxnState.ONGOING:
            # Never returned to the client: the ongoing transaction is aborted at this epoch
            # and the client, answered CONCURRENT_TRANSACTIONS, retries and gets the next one
            # (or a new producer id if the fence exhausted the epochs).
            meta.prepare_fence_producer_epoch()
            return None
        log.error("txn_illegal_state", transactional_id=meta.transactional_id, state=state.state_name)
        return ErrorCode.unknown_server_error

    @staticmethod
    def _is_valid_producer_id(meta: TransactionMetadata, producer_id: int, epoch: int) -> bool:
        """Kafka's ``isValidProducerId``: the epoch itself is checked when it is bumped."""
        return (meta.producer_epoch == NO_PRODUCER_EPOCH or producer_id == meta.producer_id
                or (producer_id == meta.last_producer_id and is_epoch_exhausted(epoch)))

    def _after_init(self, meta: TransactionMetadata, transit: TxnTransitMetadata, previous_epoch: int,
                    expected: tuple[int, int] | None) -> None:
        txn_id = meta.transactional_id
        fenced_epoch = self._fenced_by_abort.pop(txn_id, None)
        if transit.producer_id != transit.last_producer_id:  # a new producer id: epochs exhausted
            self._fence_event(meta, EPOCH_EXHAUSTED, aborted=False, new_epoch=0,
                              old_producer_id=transit.last_producer_id, old_epoch=previous_epoch)
        elif expected is None and previous_epoch >= 0 and fenced_epoch != previous_epoch:
            self._fence_event(meta, NEW_INCARNATION, aborted=False, new_epoch=transit.producer_epoch,
                              old_epoch=previous_epoch)
        log.info("txn_producer_initialized", transactional_id=txn_id, producer_id=transit.producer_id,
                 producer_epoch=transit.producer_epoch, partition=self.state.partition_for(txn_id))

    def _fence_event(self, meta: TransactionMetadata, reason: str, *, aborted: bool, new_epoch: int,
                     old_producer_id: int | None = None, old_epoch: int | None = None) -> None:
        log.info("txn_producer_fenced", transactional_id=meta.transactional_id, reason=reason,
                 producer_id=meta.producer_id if old_producer_id is None else old_producer_id,
                 fenced_epoch=meta.producer_epoch if old_epoch is None else old_epoch,
                 new_producer_id=meta.producer_id, new_epoch=new_epoch, aborts_ongoing_transaction=aborted,
                 partitions=len(meta.partitions) if aborted else 0)
        self.s.count("fenced", reason)
        if aborted:
            log.info("txn_forced_abort", transactional_id=meta.transactional_id, reason=reason,
                     producer_id=meta.producer_id, producer_epoch=new_epoch, partitions=len(meta.partitions))
            self.s.count("aborted", reason)

    # --- AddPartitionsToTxn / AddOffsetsToTxn -------------------------------------------------------

    async def add_partitions(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                             partitions: set[tuple[str, int]], transaction_version: int = 0) -> int:
        """Kafka's ``handleAddPartitionsToTransaction``: from a client (AddPartitionsToTxn v0-3,
        AddOffsetsToTxn; ``transaction_version`` 0) or from a partition leader adding the
        partition of a Produce v12+ / TxnOffsetCommit v5+ (version 2). Another producer id
        while a transition is pending is CONCURRENT_TRANSACTIONS: under TV2 the producer may
        already use the id its last EndTxn moved to, which the metadata takes only when that
        transaction completes."""
        if not transactional_id:
            return ErrorCode.invalid_request
        error, found = self._request_state(transactional_id)
        if not error and found is not None and found.meta.pending_state is not None:
            await self.markers.wait_for_completion(transactional_id, MARKER_WAIT_S)
            error, found = self.state.get_transaction_state(transactional_id)
        if error:
            return error
        if found is None:
            return ErrorCode.invalid_producer_id_mapping
        meta = found.meta
        if meta.producer_id != producer_id:
            completing = meta.pending_state is not None and meta.pending_state is not TxnState.PREPARE_EPOCH_FENCE
            return ErrorCode.concurrent_transactions if completing else ErrorCode.invalid_producer_id_mapping
        if _current_epoch(meta) != producer_epoch:
            return ErrorCode.producer_fenced
        if meta.pending_state is not None or meta.state.is_prepare:
            return ErrorCode.concurrent_transactions
        if meta.state is TxnState.ONGOING and partitions <= meta.partitions:
            return 0
        transit = meta.prepare_add_partitions(partitions, self.s.now_ms(), transaction_version)
        return await self.state.append_transaction_to_log(transactional_id, found.coordinator_epoch, transit)

    # --- KIP-890 part 1 -----------------------------------------------------------------------------

    async def verify_partitions(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                                partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Kafka's ``handleVerifyPartitionsInTransaction`` (AddPartitionsToTxn v4+ verify_only):
        0 for each partition in the producer's transaction, TRANSACTION_ABORTABLE for the
        others; INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED or CONCURRENT_TRANSACTIONS (the
        transaction is completing) for all of them."""
        if not transactional_id:
            return {tp: ErrorCode.invalid_request for tp in partitions}
        error, found = self._request_state(transactional_id)
        if not error:
            meta = found.meta if found is not None else None
            if meta is None or meta.producer_id != producer_id:
                error = ErrorCode.invalid_producer_id_mapping
            elif _current_epoch(meta) != producer_epoch:
                error = ErrorCode.producer_fenced
            elif meta.state.is_prepare:
                error = ErrorCode.concurrent_transactions
        if error:
            return {tp: error for tp in partitions}
        return {tp: 0 if tp in meta.partitions else ErrorCode.transaction_abortable for tp in partitions}

    # --- EndTxn ---------------------------------------------------------------------------------------

    async def end_transaction(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                              commit: bool, transaction_version: int = 0) -> EndTxnResult:
        """Kafka's ``handleEndTransaction``: NONE once PrepareCommit/PrepareAbort is durable,
        with the producer id and epoch of the next transaction under TV2."""
        if supports_epoch_bump(transaction_version):
            error, end, answer = self._prepare_end_transaction_v2(transactional_id, producer_id, producer_epoch,
                                                                  commit, from_client=True)
            if error or end is None:
                return (error, *answer) if not error else _end_error(error)
            return await self._complete_end_transaction(end)
        error, end = self._prepare_end_transaction(transactional_id, producer_id, producer_epoch, commit,
                                                   from_client=True)
        if error or end is None:
            return _end_error(error)
        return await self._complete_end_transaction(end)

    def _found_for_end(self, transactional_id: str | None) -> tuple[int, CoordinatorEpochAndMetadata | None]:
        if not transactional_id:
            return ErrorCode.invalid_request, None
        error, found = self._request_state(transactional_id)
        if not error and found is None:
            error = ErrorCode.invalid_producer_id_mapping
        return error, found

    def _prepare_end_transaction(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                                 commit: bool, *, from_client: bool) -> tuple[int, _EndTxn | None]:
        """The synchronous half of Kafka's ``endTransactionWithTV1``: checks, then Prepare* pending."""
        error, found = self._found_for_end(transactional_id)
        if error:
            return error, None
        meta = found.meta
        if meta.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping, None
        current = _current_epoch(meta)
        # Clients must match the epoch exactly; a forced abort may carry the bumped one.
        if (from_client and producer_epoch != current) or producer_epoch < current:
            return ErrorCode.producer_fenced, None
        if meta.pending_state is not None and meta.pending_state is not TxnState.PREPARE_EPOCH_FENCE:
            return ErrorCode.concurrent_transactions, None
        state = meta.state
        if state is TxnState.ONGOING:
            return self._prepare_end(found, commit, 0)
        if state is TxnState.EMPTY:
            return ErrorCode.invalid_txn_state, None
        return self._end_in_other_state(meta, commit, retry=True), None

    def _prepare_end_transaction_v2(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                                    commit: bool, *, from_client: bool
                                    ) -> tuple[int, _EndTxn | None, tuple[int, int]]:
        """Kafka's ``endTransaction`` above transaction version 1: every end bumps the epoch,
        so a retry is told apart by its epoch (the one just before the current) and answered
        with the current producer id and epoch; an abort with nothing added bumps too.

        ===============  =============  ===============
        state            Abort          Commit
        ===============  =============  ===============
        Empty            retry: FENCED  retry: FENCED
                         current: bump  current: INVALID_TXN_STATE
        CompleteAbort    retry: NONE    INVALID_TXN_STATE
                         current: bump
        CompleteCommit   retry: ITS     retry: NONE
                         current: bump  current: INVALID_TXN_STATE
        ===============  =============  ===============
        """
        error, found = self._found_for_end(transactional_id)
        if error:
            return error, None, (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        meta = found.meta
        answer = (meta.producer_id, meta.producer_epoch)
        fencing = meta.pending_state is TxnState.PREPARE_EPOCH_FENCE
        # A retry after the bump that moved to a new producer id, or after a plain bump.
        retry_on_overflow = not fencing and meta.last_producer_id == producer_id \
            and producer_epoch == MAX_PRODUCER_EPOCH - 1 and meta.producer_epoch == 0
        retry_on_bump = not fencing and meta.producer_epoch == producer_epoch + 1
        is_retry = retry_on_bump or retry_on_overflow
        state = meta.state
        if fencing:
            valid_epoch = (not from_client or producer_epoch == meta.producer_epoch) \
                and producer_epoch >= meta.producer_epoch
        elif state.is_prepare:
            valid_epoch = retry_on_bump
        elif state.is_complete:
            valid_epoch = is_retry or producer_epoch == meta.producer_epoch
        else:
            valid_epoch = producer_epoch == meta.producer_epoch
        if meta.pending_state is not None and not fencing:
            error = ErrorCode.concurrent_transactions
        elif meta.producer_id != producer_id and not retry_on_overflow:
            error = ErrorCode.invalid_producer_id_mapping
        elif not valid_epoch:
            error = ErrorCode.producer_fenced
        elif state is TxnState.ONGOING or (state is TxnState.EMPTY and not commit) or \
                (state.is_complete and not commit and not is_retry):
            error, end = self._prepare_end(found, commit, 2)
            return error, end, answer
        elif state is TxnState.EMPTY:
            error = ErrorCode.invalid_txn_state
        else:
            error = self._end_in_other_state(meta, commit, retry=is_retry)
        return error, None, answer

    def _prepare_end(self, found: CoordinatorEpochAndMetadata, commit: bool,
                     transaction_version: int) -> tuple[int, _EndTxn | None]:
        """Prepare PrepareCommit/PrepareAbort; under TV2 an exhausted epoch gets the producer
        id it moves to when the transaction completes."""
        meta = found.meta
        target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        next_producer_id = NO_PRODUCER_ID
        if supports_epoch_bump(transaction_version) and meta.is_producer_epoch_exhausted:
            next_producer_id = self.s.generate_producer_id()
        try:
            transit = meta.prepare_abort_or_commit(target, self.s.now_ms(), transaction_version, next_producer_id)
        except IllegalTransition:
            log.exception("txn_illegal_transition", transactional_id=meta.transactional_id)
            return ErrorCode.unknown_server_error, None
        return 0, _EndTxn(meta.transactional_id, found.coordinator_epoch, meta.producer_id, transit.producer_epoch,
                          commit, transit)

    @staticmethod
    def _end_in_other_state(meta: TransactionMetadata, commit: bool, *, retry: bool) -> int:
        """EndTxn in Prepare*/Complete*: the same outcome again is NONE once complete (a retry)
        and CONCURRENT_TRANSACTIONS while completing; the other is INVALID_TXN_STATE."""
        state = meta.state
        same = (commit and state in (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT)) or \
            (not commit and state in (TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT))
        if state.is_prepare:
            return ErrorCode.concurrent_transactions if same else ErrorCode.invalid_txn_state
        if state.is_complete:
            return 0 if same and retry else ErrorCode.invalid_txn_state
        log.error("txn_illegal_state", transactional_id=meta.transactional_id, state=state.state_name)
        return ErrorCode.unknown_server_error

    def _prepare_fence_abort(self, meta: TransactionMetadata) -> _EndTxn | int:
        """The abort of a transaction whose producer is being fenced (PrepareEpochFence is
        pending), at the cluster's transaction version; an error code when it cannot start."""
        fence_epoch = meta.fence_epoch
        if supports_epoch_bump(self.s.transaction_version()):
            error, end, _ = self._prepare_end_transaction_v2(meta.transactional_id, meta.producer_id, fence_epoch,
                                                             commit=False, from_client=False)
        else:
            error, end = self._prepare_end_transaction(meta.transactional_id, meta.producer_id, fence_epoch,
                                                       commit=False, from_client=False)
        if error or end is None:
            if meta.pending_state is TxnState.PREPARE_EPOCH_FENCE:
                meta.abort_pending()
            return error
        return end

    async def _complete_end_transaction(self, end: _EndTxn) -> EndTxnResult:
        """Write Prepare*, re-check, prepare Complete* and hand the markers over."""
        txn_id = end.transactional_id
        error = await self.state.append_transaction_to_log(txn_id, end.coordinator_epoch, end.transit)
        if error:
            log.info("txn_end_not_written", transactional_id=txn_id, commit=end.commit, error=ErrorCode(error).name)
            return _end_error(error)
        error, found = self.state.get_transaction_state(txn_id)
        if error:
            return _end_error(error)
        if found is None or found.coordinator_epoch != end.coordinator_epoch:
            return _end_error(ErrorCode.not_coordinator)
        meta = found.meta
        if meta.producer_id != end.producer_id:
            return _end_error(ErrorCode.invalid_producer_id_mapping)
        if meta.producer_epoch != end.producer_epoch:
            return _end_error(ErrorCode.producer_fenced)
        if meta.pending_state is not None:
            return _end_error(ErrorCode.concurrent_transactions)
        expected = TxnState.PREPARE_COMMIT if end.commit else TxnState.PREPARE_ABORT
        if meta.state is not expected:
            return _end_error(ErrorCode.invalid_txn_state)
        complete = meta.prepare_complete(self.s.now_ms())
        self.markers.add_markers_to_send(end.coordinator_epoch, meta, complete, end_txn=True)
        if end.bumps_epoch:
            return 0, complete.producer_id, complete.producer_epoch
        return _end_error(0)

    # --- timeouts and expiration ------------------------------------------------------------------------

    def abort_timed_out_transactions(self) -> int:
        """Kafka's ``abortTimedOutTransactions``: fence (epoch + 1) and abort every Ongoing
        transaction older than its timeout. Returns how many aborts were started."""
        started = 0
        for txn_id, producer_id, _ in self.state.timed_out_transactions(self.s.now_ms()):
            error, found = self.state.get_transaction_state(txn_id)
            if error or found is None:
                continue
            meta = found.meta
            if meta.producer_id != producer_id:
                log.error("txn_timeout_wrong_producer_id", transactional_id=txn_id, expected=producer_id,
                          found=meta.producer_id)
                continue
            if meta.pending_state is not None:
                continue
            meta.prepare_fence_producer_epoch()
            end = self._prepare_fence_abort(meta)
            if isinstance(end, int):
                log.info("txn_timeout_rollback_cancelled", transactional_id=txn_id, error=error_name(end))
                continue
            self._fence_event(meta, TIMED_OUT, aborted=True, new_epoch=end.producer_epoch)
            self._fenced_by_abort[txn_id] = end.producer_epoch
            self.tasks.spawn(self._finish_timeout_abort(end))
            started += 1
        return started

    async def _finish_timeout_abort(self, end: _EndTxn) -> None:
        error, _, _ = await self._complete_end_transaction(end)
        if not error:
            log.info("txn_timeout_rollback_complete", transactional_id=end.transactional_id,
                     producer_id=end.producer_id, producer_epoch=end.producer_epoch)
        elif error in (ErrorCode.invalid_producer_id_mapping, ErrorCode.producer_fenced,
                       ErrorCode.concurrent_transactions):
            log.info("txn_timeout_rollback_cancelled", transactional_id=end.transactional_id, error=error_name(error))
        else:
            log.warning("txn_timeout_rollback_failed", transactional_id=end.transactional_id, error=error_name(error))

    async def remove_expired_transactional_ids(self) -> list[str]:
        """Tombstone transactional ids idle for ``transactional.id.expiration.ms``."""
        removed = await self.state.remove_expired_transactional_ids()
        for txn_id in removed:
            log.info("txn_id_expired", transactional_id=txn_id, reason=EXPIRED_ID,
                     expiration_ms=self.s.config("transactional.id.expiration.ms"))
            self.s.count("fenced", EXPIRED_ID)
        return removed

    # --- DescribeTransactions / ListTransactions ------------------------------------------------------

    def describe(self, transactional_id: str) -> dict:
        """Kafka's ``handleDescribeTransactions`` (one entry of the response)."""
        out = {"error_code": 0, "transactional_id": transactional_id, "transaction_state": "",
               "transaction_timeout": 0, "transaction_start_time": 0, "producer_id": 0,
               "producer_epoch": 0, "topics": []}
        if not self.active:
            out["error_code"] = ErrorCode.coordinator_not_available
            return out
        if not transactional_id:
            out["error_code"] = ErrorCode.invalid_request
            return out
        error, found = self.state.get_transaction_state(transactional_id)
        if not error and (found is None or found.meta.state is TxnState.DEAD):
            error = ErrorCode.transactional_id_not_found
        if error:
            out["error_code"] = error
            return out
        meta = found.meta
        topics: dict[str, list[int]] = {}
        for t, p in sorted(meta.partitions):
            topics.setdefault(t, []).append(p)
        out.update(transaction_state=meta.state.state_name, transaction_timeout=meta.txn_timeout_ms,
                   transaction_start_time=meta.txn_start_timestamp, producer_id=meta.producer_id,
                   producer_epoch=meta.producer_epoch,
                   topics=[{"topic": t, "partitions": ps} for t, ps in topics.items()])
        return out

    def list_transactions(self, states: list[str], producer_ids: list[int],
                          duration_ms: int = -1) -> tuple[int, list[dict], list[str]]:
        """Kafka's ``listTransactionStates``: (error, transactions, unknown state filters)."""
        if not self.active:
            return ErrorCode.coordinator_not_available, [], []
        if self.state.is_loading:
            return ErrorCode.coordinator_load_in_progress, [], []
        wanted: set[TxnState] = set()
        unknown = []
        for name in states:
            state = TxnState.from_name(name)
            if state is None:
                unknown.append(name)
            else:
                wanted.add(state)
        pids = set(producer_ids)
        now = self.s.now_ms()
        out = []
        for _, meta in self.state.all_transactions():
            if meta.state is TxnState.DEAD:
                continue
            if pids and meta.producer_id not in pids:
                continue
            if wanted and meta.state not in wanted:
                continue
            if duration_ms >= 0 and now - meta.txn_start_timestamp <= duration_ms:
                continue
            out.append({"transactional_id": meta.transactional_id, "producer_id": meta.producer_id,
                        "transaction_state": meta.state.state_name})
        return 0, out, unknown


def _current_epoch(meta: TransactionMetadata) -> int:
    """The epoch requests are checked against: the bumped one from the moment a fence is
    prepared until its abort is written or fails (Kafka bumps the metadata's epoch itself at
    that point), so the fenced producer is refused at once."""
    return meta.producer_epoch if meta.fence_epoch is None else meta.fence_epoch



__all__ = ["TransactionCoordinator", "TXN_TOPIC", "CoordinatorEpochAndMetadata"]
