"""Server-side partition assignors of KIP-848 consumer groups: ``uniform`` and ``range``.

Owns the pure function from (members' subscribed topic ids, topic partition counts, the
current target assignment) to the next target assignment, as Kafka's ``ConsumerGroupPartitionAssignor``
implementations compute it (group-coordinator ``assignor/UniformAssignor`` and
``assignor/RangeAssignor``). Both are sticky: a partition stays with the member that has it
in the current target assignment as long as that keeps the assignment balanced.

- ``uniform`` (the default): every partition of a subscribed topic goes to one of its
  subscribers, and the numbers of partitions per member differ by at most one among members
  that could take the same partitions.
- ``range``: per topic, the topic's subscribers sorted by member id take consecutive ranges
  of partitions, the first ``partitions % members`` one more.

Differs from Kafka: the balancing moves of ``uniform`` are our own (fewest-partitions-first
with stickiness) rather than Kafka's ``OptimizedUniformAssignmentBuilder`` /
``GeneralUniformAssignmentBuilder``, so which partition lands where can differ from Kafka's
while the balance is the same; ``range`` is not sticky (Kafka 4's range assignor keeps a
member's range when the member set does not change, which the plain ranges also do); racks
are not used by either.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

Assignment = dict[uuid.UUID, frozenset[int]]


@dataclass(slots=True, frozen=True)
class MemberSpec:
    """What an assignor knows of a member: the topic ids it subscribes to (existing topics)."""

    subscribed_topic_ids: frozenset[uuid.UUID]
    rack_id: str | None = None


class PartitionAssignorError(Exception):
    """Kafka's ``PartitionAssignorException``."""


def _freeze(assignment: dict[str, dict[uuid.UUID, set[int]]]) -> dict[str, Assignment]:
    return {m: {t: frozenset(ps) for t, ps in topics.items() if ps} for m, topics in assignment.items()}


def uniform_assign(members: Mapping[str, MemberSpec], partition_counts: Mapping[uuid.UUID, int],
                   current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Kafka's ``UniformAssignor``: balanced and sticky (see the module docstring)."""
    owned: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    count = dict.fromkeys(members, 0)
    taken: set[tuple[uuid.UUID, int]] = set()
    # Stickiness: keep every still-valid partition of the current target assignment.
    for member_id in sorted(members):
        spec = members[member_id]
        for topic_id, partitions in current.get(member_id, {}).items():
            n = partition_counts.get(topic_id)
            if n is None or topic_id not in spec.subscribed_topic_ids:
                continue
            for p in sorted(partitions):
                if p < n and (topic_id, p) not in taken:
                    taken.add((topic_id, p))
                    owned[member_id].setdefault(topic_id, set()).add(p)
                    count[member_id] += 1
    subscribers: dict[uuid.UUID, list[str]] = {}
    for member_id in sorted(members):
        for topic_id in members[member_id].subscribed_topic_ids:
            if topic_id in partition_counts:
                subscribers.setdefault(topic_id, []).append(member_id)
    # Hand out unowned partitions, each to its least loaded subscriber.
    for topic_id in sorted(subscribers, key=str):
        for p in range(partition_counts[topic_id]):
            if (topic_id, p) in taken:
                continue
            member_id = min(subscribers[topic_id], key=lambda m: (count[m], m))
            owned[member_id].setdefault(topic_id, set()).add(p)
            count[member_id] += 1
            taken.add((topic_id, p))
    _rebalance(owned, count, subscribers)
    return _freeze(owned)


def _rebalance(owned: dict[str, dict[uuid.UUID, set[int]]], count: dict[str, int],
               subscribers: dict[uuid.UUID, list[str]]) -> None:
    """Move partitions from the most to the least loaded member that may take them, until no
    move narrows the gap (bounded: each move lowers the sum of squared counts)."""
    for _ in range(sum(count.values()) * max(len(count), 1) + 1):
        moved = False
        for giver in sorted(count, key=lambda m: (-count[m], m)):
            for topic_id in sorted(owned[giver], key=str):
                receivers = [m for m in subscribers.get(topic_id, ()) if count[m] + 1 < count[giver]]
                if not receivers or not owned[giver][topic_id]:
                    continue
                receiver = min(receivers, key=lambda m: (count[m], m))
                p = max(owned[giver][topic_id])
                owned[giver][topic_id].discard(p)
                owned[receiver].setdefault(topic_id, set()).add(p)
                count[giver] -= 1
                count[receiver] += 1
                moved = True
                break
            if moved:
                break
        if not moved:
            return


def range_assign(members: Mapping[str, MemberSpec], partition_counts: Mapping[uuid.UUID, int],
                 current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Kafka's ``RangeAssignor``: per topic, consecutive ranges by member id."""
    owned: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    for topic_id, n in partition_counts.items():
        subs = sorted(m for m, spec in members.items() if topic_id in spec.subscribed_topic_ids)
        if not subs:
            continue
        quota, extra = divmod(n, len(subs))
        start = 0
        for i, member_id in enumerate(subs):
            size = quota + (1 if i < extra else 0)
            if size:
                owned[member_id][topic_id] = set(range(start, start + size))
            start += size
    return _freeze(owned)


ASSIGNORS = {"uniform": uniform_assign, "range": range_assign}

# group.consumer.assignors takes class names (Kafka's default) or the assignors' names.
_CLASS_NAMES = {"org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
                "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range"}


def configured_assignors(value: list[str] | str) -> list[str]:
    """The assignor names of ``group.consumer.assignors``, in order (the first is the default)."""
    items = value.split(",") if isinstance(value, str) else value
    names = []
    for item in (i.strip() for i in items):
        name = _CLASS_NAMES.get(item, item)
        if name in ASSIGNORS and name not in names:
            names.append(name)
    return names or ["uniform", "range"]
