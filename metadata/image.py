"""The metadata image: what a broker knows of the cluster, read synchronously by every handler.

Owns :class:`MetadataCache`: topics, partition leaders and ISRs, the brokers registered and
unfenced, the controller id, group config overrides, SCRAM credentials, client quotas, the ACLs
and the finalized feature levels, and the listeners told of each change.

Brokers as KRaft keeps them: a registration outlives its broker's session. A registered broker
whose session lapsed is *fenced*: it leads nothing, leaves every ISR and is not listed in
Metadata, but it still counts for replica placement (never as a partition's first replica)
and for replication factors, so a cluster with one broker down still creates topics at the
full factor. Only UnregisterBroker removes a registration. A backend (the embedded file store
or the etcd store) feeds the image; the broker applies the partitions that changed
(``listeners``) as Kafka's ``ReplicaManager.applyDelta`` does.

Differs from Kafka: no metadata log and no offset into it; the etcd backend's image carries the
etcd revision it has applied instead (``applied_offset``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from security.acls import StandardAcl

from .records import NO_LEADER, BrokerRegistration, PartitionState, TopicState

__all__ = ["MetadataCache", "Listener"]


Listener = Callable[[set[tuple[str, int]], set[str]], None]


class MetadataCache:
    """What this broker knows of the cluster; read synchronously, changed only by a backend."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.cluster_id = ""
        self.topics: dict[str, TopicState] = {}
        # Every registered broker, fenced or not; ``brokers``: the unfenced ones (a live session).
        self.registered: dict[int, BrokerRegistration] = {}
        self.brokers: dict[int, BrokerRegistration] = {}
        self.controller_id = NO_LEADER
        self.controller_epoch = 0
        # Whether a store shared with other brokers feeds this image (etcd), and the position
        # of the image in the metadata history (DescribeQuorum's high watermark).
        self.clustered = False
        self.applied_offset = 0
        # node id -> the epoch of its current session (KIP-903), where a store keeps sessions.
        self.broker_epochs: dict[int, int] = {}
        self.freshness: Callable[[], bool] = lambda: True  # see is_current
        self.inter_broker_listener: str | None = None  # the listener peers are reached on
        self.listeners: list[Listener] = []
        self.broker_listeners: list[Callable[[], None]] = []  # registrations or controller changed
        self.config_listeners: list[Callable[[str], None]] = []  # a topic's configs changed
        # Group config overrides by group id (GROUP config resources; coordinator/group/group_config.py).
        self.group_configs: dict[str, dict[str, str]] = {}
        # SCRAM credentials by user and mechanism name (security/scram.py).
        self.scram_credentials: dict[str, dict[str, dict]] = {}
        # Client quotas by entity key and quota key (metadata/controller/client_quotas.py).
        self.client_quotas: dict[str, dict[str, float]] = {}
        self.acls: dict[str, StandardAcl] = {}  # by ACL id
        # Finalized feature levels as last changed (None: never changed, the defaults apply;
        # metadata/controller/features.py) and the epoch of that change.
        self.finalized_features: dict[str, int] | None = None
        self.features_epoch = 0
        self.acl_listeners: list[Callable[[], None]] = []  # the ACLs changed
        # Topic id -> topic, filled on lookup (Produce v13 and Fetch v13+ resolve ids per request);
        # an entry counts only while ``topics`` still holds that very TopicState.
        self._by_id: dict[uuid.UUID, TopicState] = {}

    def is_current(self) -> bool:
        """Whether this image may be trusted to say which partitions this broker leads: a
        backend shared with other brokers answers False for a while after this process
        stalled (a pause, a stop) long enough for leadership to have moved without it."""
        return self.freshness()

    def topic_by_id(self, topic_id: uuid.UUID | None) -> TopicState | None:
        topic = self._by_id.get(topic_id)
        if topic is not None and self.topics.get(topic.name) is topic:
            return topic
        for topic in self.topics.values():
            if topic.uuid == topic_id:
                self._by_id[topic_id] = topic
                return topic
        return None

    def partition(self, topic: str, index: int) -> PartitionState | None:
        t = self.topics.get(topic)
        if t is None or not 0 <= index < len(t.partitions):
            return None
        return t.partitions[index]

    def live_broker_ids(self) -> list[int]:
        return sorted(self.brokers)

    def broker_epoch(self, node_id: int) -> int:
        """The broker epoch of ``node_id``'s current life (KIP-903: the etcd backend's is the
        create_revision of the broker's session key, new with every life); -1 where there is
        none to tell (no session, or a single node, which has no followers)."""
        return self.broker_epochs.get(node_id, -1)

    def controller_for_clients(self, answering: int) -> int:
        """The controller id Metadata and DescribeCluster give: the answering broker while it
        is unfenced (every broker serves admin requests itself, and the client has just reached
        this one), else the controller while it is unfenced, else the answering broker. KRaft
        brokers name a random unfenced broker (getRandomAliveBrokerId), which until a killed
        broker's session lapses may be the dead one: librdkafka's admin client, told so, waits
        on it until its request times out. The controller itself is DescribeQuorum's leader."""
        if answering in self.brokers:
            return answering
        controller = self.controller_id
        return controller if controller in self.brokers else answering

    def fenced_broker_ids(self) -> list[int]:
        return sorted(n for n in self.registered if n not in self.brokers)

    def active_broker_ids(self) -> set[int]:
        """Unfenced and not shutting down: the brokers that may lead a partition."""
        return {n for n, b in self.brokers.items() if not b.controlled_shutdown}

    def placement_racks(self) -> dict[int, str | None]:
        """Every registered broker's rack: where replicas may go (KRaft's usable brokers)."""
        return {n: b.rack for n, b in self.registered.items()}

    def endpoint(self, node_id: int, listener: str | None = None) -> tuple[str, int] | None:
        """A broker's endpoint on ``listener`` (default: the inter-broker listener)."""
        b = self.brokers.get(node_id)
        return None if b is None else b.endpoint_on(listener or self.inter_broker_listener)

    def brokers_on(self, listener: str | None, include_fenced: bool = False) -> list[tuple[int, str, int, str | None]]:
        """(node id, host, port, rack) of the unfenced (or all registered) brokers on
        ``listener``, by node id; a broker without that listener is left out, as Kafka does."""
        out = []
        for node_id, b in sorted((self.registered if include_fenced else self.brokers).items()):
            endpoint = b.endpoint_on(listener or self.inter_broker_listener)
            if endpoint is not None:
                out.append((node_id, *endpoint, b.rack))
        return out

    def notify_configs(self, before: dict[str, TopicState], after: dict[str, TopicState]) -> None:
        """Tell the config listeners each topic whose configs differ between two images (a
        config change touches no partition record, so ``notify`` does not carry it)."""
        for name, topic in after.items():
            old = before.get(name)
            if old is not None and old.configs != topic.configs:
                for listener in self.config_listeners:
                    listener(name)

    def notify_acls(self) -> None:
        for listener in self.acl_listeners:
            listener()

    def notify(self, partitions: set[tuple[str, int]], deleted_topics: set[str]) -> None:
        """Tell the listeners which partitions changed (and which topics are gone)."""
        if partitions or deleted_topics:
            for listener in self.listeners:
                listener(partitions, deleted_topics)
