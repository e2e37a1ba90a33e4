"""The seams of the group coordinator: its parts, and the other group types it hosts.

The :class:`~coordinator.group.coordinator.GroupCoordinator` service is split as Kafka 4's is:
the classic groups (:mod:`.classic`) and the offsets (:mod:`.offsets`) are
:class:`CoordinatorPart` s that reach the groups, the services, the clock and the background
tasks through it.

A group id belongs to exactly one group type (Kafka's ``Group.GroupType``). The
:class:`~coordinator.group.coordinator.GroupCoordinator` owns the ``__consumer_offsets``
partitions, their loading and their writes; another group type (share groups,
``coordinator/share``) registers itself as a :class:`GroupTypeOwner` and is told about
loads, unloads and shutdown, and is asked by the APIs that span all group types (ListGroups,
DescribeGroups, DeleteGroups) and by the classic APIs that must refuse its ids.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..runtime import BackgroundTasks, CoordinatorTimer
    from .coordinator import GroupCoordinator
    from .services import GroupServices
    from .state import GroupMetadata


class CoordinatorPart:
    """One part of a :class:`~coordinator.group.coordinator.GroupCoordinator` (``self.c``)."""

    def __init__(self, coordinator: GroupCoordinator) -> None:
        self.c = coordinator

    @property
    def s(self) -> GroupServices:
        return self.c.s

    @property
    def groups(self) -> dict[str, GroupMetadata]:
        return self.c.groups

    @property
    def timer(self) -> CoordinatorTimer:
        return self.c.timer

    @property
    def tasks(self) -> BackgroundTasks:
        return self.c.tasks


class GroupTypeOwner(Protocol):
    def owns(self, group_id: str) -> bool:
        """Whether ``group_id`` is one of this type's groups."""

    def replay_loaded(self, records: Iterable[tuple[bytes, bytes | None]]) -> int:
        """Replay the partition's records the classic loader does not own (log order);
        the number of groups loaded."""

    def unload(self, partition: int) -> None:
        """Forget the groups of ``partition`` (leadership moved)."""

    def shutdown(self) -> None:
        """Forget everything and stop timers (the coordinator stops)."""

    def list_groups(self, states: set[str] | None, types: set[str] | None) -> list[dict]:
        """ListGroups entries (group_id, protocol_type, group_state, group_type)."""

    async def delete_group(self, group_id: str) -> int:
        """DeleteGroups of one of this type's groups: the error code."""
