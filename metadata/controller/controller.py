"""The active controller: leader election, ISR fencing, preferred-leader balance, reassignments.

Owns the loop Kafka's QuorumController runs for partitions, taken on the metadata image and
written to the store by compare-and-swap (the decisions themselves are
:mod:`.partition_change`'s pure functions):

- One controller at a time (etcd backend): the broker that creates the ``controller`` key under
  its lease (:mod:`metadata.etcd.election`); the key's create_revision is the controller epoch
  and every write compares it, so a deposed controller resumed from a pause cannot write.
- Reconciliation, triggered by image changes: a change of the brokers (registration, session,
  controlled shutdown), of the controller or of a topic's configs, and the first pass of a new
  controller, look at every partition; a change of some partitions looks at those only, so an
  idle cluster costs nothing however many partitions it has. A partition whose leader is gone
  (lease expired) or shutting down (controlled shutdown) gets a new leader from its ISR;
  brokers that are gone leave every ISR; with ``auto.leader.rebalance.enable`` a partition goes
  back to its preferred replica; a reassignment (KIP-455) completes once every target replica
  is in the ISR.

Differs from Kafka: ISR shrink/expand on lag is written by the partition leader itself (a
compare-and-swap on the partition record, as Kafka's ZooKeeper mode did) instead of an
AlterPartition to the controller; elections are checked on every image change instead of on
broker heartbeats; no decision is taken while the store is unreachable (the image may be stale).
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

import structlog

from protocol.errors import KafkaError

from ..image import MetadataCache
from .partition_change import complete_reassignment, elect

__all__ = ["Controller", "ControllerStore"]

log = structlog.get_logger("controller")


class ControllerStore(Protocol):
    connected: bool

    async def campaign(self) -> int: ...

    def holds_controller(self, epoch: int) -> bool: ...

    async def remove_stale_controller(self, epoch: int) -> None: ...

    async def alter_partitions(self, changes, controller_epoch: int | None = None) -> set: ...


class Controller:
    """Runs on every broker; acts only while this broker holds the controller key."""

    def __init__(self, image: MetadataCache, store: ControllerStore, config) -> None:
        self.image = image
        self.store = store
        self.config = config
        self.epoch = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._stopped = False
        self._last_rebalance = time.monotonic()
        self._reconciled_epoch = 0  # the epoch whose first, full pass is done
        self._all_changed = True  # the next pass looks at every partition
        self._changed: set[tuple[str, int]] = set()  # else at these

    @property
    def is_active(self) -> bool:
        return self.epoch > 0 and self.image.controller_id == self.image.node_id \
            and self.image.controller_epoch == self.epoch

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        # A cancelled etcd call surfaces as the client's own error, which the loop survives:
        # the flag is what ends it.
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task], timeout=2)

    def wake(self, *_args) -> None:
        """Something every partition's decision depends on changed (brokers, configs)."""
        self._all_changed = True
        self._wake.set()

    def partitions_changed(self, partitions: set[tuple[str, int]]) -> None:
        self._changed |= partitions
        self._wake.set()

    async def _run(self) -> None:
        interval = 0.25
        first = True
        while not self._stopped:
            if not first:
                try:
                    await asyncio.wait_for(self._wake.wait(), interval)
                except TimeoutError:
                    pass
            first = False
            self._wake.clear()
            if not self.store.connected:
                continue  # no decisions on an image that may be stale
            try:
                await self._campaign_if_vacant()
                if self.is_active:
                    await self.reconcile()
                else:
                    self._changed.clear()  # a new controller starts with a full pass
            except KafkaError as exc:
                log.warning("controller_pass_failed", error=exc.message or exc.code.name)
            except Exception:
                if not self._stopped:
                    log.exception("controller_pass_failed")

    async def _campaign_if_vacant(self) -> None:
        if self.image.controller_id == self.image.node_id and self.image.controller_epoch:
            if not self.store.holds_controller(self.image.controller_epoch):
                # The key names this node but is not this process's: its previous life's (a
                # restart after kill -9) or one whose lease it lost. Not acted on; removed.
                if self.epoch:
                    log.info("controller_resigned", node_id=self.image.node_id, controller_epoch=self.epoch)
                    self.epoch = 0
                await self.store.remove_stale_controller(self.image.controller_epoch)
                return
            if self.epoch != self.image.controller_epoch:
                self.epoch = self.image.controller_epoch
                log.info("controller_elected", node_id=self.image.node_id, controller_epoch=self.epoch)
            return
        if self.epoch:
            log.info("controller_resigned", node_id=self.image.node_id, controller_epoch=self.epoch)
            self.epoch = 0
        if self.image.controller_id < 0:
            epoch = await self.store.campaign()
            if epoch:
                self.epoch = epoch
                log.info("controller_elected", node_id=self.image.node_id, controller_epoch=epoch)

    async def reconcile(self) -> None:
        brokers = self.image.brokers
        alive = set(brokers)
        live = {n for n, b in brokers.items() if not b.controlled_shutdown}
        now = time.monotonic()
        preferred = False
        if self.config["auto.leader.rebalance.enable"]:
            interval = self.config["leader.imbalance.check.interval.seconds"]
            if now - self._last_rebalance >= interval:
                preferred, self._last_rebalance = True, now
        full = self._all_changed or preferred or self._reconciled_epoch != self.epoch
        changed, self._changed, self._all_changed = self._changed, set(), False
        try:
            await self._reconcile(self._partitions(None if full else changed), alive, live, preferred)
        except BaseException:
            self._all_changed = True  # not done: the next pass looks at everything again
            raise
        self._reconciled_epoch = self.epoch

    def _partitions(self, keys: set[tuple[str, int]] | None):
        """(topic, index, state) of every partition (``keys`` None) or of those keys."""
        topics = self.image.topics
        if keys is None:
            for topic in list(topics.values()):
                for index, state in enumerate(topic.partitions):
                    yield topic, index, state
            return
        for name, index in keys:
            topic = topics.get(name)
            if topic is not None and index < len(topic.partitions):
                yield topic, index, topic.partitions[index]

    async def _reconcile(self, partitions, alive: set[int], live: set[int], preferred: bool) -> None:
        unclean_default = self.config["unclean.leader.election.enable"]
        changes = []
        for topic, index, state in partitions:
            unclean = str(topic.configs.get("unclean.leader.election.enable", unclean_default)).lower() == "true"
            new = complete_reassignment(state, live)
            if new is None:
                new = elect(state, live, alive, unclean=unclean, preferred=preferred)
            if new is not None:
                changes.append((topic.name, index, new, state.mod_revision))
        if not changes:
            return
        written = await self.store.alter_partitions(changes, controller_epoch=self.epoch)
        for topic, index, new, _ in changes:
            if (topic, index) in written:
                log.info("partition_leader_elected", topic=topic, partition=index, leader=new.leader,
                         leader_epoch=new.leader_epoch, isr=new.isr, controller_epoch=self.epoch)
