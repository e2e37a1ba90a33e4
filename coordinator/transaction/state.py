"""Transaction states as data, and the per-transactional-id metadata with two-phase transitions.

Owns: :class:`TxnState` (Kafka's ids and names, each with its valid previous states),
:class:`TransactionMetadata` and :class:`TxnTransitMetadata`. A transition is *prepared*
(``pending_state`` set, so concurrent requests get CONCURRENT_TRANSACTIONS), appended to
``__transaction_state`` by the coordinator, and only then *completed* into memory.

Differs from Kafka: transaction version 1 only (no TV2 empty aborts, no next producer id).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

NO_PRODUCER_EPOCH = -1
MAX_PRODUCER_EPOCH = 32767


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


_S = TxnState
VALID_PREVIOUS_STATES: dict[TxnState, frozenset[TxnState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}


class IllegalTransition(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class TxnTransitMetadata:
    """The record a transition appends to ``__transaction_state``."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]]
    txn_start_timestamp: int
    txn_last_update_timestamp: int


@dataclass(slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    last_producer_id: int = -1
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    txn_timeout_ms: int = 60000
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    pending_state: TxnState | None = None
    # Partitions whose marker is not yet acknowledged (during Prepare* -> Complete*).
    pending_markers: set[tuple[str, int]] = field(default_factory=set)

    # --- preparing transitions (nothing changes but pending_state) ---------------------------

    def _transit(self, state: TxnState, *, producer_id: int | None = None, producer_epoch: int | None = None,
                 last_producer_epoch: int | None = None, timeout_ms: int | None = None,
                 partitions: frozenset[tuple[str, int]] | None = None, start: int | None = None,
                 now: int) -> TxnTransitMetadata:
        if self.pending_state is not None and self.pending_state is not TxnState.PREPARE_EPOCH_FENCE:
            raise IllegalTransition(f"{self.transactional_id}: transition to {state.state_name} while "
                                    f"{self.pending_state.state_name} is pending")
        if self.state not in state.valid_previous_states and not (
                self.pending_state is TxnState.PREPARE_EPOCH_FENCE and state is TxnState.PREPARE_ABORT):
            raise IllegalTransition(f"{self.transactional_id}: {self.state.state_name} -> "
                                    f"{state.state_name} is not a valid transition")
        self.pending_state = state
        return TxnTransitMetadata(
            producer_id=self.producer_id if producer_id is None else producer_id,
            last_producer_id=self.last_producer_id,
            producer_epoch=self.producer_epoch if producer_epoch is None else producer_epoch,
            last_producer_epoch=self.last_producer_epoch if last_producer_epoch is None else last_producer_epoch,
            txn_timeout_ms=self.txn_timeout_ms if timeout_ms is None else timeout_ms,
            state=state,
            partitions=frozenset(self.partitions) if partitions is None else partitions,
            txn_start_timestamp=self.txn_start_timestamp if start is None else start,
            txn_last_update_timestamp=now)

    def prepare_init(self, producer_id: int, producer_epoch: int, timeout_ms: int, now: int) -> TxnTransitMetadata:
        """InitProducerId: Empty with a (possibly new) producer id and the next epoch."""
        return self._transit(TxnState.EMPTY, producer_id=producer_id, producer_epoch=producer_epoch,
                             last_producer_epoch=self.producer_epoch, timeout_ms=timeout_ms,
                             partitions=frozenset(), start=-1, now=now)

    def prepare_add_partitions(self, partitions: set[tuple[str, int]], now: int) -> TxnTransitMetadata:
        start = now if self.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT) \
            else self.txn_start_timestamp
        parts = frozenset(self.partitions | partitions) if self.state is TxnState.ONGOING else frozenset(partitions)
        return self._transit(TxnState.ONGOING, partitions=parts, start=start, now=now)

    def prepare_abort_or_commit(self, commit: bool, now: int) -> TxnTransitMetadata:
        return self._transit(TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT, now=now)

    def prepare_complete(self, now: int) -> TxnTransitMetadata:
        state = TxnState.COMPLETE_COMMIT if self.state is TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
        return self._transit(state, partitions=frozenset(), now=now)

    def prepare_dead(self, now: int) -> TxnTransitMetadata:
        return self._transit(TxnState.DEAD, partitions=frozenset(), now=now)

    def prepare_fence_epoch(self) -> None:
        """Fencing an ongoing transaction: bump the epoch in memory (unless exhausted) and hold
        PrepareEpochFence until the abort that follows is written."""
        if self.pending_state is not None:
            raise IllegalTransition(f"{self.transactional_id}: fence while {self.pending_state} pending")
        if self.state not in TxnState.PREPARE_EPOCH_FENCE.valid_previous_states:
            raise IllegalTransition(f"{self.transactional_id}: cannot fence in {self.state.state_name}")
        if self.producer_epoch < MAX_PRODUCER_EPOCH:
            self.producer_epoch += 1
        self.pending_state = TxnState.PREPARE_EPOCH_FENCE

    # --- completing ----------------------------------------------------------------------------

    def complete_transition(self, t: TxnTransitMetadata) -> None:
        if self.pending_state is not t.state:
            raise IllegalTransition(f"{self.transactional_id}: completing {t.state.state_name} but "
                                    f"{self.pending_state} is pending")
        if t.producer_id != self.producer_id:
            self.last_producer_id = self.producer_id
        self.producer_id = t.producer_id
        self.producer_epoch = t.producer_epoch
        self.last_producer_epoch = t.last_producer_epoch
        self.txn_timeout_ms = t.txn_timeout_ms
        self.state = t.state
        self.partitions = set(t.partitions)
        self.txn_start_timestamp = t.txn_start_timestamp
        self.txn_last_update_timestamp = t.txn_last_update_timestamp
        self.pending_state = None

    def abort_pending(self) -> None:
        """The append failed: forget the prepared transition."""
        self.pending_state = None

    @classmethod
    def from_transit(cls, transactional_id: str, t: TxnTransitMetadata) -> TransactionMetadata:
        return cls(transactional_id, t.producer_id, t.last_producer_id, t.producer_epoch,
                   t.last_producer_epoch, t.txn_timeout_ms, t.state, set(t.partitions),
                   t.txn_start_timestamp, t.txn_last_update_timestamp)
