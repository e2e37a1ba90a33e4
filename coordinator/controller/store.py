"""The embedded metadata store: the single-node default, JSON files under the data dir.

Owns: the cluster id, topics (id, partition count, per-topic config overrides), each
partition's leader, replicas, ISR and leader epoch, the producer-id block counter, the
group config overrides, the SCRAM credentials, the client quotas, the ACLs (by id) and the
finalized feature levels. Every change is logged and fsynced (``metadata_log``) before the
call returns, with no await in between, so an acknowledged CreateTopics or a handed-out
producer-id block survives kill -9.

Differs from Kafka: Kafka keeps this in the KRaft metadata log; here the log records JSON
deltas of the changed entries and is folded into one snapshot file once it outgrows it. The
etcd backend for a cluster implements the same methods.
"""

from __future__ import annotations

import base64
import uuid

from protocol.errors import ErrorCode, KafkaError
from security.acls import StandardAcl

from .features import NEW_CLUSTER_LEVELS
from .metadata import BrokerRegistration, MetadataCache, PartitionState, TopicState
from .metadata_log import MetadataLog

__all__ = ["MetadataStore", "PartitionState", "TopicState", "new_cluster_id", "PRODUCER_ID_BLOCK_SIZE"]

PRODUCER_ID_BLOCK_SIZE = 1000


def new_cluster_id() -> str:
    """Kafka's cluster id shape: a random UUID in URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class MetadataStore(MetadataCache):
    """File-backed metadata for one broker (which is its own controller); it is its own cache."""

    clustered = False

    def __init__(self, path: str, node_id: int) -> None:
        super().__init__(node_id)
        self.path = path
        self.cluster_id = new_cluster_id()
        self.controller_id = node_id
        self.controller_epoch = 0  # bumped each time this broker (re)takes the controller role at start
        self.metadata_offset = 0  # how many changes were written: the metadata log's end offset in KRaft terms
        self.next_producer_id_block = 0
        self._log = MetadataLog(path)
        self._load()

    async def catch_up_group_config(self, group_id: str) -> None:
        """Nothing to catch up with: this store's image is the store."""

    def register_self(self, registration: BrokerRegistration) -> None:
        self.registered = self.brokers = {registration.node_id: registration}

    async def unregister_broker(self, node_id: int) -> None:
        """UnregisterBroker on one node: only this broker is registered, and it registers again
        at once, as a KRaft broker does when its registration is removed under it."""
        if node_id not in self.registered:
            raise KafkaError(ErrorCode.broker_id_not_registered, f"Broker ID {node_id} is not currently registered")

    def _load(self) -> None:
        raw = self._log.load()
        if raw is None:  # a new cluster
            self.finalized_features = dict(NEW_CLUSTER_LEVELS)
            self._snapshot()
            return
        self.cluster_id = raw["cluster_id"]
        self.next_producer_id_block = raw.get("next_producer_id_block", 0)
        self.controller_epoch = raw.get("controller_epoch", 0)
        self.metadata_offset = raw.get("metadata_offset", 0)
        self.group_configs = {g: dict(c) for g, c in raw.get("group_configs", {}).items()}
        self.scram_credentials = raw.get("scram_credentials", {})
        self.client_quotas = raw.get("client_quotas", {})
        self.finalized_features = raw.get("finalized_features")
        self.features_epoch = raw.get("features_epoch", 0)
        for name, t in raw["topics"].items():
            self.topics[name] = TopicState(name, t["topic_id"],
                                           [PartitionState.from_json(p) for p in t["partitions"]],
                                           t.get("configs", {}))
        self.acls = {acl_id: StandardAcl.from_json(a) for acl_id, a in raw.get("acls", {}).items()}

    @property
    def applied_offset(self) -> int:
        """The position of the image in the metadata history (DescribeQuorum's high watermark)."""
        return self.metadata_offset

    # The image's maps, each entry encoded on its own so that a change logs only its entries.
    _ENCODERS = {
        "topics": lambda t: {"topic_id": t.topic_id, "configs": t.configs,
                             "partitions": [p.to_json() for p in t.partitions]},
        "group_configs": dict,
        "scram_credentials": lambda c: c,
        "client_quotas": dict,
        "acls": lambda acl: acl.to_json(),
    }

    def _values(self) -> dict:
        return {"cluster_id": self.cluster_id, "controller_epoch": self.controller_epoch,
                "metadata_offset": self.metadata_offset, "next_producer_id_block": self.next_producer_id_block,
                "finalized_features": self.finalized_features, "features_epoch": self.features_epoch}

    def _entries(self, name: str, keys) -> dict:
        current, encode = getattr(self, name), self._ENCODERS[name]
        return {k: encode(current[k]) if k in current else None for k in keys}

    def _save(self, **changed) -> None:
        """Log one change: the scalar values and the named map entries (``topics=[name]``;
        an entry no longer present is logged as deleted)."""
        self.metadata_offset += 1
        self._log.append({"offset": self.metadata_offset, "values": self._values(),
                          "entries": {name: self._entries(name, keys) for name, keys in changed.items()}})
        if self._log.wants_snapshot:
            self._log.write_snapshot(self._image())

    def _snapshot(self) -> None:
        """A change to most of the image (start-up's election): written as a new snapshot."""
        self.metadata_offset += 1
        self._log.write_snapshot(self._image())

    def _image(self) -> dict:
        return {**self._values(), **{name: self._entries(name, getattr(self, name)) for name in self._ENCODERS}}

    # --- topics ---------------------------------------------------------------------------

    def create_topic(self, name: str, num_partitions: int, configs: dict[str, str]) -> TopicState:
        return self.create_topics([(name, num_partitions, configs)])[0]

    def create_topics(self, topics: list[tuple[str, int, dict[str, str]]]) -> list[TopicState]:
        """Several topics in one change (one CreateTopics request)."""
        created = [TopicState(name, str(uuid.uuid4()), [self._new_partition() for _ in range(n)], dict(configs))
                   for name, n, configs in topics]
        if created:
            self.topics.update((t.name, t) for t in created)
            self._save(topics=[t.name for t in created])
        return created

    def _new_partition(self) -> PartitionState:
        return PartitionState(self.node_id, 0, [self.node_id], [self.node_id])

    def delete_topic(self, name: str) -> TopicState:
        return self.delete_topics([name])[0]

    def delete_topics(self, names: list[str]) -> list[TopicState]:
        """Several topics in one change (one DeleteTopics request)."""
        deleted = [self.topics.pop(name) for name in names]
        if deleted:
            self._save(topics=names)
        return deleted

    def add_partitions(self, name: str, total: int) -> None:
        topic = self.topics[name]
        topic.partitions.extend(self._new_partition() for _ in range(total - len(topic.partitions)))
        self._save(topics=[name])

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        self.topics[name].configs = dict(configs)
        self._save(topics=[name])

    # --- groups ----------------------------------------------------------------------------

    def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        """Replace a group's config overrides (none left: the group's entry goes)."""
        if configs:
            self.group_configs[group_id] = dict(configs)
        else:
            self.group_configs.pop(group_id, None)
        self._save(group_configs=[group_id])

    def alter_scram_credentials(self, changes: dict[str, dict[str, dict]]) -> None:
        """Replace each named user's credentials at once (an empty set removes the user)."""
        for user, credentials in changes.items():
            if credentials:
                self.scram_credentials[user] = credentials
            else:
                self.scram_credentials.pop(user, None)
        self._save(scram_credentials=list(changes))

    def alter_client_quotas(self, changes: dict[str, dict[str, float]]) -> None:
        """Replace each named entity's quotas at once (an empty map removes the entity)."""
        for entity, quotas in changes.items():
            if quotas:
                self.client_quotas[entity] = dict(quotas)
            else:
                self.client_quotas.pop(entity, None)
        self._save(client_quotas=list(changes))

    def update_features(self, levels: dict[str, int], expected_epoch: int) -> bool:
        """Finalize ``levels`` if the levels are still those of ``expected_epoch``; the new
        epoch is this change's metadata offset."""
        if expected_epoch != self.features_epoch:
            return False
        self.finalized_features, self.features_epoch = dict(levels), self.metadata_offset + 1
        self._save()
        return True

    def elect_self_leader_everywhere(self) -> None:
        """At start-up this broker (re)takes leadership: every leader epoch is bumped."""
        self.controller_epoch += 1
        for topic in self.topics.values():
            for p in topic.partitions:
                p.leader = self.node_id
                p.leader_epoch += 1
                p.isr = [self.node_id]
        self._snapshot()

    async def alter_partitions(self, changes, controller_epoch: int | None = None,
                               wait: bool = False, broker_epochs: dict[int, int] | None = None) -> set[tuple[str, int]]:
        """Write partition states (admin elections and reassignments); the listeners apply them."""
        written = set()
        for topic, index, state, _expected in changes:
            t = self.topics.get(topic)
            if t is not None and 0 <= index < len(t.partitions):
                t.partitions[index] = state
                written.add((topic, index))
        if written:
            self._save(topics={topic for topic, _ in written})
            self.notify(written, set())
        return written

    # --- ACLs ------------------------------------------------------------------------------------

    async def create_acls(self, acls: list[StandardAcl]) -> None:
        """Add the ACLs not already present (an existing one is a success, as in Kafka)."""
        new = {acl.acl_id: acl for acl in acls if acl.acl_id not in self.acls}
        if new:
            self.acls = {**self.acls, **new}
            self._save(acls=list(new))
            self.notify_acls()

    async def delete_acls(self, acl_ids: set[str]) -> None:
        if acl_ids & self.acls.keys():
            self.acls = {k: v for k, v in self.acls.items() if k not in acl_ids}
            self._save(acls=list(acl_ids))
            self.notify_acls()

    # --- producer ids ------------------------------------------------------------------------

    def allocate_producer_id_block(self) -> tuple[int, int]:
        """A fresh block [start, start + size), persisted before it is handed out."""
        start = self.next_producer_id_block
        self.next_producer_id_block = start + PRODUCER_ID_BLOCK_SIZE
        self._save()
        return start, PRODUCER_ID_BLOCK_SIZE
