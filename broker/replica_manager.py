"""The partitions this broker hosts: applying metadata, appends with acks, reads, replication.

Owns: the mapping (topic, partition) -> :class:`~broker.partition.Partition`; applying metadata
changes as Kafka's ``ReplicaManager.applyDelta`` does (make_leader: stop fetching, bump the
leader-epoch cache, coordinator election hooks; make_follower: start fetching from the leader,
resignation hooks; a replica no longer assigned here: stop and delete); acks (0/1 answer after
the leader append, all waits in the delayed-produce purgatory); ISR changes proposed by leaders
(expand when a follower catches up, shrink after ``replica.lag.time.max.ms``); opening the logs
of new topics (a single broker's, off the event loop) and deleting those of deleted ones; the
flush policy (group commit: one fsync covers every append queued behind it); waking long-poll
fetches. Topic administration itself is the controller's (``metadata.controller.replication``).

Start-up never deletes a partition directory on a metadata image that may lag: embedded, the
file store is the authority; clustered, only after a fresh read of the current assignment.

Differs from Kafka: one fetcher per source broker (``num.replica.fetchers`` is 1); no
fetch-from-follower; a replica removed by reassignment is deleted at once.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import structlog

from metadata.controller.replication import INTERNAL_TOPICS
from metadata.image import MetadataCache
from metadata.records import NO_LEADER, TopicState
from protocol import records as rb
from protocol.errors import ErrorCode, KafkaError
from storage.log import AppendInfo, Log, LogConfig
from storage.log_manager import LogManager

from . import topic_config
from .partition import Partition

PROGRESS_INTERVAL_S = 2.0  # long start-ups report progress this often, not per partition
NEW_LOGS_PER_TASK = 256  # a CreateTopics' new logs are made in tasks of this many partitions

log = structlog.get_logger("broker.replica_manager")


class ReplicaManager:
    def __init__(self, config, metadata: MetadataCache, store, log_manager: LogManager, metrics,
                 node_id: int) -> None:
        self.config = config
        self.metadata = metadata
        self.store = store  # ISR changes are written to it (a leader's AlterPartition)
        self.log_manager = log_manager
        self.metrics = metrics
        self.node_id = node_id
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._flush_lock = asyncio.Lock()
        # The logs the flush pass looks at (unflushed, with a finite flush.ms or flush.messages)
        # and the led partitions the ISR lag pass looks at: each pass costs what changed.
        self._flush_watch: set[Log] = set()
        self._lag_watch: set[tuple[str, int]] = set()
        self.fetchers = None  # ReplicaFetcherManager, clustered only
        # Coordinator hooks: (topic, partition, leader_epoch) on becoming leader / follower.
        self.on_leader: list[Callable[[str, int, int], None]] = []
        self.on_follower: list[Callable[[str, int, int], None]] = []
        self._background: set[asyncio.Task] = set()  # ISR writes

    @property
    def clustered(self) -> bool:
        return getattr(self.metadata, "clustered", False)

    # --- lookup -------------------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> Partition:
        """A hosted partition, leader or follower."""
        p = self.partitions.get((topic, partition))
        if p is None:
            if self.metadata.partition(topic, partition) is not None:
                raise KafkaError(ErrorCode.not_leader_or_follower,
                                 f"This server does not host {topic}-{partition}")
            raise KafkaError(ErrorCode.unknown_topic_or_partition,
                             f"This server does not host this topic-partition: {topic}-{partition}")
        return p

    def leader_partition(self, topic: str, partition: int, current_leader_epoch: int = -1) -> Partition:
        """The partition if this broker leads it, else the error Kafka answers a client."""
        part = self.get(topic, partition)
        part.check_leader(current_leader_epoch)
        return part

    def topic(self, name: str) -> TopicState | None:
        return self.metadata.topics.get(name)

    def min_isr(self, topic: str) -> int:
        t = self.metadata.topics.get(topic)
        raw = t.configs.get("min.insync.replicas") if t is not None else None
        return int(raw) if raw is not None else self.config["min.insync.replicas"]

    # --- lifecycle ------------------------------------------------------------------------------

    def open_all(self) -> None:
        """Open every assigned partition and take up its role (both steps of start-up)."""
        self.open_assigned()
        self.apply_delta(set(self.partitions), set())

    def open_assigned(self) -> None:
        """Open (recovering as needed) every partition assigned here, on
        ``num.recovery.threads.per.data.dir`` threads as Kafka's LogManager loads its logs
        (the file I/O overlaps; the partitions are then added in order). The image was just
        read from the authority (the embedded file, or a fresh etcd range read), so a directory
        it does not assign here is a stray and removed."""
        assigned = [(topic, i) for topic in self.metadata.topics.values()
                    for i, state in enumerate(topic.partitions)
                    if self.node_id in state.replicas or not self.clustered]
        configs = {topic.name: self._log_config(topic.name, topic.configs) for topic, _ in assigned}
        known = set()
        last_report = time.monotonic()
        with ThreadPoolExecutor(self.config["num.recovery.threads.per.data.dir"],
                                thread_name_prefix="log-recovery") as pool:
            opened = pool.map(lambda item: self._open_log(item[0], item[1], configs[item[0].name]), assigned)
            for done, ((topic, i), plog) in enumerate(zip(assigned, opened, strict=True), 1):
                self._add_partition(topic, i, plog)
                known.add((topic.name, i))
                if time.monotonic() - last_report >= PROGRESS_INTERVAL_S:
                    last_report = time.monotonic()
                    log.info("log_recovery_progress", partitions_opened=done, partitions=len(assigned))
        for orphan in set(self.log_manager.existing_partitions()) - known:
            log.warning("stray_partition_directory_removed", topic=orphan[0], partition=orphan[1],
                        reason="not assigned to this broker by the current metadata")
            self.log_manager.delete_log(*orphan)

    def _open_log(self, topic: TopicState, index: int, cfg: LogConfig) -> Log:
        """A start-up log, with the leader epoch the image gives this broker already in its
        cache (as make_leader would put it there: written before its first record)."""
        plog = self.log_manager.open_log(topic.name, index, cfg)
        state = topic.partitions[index]
        if state.leader == self.node_id:
            plog.leader_epochs.assign(state.leader_epoch, plog.log_end_offset, persist=False)
        return plog

    def _open_partition(self, topic: TopicState, index: int, cfg: LogConfig | None = None) -> Partition:
        part = self.partitions.get((topic.name, index))
        if part is not None:
            return part
        plog = self.log_manager.open_log(topic.name, index, cfg or self._log_config(topic.name, topic.configs))
        return self._add_partition(topic, index, plog)

    def _add_partition(self, topic: TopicState, index: int, plog: Log) -> Partition:
        part = self.partitions.get((topic.name, index))
        if part is None:
            part = self.partitions[(topic.name, index)] = Partition(topic.name, index, topic.uuid, plog, self.node_id)
            part.lag_watch = self._lag_watch
            part.min_isr = functools.partial(self.min_isr, topic.name)
            self._watch_flush(plog)
        return part

    def _watch_flush(self, plog: Log) -> None:
        """Let the flush pass see ``plog`` now and whenever its next append follows a flush,
        if it flushes on its own; one that does not is never watched (its settings changing
        calls this again)."""
        if not plog.config.flushes_on_its_own:
            plog.flush_watch = None
            self._flush_watch.discard(plog)
            return
        plog.flush_watch = self._flush_watch
        if plog.unflushed_messages:
            self._flush_watch.add(plog)

    def _log_config(self, name: str, configs: dict[str, str]) -> LogConfig:
        """The topic's log config: its overrides over the broker's defaults (and an internal
        topic's own)."""
        return topic_config.log_config(configs, self.config, name if name in INTERNAL_TOPICS else None)

    def apply_delta(self, changed: set[tuple[str, int]], deleted_topics: set[str]) -> None:
        """Make this broker leader, follower or neither of each changed partition."""
        configs: dict[str, LogConfig] = {}  # per topic, for the partitions this delta opens
        for key in sorted(changed):
            topic_name, index = key
            state = self.metadata.partition(topic_name, index)
            part = self.partitions.get(key)
            if state is None or (self.clustered and self.node_id not in state.replicas):
                if part is not None:
                    self._remove_partition(part, delete=True)
                continue
            if part is None:
                topic = self.metadata.topics[topic_name]
                if topic_name not in configs:
                    configs[topic_name] = self._log_config(topic_name, topic.configs)
                part = self._open_partition(topic, index, configs[topic_name])
            if state.leader == self.node_id:
                if self.fetchers is not None:
                    self.fetchers.remove_partition(part)
                if part.make_leader(state.leader_epoch, state.partition_epoch, state.replicas, state.isr):
                    log.debug("became_leader", topic=topic_name, partition=index, leader_epoch=state.leader_epoch,
                             isr=state.isr, log_end_offset=part.log.log_end_offset,
                             high_watermark=part.high_watermark)
                    for hook in self.on_leader:
                        hook(topic_name, index, state.leader_epoch)
            else:
                was_leader = part.is_leader
                if part.make_follower(state.leader, state.leader_epoch, state.partition_epoch,
                                      state.replicas, state.isr) or was_leader:
                    log.debug("became_follower", topic=topic_name, partition=index, leader=state.leader,
                             leader_epoch=state.leader_epoch)
                    if self.fetchers is not None:
                        self.fetchers.remove_partition(part)
                        if state.leader != NO_LEADER:
                            self.fetchers.add_partition(part, state.leader)
                    if was_leader:  # coordinators resign what they led, nothing else
                        for hook in self.on_follower:
                            hook(topic_name, index, state.leader_epoch)

    def _remove_partition(self, part: Partition, delete: bool) -> None:
        if self.fetchers is not None:
            self.fetchers.remove_partition(part)
        was_leader = part.is_leader
        part.make_follower(NO_LEADER, part.leader_epoch, part.partition_epoch, [], [])
        if was_leader:
            for hook in self.on_follower:
                hook(part.topic, part.index, part.leader_epoch)
        self.partitions.pop((part.topic, part.index), None)
        if delete:
            self.log_manager.delete_log(part.topic, part.index)
            log.info("replica_deleted", topic=part.topic, partition=part.index)

    # --- replicas of new and deleted topics (a single broker's embedded store) --------------------

    async def host_new_topics(self, topics: list[TopicState]) -> None:
        """Make the new topics' logs on ``num.recovery.threads.per.data.dir`` threads (a
        CreateTopics of thousands of partitions held the event loop for seconds, every other
        client waiting), then add their partitions on the loop. Meanwhile the topics are in
        the metadata without replicas here, which a client is told NOT_LEADER_OR_FOLLOWER
        (Kafka's window between the record and the log)."""
        configs = {t.name: self._log_config(t.name, t.configs) for t in topics}
        work = [(t, i, configs[t.name]) for t in topics for i in range(len(t.partitions))]
        loop = asyncio.get_running_loop()
        threads = self.config["num.recovery.threads.per.data.dir"]
        with ThreadPoolExecutor(threads, thread_name_prefix="log-create") as pool:
            chunks = [work[i:i + NEW_LOGS_PER_TASK] for i in range(0, len(work), NEW_LOGS_PER_TASK)]
            made = await asyncio.gather(*(loop.run_in_executor(pool, self._open_logs, chunk) for chunk in chunks))
        # Once per topic again: its configs may have been altered while the logs were made.
        configs = {t.name: self._log_config(t.name, t.configs) for t in topics}
        changed = set()
        for chunk, logs in zip(chunks, made, strict=True):
            for (topic, i, _), plog in zip(chunk, logs, strict=True):
                if self.metadata.topics.get(topic.name) is not topic:  # deleted while its logs were made
                    if topic.name not in self.metadata.topics:  # (and not made again: that log is its)
                        self.log_manager.delete_log(topic.name, i)
                    continue
                plog.config = configs[topic.name]
                self._add_partition(topic, i, plog)
                changed.add((topic.name, i))
        self.apply_delta(changed, set())
        for topic in topics:
            log.info("topic_created", topic=topic.name, partitions=len(topic.partitions),
                     topic_id=topic.topic_id, configs=topic.configs)

    def _open_logs(self, chunk: list[tuple[TopicState, int, LogConfig]]) -> list[Log]:
        return [self._open_log(topic, i, cfg) for topic, i, cfg in chunk]

    def host_new_partitions(self, name: str, before: int) -> None:
        """The partitions of ``name`` from ``before`` on are new: open them here and take them up."""
        topic = self.metadata.topics[name]
        cfg = self._log_config(name, topic.configs)
        for i in range(before, len(topic.partitions)):
            self._open_partition(topic, i, cfg)
        self.apply_delta({(name, i) for i in range(before, len(topic.partitions))}, set())

    def drop_topics(self, topics: list[TopicState]) -> None:
        """These topics are gone from the metadata: delete their replicas here."""
        for topic in topics:
            for i in range(len(topic.partitions)):
                part = self.partitions.get((topic.name, i))
                if part is not None:
                    self._remove_partition(part, delete=True)

    def apply_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        topic = self.metadata.topics[name]
        cfg = self._log_config(name, configs)
        for i in range(len(topic.partitions)):
            part = self.partitions.get((name, i))
            if part is not None:
                part.log.config = cfg
                self._watch_flush(part.log)
                part.maybe_increment_high_watermark()  # a lowered min.insync.replicas frees it

    # --- produce --------------------------------------------------------------------------------

    def append(self, topic: str, partition: int, records: bytes, *, client: bool = True,
               acks: int = 1) -> AppendInfo:
        """Append on the leader (acks=all checks min.insync.replicas first)."""
        part = self.get(topic, partition)
        info = part.append_records_to_leader(records, acks, self.min_isr(topic), client=client)
        if not info.duplicate:
            self.metrics.bytes_in.labels(topic).inc(len(records))
            self.metrics.messages_in.labels(topic).inc(info.record_count)
        return info

    def delayed_produce(self, topic: str, partition: int, next_offset: int) -> asyncio.Future | None:
        """acks=all: a future for the high watermark passing ``next_offset`` (None if it has)."""
        part = self.partitions.get((topic, partition))
        if part is None:
            return None
        return part.delayed_produce(next_offset, self.min_isr(topic))

    def check_verification(self, topic: str, partition: int, records: bytes, guard: object) -> None:
        """INVALID_TXN_STATE if the batch would start a transaction whose verification guard
        a marker cleared while the verification waited (KIP-890 part 1). Leadership is checked
        first, as Kafka's append does: a leader that lost the partition meanwhile answers
        NOT_LEADER_OR_FOLLOWER (retriable) rather than fail the transaction."""
        self.leader_partition(topic, partition).log.producer_state.check_verification(rb.parse_header(records), guard)

    def start_verification(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                           supports_epoch_bump: bool = False) -> object | None:
        """A verification guard for ``producer_id``'s transaction on a partition led here."""
        part = self.partitions.get((topic, partition))
        return None if part is None else part.log.producer_state.start_verification(producer_id, producer_epoch,
                                                                                    supports_epoch_bump)

    async def append_replicated(self, topic: str, partition: int, records: bytes, timeout_ms: int,
                                *, client: bool = False, verification_guard: object | None = None,
                                on_appended: Callable[[int], None] | None = None) -> AppendInfo:
        """An acks=all append for coordinators: returns once replicated, else raises;
        ``on_appended`` gets the base offset as soon as the batch is in the local log."""
        if verification_guard is not None:
            self.check_verification(topic, partition, records, verification_guard)
        info = self.append(topic, partition, records, client=client, acks=-1)
        if on_appended is not None:
            on_appended(info.base_offset)
        waiter = self.delayed_produce(topic, partition, info.last_offset + 1)
        if waiter is not None:
            try:
                code = await asyncio.wait_for(asyncio.shield(waiter), timeout_ms / 1000)
            except TimeoutError:
                raise KafkaError(ErrorCode.request_timed_out, "not replicated in time") from None
            if code:
                raise KafkaError(ErrorCode(code))
        if self.needs_flush(topic, partition):
            await self.flush([self.get(topic, partition).log])
        return info

    def append_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                      coordinator_epoch: int, commit: bool, transaction_version: int = 0) -> AppendInfo:
        """Append a transaction marker (WriteTxnMarkers); the LSO may advance."""
        return self.get(topic, partition).append_marker(producer_id, producer_epoch, coordinator_epoch, commit,
                                                        transaction_version)

    def apply_retention(self) -> int:
        """Delete the segments past retention; a partition whose log start moved is changed
        for its fetch sessions (a leader's) or its fetcher (a follower's). Segments deleted."""
        starts = {key: part.log.log_start_offset for key, part in self.partitions.items()}
        deleted = self.log_manager.apply_retention()
        for key, start in starts.items():
            part = self.partitions.get(key)
            if part is None or part.log.log_start_offset == start:
                continue
            if part.is_leader:
                part.wake_waiters()
            elif self.fetchers is not None:
                self.fetchers.position_changed(part)
        return deleted

    def needs_flush(self, topic: str, partition: int) -> bool:
        part = self.partitions.get((topic, partition))
        return part is not None and part.log.needs_flush(int(time.time() * 1000))

    async def flush(self, logs: list[Log] | None = None) -> None:
        """Group commit: whoever holds the lock fsyncs every dirty log, for everyone queued.
        Without ``logs``, the flush pass: the watched logs whose flush.ms or flush.messages is due."""
        async with self._flush_lock:
            now = int(time.time() * 1000)
            targets = logs if logs is not None else self._flush_candidates()
            due = [lg for lg in targets if lg.unflushed_messages and (logs is not None or lg.needs_flush(now))]
            if not due:
                return
            ends = [lg.log_end_offset for lg in due]
            await asyncio.to_thread(_fsync_all, due)
            for lg, end in zip(due, ends):
                lg.recovery_point = max(lg.recovery_point, end)
                lg.last_flush_ms = now
                if lg.log_end_offset == end:
                    lg.unflushed_messages = 0

    def _flush_candidates(self) -> list[Log]:
        """The watched logs that may come due; a log flushed since or deleted leaves the watch
        until its next append after a flush (one whose settings stop flushing it on its own
        leaves it when they change, in ``_watch_flush``)."""
        out = []
        for lg in list(self._flush_watch):
            part = self.partitions.get((lg.topic, lg.partition))
            if part is None or part.log is not lg or not lg.unflushed_messages:
                self._flush_watch.discard(lg)
            else:
                out.append(lg)
        return out

    # --- follower fetches on the leader, ISR changes ------------------------------------------------

    def on_follower_fetch(self, part: Partition, replica_id: int, fetch_offset: int,
                          log_start_offset: int = -1, broker_epoch: int = -1) -> None:
        proposed = part.update_follower_fetch_state(replica_id, fetch_offset, int(time.time() * 1000),
                                                    log_start_offset)
        if proposed is not None and self._isr_eligible(replica_id, broker_epoch):
            self._propose_isr(part, proposed, "caught_up", {replica_id: broker_epoch})

    def _isr_eligible(self, replica_id: int, broker_epoch: int = -1) -> bool:
        """KIP-841: a fenced broker (still starting, or its session lapsed) and one in controlled
        shutdown do not join an ISR, however caught up, as Kafka's isReplicaIsrEligible.
        KIP-903: nor does a fetch that names a broker epoch other than the broker's current
        one (an earlier life's fetch, its log since lost or cut); -1 (before Fetch v15) is
        not checked, as in Kafka."""
        broker = self.metadata.brokers.get(replica_id)
        if broker is None or broker.controlled_shutdown:
            return False
        return broker_epoch == -1 or broker_epoch == self.metadata.broker_epoch(replica_id)

    def shrink_isr_pass(self) -> None:
        """Drop followers that have not caught up within replica.lag.time.max.ms (leader side).
        Only the partitions appended to (or led anew) since their ISR was last at the log end
        are looked at; the rest cannot lag."""
        now = int(time.time() * 1000)
        max_lag = self.config["replica.lag.time.max.ms"]
        for key in list(self._lag_watch):
            part = self.partitions.get(key)
            if part is None or not part.is_leader or part.isr_at_log_end():
                self._lag_watch.discard(key)
                continue
            if part.pending_isr is None:
                lagging = part.lagging_replicas(now, max_lag)
                if lagging:
                    self._propose_isr(part, [r for r in part.isr if r not in lagging], "lagging")

    def _propose_isr(self, part: Partition, isr: list[int], reason: str,
                     joining: dict[int, int] | None = None) -> None:
        """Write ``isr`` in the background; ``joining``: replica -> the broker epoch its fetch
        named, which must still be the broker's when the ISR is written."""
        if not self.clustered or part.pending_isr is not None:
            return
        part.pending_isr = isr
        task = asyncio.get_running_loop().create_task(self._alter_isr(part, isr, reason, joining or {}))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _alter_isr(self, part: Partition, isr: list[int], reason: str, joining: dict[int, int]) -> None:
        state = self.metadata.partition(part.topic, part.index)
        try:
            if state is None or state.leader != self.node_id or state.leader_epoch != part.leader_epoch:
                return
            proposed = [r for r in isr if r in state.replicas]  # Kafka's controller refuses others
            if sorted(proposed) == sorted(state.isr):
                return
            new = replace(state, isr=proposed, partition_epoch=state.partition_epoch + 1)
            epochs = {r: e for r, e in joining.items() if e != -1 and r in proposed}
            written = await self.store.alter_partitions([(part.topic, part.index, new, state.mod_revision)],
                                                        broker_epochs=epochs)
            log.info("isr_changed" if written else "isr_change_refused", topic=part.topic,
                     partition=part.index, isr=proposed, before=state.isr, reason=reason,
                     leader_epoch=part.leader_epoch)
        except Exception as exc:
            log.warning("isr_change_failed", topic=part.topic, partition=part.index, error=repr(exc))
        finally:
            if part.pending_isr is isr:
                part.pending_isr = None  # the watch brings the committed ISR (make_leader)

    # --- fetch long poll -------------------------------------------------------------------------

    async def wait_for_data(self, partitions: list[Partition], timeout_s: float,
                            fut: asyncio.Future | None = None) -> bool:
        """Until one of ``partitions`` is woken (new data, a new high watermark, a leadership
        change), ``fut`` (if given) is set by its owner, or the timeout; False on the timeout."""
        if timeout_s <= 0 or not (partitions or fut):
            return False
        fut = fut or asyncio.get_running_loop().create_future()
        for p in partitions:
            p.waiters.append(fut)
        try:
            # asyncio.wait leaves ``fut`` as it is on the timeout: a session's waiter is shared
            # by every fetch of that session waiting at once.
            done, _ = await asyncio.wait((fut,), timeout=timeout_s)
            return bool(done)
        finally:
            for p in partitions:
                try:
                    p.waiters.remove(fut)
                except ValueError:
                    pass

    def wake_all(self) -> None:
        for p in self.partitions.values():
            p.wake_waiters()

    def led_partitions(self) -> list[Partition]:
        return [p for p in self.partitions.values() if p.is_leader]


def _fsync_all(logs: list[Log]) -> None:
    for lg in logs:
        for seg in lg.segments:
            if seg.dirty:
                seg.flush()
