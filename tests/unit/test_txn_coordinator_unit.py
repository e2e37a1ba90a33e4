"""The transaction coordinator against an in-memory broker (no sockets, no disk): request
semantics, what reaches ``__transaction_state``, the marker channel, load, timeouts, expiry."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter

import pytest

from coordinator.runtime import ManualTimer
from coordinator.transaction import log as txn_log
from coordinator.transaction.coordinator import TransactionCoordinator
from coordinator.transaction.state import MAX_PRODUCER_EPOCH, TxnState
from coordinator.transaction.state_manager import TXN_TOPIC
from protocol import records as rb
from protocol.api import response_class
from protocol.codec import build
from protocol.errors import ErrorCode as E
from tests.support.loop import settle

S = TxnState
NODE = 1
TXN = "txn-a"


async def end_txn(c: TransactionCoordinator, *args) -> int:
    """EndTxn's error code (TV1 requests answer no producer id and epoch)."""
    return (await c.end_transaction(*args))[0]


class FakeBroker:
    """Implements coordinator.transaction.services.TxnServices in memory."""

    node_id = NODE

    def __init__(self, **config) -> None:
        self.cfg = {
            "transaction.state.log.num.partitions": 4,
            "transaction.state.log.min.isr": 1,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.segment.bytes": 1 << 20,
            "transaction.max.timeout.ms": 900000,
            "transactional.id.expiration.ms": 604800000,
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 3_600_000,
            "transaction.remove.expired.transaction.cleanup.interval.ms": 3_600_000,
            "test.fault.points": "",
            **config,
        }
        self.topics: dict[str, list[list[int]]] = {"data": [[NODE, 0], [NODE, 0]]}  # [leader, epoch]
        self.logs: dict[tuple[str, int], list[bytes]] = {}
        self.clock = 1_000_000
        self.append_results: list[int] = []
        self.events: Counter = Counter()
        self.requests: list[tuple[int, dict]] = []
        self.markers: list[tuple[tuple[str, int], int, int, bool, int]] = []
        self.marker_codes: dict[tuple[str, int], list[int]] = {}
        self.marker_versions: list[int] = []
        self.send_failures = 0
        self.load_gate: threading.Event | None = None
        self.append_gate: asyncio.Event | None = None
        self.next_pid = 1000
        self.stalled: set[int] = set()  # nodes that accept requests and never answer (SIGSTOP)
        self.metadata_current = True
        self.tv = 2  # the cluster's finalized transaction.version
        self.timer = ManualTimer()  # the marker channel's back-offs fire only when a test advances it

    # TxnServices
    def metadata_is_current(self) -> bool:
        return self.metadata_current

    def config(self, key):
        return self.cfg.get(key)

    def now_ms(self) -> int:
        return self.clock

    def count(self, event, reason) -> None:
        self.events[(event, reason)] += 1

    def partition_count(self, topic):
        return len(self.topics[topic]) if topic in self.topics else None

    def leader(self, topic, partition):
        parts = self.topics.get(topic)
        if parts is None or not 0 <= partition < len(parts):
            return None
        return tuple(parts[partition])

    def registered_broker_count(self) -> int:
        return 1

    def led_partitions(self, topic):
        return {p: epoch for p, (leader, epoch) in enumerate(self.topics.get(topic, [])) if leader == NODE}

    def create_internal_topic(self, name, partitions, configs, replication_factor) -> int:
        self.topics.setdefault(name, [[NODE, 0] for _ in range(partitions)])
        self.topic_configs = configs
        return partitions

    async def append(self, topic, partition, records, timeout_ms) -> int:
        await asyncio.sleep(0)
        if self.append_gate is not None:
            await self.append_gate.wait()
        code = self.append_results.pop(0) if self.append_results else 0
        if not code:
            self.logs.setdefault((topic, partition), []).append(records)
        return code

    def read_batches(self, topic, partition):
        if self.load_gate is not None:
            self.load_gate.wait(5)
        return list(self.logs.get((topic, partition), []))

    def generate_producer_id(self) -> int:
        self.next_pid += 1
        return self.next_pid

    def transaction_version(self) -> int:
        return self.tv

    async def send_request(self, node_id, api_key, api_version, request):
        assert (api_key, api_version) == (27, 2)
        await asyncio.sleep(0)
        self.requests.append((node_id, request))
        if node_id in self.stalled:
            await asyncio.Event().wait()
        if self.send_failures:
            self.send_failures -= 1
            raise ConnectionError("broken pipe")
        results = []
        for m in request["markers"]:
            topics = []
            for t in m["topics"]:
                parts = []
                for p in t["partition_indexes"]:
                    codes = self.marker_codes.get((t["name"], p))
                    code = codes.pop(0) if codes else 0
                    if code == 0:
                        self.markers.append(((t["name"], p), m["producer_id"], m["producer_epoch"],
                                             m["transaction_result"], m["coordinator_epoch"]))
                        self.marker_versions.append(m["transaction_version"])
                    parts.append({"partition_index": p, "error_code": code})
                topics.append({"name": t["name"], "partitions": parts})
            results.append({"producer_id": m["producer_id"], "topics": topics})
        return build(response_class(27, 1), {"markers": results})

    # helpers
    def txn_log(self, txn_id: str = TXN) -> list:
        """What __transaction_state holds for ``txn_id``: [(state, epoch, partitions) or None]."""
        p = txn_log.partition_for(txn_id, len(self.topics[TXN_TOPIC]))
        out = []
        for batch in self.logs.get((TXN_TOPIC, p), []):
            _, recs = rb.decode_records(batch)
            for rec in recs:
                if txn_log.decode_key(rec.key) != txn_id:
                    continue
                if rec.value is None:
                    out.append(None)
                else:
                    v = txn_log.decode_value(rec.value)
                    out.append((v.state, v.producer_epoch, set(v.partitions)))
        return out


@pytest.fixture
async def env():
    broker = FakeBroker()
    coordinator = TransactionCoordinator(broker, broker.timer)
    await coordinator.start()
    assert coordinator.coordinator_error(TXN) == 0  # creates __transaction_state
    yield broker, coordinator
    await coordinator.stop()


async def begin(c: TransactionCoordinator, txn: str = TXN, partitions=(("data", 0),)) -> tuple[int, int]:
    err, pid, epoch = await c.init_producer_id(txn, 60000)
    assert err == 0
    assert await c.add_partitions(txn, pid, epoch, set(partitions)) == 0
    return pid, epoch


async def wait_state(c: TransactionCoordinator, state: TxnState, txn: str = TXN) -> None:
    """Let the loop run (no clock moves: back-offs wait for the test's ``timer.advance``)
    until ``txn`` is in ``state`` with nothing pending."""
    for _ in range(500):
        _, found = c.state.get_transaction_state(txn)
        if found is not None and found.meta.state is state and found.meta.pending_state is None:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{txn} never reached {state}: {found and found.meta}")


# --- FindCoordinator and InitProducerId ----------------------------------------------------------

async def test_topic_is_created_compacted_on_first_find_coordinator(env):
    broker, c = env
    assert len(broker.topics[TXN_TOPIC]) == 4
    assert broker.topic_configs["cleanup.policy"] == "compact"
    assert c.coordinator_node("") == (0, NODE)


async def test_replication_factor_above_the_broker_count_is_refused():
    broker = FakeBroker(**{"transaction.state.log.replication.factor": 3})
    c = TransactionCoordinator(broker, broker.timer)
    await c.start()
    try:
        assert c.coordinator_node(TXN) == (E.coordinator_not_available, -1)
        assert TXN_TOPIC not in broker.topics
    finally:
        await c.stop()


async def test_new_id_gets_epoch_0_and_an_empty_record(env):
    broker, c = env
    err, pid, epoch = await c.init_producer_id(TXN, 60000)
    assert (err, epoch) == (0, 0) and pid > 0
    assert broker.txn_log() == [(S.EMPTY, 0, set())]
    err, pid2, epoch2 = await c.init_producer_id(TXN, 60000)
    assert (err, pid2, epoch2) == (0, pid, 1)


async def test_init_producer_id_argument_errors(env):
    _, c = env
    assert (await c.init_producer_id("", 60000))[0] == E.invalid_request
    assert (await c.init_producer_id(TXN, 0))[0] == E.invalid_transaction_timeout
    assert (await c.init_producer_id(TXN, 900001))[0] == E.invalid_transaction_timeout
    err, pid, epoch = await c.init_producer_id(None, 2**31 - 1)  # idempotent producer
    assert err == 0 and epoch == 0


async def test_not_coordinator_and_load_in_progress():
    broker = FakeBroker()
    broker.topics[TXN_TOPIC] = [[2, 5] for _ in range(4)]  # led by another broker
    c = TransactionCoordinator(broker, broker.timer)
    await c.start()
    try:
        assert (await c.init_producer_id(TXN, 60000))[0] == E.not_coordinator
        assert c.coordinator_node(TXN) == (0, 2)
        broker.load_gate = threading.Event()
        c.on_election(txn_log.partition_for(TXN, 4), 6)
        assert (await c.init_producer_id(TXN, 60000))[0] == E.coordinator_load_in_progress
        assert c.list_transactions([], [])[0] == E.coordinator_load_in_progress
        broker.load_gate.set()
        await c.state.loads.join()
        assert (await c.init_producer_id(TXN, 60000))[0] == 0
        c.on_resignation(txn_log.partition_for(TXN, 4), 6)
        assert (await c.init_producer_id(TXN, 60000))[0] == E.not_coordinator
    finally:
        await c.stop()


async def test_elections_and_resignations_are_ordered_by_coordinator_epoch(env):
    """A repeated election at the owned epoch changes nothing; a resignation older than the
    current election is ignored; a load overtaken by a newer election is discarded."""
    broker, c = env
    pid, epoch = await begin(c)
    p = txn_log.partition_for(TXN, 4)
    c.on_election(p, 0)  # the epoch it already owns: no reload
    assert not c.state.is_loading
    assert c.state.get_transaction_state(TXN)[1].meta.state is S.ONGOING

    broker.load_gate = threading.Event()
    c.on_election(p, 2)
    c.on_resignation(p, 1)  # from before the election at 2
    assert (await c.init_producer_id(TXN, 60000))[0] == E.coordinator_load_in_progress
    c.on_election(p, 3)  # overtakes the load at 2
    broker.load_gate.set()
    await c.state.loads.join()
    error, found = c.state.get_transaction_state(TXN)
    assert error == 0 and found.coordinator_epoch == 3 and found.meta.producer_id == pid
    c.on_resignation(p, 3)
    assert c.state.get_transaction_state(TXN) == (E.not_coordinator, None)
    assert not c.is_coordinator_for(TXN)


async def test_a_coordinator_whose_metadata_is_suspect_after_a_stall_admits_no_request(env):
    """Resumed from a stall that may have outlived its session, the broker may no longer lead
    the id's partition and hold a stale copy of its state: every transactional request gets
    NOT_COORDINATOR (the client looks the coordinator up again) until the image is current."""
    broker, c = env
    pid, epoch = await begin(c)
    written = len(broker.txn_log())
    broker.metadata_current = False
    assert (await c.init_producer_id(TXN, 60000))[0] == E.not_coordinator
    assert await c.add_partitions(TXN, pid, epoch, {("data", 1)}) == E.not_coordinator
    assert await c.verify_partitions(TXN, pid, epoch, [("data", 0)]) == {("data", 0): E.not_coordinator}
    assert await end_txn(c, TXN, pid, epoch, True) == E.not_coordinator
    assert len(broker.txn_log()) == written  # nothing was decided from the suspect copy
    broker.metadata_current = True
    assert await end_txn(c, TXN, pid, epoch, True) == 0


async def test_kip360_bump_retry_and_stale_epochs(env):
    _, c = env
    _, pid, epoch = await c.init_producer_id(TXN, 60000)
    assert await c.init_producer_id(TXN, 60000, (pid, epoch)) == (0, pid, epoch + 1)
    assert await c.init_producer_id(TXN, 60000, (pid, epoch)) == (0, pid, epoch + 1)  # retried
    assert (await c.init_producer_id(TXN, 60000, (pid, epoch + 7)))[0] == E.producer_fenced
    assert (await c.init_producer_id(TXN, 60000, (pid + 1, epoch + 1)))[0] == E.producer_fenced
    # A new incarnation forgets the last epoch: the old producer cannot retry its way in.
    assert (await c.init_producer_id(TXN, 60000)) == (0, pid, epoch + 2)
    assert (await c.init_producer_id(TXN, 60000, (pid, epoch + 1)))[0] == E.producer_fenced


async def test_epoch_exhaustion_rotates_the_producer_id(env):
    broker, c = env
    _, pid, _ = await c.init_producer_id(TXN, 60000)
    _, found = c.state.get_transaction_state(TXN)
    found.meta.producer_epoch = MAX_PRODUCER_EPOCH - 1
    err, new_pid, epoch = await c.init_producer_id(TXN, 60000, (pid, MAX_PRODUCER_EPOCH - 1))
    assert err == 0 and new_pid != pid and epoch == 0
    assert broker.events[("fenced", "epoch exhausted")] == 1
    # A retry of that rotation with the old id and exhausted epoch is still valid.
    assert (await c.init_producer_id(TXN, 60000, (pid, MAX_PRODUCER_EPOCH - 1))) == (0, new_pid, 0)


# --- a transaction ------------------------------------------------------------------------------------

async def test_commit_cycle_writes_each_step_and_sends_markers(env):
    broker, c = env
    pid, epoch = await begin(c, partitions=(("data", 0), ("data", 1)))
    assert broker.txn_log()[-1] == (S.ONGOING, epoch, {("data", 0), ("data", 1)})
    assert await c.add_partitions(TXN, pid, epoch, {("data", 0)}) == 0  # subset: no write
    assert len(broker.txn_log()) == 2
    assert await end_txn(c, TXN, pid, epoch, True) == 0
    assert broker.txn_log()[-1] == (S.PREPARE_COMMIT, epoch, {("data", 0), ("data", 1)})
    await wait_state(c, S.COMPLETE_COMMIT)
    assert broker.txn_log()[-1] == (S.COMPLETE_COMMIT, epoch, set())
    assert sorted(broker.markers) == [(("data", 0), pid, epoch, True, 0), (("data", 1), pid, epoch, True, 0)]
    assert len(broker.requests) == 1 and broker.requests[0][0] == NODE  # one request to the leader
    # Retries of the same outcome succeed; the other outcome is an invalid state.
    assert await end_txn(c, TXN, pid, epoch, True) == 0
    assert await end_txn(c, TXN, pid, epoch, False) == E.invalid_txn_state
    assert await end_txn(c, TXN, pid, epoch - 1 if epoch else epoch + 1, True) == E.producer_fenced
    assert await end_txn(c, TXN, pid + 1, epoch, True) == E.invalid_producer_id_mapping
    assert await end_txn(c, "", pid, epoch, True) == E.invalid_request


async def test_end_txn_state_table(env):
    broker, c = env
    _, pid, epoch = await c.init_producer_id(TXN, 60000)
    assert await end_txn(c, TXN, pid, epoch, True) == E.invalid_txn_state  # Empty
    assert await end_txn(c, TXN, pid, epoch, False) == E.invalid_txn_state
    assert await c.add_partitions(TXN, pid, epoch, {("data", 0)}) == 0
    c.markers.paused = True  # hold the markers: the transaction stays in PrepareAbort
    assert await end_txn(c, TXN, pid, epoch, False) == 0
    assert await end_txn(c, TXN, pid, epoch, False) == E.concurrent_transactions
    assert await end_txn(c, TXN, pid, epoch, True) == E.concurrent_transactions  # completion pending
    assert await c.add_partitions(TXN, pid, epoch, {("data", 1)}) == E.concurrent_transactions
    assert (await c.init_producer_id(TXN, 60000))[0] == E.concurrent_transactions
    assert (await c.verify_partitions(TXN, pid, epoch, [("data", 0)])) == {("data", 0): E.concurrent_transactions}
    c.markers.paused = False
    await wait_state(c, S.COMPLETE_ABORT)
    assert await end_txn(c, TXN, pid, epoch, False) == 0
    assert await end_txn(c, TXN, pid, epoch, True) == E.invalid_txn_state


async def test_add_partitions_errors(env):
    _, c = env
    assert await c.add_partitions(TXN, 1, 0, {("data", 0)}) == E.invalid_producer_id_mapping
    _, pid, epoch = await c.init_producer_id(TXN, 60000)
    assert await c.add_partitions(TXN, pid + 1, epoch, {("data", 0)}) == E.invalid_producer_id_mapping
    assert await c.add_partitions(TXN, pid, epoch + 1, {("data", 0)}) == E.producer_fenced
    assert await c.add_partitions(None, pid, epoch, {("data", 0)}) == E.invalid_request


async def test_failed_append_changes_nothing_and_maps_the_error(env):
    broker, c = env
    _, pid, epoch = await c.init_producer_id(TXN, 60000)
    broker.append_results = [E.not_enough_replicas]
    assert await c.add_partitions(TXN, pid, epoch, {("data", 0)}) == E.coordinator_not_available
    _, found = c.state.get_transaction_state(TXN)
    assert found.meta.state is S.EMPTY and found.meta.pending_state is None
    broker.append_results = [E.not_leader_or_follower]
    assert await c.add_partitions(TXN, pid, epoch, {("data", 0)}) == E.not_coordinator
    broker.append_results = [E.message_too_large]
    assert await c.add_partitions(TXN, pid, epoch, {("data", 0)}) == E.unknown_server_error
    assert await c.add_partitions(TXN, pid, epoch, {("data", 0)}) == 0


async def test_verify_partitions(env):
    _, c = env
    pid, epoch = await begin(c)
    assert await c.verify_partitions(TXN, pid, epoch, [("data", 0), ("data", 1)]) == {
        ("data", 0): 0, ("data", 1): E.transaction_abortable}
    assert await c.verify_partitions(TXN, pid, epoch + 1, [("data", 0)]) == {("data", 0): E.producer_fenced}
    assert await c.verify_partitions(TXN, pid + 1, epoch, [("data", 0)]) == {
        ("data", 0): E.invalid_producer_id_mapping}
    assert await c.verify_partitions("nobody", pid, epoch, [("data", 0)]) == {
        ("data", 0): E.invalid_producer_id_mapping}


# --- fencing ---------------------------------------------------------------------------------------------

async def test_new_incarnation_fences_and_aborts_the_ongoing_transaction(env):
    broker, c = env
    pid, epoch = await begin(c)
    err, _, _ = await c.init_producer_id(TXN, 60000)
    assert err == E.concurrent_transactions
    assert broker.txn_log()[-1] == (S.PREPARE_ABORT, epoch + 1, {("data", 0)})
    await wait_state(c, S.COMPLETE_ABORT)
    assert broker.markers == [(("data", 0), pid, epoch + 1, False, 0)]  # ABORT at epoch + 1
    assert await c.init_producer_id(TXN, 60000) == (0, pid, epoch + 2)
    # The zombie is fenced everywhere.
    assert await end_txn(c, TXN, pid, epoch, True) == E.producer_fenced
    assert await c.add_partitions(TXN, pid, epoch, {("data", 0)}) == E.producer_fenced
    assert broker.events == Counter({("fenced", "new incarnation"): 1, ("aborted", "new incarnation"): 1})


async def test_the_fenced_producer_is_refused_while_the_abort_is_being_written(env):
    broker, c = env
    pid, epoch = await begin(c)
    broker.append_gate = asyncio.Event()
    init = asyncio.create_task(c.init_producer_id(TXN, 60000))
    await settle()
    assert await end_txn(c, TXN, pid, epoch, True) == E.producer_fenced
    assert await c.verify_partitions(TXN, pid, epoch, [("data", 0)]) == {("data", 0): E.producer_fenced}
    assert await c.add_partitions(TXN, pid, epoch, {("data", 1)}) == E.producer_fenced
    broker.append_gate.set()
    assert (await init)[0] == E.concurrent_transactions
    await wait_state(c, S.COMPLETE_ABORT)


async def test_a_stale_kip360_epoch_during_a_transaction_also_fences_it(env):
    # Kafka checks only the producer id while a transaction is ongoing (checked against 4.3.1).
    broker, c = env
    pid, epoch = await begin(c)
    assert (await c.init_producer_id(TXN, 60000, (pid, epoch + 7)))[0] == E.concurrent_transactions
    await wait_state(c, S.COMPLETE_ABORT)


async def test_failed_fence_write_leaves_the_old_epoch_usable(env):
    broker, c = env
    pid, epoch = await begin(c)
    broker.append_results = [E.request_timed_out]
    assert (await c.init_producer_id(TXN, 60000))[0] == E.coordinator_not_available
    _, found = c.state.get_transaction_state(TXN)
    assert (found.meta.state, found.meta.producer_epoch, found.meta.pending_state) == (S.ONGOING, epoch, None)
    assert (await c.init_producer_id(TXN, 60000))[0] == E.concurrent_transactions  # fenced this time
    await wait_state(c, S.COMPLETE_ABORT)
    assert found.meta.producer_epoch == epoch + 1


# --- the marker channel --------------------------------------------------------------------------------

async def test_markers_are_retried_until_every_partition_has_one(env):
    broker, c = env
    pid, epoch = await begin(c, partitions=(("data", 0), ("data", 1)))
    broker.marker_codes[("data", 1)] = [E.not_leader_or_follower, E.request_timed_out]
    broker.send_failures = 1
    assert await end_txn(c, TXN, pid, epoch, True) == 0
    await settle()
    assert len(broker.requests) == 1 and broker.markers == []  # nothing resent before the back-off
    for _ in range(3):  # each back-off in turn: both partitions, then data-1 twice
        broker.timer.advance(1000)
        await settle()
    await wait_state(c, S.COMPLETE_COMMIT)
    assert sorted(tp for tp, *_ in broker.markers) == [("data", 0), ("data", 1)]
    assert len(broker.requests) == 4  # failed send, then data-1 twice more


async def test_markers_go_to_each_partitions_leader(env):
    broker, c = env
    broker.topics["data"][1] = [3, 7]  # data-1 is led by node 3
    pid, epoch = await begin(c, partitions=(("data", 0), ("data", 1)))
    assert await end_txn(c, TXN, pid, epoch, False) == 0
    await wait_state(c, S.COMPLETE_ABORT)
    by_node = {node: [(t["name"], p) for m in r["markers"] for t in m["topics"] for p in t["partition_indexes"]]
               for node, r in broker.requests}
    assert by_node == {NODE: [("data", 0)], 3: [("data", 1)]}


async def test_markers_waiting_on_a_stalled_leader_go_to_the_new_one_when_leadership_moves(env):
    broker, c = env
    broker.topics["data"][1] = [3, 7]   # data-1 led by node 3, which then stalls
    broker.stalled.add(3)
    pid, epoch = await begin(c, partitions=(("data", 0), ("data", 1)))
    assert await end_txn(c, TXN, pid, epoch, True) == 0
    await settle()
    _, found = c.state.get_transaction_state(TXN)
    assert found.meta.partitions == {("data", 1)}     # data-0 done, data-1 waits on node 3
    c.partitions_changed({("data", 0)})              # an unrelated change: still waiting
    await settle()
    assert [n for n, _ in broker.requests].count(3) == 1 and found.meta.state is S.PREPARE_COMMIT
    broker.topics["data"][1] = [NODE, 8]             # the controller moved data-1
    c.partitions_changed({("data", 1)})
    await wait_state(c, S.COMPLETE_COMMIT)           # no back-off, no request timeout
    assert sorted(tp for tp, *_ in broker.markers) == [("data", 0), ("data", 1)]
    assert sorted(n for n, _ in broker.requests) == sorted([NODE, 3, NODE])


async def test_a_deleted_topic_is_dropped_and_a_leaderless_partition_waits(env):
    broker, c = env
    broker.topics["gone"] = [[NODE, 0]]
    broker.topics["data"][1] = [-1, 3]
    pid, epoch = await begin(c, partitions=(("gone", 0), ("data", 1)))
    del broker.topics["gone"]
    assert await end_txn(c, TXN, pid, epoch, True) == 0
    for _ in range(3):  # no leader at any retry
        await settle()
        broker.timer.advance(1000)
    _, found = c.state.get_transaction_state(TXN)
    assert found.meta.state is S.PREPARE_COMMIT and found.meta.partitions == {("data", 1)}
    broker.topics["data"][1] = [NODE, 4]
    broker.timer.advance(1000)  # the next retry finds it
    await wait_state(c, S.COMPLETE_COMMIT)
    assert [tp for tp, *_ in broker.markers] == [("data", 1)]


async def test_a_fenced_marker_cancels_the_completion(env):
    broker, c = env
    pid, epoch = await begin(c)
    broker.marker_codes[("data", 0)] = [E.transaction_coordinator_fenced]
    assert await end_txn(c, TXN, pid, epoch, True) == 0
    await settle()
    assert broker.txn_log()[-1][0] is S.PREPARE_COMMIT  # no CompleteCommit written
    assert not c.markers.pending


async def test_many_transactions_share_one_request_per_leader(env):
    broker, c = env
    ids = [f"t{i}" for i in range(20)]
    for t in ids:
        assert c.coordinator_error(t) == 0
    began = [(t, *await begin(c, t)) for t in ids]
    c.markers.paused = True
    for t, pid, epoch in began:
        assert await end_txn(c, t, pid, epoch, True) == 0
    c.markers.paused = False
    for t in ids:
        await wait_state(c, S.COMPLETE_COMMIT, t)
    assert len(broker.markers) == 20 and len(broker.requests) <= 2


# --- load after a restart --------------------------------------------------------------------------------

async def restarted(broker: FakeBroker) -> TransactionCoordinator:
    """The next coordinator of the same log (the old one stopped): a new leader epoch, no fault point."""
    broker.cfg["test.fault.points"] = ""
    broker.topics[TXN_TOPIC] = [[NODE, 1] for _ in range(4)]
    coordinator = TransactionCoordinator(broker, broker.timer)
    await coordinator.start()
    return coordinator


async def test_prepare_commit_found_at_load_is_completed():
    broker = FakeBroker(**{"test.fault.points": "txn.markers.pause"})
    c = TransactionCoordinator(broker, broker.timer)
    await c.start()
    c.coordinator_error(TXN)
    pid, epoch = await begin(c)
    assert await end_txn(c, TXN, pid, epoch, True) == 0
    await settle()
    assert broker.markers == [] and broker.txn_log()[-1][0] is S.PREPARE_COMMIT
    await c.stop()
    c2 = await restarted(broker)
    try:
        await wait_state(c2, S.COMPLETE_COMMIT)
        assert broker.markers == [(("data", 0), pid, epoch, True, 1)]  # the new coordinator epoch
        assert broker.txn_log()[-1] == (S.COMPLETE_COMMIT, epoch, set())
        # The loaded id carries on.
        assert await c2.init_producer_id(TXN, 60000) == (0, pid, epoch + 1)
    finally:
        await c2.stop()


async def test_load_replays_the_last_record_and_tombstones():
    broker = FakeBroker()
    c = TransactionCoordinator(broker, broker.timer)
    await c.start()
    for t in ("keep", "drop"):
        c.coordinator_error(t)
        await begin(c, t)
    broker.clock += 10**9
    await c.stop()
    p = txn_log.partition_for("drop", 4)
    broker.logs.setdefault((TXN_TOPIC, p), []).append(bytes(rb.build_batch([(txn_log.encode_key("drop"), None)])))
    c2 = TransactionCoordinator(broker, broker.timer)
    await c2.start()
    try:
        await c2.state.loads.join()
        assert c2.describe("keep")["transaction_state"] == "Ongoing"
        assert c2.describe("drop")["error_code"] == E.transactional_id_not_found
    finally:
        await c2.stop()


# --- timeouts and expiry ---------------------------------------------------------------------------------

async def test_timed_out_transaction_is_aborted_with_an_epoch_bump(env):
    broker, c = env
    _, pid, epoch = await c.init_producer_id(TXN, 1000)
    assert await c.add_partitions(TXN, pid, epoch, {("data", 0)}) == 0
    broker.clock += 1000
    assert c.abort_timed_out_transactions() == 0  # not yet: start + timeout < now
    broker.clock += 1
    assert c.abort_timed_out_transactions() == 1
    await wait_state(c, S.COMPLETE_ABORT)
    assert broker.markers == [(("data", 0), pid, epoch + 1, False, 0)]
    assert await end_txn(c, TXN, pid, epoch, True) == E.producer_fenced
    assert broker.events == Counter({("fenced", "transaction timed out"): 1,
                                     ("aborted", "transaction timed out"): 1})
    # The stalled producer's successor is not counted as a second fence.
    assert (await c.init_producer_id(TXN, 1000))[0] == 0
    assert broker.events[("fenced", "new incarnation")] == 0


async def test_idle_ids_expire_with_a_tombstone_but_never_mid_transaction(env):
    broker, c = env
    broker.cfg["transactional.id.expiration.ms"] = 5000
    assert c.coordinator_error("idle") == 0
    assert (await c.init_producer_id("idle", 60000))[0] == 0
    pid, epoch = await begin(c)
    broker.clock += 5000
    assert await c.remove_expired_transactional_ids() == ["idle"]
    assert broker.txn_log("idle")[-1] is None
    assert c.describe("idle")["error_code"] == E.transactional_id_not_found
    assert await c.add_partitions("idle", pid, epoch, {("data", 0)}) == E.invalid_producer_id_mapping
    assert c.describe(TXN)["transaction_state"] == "Ongoing"  # open: never expired
    assert broker.events[("fenced", "expired id")] == 1


async def test_failed_tombstone_keeps_the_id(env):
    broker, c = env
    broker.cfg["transactional.id.expiration.ms"] = 5000
    await c.init_producer_id(TXN, 60000)
    broker.clock += 5000
    broker.append_results = [E.not_enough_replicas]
    assert await c.remove_expired_transactional_ids() == []
    assert c.describe(TXN)["transaction_state"] == "Empty"


async def test_the_timeout_and_expiration_passes_run_on_the_coordinators_clock():
    """The two periodic passes of ``start`` (the Kafka configs' intervals) run when the
    coordinator's timer passes them, not on the wall clock."""
    broker = FakeBroker(**{"transaction.abort.timed.out.transaction.cleanup.interval.ms": 10_000,
                           "transaction.remove.expired.transaction.cleanup.interval.ms": 60_000,
                           "transactional.id.expiration.ms": 30_000})
    c = TransactionCoordinator(broker, broker.timer)
    await c.start()
    try:
        assert c.coordinator_error(TXN) == 0 and c.coordinator_error("idle") == 0
        assert (await c.init_producer_id("idle", 60000))[0] == 0
        _, pid, epoch = await c.init_producer_id(TXN, 1000)
        assert await c.add_partitions(TXN, pid, epoch, {("data", 0)}) == 0
        broker.clock += 1001  # timed out, but nothing looks until the abort pass is due
        broker.timer.advance(9_999)
        await settle()
        assert c.describe(TXN)["transaction_state"] == "Ongoing"
        broker.timer.advance(1)
        await wait_state(c, S.COMPLETE_ABORT)
        assert broker.markers == [(("data", 0), pid, epoch + 1, False, 0)]
        broker.clock += 30_000  # both ids idle past the expiration: the removal pass is due at 60 s
        broker.timer.advance(49_999)
        await settle()
        assert c.describe("idle")["error_code"] == 0
        broker.timer.advance(1)
        await settle()
        assert broker.txn_log("idle")[-1] is None and broker.txn_log(TXN)[-1] is None
        assert c.describe("idle")["error_code"] == E.transactional_id_not_found
    finally:
        await c.stop()


# --- describe / list ---------------------------------------------------------------------------------------

async def test_describe_and_list(env):
    broker, c = env
    pid, epoch = await begin(c, partitions=(("data", 1), ("data", 0)))
    d = c.describe(TXN)
    assert (d["error_code"], d["transaction_state"], d["producer_id"], d["producer_epoch"],
            d["transaction_start_time"], d["topics"]) == \
        (0, "Ongoing", pid, epoch, broker.clock, [{"topic": "data", "partitions": [0, 1]}])
    assert c.describe("")["error_code"] == E.invalid_request
    assert c.coordinator_error("other") == 0
    await c.init_producer_id("other", 60000)
    err, states, unknown = c.list_transactions(["Ongoing", "Nope"], [])
    assert (err, [s["transactional_id"] for s in states], unknown) == (0, [TXN], ["Nope"])
    assert [s["transactional_id"] for s in c.list_transactions([], [pid])[1]] == [TXN]
    broker.clock += 100
    # Duration filter on every state, as Kafka: Empty's start time is -1.
    assert sorted(s["transactional_id"] for s in c.list_transactions([], [], 99)[1]) == ["other", TXN]
    assert [s["transactional_id"] for s in c.list_transactions([], [], 100)[1]] == ["other"]
