"""Share-partition state persistence: the share coordinator and its ``__share_group_state`` log.

Owns the durable copy of every share-partition's state (SPSO, state epoch, the in-flight
records' states and delivery counts). As in Kafka, the state of share-partition
(group, topic id, partition) lives in partition ``abs(hash("group:topicId:partition")) % N`` of
the compacted internal topic ``__share_group_state`` (``share.coordinator.state.topic.*``);
the broker leading that partition is its share coordinator: it replays the partition when it
becomes leader, keeps the last state per key in memory, and writes each new state as one
record appended with acks=all before it is visible, so a restarted broker (kill -9) or the next
leader after a leader change reads what was acknowledged. The share-partition leader reaches
the share coordinator in-process when it is the same broker, and otherwise with Kafka's
Read/Write/DeleteShareGroupState requests (keys 84-86) through ``remote``.

Differs from Apache Kafka's share coordinator (``ShareCoordinatorShard``):
- every write is a full snapshot (Kafka's ShareSnapshot); there are no ShareUpdate deltas,
  so nothing to compact into snapshots on a schedule;
- records are JSON (key ``{"g", "t", "p"}``, value the state), not Kafka's ShareSnapshotKey /
  ShareSnapshotValue schemas, so the topic cannot be read by Kafka's tools;
- state epochs do not fence writers (Kafka's InitializeShareGroupState bumps them): the
  share-partition leader writes while the group fetches there, the group's coordinator
  (offsets reset / delete, empty groups only) once the leader has dropped its cached state
  with the group's last session on it, and a write from a deposed leader is accepted;
- no InitializeShareGroupState / ReadShareGroupStateSummary: a share-partition is initialized
  by its leader on first fetch, and summaries are read with ReadShareGroupState;
- listing a group's share-partitions (DeleteGroups, DescribeShareGroupOffsets without topics)
  sees only the ``__share_group_state`` partitions this broker leads; Kafka lists them from the
  group's initialized-partitions record instead.
"""

from __future__ import annotations

import asyncio
import json
from typing import Protocol
from uuid import UUID

import structlog

from protocol import records as rb
from protocol.errors import ErrorCode, KafkaError

from ..group.metadata import java_string_hash
from ..runtime import (
    BackgroundTasks,
    PartitionOwnership,
    append_then_apply,
    ensure_internal_topic,
    load_partition,
    replay_latest,
)
from ..services import ConfigReader, InternalTopics, PartitionLog
from .partition import PersistedState, RecordState, StateBatch

log = structlog.get_logger("coordinator.share.persister")

STATE_TOPIC = "__share_group_state"
StateKey = tuple[str, UUID, int]


class ShareCoordinatorServices(ConfigReader, InternalTopics, PartitionLog, Protocol):
    """The broker capabilities the share coordinator uses (``broker/coordinator_services.py``)."""


class RemoteShareCoordinator(Protocol):
    """Read/write a state on another broker's share coordinator (network)."""

    async def read(self, partition: int, key: StateKey) -> PersistedState | None: ...

    async def write(self, partition: int, key: StateKey, state: PersistedState | None) -> None: ...


def state_partition(key: StateKey, num_partitions: int) -> int:
    """Kafka's ``SharePartitionKey`` placement: ``abs(hash("group:topicId:partition")) % N``."""
    h = java_string_hash(f"{key[0]}:{key[1]}:{key[2]}")
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


def encode_key(key: StateKey) -> bytes:
    return json.dumps({"g": key[0], "t": str(key[1]), "p": key[2]}, separators=(",", ":")).encode()


def decode_key(raw: bytes) -> StateKey:
    d = json.loads(raw)
    return d["g"], UUID(d["t"]), int(d["p"])


def encode_state(state: PersistedState) -> bytes:
    return json.dumps({"start": state.start_offset, "epoch": state.state_epoch, "leader": state.leader_epoch,
                       "batches": [[b.first_offset, b.last_offset, b.state.value, b.delivery_count]
                                   for b in state.batches]}, separators=(",", ":")).encode()


def decode_state(raw: bytes) -> PersistedState:
    d = json.loads(raw)
    return PersistedState(d["start"], d["epoch"], d["leader"],
                          [StateBatch(f, last, RecordState(s), c) for f, last, s, c in d["batches"]])


class ShareCoordinator:
    """The ``__share_group_state`` partitions this broker leads, and their states."""

    def __init__(self, services: ShareCoordinatorServices) -> None:
        self.s = services
        self.ownership = PartitionOwnership()
        self.states: dict[int, dict[StateKey, PersistedState]] = {}
        self.tasks = BackgroundTasks("share-coordinator")

    def num_partitions(self) -> int:
        return ensure_internal_topic(
            self.s, STATE_TOPIC, self.s.config("share.coordinator.state.topic.num.partitions"),
            {"cleanup.policy": "compact", "min.insync.replicas": str(self.s.config("share.coordinator.state.topic.min.isr"))},
            self.s.config("share.coordinator.state.topic.replication.factor"), self._adopt_new)

    def _adopt_new(self, partition: int, epoch: int) -> None:
        self.ownership.own(partition, epoch)
        self.states.setdefault(partition, {})

    def partition_for(self, key: StateKey) -> int:
        return state_partition(key, self.num_partitions())

    # --- leadership -----------------------------------------------------------------------------

    def on_become_leader(self, partition: int, epoch: int) -> None:
        if self.ownership.begin_load(partition, epoch):
            self.tasks.spawn(self._load(partition, epoch))

    def on_resign(self, partition: int, epoch: int | None = None) -> None:
        if self.ownership.resign(partition, epoch):
            self.states.pop(partition, None)

    async def _load(self, partition: int, epoch: int) -> None:
        def apply(states: dict[StateKey, PersistedState]) -> int:
            self.states[partition] = states
            return len(states)

        loaded = await load_partition(self.ownership, partition, epoch, lambda: self._replay(partition), apply,
                                      topic=STATE_TOPIC)
        if loaded is not None:
            log.debug("share_state_loaded", partition=partition, states=loaded)

    def _replay(self, partition: int) -> dict[StateKey, PersistedState]:
        """Last value per key wins; a tombstone deletes."""
        return replay_latest(self.s.read_batches(STATE_TOPIC, partition), decode_key, decode_state)[0]

    # --- reads and writes -------------------------------------------------------------------------

    def _owned(self, partition: int) -> dict[StateKey, PersistedState]:
        status = self.ownership.status(partition)
        if status:
            raise KafkaError(status, f"Not the share coordinator of {STATE_TOPIC}-{partition}")
        return self.states.setdefault(partition, {})

    def owns(self, partition: int) -> bool:
        return self.ownership.status(partition) != ErrorCode.not_coordinator

    def read(self, partition: int, key: StateKey) -> PersistedState | None:
        return self._owned(partition).get(key)

    async def write(self, partition: int, key: StateKey, state: PersistedState | None) -> None:
        """Append the state (None: a tombstone) with acks=all, then make it the current one,
        if this broker still owns the partition at the epoch the write started under."""
        self._owned(partition)
        value = None if state is None else encode_state(state)
        batch = bytes(rb.build_batch([(encode_key(key), value)]))

        def apply() -> None:
            states = self.states.setdefault(partition, {})
            if state is None:
                states.pop(key, None)
            else:
                states[key] = state

        error = await append_then_apply(
            self.ownership, partition,
            lambda: self.s.append(STATE_TOPIC, partition, batch, self.s.config("share.coordinator.write.timeout.ms")),
            apply)
        if error:
            raise KafkaError(error, f"writing share state to {STATE_TOPIC}-{partition} failed")

    def keys_of_group(self, group_id: str) -> list[StateKey]:
        return [k for states in self.states.values() for k in states if k[0] == group_id]


class StatePersister:
    """The share-partition leader's view: local share coordinator, else the remote one
    (Kafka's ``DefaultStatePersister``)."""

    def __init__(self, coordinator: ShareCoordinator, remote: RemoteShareCoordinator | None = None) -> None:
        self.coordinator = coordinator
        self.remote = remote

    async def read_state(self, group_id: str, topic_id: UUID, partition: int) -> PersistedState | None:
        key = (group_id, topic_id, partition)
        p = self.coordinator.partition_for(key)
        if self.coordinator.owns(p) or self.remote is None:
            return await self._local(lambda: self.coordinator.read(p, key))
        return await self.remote.read(p, key)

    async def write_state(self, group_id: str, topic_id: UUID, partition: int,
                          state: PersistedState | None) -> None:
        key = (group_id, topic_id, partition)
        p = self.coordinator.partition_for(key)
        if self.coordinator.owns(p) or self.remote is None:
            await self._wait_loaded(p)
            await self.coordinator.write(p, key, state)
        else:
            await self.remote.write(p, key, state)

    async def delete_state(self, group_id: str, partitions: list[tuple[UUID, int]]) -> None:
        for topic_id, partition in partitions:
            await self.write_state(group_id, topic_id, partition, None)

    async def group_partitions(self, group_id: str) -> list[tuple[UUID, int]]:
        return [(k[1], k[2]) for k in self.coordinator.keys_of_group(group_id)]

    def has_group(self, group_id: str) -> bool:
        return bool(self.coordinator.keys_of_group(group_id))

    async def _local(self, read):
        p_wait = 0
        while True:
            try:
                return read()
            except KafkaError as exc:
                if exc.code != ErrorCode.coordinator_load_in_progress or p_wait >= 200:
                    raise
            p_wait += 1
            await asyncio.sleep(0.05)

    async def _wait_loaded(self, partition: int) -> None:
        for _ in range(200):  # bounded: 10 s
            if self.coordinator.ownership.status(partition) != ErrorCode.coordinator_load_in_progress:
                return
            await asyncio.sleep(0.05)
