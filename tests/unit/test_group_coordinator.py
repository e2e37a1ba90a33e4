"""The group coordinator in-process: a real Broker object (logs on disk, no sockets), real timers.

Pins the semantics that are awkward to provoke through real clients: parked JoinGroups,
session expiry, MEMBER_ID_REQUIRED, generation checks, loading (with tombstones and
transaction markers) and COORDINATOR_LOAD_IN_PROGRESS, deletion tombstones, offset expiry.
"""

from __future__ import annotations

import asyncio
import struct
import threading

import pytest

from broker.broker import Broker
from broker.config import load_config
from broker.coordinator_services import BrokerCoordinatorServices
from coordinator.group import coordinator as coordinator_module
from coordinator.group.coordinator import GroupCoordinator
from coordinator.group.metadata import OFFSETS_TOPIC, OffsetCommitValue, offset_commit_record
from coordinator.group.state import GroupState, OffsetAndMetadata
from coordinator.runtime import ManualTimer
from protocol.errors import ErrorCode as E
from protocol.records import CONTROL_ABORT, CONTROL_COMMIT, build_batch, build_control_batch, set_base_offset
from tests.support.loop import settle

PROTOCOLS = [("range", b"meta")]


class Harness:
    def __init__(self, path: str, **overrides: str) -> None:
        props = {"log.dirs": path, "listeners": "PLAINTEXT://127.0.0.1:0", "metrics.listener": "",
                 "offsets.topic.num.partitions": "3", "group.min.session.timeout.ms": "50",
                 "group.initial.rebalance.delay.ms": "0", **overrides}
        self.broker = Broker(load_config(props))
        self.broker.metadata_store.elect_self_leader_everywhere()
        self.broker.replica_manager.open_all()
        self.timer = ManualTimer()  # sessions and rebalances expire only when a test advances it
        self.coordinator = GroupCoordinator(BrokerCoordinatorServices(self.broker), self.timer)
        self.broker.group_coordinator = self.coordinator

    async def start(self) -> Harness:
        await self.coordinator.start()
        return self

    async def stop(self) -> None:
        await self.coordinator.stop()
        self.broker.log_manager.close()

    def create_topic(self, name: str, partitions: int) -> None:
        self.broker.control.replication.create_local_topic(name, partitions, {})

    async def join(self, group: str = "g", member_id: str = "", session_ms: int = 10000,
                   rebalance_ms: int = 10000, instance: str | None = None, require_known: bool = False,
                   protocols=PROTOCOLS) -> dict:
        return await self.coordinator.classic.join_group(
            group_id=group, member_id=member_id, group_instance_id=instance,
            require_known_member_id=require_known, client_id="c", client_host="/127.0.0.1",
            rebalance_timeout_ms=rebalance_ms, session_timeout_ms=session_ms, protocol_type="consumer",
            protocols=protocols)

    async def sync(self, group: str, generation: int, member_id: str, assignments=None) -> dict:
        return await self.coordinator.classic.sync_group(
            group_id=group, generation_id=generation, member_id=member_id, group_instance_id=None,
            protocol_type=None, protocol_name=None, assignments=assignments or {})

    def heartbeat(self, group: str, generation: int, member_id: str) -> int:
        return self.coordinator.classic.heartbeat(group_id=group, member_id=member_id, group_instance_id=None,
                                          generation_id=generation)

    async def commit(self, group: str, generation: int, member_id: str, offsets: dict) -> dict:
        return await self.coordinator.offsets.commit_offsets(
            group_id=group, member_id=member_id, group_instance_id=None, generation_id=generation,
            offsets={tp: OffsetAndMetadata(o, -1, "md") for tp, o in offsets.items()})

    def group(self, name: str = "g"):
        return self.coordinator.groups[name]

    def offsets_log(self, group: str):
        return self.broker.replica_manager.get(OFFSETS_TOPIC, self.coordinator.partition_for(group)).log


@pytest.fixture
async def harness(tmp_path):
    h = await Harness(str(tmp_path / "data")).start()
    yield h
    await h.stop()


async def stable_single_member(h: Harness, group: str = "g", **kw) -> tuple[str, int]:
    r = await h.join(group, **kw)
    assert r["error_code"] == 0, r
    s = await h.sync(group, r["generation_id"], r["member_id"], {r["member_id"]: b"assignment"})
    assert s["error_code"] == 0 and s["assignment"] == b"assignment"
    return r["member_id"], r["generation_id"]


async def test_single_member_join_sync_heartbeat_commit(harness):
    h = harness
    h.create_topic("t", 2)
    r = await h.join()
    assert r["error_code"] == 0 and r["generation_id"] == 1 and r["leader"] == r["member_id"]
    assert r["members"] == [{"member_id": r["member_id"], "group_instance_id": None, "metadata": b"meta"}]
    assert h.group().state is GroupState.COMPLETING_REBALANCE
    member, gen = r["member_id"], r["generation_id"]
    assert (await h.commit("g", gen, member, {("t", 0): 5}))[("t", 0)] == E.rebalance_in_progress
    assert (await h.sync("g", gen, member, {member: b"A"}))["assignment"] == b"A"
    assert h.group().state is GroupState.STABLE
    assert h.heartbeat("g", gen, member) == 0
    assert h.heartbeat("g", gen + 1, member) == E.illegal_generation
    assert h.heartbeat("g", gen, "nobody") == E.unknown_member_id
    assert (await h.commit("g", gen, member, {("t", 0): 5}))[("t", 0)] == 0
    assert (await h.commit("g", gen - 1, member, {("t", 1): 6}))[("t", 1)] == E.illegal_generation
    assert (await h.commit("g", -1, "", {("t", 1): 6}))[("t", 1)] == E.unknown_member_id
    error, entries = h.coordinator.offsets.fetch_offsets("g", [("t", 0), ("t", 1)])
    assert error == 0 and [(tp, c.offset if c else None) for tp, c, _ in entries] == [(("t", 0), 5), (("t", 1), None)]
    # Sync again in Stable: the current assignment.
    assert (await h.sync("g", gen, member))["assignment"] == b"A"


async def test_member_id_required_then_rejoin_with_the_given_id(harness):
    h = harness
    r = await h.join(require_known=True)
    assert r["error_code"] == E.member_id_required and r["member_id"].startswith("c-")
    assert h.group().pending_members == {r["member_id"]}
    r2 = await h.join(member_id=r["member_id"], require_known=True)
    assert r2["error_code"] == 0 and r2["member_id"] == r["member_id"] and not h.group().pending_members
    assert (await h.join(member_id="made-up", require_known=True))["error_code"] == E.unknown_member_id


async def test_session_timeout_bounds(harness):
    r = await harness.join(session_ms=10)
    assert r["error_code"] == E.invalid_session_timeout
    r = await harness.join(session_ms=1_800_001)
    assert r["error_code"] == E.invalid_session_timeout


async def test_second_member_parks_until_the_first_rejoins_and_followers_wait_for_the_leader(harness):
    h = harness
    a, gen = await stable_single_member(h)
    join_b = asyncio.create_task(h.join())
    await settle()
    assert not join_b.done() and h.group().state is GroupState.PREPARING_REBALANCE
    # The coordinator keeps serving while B is parked.
    assert h.heartbeat("g", gen, a) == E.rebalance_in_progress
    ra = await h.join(member_id=a)
    rb = await join_b
    assert ra["generation_id"] == rb["generation_id"] == gen + 1
    assert ra["leader"] == a and len(ra["members"]) == 2 and rb["members"] == []
    b = rb["member_id"]
    sync_b = asyncio.create_task(h.sync("g", gen + 1, b))
    await settle()
    assert not sync_b.done()
    sa = await h.sync("g", gen + 1, a, {a: b"pa", b: b"pb"})
    assert sa["assignment"] == b"pa" and (await sync_b)["assignment"] == b"pb"


async def test_expired_session_removes_member_and_rebalances(harness):
    h = harness
    a, gen = await stable_single_member(h, session_ms=10000)
    join_b = asyncio.create_task(h.join(session_ms=200))
    await settle()
    await h.join(member_id=a, session_ms=10000)
    b = (await join_b)["member_id"]
    await asyncio.gather(h.sync("g", gen + 1, a, {a: b"x", b: b"y"}), h.sync("g", gen + 1, b))
    assert h.group().size == 2
    # B stops heartbeating; A keeps going and is told to rebalance once B expires.
    h.timer.advance(199)
    assert h.group().has(b) and h.heartbeat("g", gen + 1, a) == 0
    h.timer.advance(1)
    assert not h.group().has(b)
    assert h.heartbeat("g", gen + 1, a) == E.rebalance_in_progress
    r = await h.join(member_id=a)
    assert r["generation_id"] == gen + 2 and [m["member_id"] for m in r["members"]] == [a]


async def test_member_that_never_rejoins_is_dropped_after_the_rebalance_timeout(harness):
    h = harness
    a, gen = await stable_single_member(h, rebalance_ms=300, session_ms=10000)
    join_b = asyncio.create_task(h.join(rebalance_ms=300))  # A never rejoins
    await settle()
    h.timer.advance(299)
    await settle()
    assert not join_b.done()
    h.timer.advance(1)
    r = await join_b
    assert r["error_code"] == 0 and r["generation_id"] == gen + 1 and not h.group().has(a)


async def test_leave_group_answers_a_parked_join_with_unknown_member(harness):
    h = harness
    a, _ = await stable_single_member(h)
    join_b = asyncio.create_task(h.join())
    await settle()
    b = next(m for m in h.group().members if m != a)
    error, results = h.coordinator.classic.leave_group(group_id="g", members=[(b, None), ("ghost", None)])
    assert error == 0 and results == [(b, None, 0), ("ghost", None, E.unknown_member_id)]
    assert (await join_b)["error_code"] == E.unknown_member_id


async def test_static_member_rejoining_with_a_new_id_keeps_the_generation(harness):
    h = harness
    r = await h.join(instance="inst-1")
    old = r["member_id"]
    assert old.startswith("inst-1-")
    await h.sync("g", r["generation_id"], old, {old: b"A"})
    r2 = await h.join(instance="inst-1")
    assert r2["error_code"] == 0 and r2["generation_id"] == r["generation_id"] and r2["member_id"] != old
    assert r2["skip_assignment"] and h.group().state is GroupState.STABLE
    assert h.coordinator.classic.heartbeat(group_id="g", member_id=old, group_instance_id="inst-1",
                                   generation_id=r["generation_id"]) == E.fenced_instance_id


async def test_delete_groups(harness):
    h = harness
    h.create_topic("t", 1)
    a, gen = await stable_single_member(h)
    await h.commit("g", gen, a, {("t", 0): 3})
    assert await h.coordinator.delete_groups(["g", "nope"]) == {"g": E.non_empty_group,
                                                                 "nope": E.group_id_not_found}
    h.coordinator.classic.leave_group(group_id="g", members=[(a, None)])
    assert h.group().state is GroupState.EMPTY
    end = h.offsets_log("g").log_end_offset
    assert await h.coordinator.delete_groups(["g"]) == {"g": 0}
    assert "g" not in h.coordinator.groups
    assert h.offsets_log("g").log_end_offset == end + 2  # offset and group tombstones
    assert h.coordinator.offsets.fetch_offsets("g", [("t", 0)])[1][0][1] is None


def append_marker(plog, marker: int, producer_id: int) -> None:
    """A COMMIT/ABORT marker, placed as the (later) marker writer will place it."""
    batch = build_control_batch(marker, producer_id, 0, 0, 1)
    set_base_offset(batch, 0, plog.log_end_offset)
    plog.append_as_follower(bytes(batch))


async def test_state_survives_restart_with_tombstones_and_transaction_markers(tmp_path):
    path = str(tmp_path / "data")
    h = await Harness(path).start()
    h.create_topic("t", 3)
    a, gen = await stable_single_member(h, "live")
    await h.commit("live", gen, a, {("t", 0): 10, ("t", 1): 11})
    await h.commit("live", gen, a, {("t", 0): 12})
    await h.commit("simple", -1, "", {("t", 2): 7})
    await h.commit("gone", -1, "", {("t", 0): 1})
    assert await h.coordinator.delete_groups(["gone"]) == {"gone": 0}
    # A transaction that commits offsets for "txn" and one that aborts, written as Kafka would.
    p = h.coordinator.partition_for("txn")
    rm = h.broker.replica_manager
    for pid, offset, marker in ((1000, 40, CONTROL_COMMIT), (1001, 41, CONTROL_ABORT)):
        rm.append(OFFSETS_TOPIC, p, bytes(build_batch(
            [offset_commit_record("txn", "t", pid - 1000, OffsetCommitValue(offset, -1, "", 1))],
            producer_id=pid, producer_epoch=0, base_sequence=0, transactional=True)), client=False)
        append_marker(rm.get(OFFSETS_TOPIC, p).log, marker, pid)
    # And one still open: pending, so require_stable sees UNSTABLE_OFFSET_COMMIT.
    rm.append(OFFSETS_TOPIC, p, bytes(build_batch(
        [offset_commit_record("txn", "t", 2, OffsetCommitValue(42, -1, "", 1))],
        producer_id=1002, producer_epoch=0, base_sequence=0, transactional=True)), client=False)
    await h.stop()

    h = Harness(path)
    gate = threading.Event()
    real_read = coordinator_module.read_offsets_partition

    def slow_read(plog):
        gate.wait(10)
        return real_read(plog)

    coordinator_module.read_offsets_partition = slow_read
    try:
        await h.start()
        assert h.coordinator.coordinator_error("live") == E.coordinator_load_in_progress
        assert (await h.join("live", member_id=a))["error_code"] == E.coordinator_load_in_progress
        assert h.heartbeat("live", gen, a) == 0  # Kafka answers heartbeats blindly while loading
        gate.set()
        await h.coordinator.loads.join()
    finally:
        coordinator_module.read_offsets_partition = real_read
        gate.set()
    try:
        assert h.coordinator.coordinator_error("live") == 0
        live = h.group("live")
        assert live.state is GroupState.STABLE and live.generation_id == gen and live.leader_id == a
        assert live.get(a).assignment == b"assignment"
        assert {tp: c.offset for tp, c in live.offsets.items()} == {("t", 0): 12, ("t", 1): 11}
        assert h.heartbeat("live", gen, a) == 0
        assert h.group("simple").offsets[("t", 2)].offset == 7
        assert "gone" not in h.coordinator.groups
        txn = h.group("txn")
        assert {tp: c.offset for tp, c in txn.offsets.items()} == {("t", 0): 40}
        _, entries = h.coordinator.offsets.fetch_offsets("txn", [("t", 2)], require_stable=True)
        assert entries == [(("t", 2), None, E.unstable_offset_commit)]
        h.coordinator.offsets.complete_txn_offset_commits(p, 1002, is_commit=True)
        assert h.group("txn").offsets[("t", 2)].offset == 42
    finally:
        await h.stop()


async def test_offsets_of_an_empty_group_expire_after_retention(harness):
    h = harness
    h.create_topic("t", 1)
    a, gen = await stable_single_member(h)
    await h.commit("g", gen, a, {("t", 0): 3})
    assert await h.coordinator.cleanup_expired_offsets() == 0
    h.coordinator.classic.leave_group(group_id="g", members=[(a, None)])
    later = h.group().current_state_timestamp + 7 * 24 * 3600 * 1000 + 1
    assert await h.coordinator.cleanup_expired_offsets(now=later) == 1
    assert "g" not in h.coordinator.groups


async def test_the_retention_pass_runs_on_the_coordinators_clock(tmp_path):
    h = await Harness(str(tmp_path / "data"), **{"offsets.retention.check.interval.ms": "1000"}).start()
    try:
        a, _ = await stable_single_member(h)
        h.coordinator.classic.leave_group(group_id="g", members=[(a, None)])
        await settle()
        assert "g" in h.coordinator.groups          # Empty, no offsets: the next pass forgets it
        h.timer.advance(999)
        await settle()
        assert "g" in h.coordinator.groups
        h.timer.advance(1)
        await settle()
        assert "g" not in h.coordinator.groups
    finally:
        await h.stop()


def _gate_appends(h: Harness) -> asyncio.Event:
    """Hold every ``__consumer_offsets`` append until the returned event is set."""
    gate = asyncio.Event()
    real = h.coordinator.s.append_at

    async def gated(*args, **kwargs):
        await gate.wait()
        return await real(*args, **kwargs)

    h.coordinator.s.append_at = gated
    return gate


async def test_an_offset_commit_is_pending_until_its_append_completes(harness):
    h = harness
    h.create_topic("t", 1)
    member, gen = await stable_single_member(h)
    gate = _gate_appends(h)
    commit = asyncio.ensure_future(h.commit("g", gen, member, {("t", 0): 7}))
    await settle()
    error, rows = h.coordinator.offsets.fetch_offsets("g", [("t", 0)], require_stable=True)
    assert (error, rows[0][1], rows[0][2]) == (0, None, E.unstable_offset_commit)
    assert h.coordinator.offsets.fetch_offsets("g", [("t", 0)])[1][0][1] is None  # not visible yet
    gate.set()
    assert (await commit)[("t", 0)] == 0
    assert h.coordinator.offsets.fetch_offsets("g", [("t", 0)], require_stable=True)[1][0][1].offset == 7


async def test_leadership_lost_during_an_append_answers_not_coordinator_and_applies_nothing(harness):
    h = harness
    h.create_topic("t", 1)
    member, gen = await stable_single_member(h)
    partition = h.coordinator.partition_for("g")
    epoch = h.coordinator.ownership.epoch(partition)
    gate = _gate_appends(h)
    commit = asyncio.ensure_future(h.commit("g", gen, member, {("t", 0): 9}))
    await settle()
    h.coordinator.on_resign(partition, epoch)
    gate.set()
    assert (await commit)[("t", 0)] == E.not_coordinator
    assert h.coordinator.offsets.fetch_offsets("g", [("t", 0)])[0] == E.not_coordinator
    h.coordinator.on_become_leader(partition, epoch + 1)  # reloaded from the log: the write is there
    await wait_loaded(h, partition)
    assert h.coordinator.offsets.fetch_offsets("g", [("t", 0)])[1][0][1].offset == 9


async def wait_loaded(h: Harness, partition: int) -> None:
    await h.coordinator.loads.join()
    assert h.coordinator.ownership.status(partition) == 0, "partition not loaded"


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0: what a consumer sends as its JoinGroup metadata."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


async def test_offset_delete_follows_the_group_state_and_subscriptions(harness):
    h = harness
    h.create_topic("t", 2)
    h.create_topic("u", 1)
    delete = h.coordinator.offsets.delete_offsets
    assert await delete("nope", [("t", 0)]) == (E.group_id_not_found, {})
    assert await delete("", [("t", 0)]) == (E.invalid_group_id, {})
    # A consumer group subscribed to "t": its partitions are in use, "u" is not.
    member, gen = await stable_single_member(h, protocols=[("range", subscription("t"))])
    await h.commit("g", gen, member, {("t", 0): 1, ("u", 0): 2})
    end = h.offsets_log("g").log_end_offset
    assert await delete("g", [("t", 0), ("t", 1), ("u", 0)]) == (
        0, {("t", 0): E.group_subscribed_to_topic, ("t", 1): E.group_subscribed_to_topic, ("u", 0): 0})
    assert h.offsets_log("g").log_end_offset == end + 1  # one tombstone, for ("u", 0)
    assert set(h.group().offsets) == {("t", 0)}
    # Metadata that is not a consumer subscription: every topic counts as subscribed.
    other, gen2 = await stable_single_member(h, "opaque")
    await h.commit("opaque", gen2, other, {("u", 0): 3})
    assert await delete("opaque", [("u", 0)]) == (0, {("u", 0): E.group_subscribed_to_topic})
    # A group with members not using the consumer protocol cannot have offsets deleted.
    r = await h.coordinator.classic.join_group(
        group_id="connect", member_id="", group_instance_id=None, require_known_member_id=False,
        client_id="c", client_host="/127.0.0.1", rebalance_timeout_ms=10000, session_timeout_ms=10000,
        protocol_type="connect", protocols=[("v1", b"x")])
    assert r["error_code"] == 0
    assert await delete("connect", [("u", 0)]) == (E.non_empty_group, {})
    # Once Empty, everything goes; a partition without a commit succeeds without a tombstone.
    h.coordinator.classic.leave_group(group_id="g", members=[(member, None)])
    end = h.offsets_log("g").log_end_offset
    assert await delete("g", [("t", 0), ("t", 1)]) == (0, {("t", 0): 0, ("t", 1): 0})
    assert h.offsets_log("g").log_end_offset == end + 1
    assert h.group().offsets == {} and h.group().state is GroupState.EMPTY  # the group stays


async def restarted(path: str) -> Harness:
    """A new coordinator over the same log, once it has loaded."""
    h = await Harness(path).start()
    await h.coordinator.loads.join()
    return h


async def test_deleted_offsets_stay_deleted_after_reload(tmp_path):
    path = str(tmp_path / "data")
    h = await Harness(path).start()
    h.create_topic("t", 2)
    await h.commit("simple", -1, "", {("t", 0): 5, ("t", 1): 6})
    assert await h.coordinator.offsets.delete_offsets("simple", [("t", 0)]) == (0, {("t", 0): 0})
    await h.stop()
    h = await restarted(path)
    try:
        assert {tp: c.offset for tp, c in h.group("simple").offsets.items()} == {("t", 1): 6}
    finally:
        await h.stop()


async def test_offset_delete_drops_a_pending_transactional_offset_also_on_reload(tmp_path):
    """Kafka 4 tombstones a partition whose only offset is transactional and still pending; its
    marker landing later (now, or when the log is replayed) brings nothing back."""
    path = str(tmp_path / "data")
    h = await Harness(path).start()
    h.create_topic("t", 1)
    r = await h.coordinator.offsets.txn_offset_commit(
        group_id="txn", producer_id=2000, producer_epoch=0, member_id="", group_instance_id=None,
        generation_id=-1, offsets={("t", 0): OffsetAndMetadata(9)})
    assert r == {("t", 0): 0} and h.group("txn").has_pending_offset_commits(("t", 0))
    end = h.offsets_log("txn").log_end_offset
    assert await h.coordinator.offsets.delete_offsets("txn", [("t", 0)]) == (0, {("t", 0): 0})
    assert h.offsets_log("txn").log_end_offset == end + 1
    assert not h.group("txn").has_pending_offset_commits(("t", 0))
    append_marker(h.offsets_log("txn"), CONTROL_COMMIT, 2000)
    h.coordinator.offsets.complete_txn_offset_commits(h.coordinator.partition_for("txn"), 2000, is_commit=True)
    assert h.group("txn").offsets == {}
    await h.stop()
    h = await restarted(path)
    try:
        assert "txn" not in h.coordinator.groups or h.group("txn").offsets == {}
    finally:
        await h.stop()


async def txn_offsets_waiting_for_replication(h: Harness, group: str, producer_id: int, producer_epoch: int,
                                              offsets: dict) -> tuple[asyncio.Task, asyncio.Event]:
    """A TxnOffsetCommit whose batch is in the leader's log but not yet replicated: the
    append completes only when the returned event is set (a paused follower holds the HW)."""
    services = h.coordinator.s
    real_append_at = services.append_at
    in_log, replicated = asyncio.Event(), asyncio.Event()

    async def append_at(*args, **kwargs):
        result = await real_append_at(*args, **kwargs)
        in_log.set()
        await replicated.wait()
        return result

    services.append_at = append_at
    task = asyncio.create_task(h.coordinator.offsets.txn_offset_commit(
        group_id=group, producer_id=producer_id, producer_epoch=producer_epoch, member_id="",
        group_instance_id=None, generation_id=-1,
        offsets={tp: OffsetAndMetadata(o) for tp, o in offsets.items()}))
    await asyncio.wait_for(in_log.wait(), 5)
    services.append_at = real_append_at
    return task, replicated


def write_marker(h: Harness, group: str, producer_id: int, producer_epoch: int, commit: bool) -> None:
    """What WriteTxnMarkers does on a __consumer_offsets partition."""
    p = h.coordinator.partition_for(group)
    assert h.coordinator.offsets.accepts_txn_markers(p)
    h.broker.replica_manager.append_marker(OFFSETS_TOPIC, p, producer_id, producer_epoch, 0, commit)
    h.coordinator.offsets.complete_txn_offset_commits(p, producer_id, commit, producer_epoch)


async def test_offsets_of_a_transaction_aborted_while_their_append_waited_are_never_committed(tmp_path):
    """Issue 18's lost write, deterministically: the copier's TxnOffsetCommit (producer 1000,
    epoch 3) is in the log but not replicated when a new incarnation's InitProducerId aborts the
    transaction (ABORT at epoch 4); the append completes after the marker; the new
    incarnation's first COMMIT (same producer id, epoch 5) must not commit those offsets,
    neither in memory nor when the partition is loaded again."""
    path = str(tmp_path / "data")
    h = await Harness(path).start()
    try:
        h.create_topic("in", 2)
        task, replicated = await txn_offsets_waiting_for_replication(h, "copier", 1000, 3, {("in", 1): 7200})
        write_marker(h, "copier", 1000, 4, commit=False)
        replicated.set()
        assert await task == {("in", 1): 0}
        assert not h.group("copier").has_pending_offset_commits(("in", 1))
        assert h.coordinator.offsets.fetch_offsets("copier", [("in", 1)], require_stable=True)[1] == [(("in", 1), None, 0)]
        write_marker(h, "copier", 1000, 5, commit=True)
        assert h.coordinator.offsets.fetch_offsets("copier", [("in", 1)])[1] == [(("in", 1), None, 0)]
    finally:
        await h.stop()
    h = await restarted(path)
    try:
        assert h.coordinator.offsets.fetch_offsets("copier", [("in", 1)])[1] == [(("in", 1), None, 0)]
    finally:
        await h.stop()


async def test_a_commit_marker_skips_offsets_an_older_epoch_left_pending_in_memory_and_on_load(tmp_path):
    """Offsets of epoch 1 whose transaction's marker never reached this partition are not
    part of epoch 2's committed transaction: discarded live, and skipped by the load."""
    path = str(tmp_path / "data")
    h = await Harness(path).start()
    try:
        h.create_topic("in", 2)
        for epoch, offsets in ((1, {("in", 0): 10}), (2, {("in", 1): 20})):
            r = await h.coordinator.offsets.txn_offset_commit(
                group_id="g", producer_id=7, producer_epoch=epoch, member_id="", group_instance_id=None,
                generation_id=-1, offsets={tp: OffsetAndMetadata(o) for tp, o in offsets.items()})
            assert r == dict.fromkeys(offsets, 0)
        write_marker(h, "g", 7, 2, commit=True)
        assert {tp: c.offset for tp, c in h.group("g").offsets.items()} == {("in", 1): 20}
    finally:
        await h.stop()
    h = await restarted(path)
    try:
        assert {tp: c.offset for tp, c in h.group("g").offsets.items()} == {("in", 1): 20}
        assert not h.group("g").pending_txn_offsets
    finally:
        await h.stop()


async def test_offsets_committed_by_transaction_version_2_survive_a_reload(tmp_path):
    """Transaction version 2 writes the COMMIT marker at the epoch after the transaction's
    (the coordinator bumps it to end the transaction): a reload commits the transaction's
    offsets, written at the epoch before the marker's, and still skips an older epoch's."""
    path = str(tmp_path / "data")
    h = await Harness(path).start()
    try:
        h.create_topic("in", 2)
        for epoch, offsets in ((3, {("in", 0): 10}), (5, {("in", 1): 20}), (5, {("in", 0): 30})):
            r = await h.coordinator.offsets.txn_offset_commit(
                group_id="g", producer_id=7, producer_epoch=epoch, member_id="", group_instance_id=None,
                generation_id=-1, offsets={tp: OffsetAndMetadata(o) for tp, o in offsets.items()})
            assert r == dict.fromkeys(offsets, 0)
        p = h.coordinator.partition_for("g")
        h.broker.replica_manager.append_marker(OFFSETS_TOPIC, p, 7, 6, 0, True, 2)
        h.coordinator.offsets.complete_txn_offset_commits(p, 7, True, 5)  # what WriteTxnMarkers v2 passes
        assert {tp: c.offset for tp, c in h.group("g").offsets.items()} == {("in", 0): 30, ("in", 1): 20}
    finally:
        await h.stop()
    h = await restarted(path)
    try:
        assert {tp: c.offset for tp, c in h.group("g").offsets.items()} == {("in", 0): 30, ("in", 1): 20}
        assert not h.group("g").pending_txn_offsets
    finally:
        await h.stop()


async def test_markers_are_refused_while_the_offsets_partition_loads(tmp_path):
    """A marker appended past what the load read would find none of the loaded groups: the
    WriteTxnMarkers handler refuses it (NOT_LEADER_OR_FOLLOWER, retried) until loaded."""
    path = str(tmp_path / "data")
    h = await Harness(path).start()
    h.create_topic("t", 1)
    await h.commit("g", -1, "", {("t", 0): 1})
    await h.stop()
    h = Harness(path)
    gate = threading.Event()
    real_read = coordinator_module.read_offsets_partition

    def slow_read(plog):
        gate.wait(10)
        return real_read(plog)

    coordinator_module.read_offsets_partition = slow_read
    try:
        await h.start()
        p = h.coordinator.partition_for("g")
        assert not h.coordinator.offsets.accepts_txn_markers(p)
        gate.set()
        await h.coordinator.loads.join()
        assert h.coordinator.offsets.accepts_txn_markers(p)
    finally:
        coordinator_module.read_offsets_partition = real_read
        gate.set()
        await h.stop()


async def test_txn_offset_commit_from_an_old_generation_is_refused_and_leaves_nothing_pending(harness):
    h = harness
    h.create_topic("in", 1)
    member, gen = await stable_single_member(h, "g")
    r = await h.coordinator.offsets.txn_offset_commit(
        group_id="g", producer_id=9, producer_epoch=0, member_id=member, group_instance_id=None,
        generation_id=gen - 1, offsets={("in", 0): OffsetAndMetadata(5)})
    assert r == {("in", 0): E.illegal_generation}
    assert not h.group("g").pending_txn_offsets
    r = await h.coordinator.offsets.txn_offset_commit(
        group_id="g", producer_id=9, producer_epoch=0, member_id=member, group_instance_id=None,
        generation_id=gen, offsets={("in", 0): OffsetAndMetadata(5)})
    assert r == {("in", 0): 0} and h.group("g").has_pending_offset_commits(("in", 0))


async def test_a_commit_marker_applies_offsets_whose_append_is_still_being_replicated(tmp_path):
    """A retried (or duplicated) TxnOffsetCommit is in the log, not yet replicated, when the
    transaction's COMMIT lands after it: the offsets are the transaction's and are committed,
    as replaying the log commits them. Before, the marker skipped the entry still in flight,
    so the group kept older offsets and the copier, rewound to them, copied records twice."""
    path = str(tmp_path / "data")
    h = await Harness(path).start()
    try:
        h.create_topic("in", 2)
        first = await h.coordinator.offsets.txn_offset_commit(
            group_id="copier", producer_id=1000, producer_epoch=0, member_id="", group_instance_id=None,
            generation_id=-1, offsets={("in", 1): OffsetAndMetadata(4874)})
        assert first == {("in", 1): 0}
        task, replicated = await txn_offsets_waiting_for_replication(h, "copier", 1000, 0, {("in", 1): 4874})
        write_marker(h, "copier", 1000, 0, commit=True)
        assert {tp: c.offset for tp, c in h.group("copier").offsets.items()} == {("in", 1): 4874}
        replicated.set()
        assert await task == {("in", 1): 0}
        assert not h.group("copier").pending_txn_offsets
    finally:
        await h.stop()
    h = await restarted(path)
    try:
        assert {tp: c.offset for tp, c in h.group("copier").offsets.items()} == {("in", 1): 4874}
    finally:
        await h.stop()
