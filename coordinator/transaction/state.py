"""Transaction states as data, and the per-transactional-id metadata with two-phase transitions.

Owns: :class:`TxnState` (Kafka's ids and names, each with its valid previous states),
:class:`TransactionMetadata` and :class:`TxnTransitMetadata`. A transition is *prepared*
(only ``pending_state`` changes, so concurrent requests get CONCURRENT_TRANSACTIONS), the
transit record is appended to ``__transaction_state`` by the coordinator, and only once that
append succeeded is it *completed* into memory (:meth:`TransactionMetadata.complete_transition`,
which checks it the way Kafka's ``completeTransitionTo`` does). Method names follow Kafka's
``TransactionMetadata`` (core/src/main/scala/kafka/coordinator/transaction).

Transaction version 2 (KIP-890 part 2): a transition records the client's transaction
version; under it every PrepareCommit/PrepareAbort bumps the producer epoch (the markers and
the client's next transaction use the bumped one), an abort may start from Empty or Complete*
(an empty abort), and an exhausted epoch moves to ``next_producer_id`` at epoch 0 when the
transaction completes.

Differs from Kafka: fencing an ongoing transaction does not bump the epoch in memory before the PrepareAbort
record is written (Kafka does, and remembers a failed write in ``hasFailedEpochFence`` so it
does not bump twice): here the bumped epoch travels in the transit record and takes effect
when that record is durable, so a failed write leaves nothing to undo.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_PRODUCER_EPOCH = 32767  # Short.MaxValue


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps Short.MaxValue for fencing: a producer never gets an epoch above MAX - 1."""
    return epoch >= MAX_PRODUCER_EPOCH - 1


class TxnState(enum.Enum):
    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    def __init__(self, state_id: int, state_name: str) -> None:
        self.id = state_id
        self.state_name = state_name

    @classmethod
    def from_id(cls, state_id: int) -> TxnState:
        for s in cls:
            if s.id == state_id:
                return s
        raise ValueError(f"unknown transaction state id {state_id}")

    @classmethod
    def from_name(cls, name: str) -> TxnState | None:
        for s in cls:
            if s.state_name == name:
                return s
        return None

    @property
    def valid_previous_states(self) -> frozenset[TxnState]:
        return VALID_PREVIOUS_STATES[self]

    @property
    def is_complete(self) -> bool:
        return self in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

    @property
    def is_prepare(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def is_expiration_allowed(self) -> bool:
        return self in EXPIRATION_ALLOWED


_S = TxnState
VALID_PREVIOUS_STATES: dict[TxnState, frozenset[TxnState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    # From Empty/Complete*: transaction version 2's empty abort.
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE, _S.EMPTY, _S.COMPLETE_COMMIT,
                                 _S.COMPLETE_ABORT}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}
# States in which an idle transactional id may expire (no transaction open).
EXPIRATION_ALLOWED = frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})


TV_2 = 2  # the first transaction version that bumps the epoch at the end of every transaction


def supports_epoch_bump(transaction_version: int) -> bool:
    return transaction_version >= TV_2


class IllegalTransition(RuntimeError):
    """A transition Kafka would refuse with IllegalStateException: a coordinator bug."""


@dataclass(frozen=True, slots=True)
class TxnTransitMetadata:
    """The metadata a transition appends to ``__transaction_state`` (and applies after)."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]]
    txn_start_timestamp: int
    txn_last_update_timestamp: int
    # The producer id an exhausted epoch moves to when the transaction completes (TV2), and
    # the transaction version of the client that made the transition.
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0


@dataclass(slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    last_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    txn_timeout_ms: int = 60000
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0
    pending_state: TxnState | None = None
    # The bumped epoch while PrepareEpochFence is pending (Kafka bumps producerEpoch itself).
    fence_epoch: int | None = None

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_distributed_two_phase_commit(self) -> bool:
        """A KIP-939 transaction: its timeout is Integer.MAX_VALUE and it never times out."""
        return self.txn_timeout_ms == 2**31 - 1

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    # --- preparing transitions (nothing changes but pending_state) ------------------------------

    def _prepare_transition_to(self, state: TxnState, producer_id: int, epoch: int, last_epoch: int,
                               timeout_ms: int, partitions: frozenset[tuple[str, int]], start: int,
                               now: int, next_producer_id: int = NO_PRODUCER_ID,
                               transaction_version: int | None = None) -> TxnTransitMetadata:
        if self.pending_state is not None:
            raise IllegalTransition(f"{self.transactional_id}: preparing {state.state_name} while "
                                    f"{self.pending_state.state_name} is pending")
        if producer_id < 0:
            raise IllegalTransition(f"{self.transactional_id}: illegal producer id {producer_id}")
        if state is not TxnState.DEAD and epoch < 0:
            raise IllegalTransition(f"{self.transactional_id}: illegal producer epoch {epoch}")
        if self.state not in state.valid_previous_states:
            raise IllegalTransition(f"{self.transactional_id}: {self.state.state_name} -> "
                                    f"{state.state_name} is not a valid transition")
        self.pending_state = state
        version = self.client_transaction_version if transaction_version is None else transaction_version
        return TxnTransitMetadata(producer_id, self.producer_id, epoch, last_epoch, timeout_ms, state,
                                  partitions, start, now, next_producer_id, version)

    def prepare_fence_producer_epoch(self) -> int:
        """InitProducerId of a new incarnation, or the timeout, found a transaction Ongoing:
        hold PrepareEpochFence with the epoch the abort will be written at (current + 1)."""
        if self.pending_state is not None:
            raise IllegalTransition(f"{self.transactional_id}: fencing while "
                                    f"{self.pending_state.state_name} is pending")
        if self.state not in TxnState.PREPARE_EPOCH_FENCE.valid_previous_states:
            raise IllegalTransition(f"{self.transactional_id}: cannot fence in {self.state.state_name}")
        # At Short.MaxValue there is no higher epoch: abort at the current one (later Kafka).
        bumped = self.producer_epoch + 1 if self.producer_epoch < MAX_PRODUCER_EPOCH else self.producer_epoch
        self.pending_state = TxnState.PREPARE_EPOCH_FENCE
        self.fence_epoch = bumped
        return bumped

    def prepare_increment_producer_epoch(self, timeout_ms: int, expected_epoch: int | None,
                                         now: int) -> TxnTransitMetadata | None:
        """InitProducerId in Empty/Complete*: the next epoch (None means PRODUCER_FENCED)."""
        if self.is_producer_epoch_exhausted:
            raise IllegalTransition(f"{self.transactional_id}: producer id {self.producer_id} has "
                                    f"no epochs left")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            # A fresh producer: bump, and forget the last epoch (an older incarnation retrying
            # its own bump must not get this epoch).
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch  # KIP-360: continue after an error
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch  # a retried bump
        else:
            return None
        return self._prepare_transition_to(TxnState.EMPTY, self.producer_id, epoch, last, timeout_ms,
                                           frozenset(), -1, now)

    def prepare_producer_id_rotation(self, new_producer_id: int, timeout_ms: int, now: int,
                                     record_last_epoch: bool) -> TxnTransitMetadata:
        """The epoch is exhausted: a new producer id at epoch 0."""
        if self.state in (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            raise IllegalTransition(f"{self.transactional_id}: rotating the producer id with a "
                                    f"transaction open")
        last = self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH
        return self._prepare_transition_to(TxnState.EMPTY, new_producer_id, 0, last, timeout_ms,
                                           frozenset(), -1, now)

    def prepare_add_partitions(self, partitions: set[tuple[str, int]], now: int,
                               transaction_version: int = 0) -> TxnTransitMetadata:
        start = now if self.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT) \
            else self.txn_start_timestamp
        return self._prepare_transition_to(TxnState.ONGOING, self.producer_id, self.producer_epoch,
                                           self.last_producer_epoch, self.txn_timeout_ms,
                                           frozenset(self.partitions | partitions), start, now,
                                           transaction_version=transaction_version)

    def prepare_abort_or_commit(self, state: TxnState, now: int, transaction_version: int = 0,
                                next_producer_id: int = NO_PRODUCER_ID) -> TxnTransitMetadata:
        """EndTxn (or a forced abort after PrepareEpochFence). Under transaction version 1 the
        epoch stays (a forced abort carries the fence's bumped one); under version 2 every
        end bumps it, and an abort from Empty/Complete* (nothing added) starts now."""
        epoch, last = self.producer_epoch, self.last_producer_epoch
        fencing = self.pending_state is TxnState.PREPARE_EPOCH_FENCE
        if fencing:
            if state is not TxnState.PREPARE_ABORT:
                raise IllegalTransition(f"{self.transactional_id}: {state.state_name} while fencing")
            epoch, last = self.fence_epoch, NO_PRODUCER_EPOCH
            self.pending_state = None
        if supports_epoch_bump(transaction_version):
            # At Short.MaxValue an abort goes through unbumped, so a broken producer can recover.
            epoch = self.producer_epoch if self.producer_epoch >= MAX_PRODUCER_EPOCH else self.producer_epoch + 1
            last = self.producer_epoch
        start = now if self.state is not TxnState.ONGOING else self.txn_start_timestamp
        return self._prepare_transition_to(state, self.producer_id, epoch, last, self.txn_timeout_ms,
                                           frozenset(self.partitions), start, now, next_producer_id,
                                           transaction_version)

    def prepare_complete(self, now: int) -> TxnTransitMetadata:
        """Complete* once the markers are written; under TV2 an exhausted epoch moves to the
        next producer id at epoch 0 here (the last epoch stays the one the client saw)."""
        state = TxnState.COMPLETE_COMMIT if self.state is TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
        producer_id, epoch = self.producer_id, self.producer_epoch
        if supports_epoch_bump(self.client_transaction_version) and self.next_producer_id != NO_PRODUCER_ID:
            producer_id, epoch = self.next_producer_id, 0
        return self._prepare_transition_to(state, producer_id, epoch, self.last_producer_epoch,
                                           self.txn_timeout_ms, frozenset(), self.txn_start_timestamp, now)

    def prepare_dead(self) -> TxnTransitMetadata:
        return self._prepare_transition_to(TxnState.DEAD, self.producer_id, self.producer_epoch,
                                           self.last_producer_epoch, self.txn_timeout_ms, frozenset(),
                                           self.txn_start_timestamp, self.txn_last_update_timestamp)

    def abort_pending(self) -> None:
        """The append failed: forget the prepared transition (Kafka's resetPendingState)."""
        self.pending_state = None
        self.fence_epoch = None

    def remove_partition(self, tp: tuple[str, int]) -> None:
        """A marker for ``tp`` is written (only while the outcome is being propagated)."""
        if not self.state.is_prepare:
            raise IllegalTransition(f"{self.transactional_id}: removing a marked partition in "
                                    f"{self.state.state_name}")
        self.partitions.discard(tp)

    # --- completing -----------------------------------------------------------------------------

    def complete_transition(self, t: TxnTransitMetadata) -> None:
        """Apply a transition whose record is durable in ``__transaction_state``."""
        if self.pending_state is not t.state:
            self._fail(t, f"pending state is {self.pending_state}")
        same_producer = t.producer_id == self.producer_id and t.producer_epoch == self.producer_epoch
        if t.state is TxnState.EMPTY:
            bump = t.producer_epoch == self.producer_epoch + 1 or (
                t.producer_epoch == 0 and t.producer_id != self.producer_id)
            if (t.producer_epoch != self.producer_epoch and not bump) or t.partitions or t.txn_start_timestamp != -1:
                self._fail(t, "not an epoch bump")
            self.producer_id = t.producer_id
            self.last_producer_id = t.last_producer_id
            self.producer_epoch = t.producer_epoch
            self.last_producer_epoch = t.last_producer_epoch
            self.txn_timeout_ms = t.txn_timeout_ms
        elif t.state is TxnState.ONGOING:
            if not same_producer or not self.partitions <= t.partitions or t.txn_timeout_ms != self.txn_timeout_ms:
                self._fail(t, "partitions may only be added")
            self.txn_start_timestamp = t.txn_start_timestamp
            self.partitions |= t.partitions
        elif t.state.is_prepare:
            self._check_prepare(t, same_producer)
            self.producer_epoch = t.producer_epoch
            self.last_producer_epoch = t.last_producer_epoch
            self.txn_start_timestamp = t.txn_start_timestamp
            self.next_producer_id = t.next_producer_id
        elif t.state.is_complete:
            rotated = supports_epoch_bump(t.client_transaction_version) and t.producer_epoch == 0 \
                and t.producer_id != self.producer_id
            valid = (t.last_producer_epoch == self.last_producer_epoch and t.last_producer_id == self.producer_id
                     if rotated else same_producer)
            if not valid or t.txn_timeout_ms != self.txn_timeout_ms or t.txn_start_timestamp == -1:
                self._fail(t, "the transaction changed")
            self.producer_id = t.producer_id
            self.last_producer_id = t.last_producer_id
            self.producer_epoch = t.producer_epoch
            self.next_producer_id = NO_PRODUCER_ID
            self.txn_start_timestamp = t.txn_start_timestamp
            self.partitions.clear()
        else:  # Dead is never completed (the id is removed), PrepareEpochFence never written
            self._fail(t, "never completed")
        self.txn_last_update_timestamp = t.txn_last_update_timestamp
        self.client_transaction_version = t.client_transaction_version
        self.pending_state = None
        self.fence_epoch = None
        self.state = t.state

    def _check_prepare(self, t: TxnTransitMetadata, same_producer: bool) -> None:
        """PrepareCommit/PrepareAbort: the same transaction, at the same epoch (TV1; a fence's
        bumped one) or the next (TV2, whose empty abort may also start from Empty/Complete*)."""
        if supports_epoch_bump(t.client_transaction_version):
            valid_epoch = t.last_producer_epoch == self.producer_epoch and t.producer_id == self.producer_id
            empty_abort = t.state is TxnState.PREPARE_ABORT and self.state is not TxnState.ONGOING
        else:
            fence = t.state is TxnState.PREPARE_ABORT and t.producer_id == self.producer_id and \
                t.producer_epoch == self.fence_epoch
            valid_epoch, empty_abort = same_producer or fence, False
        if not valid_epoch or set(t.partitions) != self.partitions or t.txn_timeout_ms != self.txn_timeout_ms \
                or (t.txn_start_timestamp != self.txn_start_timestamp and not empty_abort):
            self._fail(t, "the transaction changed")

    def _fail(self, t: TxnTransitMetadata, why: str) -> None:
        raise IllegalTransition(f"{self.transactional_id}: transition to {t} failed ({why}); now {self}")

    @classmethod
    def from_transit(cls, transactional_id: str, t: TxnTransitMetadata) -> TransactionMetadata:
        """The metadata as loaded from ``__transaction_state``."""
        return cls(transactional_id, t.producer_id, t.last_producer_id, t.producer_epoch,
                   t.last_producer_epoch, t.txn_timeout_ms, t.state, set(t.partitions),
                   t.txn_start_timestamp, t.txn_last_update_timestamp, t.next_producer_id,
                   t.client_transaction_version)
