"""The image and its watch: the cluster's keys applied to a broker's :class:`MetadataCache`.

Owns loading the image (one range read of the cluster's keys), keeping it current (a watch
from the last applied revision + 1), telling the image's listeners what changed, and knowing
when the image may be stale.

- The watch runs on the member the store client uses. When that member fails, or the client
  moves to another one, the watch is opened again on the next member from the revision the
  image has applied: every event after it arrives once (etcd sends a revision's events
  together, so a revision is applied whole or not at all), none before it again. Only a watch
  refused because etcd compacted past that revision reloads the image in full and applies the
  difference.
- After a stall of the process longer than half the session timeout (SIGSTOP, a VM pause),
  :meth:`MetadataLoader.is_current` is False until the image has applied the revision etcd had
  after it: leadership may have moved meanwhile.
- While no member can be reached the image stays as it is: leaders keep serving, and nothing
  changes leadership.

Differs from Kafka: a broker reads etcd's keys, not a replicated metadata log, and the etcd
revision it has applied is its ``applied_offset``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

import structlog
from aetcd import exceptions as etcd_errors

from protocol.errors import ErrorCode, KafkaError
from security.acls import StandardAcl

from ..image import MetadataCache
from ..records import PartitionState, TopicState
from .client import ETCD_ERRORS, FailoverEtcdClient, StoreUnavailable, closed_under, member_failed
from .keys import FENCED_SESSION, KeySpace, registration_from_json

__all__ = ["MetadataLoader"]

log = structlog.get_logger("metadata.etcd.loader")

STALL_TICK_S = 0.1  # how often the event loop notes that it runs
WATCH_RETRY_S = 0.1  # the first pause before a failed watch is opened again (doubling to 2 s)


class MetadataLoader:
    """Feeds ``image`` from etcd. ``own_registration_removed`` is called when this broker's
    registration key is deleted while its session lives (UnregisterBroker of a live broker)."""

    def __init__(self, client: FailoverEtcdClient, keys: KeySpace, image: MetadataCache,
                 stall_threshold_s: float, own_registration_removed: Callable[[], None]) -> None:
        self.client = client
        self.keys = keys
        self.image = image
        self.stall_threshold_s = stall_threshold_s
        self.own_registration_removed = own_registration_removed
        self.revision = 0  # the etcd revision applied
        self._topic_raw: dict[str, dict] = {}
        self._parts: dict[tuple[str, int], PartitionState] = {}
        self._alive: dict[int, str] = {}  # node id -> its session's value ("<incarnation>[ fenced]")
        self._applied = asyncio.Event()
        self._last_tick = time.monotonic()
        self._confirming: asyncio.Task | None = None
        self.watch_reopened = 0  # watches opened again after a member failed (not reloads)
        self.reloads = 0

    # --- waiting for the image ---------------------------------------------------------------------

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

    async def catch_up_key(self, key: bytes, timeout: float = 5.0) -> None:
        """Until the image has ``key`` as etcd has it now (a linearizable read of that key)."""
        try:
            got = await self.client.get(key, timeout=timeout)
        except (StoreUnavailable, *ETCD_ERRORS) as exc:
            raise KafkaError(ErrorCode.request_timed_out, f"metadata store unreachable: {exc}"[:300]) from exc
        if got is not None:
            await self.wait_applied(got.mod_revision, timeout)

    # --- freshness after a stall --------------------------------------------------------------------

    def is_current(self) -> bool:
        """False from a stall longer than ``stall_threshold_s`` until the image has applied the
        revision etcd had after it. Checked where a request is admitted, so a request read right
        after the process resumes sees the stall before any timer has run."""
        if self._confirming is None and time.monotonic() - self._last_tick > self.stall_threshold_s:
            self._suspect(time.monotonic() - self._last_tick)
        return self._confirming is None

    async def stall_watch_loop(self) -> None:
        while True:
            await asyncio.sleep(STALL_TICK_S)
            now = time.monotonic()
            if self._confirming is None and now - self._last_tick > self.stall_threshold_s:
                self._suspect(now - self._last_tick)
            self._last_tick = now

    def _suspect(self, stalled_s: float) -> None:
        log.warning("metadata_suspect_after_stall", node_id=self.image.node_id, stalled_s=round(stalled_s, 3),
                    applied_revision=self.revision)
        self._last_tick = time.monotonic()
        self._confirming = asyncio.get_running_loop().create_task(self._confirm_current())

    async def _confirm_current(self) -> None:
        """Read the cluster's keys as etcd has them now (a linearizable read) and wait until
        the watch has applied the newest change among them."""
        started = time.monotonic()
        while True:
            try:
                result = await self.client.get_prefix(self.keys.root)
                await self.wait_applied(max((kv.mod_revision for kv in result), default=0), timeout=10)
                break
            except (*ETCD_ERRORS, StoreUnavailable, KafkaError) as exc:
                log.info("metadata_confirm_retry", node_id=self.image.node_id, error=repr(exc)[:200])
                await asyncio.sleep(0.2)
        log.info("metadata_current_again", node_id=self.image.node_id, revision=self.revision,
                 seconds=round(time.monotonic() - started, 3))
        self._confirming = None

    def stop(self) -> None:
        if self._confirming is not None:
            self._confirming.cancel()

    # --- full load -----------------------------------------------------------------------------------

    async def reload(self) -> None:
        """Read every key and apply the difference to the image."""
        result = await self.client.get_prefix(self.keys.root)
        image = self.image
        before_parts, before_image, before_acls = dict(self._parts), image.topics, image.acls
        image.acls = {}
        self._topic_raw.clear()
        self._parts.clear()
        image.group_configs, image.scram_credentials, image.client_quotas = {}, {}, {}
        image.finalized_features, image.features_epoch = None, 0
        image.registered, self._alive, image.broker_epochs = {}, {}, {}
        image.controller_id, image.controller_epoch = -1, 0
        for kv in result:
            self._apply_put(kv.key, kv.value, kv.mod_revision, kv.create_revision)
        self._refresh_unfenced()
        self.revision = image.applied_offset = result.header.revision
        image.topics = {}
        for name in list(self._topic_raw):
            self._rebuild_topic(name)
        changed = {tp for tp, st in self._parts.items() if before_parts.get(tp) != st}
        changed |= {tp for tp in before_parts if tp not in self._parts}
        self.reloads += 1
        self._applied.set()
        image.notify(changed, set(before_image) - set(image.topics))
        image.notify_configs(before_image, image.topics)
        if image.acls != before_acls:
            image.notify_acls()
        for listener in image.broker_listeners:
            listener()

    # --- the watch -----------------------------------------------------------------------------------

    async def watch_loop(self) -> None:
        """Apply every change from ``revision + 1`` on, on whichever member the client uses."""
        retry = WATCH_RETRY_S
        while True:
            generation = self.client.generation
            try:
                watch, generation = await self.client.watch_prefix(self.keys.root, self.revision + 1)
                retry = WATCH_RETRY_S
                try:
                    async for event in watch:
                        self._apply_event(event)
                except asyncio.CancelledError as cancelled:
                    raise closed_under(cancelled) from None
                # Ended without an error: the client closed this member's channel (it moved on).
                self.watch_reopened += 1
                continue
            except asyncio.CancelledError:
                raise
            except etcd_errors.RevisionCompactedError as exc:
                log.warning("metadata_watch_compacted", revision=self.revision, compacted=exc.compacted_revision,
                            action="reloading the image")
                await self._reload_until_done()
                continue
            except (*ETCD_ERRORS, StoreUnavailable) as exc:
                if member_failed(exc):
                    self.client.switch(generation, exc)  # the member it ran on failed: the next one
                    self.watch_reopened += 1
                    log.info("metadata_watch_reopening", revision=self.revision, error=repr(exc)[:200],
                             member=self.client.address)
                else:
                    log.warning("metadata_watch_failed", error=repr(exc)[:300], action="reloading the image")
                    await self._reload_until_done()
            except Exception:
                log.exception("metadata_watch_failed")
            await asyncio.sleep(retry)
            retry = min(retry * 2, 2.0)

    async def _reload_until_done(self) -> None:
        while True:
            try:
                await self.reload()
                return
            except (*ETCD_ERRORS, StoreUnavailable) as exc:
                log.info("metadata_reload_retry", error=repr(exc)[:200])
                await asyncio.sleep(0.5)

    def _apply_event(self, event) -> None:
        kv = event.kv
        if kv.mod_revision <= self.revision and kv.mod_revision != self._applying:
            return  # seen already (a watch opened again must not apply a revision twice)
        self._applying = kv.mod_revision
        image = self.image
        kind = self.keys.kind(kv.key)
        if kind == "acls":
            self._apply_acl_event(event)
            return
        changed: set[tuple[str, int]] = set()
        deleted: set[str] = set()
        name = self._apply_put(kv.key, kv.value, kv.mod_revision, kv.create_revision) \
            if event.kind == "PUT" else self._apply_delete(kv.key)
        before = after = None
        if name is not None:
            had = name in image.topics
            before = image.topics.get(name)
            before_parts = [] if before is None else list(before.partitions)
            self._rebuild_topic(name)
            after = image.topics.get(name)
            if after is None and had:
                deleted.add(name)
                changed |= {(name, i) for i in range(len(before_parts))}
            elif after is not None:
                changed |= {(name, i) for i, p in enumerate(after.partitions)
                            if i >= len(before_parts) or before_parts[i] is not p}
        self._advance(kv.mod_revision)
        image.notify(changed, deleted)
        if name is not None and before is not None and after is not None:
            image.notify_configs({name: before}, {name: after})
        if name is None and kind in ("brokers", "alive", "controller"):
            self._refresh_unfenced()
            for listener in image.broker_listeners:
                listener()

    _applying = 0  # the revision whose events are being applied

    def _advance(self, revision: int) -> None:
        self.revision = self.image.applied_offset = max(self.revision, revision)
        self._applied.set()

    def _apply_acl_event(self, event) -> None:
        kv, image = event.kv, self.image
        acl_id = self.keys.parts(kv.key)[1]
        if event.kind == "PUT":
            image.acls = {**image.acls, acl_id: StandardAcl.from_json(json.loads(kv.value))}
        else:
            image.acls = {k: v for k, v in image.acls.items() if k != acl_id}
        self._advance(kv.mod_revision)
        image.notify_acls()

    def _apply_put(self, key: bytes, value: bytes, mod_revision: int, create_revision: int) -> str | None:
        """Apply one key; returns the topic name when a topic or partition record changed."""
        parts = self.keys.parts(key)
        kind, image = parts[0], self.image
        if kind == "brokers":
            image.registered = {**image.registered, int(parts[1]): registration_from_json(json.loads(value))}
        elif kind == "alive":
            self._alive = {**self._alive, int(parts[1]): value.decode()}
            image.broker_epochs = {**image.broker_epochs, int(parts[1]): create_revision}
        elif kind == "controller":
            image.controller_id, image.controller_epoch = int(value), create_revision
        elif kind == "cluster_id":
            image.cluster_id = value.decode()
        elif kind == "acls":
            image.acls[parts[1]] = StandardAcl.from_json(json.loads(value))
        elif kind == "topics":
            self._topic_raw[parts[1]] = json.loads(value)
            return parts[1]
        elif kind == "partitions":
            self._parts[(parts[1], int(parts[2]))] = PartitionState.from_json(json.loads(value), mod_revision)
            return parts[1]
        elif kind == "group_configs":
            image.group_configs = {**image.group_configs, "/".join(parts[1:]): json.loads(value)}
        elif kind == "scram":
            image.scram_credentials = {**image.scram_credentials, "/".join(parts[1:]): json.loads(value)}
        elif kind == "quotas":
            image.client_quotas = {**image.client_quotas, "/".join(parts[1:]): json.loads(value)}
        elif kind == "features":
            image.finalized_features, image.features_epoch = json.loads(value), mod_revision
        return None

    def _apply_delete(self, key: bytes) -> str | None:
        parts = self.keys.parts(key)
        kind, image = parts[0], self.image
        if kind == "brokers":
            node_id = int(parts[1])
            image.registered = {k: v for k, v in image.registered.items() if k != node_id}
            if node_id == image.node_id and node_id in self._alive:
                self.own_registration_removed()
        elif kind == "alive":
            node_id = int(parts[1])
            self._alive = {k: v for k, v in self._alive.items() if k != node_id}
            image.broker_epochs = {k: v for k, v in image.broker_epochs.items() if k != node_id}
        elif kind == "controller":
            image.controller_id, image.controller_epoch = -1, 0
        elif kind == "topics":
            self._topic_raw.pop(parts[1], None)
            return parts[1]
        elif kind == "partitions":
            self._parts.pop((parts[1], int(parts[2])), None)
            return parts[1]
        elif kind == "group_configs":
            group_id = "/".join(parts[1:])
            image.group_configs = {g: c for g, c in image.group_configs.items() if g != group_id}
        elif kind == "scram":
            user = "/".join(parts[1:])
            image.scram_credentials = {u: c for u, c in image.scram_credentials.items() if u != user}
        elif kind == "quotas":
            entity = "/".join(parts[1:])
            image.client_quotas = {e: q for e, q in image.client_quotas.items() if e != entity}
        return None

    def _refresh_unfenced(self) -> None:
        """``brokers``: the registered brokers with a live, unfenced session."""
        alive = self._alive
        self.image.brokers = {n: b for n, b in self.image.registered.items()
                              if n in alive and not alive[n].endswith(FENCED_SESSION)}

    def _rebuild_topic(self, name: str) -> None:
        """A topic is visible once its record and every partition record are applied."""
        image = self.image
        raw = self._topic_raw.get(name)
        if raw is None:
            image.topics.pop(name, None)
            return
        parts = [self._parts.get((name, i)) for i in range(raw["partitions"])]
        if any(p is None for p in parts):
            if name not in image.topics:
                return
            old = image.topics[name]  # growing: keep serving the partitions already complete
            parts = [p if p is not None else (old.partitions[i] if i < len(old.partitions) else None)
                     for i, p in enumerate(parts)]
            parts = parts[:next((i for i, p in enumerate(parts) if p is None), len(parts))]
        image.topics = {**image.topics, name: TopicState(name, raw["topic_id"], parts, dict(raw.get("configs", {})))}
