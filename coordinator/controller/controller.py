"""The controller: replica assignment, leader election, ISR fencing, preferred-leader balance.

Owns the decisions that Kafka's QuorumController makes, taken on the metadata image and written
to the store by compare-and-swap:

- ``assign_replicas``: spread partitions over the unfenced brokers (rack-aware when brokers have
  ``broker.rack``), Kafka's round-robin with a shifted follower start, adding fenced brokers
  last only when the factor needs more brokers than are unfenced (KRaft's placer);
  INVALID_REPLICATION_FACTOR when the factor exceeds the registered broker count or every
  broker is fenced.
- One controller at a time (etcd backend): the broker that creates the ``controller`` key under
  its lease; the key's create_revision is the controller epoch and every write compares it, so
  a deposed controller resumed from a pause cannot write.
- Reconciliation, triggered by image changes: a change of the brokers (registration, session,
  controlled shutdown), of the controller or of a topic's configs, and the first pass of a new
  controller, look at every partition; a change of some partitions looks at those only, so an
  idle cluster costs nothing however many partitions it has. A partition whose
  leader is gone (lease expired) or shutting down (controlled shutdown) gets a new leader from
  its ISR, in replica order, with the leader epoch bumped; no live ISR member means no leader
  (NO_LEADER) unless ``unclean.leader.election.enable``; brokers that are gone leave every ISR;
  with ``auto.leader.rebalance.enable`` a partition goes back to its preferred (first) replica
  once that replica is back in the ISR; a reassignment (KIP-455) completes once every target
  replica is in the ISR.
- Admin decisions (ElectLeaders, AlterPartitionReassignments) as pure functions of a
  partition's state, written by the broker that received the request with the same
  compare-and-swap.

Differs from Kafka: ISR shrink/expand on lag is written by the partition leader itself (see
``etcd_store``); elections are checked on every image change instead of on broker heartbeats.
With racks, Kafka's placer may put a follower on a fenced broker of a rack not yet used rather
than on an unfenced one of a used rack; this one keeps to the unfenced brokers while they
suffice.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import replace
from typing import Protocol

import structlog

from protocol.errors import ErrorCode, KafkaError

from .metadata import NO_LEADER, BrokerRegistration, PartitionState

log = structlog.get_logger("controller")


def assign_replicas(num_partitions: int, replication_factor: int, brokers: dict[int, str | None],
                    start_partition: int = 0, seed: int | None = None,
                    fenced: set[int] = frozenset()) -> list[list[int]]:
    """Replica lists for ``num_partitions`` new partitions (Kafka's AdminUtils shape): leaders
    round-robin from a random start, followers shifted so replicas of neighbouring partitions
    differ; with racks, the broker order alternates racks so each partition spans racks.

    ``brokers``: every registered broker (with its rack); ``fenced``: those of them that may
    hold a replica but not lead (fenced or shutting down). As KRaft's StripedReplicaPlacer, the
    replicas are placed on the unfenced brokers, and only a factor larger than they can hold
    adds fenced ones, last (never leading)."""
    check_replication_factor(replication_factor, len(brokers))
    active = {b: rack for b, rack in brokers.items() if b not in fenced}
    if not active:
        raise KafkaError(ErrorCode.invalid_replication_factor,
                         f"Unable to replicate the partition {replication_factor} time(s): "
                         f"All brokers are currently fenced.")
    placed = _place(num_partitions, min(replication_factor, len(active)), active, start_partition, seed)
    spare = _rack_alternated({b: rack for b, rack in brokers.items() if b in fenced})
    missing = replication_factor - len(active)
    for i, replicas in enumerate(placed):
        p = start_partition + i
        replicas += [spare[(p + j) % len(spare)] for j in range(missing)]
    return placed


def _place(num_partitions: int, replication_factor: int, brokers: dict[int, str | None],
           start_partition: int, seed: int | None) -> list[list[int]]:
    ordered = _rack_alternated(brokers)
    n = len(ordered)
    racks = {b: brokers[b] or "" for b in ordered}
    num_racks = len(set(racks.values()))
    rack_aware = any(brokers.values())
    rnd = random.Random(seed)
    start = rnd.randrange(n)
    shift = rnd.randrange(n)
    out = []
    for p in range(start_partition, start_partition + num_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [ordered[first]]
        if not rack_aware:
            replicas += [ordered[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)]
        else:  # Kafka's assignReplicasToBrokersRackAware: a new rack first, while one is left
            used_racks, k = {racks[replicas[0]]}, 0
            while len(replicas) < replication_factor:
                broker = ordered[_replica_index(first, shift * num_racks, k, n)]
                k += 1
                if (racks[broker] not in used_racks or len(used_racks) == num_racks) \
                        and broker not in replicas:
                    replicas.append(broker)
                    used_racks.add(racks[broker])
        out.append(replicas)
    return out


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n if n > 1 else first


def check_replication_factor(replication_factor: int, registered: int) -> None:
    """INVALID_REPLICATION_FACTOR with Kafka 4's words when the factor cannot be met."""
    if replication_factor <= 0:
        raise KafkaError(ErrorCode.invalid_replication_factor, "Replication factor must be larger than 0, or -1 to use the default value.")
    if replication_factor > registered:
        raise KafkaError(ErrorCode.invalid_replication_factor,
                         f"Unable to replicate the partition {replication_factor} time(s): The target "
                         f"replication factor of {replication_factor} cannot be reached because only "
                         f"{registered} broker(s) are registered or some brokers have all their log "
                         f"directories cordoned.")


def _rack_alternated(brokers: dict[int, str | None]) -> list[int]:
    if not any(brokers.values()):
        return sorted(brokers)
    by_rack: dict[str, list[int]] = {}
    for node, rack in sorted(brokers.items()):
        by_rack.setdefault(rack or "", []).append(node)
    racks = sorted(by_rack)
    out = []
    for i in range(max(len(v) for v in by_rack.values())):
        out.extend(by_rack[r][i] for r in racks if i < len(by_rack[r]))
    return out


def elect(state: PartitionState, live: set[int], alive: set[int], *, unclean: bool,
          preferred: bool) -> PartitionState | None:
    """The new state of one partition for the live brokers, or None when nothing changes.

    ``alive``: registered brokers; ``live``: those of them not shutting down (may lead)."""
    isr = [r for r in state.isr if r in alive]
    leader = state.leader
    if leader not in live:
        candidates = [r for r in state.replicas if r in isr and r in live]
        if candidates:
            leader = candidates[0]
            isr = [r for r in isr if r in live]
        elif unclean and any(r in live for r in state.replicas):
            leader = next(r for r in state.replicas if r in live)
            isr = [leader]
        elif leader in alive:
            pass  # shutting down with nobody to take over: it leads until it is gone
        else:
            leader = NO_LEADER
            isr = isr or state.isr[:1]  # keep the last ISR member: it may come back
    elif preferred and state.preferred_leader != leader and state.preferred_leader in live \
            and state.preferred_leader in isr:
        leader = state.preferred_leader
    isr = [r for r in isr if r in live or r == leader] if leader != NO_LEADER else isr
    if leader == state.leader and isr == state.isr:
        return None
    epoch = state.leader_epoch + (1 if leader != state.leader else 0)
    return replace(state, leader=leader, leader_epoch=epoch, isr=isr,
                   partition_epoch=state.partition_epoch + 1)


def fence_restarted(state: PartitionState, node: int, live: set[int]) -> PartitionState | None:
    """A broker that (re)starts must catch up before it counts: it leaves the ISR, and any
    leadership it held goes to a live ISR peer (KRaft fences a newly registered broker the
    same way). When it is the only live ISR member it keeps leading, with a new leader epoch,
    so no follower ever compares its log against the previous life's epoch."""
    if node not in state.isr:
        return None
    others = [r for r in state.replicas if r in state.isr and r != node and r in live]
    if not others:
        if state.leader != node:
            return None
        return replace(state, leader_epoch=state.leader_epoch + 1, isr=[node],
                       partition_epoch=state.partition_epoch + 1)
    leader = state.leader if state.leader not in (node, NO_LEADER) else others[0]
    return replace(state, leader=leader, leader_epoch=state.leader_epoch + int(leader != state.leader),
                   isr=[r for r in state.isr if r != node], partition_epoch=state.partition_epoch + 1)


def elect_preferred(state: PartitionState, live: set[int]) -> tuple[PartitionState | None, int]:
    """ElectLeaders PREFERRED: (new state, 0), or (None, ELECTION_NOT_NEEDED /
    PREFERRED_LEADER_NOT_AVAILABLE)."""
    preferred = state.preferred_leader
    if state.leader == preferred:
        return None, ErrorCode.election_not_needed
    if preferred not in live or preferred not in state.isr:
        return None, ErrorCode.preferred_leader_not_available
    return replace(state, leader=preferred, leader_epoch=state.leader_epoch + 1,
                   partition_epoch=state.partition_epoch + 1), 0


def elect_unclean(state: PartitionState, live: set[int], alive: set[int]) -> tuple[PartitionState | None, int]:
    """ElectLeaders UNCLEAN: only for a partition without a live leader; an ISR member first,
    else any live replica (which may lose records the ISR had)."""
    if state.leader in live:
        return None, ErrorCode.election_not_needed
    new = elect(state, live, alive, unclean=True, preferred=False)
    if new is None or new.leader == NO_LEADER:
        return None, ErrorCode.eligible_leaders_not_available
    return new, 0


def start_reassignment(state: PartitionState, target: list[int]) -> PartitionState:
    """KIP-455: replicas become target + the ones leaving; the leaving ones go once every
    target replica is in the ISR (``complete_reassignment``)."""
    current = [r for r in state.replicas if r not in state.adding_replicas] if state.adding_replicas \
        else state.replicas
    adding = [r for r in target if r not in current]
    removing = [r for r in current if r not in target]
    if not adding and not removing:
        return replace(state, replicas=list(target), adding_replicas=[], removing_replicas=[],
                       partition_epoch=state.partition_epoch + 1)
    return replace(state, replicas=list(target) + removing, adding_replicas=adding,
                   removing_replicas=removing, partition_epoch=state.partition_epoch + 1)


def cancel_reassignment(state: PartitionState) -> PartitionState | None:
    if not state.adding_replicas and not state.removing_replicas:
        return None
    original = [r for r in state.replicas if r not in state.adding_replicas]
    isr = [r for r in state.isr if r in original] or state.isr
    leader = state.leader if state.leader in original else (isr[0] if isr else NO_LEADER)
    return replace(state, replicas=original, isr=isr, leader=leader, adding_replicas=[], removing_replicas=[],
                   leader_epoch=state.leader_epoch + (leader != state.leader),
                   partition_epoch=state.partition_epoch + 1)


def complete_reassignment(state: PartitionState, live: set[int]) -> PartitionState | None:
    """Finish a reassignment once every target replica is in the ISR."""
    if not state.adding_replicas and not state.removing_replicas:
        return None
    target = [r for r in state.replicas if r not in state.removing_replicas]
    if not all(r in state.isr for r in target):
        return None
    isr = [r for r in state.isr if r in target]
    leader = state.leader
    if leader not in target:
        leader = next((r for r in target if r in isr and r in live), NO_LEADER)
    return replace(state, replicas=target, isr=isr, leader=leader, adding_replicas=[], removing_replicas=[],
                   leader_epoch=state.leader_epoch + (leader != state.leader),
                   partition_epoch=state.partition_epoch + 1)


class ControllerStore(Protocol):
    node_id: int
    controller_id: int
    controller_epoch: int
    brokers: dict[int, BrokerRegistration]
    topics: dict
    connected: bool

    async def campaign(self) -> int: ...

    async def alter_partitions(self, changes, controller_epoch: int | None = None) -> set: ...


class Controller:
    """Runs on every broker; acts only while this broker holds the controller key."""

    def __init__(self, store: ControllerStore, config) -> None:
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
        return self.epoch > 0 and self.store.controller_id == self.store.node_id \
            and self.store.controller_epoch == self.epoch

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
        if self.store.controller_id == self.store.node_id and self.store.controller_epoch:
            if self.epoch != self.store.controller_epoch:
                self.epoch = self.store.controller_epoch
                log.info("controller_elected", node_id=self.store.node_id, controller_epoch=self.epoch)
            return
        if self.epoch:
            log.info("controller_resigned", node_id=self.store.node_id, controller_epoch=self.epoch)
            self.epoch = 0
        if self.store.controller_id < 0:
            epoch = await self.store.campaign()
            if epoch:
                self.epoch = epoch
                log.info("controller_elected", node_id=self.store.node_id, controller_epoch=epoch)

    async def reconcile(self) -> None:
        brokers = self.store.brokers
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
        topics = self.store.topics
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
