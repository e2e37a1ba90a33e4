"""The control managers a broker writes cluster metadata through, and the two smallest of them.

Owns :class:`ControlManagers`, the set a broker builds once over its metadata image and store
(request handlers reach it as ``services.control``), and the managers too small for a module:
:class:`ConfigurationControlManager` (GROUP config overrides; a topic's are
:mod:`.replication`'s) and :class:`ClusterControlManager` (UnregisterBroker).

Differs from Kafka: every broker applies these itself, writing to the shared store, where a
Kafka broker forwards the request to the active controller.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..image import MetadataCache
from . import settled
from .acls import AclControlManager
from .client_quotas import ClientQuotaControlManager
from .features import FeatureControlManager
from .replication import ReplicaHost, ReplicationControlManager
from .scram import ScramControlManager

__all__ = ["ControlManagers", "ConfigurationControlManager", "ClusterControlManager"]


class ConfigurationControlManager:
    def __init__(self, image: MetadataCache, store) -> None:
        self.image = image
        self.store = store

    async def set_group_configs(self, group_id: str, configs: dict[str, str]) -> bool:
        """Replace a group's overrides (none: the group's entry goes); False if unchanged."""
        if configs == self.image.group_configs.get(group_id, {}):
            return False
        await settled(self.store.set_group_configs(group_id, configs))
        return True

    async def catch_up_group_config(self, group_id: str) -> None:
        """Until the image has the group's config as the store has it now."""
        await self.store.catch_up_group_config(group_id)


class ClusterControlManager:
    def __init__(self, store) -> None:
        self.store = store

    async def unregister_broker(self, node_id: int) -> None:
        await self.store.unregister_broker(node_id)


@dataclass
class ControlManagers:
    replication: ReplicationControlManager
    features: FeatureControlManager
    quotas: ClientQuotaControlManager
    acls: AclControlManager
    scram: ScramControlManager
    configs: ConfigurationControlManager
    cluster: ClusterControlManager

    @classmethod
    def build(cls, image: MetadataCache, store, replicas: ReplicaHost) -> ControlManagers:
        return cls(ReplicationControlManager(image, store, replicas), FeatureControlManager(image, store),
                   ClientQuotaControlManager(image, store), AclControlManager(store),
                   ScramControlManager(image, store), ConfigurationControlManager(image, store),
                   ClusterControlManager(store))
