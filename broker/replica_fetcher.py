"""Follower replication: one fetcher task per source broker, Kafka's follower-fetch protocol.

Owns: the partitions this broker follows, grouped by their leader; each group is fetched by
one task on its own connection with Fetch v15 (topics by id; the replica state carries this
broker's id and its broker epoch, KIP-903, so that a leader takes no fetch of an earlier life
of this broker as a reason to put it back in an ISR; fetch offset = our log end offset,
``last_fetched_epoch`` = our latest leader epoch). A response's records are appended as
they are (offsets and epochs assigned by the leader; producer state and the aborted-transaction
index rebuilt from the batches); the follower's high watermark is min(leader's, own log end
offset). A ``diverging_epoch`` answer truncates the log to where it agrees with the leader
(Kafka's KIP-320 truncation), and the next fetch checks again.

Each fetcher keeps a fetch session (KIP-227) with its leader: after the first, full fetch a
request names only the partitions whose position or epochs changed, and the leader answers
only partitions with news (:mod:`broker.fetch_session`). Building that request looks only at
the partitions the fetcher was given, appended to or truncated since the last one (and those
whose log start retention moved), so a round trip costs what changed on both ends.

A partition answered with an error (a leader that does not lead it yet or any more, an
unknown partition) or whose divergence truncation did not resolve backs off alone for
``replica.fetch.backoff.ms``, out of the session meanwhile, as Kafka's fetcher delays
partitions; the others keep replicating. The whole fetcher backs off only after a failed
round trip or a session error, or while every partition is backing off.

Differs from Kafka: a follower whose log is below the leader's log start offset starts over
from an empty log.
"""

from __future__ import annotations

import asyncio
import datetime
import time
import uuid
from collections.abc import Callable

import structlog
from kio.schema.fetch.v15.request import (
    FetchPartition,
    FetchRequest,
    FetchTopic,
    ForgottenTopic,
    ReplicaState,
)

from protocol.errors import ErrorCode
from protocol.fast import decode_fetch_response_v15
from storage.leader_epoch import UNDEFINED_EPOCH

from .fetch_session import FetchSessionHandler
from .network_client import NetworkClient
from .partition import Partition

log = structlog.get_logger("broker.replica_fetcher")

FETCH_VERSION = 15


class ReplicaFetcher:
    def __init__(self, node_id: int, leader_id: int, resolve: Callable[[int], tuple[str, int] | None],
                 config, on_fetched: Callable[[Partition], None],
                 broker_epoch: Callable[[], int] = lambda: -1) -> None:
        self.node_id = node_id
        self.leader_id = leader_id
        self.config = config
        self.broker_epoch = broker_epoch
        self.partitions: dict[tuple[str, int], Partition] = {}
        # Topic names by id, for the answers (by id since v13); kept for removed partitions too.
        self.topic_names: dict[uuid.UUID, str] = {}
        # The topic id each partition was last sent under in this session: a partition is
        # forgotten under that id, even after its topic was deleted and made again (a new id).
        self.sent_ids: dict[tuple[str, int], uuid.UUID] = {}
        # What the next incremental fetch looks at: partitions whose fetch position may have
        # moved (added, appended to, truncated) and those no longer followed.
        self.pending: set[tuple[str, int]] = set()
        self.removed: set[tuple[str, int]] = set()
        self.asked: dict[tuple[str, int], tuple[Partition, FetchPartition]] = {}  # as the leader's session holds them
        # Partitions backing off after an error, until a time.monotonic(): left out of the
        # session meanwhile, so the others go on (Kafka's delayed partitions).
        self.delayed: dict[tuple[str, int], float] = {}
        self.backoff_s = config["replica.fetch.backoff.ms"] / 1000
        self.client = NetworkClient.to_peers(f"replica-fetcher-{node_id}-from-{leader_id}", resolve, config,
                                             timeout=config["replica.fetch.wait.max.ms"] / 1000 + 10)
        self.changed = asyncio.Event()
        self.on_fetched = on_fetched
        self.session = FetchSessionHandler()
        self.task = asyncio.get_running_loop().create_task(self._run())
        self._failures = 0
        self._last_failure_log = 0.0
        self._last_divergence_log = 0.0

    def add(self, part: Partition) -> None:
        key = (part.topic, part.index)
        self.partitions[key] = part
        self.topic_names[part.topic_id] = part.topic
        if self.sent_ids.get(key, part.topic_id) != part.topic_id:
            self.session.resend(key)  # the leader's session holds the earlier topic's partition
        self.pending.add(key)
        self.removed.discard(key)
        self.delayed.pop(key, None)
        self.changed.set()

    def remove(self, part: Partition) -> None:
        key = (part.topic, part.index)
        if self.partitions.pop(key, None) is not None:
            self.pending.discard(key)
            self.removed.add(key)
            self.delayed.pop(key, None)

    def position_changed(self, part: Partition) -> None:
        """The partition's log start or end moved outside this fetcher (retention)."""
        key = (part.topic, part.index)
        if self.partitions.get(key) is part:
            self.pending.add(key)

    async def stop(self) -> None:
        self.task.cancel()
        try:
            await self.task
        except (asyncio.CancelledError, Exception):
            pass
        self.client.close()

    async def _run(self) -> None:
        backoff = self.backoff_s
        while True:
            if not self.partitions:
                self.changed.clear()
                await self.changed.wait()
                continue
            wait = self._release_delayed()
            if wait > 0:  # every partition is backing off
                await asyncio.sleep(wait)
                continue
            try:
                request = self._build_request()
                response = await self.client.send_request(self.leader_id, 1, FETCH_VERSION, request,
                                                          decoder=decode_fetch_response_v15)
                error_code, session_id, topics = response
                ok = self.session.handle_response(error_code, session_id)
                if ok:
                    self._process(topics)
            except asyncio.CancelledError:
                self.session.handle_error()
                raise
            except Exception as exc:  # a replica must never stop fetching for good: log, back off, retry
                self.session.handle_error()
                self._fetch_failed(exc)
                await asyncio.sleep(backoff)
                continue
            if self._failures:
                log.info("replica_fetch_recovered", leader=self.leader_id, failures=self._failures)
                self._failures = 0
            if not ok:  # a session error: the next fetch is a full one, after the backoff
                await asyncio.sleep(backoff)

    def _delay(self, key: tuple[str, int]) -> None:
        """Back off from one partition: out of the session until ``backoff_s`` has passed."""
        self.delayed[key] = time.monotonic() + self.backoff_s
        self.pending.discard(key)
        self.removed.add(key)

    def _release_delayed(self) -> float:
        """Partitions whose backoff is over fetch again; seconds until one does when every
        partition is backing off (0: something to fetch now)."""
        if not self.delayed:
            return 0.0
        now = time.monotonic()
        for key in [k for k, due in self.delayed.items() if due <= now]:
            del self.delayed[key]
            if key in self.partitions:
                self.pending.add(key)
                self.removed.discard(key)
        if self.delayed and len(self.delayed) >= len(self.partitions):
            return max(0.001, min(self.delayed.values()) - now)
        return 0.0

    def _fetch_failed(self, exc: Exception) -> None:
        """Log the first failure and then one line every 10 s while they last."""
        self._failures += 1
        now = time.monotonic()
        if self._failures == 1 or now - self._last_failure_log >= 10:
            self._last_failure_log = now
            if isinstance(exc, (ConnectionError, OSError, TimeoutError)):
                log.warning("replica_fetch_failed", leader=self.leader_id, error=str(exc), failures=self._failures)
            else:
                log.exception("replica_fetch_failed", leader=self.leader_id, failures=self._failures)

    def _fetch_partitions(self, parts: dict[tuple[str, int], Partition]) -> dict[tuple[str, int], FetchPartition]:
        """These partitions as the leader should now see them."""
        max_bytes = self.config["replica.fetch.max.bytes"]
        out = {}
        for (topic, index), part in parts.items():
            plog = part.log
            out[(topic, index)] = FetchPartition(
                partition=index, current_leader_epoch=part.leader_epoch,
                fetch_offset=plog.log_end_offset, last_fetched_epoch=plog.leader_epochs.latest_epoch,
                log_start_offset=plog.log_start_offset, partition_max_bytes=max_bytes)
        return out

    def _build_request(self) -> FetchRequest:
        """A full fetch names every partition; an incremental one looks only at those pending
        (Kafka's follower builds every partition's state each time)."""
        if self.session.full:
            changed = {k: p for k, p in self.partitions.items() if k not in self.delayed}
            removed: set | tuple = ()
            self.asked, self.sent_ids = {}, {}
        else:
            changed = {k: self.partitions[k] for k in self.pending if k in self.partitions and k not in self.delayed}
            removed = self.removed
        self.pending, self.removed = set(), set()
        wanted = self._fetch_partitions(changed)
        session_id, epoch, send, forget = self.session.build(wanted, removed)
        for key, fp in wanted.items():
            self.asked[key] = (changed[key], fp)
        for key in removed:
            self.asked.pop(key, None)
        by_topic: dict[uuid.UUID, list[FetchPartition]] = {}
        forgotten: dict[uuid.UUID, list[int]] = {}
        for key in send:
            topic_id = changed[key].topic_id
            before = self.sent_ids.get(key)
            if before is not None and before != topic_id:  # its topic was made again: a new partition
                forgotten.setdefault(before, []).append(key[1])
            self.sent_ids[key] = topic_id
            by_topic.setdefault(topic_id, []).append(wanted[key])
        for key in forget:
            topic_id = self.sent_ids.pop(key, None)
            if topic_id is not None:  # else never in this session: nothing to forget
                forgotten.setdefault(topic_id, []).append(key[1])
        return FetchRequest(
            cluster_id=None, replica_state=ReplicaState(replica_id=self.node_id, replica_epoch=self.broker_epoch()),
            max_wait=datetime.timedelta(milliseconds=self.config["replica.fetch.wait.max.ms"]),
            min_bytes=1, max_bytes=self.config["replica.fetch.response.max.bytes"], isolation_level=0,
            session_id=session_id, session_epoch=epoch,
            topics=tuple(FetchTopic(topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
            forgotten_topics_data=tuple(ForgottenTopic(topic_id=t, partitions=tuple(ps))
                                        for t, ps in forgotten.items()),
            rack_id="")

    def _process(self, topics: list) -> None:
        """Apply one response (only the partitions with news, in a session), [(topic id,
        partitions)]; a partition answered with an error, or whose divergence truncating did
        not resolve, backs off. An answer for an earlier topic of the same name (deleted and
        made again) is not this partition's."""
        for topic_id, partitions in topics:
            topic_name = self.topic_names.get(topic_id)
            for pd in partitions:
                key = (topic_name, pd.partition_index)
                part = self.partitions.get(key)
                sent_part, asked = self.asked.get(key, (None, None))
                if part is None or part.topic_id != topic_id or key in self.delayed:
                    continue
                self.pending.add(key)  # its position is looked at again next time
                if part is not sent_part or part.leader_epoch != asked.current_leader_epoch \
                        or part.log.log_end_offset != asked.fetch_offset:
                    continue  # the partition moved on while the fetch was in flight
                if pd.error_code:
                    if pd.error_code == ErrorCode.offset_out_of_range:
                        self._out_of_range(part, pd)
                    else:
                        self._delay(key)
                    continue
                if pd.diverging_epoch is not None and (pd.diverging_epoch[0] >= 0 or pd.diverging_epoch[1] >= 0):
                    if not self._truncate(part, *pd.diverging_epoch):
                        self._delay(key)
                    continue
                try:
                    part.append_as_follower(pd.records if pd.records is not None else b"", pd.high_watermark,
                                            pd.log_start_offset)
                except Exception:
                    log.exception("follower_append_failed", topic=part.topic, partition=part.index)
                    self._delay(key)
                    continue
                if pd.records:
                    self.on_fetched(part)

    def _truncate(self, part: Partition, leader_epoch: int, leader_end_offset: int) -> bool:
        """Cut the log where it diverges from the leader's; False when nothing changed."""
        plog = part.log
        before = (plog.log_end_offset, plog.leader_epochs.latest_epoch)
        epoch, end = plog.leader_epochs.end_offset_for(leader_epoch, plog.log_end_offset)
        target = min(leader_end_offset, plog.log_end_offset) if epoch == UNDEFINED_EPOCH \
            else min(end, leader_end_offset)
        part.truncate_to(max(target, plog.log_start_offset))
        if (plog.log_end_offset, plog.leader_epochs.latest_epoch) == before:
            # The same divergence would come back at once: say so (every 10 s) instead of silently.
            now = time.monotonic()
            if now - self._last_divergence_log < 10:
                return False
            self._last_divergence_log = now
            log.warning("replica_divergence_unresolved", topic=part.topic, partition=part.index,
                        leader=self.leader_id, leader_epoch=leader_epoch, leader_end_offset=leader_end_offset,
                        log_end_offset=before[0], latest_epoch=before[1])
            return False
        return True

    def _out_of_range(self, part: Partition, pd) -> None:
        plog = part.log
        if plog.log_end_offset > pd.log_start_offset >= 0 and pd.high_watermark >= 0:
            part.truncate_to(max(pd.high_watermark, plog.log_start_offset))
        elif pd.log_start_offset > plog.log_end_offset:
            log.warning("follower_below_leader_log_start", topic=part.topic, partition=part.index,
                        log_end_offset=plog.log_end_offset, leader_log_start=pd.log_start_offset)
            plog.truncate_fully_and_start_at(pd.log_start_offset)


class ReplicaFetcherManager:
    """Fetchers by source broker; partitions move between them on leadership changes."""

    def __init__(self, node_id: int, resolve: Callable[[int], tuple[str, int] | None], config,
                 on_fetched: Callable[[Partition], None], broker_epoch: Callable[[], int] = lambda: -1) -> None:
        self.node_id = node_id
        self.resolve = resolve
        self.config = config
        self.on_fetched = on_fetched
        self.broker_epoch = broker_epoch
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self.assigned: dict[tuple[str, int], int] = {}

    def add_partition(self, part: Partition, leader_id: int) -> None:
        self.remove_partition(part)
        fetcher = self.fetchers.get(leader_id)
        if fetcher is None:
            fetcher = self.fetchers[leader_id] = ReplicaFetcher(self.node_id, leader_id, self.resolve,
                                                                self.config, self.on_fetched, self.broker_epoch)
        fetcher.add(part)
        self.assigned[(part.topic, part.index)] = leader_id

    def remove_partition(self, part: Partition) -> None:
        leader_id = self.assigned.pop((part.topic, part.index), None)
        if leader_id is not None and leader_id in self.fetchers:
            self.fetchers[leader_id].remove(part)

    def position_changed(self, part: Partition) -> None:
        fetcher = self.fetchers.get(self.assigned.get((part.topic, part.index), -1))
        if fetcher is not None:
            fetcher.position_changed(part)

    async def stop(self) -> None:
        for fetcher in self.fetchers.values():
            await fetcher.stop()
        self.fetchers.clear()
