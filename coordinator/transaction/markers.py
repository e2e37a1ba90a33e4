"""The marker channel: WriteTxnMarkers to every partition of a completing transaction, then
CompleteCommit/CompleteAbort (Kafka's ``TransactionMarkerChannelManager`` and
``TransactionMarkerRequestCompletionHandler``).

A transaction is handed over once PrepareCommit/PrepareAbort is durable, with its
Complete* transition already prepared (pending, so the producer's next calls get
CONCURRENT_TRANSACTIONS). Its partitions are grouped by leader; each leader has a queue and a
sender that drains it into one WriteTxnMarkers v2 request (one marker per transaction, with
the transaction version it was ended under, KIP-1228) and
keeps up to ``MAX_IN_FLIGHT`` requests pipelined on the network client. This broker's own
partitions go the same way, over the network. Per partition answer:

- NONE, UNSUPPORTED_FOR_MESSAGE_FORMAT, UNSUPPORTED_VERSION: the partition is done;
- UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
  REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR, or a failed request: retried after a back-off, with
  the leader looked up again;
- INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED: the transaction's markers are
  cancelled (a newer producer epoch or coordinator took over); no Complete* is written.

A partition whose topic is gone is dropped; one without a leader waits for one. A request
in flight to a broker that stopped leading one of its partitions (the broker stalled or was
cut off, and the controller moved its leaderships) is given up at once: its partitions are
queued again for their current leaders instead of waiting out the request timeout, and its
late answer, if any, is ignored (a second marker of a transaction already marked is inert).
Before each answer is applied the coordinator epoch is checked: a transaction whose
``__transaction_state`` partition moved away or was reloaded is cancelled. When no partition
is left, Complete* is appended (retried while COORDINATOR_NOT_AVAILABLE).

Test fault points (config ``test.fault.points``): ``txn.markers.pause`` holds every send;
``txn.markers.delay:<ms>`` holds the markers of a transaction ended by its producer (EndTxn)
for that long after Prepare* is durable, while completions resumed after a load go at once: a
coordinator can then be killed, stopped or cut off between PrepareCommit and its markers.

Differs from Kafka: an unexpected per-partition error (Kafka: IllegalStateException, the
transaction stalls until the coordinator moves) is logged and retried; Kafka's channel waits
out ``request.timeout.ms`` on a request to a leader that stalled before it re-routes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import structlog

from protocol.errors import ErrorCode

from ..runtime import (
    BackgroundTasks,
    CoordinatorTimer,
    LoopTimer,
    TimerHandle,
    cancel_and_wait,
    error_name,
    fault_points,
)
from .services import TxnServices
from .state import TransactionMetadata, TxnState, TxnTransitMetadata
from .state_manager import TXN_TOPIC, TransactionStateManager

log = structlog.get_logger("coordinator.transaction.markers")

WRITE_TXN_MARKERS = 27
WRITE_TXN_MARKERS_VERSION = 2
MAX_IN_FLIGHT = 5
RETRY_BACKOFF_S = 0.02
MAX_RETRY_BACKOFF_S = 1.0
PAUSE_FAULT = "txn.markers.pause"
DELAY_FAULT = "txn.markers.delay"

RETRIABLE = frozenset({
    ErrorCode.unknown_topic_or_partition, ErrorCode.not_leader_or_follower,
    ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append,
    ErrorCode.request_timed_out, ErrorCode.kafka_storage_error,
})
DONE = frozenset({0, ErrorCode.unsupported_for_message_format, ErrorCode.unsupported_version})
CANCEL = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced})


@dataclass(eq=False, slots=True)
class PendingMarkers:
    """One transaction whose outcome is being written to its partitions."""

    transactional_id: str
    coordinator_epoch: int
    commit: bool
    meta: TransactionMetadata
    complete: TxnTransitMetadata
    producer_id: int
    producer_epoch: int
    done: asyncio.Future
    transaction_version: int = 0
    attempts: int = 0
    completing: bool = False
    in_queue: set[tuple[str, int]] = field(default_factory=set)


@dataclass(eq=False, slots=True)
class _InFlight:
    """One WriteTxnMarkers request awaiting its answer; ``moved`` is set when one of its
    partitions is no longer led by ``node``."""

    node: int
    partitions: set[tuple[str, int]]
    moved: asyncio.Event = field(default_factory=asyncio.Event)


class TransactionMarkerChannel:
    def __init__(self, services: TxnServices, state_manager: TransactionStateManager,
                 timer: CoordinatorTimer | None = None) -> None:
        self.s = services
        self.sm = state_manager
        # Back-offs and the delay fault point: the loop's clock, or a unit test's fake one.
        self.timer: CoordinatorTimer = timer or LoopTimer()
        self.timers: set[TimerHandle] = set()
        self.pending: dict[str, PendingMarkers] = {}
        self.queues: dict[int, list[tuple[PendingMarkers, set[tuple[str, int]]]]] = {}
        self.wakeups: dict[int, asyncio.Event] = {}
        self.senders: dict[int, asyncio.Task] = {}
        self.in_flight: set[_InFlight] = set()
        self.tasks = BackgroundTasks("transaction-markers")
        faults = fault_points(self.s.config("test.fault.points"))
        self._resumed = asyncio.Event()
        self.paused = PAUSE_FAULT in faults
        self.end_txn_delay_ms = int(faults.get(DELAY_FAULT) or 0)

    @property
    def paused(self) -> bool:
        """The ``txn.markers.pause`` fault point: nothing is sent until it is lifted."""
        return not self._resumed.is_set()

    @paused.setter
    def paused(self, value: bool) -> None:
        if value:
            self._resumed.clear()
        else:
            self._resumed.set()

    def _schedule(self, delay_ms: float, callback, *args) -> None:
        """Run ``callback(*args)`` after ``delay_ms`` on the timer; cancelled by :meth:`stop`."""
        def fire() -> None:
            self.timers.discard(handle)
            callback(*args)

        handle = self.timer.schedule(delay_ms, fire)
        self.timers.add(handle)

    # --- handing over ---------------------------------------------------------------------------

    def add_markers_to_send(self, coordinator_epoch: int, meta: TransactionMetadata,
                            complete: TxnTransitMetadata, *, end_txn: bool = False) -> None:
        """Propagate the outcome of ``meta`` (PrepareCommit/PrepareAbort, Complete* pending);
        ``end_txn``: decided by the producer's EndTxn just now (the delay fault point applies)."""
        txn_id = meta.transactional_id
        pm = PendingMarkers(txn_id, coordinator_epoch, complete.state is TxnState.COMPLETE_COMMIT, meta,
                            complete, meta.producer_id, meta.producer_epoch,
                            asyncio.get_running_loop().create_future(), meta.client_transaction_version)
        old = self.pending.get(txn_id)
        if old is not None:
            self._finish(old)
        self.pending[txn_id] = pm
        log.debug("txn_markers_queued", transactional_id=txn_id, commit=pm.commit,
                  partitions=len(meta.partitions))
        if end_txn and self.end_txn_delay_ms:
            log.warning("txn_markers_delayed_by_fault_point", transactional_id=txn_id,
                        coordinator_epoch=coordinator_epoch, seconds=self.end_txn_delay_ms / 1000)
            self._schedule(self.end_txn_delay_ms, self._enqueue, pm, set(meta.partitions))
            return
        self._enqueue(pm, set(meta.partitions))

    async def wait_for_completion(self, transactional_id: str, timeout: float) -> None:
        pm = self.pending.get(transactional_id)
        if pm is not None and not self.paused:
            await asyncio.wait({pm.done}, timeout=timeout)

    def remove_markers_for_partition(self, partition: int) -> None:
        """The ``__transaction_state`` partition moved away or is reloaded: stop its sends."""
        for txn_id, pm in list(self.pending.items()):
            if self.sm.partition_for(txn_id) == partition:
                self._finish(pm)

    def partitions_changed(self, partitions: set[tuple[str, int]]) -> None:
        """The metadata of ``partitions`` changed: a request in flight to a broker that no
        longer leads one of its partitions is given up (:meth:`_send` re-queues it)."""
        for send in self.in_flight:
            if not send.moved.is_set() and any(
                    (leader := self.s.leader(*tp)) is None or leader[0] != send.node
                    for tp in send.partitions & partitions):
                send.moved.set()

    async def stop(self) -> None:
        for handle in self.timers:
            handle.cancel()
        self.timers.clear()
        await cancel_and_wait(self.senders.values())
        await self.tasks.stop()
        for pm in list(self.pending.values()):
            self._finish(pm)

    # --- queues ---------------------------------------------------------------------------------

    def _current(self, pm: PendingMarkers) -> bool:
        return self.pending.get(pm.transactional_id) is pm

    def _finish(self, pm: PendingMarkers) -> None:
        if self.pending.get(pm.transactional_id) is pm:
            del self.pending[pm.transactional_id]
        if not pm.done.done():
            pm.done.set_result(None)

    def _enqueue(self, pm: PendingMarkers, tps: set[tuple[str, int]]) -> None:
        """Group ``tps`` by their current leader and queue them; then maybe complete."""
        if not self._current(pm):
            return
        unknown: set[tuple[str, int]] = set()
        by_node: dict[int, set[tuple[str, int]]] = {}
        for tp in tps:
            if tp not in pm.meta.partitions:
                continue
            leader = self.s.leader(*tp)
            if leader is None:
                # The topic or partition is gone: nothing to mark.
                log.info("txn_marker_partition_dropped", transactional_id=pm.transactional_id,
                         topic=tp[0], partition=tp[1], reason="partition no longer exists")
                pm.meta.remove_partition(tp)
            elif leader[0] < 0:
                unknown.add(tp)
            else:
                by_node.setdefault(leader[0], set()).add(tp)
        for node, node_tps in by_node.items():
            pm.in_queue |= node_tps
            self.queues.setdefault(node, []).append((pm, node_tps))
            self._wake(node)
        if unknown:
            self._retry_later(pm, unknown)
        self._maybe_complete(pm)

    def _retry_later(self, pm: PendingMarkers, tps: set[tuple[str, int]]) -> None:
        pm.attempts += 1
        delay = min(RETRY_BACKOFF_S * (2 ** min(pm.attempts, 10)), MAX_RETRY_BACKOFF_S)
        pm.in_queue |= tps
        self._schedule(delay * 1000, self._retry, pm, tps)

    def _retry(self, pm: PendingMarkers, tps: set[tuple[str, int]]) -> None:
        pm.in_queue -= tps
        self._enqueue(pm, tps)

    def _wake(self, node: int) -> None:
        event = self.wakeups.get(node)
        if event is None:
            event = self.wakeups[node] = asyncio.Event()
        event.set()
        task = self.senders.get(node)
        if task is None or task.done():
            self.senders[node] = asyncio.get_running_loop().create_task(self._sender(node))

    async def _sender(self, node: int) -> None:
        """Drain ``node``'s queue into pipelined WriteTxnMarkers requests."""
        queue = self.queues.setdefault(node, [])
        wakeup = self.wakeups[node]
        in_flight = asyncio.Semaphore(MAX_IN_FLIGHT)
        while True:
            await wakeup.wait()
            wakeup.clear()
            while queue:
                await self._resumed.wait()
                await in_flight.acquire()
                entries = self._drain(queue)
                if not entries:
                    in_flight.release()
                    continue
                self.tasks.spawn(self._send(node, entries)).add_done_callback(lambda _: in_flight.release())

    def _drain(self, queue: list) -> dict[PendingMarkers, set[tuple[str, int]]]:
        entries: dict[PendingMarkers, set[tuple[str, int]]] = {}
        batch, queue[:] = list(queue), []
        for pm, tps in batch:
            if self._current(pm):
                entries.setdefault(pm, set()).update(tps)
        return entries

    # --- sending and answers ----------------------------------------------------------------------

    async def _send(self, node: int, entries: dict[PendingMarkers, set[tuple[str, int]]]) -> None:
        markers = []
        for pm, tps in entries.items():
            topics: dict[str, list[int]] = {}
            for topic, p in sorted(tps):
                topics.setdefault(topic, []).append(p)
            markers.append({"producer_id": pm.producer_id, "producer_epoch": pm.producer_epoch,
                            "transaction_result": pm.commit,
                            "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()],
                            "coordinator_epoch": pm.coordinator_epoch,
                            "transaction_version": pm.transaction_version})
        send = _InFlight(node, set().union(*entries.values()))
        self.in_flight.add(send)
        # A task of the channel's, so that stop() also ends one given up on below.
        request = self.tasks.spawn(
            self.s.send_request(node, WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, {"markers": markers}))
        moved = asyncio.ensure_future(send.moved.wait())
        try:
            await asyncio.wait({request, moved}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            request.cancel()
            raise
        finally:
            moved.cancel()
            self.in_flight.discard(send)
        if not request.done():
            # Leadership moved while the request waited on a broker that may never answer.
            request.add_done_callback(_ignore_late_answer)
            log.info("txn_markers_rerouted", node_id=node, transactions=len(entries),
                     partitions=len(send.partitions), reason="a partition's leader changed")
            for pm, tps in entries.items():
                pm.in_queue -= tps
                if self._check_coordinator(pm):
                    self._enqueue(pm, tps)
            return
        try:
            response = request.result()
        except Exception as exc:  # disconnected, timed out, unreachable: retry everything
            log.info("txn_marker_send_failed", node_id=node, transactions=len(entries), error=str(exc))
            for pm, tps in entries.items():
                pm.in_queue -= tps
                if self._check_coordinator(pm):
                    self._retry_later(pm, tps)
            return
        results: dict[int, dict[tuple[str, int], int]] = {}
        for m in response.markers:
            codes = results.setdefault(m.producer_id, {})
            for t in m.topics:
                for part in t.partitions:
                    codes[(t.name, part.partition_index)] = int(part.error_code)
        for pm, tps in entries.items():
            pm.in_queue -= tps
            self._on_response(pm, tps, results.get(pm.producer_id, {}))

    def _check_coordinator(self, pm: PendingMarkers) -> bool:
        """Still ours at the same coordinator epoch? Otherwise cancel (Kafka's completion handler)."""
        if not self._current(pm):
            return False
        error, found = self.sm.get_transaction_state(pm.transactional_id)
        if error or found is None or found.coordinator_epoch != pm.coordinator_epoch or found.meta is not pm.meta:
            log.info("txn_markers_cancelled", transactional_id=pm.transactional_id,
                     reason="coordinator moved or reloaded",
                     error=ErrorCode(error).name if error else None)
            self._finish(pm)
            return False
        return True

    def _on_response(self, pm: PendingMarkers, tps: set[tuple[str, int]], codes: dict[tuple[str, int], int]) -> None:
        if not self._check_coordinator(pm):
            return
        retry: set[tuple[str, int]] = set()
        for tp in tps:
            code = codes.get(tp, ErrorCode.unknown_topic_or_partition)
            if code in DONE:
                if tp in pm.meta.partitions:
                    pm.meta.remove_partition(tp)
            elif code in CANCEL:
                log.warning("txn_markers_cancelled", transactional_id=pm.transactional_id,
                            topic=tp[0], partition=tp[1], error=ErrorCode(code).name,
                            reason="a newer producer epoch or coordinator wrote to the partition")
                self._finish(pm)
                return
            else:
                if code not in RETRIABLE:
                    log.error("txn_marker_unexpected_error", transactional_id=pm.transactional_id,
                              topic=tp[0], partition=tp[1], error=error_name(code))
                retry.add(tp)
        if retry:
            self._retry_later(pm, retry)
        self._maybe_complete(pm)

    def _maybe_complete(self, pm: PendingMarkers) -> None:
        if pm.completing or not self._current(pm) or pm.meta.partitions or pm.in_queue:
            return
        pm.completing = True
        self.tasks.spawn(self._write_completion(pm))

    async def _write_completion(self, pm: PendingMarkers, backoff: float = RETRY_BACKOFF_S) -> None:
        """Every partition has its marker: append CompleteCommit/CompleteAbort (again after a
        back-off while the log answers COORDINATOR_NOT_AVAILABLE)."""
        if self._current(pm):
            error = await self.sm.append_transaction_to_log(pm.transactional_id, pm.coordinator_epoch,
                                                            pm.complete, retry_on_error=True)
            if error == ErrorCode.coordinator_not_available:
                self._schedule(backoff * 1000, self._retry_completion, pm, min(backoff * 2, MAX_RETRY_BACKOFF_S))
                return
            if error:
                log.warning("txn_completion_not_written", transactional_id=pm.transactional_id,
                            error=error_name(error), topic=TXN_TOPIC)
            else:
                log.debug("txn_completed", transactional_id=pm.transactional_id,
                          state=pm.complete.state.state_name, producer_id=pm.producer_id,
                          producer_epoch=pm.producer_epoch)
        self._finish(pm)

    def _retry_completion(self, pm: PendingMarkers, backoff: float) -> None:
        if self._current(pm):
            self.tasks.spawn(self._write_completion(pm, backoff))


def _ignore_late_answer(request: asyncio.Future) -> None:
    """The answer to a request given up on (its partitions were sent to their new leaders)."""
    if not request.cancelled():
        request.exception()
