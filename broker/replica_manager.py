"""The partitions this broker hosts: appends, reads, long-poll wake-ups, topic lifecycle.

Owns: the mapping (topic, partition) -> :class:`Partition` (its log and leader epoch), topic
creation/deletion/growth on top of the metadata store, the high watermark (the log end offset
on a single replica), waking long-poll fetches when a high watermark advances, and the
flush policy (group commit: one fsync covers every append queued behind it).

Differs from Kafka: single replica only for now, so acks=all is acks=1 plus the flush policy;
there is no follower fetching and no ISR change.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from coordinator.controller.store import TopicState
from protocol.errors import ErrorCode, KafkaError
from storage.log import AppendInfo, Log

from . import topic_config

if TYPE_CHECKING:
    from .broker import Broker

log = structlog.get_logger("broker.replica_manager")

INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME = 249


def validate_topic_name(name: str) -> None:
    if not name or name in (".", "..") or len(name) > MAX_TOPIC_NAME or not _LEGAL_TOPIC.match(name):
        raise KafkaError(ErrorCode.invalid_topic_exception,
                         f"Topic name {name!r} is illegal: it must be 1-249 characters of "
                         f"[a-zA-Z0-9._-] and not '.' or '..'")


@dataclass(slots=True)
class Partition:
    topic: str
    index: int
    topic_id: uuid.UUID
    log: Log
    leader_epoch: int
    waiters: list = field(default_factory=list)

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def wake_waiters(self) -> None:
        waiters, self.waiters = self.waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)


class ReplicaManager:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.config = broker.config
        self.metadata = broker.metadata
        self.log_manager = broker.log_manager
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._flush_lock = asyncio.Lock()

    # --- lookup -------------------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> Partition:
        p = self.partitions.get((topic, partition))
        if p is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition,
                             f"This server does not host this topic-partition: {topic}-{partition}")
        return p

    def topic(self, name: str) -> TopicState | None:
        return self.metadata.topics.get(name)

    # --- lifecycle ------------------------------------------------------------------------------

    def open_all(self) -> None:
        """Open (recovering as needed) every partition the metadata store knows."""
        known = set()
        for topic in self.metadata.topics.values():
            for i in range(len(topic.partitions)):
                self._open_partition(topic, i)
                known.add((topic.name, i))
        for orphan in set(self.log_manager.existing_partitions()) - known:
            log.warning("orphan_partition_directory_removed", topic=orphan[0], partition=orphan[1])
            self.log_manager.delete_log(*orphan)

    def _open_partition(self, topic: TopicState, index: int) -> Partition:
        internal = topic.name if topic.name in INTERNAL_TOPICS else None
        cfg = topic_config.log_config(topic.configs, self.config, internal)
        plog = self.log_manager.open_log(topic.name, index, cfg)
        part = Partition(topic.name, index, topic.uuid, plog, topic.partitions[index].leader_epoch)
        plog.leader_epochs.assign(part.leader_epoch, plog.log_end_offset)
        self.partitions[(topic.name, index)] = part
        return part

    def create_topic(self, name: str, num_partitions: int, configs: dict[str, str]) -> TopicState:
        validate_topic_name(name)
        if name in self.metadata.topics:
            raise KafkaError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        topic = self.metadata.create_topic(name, num_partitions, configs)
        for i in range(num_partitions):
            self._open_partition(topic, i)
        log.info("topic_created", topic=name, partitions=num_partitions, topic_id=topic.topic_id,
                 configs=configs)
        return topic

    def delete_topic(self, name: str) -> None:
        topic = self.metadata.delete_topic(name)
        for i in range(len(topic.partitions)):
            part = self.partitions.pop((name, i), None)
            if part is not None:
                part.wake_waiters()
            self.log_manager.delete_log(name, i)
        log.info("topic_deleted", topic=name, topic_id=topic.topic_id)

    def add_partitions(self, name: str, total: int) -> None:
        before = len(self.metadata.topics[name].partitions)
        self.metadata.add_partitions(name, total)
        topic = self.metadata.topics[name]
        for i in range(before, total):
            self._open_partition(topic, i)
        log.info("partitions_created", topic=name, before=before, after=total)

    def alter_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        self.metadata.set_topic_configs(name, configs)
        topic = self.metadata.topics[name]
        internal = name if name in INTERNAL_TOPICS else None
        cfg = topic_config.log_config(configs, self.config, internal)
        for i in range(len(topic.partitions)):
            self.partitions[(name, i)].log.config = cfg

    def ensure_internal_topic(self, name: str, num_partitions: int, configs: dict[str, str]) -> TopicState:
        topic = self.metadata.topics.get(name)
        if topic is None:
            topic = self.create_topic(name, num_partitions, configs)
        return topic

    # --- produce --------------------------------------------------------------------------------

    def append(self, topic: str, partition: int, records: bytes, *, client: bool = True) -> AppendInfo:
        part = self.get(topic, partition)
        info = part.log.append_as_leader(records, part.leader_epoch, client=client)
        if not info.duplicate:
            part.log.high_watermark = part.log.log_end_offset
            part.wake_waiters()
            m = self.broker.metrics
            m.bytes_in.labels(topic).inc(len(records))
            m.messages_in.labels(topic).inc(info.record_count)
        return info

    def append_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                      coordinator_epoch: int, commit: bool) -> AppendInfo:
        """Append a transaction marker (WriteTxnMarkers); the LSO may advance."""
        part = self.get(topic, partition)
        info = part.log.append_marker(producer_id, producer_epoch, coordinator_epoch, commit,
                                      part.leader_epoch)
        part.log.high_watermark = part.log.log_end_offset
        part.wake_waiters()
        return info

    def needs_flush(self, topic: str, partition: int) -> bool:
        part = self.partitions.get((topic, partition))
        return part is not None and part.log.needs_flush(int(time.time() * 1000))

    async def flush(self, logs: list[Log] | None = None) -> None:
        """Group commit: whoever holds the lock fsyncs every dirty log, for everyone queued."""
        async with self._flush_lock:
            now = int(time.time() * 1000)
            targets = logs if logs is not None else [p.log for p in self.partitions.values()]
            due = [lg for lg in targets if lg.unflushed_messages and (logs is not None or lg.needs_flush(now))]
            if not due:
                return
            ends = [lg.log_end_offset for lg in due]
            await asyncio.to_thread(_fsync_all, due)
            for lg, end in zip(due, ends):
                lg.recovery_point = max(lg.recovery_point, end)
                lg.last_flush_ms = now
                if lg.log_end_offset == end:
                    lg.unflushed_messages = 0

    # --- fetch long poll -------------------------------------------------------------------------

    async def wait_for_data(self, partitions: list[Partition], timeout_s: float) -> None:
        if timeout_s <= 0 or not partitions:
            return
        fut = asyncio.get_running_loop().create_future()
        for p in partitions:
            p.waiters.append(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            pass
        finally:
            for p in partitions:
                try:
                    p.waiters.remove(fut)
                except ValueError:
                    pass

    def wake_all(self) -> None:
        for p in self.partitions.values():
            p.wake_waiters()


def _fsync_all(logs: list[Log]) -> None:
    for lg in logs:
        for seg in lg.segments:
            if seg.dirty:
                seg.flush()
