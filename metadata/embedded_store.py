"""The embedded metadata store: the single-node default, JSON files under the data dir.

Owns: the cluster id, topics (id, partition count, per-topic config overrides), each
partition's leader, replicas, ISR and leader epoch, the producer-id block counter, the
group config overrides, the SCRAM credentials, the client quotas, the ACLs (by id) and the
finalized feature levels. Every change is logged and fsynced (``metadata_log``) before the
call returns, with no await in between, so an acknowledged CreateTopics or a handed-out
producer-id block survives kill -9.

It feeds the broker's :class:`~metadata.image.MetadataCache` directly: a change is applied to
the image and logged in the same step. The etcd backend for a cluster has the same write
methods (awaitable there, immediate here).

Differs from Kafka: Kafka keeps this in the KRaft metadata log; here the log records JSON
deltas of the changed entries and is folded into one snapshot file once it outgrows it.
"""

from __future__ import annotations

import uuid

from protocol.errors import ErrorCode, KafkaError
from security.acls import StandardAcl

from .controller.features import NEW_CLUSTER_LEVELS
from .controller.producer_ids import PRODUCER_ID_BLOCK_SIZE
from .embedded_log import MetadataLog
from .image import MetadataCache
from .records import BrokerRegistration, PartitionState, TopicState, new_cluster_id

__all__ = ["EmbeddedMetadataStore"]


class EmbeddedMetadataStore:
    """File-backed metadata for one broker (which is its own controller)."""

    clustered = False
    connected = True

    def __init__(self, path: str, node_id: int, image: MetadataCache | None = None) -> None:
        self.image = image if image is not None else MetadataCache(node_id)
        self.node_id = node_id
        self.path = path
        self.image.cluster_id = new_cluster_id()
        self.image.controller_id = node_id
        # controller_epoch: bumped each time this broker (re)takes the controller role at start;
        # applied_offset: how many changes were written, the metadata log's end offset in KRaft terms.
        self.next_producer_id_block = 0
        self._log = MetadataLog(path)
        self._load()

    @property
    def metadata_offset(self) -> int:
        return self.image.applied_offset

    async def catch_up_group_config(self, group_id: str) -> None:
        """Nothing to catch up with: this store's image is the store."""

    def register_self(self, registration: BrokerRegistration) -> None:
        self.image.registered = self.image.brokers = {registration.node_id: registration}

    async def unregister_broker(self, node_id: int) -> None:
        """UnregisterBroker on one node: only this broker is registered, and it registers again
        at once, as a KRaft broker does when its registration is removed under it."""
        if node_id not in self.image.registered:
            raise KafkaError(ErrorCode.broker_id_not_registered, f"Broker ID {node_id} is not currently registered")

    def _load(self) -> None:
        raw = self._log.load()
        image = self.image
        if raw is None:  # a new cluster
            image.finalized_features = dict(NEW_CLUSTER_LEVELS)
            self._snapshot()
            return
        image.cluster_id = raw["cluster_id"]
        self.next_producer_id_block = raw.get("next_producer_id_block", 0)
        image.controller_epoch = raw.get("controller_epoch", 0)
        image.applied_offset = raw.get("metadata_offset", 0)
        image.group_configs = {g: dict(c) for g, c in raw.get("group_configs", {}).items()}
        image.scram_credentials = raw.get("scram_credentials", {})
        image.client_quotas = raw.get("client_quotas", {})
        image.finalized_features = raw.get("finalized_features")
        image.features_epoch = raw.get("features_epoch", 0)
        for name, t in raw["topics"].items():
            image.topics[name] = TopicState(name, t["topic_id"],
                                            [PartitionState.from_json(p) for p in t["partitions"]],
                                            t.get("configs", {}))
        image.acls = {acl_id: StandardAcl.from_json(a) for acl_id, a in raw.get("acls", {}).items()}

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
        image = self.image
        return {"cluster_id": image.cluster_id, "controller_epoch": image.controller_epoch,
                "metadata_offset": image.applied_offset, "next_producer_id_block": self.next_producer_id_block,
                "finalized_features": image.finalized_features, "features_epoch": image.features_epoch}

    def _entries(self, name: str, keys) -> dict:
        current, encode = getattr(self.image, name), self._ENCODERS[name]
        return {k: encode(current[k]) if k in current else None for k in keys}

    def _save(self, **changed) -> None:
        """Log one change: the scalar values and the named map entries (``topics=[name]``;
        an entry no longer present is logged as deleted)."""
        self.image.applied_offset += 1
        self._log.append({"offset": self.metadata_offset, "values": self._values(),
                          "entries": {name: self._entries(name, keys) for name, keys in changed.items()}})
        if self._log.wants_snapshot:
            self._log.write_snapshot(self._image())

    def _snapshot(self) -> None:
        """A change to most of the image (start-up's election): written as a new snapshot."""
        self.image.applied_offset += 1
        self._log.write_snapshot(self._image())

    def _image(self) -> dict:
        return {**self._values(), **{name: self._entries(name, getattr(self.image, name)) for name in self._ENCODERS}}

    # --- topics ---------------------------------------------------------------------------

    def create_topic(self, name: str, num_partitions: int, configs: dict[str, str]) -> TopicState:
        return self.create_topics([(name, num_partitions, configs)])[0]

    def create_topics(self, topics: list[tuple[str, int, dict[str, str]]]) -> list[TopicState]:
        """Several topics in one change (one CreateTopics request)."""
        created = [TopicState(name, str(uuid.uuid4()), [self._new_partition() for _ in range(n)], dict(configs))
                   for name, n, configs in topics]
        if created:
            self.image.topics.update((t.name, t) for t in created)
            self._save(topics=[t.name for t in created])
        return created

    def _new_partition(self) -> PartitionState:
        return PartitionState(self.node_id, 0, [self.node_id], [self.node_id])

    def delete_topic(self, name: str) -> TopicState:
        return self.delete_topics([name])[0]

    def delete_topics(self, names: list[str]) -> list[TopicState]:
        """Several topics in one change (one DeleteTopics request)."""
        deleted = [self.image.topics.pop(name) for name in names]
        if deleted:
            self._save(topics=names)
        return deleted

    def add_partitions(self, name: str, total: int) -> None:
        topic = self.image.topics[name]
        topic.partitions.extend(self._new_partition() for _ in range(total - len(topic.partitions)))
        self._save(topics=[name])

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        self.image.topics[name].configs = dict(configs)
        self._save(topics=[name])

    # --- groups ----------------------------------------------------------------------------

    def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        """Replace a group's config overrides (none left: the group's entry goes)."""
        if configs:
            self.image.group_configs[group_id] = dict(configs)
        else:
            self.image.group_configs.pop(group_id, None)
        self._save(group_configs=[group_id])

    def alter_scram_credentials(self, changes: dict[str, dict[str, dict]]) -> None:
        """Replace each named user's credentials at once (an empty set removes the user)."""
        for user, credentials in changes.items():
            if credentials:
                self.image.scram_credentials[user] = credentials
            else:
                self.image.scram_credentials.pop(user, None)
        self._save(scram_credentials=list(changes))

    def alter_client_quotas(self, changes: dict[str, dict[str, float]]) -> None:
        """Replace each named entity's quotas at once (an empty map removes the entity)."""
        for entity, quotas in changes.items():
            if quotas:
                self.image.client_quotas[entity] = dict(quotas)
            else:
                self.image.client_quotas.pop(entity, None)
        self._save(client_quotas=list(changes))

    def update_features(self, levels: dict[str, int], expected_epoch: int) -> bool:
        """Finalize ``levels`` if the levels are still those of ``expected_epoch``; the new
        epoch is this change's metadata offset."""
        if expected_epoch != self.image.features_epoch:
            return False
        self.image.finalized_features, self.image.features_epoch = dict(levels), self.image.applied_offset + 1
        self._save()
        return True

    def elect_self_leader_everywhere(self) -> None:
        """At start-up this broker (re)takes leadership: every leader epoch is bumped."""
        self.image.controller_epoch += 1
        for topic in self.image.topics.values():
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
            t = self.image.topics.get(topic)
            if t is not None and 0 <= index < len(t.partitions):
                t.partitions[index] = state
                written.add((topic, index))
        if written:
            self._save(topics={topic for topic, _ in written})
            self.image.notify(written, set())
        return written

    # --- ACLs ------------------------------------------------------------------------------------

    async def create_acls(self, acls: list[StandardAcl]) -> None:
        """Add the ACLs not already present (an existing one is a success, as in Kafka)."""
        new = {acl.acl_id: acl for acl in acls if acl.acl_id not in self.image.acls}
        if new:
            self.image.acls = {**self.image.acls, **new}
            self._save(acls=list(new))
            self.image.notify_acls()

    async def delete_acls(self, acl_ids: set[str]) -> None:
        if acl_ids & self.image.acls.keys():
            self.image.acls = {k: v for k, v in self.image.acls.items() if k not in acl_ids}
            self._save(acls=list(acl_ids))
            self.image.notify_acls()

    # --- producer ids ------------------------------------------------------------------------

    def allocate_producer_id_block(self) -> tuple[int, int]:
        """A fresh block [start, start + size), persisted before it is handed out."""
        start = self.next_producer_id_block
        self.next_producer_id_block = start + PRODUCER_ID_BLOCK_SIZE
        self._save()
        return start, PRODUCER_ID_BLOCK_SIZE
