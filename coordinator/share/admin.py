"""Share-group offsets administration: Describe / Alter / DeleteShareGroupOffsets (KIP-932).

Owns the answers of Kafka's ``GroupCoordinatorService.describeShareGroupOffsets`` (answered by
any broker, with no group check, an unknown topic's partitions at start offset -1),
``alterShareGroupOffsets`` and ``deleteShareGroupOffsets`` over the share-partition state:
the SPSO of each share-partition (-1 where the group never fetched it), its lag (v1: the
high watermark minus the SPSO minus the in-flight records already delivered), and, for an
empty share group only, moving the SPSO (the in-flight state is dropped) or deleting the
state of whole topics.

Differs from Apache Kafka: the share-partition state is read from the live share-partition
when this broker leads the partition, else from the persister; the lag is known only where
this broker hosts a replica of the partition (-1 elsewhere). Altering the offsets of a group
that does not exist writes the state without creating the group (Kafka creates an empty
share group).
"""

from __future__ import annotations

from typing import Any, Protocol
from uuid import UUID

from protocol.errors import ErrorCode, KafkaError

from .manager import SharePartitionManager
from .partition import PersistedState

UNKNOWN_TOPIC_MESSAGE = "This server does not host this topic-partition."


class ShareGroups(Protocol):
    """What the membership side tells: 0 / coordinator error, and the group's members."""

    def coordinator_error(self, group_id: str) -> int: ...

    def member_count(self, group_id: str) -> int | None:
        """Members of the share group, None when there is no such share group."""

    def is_other_group_type(self, group_id: str) -> bool:
        """Whether ``group_id`` is a classic or consumer group."""


class TopicView(Protocol):
    def topic_id(self, name: str) -> UUID | None: ...

    def partition_count(self, name: str) -> int | None: ...

    def high_watermark(self, name: str, partition: int) -> int | None: ...


class ShareGroupOffsets:
    def __init__(self, manager: SharePartitionManager, groups: ShareGroups, topics: TopicView) -> None:
        self.manager = manager
        self.groups = groups
        self.topics = topics

    # --- DescribeShareGroupOffsets -------------------------------------------------------------

    async def describe(self, group_id: str, topics: list[tuple[str, list[int]]] | None) -> dict:
        """One group's answer: its topics' partitions with start offset, leader epoch and lag."""
        out: dict[str, Any] = {"group_id": group_id, "error_code": 0, "error_message": None, "topics": []}
        if topics is None:
            topics = await self._group_topics(group_id)
        for name, partitions in topics:
            topic_id = self.topics.topic_id(name)
            if topic_id is None:  # Kafka: start offset -1, no error
                out["topics"].append({"topic_name": name, "topic_id": UUID(int=0), "partitions": [
                    {"partition_index": p, "start_offset": -1, "leader_epoch": 0, "lag": -1, "error_code": 0}
                    for p in partitions]})
                continue
            described = [await self._describe_partition(group_id, name, topic_id, p) for p in partitions]
            out["topics"].append({"topic_name": name, "topic_id": topic_id, "partitions": described})
        return out

    async def _group_topics(self, group_id: str) -> list[tuple[str, list[int]]]:
        by_topic: dict[str, list[int]] = {}
        for topic_id, partition in sorted(await self.manager.persister.group_partitions(group_id),
                                          key=lambda k: (str(k[0]), k[1])):
            name = self._name_of(topic_id)
            if name is not None:
                by_topic.setdefault(name, []).append(partition)
        return list(by_topic.items())

    def _name_of(self, topic_id: UUID) -> str | None:
        names = getattr(self.topics, "topic_name", None)
        return names(topic_id) if names else None

    async def _describe_partition(self, group_id: str, name: str, topic_id: UUID, partition: int) -> dict:
        try:
            state = await self._state(group_id, topic_id, partition)
        except KafkaError as exc:
            return _partition_error(partition, exc.code, exc.message)
        if state is None or state.start_offset < 0:
            return {"partition_index": partition, "start_offset": -1, "leader_epoch": -1, "lag": -1,
                    "error_code": 0}
        hw = self.topics.high_watermark(name, partition)
        done = sum(b.last_offset - b.first_offset + 1 for b in state.batches if b.state.is_terminal)
        lag = -1 if hw is None else max(0, hw - state.start_offset - done)
        return {"partition_index": partition, "start_offset": state.start_offset,
                "leader_epoch": state.leader_epoch, "lag": lag, "error_code": 0}

    async def _state(self, group_id: str, topic_id: UUID, partition: int) -> PersistedState | None:
        live = self.manager.entries.get((group_id, topic_id, partition))
        if live is not None:
            return live.share_partition.snapshot()
        return await self.manager.persister.read_state(group_id, topic_id, partition)

    # --- AlterShareGroupOffsets ----------------------------------------------------------------

    async def alter(self, group_id: str, topics: list[tuple[str, list[tuple[int, int]]]]) -> dict:
        """Move the SPSO of each partition; the group must have no members."""
        error = self._check_empty(group_id, missing_ok=True)
        if error:
            return {"error_code": error[0], "error_message": error[1], "responses": []}
        responses = []
        for name, partitions in topics:
            topic_id = self.topics.topic_id(name)
            count = self.topics.partition_count(name) or 0
            results = []
            for index, offset in partitions:
                if topic_id is None or index >= count or index < 0:
                    results.append({"partition_index": index, "error_code": ErrorCode.unknown_topic_or_partition,
                                    "error_message": UNKNOWN_TOPIC_MESSAGE})
                    continue
                try:
                    await self.manager.reset_start_offset(group_id, topic_id, index, offset)
                    results.append({"partition_index": index, "error_code": 0})
                except KafkaError as exc:
                    results.append({"partition_index": index, "error_code": exc.code, "error_message": exc.message})
            responses.append({"topic_name": name, "topic_id": topic_id or UUID(int=0), "partitions": results})
        return {"error_code": 0, "error_message": None, "responses": responses}

    # --- DeleteShareGroupOffsets ---------------------------------------------------------------

    async def delete(self, group_id: str, topic_names: list[str]) -> dict:
        """Forget the share-partition state of whole topics; the group must have no members."""
        error = self._check_empty(group_id, missing_ok=False)
        if error:
            return {"error_code": error[0], "error_message": error[1], "responses": []}
        responses = []
        for name in topic_names:
            topic_id = self.topics.topic_id(name)
            if topic_id is None:
                responses.append({"topic_name": name, "topic_id": UUID(int=0),
                                  "error_code": ErrorCode.unknown_topic_or_partition,
                                  "error_message": UNKNOWN_TOPIC_MESSAGE})
                continue
            partitions = [(topic_id, p) for p in range(self.topics.partition_count(name) or 0)]
            try:
                with_state = [k for k in partitions if await self._state(group_id, *k) is not None]
                if not with_state:
                    responses.append({"topic_name": name, "topic_id": topic_id,
                                      "error_code": ErrorCode.unknown_topic_or_partition,
                                      "error_message": "There is no offset information to delete."})
                    continue
                await self.manager.delete_partitions_state(group_id, with_state)
                responses.append({"topic_name": name, "topic_id": topic_id, "error_code": 0})
            except KafkaError as exc:
                responses.append({"topic_name": name, "topic_id": topic_id, "error_code": exc.code,
                                  "error_message": exc.message})
        return {"error_code": 0, "error_message": None, "responses": responses}

    def _check_empty(self, group_id: str, *, missing_ok: bool) -> tuple[int, str | None] | None:
        error = self.groups.coordinator_error(group_id)
        if error:
            return error, None
        if self.groups.is_other_group_type(group_id):   # Kafka's getOrMaybeCreateShareGroup
            return ErrorCode.group_id_not_found, f"Group {group_id} is not a share group."
        members = self.groups.member_count(group_id)
        if members is None and not missing_ok:
            return ErrorCode.group_id_not_found, f"Group {group_id} not found."
        if members:
            return ErrorCode.non_empty_group, "The group is not empty."
        return None


def _partition_error(partition: int, code: int, message: str | None) -> dict:
    return {"partition_index": partition, "start_offset": -1, "leader_epoch": -1, "lag": -1,
            "error_code": code, "error_message": message}
