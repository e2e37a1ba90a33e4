"""The etcd backend of cluster metadata: a broker's session, image, writes and election, together.

Owns the lifecycle of one broker's use of the metadata store and nothing else: it wires the
store client (:mod:`.client`, every member of ``metadata.etcd.endpoints``), the session
(:mod:`.session`), the image's loader (:mod:`.loader`, which feeds the broker's
:class:`~metadata.image.MetadataCache`), the writes (:mod:`.writer`) and the controller election
(:mod:`.election`), starts them in order and stops them. The key space is :mod:`.keys`'.

Differs from Kafka: the brokers read etcd directly instead of replicating a KRaft metadata log,
and a partition leader writes its own ISR changes (compare-and-swap on the partition key)
instead of sending AlterPartition to the controller.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

import structlog

from protocol.errors import ErrorCode, KafkaError

from ..controller.features import NEW_CLUSTER_LEVELS
from ..image import MetadataCache
from ..records import BrokerRegistration, TopicState, new_cluster_id
from .client import ETCD_ERRORS, EtcdSecurity, FailoverEtcdClient, StoreUnavailable, WriteOutcomeUnknown
from .election import ControllerElection
from .keys import KeySpace, dumps
from .loader import MetadataLoader
from .session import BrokerSession, RegistrationConflict
from .writer import MetadataWriter

__all__ = ["EtcdMetadataStore", "RegistrationConflict", "STORE_ERRORS"]

log = structlog.get_logger("metadata.etcd")

STORE_ERRORS = (*ETCD_ERRORS, StoreUnavailable, WriteOutcomeUnknown)
CONNECT_ATTEMPT_S = 30.0  # at start-up etcd may still be electing its leader: keep trying this long


class EtcdMetadataStore:
    clustered = True

    def __init__(self, image: MetadataCache, endpoints: str, prefix: str = "/kbroker",
                 session_timeout_ms: int = 9000, on_connectivity: Callable[[bool], None] | None = None,
                 security: EtcdSecurity | None = None, controller_timeout_ms: int = 2000,
                 endpoint_sync_ms: int = 30000) -> None:
        self.image = image
        self.node_id = image.node_id
        image.clustered = True
        # Brokers start at different members, so that one member's loss moves a third of them.
        self.client = FailoverEtcdClient(endpoints, security, first=max(image.node_id - 1, 0))
        self.keys = KeySpace(prefix)
        ttl = max(1, round(session_timeout_ms / 1000))
        self.session = BrokerSession(self.client, self.keys, self.node_id, ttl, on_connectivity)
        self.loader = MetadataLoader(self.client, self.keys, image,
                                     stall_threshold_s=max(0.5, session_timeout_ms / 2000),
                                     own_registration_removed=lambda: self._spawn(self.session.reregister()))
        image.freshness = self.loader.is_current
        self.writer = MetadataWriter(self.client, self.keys, self.node_id, self.loader.wait_applied,
                                     image.active_broker_ids)
        # etcd grants whole seconds, and at least its own minimum (1.5 s with its defaults).
        self.election = ControllerElection(self.client, self.keys, self.node_id,
                                           max(2, math.ceil(controller_timeout_ms / 1000)))
        self.endpoint_sync_s = endpoint_sync_ms / 1000
        self._tasks: list[asyncio.Task] = []

    # --- lifecycle ------------------------------------------------------------------------------------

    async def start(self, registration: BrokerRegistration, wait_s: float | None = None,
                    predecessor: str = "") -> None:
        """Connect, settle the cluster id, register this broker and load the image.
        ``predecessor``: the incarnation id of this broker's previous life, if it is known to
        have ended (its process gone) though its session may not have expired yet."""
        deadline = time.monotonic() + CONNECT_ATTEMPT_S
        while True:
            try:
                await self._ensure_cluster_id()
                break
            except STORE_ERRORS as exc:
                if time.monotonic() >= deadline:
                    raise
                log.info("waiting_for_etcd", members=self.client.describe(), error=repr(exc)[:200])
                await asyncio.sleep(0.5)
        ttl = self.session.ttl
        await self.session.register(registration, ttl * 2 + 2 if wait_s is None else wait_s, predecessor)
        await self.loader.reload()
        for loop_fn in (self.session.keepalive_loop, self.loader.watch_loop, self.loader.stall_watch_loop):
            self._spawn(loop_fn())
        if self.endpoint_sync_s > 0:
            self._spawn(self._endpoint_sync_loop())

    async def _endpoint_sync_loop(self) -> None:
        """The member list read again now and then: members added to the cluster are used."""
        while True:
            await asyncio.sleep(self.endpoint_sync_s)
            try:
                await self.client.sync_endpoints()
            except STORE_ERRORS as exc:
                log.debug("etcd_endpoint_sync_failed", error=repr(exc)[:200])

    async def _ensure_cluster_id(self) -> None:
        key = self.keys.key("cluster_id")
        t = self.client.transactions
        # Whoever creates the cluster also stores its feature levels (a new cluster's). A lost
        # answer needs no resolving: the read below tells which id won.
        try:
            await self.client.transaction([t.version(key) == 0],
                                          [t.put(key, new_cluster_id().encode()),
                                           t.put(self.keys.key("features"), dumps(NEW_CLUSTER_LEVELS))])
        except WriteOutcomeUnknown:
            pass
        got = await self.client.get(key)
        if got is None:
            raise StoreUnavailable("the cluster id was not stored; retrying")
        self.image.cluster_id = got.value.decode()

    async def stop(self, deregister: bool = True) -> None:
        self.loader.stop()
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=2)
        if deregister:
            await self.election.resign()
            await self.session.end()
        await self.client.close()

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.append(task)
        task.add_done_callback(lambda t: t in self._tasks and self._tasks.remove(t))

    # --- session ---------------------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self.session.connected

    @property
    def revision(self) -> int:
        return self.loader.revision

    @property
    def registration(self) -> BrokerRegistration | None:
        return self.session.registration

    async def unfence(self) -> None:
        await self.session.unfence()

    async def update_registration(self, **changes) -> None:
        await self.session.update_registration(**changes)

    async def end_session(self) -> None:
        """This broker's session ends now (it is about to halt): it is fenced at once."""
        await self.election.resign()
        await self.session.end()

    async def unregister_broker(self, node_id: int) -> None:
        """UnregisterBroker. A broker that is still up registers again, as a KRaft broker does
        when its heartbeat finds its registration gone."""
        await self.writer.unregister_broker(node_id)

    # --- the image -------------------------------------------------------------------------------------

    async def wait_applied(self, revision: int, timeout: float = 10.0) -> None:
        await self.loader.wait_applied(revision, timeout)

    async def catch_up_group_config(self, group_id: str, timeout: float = 5.0) -> None:
        """Until the image has the group's config as etcd has it now: read-your-writes for a
        GROUP config altered through another broker."""
        await self.loader.catch_up_key(self.keys.key("group_configs", group_id), timeout)

    # --- writes ----------------------------------------------------------------------------------------

    async def create_topic(self, name: str, assignment: list[list[int]], configs: dict[str, str]) -> TopicState:
        await self.writer.create_topic(name, assignment, configs)
        return self.image.topics[name]

    async def delete_topic(self, name: str) -> TopicState:
        topic = self.image.topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"Topic '{name}' does not exist.")
        await self.writer.delete_topic(topic)
        return topic

    async def add_partitions(self, name: str, assignment: list[list[int]]) -> None:
        await self.writer.add_partitions(name, assignment)

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        await self.writer.set_topic_configs(name, configs)

    async def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        await self.writer.set_group_configs(group_id, configs)

    async def alter_scram_credentials(self, changes: dict[str, dict[str, dict]]) -> None:
        await self.writer.alter_scram_credentials(changes)

    async def alter_client_quotas(self, changes: dict[str, dict[str, float]]) -> None:
        await self.writer.alter_client_quotas(changes)

    async def create_acls(self, acls) -> None:
        await self.writer.create_acls(acls)

    async def delete_acls(self, acl_ids: set[str]) -> None:
        await self.writer.delete_acls(acl_ids)

    async def update_features(self, levels: dict[str, int], expected_epoch: int) -> bool:
        return await self.writer.update_features(levels, expected_epoch)

    async def alter_partitions(self, changes, controller_epoch: int | None = None, wait: bool = False,
                               broker_epochs: dict[int, int] | None = None) -> set[tuple[str, int]]:
        return await self.writer.alter_partitions(changes, controller_epoch, wait, broker_epochs)

    async def allocate_producer_id_block(self) -> tuple[int, int]:
        return await self.writer.allocate_producer_id_block()

    # --- the controller role ---------------------------------------------------------------------------

    async def campaign(self) -> int:
        return await self.election.campaign()

    async def resign(self) -> None:
        await self.election.resign()

    def holds_controller(self, epoch: int) -> bool:
        return self.election.holds(epoch)

    async def remove_stale_controller(self, epoch: int) -> None:
        await self.election.remove_stale(epoch)
