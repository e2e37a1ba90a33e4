"""The share-group partition assignor: Kafka's ``SimpleAssignor`` ("simple").

Owns the target assignment of a share group. Unlike a consumer group, a partition may go to
several members at once (the share-partition hands out records, not partitions), and nothing is
revoked first: the assignment is the target itself.

Principles, as Kafka's ``SimpleHomogeneousAssignmentBuilder`` / ``SimpleHeterogeneousAssignmentBuilder``:

- balance first: with M members and P partitions each partition goes to ``ceil(M / P)`` members
  (the desired sharing) and the member counts differ by at most one;
- stickiness second: a member keeps what it had, as far as balance allows;
- when every member subscribes to the same topics, all their partitions are balanced as one
  pool; otherwise each topic is balanced among its own subscribers.

Differs from Kafka: members are taken in member-id order and partitions in (topic, partition)
order, where Kafka iterates hash maps; the sizes and sharing come out the same, the exact
member a partition lands on may not.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping

from .records import Assignment

ASSIGNOR_NAME = "simple"

TopicPartition = tuple[uuid.UUID, int]


def assign(subscriptions: Mapping[str, frozenset[str]], topics: Mapping[str, tuple[uuid.UUID, int]],
           current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """The target assignment: member id -> topic id -> partitions.

    ``subscriptions``: each member's subscribed topic names; ``topics``: name -> (topic id,
    partition count) of the topics that exist; ``current``: the previous target assignment.
    """
    members = sorted(subscriptions)
    result: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    subscribed = {m: sorted(t for t in subscriptions[m] if t in topics) for m in members}
    if len({tuple(s) for s in subscribed.values()}) <= 1:
        pools = [(members, subscribed[members[0]] if members else [])]
    else:
        pools = [([m for m in members if name in subscribed[m]], [name])
                 for name in sorted({t for s in subscribed.values() for t in s})]
    for pool_members, names in pools:
        partitions = [(topics[n][0], p) for n in names for p in range(topics[n][1])]
        for member, (topic_id, p) in _assign_pool(pool_members, partitions, current):
            result[member].setdefault(topic_id, set()).add(p)
    return {m: {t: frozenset(ps) for t, ps in a.items()} for m, a in result.items()}


def _desired_counts(num_members: int, num_partitions: int) -> tuple[int, list[int]]:
    """Kafka's desired sharing and per-member desired assignment counts."""
    sharing = -(-num_members // num_partitions)
    precise = sharing * num_partitions / num_members
    return sharing, [math.ceil(precise * (i + 1)) - math.ceil(precise * i) for i in range(num_members)]


def _assign_pool(members: list[str], partitions: list[TopicPartition],
                 current: Mapping[str, Assignment]) -> list[tuple[str, TopicPartition]]:
    if not members or not partitions:
        return []
    sharing, desired = _desired_counts(len(members), len(partitions))
    pool = set(partitions)
    holders: dict[TopicPartition, list[int]] = {tp: [] for tp in partitions}
    counts = [0] * len(members)
    # Stickiness: keep what each member had, within its desired count and the desired sharing.
    for i, member in enumerate(members):
        kept = sorted((t, p) for t, ps in current.get(member, {}).items() for p in ps if (t, p) in pool)
        for tp in kept:
            if counts[i] < desired[i] and len(holders[tp]) < sharing:
                holders[tp].append(i)
                counts[i] += 1
    # Balance: give every partition its sharing, to the member furthest below its count.
    for tp in partitions:
        while len(holders[tp]) < sharing:
            candidates = [i for i in range(len(members)) if i not in holders[tp]]
            best = max(candidates, key=lambda i: (desired[i] - counts[i], -counts[i], -i))
            holders[tp].append(best)
            counts[best] += 1
    return [(members[i], tp) for tp in partitions for i in holders[tp]]
