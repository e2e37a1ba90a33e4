"""Topics and partitions: creation, deletion, growth, configs, and a restarted broker's fencing.

Owns what Kafka's ReplicationControlManager does for the admin APIs: topic names checked
(``validate_topic_name``), replication factors and manual assignments checked, replicas placed
(:mod:`.placement`), the records written to the store, the internal topics created on first
use, and a (re)starting broker taken out of every ISR it held in a previous life. Hosting the
replicas is the broker's ReplicaManager's: a cluster's brokers open theirs as the image
changes; a single broker's embedded store is told here to open the new logs off the event loop
(a CreateTopics of thousands of partitions) before the topic is served.

Differs from Kafka: the broker that receives the request writes the records itself (by
compare-and-swap in etcd, or to the embedded store), rather than forwarding to an active
controller; a cluster's CreateTopics writes topic after topic, the embedded store all of a
request's topics in one record.
"""

from __future__ import annotations

import asyncio
import re
from typing import NamedTuple, Protocol

import structlog

from protocol.errors import ErrorCode, KafkaError

from ..image import MetadataCache
from ..records import TopicState
from .partition_change import fence_restarted
from .placement import assign_replicas

__all__ = ["ReplicationControlManager", "TopicCreation", "INTERNAL_TOPICS", "validate_topic_name"]

log = structlog.get_logger("metadata.controller.replication")

INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME = 249


def validate_topic_name(name: str) -> None:
    if not name or name in (".", "..") or len(name) > MAX_TOPIC_NAME or not _LEGAL_TOPIC.match(name):
        raise KafkaError(ErrorCode.invalid_topic_exception,
                         f"Topic name {name!r} is illegal: it must be 1-249 characters of "
                         f"[a-zA-Z0-9._-] and not '.' or '..'")


class TopicCreation(NamedTuple):
    """One topic of a CreateTopics request, validated: what to create."""
    name: str
    num_partitions: int
    replication_factor: int
    configs: dict[str, str]
    assignment: list[list[int]] | None = None


class ReplicaHost(Protocol):
    """What this manager asks of the broker's replicas (a single broker's embedded store only)."""

    async def host_new_topics(self, topics: list[TopicState]) -> None: ...

    def host_new_partitions(self, name: str, before: int) -> None: ...

    def drop_topics(self, topics: list[TopicState]) -> None: ...

    def apply_topic_configs(self, name: str, configs: dict[str, str]) -> None: ...


class ReplicationControlManager:
    def __init__(self, image: MetadataCache, store, replicas: ReplicaHost) -> None:
        self.image = image
        self.store = store
        self.replicas = replicas
        self.clustered = store.clustered
        self._admin_lock = asyncio.Lock()  # embedded: CreateTopics / DeleteTopics in turn
        self._creating: set[str] = set()  # internal topics being created
        self._background: set[asyncio.Task] = set()

    # --- CreateTopics ----------------------------------------------------------------------------

    async def create_topics(self, creations: list[TopicCreation]) -> dict[str, TopicState | KafkaError]:
        """Each topic created, or its error. The embedded store takes the topics that pass
        its checks in one record and makes their logs off the event loop; a cluster's are
        created one by one (each broker opens its replicas from the watch)."""
        out: dict[str, TopicState | KafkaError] = {}
        if self.clustered:
            for c in creations:
                try:
                    out[c.name] = await self.create_topic(*c)
                except KafkaError as exc:
                    out[c.name] = exc
            return out
        async with self._admin_lock:
            batch = []
            for c in creations:
                try:
                    self._check_single_replica(c.replication_factor, c.assignment)
                    self._check_creatable(c.name)  # again: another request may have created it meanwhile
                    batch.append(c)
                except KafkaError as exc:
                    out[c.name] = exc
            topics = self.store.create_topics([(c.name, c.num_partitions, c.configs) for c in batch])
            # Shielded: the topics are in the metadata now, so their partitions are added even
            # if this request is cancelled (a vanished client), or they would stay unserved.
            await asyncio.shield(self.replicas.host_new_topics(topics))
        out.update((t.name, t) for t in topics)
        return out

    async def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                           configs: dict[str, str], assignment: list[list[int]] | None = None) -> TopicState:
        """One topic (CreateTopics in a cluster, auto-creation, the internal topics)."""
        if not self.clustered:
            outcome = (await self.create_topics([TopicCreation(name, num_partitions, replication_factor,
                                                               configs, assignment)]))[name]
            if isinstance(outcome, KafkaError):
                raise outcome
            return outcome
        self._check_creatable(name)
        if assignment is None:
            assignment = self._assign(num_partitions, replication_factor)
        else:
            self._check_assignment(assignment)
        topic = await self.store.create_topic(name, assignment, configs)
        log.info("topic_created", topic=name, partitions=num_partitions, topic_id=topic.topic_id,
                 replication_factor=len(assignment[0]) if assignment else 0, configs=configs)
        return topic

    def _check_creatable(self, name: str) -> None:
        validate_topic_name(name)
        if name in self.image.topics:
            raise KafkaError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")

    @staticmethod
    def _check_single_replica(replication_factor: int, assignment: list[list[int]] | None) -> None:
        if replication_factor > 1 or (assignment and any(len(r) > 1 for r in assignment)):
            raise KafkaError(ErrorCode.invalid_replication_factor,
                             f"Replication factor: {replication_factor} larger than available brokers: 1.")

    def _assign(self, num_partitions: int, replication_factor: int, start_partition: int = 0) -> list[list[int]]:
        """On the unfenced brokers, fenced ones added last if the factor needs them (KRaft's placer)."""
        racks = self.image.placement_racks()
        return assign_replicas(num_partitions, replication_factor, racks, start_partition=start_partition,
                               fenced=set(racks) - self.image.active_broker_ids())

    def _check_assignment(self, assignment: list[list[int]], first_partition: int = 0) -> None:
        registered, active = set(self.image.registered), self.image.active_broker_ids()
        for index, replicas in enumerate(assignment, start=first_partition):
            if not replicas or len(set(replicas)) != len(replicas):
                raise KafkaError(ErrorCode.invalid_replica_assignment, f"Duplicate or empty replicas {replicas}")
            if not set(replicas) <= registered:
                raise KafkaError(ErrorCode.broker_not_available,
                                 f"Replica assignment {replicas} names brokers that are not registered")
            if not set(replicas) & active:
                raise KafkaError(ErrorCode.invalid_replica_assignment,
                                 f"All brokers specified in the manual partition assignment for partition "
                                 f"{index} are fenced or in controlled shutdown.")

    # --- DeleteTopics ----------------------------------------------------------------------------

    async def delete_topics(self, names: list[str]) -> dict[str, KafkaError]:
        """The errors of the topics not deleted (the embedded store deletes them all in one
        record; a cluster's one by one)."""
        if not self.clustered:
            async with self._admin_lock:  # after any CreateTopics still making its logs
                deleted = self.store.delete_topics([n for n in names if n in self.image.topics])
                self.replicas.drop_topics(deleted)
            for topic in deleted:
                log.info("topic_deleted", topic=topic.name, topic_id=topic.topic_id)
            return {}
        errors = {}
        for name in names:
            try:
                topic = await self.store.delete_topic(name)
                log.info("topic_deleted", topic=name, topic_id=topic.topic_id)
            except KafkaError as exc:
                errors[name] = exc
        return errors

    # --- CreatePartitions, configs ---------------------------------------------------------------------

    async def add_partitions(self, name: str, total: int, assignment: list[list[int]] | None = None) -> None:
        topic = self.image.topics[name]
        before = len(topic.partitions)
        if not self.clustered:
            self.store.add_partitions(name, total)
            self.replicas.host_new_partitions(name, before)
        else:
            rf = len(topic.partitions[0].replicas) if topic.partitions else 1
            if assignment is None:
                assignment = self._assign(total - before, rf, start_partition=before)
            else:
                self._check_assignment(assignment, first_partition=before)
            await self.store.add_partitions(name, assignment)
        log.info("partitions_created", topic=name, before=before, after=total)

    async def alter_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        """Store the topic's overrides (clustered: once etcd has them, every broker applies them)."""
        if self.clustered:
            await self.store.set_topic_configs(name, configs)
        else:
            self.store.set_topic_configs(name, configs)
        self.replicas.apply_topic_configs(name, configs)

    def create_local_topic(self, name: str, num_partitions: int, configs: dict[str, str]) -> TopicState:
        """A single broker's topic, created and hosted before this returns (its internal
        topics, which a coordinator needs at once)."""
        self._check_creatable(name)
        (topic,) = self.store.create_topics([(name, num_partitions, configs)])
        self.replicas.host_new_partitions(name, 0)
        log.info("topic_created", topic=name, partitions=num_partitions, topic_id=topic.topic_id, configs=configs)
        return topic

    # --- internal topics --------------------------------------------------------------------------------

    def ensure_internal_topic(self, name: str, num_partitions: int, configs: dict[str, str],
                              replication_factor: int = 1) -> TopicState:
        """The internal topic, created on first use. Clustered, creation is asynchronous and
        COORDINATOR_NOT_AVAILABLE is raised until it is in the metadata (as Kafka answers)."""
        topic = self.image.topics.get(name)
        if topic is not None:
            return topic
        if not self.clustered:
            return self.create_local_topic(name, num_partitions, configs)
        if name not in self._creating:
            self._creating.add(name)
            task = asyncio.get_running_loop().create_task(
                self._create_internal(name, num_partitions, replication_factor, configs))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        raise KafkaError(ErrorCode.coordinator_not_available, f"{name} is being created")

    async def _create_internal(self, name: str, n: int, rf: int, configs: dict[str, str]) -> None:
        try:
            await self.create_topic(name, n, rf, configs)
        except KafkaError as exc:
            if exc.code != ErrorCode.topic_already_exists:
                log.warning("internal_topic_create_failed", topic=name, error=exc.message or exc.code.name)
        finally:
            self._creating.discard(name)

    # --- partition states ------------------------------------------------------------------------------

    async def alter_partitions(self, changes, wait: bool = True) -> set[tuple[str, int]]:
        """Admin decisions (ElectLeaders, reassignments): each (topic, index, new state, the
        mod_revision it was computed from), written by compare-and-swap; the ones written."""
        return await self.store.alter_partitions(changes, wait=wait)

    async def fence_previous_life(self, node_id: int) -> None:
        """Before a restarted broker serves, it leaves every ISR (and hands over leaderships) its
        node id held in a previous life: its log may be behind or gone (an empty data directory)."""
        for _attempt in range(10):  # a refused compare-and-swap means the state moved: look again
            live = self.image.active_broker_ids()
            changes = []
            for topic in self.image.topics.values():
                for index, state in enumerate(topic.partitions):
                    new = fence_restarted(state, node_id, live)
                    if new is not None:
                        changes.append((topic.name, index, new, state.mod_revision))
            if not changes:
                return
            written = await self.store.alter_partitions(changes, wait=True)
            log.info("previous_registration_fenced", partitions=len(written), refused=len(changes) - len(written))
            if len(written) == len(changes):
                return
            await asyncio.sleep(0.1)
        raise SystemExit("could not leave the ISRs of this node's previous registration; retry the start")
