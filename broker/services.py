"""What request handlers may use of the broker: a narrow, typed view of the process.

Handlers (``broker/handlers``) and the admin helpers receive a :class:`BrokerServices`, not the
broker with its lifecycle (start-up, shutdown, background tasks, connections): the metadata
cache, the replica manager, the coordinators and the few identity and config values answers
need. :class:`broker.broker.Broker` provides it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from coordinator.group.coordinator import GroupCoordinator
    from coordinator.share.admin import ShareGroupOffsets
    from coordinator.share.manager import SharePartitionManager
    from coordinator.share.membership import ShareGroupCoordinator
    from coordinator.share.persister import ShareCoordinator
    from coordinator.transaction.coordinator import TransactionCoordinator
    from metadata.controller.managers import ControlManagers
    from metadata.controller.producer_ids import ProducerIdManager
    from metadata.image import MetadataCache
    from security.authorizer import StandardAuthorizer

    from .config import BrokerConfig
    from .fetch_session import FetchSessionCache
    from .metrics import Metrics
    from .quotas import QuotaManager
    from .replica_manager import ReplicaManager


class PartitionVerifier(Protocol):
    """KIP-890's check (or, with ``add``, its part 2 implicit add), asked by a partition leader
    before it appends transactional data."""

    async def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                partitions: list[tuple[str, int]], *, add: bool = False) -> dict[tuple[str, int], int]:
        """0 for each partition in (or added to) the producer's ongoing transaction, else an error code."""
        ...


class BrokerServices(Protocol):
    node_id: int
    host: str  # this broker's inter-broker endpoint, as advertised
    port: int
    clustered: bool
    config: BrokerConfig
    metrics: Metrics
    metadata: MetadataCache  # the image: read synchronously
    control: ControlManagers  # metadata changes: topics, configs, ACLs, SCRAM, quotas, features
    replica_manager: ReplicaManager
    producer_ids: ProducerIdManager
    group_coordinator: GroupCoordinator
    share_group_coordinator: ShareGroupCoordinator
    txn_coordinator: TransactionCoordinator
    share_coordinator: ShareCoordinator
    share_manager: SharePartitionManager
    share_offsets: ShareGroupOffsets
    txn_services: PartitionVerifier
    dynamic_broker_configs: Any
    authorizer: StandardAuthorizer | None  # None: no authorizer.class.name, everything allowed
    quotas: dict[str, QuotaManager]  # producer_byte_rate / consumer_byte_rate / controller_mutation_rate
    fetch_sessions: FetchSessionCache  # KIP-227

    @property
    def cluster_id(self) -> str: ...

    def endpoint(self, node_id: int, listener: str | None = None) -> tuple[str, int] | None:
        """Where a broker is reached on ``listener`` (default: the inter-broker listener)."""
        ...
