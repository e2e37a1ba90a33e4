"""The broker: wires config, storage, coordinators and the network layer together.

Owns start-up (log recovery off the event loop, leader-epoch bump, one server per listener), the background
tasks (retention, checkpoints, time-based flush), and an orderly shutdown that leaves a clean
shutdown marker so the next start skips recovery.
"""

from __future__ import annotations

import asyncio
import functools
import os
import resource
import struct
import sys
import time
import uuid

import structlog

from metadata.controller.controller import Controller
from metadata.controller.managers import ControlManagers
from metadata.controller.producer_ids import ProducerIdManager
from metadata.embedded_store import EmbeddedMetadataStore
from metadata.etcd.client import EtcdSecurity
from metadata.etcd.store import STORE_ERRORS, EtcdMetadataStore, RegistrationConflict
from metadata.image import MetadataCache
from metadata.records import BrokerRegistration
from protocol import codec
from protocol.api import API_VERSIONS_KEY, REGISTRY
from protocol.errors import ErrorCode
from security.authenticator import ListenerSecurity
from security.authorizer import STANDARD_AUTHORIZER, StandardAuthorizer, parse_super_users
from security.oauthbearer import MECHANISM as OAUTHBEARER
from security.principal import SslPrincipalMapper
from security.sasl import (
    PLAIN,
    SaslServerConfig,
    enabled_mechanisms,
    jaas_config,
    max_reauth_ms,
    oauthbearer_validator,
    plain_users,
)
from security.ssl_factory import SslConfigError
from storage.cleaner import LogCleaner
from storage.log_manager import LogManager

from .config import BrokerConfig
from .config_admin import load_dynamic_broker_configs
from .connection_quotas import ConnectionQuotas
from .fetch_session import FetchSessionCache
from .metrics import Metrics, serve_metrics
from .quotas import (
    FETCH,
    MUTATION,
    PRODUCE,
    REQUEST,
    ClientQuotaManager,
    ControllerMutationQuotaManager,
    request_quota_manager,
)
from .replica_fetcher import ReplicaFetcherManager
from .replica_manager import ReplicaManager
from .server import KafkaConnection, TlsListener

log = structlog.get_logger("broker")

SHUTDOWN_STEP_S = 5.0  # the longest one component may take to stop before it is abandoned
HALT_SESSION_END_S = 3.0  # a broker halting on a failed disk ends its session within this, or lets it lapse

METADATA_FILE = "__cluster_metadata.json"
SSL_RELOAD_CHECK_MS = 2000  # how often a TLS listener's store files are looked at
TLS_HANDSHAKE_TIMEOUT_S = 10.0  # a client that stops half-way through a handshake is dropped


class Broker:
    """The process; request handlers see it only as :class:`broker.services.BrokerServices`."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        self.incarnation_id = uuid.uuid4().hex
        self.inter_broker_listener = config.inter_broker_listener_name
        # Advertised endpoint per listener name; a port 0 is filled in once bound (single node).
        self.advertised = {s.name: (s.host, s.port) for s in config.advertised_listeners()}
        self.host, self.port = self.advertised[self.inter_broker_listener]
        self.metrics = Metrics()
        self.connections: set[KafkaConnection] = set()
        self.connection_quotas = ConnectionQuotas(config, self.inter_broker_listener, len(config.listeners()),
                                                  lambda: self.metadata.client_quotas)
        self.clustered = bool(config["metadata.etcd.endpoints"])
        self.log_manager = LogManager(config.log_dir, replicated=self.clustered, owner=self.incarnation_id)
        self.log_manager.failure.listeners.append(self._log_dir_failed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._halting = False
        # The image every handler reads, and the store that feeds it and takes the writes.
        self.metadata = MetadataCache(self.node_id)
        self.metadata.inter_broker_listener = self.inter_broker_listener
        if self.clustered:
            self.metadata_store = EtcdMetadataStore(
                self.metadata, config["metadata.etcd.endpoints"], config["metadata.etcd.prefix"],
                config["broker.session.timeout.ms"], on_connectivity=self.metrics.set_store_connected,
                security=EtcdSecurity.from_config(config),
                controller_timeout_ms=config["controller.quorum.fetch.timeout.ms"],
                endpoint_sync_ms=config["metadata.etcd.endpoint.sync.interval.ms"])
        else:
            self.metadata_store = EmbeddedMetadataStore(os.path.join(config.log_dir, METADATA_FILE), self.node_id,
                                                        self.metadata)
            self.metadata_store.register_self(self._registration())
        self.replica_manager = ReplicaManager(config, self.metadata, self.metadata_store, self.log_manager,
                                              self.metrics, self.node_id)
        self.control = ControlManagers.build(self.metadata, self.metadata_store, self.replica_manager)
        self.controller: Controller | None = None
        self.authorizer = _authorizer(config)
        def stored_quotas():  # read at each request: AlterClientQuotas applies at once
            return self.metadata.client_quotas

        self.quotas = {PRODUCE: ClientQuotaManager(PRODUCE, stored_quotas), FETCH: ClientQuotaManager(FETCH, stored_quotas),
                       REQUEST: request_quota_manager(stored_quotas),
                       MUTATION: ControllerMutationQuotaManager(stored_quotas)}
        self.metrics.watch_quotas(self.quotas)
        self.fetch_sessions = FetchSessionCache(config["max.incremental.fetch.session.cache.slots"])
        self.metrics.fetch_sessions.set_function(lambda: len(self.fetch_sessions))
        for kind, privileged in (("follower", True), ("consumer", False)):
            self.metrics.fetch_sessions_by_kind.labels(kind).set_function(
                lambda privileged=privileged: self.fetch_sessions.count(privileged))
        self.metrics.fetch_session_partitions.set_function(lambda: self.fetch_sessions.cached_partitions)
        self.metrics.fetch_session_evictions.set_function(lambda: self.fetch_sessions.evictions)
        self.producer_ids = ProducerIdManager(self.metadata_store)
        self.group_coordinator = None
        self.share_group_coordinator = None
        self.txn_coordinator = None
        self.share_coordinator = None
        self.share_manager = None
        self.share_offsets = None
        self.share_remote = None
        self.dynamic_broker_configs = None  # config_admin.DynamicBrokerConfigs, made on first use
        self.servers: dict[str, asyncio.AbstractServer | TlsListener] = {}  # by listener name
        self.metrics_server: asyncio.AbstractServer | None = None
        self.tasks: list[asyncio.Task] = []
        self.cleaner: LogCleaner | None = None
        self.started_at = time.time()

    @property
    def cluster_id(self) -> str:
        return self.metadata.cluster_id

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        raise_open_file_limit()
        self._write_meta_properties()
        started = time.monotonic()
        log.info("log_recovery_started", log_dir=self.config.log_dir,
                 clean_shutdown=self.log_manager.had_clean_shutdown, new=self.log_manager.is_new,
                 partitions=len(self.log_manager.existing_partitions()))
        if self.clustered:
            await self._join_cluster(self._registration())
        else:
            self.metadata_store.elect_self_leader_everywhere()
        load_dynamic_broker_configs(self)  # dynamic broker configs apply before partitions open
        await asyncio.to_thread(self.replica_manager.open_assigned)
        # From here every change is applied as it comes; then everything the image has now.
        self.metadata.listeners.append(self._on_metadata_change)
        self.metadata.config_listeners.append(self._on_topic_configs_change)
        if self.authorizer is not None:
            self.metadata.acl_listeners.append(self._on_acls_change)
            self._on_acls_change()
        self.replica_manager.apply_delta({(t.name, i) for t in self.metadata.topics.values()
                                          for i in range(len(t.partitions))}, set())
        self.log_manager.mark_unclean()
        log.info("log_recovery_finished", partitions=len(self.replica_manager.partitions),
                 seconds=round(time.monotonic() - started, 3))
        if self.clustered:  # ready to lead: registered until now, but fenced (as KRaft's)
            await self.metadata_store.unfence()
        await self.producer_ids.start()
        from coordinator.group.coordinator import GroupCoordinator

        from .coordinator_services import BrokerCoordinatorServices
        self.group_coordinator = GroupCoordinator(BrokerCoordinatorServices(self))
        self.share_group_coordinator = self._share_group_coordinator(self.group_coordinator)
        await self.group_coordinator.start()
        from coordinator.transaction.coordinator import TransactionCoordinator

        from .txn_services import BrokerTxnServices
        self.txn_services = BrokerTxnServices(self)
        self.txn_coordinator = TransactionCoordinator(self.txn_services)
        await self.txn_coordinator.start()
        self._start_share_groups()
        self.replica_manager.on_leader.append(self._coordinators_elected)
        self.replica_manager.on_follower.append(self._coordinators_resigned)
        if self.clustered:
            self.controller = Controller(self.metadata, self.metadata_store, self.config)
            self.metadata.broker_listeners.append(self.controller.wake)
            self.controller.start()
        await self._bind_listeners()
        loop = asyncio.get_running_loop()
        ml = self.config["metrics.listener"]
        if ml:
            mhost, _, mport = ml.rpartition(":")
            try:
                self.metrics_server = await serve_metrics(self.metrics, mhost or "127.0.0.1", int(mport))
            except OSError as exc:
                log.warning("metrics_listener_unavailable", listener=ml, error=str(exc))
        self.tasks.append(loop.create_task(self._periodic(self._retention_pass,
                                                          self.config["log.retention.check.interval.ms"])))
        self.tasks.append(loop.create_task(self._periodic(self._producer_expiration_pass,
                                                          self.config["producer.id.expiration.check.interval.ms"])))
        self.tasks.append(loop.create_task(self._periodic(self._checkpoint_pass,
                                                          self.config["log.flush.offset.checkpoint.interval.ms"])))
        self.tasks.append(loop.create_task(self._periodic(self._flush_pass, 1000)))
        self._watch_gauges()
        self.store_watchers = {name: self.config.ssl_store_watcher(name) for name in self.servers
                               if self.config.security_protocol(name) in ("SSL", "SASL_SSL")}
        if self.store_watchers:
            self.tasks.append(loop.create_task(self._periodic(self._ssl_reload_pass, SSL_RELOAD_CHECK_MS)))
        if self.clustered:
            self.tasks.append(loop.create_task(self._periodic(self._isr_pass,
                                                              self.config["replica.lag.time.max.ms"] // 2)))
        if self.config["log.cleaner.enable"]:
            self.cleaner = LogCleaner()
            self.tasks.append(loop.create_task(self._periodic(self._cleaner_pass,
                                                              self.config["log.cleaner.backoff.ms"])))
        log.info("broker_started", node_id=self.node_id,
                 listeners={n: _sockname(s) for n, s in self.servers.items()},
                 advertised={n: f"{h}:{p}" for n, (h, p) in self.advertised.items()},
                 inter_broker_listener=self.inter_broker_listener, cluster_id=self.cluster_id,
                 log_dir=self.config.log_dir)

    async def _bind_listeners(self) -> None:
        """One server per listener; each connection knows the listener it came in on. An
        advertised port 0 becomes the port bound (single node: registered again)."""
        loop = asyncio.get_running_loop()
        for spec in self.config.listeners():
            security = self._listener_security(spec.name)
            factory = functools.partial(KafkaConnection, self, spec.name, security)
            if security.uses_tls:  # accepted here, so that a failed handshake is counted
                server = TlsListener.bind(spec.host, spec.port, spec.name,
                                          self.metrics.failed_authentication.labels(spec.name))
                server.serve(factory, lambda sec=security: sec.ssl_context, TLS_HANDSHAKE_TIMEOUT_S)
                self.servers[spec.name] = server
            else:
                self.servers[spec.name] = await loop.create_server(
                    factory, spec.host or None, spec.port, reuse_address=True, backlog=1024)
            host, port = self.advertised[spec.name]
            if port == 0:
                self.advertised[spec.name] = (host, self.servers[spec.name].sockets[0].getsockname()[1])
        self.host, self.port = self.advertised[self.inter_broker_listener]
        if not self.clustered:
            self.metadata_store.register_self(self._registration())

    def _listener_security(self, listener: str) -> ListenerSecurity:
        protocol = self.config.security_protocol(listener)
        tls = protocol in ("SSL", "SASL_SSL")
        return ListenerSecurity(
            protocol, self.config.server_ssl_context(listener) if tls else None,
            SslPrincipalMapper(self.config.ssl_principal_mapping_rules(listener)) if tls else SslPrincipalMapper(),
            self._sasl_config(listener) if protocol.startswith("SASL_") else None)

    def _sasl_config(self, listener: str) -> SaslServerConfig:
        given = self.config.security_values
        mechanisms = enabled_mechanisms(given, listener)
        return SaslServerConfig(
            mechanisms=mechanisms,
            plain_users=plain_users(jaas_config(given, listener, PLAIN)),
            # Read at each login: credentials altered later apply to the next (re-)authentication.
            scram_credentials=lambda user, mechanism: self.metadata.scram_credentials.get(user, {}).get(mechanism),
            max_reauth_ms={m: max_reauth_ms(given, listener, m) for m in mechanisms},
            oauthbearer=oauthbearer_validator(given, listener) if OAUTHBEARER in mechanisms else None)

    def endpoint(self, node_id: int, listener: str | None = None) -> tuple[str, int] | None:
        """Where a broker (this one or a peer) is reached on ``listener`` (default: inter-broker)."""
        if node_id == self.node_id:
            return self.advertised.get(listener or self.inter_broker_listener)
        return self.metadata.endpoint(node_id, listener)

    def _share_group_coordinator(self, group_coordinator):
        """Share groups (KIP-932) live beside the classic groups, in the same partitions."""
        from coordinator.share.membership import ShareGroupCoordinator

        from .coordinator_services import BrokerCoordinatorServices
        share = ShareGroupCoordinator(group_coordinator, BrokerCoordinatorServices(self))
        group_coordinator.other_group_types.append(share)
        return share

    def _registration(self) -> BrokerRegistration:
        return BrokerRegistration(self.node_id, self.host, self.port, self.config["broker.rack"],
                                  self.incarnation_id, endpoints=dict(self.advertised))

    async def _join_cluster(self, registration: BrokerRegistration) -> None:
        """Register under a lease and load the current image; replication starts with it."""
        if any(port == 0 for _, port in self.advertised.values()):
            raise SystemExit("a clustered broker needs a fixed port in listeners/advertised.listeners")
        store = self.metadata_store
        try:
            store.client.security.check()
        except (ValueError, OSError) as exc:
            raise SystemExit(f"etcd security settings: {exc}") from None
        try:
            await store.start(registration, predecessor=self.log_manager.previous_owner)
        except RegistrationConflict as exc:
            raise SystemExit(str(exc)) from None
        except (OSError, *STORE_ERRORS) as exc:
            raise SystemExit(f"cannot reach etcd at {self.config['metadata.etcd.endpoints']}: {exc!r}") from None
        self.metrics.set_store_connected(True)
        self.metrics.store_member_switched(None, store.client.address)
        store.client.on_switch = self.metrics.store_member_switched
        await self.control.replication.fence_previous_life(self.node_id)
        self.replica_manager.fetchers = ReplicaFetcherManager(
            self.node_id, self.metadata.endpoint, self.config, self._replica_fetched,
            broker_epoch=lambda: self.metadata.broker_epoch(self.node_id))
        log.info("cluster_joined", node_id=self.node_id, cluster_id=self.metadata.cluster_id,
                 brokers=self.metadata.live_broker_ids(), controller=self.metadata.controller_id,
                 revision=self.metadata.applied_offset, etcd_member=store.client.address)

    def _log_dir_failed(self, log_dir: str, reason: str) -> None:
        """A storage error took the log directory offline (from whichever thread hit it). With
        no directory left, the broker halts as Kafka's does: its session ends first, so the
        controller moves its leaderships now rather than a session timeout later."""
        if self._loop is None or self._halting:
            return
        self._halting = True
        self._loop.call_soon_threadsafe(lambda: self._loop.create_task(self._halt(log_dir, reason)))

    async def _halt(self, log_dir: str, reason: str) -> None:
        log.critical("broker_halting", node_id=self.node_id, log_dir=log_dir, reason=reason,
                     note="every log directory is offline; the broker's session ends and it exits")
        for server in self.servers.values():
            server.close()
        if self.clustered:
            try:
                await asyncio.wait_for(self.metadata_store.end_session(), HALT_SESSION_END_S)
            except Exception as exc:  # the session then times out
                log.warning("session_end_failed", error=repr(exc)[:200])
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(1)  # Kafka's Exit.halt: no clean shutdown, the logs are recovered at the next start

    def _on_metadata_change(self, partitions: set, deleted_topics: set) -> None:
        self.replica_manager.apply_delta(partitions, deleted_topics)
        if self.txn_coordinator is not None:
            self.txn_coordinator.partitions_changed(partitions)
        if self.share_manager is not None:
            for name in deleted_topics:
                self.share_manager.forget_partition(name)
        for name in {t for t, _ in partitions} - deleted_topics:
            topic = self.metadata.topics.get(name)
            if topic is not None:
                self.replica_manager.apply_topic_configs(name, topic.configs)
        if self.controller is not None:
            self.controller.partitions_changed(partitions)

    def _on_topic_configs_change(self, name: str) -> None:
        """Another broker altered a topic's configs: its logs here take them at once."""
        topic = self.metadata.topics.get(name)
        if topic is not None:
            self.replica_manager.apply_topic_configs(name, topic.configs)
        if self.controller is not None:
            self.controller.wake()  # unclean.leader.election.enable may have changed

    def _on_acls_change(self) -> None:
        """The image's ACLs changed (here or on another broker): the authorizer takes them."""
        self.authorizer.reload(self.metadata.acls.values())
        log.info("acls_loaded", acls=len(self.metadata.acls))

    def _replica_fetched(self, part) -> None:
        """A follower appended records: long-polling fetches of this broker may care."""
        part.wake_waiters()

    def _start_share_groups(self) -> None:
        """The share coordinator (``__share_group_state``) and the share-partition manager."""
        from coordinator.share.admin import ShareGroupOffsets
        from coordinator.share.manager import SharePartitionManager
        from coordinator.share.persister import STATE_TOPIC, ShareCoordinator, StatePersister

        from .coordinator_services import BrokerCoordinatorServices, BrokerShareAdminView
        from .share_remote import RemoteShareCoordinatorClient
        services = BrokerCoordinatorServices(self)
        self.share_coordinator = ShareCoordinator(services)
        for p, epoch in services.led_partitions(STATE_TOPIC).items():
            self.share_coordinator.on_become_leader(p, epoch)
        remote = self.share_remote = RemoteShareCoordinatorClient(self) if self.clustered else None
        self.share_manager = SharePartitionManager(services, StatePersister(self.share_coordinator, remote))
        if self.share_group_coordinator is not None:
            self.share_group_coordinator.state = self.share_manager  # DeleteGroups drops the state
        view = BrokerShareAdminView(self)
        self.share_offsets = ShareGroupOffsets(self.share_manager, view, view)

    def _coordinators_elected(self, topic: str, partition: int, leader_epoch: int) -> None:
        if topic == "__share_group_state" and self.share_coordinator is not None:
            self.share_coordinator.on_become_leader(partition, leader_epoch)
        if topic == "__consumer_offsets" and self.group_coordinator is not None:
            self.group_coordinator.on_become_leader(partition, leader_epoch)
        elif topic == "__transaction_state" and self.txn_coordinator is not None:
            self.txn_coordinator.on_election(partition, leader_epoch)

    def _coordinators_resigned(self, topic: str, partition: int, leader_epoch: int) -> None:
        if self.share_manager is not None:
            self.share_manager.forget_partition(topic, partition)
        if topic == "__share_group_state" and self.share_coordinator is not None:
            self.share_coordinator.on_resign(partition, leader_epoch)
        if topic == "__consumer_offsets" and self.group_coordinator is not None:
            self.group_coordinator.on_resign(partition, leader_epoch)
        elif topic == "__transaction_state" and self.txn_coordinator is not None:
            self.txn_coordinator.on_resignation(partition, leader_epoch)

    async def _isr_pass(self) -> None:
        self.replica_manager.shrink_isr_pass()

    async def controlled_shutdown(self) -> None:
        """Ask the controller to move leadership away, then wait (bounded) until it has."""
        if not self.clustered or not self.config["controlled.shutdown.enable"] or not self.metadata_store.connected:
            return
        started = time.monotonic()
        timeout = self.config["controlled.shutdown.timeout.ms"] / 1000
        try:
            await asyncio.wait_for(self.metadata_store.update_registration(controlled_shutdown=True), 5)
        except Exception as exc:
            log.warning("controlled_shutdown_failed", error=repr(exc))
            return
        timed_out = True
        while time.monotonic() - started < timeout:
            # Only partitions with a live, staying ISR peer can move; the rest stop with us.
            staying = {n for n, b in self.metadata.brokers.items()
                       if n != self.node_id and not b.controlled_shutdown}
            if not any(r in staying for p in self.replica_manager.led_partitions() for r in p.isr):
                timed_out = False
                break
            await asyncio.sleep(0.05)
        log.info("controlled_shutdown_finished", seconds=round(time.monotonic() - started, 3),
                 still_leading=len(self.replica_manager.led_partitions()), timed_out=timed_out)

    def _write_meta_properties(self) -> None:
        path = os.path.join(self.config.log_dir, "meta.properties")
        with open(path + ".tmp", "w") as f:
            f.write(f"version=1\ncluster.id={self.metadata.cluster_id}\nnode.id={self.node_id}\n")
        os.replace(path + ".tmp", path)

    async def _periodic(self, fn, interval_ms: int) -> None:
        interval = max(interval_ms, 100) / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await fn()
            except Exception:
                log.exception("background_task_failed", task=fn.__name__)

    async def _ssl_reload_pass(self) -> None:
        """A rotated certificate on disk is served to new connections without a restart."""
        for listener, watcher in self.store_watchers.items():
            try:
                if watcher.check():
                    log.info("ssl_stores_reloaded", listener=listener, files=watcher.paths)
            except SslConfigError as exc:
                log.warning("ssl_store_reload_failed", listener=listener, error=str(exc))

    async def _retention_pass(self) -> None:
        deleted = self.replica_manager.apply_retention()
        if deleted:
            log.info("retention_deleted_segments", segments=deleted)

    async def _producer_expiration_pass(self) -> None:
        expired = self.log_manager.remove_expired_producers()
        if expired:
            log.info("expired_producer_ids_removed", producers=expired)

    async def _checkpoint_pass(self) -> None:
        await asyncio.to_thread(self.log_manager.checkpoint)

    async def _flush_pass(self) -> None:
        await self.replica_manager.flush()

    async def _cleaner_pass(self) -> None:
        """Compact the logs that are due: filtering in a worker thread, the segment swap back on
        this loop, and only if the log still has the segments that were cleaned."""
        await self.cleaner.clean_pass(self.log_manager.logs)

    def _watch_gauges(self) -> None:
        """The replica manager's and controller's gauges, computed when scraped."""
        rm, m = self.replica_manager, self.metrics
        m.leader_count.set_function(lambda: len(rm.led_partitions()))
        m.under_replicated.set_function(lambda: sum(1 for p in rm.led_partitions() if len(p.isr) < len(p.replicas)))
        m.active_controller.set_function(lambda: 1 if self.controller is None or self.controller.is_active else 0)
        m.watch_partitions(lambda: rm.partitions)

    async def stop(self) -> None:
        """Controlled shutdown, then every component in turn, each given at most
        ``SHUTDOWN_STEP_S``: a step waiting on peers that are gone too (a whole cluster stopped
        at once) is abandoned and named in the log, so the broker always gets to close its logs."""
        log.info("broker_stopping")
        await self.controlled_shutdown()
        if self.controller is not None:
            await self._stop_step("controller", self.controller.stop())
        for task in self.tasks:
            task.cancel()
        for server in self.servers.values():
            server.close()
        if self.metrics_server is not None:
            self.metrics_server.close()
        for conn in list(self.connections):
            conn.close()
        if self.txn_coordinator is not None:
            await self._stop_step("transaction_coordinator", self.txn_coordinator.stop())
            self.txn_services.client.close()
        if self.group_coordinator is not None:
            await self._stop_step("group_coordinator", self.group_coordinator.stop())
        if self.share_manager is not None:
            await self._stop_step("share_manager", self.share_manager.stop())
        if self.share_remote is not None:
            self.share_remote.close()
        if self.replica_manager.fetchers is not None:
            await self._stop_step("replica_fetchers", self.replica_manager.fetchers.stop())
        if self.clustered:
            await self._stop_step("metadata_store", self.metadata_store.stop())
        await asyncio.to_thread(self.log_manager.close)
        log.info("broker_stopped")

    async def _stop_step(self, name: str, stopping) -> None:
        started = time.monotonic()
        try:
            await asyncio.wait_for(stopping, SHUTDOWN_STEP_S)
        except TimeoutError:
            log.warning("shutdown_step_abandoned", step=name, seconds=SHUTDOWN_STEP_S)
        except Exception:
            log.exception("shutdown_step_failed", step=name)
        else:
            elapsed = time.monotonic() - started
            if elapsed > 1:
                log.info("shutdown_step_slow", step=name, seconds=round(elapsed, 3))

    def unsupported_api_versions_response(self, correlation_id: int) -> tuple[bytes, bytes]:
        """ApiVersions in the v0 layout with UNSUPPORTED_VERSION and ApiVersions' own range."""
        spec = REGISTRY[API_VERSIONS_KEY]
        body = struct.pack(">hihhh", ErrorCode.unsupported_version, 1, API_VERSIONS_KEY,
                           spec.min_version, spec.max_version)
        return codec.frame_prefix(API_VERSIONS_KEY, 0, correlation_id, len(body)), body


def _authorizer(config: BrokerConfig) -> StandardAuthorizer | None:
    if config["authorizer.class.name"] != STANDARD_AUTHORIZER:
        return None
    return StandardAuthorizer(parse_super_users(config["super.users"]), config["allow.everyone.if.no.acl.found"])


def _sockname(server: asyncio.AbstractServer | TlsListener) -> str:
    host, port = server.sockets[0].getsockname()[:2]
    return f"{host}:{port}"


def raise_open_file_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            log.info("open_file_limit_raised", before=soft, after=hard)
        except (ValueError, OSError) as exc:
            log.warning("open_file_limit_unchanged", limit=soft, error=str(exc))
