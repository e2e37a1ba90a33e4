"""What the coordinators get from the broker that hosts them: the narrow capabilities their
service protocols name (:mod:`coordinator.services` and each coordinator's own).

Owns the adapter from the broker's parts (config, metadata cache, replica manager, metrics) to
those protocols. Internal-topic writes go through the replica manager's acks=all path and come
back as a Kafka error code, which the coordinators map to what clients are told.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import structlog

from coordinator.group.group_config import config_value
from metadata.etcd.store import STORE_ERRORS
from protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from storage.log import Log

    from .services import BrokerServices

log = structlog.get_logger("broker.coordinator_services")


class BrokerCoordinatorServices:
    """One adapter for every coordinator's protocol: the group coordinator's
    (:class:`coordinator.group.services.GroupServices`), the share coordinator's, share groups'
    and share partitions'; the transaction coordinator's extends it (``txn_services.py``)."""

    def __init__(self, broker: BrokerServices) -> None:
        self.broker = broker
        self.node_id = broker.node_id

    def config(self, key: str) -> Any:
        return self.broker.config.get(key)

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def metadata_is_current(self) -> bool:
        return self.broker.metadata.is_current()

    def partition_count(self, topic: str) -> int | None:
        state = self.broker.metadata.topics.get(topic)
        return None if state is None else len(state.partitions)

    def led_partitions(self, topic: str) -> dict[int, int]:
        """Partition -> leader epoch of every ``topic`` partition this broker leads now."""
        return {p.index: p.leader_epoch for p in self.broker.replica_manager.led_partitions()
                if p.topic == topic}

    def create_internal_topic(self, name: str, partitions: int, configs: dict[str, str],
                              replication_factor: int) -> int:
        """The internal topic's partition count, creating it on first use; raises KafkaError
        (COORDINATOR_NOT_AVAILABLE while a cluster creates it)."""
        topic = self.broker.control.replication.ensure_internal_topic(name, partitions, configs, replication_factor)
        return len(topic.partitions)

    async def append(self, topic: str, partition: int, records: bytes, timeout_ms: int) -> int:
        """Append as the leader with acks=all: 0 once the ISR has it (and it is flushed where
        the flush policy asks), else the error code."""
        return (await self.append_at(topic, partition, records, timeout_ms))[0]

    async def append_at(self, topic: str, partition: int, records: bytes, timeout_ms: int, *,
                        verification_guard: object | None = None,
                        on_appended: Callable[[int], None] | None = None) -> tuple[int, int]:
        """:meth:`append`, with the batch's base offset: (0, base offset) or (error, -1)."""
        try:
            info = await self.broker.replica_manager.append_replicated(
                topic, partition, records, timeout_ms, verification_guard=verification_guard,
                on_appended=on_appended)
        except KafkaError as exc:
            return exc.code, -1
        except Exception:
            log.exception("internal_append_failed", topic=topic, partition=partition)
            return ErrorCode.kafka_storage_error, -1
        return 0, info.base_offset

    def topic_metadata(self) -> dict:
        return {name: (t.uuid, len(t.partitions)) for name, t in self.broker.metadata.topics.items()}

    def group_configs(self, group_id: str) -> dict[str, str]:
        return self.broker.metadata.group_configs.get(group_id, {})

    def local_log(self, topic: str, partition: int) -> Log:
        return self.broker.replica_manager.get(topic, partition).log

    def read_batches(self, topic: str, partition: int) -> Iterator[bytes]:
        plog = self.local_log(topic, partition)
        for seg, pos, header in plog.batches(plog.log_start_offset, plog.log_end_offset):
            yield seg.read_batch(pos, header)

    # --- share groups and share partitions -----------------------------------------------------

    def group_config_value(self, group_id: str, name: str) -> Any:
        return config_value(self.broker.metadata.group_configs.get(group_id), name, self.broker.config.get)

    def topic_info(self, name: str) -> tuple[uuid.UUID, int] | None:
        state = self.broker.metadata.topics.get(name)
        return None if state is None else (state.uuid, len(state.partitions))

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        state = self.broker.metadata.topic_by_id(topic_id)
        return None if state is None else state.name

    async def catch_up_group_config(self, group_id: str) -> None:
        try:
            await self.broker.control.configs.catch_up_group_config(group_id)
        except (KafkaError, *STORE_ERRORS, TimeoutError) as exc:  # the image as it is, then
            log.info("group_config_catch_up_failed", group=group_id, error=repr(exc)[:200])

    def leader_log(self, topic: str, partition: int) -> Log:
        return self.broker.replica_manager.leader_partition(topic, partition).log

    def wake(self, topic: str, partition: int) -> None:
        part = self.broker.replica_manager.partitions.get((topic, partition))
        if part is not None:
            part.wake_waiters()


class BrokerShareAdminView:
    """What share-group offsets administration reads of the broker
    (:class:`coordinator.share.admin.ShareGroups` and ``TopicView``)."""

    def __init__(self, broker: BrokerServices) -> None:
        self.broker = broker

    def coordinator_error(self, group_id: str) -> int:
        if not group_id:
            return ErrorCode.invalid_group_id
        return self.broker.group_coordinator.coordinator_error(group_id)

    def member_count(self, group_id: str) -> int | None:
        share = self.broker.share_group_coordinator
        if share is None or not share.owns(group_id):
            return None
        return len(share.groups[group_id].members)

    def is_other_group_type(self, group_id: str) -> bool:
        return self.broker.group_coordinator.owns_classic_group(group_id)

    def topic_id(self, name: str) -> uuid.UUID | None:
        state = self.broker.metadata.topics.get(name)
        return None if state is None else state.uuid

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        state = self.broker.metadata.topic_by_id(topic_id)
        return None if state is None else state.name

    def partition_count(self, name: str) -> int | None:
        state = self.broker.metadata.topics.get(name)
        return None if state is None else len(state.partitions)

    def high_watermark(self, name: str, partition: int) -> int | None:
        part = self.broker.replica_manager.partitions.get((name, partition))
        return None if part is None else part.log.high_watermark
