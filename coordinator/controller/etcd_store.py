"""The etcd backend of cluster metadata: registration, the watched image, compare-and-swap writes.

Owns the etcd key space of one cluster (``controller.etcd.prefix``, default ``/kbroker``)::

    cluster_id                      put once, by whoever comes first
    brokers/<node.id>               BrokerRegistration (endpoints by listener name, rack,
                                    incarnation): persists across crashes and restarts; only
                                    UnregisterBroker deletes it
    alive/<node.id>                 the broker's session: its incarnation id, attached to its
                                    lease (its create_revision is the broker epoch, KIP-903);
                                    "<incarnation> fenced" while the broker starts (its
                                    logs not yet open, its previous life not yet fenced), as a
                                    KRaft broker stays fenced until it has caught up.
                                    Registered without it, or with it fenced = fenced.
                                    A restart whose log directory lock names the holder's
                                    incarnation revokes that lease at once (the lock proves
                                    the holder's process is gone)
    controller                      the elected controller's node id, attached to a lease of
                                    its own (``controller.quorum.fetch.timeout.ms``, 2 s by
                                    default, kept alive every quarter of it), so a dead
                                    controller is replaced in about that long, whatever the
                                    broker session timeout; its create_revision is the
                                    controller epoch
    topics/<name>                   topic id, configs, partition count
    partitions/<name>/<index>       PartitionState (leader, leader epoch, replicas, ISR, partition epoch)
    producer_id_block               the next free producer-id block
    group_configs/<group id>        a group's config overrides (GROUP config resource)
    scram/<user>                    a user's SCRAM credentials by mechanism
    quotas/<entity key>             a client-quota entity's quotas (client_quotas.entity_key)
    acls/<id>                       one ACL (its id derives from its content)
    features                        the finalized feature levels; its mod_revision is their epoch

Every write is one etcd transaction that compares what it depends on: a topic is created only
if absent, a partition changes only at the mod_revision this broker read (and, for controller
decisions, only while the controller key still has the controller's create_revision), and a
producer-id block is taken only at the counter's mod_revision. A transaction stays below etcd's
128-operation limit (``MAX_TXN_OPS``): larger changes are split, the topic key first.

The image is loaded with one range read and kept current by a watch from the last applied
revision + 1; after a compaction error (or any watch failure) it is reloaded in full and
the difference applied. While etcd is unreachable the image simply stays as it is: leaders
keep serving, nothing changes leadership, and the outage is logged and shown in
``kbroker_etcd_connected``.

Differs from Kafka: the brokers read etcd directly instead of replicating a KRaft metadata
log, and a partition leader writes its own ISR changes (compare-and-swap on the partition
key, as Kafka's ZooKeeper mode did) instead of sending AlterPartition to the controller.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from collections.abc import Callable, Iterable

import aetcd
import grpc
import structlog
from aetcd import exceptions as etcd_errors

from protocol.errors import ErrorCode, KafkaError
from security.acls import StandardAcl

from .etcd_client import EtcdClient, EtcdSecurity
from .features import NEW_CLUSTER_LEVELS
from .metadata import BrokerRegistration, MetadataCache, PartitionState, TopicState
from .store import PRODUCER_ID_BLOCK_SIZE, new_cluster_id

FENCED_SESSION = " fenced"  # the suffix of a starting broker's session value

log = structlog.get_logger("controller.etcd")

MAX_TXN_OPS = 120
ETCD_ERRORS = (etcd_errors.ClientError, grpc.aio.AioRpcError, OSError, asyncio.TimeoutError)
CONNECT_ATTEMPT_S = 30.0  # at start-up etcd may still be electing itself: keep trying this long
STALL_TICK_S = 0.1  # how often the event loop notes that it runs


class RegistrationConflict(Exception):
    """Another live process holds this node.id."""


def _dumps(value: dict | list) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


class EtcdMetadataStore(MetadataCache):
    clustered = True

    def __init__(self, node_id: int, endpoints: str, prefix: str = "/kbroker",
                 session_timeout_ms: int = 9000, on_connectivity: Callable[[bool], None] | None = None,
                 security: EtcdSecurity | None = None, controller_timeout_ms: int = 2000) -> None:
        super().__init__(node_id)
        host, _, port = endpoints.split(",")[0].strip().rpartition(":")
        # gRPC's default reconnect backoff grows to minutes: after an etcd outage the lease
        # would expire before the channel tried again. Reconnect within a fraction of the TTL.
        self.client = EtcdClient(host or "127.0.0.1", int(port or 2379), security or EtcdSecurity(), timeout=5, options={
            "grpc.initial_reconnect_backoff_ms": 100, "grpc.min_reconnect_backoff_ms": 100,
            "grpc.max_reconnect_backoff_ms": 500, "grpc.keepalive_time_ms": 2000,
            "grpc.keepalive_timeout_ms": 2000})
        self.prefix = prefix.rstrip("/")
        self.ttl = max(1, round(session_timeout_ms / 1000))
        self.lease: aetcd.leases.Lease | None = None
        # etcd grants whole seconds, and at least its own minimum (1.5 s with its defaults).
        self.controller_ttl = max(2, math.ceil(controller_timeout_ms / 1000))
        self.controller_lease: aetcd.leases.Lease | None = None
        self.registration: BrokerRegistration | None = None
        self.revision = 0
        self.controller_epoch = 0
        self._alive: dict[int, str] = {}  # node id -> its session's value ("<incarnation>[ fenced]")
        self._broker_epochs: dict[int, int] = {}  # node id -> its session's create_revision (KIP-903)
        self.fenced = True  # this broker's own state: unfenced once ready to lead (unfence())
        self._topic_raw: dict[str, dict] = {}
        self._parts: dict[tuple[str, int], PartitionState] = {}
        self._applied = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._connected = True
        self.on_connectivity = on_connectivity
        self.lease_listeners: list[Callable[[], None]] = []
        # A stall this long (SIGSTOP, a VM pause) may have outlived the lease: until the image
        # has caught up with etcd again, this broker's idea of what it leads is suspect.
        self.stall_threshold_s = max(0.5, session_timeout_ms / 2000)
        self._last_tick = time.monotonic()
        self._confirming: asyncio.Task | None = None

    # --- keys -----------------------------------------------------------------------------------

    def key(self, *parts: object) -> bytes:
        return "/".join([self.prefix, *map(str, parts)]).encode()

    def _range_end(self, key: bytes) -> bytes:
        return key[:-1] + bytes([key[-1] + 1])

    # --- start, registration, lease ---------------------------------------------------------------

    async def start(self, registration: BrokerRegistration, wait_s: float | None = None,
                    predecessor: str = "") -> None:
        """Connect, settle the cluster id, register this broker and load the image.
        ``predecessor``: the incarnation id of this broker's previous life, if it is known to
        have ended (its process gone) though its session may not have expired yet."""
        deadline = time.monotonic() + CONNECT_ATTEMPT_S
        while True:
            try:
                await self.client.connect()
                await self._ensure_cluster_id()
                break
            except ETCD_ERRORS as exc:
                if time.monotonic() >= deadline:
                    raise
                log.info("waiting_for_etcd", error=repr(exc)[:200])
                await asyncio.sleep(0.5)
        await self._register(registration, self.ttl * 2 + 2 if wait_s is None else wait_s, predecessor)
        await self._reload()
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._keepalive_loop()))
        self._tasks.append(loop.create_task(self._watch_loop()))
        self._tasks.append(loop.create_task(self._stall_watch_loop()))

    # --- freshness after a stall --------------------------------------------------------------------

    def is_current(self) -> bool:
        """False from a stall longer than ``stall_threshold_s`` until the image has applied
        the revision etcd had after it. Checked where a request is admitted, so a request
        read right after the process resumes sees the stall before any timer has run."""
        if self._confirming is None and time.monotonic() - self._last_tick > self.stall_threshold_s:
            self._suspect(time.monotonic() - self._last_tick)
        return self._confirming is None

    async def _stall_watch_loop(self) -> None:
        while True:
            await asyncio.sleep(STALL_TICK_S)
            now = time.monotonic()
            if self._confirming is None and now - self._last_tick > self.stall_threshold_s:
                self._suspect(now - self._last_tick)
            self._last_tick = now

    def _suspect(self, stalled_s: float) -> None:
        log.warning("metadata_suspect_after_stall", node_id=self.node_id, stalled_s=round(stalled_s, 3),
                    applied_revision=self.revision)
        self._last_tick = time.monotonic()
        self._confirming = asyncio.get_running_loop().create_task(self._confirm_current())
        self._tasks.append(self._confirming)

    async def _confirm_current(self) -> None:
        """Read the cluster's keys as etcd has them now (a linearizable read) and wait until
        the watch has applied the newest change among them."""
        started = time.monotonic()
        while True:
            try:
                result = await asyncio.wait_for(self.client.get_prefix(self.prefix.encode() + b"/"), 5)
                await self.wait_applied(max((kv.mod_revision for kv in result), default=0), timeout=10)
                break
            except (*ETCD_ERRORS, TimeoutError, KafkaError) as exc:
                log.info("metadata_confirm_retry", node_id=self.node_id, error=repr(exc)[:200])
                await asyncio.sleep(0.2)
        log.info("metadata_current_again", node_id=self.node_id, revision=self.revision,
                 seconds=round(time.monotonic() - started, 3))
        self._tasks.remove(self._confirming)
        self._confirming = None

    async def _ensure_cluster_id(self) -> None:
        key = self.key("cluster_id")
        t = self.client.transactions
        # Whoever creates the cluster also stores its feature levels (a new cluster's).
        await self.client.transaction(compare=[t.version(key) == 0],
                                      success=[t.put(key, new_cluster_id().encode()),
                                               t.put(self.key("features"), _dumps(NEW_CLUSTER_LEVELS))],
                                      failure=[])
        got = await self.client.get(key)
        self.cluster_id = got.value.decode()

    async def _register(self, registration: BrokerRegistration, wait_s: float, predecessor: str = "") -> None:
        """Put ``alive/<id>`` under a fresh lease and the registration beside it. A session of
        ``predecessor`` (this broker's previous life, known dead: see :meth:`start`) is ended
        at once; any other holder's lease is waited out (a second live process with
        this node.id is refused, as KRaft refuses a duplicate registration while the other's
        session lasts)."""
        self.registration = registration
        key = self.key("alive", registration.node_id)
        deadline = time.monotonic() + wait_s
        while True:
            self.lease = await self.client.lease(self.ttl)
            t = self.client.transactions
            ok, _ = await self.client.transaction(
                compare=[t.version(key) == 0],
                success=[t.put(key, self._alive_value(), lease=self.lease.id),
                         t.put(self.key("brokers", registration.node_id), _dumps(_registration_json(registration)))],
                failure=[])
            if ok:
                log.info("broker_registered", node_id=registration.node_id, lease_ttl_s=self.ttl,
                         incarnation_id=registration.incarnation_id)
                return
            await self.lease.revoke()
            holder = await self.client.get(key)
            if holder is not None and predecessor and await self._end_predecessor_session(holder, predecessor):
                predecessor = ""  # ended once: whoever holds the session next is someone else
                continue
            if time.monotonic() >= deadline:
                raise RegistrationConflict(
                    f"node.id {registration.node_id} is already registered by a live broker "
                    f"({holder.value.decode() if holder else '?'}); stop it or choose another node.id")
            log.info("waiting_for_previous_registration", node_id=registration.node_id,
                     holder=holder.value.decode() if holder else None)
            await asyncio.sleep(0.5)

    async def _end_predecessor_session(self, holder, predecessor: str) -> bool:
        """Revoke the lease of a session that is this broker's previous life: a quick restart
        after a crash is noticed now, not when that lease expires (Kafka waits it out, answering
        DUPLICATE_BROKER_REGISTRATION meanwhile). The controller sees the session end and moves
        the leaderships it held, as it would have on expiry."""
        incarnation = holder.value.decode().removesuffix(FENCED_SESSION)
        if incarnation != predecessor or not holder.lease:
            return False
        try:
            await self.client.revoke_lease(holder.lease)
        except etcd_errors.ClientError as exc:
            if "lease not found" not in str(exc):
                raise
            # expired meanwhile: the next attempt registers
        log.info("previous_session_ended", node_id=self.node_id, incarnation_id=incarnation,
                 reason="this broker's previous life is gone: its log directory lock was free")
        return True

    def _alive_value(self) -> bytes:
        return (self.registration.incarnation_id + (FENCED_SESSION if self.fenced else "")).encode()

    async def unfence(self) -> None:
        """The broker is ready to lead (its logs open, its previous life fenced): its session
        says so, and the controller may elect it from now on."""
        self.fenced = False
        await self.client.put(self.key("alive", self.registration.node_id), self._alive_value(), lease=self.lease.id)
        log.info("broker_unfenced", node_id=self.node_id, incarnation_id=self.registration.incarnation_id)

    async def update_registration(self, **changes) -> None:
        for k, v in changes.items():
            setattr(self.registration, k, v)
        await self._put_registration()

    async def _put_registration(self) -> None:
        await self.client.put(self.key("brokers", self.registration.node_id),
                              _dumps(_registration_json(self.registration)))

    async def unregister_broker(self, node_id: int) -> None:
        """Remove a registration (UnregisterBroker). A broker that is still up registers
        again, as a KRaft broker does when its heartbeat finds its registration gone."""
        t = self.client.transactions
        key = self.key("brokers", node_id)
        ok, revision = await self._txn([t.version(key) > 0], [t.delete(key)])
        if not ok:
            raise KafkaError(ErrorCode.broker_id_not_registered, f"Broker ID {node_id} is not currently registered")
        await self.wait_applied(revision)

    async def _keepalive_loop(self) -> None:
        interval = max(self.ttl / 3, 0.3)
        while True:
            await asyncio.sleep(interval)
            try:
                reply = await asyncio.wait_for(self.client.refresh_lease(self.lease.id), interval)
                if reply is not None and reply.TTL <= 0:
                    log.warning("broker_lease_expired", node_id=self.node_id)
                    await self._register(self.registration, self.ttl * 2 + 2)
                    for listener in self.lease_listeners:
                        listener()
                self._set_connected(True)
            except ETCD_ERRORS as exc:
                self._set_connected(False, exc)
            except Exception:
                log.exception("lease_keepalive_failed")

    def _set_connected(self, connected: bool, error: BaseException | None = None) -> None:
        if connected != self._connected:
            self._connected = connected
            if connected:
                log.info("etcd_reachable_again", node_id=self.node_id)
            else:
                log.warning("etcd_unreachable", node_id=self.node_id, error=repr(error),
                            note="serving on the last known metadata; no leadership changes")
            if self.on_connectivity is not None:
                self.on_connectivity(connected)

    @property
    def connected(self) -> bool:
        return self._connected

    async def stop(self, deregister: bool = True) -> None:
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=2)
        if deregister:
            await self.resign()
            if self.lease is not None:
                await self._revoke_quietly(self.lease)
        try:  # the client's close waits on its watch stream's lock: never longer than this
            await asyncio.wait_for(self.client.close(), 2)
        except (TimeoutError, Exception):
            log.warning("etcd_client_close_timed_out")

    # --- the image: full load and watch -----------------------------------------------------------

    async def _reload(self) -> None:
        result = await self.client.get_prefix(self.prefix.encode() + b"/")
        before_parts = dict(self._parts)
        before_image = self.topics
        before_topics = set(self.topics)
        before_acls = self.acls
        self.acls = {}
        self._topic_raw.clear()
        self._parts.clear()
        self.group_configs = {}
        self.scram_credentials = {}
        self.client_quotas = {}
        self.finalized_features, self.features_epoch = None, 0
        self.registered, self._alive, self._broker_epochs = {}, {}, {}
        self.controller_id, self.controller_epoch = -1, 0
        for kv in result:
            self._apply_put(kv.key, kv.value, kv.mod_revision, kv.create_revision)
        self._refresh_unfenced()
        self.revision = result.header.revision
        self.topics = {}
        for name in list(self._topic_raw):
            self._rebuild_topic(name)
        changed = {tp for tp, st in self._parts.items() if before_parts.get(tp) != st}
        changed |= {tp for tp in before_parts if tp not in self._parts}
        self._applied.set()
        self.notify(changed, before_topics - set(self.topics))
        self.notify_configs(before_image, self.topics)
        if self.acls != before_acls:
            self.notify_acls()

    async def _watch_loop(self) -> None:
        backoff = 0.2
        while True:
            try:
                watch = await self.client.watch_prefix(self.prefix.encode() + b"/",
                                                       start_revision=self.revision + 1)
                self._set_connected(True)
                backoff = 0.2
                async for event in watch:
                    self._apply_event(event)
            except asyncio.CancelledError:
                raise
            except etcd_errors.RevisionCompactedError as exc:
                log.warning("metadata_watch_compacted", revision=self.revision, compacted=exc.compacted_revision)
            except ETCD_ERRORS as exc:
                self._set_connected(False, exc)
            except Exception:
                log.exception("metadata_watch_failed")
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)
            try:
                await self._reload()
                self._set_connected(True)
            except ETCD_ERRORS as exc:
                self._set_connected(False, exc)

    def _apply_event(self, event) -> None:
        kv = event.kv
        if kv.key.startswith(self.key("acls") + b"/"):
            self._apply_acl_event(event)
            return
        changed: set[tuple[str, int]] = set()
        deleted: set[str] = set()
        name = self._apply_put(kv.key, kv.value, kv.mod_revision, kv.create_revision) \
            if event.kind == "PUT" else self._apply_delete(kv.key)
        if name is not None:
            had = name in self.topics
            before = self.topics.get(name)
            before_parts = [] if before is None else list(before.partitions)
            self._rebuild_topic(name)
            after = self.topics.get(name)
            if after is None and had:
                deleted.add(name)
                changed |= {(name, i) for i in range(len(before_parts))}
            elif after is not None:
                changed |= {(name, i) for i, p in enumerate(after.partitions)
                            if i >= len(before_parts) or before_parts[i] is not p}
        self.revision = max(self.revision, kv.mod_revision)
        self._applied.set()
        self.notify(changed, deleted)
        if name is not None and before is not None and after is not None:
            self.notify_configs({name: before}, {name: after})
        if name is None and self._kind(kv.key) in ("brokers", "alive", "controller"):
            self._refresh_unfenced()
            for listener in self.broker_listeners:
                listener()

    def _kind(self, key: bytes) -> str:
        return key.decode()[len(self.prefix) + 1:].split("/", 1)[0]

    def _apply_acl_event(self, event) -> None:
        kv = event.kv
        acl_id = kv.key.decode().rpartition("/")[2]
        if event.kind == "PUT":
            self.acls = {**self.acls, acl_id: StandardAcl.from_json(json.loads(kv.value))}
        else:
            self.acls = {k: v for k, v in self.acls.items() if k != acl_id}
        self.revision = max(self.revision, kv.mod_revision)
        self._applied.set()
        self.notify_acls()

    def _apply_put(self, key: bytes, value: bytes, mod_revision: int, create_revision: int) -> str | None:
        """Apply one key; returns the topic name when a topic or partition record changed."""
        parts = key.decode()[len(self.prefix) + 1:].split("/")
        kind = parts[0]
        if kind == "brokers":
            raw = json.loads(value)
            self.registered = {**self.registered, int(parts[1]): _registration_from_json(raw)}
        elif kind == "alive":
            self._alive = {**self._alive, int(parts[1]): value.decode()}
            self._broker_epochs = {**self._broker_epochs, int(parts[1]): create_revision}
        elif kind == "controller":
            self.controller_id, self.controller_epoch = int(value), create_revision
        elif kind == "cluster_id":
            self.cluster_id = value.decode()
        elif kind == "acls":
            self.acls[parts[1]] = StandardAcl.from_json(json.loads(value))
        elif kind == "topics":
            self._topic_raw[parts[1]] = json.loads(value)
            return parts[1]
        elif kind == "partitions":
            self._parts[(parts[1], int(parts[2]))] = PartitionState.from_json(json.loads(value), mod_revision)
            return parts[1]
        elif kind == "group_configs":
            self.group_configs = {**self.group_configs, "/".join(parts[1:]): json.loads(value)}
        elif kind == "scram":
            self.scram_credentials = {**self.scram_credentials, "/".join(parts[1:]): json.loads(value)}
        elif kind == "quotas":
            self.client_quotas = {**self.client_quotas, "/".join(parts[1:]): json.loads(value)}
        elif kind == "features":
            self.finalized_features, self.features_epoch = json.loads(value), mod_revision
        return None

    def _apply_delete(self, key: bytes) -> str | None:
        parts = key.decode()[len(self.prefix) + 1:].split("/")
        kind = parts[0]
        if kind == "brokers":
            node_id = int(parts[1])
            self.registered = {k: v for k, v in self.registered.items() if k != node_id}
            if node_id == self.node_id and node_id in self._alive and self.registration is not None:
                self._spawn(self._reregister())
        elif kind == "alive":
            self._alive = {k: v for k, v in self._alive.items() if k != int(parts[1])}
            self._broker_epochs = {k: v for k, v in self._broker_epochs.items() if k != int(parts[1])}
        elif kind == "controller":
            self.controller_id, self.controller_epoch = -1, 0
        elif kind == "topics":
            self._topic_raw.pop(parts[1], None)
            return parts[1]
        elif kind == "partitions":
            self._parts.pop((parts[1], int(parts[2])), None)
            return parts[1]
        elif kind == "group_configs":
            group_id = "/".join(parts[1:])
            self.group_configs = {g: c for g, c in self.group_configs.items() if g != group_id}
        elif kind == "scram":
            user = "/".join(parts[1:])
            self.scram_credentials = {u: c for u, c in self.scram_credentials.items() if u != user}
        elif kind == "quotas":
            entity = "/".join(parts[1:])
            self.client_quotas = {e: q for e, q in self.client_quotas.items() if e != entity}
        return None

    def broker_epoch(self, node_id: int) -> int:
        """The broker epoch of ``node_id``'s current session (KRaft's is the offset of its
        registration record; here the create_revision of ``alive/<id>``, new with every life
        of the broker); -1 without a session."""
        return self._broker_epochs.get(node_id, -1)

    def _refresh_unfenced(self) -> None:
        """``brokers``: the registered brokers with a live, unfenced session."""
        alive = self._alive
        self.brokers = {n: b for n, b in self.registered.items()
                        if n in alive and not alive[n].endswith(FENCED_SESSION)}

    async def _reregister(self) -> None:
        log.warning("broker_registration_removed_while_alive", node_id=self.node_id, action="registering again")
        try:
            await self._put_registration()
        except ETCD_ERRORS as exc:
            log.warning("broker_reregistration_failed", node_id=self.node_id, error=repr(exc))

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.append(task)
        task.add_done_callback(lambda t: t in self._tasks and self._tasks.remove(t))

    def _rebuild_topic(self, name: str) -> None:
        """A topic is visible once its record and every partition record are applied."""
        raw = self._topic_raw.get(name)
        if raw is None:
            self.topics.pop(name, None)
            return
        parts = [self._parts.get((name, i)) for i in range(raw["partitions"])]
        if any(p is None for p in parts):
            if name not in self.topics:
                return
            old = self.topics[name]  # growing: keep serving the partitions already complete
            parts = [p if p is not None else (old.partitions[i] if i < len(old.partitions) else None)
                     for i, p in enumerate(parts)]
            parts = parts[:next((i for i, p in enumerate(parts) if p is None), len(parts))]
        self.topics = {**self.topics, name: TopicState(name, raw["topic_id"], parts, dict(raw.get("configs", {})))}

    @property
    def applied_offset(self) -> int:
        """The etcd revision the image has applied (DescribeQuorum's high watermark)."""
        return self.revision

    async def catch_up_group_config(self, group_id: str, timeout: float = 5.0) -> None:
        """Until the image has the group's config as etcd has it now (a linearizable read of
        its one key): read-your-writes for a GROUP config altered through another broker."""
        got = await asyncio.wait_for(self.client.get(self.key("group_configs", group_id)), timeout)
        if got is not None:
            await self.wait_applied(got.mod_revision, timeout)

    async def wait_applied(self, revision: int, timeout: float = 10.0) -> None:
        """Until the image includes ``revision`` (read-your-writes for admin requests)."""
        deadline = time.monotonic() + timeout
        while self.revision < revision:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaError(ErrorCode.request_timed_out, "metadata change not applied in time")
            self._applied.clear()
            try:
                await asyncio.wait_for(self._applied.wait(), remaining)
            except TimeoutError:
                pass

    # --- writes -----------------------------------------------------------------------------------

    async def _txn(self, compare: list, success: list) -> tuple[bool, int]:
        """One etcd transaction; returns (succeeded, revision of the write)."""
        try:
            ok, responses = await self.client.transaction(compare=compare, success=success, failure=[])
        except ETCD_ERRORS as exc:
            raise KafkaError(ErrorCode.request_timed_out, f"metadata store unreachable: {exc!r}") from exc
        revision = 0
        for r in responses:
            which = r.WhichOneof("response") if hasattr(r, "WhichOneof") else None
            if which:
                revision = max(revision, getattr(r, which).header.revision)
        return ok, revision

    async def create_topic(self, name: str, assignment: list[list[int]], configs: dict[str, str]) -> TopicState:
        """Create ``name`` with one PartitionState per replica list (leader: the first replica)."""
        t = self.client.transactions
        topic_key = self.key("topics", name)
        record = {"topic_id": str(uuid.uuid4()), "configs": dict(configs), "partitions": len(assignment)}
        active = self.active_broker_ids()
        states = [PartitionState.created(r, active) for r in assignment]
        puts = [t.put(self.key("partitions", name, i), _dumps(s.to_json())) for i, s in enumerate(states)]
        first, rest = puts[:MAX_TXN_OPS - 1], puts[MAX_TXN_OPS - 1:]
        ok, revision = await self._txn([t.version(topic_key) == 0], [t.put(topic_key, _dumps(record)), *first])
        if not ok:
            raise KafkaError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        created = revision
        for chunk in _chunks(rest, MAX_TXN_OPS):
            ok, revision = await self._txn([t.create(topic_key) == created], chunk)
            if not ok:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, f"Topic '{name}' was deleted while created")
        await self.wait_applied(revision)
        return self.topics[name]

    async def delete_topic(self, name: str) -> TopicState:
        topic = self.topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"Topic '{name}' does not exist.")
        t = self.client.transactions
        topic_key, parts_key = self.key("topics", name), self.key("partitions", name) + b"/"
        ok, revision = await self._txn([t.version(topic_key) > 0],
                                       [t.delete(topic_key), t.delete(parts_key, self._range_end(parts_key))])
        if not ok:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"Topic '{name}' does not exist.")
        await self.wait_applied(revision)
        return topic

    async def _topic_record(self, name: str) -> tuple[dict, int]:
        """The topic's record as stored now, and its mod_revision (for the compare)."""
        try:
            got = await self.client.get(self.key("topics", name))
        except ETCD_ERRORS as exc:
            raise KafkaError(ErrorCode.request_timed_out, f"metadata store unreachable: {exc!r}") from exc
        if got is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"Topic '{name}' does not exist.")
        return json.loads(got.value), got.mod_revision

    async def _replace_topic_record(self, name: str, record: dict, mod_revision: int, extra: list = ()) -> None:
        """Write ``record`` (after ``extra`` operations) only if the topic is still at ``mod_revision``."""
        t = self.client.transactions
        topic_key = self.key("topics", name)
        for chunk in _chunks(list(extra), MAX_TXN_OPS):
            await self._txn([t.mod(topic_key) == mod_revision], chunk)
        ok, revision = await self._txn([t.mod(topic_key) == mod_revision], [t.put(topic_key, _dumps(record))])
        if not ok:
            raise KafkaError(ErrorCode.request_timed_out, f"Topic '{name}' changed concurrently; retry")
        await self.wait_applied(revision)

    async def add_partitions(self, name: str, assignment: list[list[int]]) -> None:
        """Grow ``name`` by one partition per replica list: the new partition records first,
        the count last, so a reader never sees a missing one."""
        record, mod_revision = await self._topic_record(name)
        before = record["partitions"]
        record["partitions"] = before + len(assignment)
        t = self.client.transactions
        active = self.active_broker_ids()
        puts = [t.put(self.key("partitions", name, before + i), _dumps(PartitionState.created(r, active).to_json()))
                for i, r in enumerate(assignment)]
        await self._replace_topic_record(name, record, mod_revision, puts)

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        record, mod_revision = await self._topic_record(name)
        record["configs"] = dict(configs)
        await self._replace_topic_record(name, record, mod_revision)

    async def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        """Replace a group's config overrides (none left: its key is deleted)."""
        key = self.key("group_configs", group_id)
        op = (self.client.transactions.put(key, _dumps(dict(configs))) if configs
              else self.client.transactions.delete(key))
        _ok, revision = await self._txn([], [op])
        await self.wait_applied(revision)

    async def alter_scram_credentials(self, changes: dict[str, dict[str, dict]]) -> None:
        """Replace each named user's credentials in one transaction (empty: the user's key goes)."""
        t = self.client.transactions
        ops = [t.put(self.key("scram", user), _dumps(creds)) if creds else t.delete(self.key("scram", user))
               for user, creds in changes.items()]
        if len(ops) > MAX_TXN_OPS:
            raise KafkaError(ErrorCode.policy_violation, f"At most {MAX_TXN_OPS} users can be altered at once")
        _ok, revision = await self._txn([], ops)
        await self.wait_applied(revision)

    async def alter_client_quotas(self, changes: dict[str, dict[str, float]]) -> None:
        """Replace each named entity's quotas in one transaction (empty: the entity's key goes)."""
        t = self.client.transactions
        ops = [t.put(self.key("quotas", entity), _dumps(quotas)) if quotas else t.delete(self.key("quotas", entity))
               for entity, quotas in changes.items()]
        if len(ops) > MAX_TXN_OPS:
            raise KafkaError(ErrorCode.policy_violation, f"At most {MAX_TXN_OPS} entities can be altered at once")
        _ok, revision = await self._txn([], ops)
        await self.wait_applied(revision)

    async def update_features(self, levels: dict[str, int], expected_epoch: int) -> bool:
        """Finalize ``levels`` by compare-and-swap on the ``features`` key (its mod_revision is
        the epoch the levels were planned on; 0: never written); False when it moved."""
        t = self.client.transactions
        key = self.key("features")
        ok, revision = await self._txn([t.mod(key) == expected_epoch], [t.put(key, _dumps(levels))])
        if ok:
            await self.wait_applied(revision)
        return ok

    async def alter_partitions(self, changes: Iterable[tuple[str, int, PartitionState, int]],
                               controller_epoch: int | None = None, wait: bool = False,
                               broker_epochs: dict[int, int] | None = None) -> set[tuple[str, int]]:
        """Compare-and-swap partition records: each (topic, index, new state, expected
        mod_revision); with ``controller_epoch``, only while that controller is in office;
        with ``broker_epochs`` (an ISR a replica joins), only while each of those brokers is
        still in the life whose epoch its fetch named (KIP-903: the check Kafka's controller
        makes of AlterPartition's broker epochs). Returns the partitions written (a stale one
        is skipped, not retried)."""
        t = self.client.transactions
        written, revision = set(), 0
        guard = [] if controller_epoch is None else [t.create(self.key("controller")) == controller_epoch]
        guard += [t.create(self.key("alive", node)) == epoch for node, epoch in sorted((broker_epochs or {}).items())]
        for topic, index, state, expected in changes:
            key = self.key("partitions", topic, index)
            ok, rev = await self._txn([*guard, t.mod(key) == expected], [t.put(key, _dumps(state.to_json()))])
            if ok:
                written.add((topic, index))
                revision = max(revision, rev)
        if wait and revision:
            await self.wait_applied(revision)
        return written

    async def allocate_producer_id_block(self) -> tuple[int, int]:
        """Take the next block by compare-and-swap on ``producer_id_block`` (retried on a race)."""
        t = self.client.transactions
        key = self.key("producer_id_block")
        for _ in range(50):
            got = await self.client.get(key)
            start = json.loads(got.value)["next"] if got is not None else 0
            compare = [t.mod(key) == got.mod_revision] if got is not None else [t.version(key) == 0]
            ok, _ = await self._txn(compare, [t.put(key, _dumps({"next": start + PRODUCER_ID_BLOCK_SIZE}))])
            if ok:
                return start, PRODUCER_ID_BLOCK_SIZE
        raise KafkaError(ErrorCode.coordinator_load_in_progress, "producer-id block contended; retry")

    # --- ACLs ------------------------------------------------------------------------------------

    async def create_acls(self, acls: list[StandardAcl]) -> None:
        """Put each ACL under its content-derived key (the same ACL twice is one key)."""
        t = self.client.transactions
        puts = [t.put(self.key("acls", acl.acl_id), _dumps(acl.to_json())) for acl in acls]
        await self._write_all(puts)

    async def delete_acls(self, acl_ids: set[str]) -> None:
        t = self.client.transactions
        await self._write_all([t.delete(self.key("acls", acl_id)) for acl_id in sorted(acl_ids)])

    async def _write_all(self, operations: list) -> None:
        """Unconditional writes, in transactions under etcd's operation limit; waits until applied."""
        revision = 0
        for chunk in _chunks(operations, MAX_TXN_OPS):
            _, rev = await self._txn([], chunk)
            revision = max(revision, rev)
        if revision:
            await self.wait_applied(revision)

    # --- controller election ----------------------------------------------------------------------

    async def campaign(self) -> int:
        """Try to become controller; returns the controller epoch (create_revision) or 0.

        The key goes under a fresh lease of ``controller_ttl`` seconds, kept alive by
        :meth:`_controller_keepalive_loop` while this broker holds it."""
        t = self.client.transactions
        key = self.key("controller")
        lease = await self.client.lease(self.controller_ttl)
        try:
            ok, revision = await self._txn([t.version(key) == 0],
                                           [t.put(key, str(self.node_id).encode(), lease=lease.id)])
        except BaseException:
            await self._revoke_quietly(lease)
            raise
        if not ok:
            await self._revoke_quietly(lease)
            return 0
        self.controller_lease = lease
        self._spawn(self._controller_keepalive_loop(lease))
        return revision

    async def _controller_keepalive_loop(self, lease) -> None:
        """Renew the controller lease every quarter TTL until it is lost (expired: another
        broker may already hold the role) or given up."""
        interval = self.controller_ttl / 4
        while self.controller_lease is lease:
            await asyncio.sleep(interval)
            try:
                reply = await asyncio.wait_for(self.client.refresh_lease(lease.id), interval * 2)
            except ETCD_ERRORS:
                continue  # the TTL decides: if etcd stays unreachable, the role lapses there too
            if reply is not None and reply.TTL <= 0:
                log.warning("controller_lease_expired", node_id=self.node_id)
                if self.controller_lease is lease:
                    self.controller_lease = None
                return

    async def resign(self) -> None:
        """Give up the controller role at once (a controlled shutdown), if held."""
        lease, self.controller_lease = self.controller_lease, None
        if lease is not None:
            await self._revoke_quietly(lease)

    async def _revoke_quietly(self, lease) -> None:
        try:
            await asyncio.wait_for(lease.revoke(), 2)
        except (*ETCD_ERRORS, Exception):
            pass


def _chunks(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def _registration_json(r: BrokerRegistration) -> dict:
    """``host``/``port`` (the inter-broker endpoint) stay for readers of the one-endpoint form."""
    return {"node_id": r.node_id, "host": r.host, "port": r.port, "rack": r.rack,
            "incarnation_id": r.incarnation_id, "controlled_shutdown": r.controlled_shutdown,
            "endpoints": [{"listener": name, "host": host, "port": port}
                          for name, (host, port) in r.endpoints.items()]}


def _registration_from_json(raw: dict) -> BrokerRegistration:
    """Also reads a registration without ``endpoints`` (written before listeners had names)."""
    endpoints = {e["listener"]: (e["host"], e["port"]) for e in raw.get("endpoints", ())}
    return BrokerRegistration(raw["node_id"], raw["host"], raw["port"], raw.get("rack"),
                              raw.get("incarnation_id", ""), raw.get("controlled_shutdown", False),
                              endpoints)
