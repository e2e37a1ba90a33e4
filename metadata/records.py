"""The records of cluster metadata: a broker's registration, a partition's and a topic's state.

Owns :class:`BrokerRegistration` (a broker's endpoints by listener name, rack, incarnation),
:class:`PartitionState` (Kafka's PartitionRegistration: leader, leader epoch, replicas, ISR,
partition epoch, a reassignment in progress) and :class:`TopicState`, with their JSON forms as
both stores keep them.

Differs from Kafka: records are JSON documents (an etcd value, an entry of the embedded
store's log), not typed metadata-log records; a partition record carries the backend's own
version (``mod_revision``) for compare-and-swap instead of a log offset.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass, field

__all__ = ["NO_LEADER", "BrokerRegistration", "PartitionState", "TopicState", "new_cluster_id"]

NO_LEADER = -1


def new_cluster_id() -> str:
    """Kafka's cluster id shape: a random UUID in URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


@dataclass(slots=True)
class BrokerRegistration:
    """A registered broker. ``host``/``port`` is its inter-broker endpoint (all an old registration
    holds); ``endpoints`` its advertised endpoint per listener name, as Kafka registers them."""
    node_id: int
    host: str
    port: int
    rack: str | None = None
    incarnation_id: str = ""
    controlled_shutdown: bool = False
    endpoints: dict[str, tuple[str, int]] = field(default_factory=dict)

    def endpoint_on(self, listener: str | None) -> tuple[str, int] | None:
        """The endpoint on ``listener``; None if the broker has no such listener. An old
        registration (no listener names) answers its only endpoint for every listener."""
        if listener is None or not self.endpoints:
            return self.host, self.port
        return self.endpoints.get(listener)


@dataclass
class PartitionState:
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    partition_epoch: int = 0
    # Reassignment in progress (KIP-455): replicas being added / removed.
    adding_replicas: list[int] = field(default_factory=list)
    removing_replicas: list[int] = field(default_factory=list)
    mod_revision: int = 0  # the backend's version of this record (etcd mod_revision), 0 embedded

    def to_json(self) -> dict:
        return {"leader": self.leader, "leader_epoch": self.leader_epoch, "replicas": self.replicas,
                "isr": self.isr, "partition_epoch": self.partition_epoch,
                "adding_replicas": self.adding_replicas, "removing_replicas": self.removing_replicas}

    @classmethod
    def from_json(cls, raw: dict, mod_revision: int = 0) -> PartitionState:
        return cls(raw["leader"], raw["leader_epoch"], list(raw["replicas"]), list(raw["isr"]),
                   raw.get("partition_epoch", 0), list(raw.get("adding_replicas", ())),
                   list(raw.get("removing_replicas", ())), mod_revision)

    @classmethod
    def created(cls, replicas: list[int], active: set[int]) -> PartitionState:
        """A new partition: its ISR the replicas that are active (unfenced, not shutting down),
        led by the first of them, as KRaft's ReplicationControlManager creates one."""
        isr = [r for r in replicas if r in active] or list(replicas)
        return cls(isr[0], 0, list(replicas), isr)

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0] if self.replicas else NO_LEADER


@dataclass
class TopicState:
    name: str
    topic_id: str
    partitions: list[PartitionState]
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def uuid(self) -> uuid.UUID:
        return uuid.UUID(self.topic_id)
