"""One hosted partition: the unit of replication (after Kafka's ``Partition``).

Owns the leader/follower role of this replica, the replica set and ISR as last applied from
the metadata image, the pending ISR change this leader has proposed (KIP-497: until it is
committed the high watermark is computed over the larger of the two sets), every follower's
fetch state (log end offset, last caught-up time), the high watermark, the acks=all purgatory
(produce requests waiting for the high watermark to pass their last offset) and the long-poll
waiters of fetch requests.

The high watermark advances only while the ISR holds ``min.insync.replicas`` members (at most
the replication factor), Kafka 4's strict min ISR (KIP-966): records a leader accepted with
acks=0 or 1 below that are not visible to consumers until enough replicas hold them.

Differs from Kafka: no remote log, no fetch-from-follower (KIP-392), no eligible leader
replicas (KIP-966's ELR field); an ISR change is written by the leader into the metadata store
directly.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import structlog

from protocol.errors import ErrorCode, KafkaError
from storage.log import AppendInfo, Log

log = structlog.get_logger("broker.partition")

# Propose an ISR change: (partition, new isr) -> awaitable that returns once written or refused.
AlterIsr = Callable[["Partition", list[int]], Awaitable[None]]


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of one follower (Kafka's ``Replica``)."""
    log_end_offset: int = -1
    log_start_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_log_end_offset: int = 0
    # The follower's fetch session in which this partition was last read to its end: while it
    # stays unchanged there, each fetch of the session finds the follower caught up, unread.
    session: object | None = None


@dataclass(slots=True)
class _DelayedProduce:
    required_offset: int
    min_isr: int
    future: asyncio.Future


@dataclass
class Partition:
    topic: str
    index: int
    topic_id: uuid.UUID
    log: Log
    node_id: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    leader_id: int = -1
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)
    pending_isr: list[int] | None = None
    followers: dict[int, ReplicaState] = field(default_factory=dict)
    waiters: list = field(default_factory=list)
    # Fetch sessions holding this partition as read to its end (fetch_session.FetchSession):
    # told of the next change, so that a session's fetch reads only what changed.
    watchers: set = field(default_factory=set)
    delayed: list[_DelayedProduce] = field(default_factory=list)
    on_hw_advance: Callable[[Partition], None] | None = None
    # The topic's min.insync.replicas as it stands (the replica manager's, read when needed).
    min_isr: Callable[[], int] = field(default=lambda: 1)
    # The replica manager's keys of led partitions that may have an ISR follower behind the log
    # end: the ISR lag pass looks only at these (a follower at the log end is never lagging).
    lag_watch: set | None = None

    # --- role -------------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.node_id

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def maximal_isr(self) -> list[int]:
        """The ISR the high watermark waits for: committed ∪ pending (KIP-497)."""
        if self.pending_isr is None:
            return self.isr
        return self.isr + [r for r in self.pending_isr if r not in self.isr]

    def changed(self) -> None:
        """Something a fetch could report changed (records, high watermark, role, replicas,
        ISR): the sessions that had read this partition to its end read it again."""
        if self.watchers:
            watchers, self.watchers = self.watchers, set()
            for session in watchers:
                session.partition_changed(self)

    def make_leader(self, leader_epoch: int, partition_epoch: int, replicas: list[int], isr: list[int]) -> bool:
        """Become (or stay) leader at ``leader_epoch``; True when this is a new leadership."""
        self.changed()
        new = not self.is_leader or leader_epoch != self.leader_epoch
        self.leader_id, self.replicas, self.isr = self.node_id, list(replicas), list(isr)
        self.partition_epoch, self.pending_isr = partition_epoch, None
        if new:
            self.leader_epoch = leader_epoch
            self.log.leader_epochs.assign(leader_epoch, self.log.log_end_offset, persist=False)
            now = _now_ms()
            self.followers = {r: ReplicaState(last_caught_up_ms=now if r in isr else 0)
                              for r in replicas if r != self.node_id}
        else:  # a replica a reassignment removed is forgotten, or its fetches would put it back in the ISR
            self.followers = {r: self.followers.get(r) or ReplicaState() for r in replicas if r != self.node_id}
        self._watch_lag()
        self.maybe_increment_high_watermark()
        self.check_delayed()
        return new

    def make_follower(self, leader_id: int, leader_epoch: int, partition_epoch: int,
                      replicas: list[int], isr: list[int]) -> bool:
        """Follow ``leader_id``; True when the leader or its epoch changed (refetch needed)."""
        self.changed()
        new = self.leader_id != leader_id or leader_epoch != self.leader_epoch
        was_leader = self.is_leader
        self.leader_id, self.leader_epoch, self.partition_epoch = leader_id, leader_epoch, partition_epoch
        self.replicas, self.isr, self.pending_isr = list(replicas), list(isr), None
        self.followers = {}
        if was_leader or new:
            self.fail_delayed(ErrorCode.not_leader_or_follower)
            self.wake_waiters()
        return new

    def check_leader(self, current_leader_epoch: int = -1) -> None:
        """Raise what Kafka answers a client that reached the wrong replica or epoch."""
        if current_leader_epoch >= 0 and current_leader_epoch != self.leader_epoch:
            if current_leader_epoch < self.leader_epoch:
                raise KafkaError(ErrorCode.fenced_leader_epoch,
                                 f"leader epoch {current_leader_epoch} is older than {self.leader_epoch}")
            raise KafkaError(ErrorCode.unknown_leader_epoch,
                             f"leader epoch {current_leader_epoch} is newer than {self.leader_epoch}")
        if not self.is_leader:
            raise KafkaError(ErrorCode.not_leader_or_follower,
                             f"this broker is not the leader of {self.topic}-{self.index}")

    def check_follower(self, replica_id: int, current_leader_epoch: int) -> None:
        """A fetch from a broker outside the assignment (one a reassignment removed, or one it
        adds before this leader has seen the change) is refused so that it retries, as Kafka's
        leader does."""
        if replica_id not in self.followers:
            code = ErrorCode.unknown_leader_epoch if current_leader_epoch >= 0 else ErrorCode.not_leader_or_follower
            raise KafkaError(code, f"replica {replica_id} is not an assigned replica of {self.topic}-{self.index} "
                                   f"in leader epoch {self.leader_epoch}")

    # --- leader: appends and acks=all -------------------------------------------------------------

    def append_records_to_leader(self, records: bytes, acks: int, min_isr: int, *,
                                 client: bool = True) -> AppendInfo:
        self.check_leader()
        if acks == -1 and len(self.isr) < min_isr:
            raise KafkaError(ErrorCode.not_enough_replicas,
                             f"The size of the current ISR {self.isr} is insufficient to satisfy "
                             f"the min.isr requirement of {min_isr} for partition {self.topic}-{self.index}")
        info = self.log.append_as_leader(records, self.leader_epoch, client=client)
        if not info.duplicate:
            self._watch_lag()
            self.wake_waiters()
            self.maybe_increment_high_watermark()
        return info

    def append_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                      commit: bool, transaction_version: int = 0) -> AppendInfo:
        self.check_leader()
        info = self.log.append_marker(producer_id, producer_epoch, coordinator_epoch, commit,
                                      self.leader_epoch, transaction_version=transaction_version)
        self._watch_lag()
        self.wake_waiters()
        self.maybe_increment_high_watermark()
        return info

    def delayed_produce(self, required_offset: int, min_isr: int) -> asyncio.Future | None:
        """A future that completes with an error code (0 = replicated) once the high watermark
        passes ``required_offset`` (the append's next offset); None when it already has."""
        if self.high_watermark >= required_offset:
            return None
        fut = asyncio.get_running_loop().create_future()
        self.delayed.append(_DelayedProduce(required_offset, min_isr, fut))
        return fut

    def check_delayed(self) -> None:
        if not self.delayed:
            return
        hw, still = self.high_watermark, []
        for d in self.delayed:
            if d.future.done():
                continue
            if hw >= d.required_offset:
                # Kafka: replicated, but the ISR shrank below min.insync.replicas meanwhile.
                d.future.set_result(ErrorCode.not_enough_replicas_after_append
                                    if len(self.isr) < d.min_isr else 0)
            else:
                still.append(d)
        self.delayed = still

    def fail_delayed(self, code: ErrorCode) -> None:
        delayed, self.delayed = self.delayed, []
        for d in delayed:
            if not d.future.done():
                d.future.set_result(code)

    # --- leader: follower fetch state, high watermark, ISR ----------------------------------------

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int, now_ms: int,
                                    log_start_offset: int = -1) -> list[int] | None:
        """Record a follower's fetch (its log end and start offsets); returns a proposed ISR to
        expand to."""
        state = self.followers.get(replica_id)
        if state is None:
            return None
        if log_start_offset > state.log_start_offset:
            state.log_start_offset = log_start_offset
            self.wake_waiters()  # DeleteRecords waits for the followers' log start offsets
        self._note_fetch(state, fetch_offset, now_ms)
        state.log_end_offset = fetch_offset
        if fetch_offset != self.log.log_end_offset:
            self._watch_lag()  # behind (or truncated back): it may come to lag without an append
        self.maybe_increment_high_watermark()
        if (replica_id not in self.maximal_isr and self.pending_isr is None
                and fetch_offset >= self.high_watermark
                and fetch_offset >= self._leader_epoch_start_offset()):
            return self.isr + [replica_id]
        return None

    def _leader_epoch_start_offset(self) -> int:
        cache = self.log.leader_epochs
        return cache.start_offsets[-1] if cache.epochs and cache.epochs[-1] == self.leader_epoch else 0

    @property
    def low_watermark(self) -> int:
        """The smallest log start offset over this leader and its ISR followers (DeleteRecords
        answers once it has reached the requested offset, as Kafka's DelayedDeleteRecords)."""
        starts = [self.log.log_start_offset]
        starts += [self.followers[r].log_start_offset for r in self.isr if r in self.followers]
        return min(starts)

    def lagging_replicas(self, now_ms: int, max_lag_ms: int) -> list[int]:
        """The ISR followers out of sync, as Kafka's getOutOfSyncReplicas: behind the log end
        and not caught up within ``max_lag_ms``. A follower at the log end is in sync however
        long ago it fetched; one that stopped altogether leaves the ISR when its broker is
        fenced, which the controller does."""
        leo = self.log.log_end_offset
        return [r for r in self.isr if r != self.node_id and r in self.followers
                and self.followers[r].log_end_offset != leo
                and now_ms - self.caught_up_ms(self.followers[r]) > max_lag_ms]

    def isr_at_log_end(self) -> bool:
        """Every ISR follower has fetched up to the log end: none can lag until the next append."""
        leo = self.log.log_end_offset
        for r in self.isr:
            state = self.followers.get(r)  # None for this broker, and for one not assigned (never lagging)
            if state is not None and state.log_end_offset != leo:
                return False
        return True

    def _watch_lag(self) -> None:
        if self.lag_watch is not None:
            self.lag_watch.add((self.topic, self.index))

    def caught_up_ms(self, state: ReplicaState) -> int:
        """A follower's last caught-up time, counting the fetches of its session that found
        this partition unchanged and left it unread."""
        session = state.session
        if session is not None and session.holds_unchanged(self):
            return max(state.last_caught_up_ms, session.last_fetch_ms)
        return state.last_caught_up_ms

    def under_min_isr(self) -> bool:
        """Kafka's isUnderMinIsr, against its effective min ISR (at most the replica count)."""
        return len(self.isr) < min(self.min_isr(), len(self.replicas))

    def maybe_increment_high_watermark(self) -> bool:
        if not self.is_leader or self.under_min_isr():
            return False
        leo = self.log.log_end_offset
        new_hw = leo
        for r in self.maximal_isr:
            if r == self.node_id:
                continue
            state = self.followers.get(r)
            new_hw = min(new_hw, state.log_end_offset if state is not None else -1)
        if new_hw > self.log.high_watermark:
            self.log.high_watermark = new_hw
            self.wake_waiters()
            self.check_delayed()
            if self.on_hw_advance is not None:
                self.on_hw_advance(self)
            return True
        return False

    # --- follower ---------------------------------------------------------------------------------

    def append_as_follower(self, records: bytes, leader_high_watermark: int,
                           leader_log_start_offset: int = -1) -> None:
        if records:
            self.log.append_as_follower(records)
        if leader_log_start_offset > self.log.log_start_offset:
            self.log.maybe_increment_log_start_offset(leader_log_start_offset)
        hw = min(leader_high_watermark, self.log.log_end_offset)
        if hw > self.log.high_watermark:
            self.log.high_watermark = hw

    def truncate_to(self, offset: int) -> None:
        if offset < self.log.log_end_offset:
            log.info("replica_truncated", topic=self.topic, partition=self.index,
                     from_offset=self.log.log_end_offset, to_offset=offset, leader_epoch=self.leader_epoch)
            self.log.truncate_to(offset)
        else:
            # Nothing to cut, but an epoch this replica started as leader without appending to it
            # must go, or the next fetch diverges on it again (as Kafka's truncateTo does).
            self.log.leader_epochs.truncate_from_end(self.log.log_end_offset)

    # --- fetch long poll --------------------------------------------------------------------------

    def _note_fetch(self, state: ReplicaState, fetch_offset: int, now_ms: int) -> None:
        """Kafka's lastCaughtUpTime: caught up now if it fetched from our log end, or as of its
        previous fetch if it then reached the log end we had at that time."""
        leader_leo = self.log.log_end_offset
        if fetch_offset >= leader_leo:
            state.last_caught_up_ms = now_ms
        elif fetch_offset >= state.last_fetch_leader_log_end_offset:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.last_fetch_ms = now_ms
        state.last_fetch_leader_log_end_offset = leader_leo

    def wake_waiters(self) -> None:
        self.changed()
        waiters, self.waiters = self.waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)


def _now_ms() -> int:
    return int(time.time() * 1000)
