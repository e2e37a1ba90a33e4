"""Replica placement: where the replicas of new partitions go, as KRaft's StripedReplicaPlacer.

Owns ``assign_replicas``: partitions spread over the unfenced brokers (rack-aware when brokers
have ``broker.rack``), Kafka's round-robin with a shifted follower start, adding fenced brokers
last only when the factor needs more brokers than are unfenced; INVALID_REPLICATION_FACTOR with
Kafka 4's words when the factor exceeds the registered broker count or every broker is fenced.

Differs from Kafka: with racks, Kafka's placer may put a follower on a fenced broker of a rack
not yet used rather than on an unfenced one of a used rack; this one keeps to the unfenced
brokers while they suffice.
"""

from __future__ import annotations

import random

from protocol.errors import ErrorCode, KafkaError

__all__ = ["assign_replicas", "check_replication_factor"]


def assign_replicas(num_partitions: int, replication_factor: int, brokers: dict[int, str | None],
                    start_partition: int = 0, seed: int | None = None,
                    fenced: set[int] = frozenset()) -> list[list[int]]:
    """Replica lists for ``num_partitions`` new partitions (Kafka's AdminUtils shape): leaders
    round-robin from a random start, followers shifted so replicas of neighbouring partitions
    differ; with racks, the broker order alternates racks so each partition spans racks.

    ``brokers``: every registered broker (with its rack); ``fenced``: those of them that may
    hold a replica but not lead (fenced or shutting down). As KRaft's StripedReplicaPlacer, the
    replicas are placed on the unfenced brokers, and only a factor larger than they can hold
    adds fenced ones, last (never leading)."""
    check_replication_factor(replication_factor, len(brokers))
    active = {b: rack for b, rack in brokers.items() if b not in fenced}
    if not active:
        raise KafkaError(ErrorCode.invalid_replication_factor,
                         f"Unable to replicate the partition {replication_factor} time(s): "
                         f"All brokers are currently fenced.")
    placed = _place(num_partitions, min(replication_factor, len(active)), active, start_partition, seed)
    spare = _rack_alternated({b: rack for b, rack in brokers.items() if b in fenced})
    missing = replication_factor - len(active)
    for i, replicas in enumerate(placed):
        p = start_partition + i
        replicas += [spare[(p + j) % len(spare)] for j in range(missing)]
    return placed


def _place(num_partitions: int, replication_factor: int, brokers: dict[int, str | None],
           start_partition: int, seed: int | None) -> list[list[int]]:
    ordered = _rack_alternated(brokers)
    n = len(ordered)
    racks = {b: brokers[b] or "" for b in ordered}
    num_racks = len(set(racks.values()))
    rack_aware = any(brokers.values())
    rnd = random.Random(seed)
    start = rnd.randrange(n)
    shift = rnd.randrange(n)
    out = []
    for p in range(start_partition, start_partition + num_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [ordered[first]]
        if not rack_aware:
            replicas += [ordered[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)]
        else:  # Kafka's assignReplicasToBrokersRackAware: a new rack first, while one is left
            used_racks, k = {racks[replicas[0]]}, 0
            while len(replicas) < replication_factor:
                broker = ordered[_replica_index(first, shift * num_racks, k, n)]
                k += 1
                if (racks[broker] not in used_racks or len(used_racks) == num_racks) \
                        and broker not in replicas:
                    replicas.append(broker)
                    used_racks.add(racks[broker])
        out.append(replicas)
    return out


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n if n > 1 else first


def check_replication_factor(replication_factor: int, registered: int) -> None:
    """INVALID_REPLICATION_FACTOR with Kafka 4's words when the factor cannot be met."""
    if replication_factor <= 0:
        raise KafkaError(ErrorCode.invalid_replication_factor, "Replication factor must be larger than 0, or -1 to use the default value.")
    if replication_factor > registered:
        raise KafkaError(ErrorCode.invalid_replication_factor,
                         f"Unable to replicate the partition {replication_factor} time(s): The target "
                         f"replication factor of {replication_factor} cannot be reached because only "
                         f"{registered} broker(s) are registered or some brokers have all their log "
                         f"directories cordoned.")


def _rack_alternated(brokers: dict[int, str | None]) -> list[int]:
    if not any(brokers.values()):
        return sorted(brokers)
    by_rack: dict[str, list[int]] = {}
    for node, rack in sorted(brokers.items()):
        by_rack.setdefault(rack or "", []).append(node)
    racks = sorted(by_rack)
    out = []
    for i in range(max(len(v) for v in by_rack.values())):
        out.extend(by_rack[r][i] for r in racks if i < len(by_rack[r]))
    return out
